"""A third opinion (oracle 5): the kernel AST evaluated directly with the reference semantics, before any Opt,
lowering, symbolic rule or linearization (only the transcendental decompositions are applied, as every renderer asks,
so the bits are the backends'). It imports nothing from the kernel path: identities and the reduction order are its
own, so a wrong rewrite anywhere below the scheduler makes the unoptimized program differ from it.

Output axes are numpy broadcast dimensions; a REDUCE is vectorized over all its steps at once (a leading axis) and
folded in the order of its ranges (outermost first), as the unoptimized kernel's loop does, so the bits must match.
Small kernels are evaluated whole; larger ones at `samples` random output points, each with its full reductions: the
sampled values are written over the unoptimized program's own output, which must then be unchanged."""
from __future__ import annotations

import math

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.uop import semantics
from refgrad.uop.decompositions import decompose_transcendentals
from refgrad.uop.ops import GroupOp, Ops, UOp

MAX_WORK = 1 << 16     # output elements x reduction steps evaluated whole; above it, output points are sampled
MAX_STEPS = 1 << 15    # longest reduction evaluated (float sums fold step by step)
SAMPLES = 64           # output points of a sampled evaluation


def _out_ranges(ast: UOp) -> tuple[list[UOp], int]:
  reduced = {r for u in ast.toposort if u.op is Ops.REDUCE for r in u.src[1:]}
  outs = sorted((r for r in ast.toposort if r.op is Ops.RANGE and r not in reduced), key=lambda r: r.arg)
  steps = max([math.prod(r.src[0].arg for r in u.src[1:]) for u in ast.toposort if u.op is Ops.REDUCE] or [1])
  return outs, steps

def small_enough(ast: UOp) -> bool:
  """Whether the whole output is evaluated (else: a sample of output points)."""
  outs, steps = _out_ranges(ast)
  return math.prod(r.src[0].arg for r in outs) * steps <= MAX_WORK

def can_eval(ast: UOp) -> bool:
  """Whether the evaluator takes the kernel at all (whole or sampled): no reduction longer than MAX_STEPS."""
  return _out_ranges(ast)[1] <= MAX_STEPS

def _identity(op: Ops, d: DType) -> np.ndarray:
  if op is Ops.ADD: v = False if d == dtypes.bool else 0
  elif op is Ops.MUL: v = True if d == dtypes.bool else 1
  elif op is Ops.MAX: v = False if d == dtypes.bool else -math.inf if dtypes.is_float(d) else int(np.iinfo(d.np).min)
  else: raise ValueError(f"eval_ast: no identity for a {op.name} reduction")
  return semantics.from_python([v], d).reshape(())

def eval_ast(ast: UOp, bufs: dict[int, np.ndarray], base: dict[int, np.ndarray] | None = None,
             rng: np.random.Generator | None = None, samples: int = SAMPLES) -> dict[int, np.ndarray]:
  """The buffers (by DEFINE_GLOBAL index, storage form) after the kernel runs on `bufs` (not modified). With `base`
  (the buffers after some program ran) and `rng`: only `samples` random output points are evaluated, and their
  values are written over copies of `base`."""
  if any(u.op in GroupOp.Transcendental for u in ast.toposort): ast = decompose_transcendentals(ast)
  outs, _ = _out_ranges(ast)
  src = {i: b.copy() for i, b in bufs.items()}
  if base is None:
    nd = len(outs)
    env = {r: np.arange(r.src[0].arg, dtype=np.int32).reshape([-1 if i == j else 1 for j in range(nd)]) for i, r in enumerate(outs)}
    shape: tuple[int, ...] = tuple(r.src[0].arg for r in outs)
    res = {i: b.copy() for i, b in bufs.items()}
  else:
    if rng is None: raise ValueError("eval_ast: a sampled evaluation needs an rng")
    env = {r: rng.integers(0, r.src[0].arg, samples).astype(np.int32) for r in outs}
    shape = (samples,)
    res = {i: b.copy() for i, b in base.items()}
  ev = _Eval(src)
  for st in ast.src:
    if st.op is not Ops.STORE: raise ValueError(f"eval_ast: a kernel's sink holds STOREs, not {st.op.name}")
    memo: dict[UOp, np.ndarray] = {}
    buf, idx, val = st.src[0].arg, ev.value(st.src[1], env, memo), ev.value(st.src[2], env, memo)
    idx, val = np.broadcast_to(idx, shape).reshape(-1), np.broadcast_to(val, shape).reshape(-1)
    if len(st.src) == 4:
      keep = np.broadcast_to(ev.value(st.src[3], env, memo), shape).reshape(-1).astype(bool)
      idx, val = idx[keep], val[keep]
    idx = idx.astype(np.int64)
    _inside(idx, res[buf], f"stores to buffer {buf}")
    res[buf][idx] = val
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
        _inside(idx[gate], data, f"loads buffer {u.src[0].arg}")
        out = np.where(gate, data[np.where(gate, idx, 0)], self.value(u.src[3], env, memo))
      else:
        _inside(idx, data, f"loads buffer {u.src[0].arg}")
        out = data[idx]
    elif u.op is Ops.REDUCE: out = self.reduce(u, env)
    elif u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
      srcs = [self.value(s, env, memo) for s in u.src]
      shp = np.broadcast_shapes(*(s.shape for s in srcs))
      out = semantics.evaluate(u.op, u.dtype, [np.broadcast_to(s, shp).reshape(-1) for s in srcs], [s.dtype for s in u.src]).reshape(shp)
    else: raise ValueError(f"eval_ast cannot evaluate {u.op.name}")
    memo[u] = out
    return out

  def reduce(self, u: UOp, env: dict[UOp, np.ndarray]) -> np.ndarray:
    """Every step at once along a new leading axis (steps in row-major order of the ranges sorted by arg, the
    unoptimized loop nest's order), then folded step by step with the reference semantics."""
    rs = sorted(u.src[1:], key=lambda r: r.arg)
    sizes = [r.src[0].arg for r in rs]
    n = math.prod(sizes)
    depth = max((a.ndim for a in env.values()), default=0)
    flat, stride, inner = np.arange(n, dtype=np.int64), n, dict(env)
    for r, sz in zip(rs, sizes):
      stride //= sz
      inner[r] = ((flat // stride) % sz).astype(np.int32).reshape((n,) + (1,) * depth)
    v = self.value(u.src[0], inner, {})
    full = np.broadcast_shapes((n,) + (1,) * depth, v.shape)
    v = np.broadcast_to(v, full)
    acc = np.broadcast_to(_identity(u.arg, u.dtype), full[1:]).reshape(-1)
    d = u.dtype
    if dtypes.is_int(d) and u.arg in (Ops.ADD, Ops.MAX):   # wrapping ADD and MAX are associative: any order, the same bits
      red = (np.add if u.arg is Ops.ADD else np.maximum).reduce(v.reshape(n, -1), axis=0, dtype=d.np) if n else acc
      return semantics.evaluate(u.arg, d, [acc, np.asarray(red, d.np).reshape(-1)], [d, d]).reshape(full[1:])
    for t in range(n): acc = semantics.evaluate(u.arg, d, [acc, v[t].reshape(-1)], [d, d])
    return acc.reshape(full[1:])


def _inside(idx: np.ndarray, data: np.ndarray, access: str) -> None:
  if idx.size and (idx.min() < 0 or idx.max() >= data.size):
    bad = int(idx.min() if idx.min() < 0 else idx.max())
    raise IndexError(f"eval_ast: the AST {access} at index {bad}, outside its {data.size} elements")
