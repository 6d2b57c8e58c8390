"""The serialized linear program: what the PYTHON device and the mock GPUs execute.

A program is JSON text (loading it never executes code):

  {"format": "refgrad.linear/1", "name": <kernel name>, "uops": [[op, dtype, [src positions], arg], ...]}

- op: the `Ops` member name ("ADD", "LOAD", ...).
- dtype: a scalar dtype name ("float", "half", "bfloat16", ...), a vector "float.vec(4)", or a
  pointer "float.ptr(16)" / "float.vec(4).ptr(-1)" / "float.ptr(64,local)".
- src positions: indices of other entries; earlier ones, except a DEFINE_ACC's reduce RANGEs,
  which follow it (see refgrad/uop/spec.py). Sources may not form a cycle.
- arg: null, true/false, an int, a string, {"f": float.hex(x)} for a float ("inf", "-inf" and
  "-0x0.0p+0" included), {"nan": "0x7ff8..."} for a NaN (its float64 bits, so sign and payload
  survive), {"t": [...]} for a tuple.

`parse` rebuilds the very same UOps (hash-consing makes equal UOps identical).
"""
from __future__ import annotations

import json
import math
import re
import struct
from typing import Any

from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.renderer import Renderer
from refgrad.target import check_limits, emulated
from refgrad.uop.ops import Ops, UOp

FORMAT = "refgrad.linear/1"


class SerializeError(ValueError):
  """A linear program that cannot be written, or a text that is not a valid serialized program."""


# ---- dtypes ---------------------------------------------------------------------------------

_SCALARS: dict[str, DType] = {d.name: d for d in (dtypes.void, *dtypes.all)}
_DTYPE_RE = re.compile(r"^([a-z0-9]+?)(?:\.vec\((\d+)\))?(?:\.ptr\((-?\d+)(,local)?\))?$")

def encode_dtype(dt: DType) -> str:
  """'float', 'float.vec(4)', 'float.ptr(16)', 'float.vec(4).ptr(-1,local)'."""
  if isinstance(dt, PtrDType): return f"{encode_dtype(dt.base)}.ptr({dt.size}{',local' if dt.local else ''})"
  s = dt.scalar()
  if s.name not in _SCALARS or _SCALARS[s.name] != s: raise SerializeError(f"dtype {dt!r} is not a known dtype")
  return s.name if dt.count == 1 else f"{s.name}.vec({dt.count})"

def decode_dtype(text: Any) -> DType:
  if not isinstance(text, str) or (m := _DTYPE_RE.match(text)) is None: raise SerializeError(f"malformed dtype {text!r}")
  name, count, size, local = m.groups()
  if name not in _SCALARS: raise SerializeError(f"unknown dtype name {name!r} in {text!r}")
  dt = _SCALARS[name]
  if count is not None:
    if int(count) < 2: raise SerializeError(f"vector count must be >= 2 in {text!r}")
    dt = dt.vec(int(count))
  return dt.ptr(int(size), local is not None) if size is not None else dt


# ---- args -----------------------------------------------------------------------------------

def encode_arg(arg: Any) -> Any:
  """A JSON-safe form of a UOp arg that decodes to an equal value of the same type."""
  if arg is None or isinstance(arg, (bool, str)): return arg
  if isinstance(arg, int): return arg   # JSON ints are exact at any size
  if isinstance(arg, float):
    if math.isnan(arg): return {"nan": f"0x{struct.unpack('<Q', struct.pack('<d', arg))[0]:016x}"}
    return {"f": arg.hex()}
  if isinstance(arg, tuple): return {"t": [encode_arg(a) for a in arg]}
  raise SerializeError(f"cannot serialize an arg of type {type(arg).__name__}: {arg!r}")

def decode_arg(x: Any) -> Any:
  if x is None or isinstance(x, (bool, str, int)): return x
  if isinstance(x, dict) and len(x) == 1:
    (k, v), = x.items()
    if k == "t" and isinstance(v, list): return tuple(decode_arg(a) for a in v)
    if k == "f" and isinstance(v, str):
      try: return float.fromhex(v)
      except (ValueError, OverflowError): raise SerializeError(f"malformed float {v!r}") from None
    if k == "nan" and isinstance(v, str):
      try: bits = int(v, 16)
      except ValueError: raise SerializeError(f"malformed NaN bits {v!r}") from None
      f = struct.unpack("<d", struct.pack("<Q", bits & (2**64 - 1)))[0]
      if not math.isnan(f) or bits >> 64: raise SerializeError(f"{v!r} are not the bits of a float64 NaN")
      return f
  raise SerializeError(f"malformed arg {x!r} (expected null, bool, int, string, or an object with one key 'f', 'nan' or 't')")


