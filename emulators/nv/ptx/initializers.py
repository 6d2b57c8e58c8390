"""Module-scope variable initializers (PTX ISA 9.0 §5.4.4): `= value` or `= {value, ...}` (nested braces for arrays of
arrays) as nvcc emits them for .global / .const variables.

A value is an integer literal (decimal, 0x hex, 0 octal, 0b binary, optional U suffix, optional sign) for .b/.s/.u
types, a floating-point literal (0fXXXXXXXX, 0dXXXXXXXXXXXXXXXX, or decimal, each rounded to the variable's .f32/.f64)
for float types, or an address (.u64): `sym`, `generic(sym)`, either followed by `+off` terms; in a byte of an
unsigned element, `0xFF..(address)` selects one byte of it (mask 0xFF << 8k: byte k, e.g. a pointer in a packed struct).
Addresses are resolved once every variable is laid out (`resolve`): a module variable sits at GLOBAL_WINDOW + its offset
in both the global and the generic space. Anything else is a PTXError naming the line and the form."""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

_TOKEN = re.compile(r"\s*(0[fF][0-9A-Fa-f]{8}(?![\w$])|0[dD][0-9A-Fa-f]{16}(?![\w$])|(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+"
                    r"|0[xX][0-9A-Fa-f]+U?|0[bB][01]+U?|\d+U?|[$%A-Za-z_][\w$]*|[{}(),+-])")
_FLOAT = re.compile(r"(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+")
_INT = re.compile(r"0[xX][0-9A-Fa-f]+U?|0[bB][01]+U?|\d+U?")
_PLAIN = re.compile(r"\s*\{\s*(?:-?(?:0|[1-9]\d*)\s*,\s*)*-?(?:0|[1-9]\d*)\s*\}\s*")   # nvcc's byte tables: decimal integers only


@dataclass(frozen=True)
class Addr:
  """The address of module variable `sym` plus `off`; with `byte` k, only byte k of it (the mask form)."""
  sym: str
  off: int
  byte: int | None = None


class InitError(ValueError):
  """A malformed or unsupported initializer: the parser turns it into a PTXError naming the line."""


def _int(tok: str) -> int:
  t = tok.rstrip("U")
  if t[:2] in ("0x", "0X"): return int(t[2:], 16)
  if t[:2] in ("0b", "0B"): return int(t[2:], 2)
  if len(t) > 1 and t[0] == "0": return int(t, 8)   # (PTX: a leading 0 is octal)
  return int(t)


def _tokens(text: str) -> list[str]:
  out, pos, text = [], 0, text.strip()
  while pos < len(text):
    m = _TOKEN.match(text, pos)
    if m is None: raise InitError(f"cannot read {text[pos:pos + 20]!r}")
    out.append(m.group(1))
    pos = m.end()
    while pos < len(text) and text[pos].isspace(): pos += 1
  return out


class _Reader:
  def __init__(self, text: str):
    self.t, self.i = _tokens(text), 0

  def peek(self) -> str | None: return self.t[self.i] if self.i < len(self.t) else None

  def take(self, want: str | None = None) -> str:
    tok = self.peek()
    if tok is None or (want is not None and tok != want): raise InitError(f"expected {want or 'a value'}, found {tok or 'the end'}")
    self.i += 1
    return tok

  def value(self) -> list | int | float | Addr | tuple[str, int]:
    """One value: a nested list for braces, an int, a float literal as ('f32'|'f64'|'dec', bits or text), or an Addr."""
    tok = self.peek()
    if tok == "{":
      self.take("{")
      out: list = []
      if self.peek() != "}":
        out.append(self.value())
        while self.peek() == ",":
          self.take(",")
          out.append(self.value())
      self.take("}")
      return out
    if tok == "-" or tok == "+":
      self.take()
      nxt = self.take()
      if _FLOAT.fullmatch(nxt): return ("dec", float(tok + nxt))   # type: ignore[return-value]
      if not _INT.fullmatch(nxt): raise InitError(f"a sign before {nxt!r}")
      return -_int(nxt) if tok == "-" else _int(nxt)
    tok = self.take()
    if tok[:2] in ("0f", "0F"): return ("f32", int(tok[2:], 16))
    if tok[:2] in ("0d", "0D"): return ("f64", int(tok[2:], 16))
    if _FLOAT.fullmatch(tok): return ("dec", float(tok))   # type: ignore[return-value]
    if _INT.fullmatch(tok):
      if self.peek() != "(": return _int(tok)
      mask = _int(tok)   # 0xFF00(address): one byte of the address
      k = (mask.bit_length() - 1) // 8
      if mask != 0xFF << (8 * k): raise InitError(f"mask {tok} (only 0xFF << 8k selects a byte)")
      self.take("(")
      inner = self.address()
      self.take(")")
      return Addr(inner.sym, inner.off, k) if isinstance(inner, Addr) else (inner >> (8 * k)) & 0xFF
    self.i -= 1
    return self.address()

  def address(self) -> Addr | int:
    tok = self.take()
    if tok == "generic":
      self.take("(")
      sym = self.take()
      self.take(")")
    elif _INT.fullmatch(tok): return _int(tok)   # (a plain number inside a mask)
    else: sym = tok
    if not re.fullmatch(r"[$%A-Za-z_][\w$]*", sym): raise InitError(f"{sym!r} is not a variable name")
    off = 0
    while self.peek() == "+":
      self.take("+")
      n = self.take()
      if not _INT.fullmatch(n): raise InitError(f"address offset {n!r} is not an integer")
      off += _int(n)
    return Addr(sym, off)


