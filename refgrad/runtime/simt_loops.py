"""RANGE loops run as whole arrays: the SIMT executor's fast path for loops whose iterations are independent.

A loop qualifies (`plan`) when its body is straight-line code of ALU/CAST/BITCAST/GEP/VECTORIZE ops, ungated non-bool
global LOADs and accumulator updates ASSIGN(acc, acc OP x) whose x does not depend on the accumulator: no STORE, IF,
BARRIER, WMMA, local memory or inner loop. Then every body value gets a leading iteration axis and each uop is one numpy
call for a chunk of iterations; each accumulator folds its chunk in the reference's order (iteration 0 first), one
rounding per step in its own dtype: `ufunc.accumulate` where the reference op is exactly that ufunc with the accumulator
as first operand, else one op call per iteration on whole rows.

The body has no side effect but registers, so a run is speculative: whenever the interpreter would report something
(out of bounds, an uninitialized read, undefined behaviour, an undefined value already in play) or an operand has a
shape the fast path does not handle, `run` returns False before anything is committed, and the interpreter runs the
loop from its first iteration and reports exactly as it always did."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.runtime.simt_gather import gather
from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import load_parts

CHUNK_ELEMS = 1 << 16   # elements of one body value per chunk of iterations (lanes x iterations x vector width): cache-sized
_MAY_UB = frozenset({Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.CAST, Ops.BITCAST})
_FOLD_OPS = (Ops.ADD, Ops.MUL, Ops.MAX)
_BODY_OPS = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.GEP, Ops.VECTORIZE, Ops.LOAD, Ops.ASSIGN, Ops.CONST, Ops.DEFINE_VAR}


def _ufunc(op: Ops, d: DType) -> Any:
  """The numpy ufunc that is exactly the reference's `op` on dtype d (semantics runs these unchanged), else None."""
  if d in (dtypes.float32, dtypes.float64): return {Ops.ADD: np.add, Ops.MUL: np.multiply}.get(op)
  if dtypes.is_int(d) and d != dtypes.bool: return {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}.get(op)
  return None


class _Acc:
  """One accumulator: ASSIGN(acc, fold(acc, x)) at body position `at`."""
  __slots__ = ("acc_first", "fn", "slot", "ufunc", "vec", "x")
  def __init__(self, slot: int, x: int, acc_first: bool, fn: Callable, ufunc: Any, vec: bool):
    self.slot, self.x, self.acc_first, self.fn, self.ufunc, self.vec = slot, x, acc_first, fn, ufunc, vec