# ---- programs -------------------------------------------------------------------------------

def serialize(name: str, uops: list[UOp]) -> str:
  """JSON text of a linear program (every source of a uop must be in the program)."""
  pos: dict[UOp, int] = {}
  for i, u in enumerate(uops):
    if u in pos: raise SerializeError(f"uop {i} ({u.op.name}) appears twice in the program (first at {pos[u]})")
    pos[u] = i
  rows: list[str] = []
  for i, u in enumerate(uops):
    try: srcs = [pos[s] for s in u.src]
    except KeyError: raise SerializeError(f"uop {i} ({u.op.name}): a source is not in the program") from None
    try: row = [u.op.name, encode_dtype(u.dtype), srcs, encode_arg(u.arg)]
    except SerializeError as e: raise SerializeError(f"uop {i} ({u.op.name}): {e}") from None
    rows.append(json.dumps(row, separators=(",", ":"), allow_nan=False))
  # one uop per line keeps the text diffable and readable in error reports
  return f'{{"format":{json.dumps(FORMAT)},"name":{json.dumps(name)},"uops":[\n' + ",\n".join(rows) + "\n]}\n"

def parse_program(text: str | bytes) -> tuple[str, list[UOp]]:
  """(kernel name, the linear program) from `serialize`'s text; SerializeError names a bad entry."""
  try: doc = json.loads(text, parse_constant=_no_constant)
  except (json.JSONDecodeError, UnicodeDecodeError) as e: raise SerializeError(f"not a serialized linear program (bad JSON: {e})") from None
  if not isinstance(doc, dict) or doc.get("format") != FORMAT:
    raise SerializeError(f"not a serialized linear program: expected a JSON object with \"format\": {FORMAT!r}")
  name, rows = doc.get("name"), doc.get("uops")
  if not isinstance(name, str) or not isinstance(rows, list): raise SerializeError("a serialized program needs a string 'name' and a list 'uops'")
  def fail(i: int, msg: str) -> SerializeError: return SerializeError(f"entry {i} of program {name!r} ({json.dumps(rows[i])[:200]}): {msg}")
  decoded: list[tuple[Ops, DType, list[int], Any]] = []
  for i, row in enumerate(rows):
    try:
      if not isinstance(row, list) or len(row) != 4: raise SerializeError("expected [op, dtype, [src positions], arg]")
      opname, dt, srcs, arg = row
      if not isinstance(opname, str) or (op := Ops.__members__.get(opname)) is None: raise SerializeError(f"unknown op {opname!r}")
      if not isinstance(srcs, list) or not all(type(s) is int and 0 <= s < len(rows) and s != i for s in srcs):
        raise SerializeError(f"sources {srcs!r} must be positions of other entries (0..{len(rows) - 1})")
      decoded.append((op, decode_dtype(dt), srcs, decode_arg(arg)))
    except SerializeError as e: raise fail(i, str(e)) from None
  # build sources first (a DEFINE_ACC's RANGEs come after it in the list); iterative, so long programs are fine
  built: list[UOp | None] = [None] * len(rows)
  for root in range(len(rows)):
    stack, on_path = [(root, False)], set()
    while stack:
      i, expanded = stack.pop()
      if built[i] is not None: continue
      if expanded:
        on_path.discard(i)
        op, dt, srcs, arg = decoded[i]
        built[i] = UOp(op, dt, tuple(built[s] for s in srcs), arg)  # type: ignore[misc]
        continue
      if i in on_path: raise fail(i, "its sources form a cycle")
      on_path.add(i)
      stack.append((i, True))
      stack.extend((s, False) for s in decoded[i][2] if built[s] is None)
  return name, built  # type: ignore[return-value]

def parse(text: str | bytes) -> list[UOp]:
  """The linear program of a serialized text (the same UOp objects when they are alive)."""
  return parse_program(text)[1]

def _no_constant(c: str) -> Any: raise SerializeError(f"bare {c} is not allowed; floats are written as {{\"f\": hex}}")


class PythonRenderer(Renderer):
  """Renders a linear program as the JSON the PYTHON device (and the mock GPUs) execute."""
  device = "PYTHON"
  def render(self, name: str, uops: list[UOp]) -> str:
    # emulating a GPU (EMULATE=CUDA/AMD): refuse what that GPU could not run, as its renderer would
    if (t := emulated()) is not None: check_limits(list(uops), t)
    return serialize(name, uops)
