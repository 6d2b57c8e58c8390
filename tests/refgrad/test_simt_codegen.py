"""The generated program function (refgrad/runtime/simt_codegen.py) calls numpy ufuncs directly where semantics runs the
op as that very ufunc: every such (op, dtype) must give semantics.op_fn's bits on edge values; the residue proof that
lets vector gathers skip their alignment check must hold on every lane it claims."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad.dtype import dtypes
from refgrad.runtime.simt_codegen import plain_ufunc
from refgrad.runtime.simt_gather import gather, residue
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp

_DTYPES = [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16,
           dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.bool]
_OPS = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.XOR, Ops.OR, Ops.AND, Ops.CMPLT, Ops.CMPNE, Ops.IDIV, Ops.MOD]


def _edge(d, rng: np.random.Generator, n: int = 4096) -> np.ndarray:
  if d == dtypes.bool: return rng.integers(0, 2, n).astype(np.bool_)
  if dtypes.is_float(d) and d != dtypes.bfloat16:
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, np.finfo(d.np).max, np.finfo(d.np).tiny], d.np)
    bits = rng.integers(0, 2 ** (8 * d.itemsize), n, dtype=np.uint64).astype(f"u{d.itemsize}").view(d.np)   # NaN payloads too
    return np.concatenate([special, bits])
  info = np.iinfo(d.np)
  return np.concatenate([np.array([0, 1, info.min, info.max, info.min + 1, info.max - 1], d.np), rng.integers(info.min, info.max, n, dtype=d.np, endpoint=True)])


@pytest.mark.parametrize("op", _OPS, ids=lambda o: o.name)
def test_plain_ufuncs_are_semantics_bit_for_bit(op: Ops):
  rng = np.random.default_rng(0)
  covered = 0
  for d in _DTYPES:
    out = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else d
    try: fn = semantics.op_fn(op, out, (d, d))
    except ValueError: continue   # the op does not take this dtype
    uf = plain_ufunc(op, out, (d, d))
    if uf is None: continue
    covered += 1
    a, b = _edge(d, rng), _edge(d, rng)[::-1].copy()
    for x, y in ((a, b), (a, a), (a[:1], b), (a, b[:1])):   # broadcasting like uniform (1,) operands
      with np.errstate(all="ignore"): want, got = fn([x, y]), uf(x, y)
      assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), f"{op.name} {d!r}"
  if op in (Ops.IDIV, Ops.MOD): assert covered == 0   # these check for undefined behaviour: never a plain ufunc
  else: assert covered > 0


def test_no_plain_ufunc_where_semantics_fixes_results_up():
  assert plain_ufunc(Ops.MAX, dtypes.float32, (dtypes.float32, dtypes.float32)) is None   # +0/-0 and NaN rules
  assert plain_ufunc(Ops.ADD, dtypes.float16, (dtypes.float16, dtypes.float16)) is None   # computed wide, rounded once
  assert plain_ufunc(Ops.ADD, dtypes.bfloat16, (dtypes.bfloat16, dtypes.bfloat16)) is None


def test_residue_proofs_hold_on_every_value():
  i32 = dtypes.int32
  lane, r = UOp.special("idx0", 1000), UOp.range(50, 0)
  c = lambda v: UOp.const(i32, v)
  cases = {(lane // c(64)) * c(256) + r * c(4): (4, 0), (lane % c(64)) * c(4) + c(1027): (4, 3), r * c(8) + c(2): (4, 2),
           (lane << c(3)) + c(5): (8, 5), lane * c(4) + r: (4, None), lane + c(4): (4, None)}
  lanes, its = np.arange(1000, dtype=np.int64)[:, None], np.arange(50, dtype=np.int64)[None, :]
  py = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.IDIV: np.floor_divide, Ops.MOD: np.mod, Ops.SHL: np.left_shift}
  def value(u: UOp) -> np.ndarray:
    if u.op is Ops.CONST: return np.int64(u.arg)
    if u.op is Ops.SPECIAL: return lanes
    if u.op is Ops.RANGE: return its
    return py[u.op](value(u.src[0]), value(u.src[1]))
  for u, (m, want) in cases.items():
    got = residue(u, m, {})
    assert got == want, u
    if got is not None: assert (value(u) % m == got).all()


def test_gather_with_a_proven_residue_equals_the_checked_one():
  v = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
  idx = (np.arange(512, dtype=np.int32) % 64) * 4 + 1027
  e = idx.astype(np.int64)[:, None] + np.arange(4)
  assert gather(v, idx, 1, 4, 3).tobytes() == gather(v, idx, 1, 4).tobytes() == v[e].tobytes()


@pytest.mark.parametrize("form", ["period", "block"])
@pytest.mark.parametrize("vec", [1, 4])
def test_lane_periodic_and_blockwise_loads_gather_their_distinct_places_once(form: str, vec: int):
  """out[lane] = sum of the components of src[(lane % 16) * vec + 3] (period) or src[(lane // 16) * vec + 3] (block), over
  several batches (max_lanes) and a lane count that is not a multiple of the period; then, with the buffer declared
  shorter, the index past its end is reported exactly as the full gather reports it."""
  from refgrad.codegen import to_linear
  from refgrad.device import Device
  from refgrad.runtime.simt import Memory, OutOfBoundsError, Program
  f32, i32, lanes = dtypes.float32, dtypes.int32, 200
  def build(n: int) -> list[UOp]:
    lane = UOp.special("idx0", lanes)
    part = lane % UOp.const(i32, 16) if form == "period" else lane // UOp.const(i32, 16)
    v = UOp.define_global(1, f32, n).load(part * UOp.const(i32, vec) + UOp.const(i32, 3), dtype=f32.vec(vec) if vec > 1 else None)
    val = v if vec == 1 else v.gep(0) + v.gep(1) + v.gep(2) + v.gep(3)
    return to_linear(UOp.define_global(0, f32, lanes).store(lane, val).sink(), Device["PYTHON"].renderer)
  n = 16 * vec + 8 if form == "period" else (lanes // 16 + 1) * vec + 8
  prg = Program("k", build(n))
  acc = next(a for a in _accesses(prg) if not a.store)
  assert acc.form is not None and acc.form[0] == form
  used, orig = [], acc._distinct
  def spy(*a):
    used.append(r := orig(*a))
    return r
  acc._distinct = spy
  src = np.random.default_rng(2).standard_normal(n).astype(np.float32)
  p = np.arange(lanes) % 16 if form == "period" else np.arange(lanes) // 16
  want = src[p + 3] if vec == 1 else ((src[p * vec + 3] + src[p * vec + 4]) + src[p * vec + 5]) + src[p * vec + 6]
  for max_lanes in (1 << 22, 64 * vec):   # batches of 200 lanes, then of 64 (a batch bounds lanes x vector width)
    out = Memory.zeros(4 * lanes)
    prg([out, Memory(src.view(np.uint8).copy())], (lanes, 1, 1), max_lanes=max_lanes)
    assert np.frombuffer(out.data, np.float32).tobytes() == np.asarray(want, np.float32).tobytes()
  assert len(used) >= 4 and all(u is not None for u in used)   # one batch, then 64-lane ones (the 8-lane tail may be a slice)
  errs = []
  for plain in (False, True):
    short = Program("k", build(n - 9))   # the last period/block now reads past the end
    if plain:
      for a in _accesses(short): a.form = None
    with pytest.raises(OutOfBoundsError) as e: short([Memory.zeros(4 * lanes), Memory(src.view(np.uint8).copy())], (lanes, 1, 1))
    errs.append(str(e.value))
  assert errs[0] == errs[1]


def _accesses(prg) -> list:
  from refgrad.runtime.simt import _Access
  return [fn.__self__ for fn, _ in prg.code if isinstance(getattr(fn, "__self__", None), _Access)]