class LoopPlan:
  """How to run one qualifying RANGE loop as arrays (built once per Program)."""

  def __init__(self, rdt: np.dtype, r_slot: int, steps: list[tuple], accs: list[_Acc], width: int):
    self.rdt, self.r_slot, self.steps, self.accs, self.width = rdt, r_slot, steps, accs, width
    # the body values that die after each step (their last reader), so a chunk holds only the live ones
    last: dict[int, int] = {}
    for k, (kind, o, src, aux) in enumerate(steps):
      for a in (*src, *(aux[3:5] if kind == 3 else ())):
        if a >= 0: last[a] = k
      last[o] = k   # read by nothing after: dies at once
    for a in accs: last[a.x] = len(steps)
    self.frees = [tuple(o2 for _, o2, _, _ in steps if last[o2] == k) for k in range(len(steps))]

  def run(self, st: Any, stop: int) -> bool:
    """Run iterations [0, stop) on st's active lanes. True when done (accumulators committed), False to interpret."""
    if st.undef: return False   # undefined values already in play: the interpreter tracks them per iteration
    regs, active = st.regs, st.active
    accs = {a.slot: regs[a.slot] for a in self.accs}
    chunk = CHUNK_ELEMS // max(1, st.n * self.width)
    if chunk < 2: return False   # so many lanes that a chunk is one iteration: the interpreter does the same with less overhead
    for t0 in range(0, stop, chunk):
      t1 = min(stop, t0 + chunk)
      try: ok = self._chunk(st, regs, active, accs, t0, t1)
      except ValueError: return False   # an operand shape the fast path does not cover: the interpreter does
      if not ok: return False
    for a in self.accs:
      new = accs[a.slot]
      old = regs[a.slot]
      if active is not None: new = np.where(active[:, None] if a.vec else active, new, old)
      regs[a.slot] = new
    return True

  def _chunk(self, st: Any, regs: list, active: np.ndarray | None, accs: dict, t0: int, t1: int) -> bool:
    v: dict[int, np.ndarray] = {self.r_slot: np.arange(t0, t1, dtype=self.rdt)[:, None]}
    def get(s: int) -> np.ndarray:
      x = v.get(s)
      return regs[s][None] if x is None else x
    act = None if active is None else active[None]
    for (kind, o, src, aux), dead in zip(self.steps, self.frees):
      if kind == 0:   # ALU, CAST, BITCAST: aux = (fn, checks UB, source dtypes, op, dtype)
        xs = [get(a) for a in src]
        fn, may_ub, sdts, op, dt = aux
        if may_ub and st.checked and (res := semantics.ub_check(op, dt, xs, sdts)) is not None:
          m = np.asarray(res[1], np.bool_)
          if m.ndim > 2: m = m.reshape(*m.shape[:2], -1).any(axis=-1)
          if (m if act is None else m & act).any(): return False
        v[o] = fn(xs)
      elif kind == 1:   # GEP: a contiguous copy (see the interpreter's GEP)
        x = get(src[0])
        v[o] = x[..., aux].copy() if x.size > 64 else x[..., aux]
      elif kind == 2: v[o] = np.stack(np.broadcast_arrays(*[get(a) for a in src]), axis=-1)   # VECTORIZE
      elif kind == 3:   # LOAD: aux = (buffer arg, elements per pointer element, values per lane, gate slot, alt slot, index stride)
        arg, bc, c, gate, alt, s0 = aux
        m = act if gate < 0 else get(gate) if act is None else get(gate) & act
        if (x := self._load(st, get(src[0]), m, arg, bc, c, s0)) is None: return False
        if gate >= 0:   # lanes whose gate is off take alt (or zeros), bit for bit
          u = np.dtype(f"u{x.dtype.itemsize}")
          other = np.zeros((), u) if alt < 0 else get(alt).view(u)
          x = np.where(m[..., None] if c > 1 else m, x.view(u), other).view(x.dtype)
        v[o] = x
      for d in dead: del v[d]
    for a in self.accs:
      x = get(a.x)
      if x.shape[0] != t1 - t0: x = np.broadcast_to(x, (t1 - t0, *x.shape[1:]))   # a loop-invariant operand
      acc = accs[a.slot]
      if a.ufunc is not None and x[0].size >= 32:   # wide rows: one in-place op per iteration beats accumulate's slow inner loop
        acc = np.broadcast_to(acc, np.broadcast_shapes(acc.shape, x.shape[1:])).copy()
        for row in x: a.ufunc(acc, row, out=acc)
        accs[a.slot] = acc
      elif a.ufunc is not None:   # narrow rows (a few lanes): in-order accumulate along the iteration axis
        buf = np.empty((x.shape[0] + 1, *np.broadcast_shapes(acc.shape, x.shape[1:])), acc.dtype)
        buf[0], buf[1:] = acc, x
        a.ufunc.accumulate(buf, axis=0, out=buf)
        accs[a.slot] = buf[-1].copy()
      else:
        for row in x: acc = a.fn([acc, row] if a.acc_first else [row, acc])
        accs[a.slot] = acc
    return True

  def _load(self, st: Any, idx: np.ndarray, act: np.ndarray | None, arg: int, bc: int, c: int, s0: int | None) -> np.ndarray | None:
    """The elements idx points at on the lanes (iteration x lane) where act is set (None: all), anything elsewhere;
    None where the interpreter would report something. s0: the index's step per iteration when the plan proved it one."""
    mem, view, bound, k = st.gmem[arg]
    if idx.shape[1] not in (1, st.n): raise ValueError("lane axis")
    if bound == 0: return None
    if s0 is not None and act is None and idx.ndim == 2 and s0 >= 0 and not (st.checked and mem.bits is not None):
      # idx[t, l] == a + t*s0 + l*s1: s0 is proven (modulo the index's width), the lanes are checked on the first row; with
      # every value in [0, bound) no step wrapped, so the index is exactly that and the chunk is a strided view of the buffer
      a, nl = int(idx[0, 0]), idx.shape[1]
      s1 = int(idx[0, 1]) - a if nl > 1 else 0
      hi = a + (idx.shape[0] - 1) * s0 + (nl - 1) * s1
      if a >= 0 and s1 >= 0 and hi * bc + c <= bound * bc and (nl == 1 or np.array_equal(idx[0], np.arange(a, a + nl * s1, s1) if s1 else a)):
        return _strided(view, a, idx.shape, s0, s1, bc, c)
    if act is not None:
      idx, act = np.broadcast_arrays(idx, act)
    sel = idx if act is None else idx[act]
    if sel.size and (int(sel.min()) < 0 or int(sel.max()) * bc + c > bound * bc): return None   # the interpreter reports it
    if s0 is None and act is None and not (st.checked and mem.bits is not None) and idx.ndim == 2 and (ab := _affine(idx)) is not None:
      return _strided(view, ab[0], idx.shape, ab[1], ab[2], bc, c)   # idx = a + t*s0 + l*s1 (t: iteration, l: lane)
    if act is not None: idx = np.where(act, idx, 0)
    if st.checked and mem.bits is not None:
      e = idx.astype(np.int64) * bc
      if c > 1: e = e[..., None] + np.arange(c)
      ok = mem.elems_defined(e, k)
      if c > 1: ok = ok.all(axis=-1)
      if not (ok if act is None else ok | ~act).all(): return None
    return gather(view, idx, bc, c)


