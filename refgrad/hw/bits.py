"""The one bit-field helper of the hardware tables. A field is (hi, lo), inclusive bit numbers; in a structure of several
dwords the numbers count across it (bit 32 is bit 0 of dword 1: the "MW(hi:lo)" of docs/hw/NV.md). A field never
straddles a dword boundary."""
from __future__ import annotations

from collections.abc import Mapping, MutableSequence, Sequence

Field = tuple[int, int]   # (hi, lo)


def width(f: Field) -> int: return f[0] - f[1] + 1

def shift_mask(f: Field) -> tuple[int, int]:
  """(lo, mask) of a field, for decoders' inner loops: the field of v is (v >> lo) & mask."""
  return f[1], (1 << (f[0] - f[1] + 1)) - 1

def get(value: int, f: Field) -> int:
  """Field `f` of the integer `value`."""
  return (value >> f[1]) & ((1 << (f[0] - f[1] + 1)) - 1)

def pack(table: Mapping[str, Field], what: str = "", **vals: int) -> int:
  """A value from named fields of `table`; ValueError names the field a value does not fit (`what` prefixes it)."""
  out = 0
  for k, v in vals.items():
    hi, lo = table[k]
    if not 0 <= v < 1 << (hi - lo + 1): raise ValueError(f"{what}{k} is {hi - lo + 1} bits: {v} does not fit")
    out |= v << lo
  return out

def unpack(value: int, table: Mapping[str, Field]) -> dict[str, int]:
  """Every field of `table` from `value`."""
  return {k: get(value, f) for k, f in table.items()}


# ---- structures of dwords (a QMD) -------------------------------------------------------------------------------------
def dword_rows(table: Mapping[str, Field]) -> tuple[tuple[str, int, int, int], ...]:
  """(name, dword, lo bit in the dword, mask) of each field: the decoder rows of a dword structure."""
  out = []
  for name, (hi, lo) in table.items():
    if hi // 32 != lo // 32: raise AssertionError(f"field {name} ({hi}:{lo}) straddles a dword boundary")
    out.append((name, lo // 32, lo % 32, (1 << (hi - lo + 1)) - 1))
  return tuple(out)

def get_words(words: Sequence[int], f: Field) -> int:
  return (int(words[f[1] // 32]) >> (f[1] % 32)) & ((1 << (f[0] - f[1] + 1)) - 1)

def set_words(words: MutableSequence[int], name: str, f: Field, value: int) -> None:
  """Write field `f` (named `name` for the error) into a dword structure; ValueError if the value does not fit."""
  hi, lo = f
  w = hi - lo + 1
  if not 0 <= value < 1 << w: raise ValueError(f"{name} is {w} bits: {value} does not fit")
  dw, sh = lo // 32, lo % 32
  mask = ((1 << w) - 1) << sh
  words[dw] = (int(words[dw]) & ~mask & 0xFFFFFFFF) | (value << sh)
