"""Kernel ASTs as JSON (never pickle): one row per UOp in topological order, [op, dtype, [source rows], arg].

Args use the linear-program encoding of refgrad/renderer/serialize.py, plus {"op": name} for an `Ops` member (a
REDUCE's reduction). Decoding checks every row and rebuilds the very same UOps (hash-consing)."""
from __future__ import annotations

from typing import Any

from refgrad.renderer.serialize import SerializeError, decode_arg, decode_dtype, encode_arg, encode_dtype
from refgrad.uop.ops import Ops, UOp


def _enc_arg(arg: Any) -> Any:
  if isinstance(arg, Ops): return {"op": arg.name}
  if isinstance(arg, tuple) and any(isinstance(a, Ops) for a in arg): return {"t": [_enc_arg(a) for a in arg]}
  return encode_arg(arg)

def _dec_arg(x: Any) -> Any:
  if isinstance(x, dict) and set(x) == {"op"}:
    if not isinstance(x["op"], str) or x["op"] not in Ops.__members__: raise SerializeError(f"unknown op {x['op']!r} in arg")
    return Ops[x["op"]]
  if isinstance(x, dict) and set(x) == {"t"} and isinstance(x["t"], list): return tuple(_dec_arg(a) for a in x["t"])
  return decode_arg(x)


def ast_to_json(ast: UOp) -> list[list[Any]]:
  """Rows [op, dtype, [source rows], arg] in topological order (sources before users)."""
  pos: dict[UOp, int] = {}
  rows = []
  for i, u in enumerate(ast.toposort):
    pos[u] = i
    rows.append([u.op.name, encode_dtype(u.dtype), [pos[s] for s in u.src], _enc_arg(u.arg)])
  return rows

def ast_from_json(rows: Any) -> UOp:
  """The AST of `ast_to_json`'s rows (the last row is the root); SerializeError names a malformed row."""
  if not isinstance(rows, list) or not rows: raise SerializeError("a kernel AST is a non-empty list of rows")
  built: list[UOp] = []
  for i, row in enumerate(rows):
    try:
      if not isinstance(row, list) or len(row) != 4: raise SerializeError("expected [op, dtype, [source rows], arg]")
      name, dt, srcs, arg = row
      if not isinstance(name, str) or name not in Ops.__members__: raise SerializeError(f"unknown op {name!r}")
      if not isinstance(srcs, list) or not all(type(s) is int and 0 <= s < i for s in srcs):
        raise SerializeError(f"sources {srcs!r} must be earlier rows (0..{i - 1})")
      built.append(UOp(Ops[name], decode_dtype(dt), tuple(built[s] for s in srcs), _dec_arg(arg)))
    except SerializeError as e: raise SerializeError(f"AST row {i} ({str(row)[:120]}): {e}") from None
  if built[-1].op is not Ops.SINK: raise SerializeError(f"the last AST row must be the SINK, not {built[-1].op.name}")
  return built[-1]