def _strided(view: np.ndarray, a: int, shape: tuple[int, ...], s0: int, s1: int, bc: int, c: int) -> np.ndarray:
  """The elements at a + t*s0 + l*s1 (t, l over shape; c of them from each) as a read-only view of the buffer, not a gather."""
  isz = view.itemsize
  full, strides = ((*shape, c), (s0 * bc * isz, s1 * bc * isz, isz)) if c > 1 else (shape, (s0 * bc * isz, s1 * bc * isz))
  return np.lib.stride_tricks.as_strided(view[a * bc:], full, strides, writeable=False)


def _affine(idx: np.ndarray) -> tuple[int, int, int] | None:
  """(a, s0, s1) with idx[t, l] == a + t*s0 + l*s1 for every element and s0, s1 >= 0, else None."""
  a = int(idx[0, 0])
  s0 = int(idx[1, 0]) - a if idx.shape[0] > 1 else 0
  s1 = int(idx[0, 1]) - a if idx.shape[1] > 1 else 0
  if s0 < 0 or s1 < 0 or int(idx[-1, -1]) != a + (idx.shape[0] - 1) * s0 + (idx.shape[1] - 1) * s1: return None
  want = np.arange(idx.shape[0], dtype=np.int64)[:, None] * s0 + (np.arange(idx.shape[1], dtype=np.int64) * s1 + a)
  return (a, s0, s1) if np.array_equal(idx, want) else None


def users_of(uops: list[UOp]) -> dict[UOp, list[int]]:
  """uop -> the positions of the uops reading it (computed once per Program, shared by every RANGE's plan)."""
  users: dict[UOp, list[int]] = {}
  for i, u in enumerate(uops):
    for s in u.src: users.setdefault(s, []).append(i)
  return users