def parse_init(text: str, typ: str, dims: list[int]) -> list:
  """The flat list of element values (ints, float bits, Addr) of `= text` for a variable of element type typ and array
  dimensions dims ([] a scalar; a 0 first dimension: sized by the initializer), padded with zeros to the full size."""
  if dims and len(dims) == 1 and typ[0] in "bsu" and _PLAIN.fullmatch(text):   # (the common case, fast: tables of thousands of bytes)
    flat = [int(x) for x in re.findall(r"-?\d+", text)]
    if dims[0] and len(flat) > dims[0]: raise InitError(f"{len(flat)} elements for an array of {dims[0]}")
    return flat + [0] * (dims[0] - len(flat)) if dims[0] else flat
  r = _Reader(text)
  v = r.value()
  if r.peek() is not None: raise InitError(f"unexpected {r.peek()!r} after the initializer")
  if not dims:
    if isinstance(v, list):
      if len(v) != 1 or isinstance(v[0], list): raise InitError("a scalar with a list initializer")
      v = v[0]
    return [_element(v, typ)]
  if not isinstance(v, list): v = [v]
  inner = 1
  for d in dims[1:]: inner *= d
  if dims[0] == 0: dims = [-(-_count(v, dims[1:]) // inner) if inner else 0, *dims[1:]]
  return _flatten(v, dims, typ)


def _count(v: list, rest: list[int]) -> int:
  """Elements a (possibly nested) list covers, rows of nested lists padded to `rest`."""
  inner = 1
  for d in rest: inner *= d
  n = 0
  for x in v: n = (-(-n // inner) * inner + inner) if isinstance(x, list) and rest else n + 1
  return n


def _flatten(v: list, dims: list[int], typ: str) -> list:
  """C aggregate rules: a nested list fills one sub-array (padded); plain values fill elements in order."""
  total = 1
  for d in dims: total *= d
  inner = total // dims[0] if dims and dims[0] else 1
  out: list = []
  for x in v:
    if isinstance(x, list):
      if len(dims) < 2: raise InitError("nested braces deeper than the array's dimensions")
      out += [0] * (-len(out) % inner)   # a sub-array starts at a row boundary
      out += _flatten(x, dims[1:], typ)
    else: out.append(_element(x, typ))
  if len(out) > total: raise InitError(f"{len(out)} elements for an array of {total}")
  return out + [0] * (total - len(out))


def _element(v: object, typ: str) -> int | Addr:
  """One element: an int (bits, not yet truncated) or an Addr."""
  if isinstance(v, list): raise InitError("a list where a single value is expected")
  if typ in ("f32", "f64"):
    if not isinstance(v, tuple): raise InitError(f"{'an address' if isinstance(v, Addr) else 'an integer'} in a .{typ} initializer "
                                                 "(floating-point literals only)")
    kind, x = v
    if kind == "dec": d = float(x)
    elif kind == "f32": d = struct.unpack("<f", struct.pack("<I", x))[0]
    else: d = struct.unpack("<d", struct.pack("<Q", x))[0]
    if typ == "f64": return struct.unpack("<Q", struct.pack("<d", d))[0]
    if kind == "f32": return x   # (bits as written: a NaN payload stays)
    with np.errstate(over="ignore"): return int(np.array([d], np.float64).astype(np.float32).view(np.uint32)[0])   # nearest; overflow: inf (as ptxas)
  if typ[0] not in "bsu": raise InitError(f"initializers of .{typ} variables are not supported")
  if isinstance(v, tuple): raise InitError(f"a floating-point literal in a .{typ} initializer")
  if isinstance(v, Addr) and v.byte is None and typ not in ("u64", "b64", "s64"):
    raise InitError(f"an address in a .{typ} initializer (addresses are 64-bit: .u64)")
  return v  # type: ignore[return-value]


def resolve(values: list, es: int, where: dict[str, int]) -> bytes:
  """The bytes of the element values (es bytes each, little-endian, truncated); `where`: variable -> its address."""
  if not any(isinstance(v, Addr) for v in values):   # integers only: one conversion
    mask = (1 << (8 * es)) - 1
    return np.array([v & mask for v in values], f"<u{es}").tobytes()
  out = bytearray()
  for v in values:
    if isinstance(v, Addr):
      if v.sym not in where: raise InitError(f"{v.sym} is not a .global or .const variable of this module")
      a = where[v.sym] + v.off
      v = (a >> (8 * v.byte)) & 0xFF if v.byte is not None else a
    out += (v & ((1 << (8 * es)) - 1)).to_bytes(es, "little")
  return bytes(out)


def symbols(values: list) -> set[str]:
  return {v.sym for v in values if isinstance(v, Addr)}
