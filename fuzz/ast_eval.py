"""A third opinion (oracle 5): the kernel AST evaluated directly with the reference semantics, before any Opt,
lowering or linearization. Output axes are numpy broadcast dimensions; a REDUCE folds its values in the order of
its ranges (outermost first), as the unoptimized kernel's loop does, so the bits must match. Meant for small
kernels: a REDUCE evaluates its value once per combination of its ranges."""
from __future__ import annotations

import itertools
import math

import numpy as np

from refgrad.kernel import identity_element
from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, Ops, UOp

MAX_WORK = 1 << 16    # output elements x reduction steps up to which `small_enough` says yes


def small_enough(ast: UOp) -> bool:
  reduced = {r for u in ast.toposort if u.op is Ops.REDUCE for r in u.src[1:]}
  out = math.prod(r.src[0].arg for r in ast.toposort if r.op is Ops.RANGE and r not in reduced)
  steps = sum(math.prod(r.src[0].arg for r in u.src[1:]) for u in ast.toposort if u.op is Ops.REDUCE)
  return out * max(1, steps) <= MAX_WORK

def eval_ast(ast: UOp, bufs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
  """The buffers (by DEFINE_GLOBAL index, storage form) after the kernel runs; `bufs` is not modified. Transcendentals
  are decomposed first, as every renderer asks, so the result has the backends' bits."""
  if any(u.op in GroupOp.Transcendental for u in ast.toposort):
    from refgrad.uop.decompositions import decompose_transcendentals
    ast = decompose_transcendentals(ast)
  reduced = {r for u in ast.toposort if u.op is Ops.REDUCE for r in u.src[1:]}
  outs = sorted((r for r in ast.toposort if r.op is Ops.RANGE and r not in reduced), key=lambda r: r.arg)
  nd = len(outs)
  env = {r: np.arange(r.src[0].arg, dtype=np.int32).reshape([-1 if i == j else 1 for j in range(nd)]) for i, r in enumerate(outs)}
  shape = tuple(r.src[0].arg for r in outs)
  res = {i: b.copy() for i, b in bufs.items()}
  ev = _Eval(res)
  for st in ast.src:
    buf, idx, val = st.src[0].arg, ev.value(st.src[1], env, {}), ev.value(st.src[2], env, {})
    idx, val = np.broadcast_to(idx, shape).reshape(-1), np.broadcast_to(val, shape).reshape(-1)
    if len(st.src) == 4:
      keep = np.broadcast_to(ev.value(st.src[3], env, {}), shape).reshape(-1).astype(bool)
      idx, val = idx[keep], val[keep]
    res[buf][idx.astype(np.int64)] = val
  return res


class _Eval:
  def __init__(self, bufs: dict[int, np.ndarray]): self.bufs = bufs

  def value(self, u: UOp, env: dict[UOp, np.ndarray], memo: dict[UOp, np.ndarray]) -> np.ndarray:
    if u in env: return env[u]
    if u in memo: return memo[u]
    if u.op is Ops.CONST: out = semantics.from_python([u.arg], u.dtype).reshape(())
    elif u.op is Ops.LOAD:
      idx = self.value(u.src[1], env, memo).astype(np.int64)
      data = self.bufs[u.src[0].arg]
      if len(u.src) == 4:
        gate = self.value(u.src[2], env, memo).astype(bool)
        idx, gate = np.broadcast_arrays(idx, gate)
        out = np.where(gate, data[np.where(gate, idx, 0)], self.value(u.src[3], env, memo))
      else: out = data[idx]
    elif u.op is Ops.REDUCE: out = self.reduce(u, env)
    elif u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
      srcs = [self.value(s, env, memo) for s in u.src]
      shp = np.broadcast_shapes(*(s.shape for s in srcs))
      out = semantics.evaluate(u.op, u.dtype, [np.broadcast_to(s, shp).reshape(-1) for s in srcs], [s.dtype for s in u.src]).reshape(shp)
    else: raise ValueError(f"eval_ast cannot evaluate {u.op.name}")
    memo[u] = out
    return out

  def reduce(self, u: UOp, env: dict[UOp, np.ndarray]) -> np.ndarray:
    rs = sorted(u.src[1:], key=lambda r: r.arg)
    acc = semantics.from_python([identity_element(u.arg, u.dtype)], u.dtype).reshape(())
    for vals in itertools.product(*(range(r.src[0].arg) for r in rs)):
      inner = {**env, **{r: np.array(v, np.int32) for r, v in zip(rs, vals)}}
      v = self.value(u.src[0], inner, {})
      shp = np.broadcast_shapes(acc.shape, v.shape)
      acc = semantics.evaluate(u.arg, u.dtype, [np.broadcast_to(acc, shp).reshape(-1), np.broadcast_to(v, shp).reshape(-1)], [u.dtype, u.dtype]).reshape(shp)
    return acc