def plan(prg: Any, r: int, end: int, slot: list[int], users: dict[UOp, list[int]]) -> LoopPlan | str:
  """A LoopPlan for the RANGE at r (its ENDRANGE at end), or why its iterations must be interpreted; users: `users_of`."""
  uops, pos = prg.uops, prg.pos
  body = range(r + 1, end)
  inside = {uops[i] for i in body}
  fold_alus: dict[int, _Acc] = {}
  for i in body:
    u = uops[i]
    if u.op not in _BODY_OPS: return f"its body has {u.op.name} at uop {i}"
    if u.op is not Ops.ASSIGN and any(j > end for j in users.get(u, ())): return f"uop {i} is used after the loop"
    if u.op is Ops.LOAD:
      if u.src[0].op is not Ops.DEFINE_GLOBAL: return f"uop {i} loads local memory"
      if u.dtype.scalar() == dtypes.bool: return f"uop {i} loads bools"
    if u.op is Ops.ASSIGN:
      acc, val = u.src[0], u.src[1]
      if acc.op is not Ops.DEFINE_ACC or acc in inside: return f"ASSIGN at uop {i} does not update an accumulator defined before the loop"
      if any(j <= end for j in users.get(u, ())): return f"the accumulator assigned at uop {i} is read inside the loop"
      if val.op not in _FOLD_OPS or val not in inside or sum(s is acc for s in val.src) != 1:
        return f"ASSIGN at uop {i} is not acc = acc ADD/MUL/MAX x"
      if [j for j in users.get(acc, ()) if r < j < end and j != i] != [pos[val]] or users.get(val, []) != [i]:
        return f"the accumulator of uop {i} carries a value to other uops of the loop"
      if pos[acc] > r: return f"the accumulator of uop {i} is defined inside the loop"
      first = val.src[0] is acc
      d = val.dtype.scalar()
      fold_alus[pos[val]] = _Acc(slot[pos[acc]], slot[pos[val.src[1 if first else 0]]], first, semantics.op_fn(val.op, val.dtype, [s.dtype for s in val.src]),
                                 _ufunc(val.op, d) if first else None, val.dtype.count > 1)
  strides = _strides(uops, r, end)
  steps: list[tuple] = []
  for i in body:
    u = uops[i]
    if i in fold_alus or u.op in (Ops.ASSIGN, Ops.CONST, Ops.DEFINE_VAR): continue
    src = tuple(slot[pos[s]] for s in u.src)
    if u.op is Ops.GEP: steps.append((1, slot[i], src, u.arg[0]))
    elif u.op is Ops.VECTORIZE: steps.append((2, slot[i], src, None))
    elif u.op is Ops.LOAD:
      pdt: PtrDType = u.src[0].dtype  # type: ignore[assignment]
      _, _, gate, alt = load_parts(u)
      gs = (-1, -1) if gate is None else (slot[pos[gate]], -1 if alt is None else slot[pos[alt]])
      steps.append((3, slot[i], (src[1],), (u.src[0].arg, pdt.base.count, u.dtype.count, *gs, strides.get(u.src[1]))))
    else:
      sdts = tuple(s.dtype for s in u.src)
      steps.append((0, slot[i], src, (semantics.op_fn(u.op, u.dtype, sdts), u.op in _MAY_UB, sdts, u.op, u.dtype)))
  if not fold_alus and not steps: return "its body is empty"
  width = max([uops[i].dtype.count for i in body if not isinstance(uops[i].dtype, PtrDType)] + [1])
  return LoopPlan(uops[r].dtype.np, slot[r], steps, list(fold_alus.values()), width)


def _strides(uops: list[UOp], r: int, end: int) -> dict[UOp, int | None]:
  """For the body values of the loop at r: how much each integer value grows per iteration when that is a constant
  (modulo its width: ADD and MUL by a CONST are ring operations), else None. Values from before the loop grow by 0."""
  rng = uops[r]
  step: dict[UOp, int | None] = {rng: 1}
  inside = set(uops[r + 1:end])
  def of(x: UOp) -> int | None: return step.get(x) if x in inside or x is rng else 0
  for u in uops[r + 1:end]:
    ss = [of(x) for x in u.src]
    if u.op in (Ops.CONST, Ops.DEFINE_VAR) or (u.op in GroupOp.ALU and all(x == 0 for x in ss)): step[u] = 0
    elif not dtypes.is_int(u.dtype) or u.dtype == dtypes.bool or u.dtype.count > 1 or None in ss: step[u] = None
    elif u.op is Ops.ADD: step[u] = ss[0] + ss[1]  # type: ignore[operator]
    elif u.op is Ops.MUL and (k := next((x.arg for x in u.src if x.op is Ops.CONST), None)) is not None: step[u] = (ss[0] or ss[1]) * int(k)  # type: ignore[operator]
    else: step[u] = None
  return step
