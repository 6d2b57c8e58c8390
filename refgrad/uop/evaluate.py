"""Evaluate a pure UOp expression graph (constants, leaves, ALU ops; no memory or loops) through the
reference semantics: the expected value of an expression on every backend."""
from __future__ import annotations

import numpy as np

from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, Ops, UOp


def eval_graph(root: UOp, env: dict[UOp, np.ndarray], check_ub: bool = False) -> np.ndarray:
  """Values of `root` for leaves given in env (arrays in storage form), constants and ALU ops. With
  check_ub, an op whose inputs are undefined behaviour (semantics.ub_check) raises ValueError."""
  vals: dict[UOp, np.ndarray] = dict(env)
  order: dict[UOp, None] = {}
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:  # postorder that stops at the leaves (their own sources, e.g. a LOAD's buffer, are not evaluated)
    u, visited = stack.pop()
    if u in order or u in vals: continue
    if visited: order[u] = None
    else: stack.extend([(u, True), *((s, False) for s in reversed(u.src))])
  for u in order:
    if u.op is Ops.CONST: vals[u] = semantics.from_python([u.arg], u.dtype)
    elif u.op is Ops.VECTORIZE: vals[u] = np.stack([np.broadcast_to(vals[s], np.broadcast_shapes(*(vals[x].shape for x in u.src))) for s in u.src], -1)
    elif u.op is Ops.GEP: vals[u] = vals[u.src[0]][..., u.arg[0]]
    elif u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
      srcs, sdts = [vals[s] for s in u.src], [s.dtype for s in u.src]
      if check_ub and (ub := semantics.ub_check(u.op, u.dtype, srcs, sdts)) is not None:
        raise ValueError(f"{u.op.name} to {u.dtype!r} executes undefined behaviour: {ub[0]}")
      vals[u] = semantics.evaluate(u.op, u.dtype, srcs, sdts)
    else: raise ValueError(f"eval_graph cannot evaluate {u.op}")
  return vals[root]
