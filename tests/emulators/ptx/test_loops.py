"""Counted loops run as whole arrays (emulators/nv/ptx/loops.py) give the bits of the loop stepped one instruction at a
time, take the fast path where they qualify, and leave faults to the stepped loop (same report)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from emulators.nv.ptx import loops
from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from tests.emulators.ptx.ptxkit import entry

RNG = np.random.default_rng(5)
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 3.4e38, -3.4e38, 1.0, 2.0**-24, -0.5], np.float32)


def kernel(body: str, regs: str = "") -> str:
  """out[tid] = f(in, tid, n): params out, in, n (u32); %rd3 = &out[tid]."""
  return entry("  mul.wide.u32 %rd2, %r0, 4;\n  add.s64 %rd3, %rd0, %rd2;\n" + body, regs)


# per thread t: acc = 0; for i in 0..n-1: acc = ((acc + in[t*n + 2i]) + in[t*n + 2i + 1]) through a mov (the nvcc / refgrad shapes)
SUM_CHAIN = kernel("""
  mul.lo.s32 %r1, %r0, %r9;
  mul.lo.s32 %r1, %r1, 2;
  mul.wide.s32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.f32 %f1, 0f80000000;
  mov.u32 %r2, 0;
L_top:
  ld.global.v2.f32 {%f2, %f3}, [%rd5];
  add.rn.f32 %f4, %f1, %f2;
  add.rn.f32 %f5, %f4, %f3;
  mov.b32 %f1, %f5;
  add.s64 %rd5, %rd5, 8;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.f32 [%rd3], %f1;
""")

# acc = fma(in[2i], in[2i+1], acc) counting down (the generic fold: the chain is the third operand)
FMA_DOWN = kernel("""
  mul.lo.s32 %r1, %r0, %r9;
  mul.lo.s32 %r1, %r1, 2;
  mul.wide.s32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.f32 %f1, 0f3F800000;
  mov.u32 %r2, %r9;
L_top:
  ld.global.f32 %f2, [%rd5];
  ld.global.f32 %f3, [%rd5+4];
  fma.rn.f32 %f1, %f2, %f3, %f1;
  add.s64 %rd5, %rd5, 8;
  add.s32 %r2, %r2, -1;
  setp.ne.s32 %p1, %r2, 0;
  @%p1 bra L_top;
  st.global.f32 [%rd3], %f1;
""")

# an integer hash carried through xor/mul (generic fold of a two-link chain); the bound differs per thread when `skew`
INT_CHAIN = kernel("""
  mov.u32 %r3, 0x9E3779B9;
  mov.u32 %r2, 0;
  add.u32 %r8, %r9, %r0;
L_top:
  xor.b32 %r4, %r3, %r2;
  mul.lo.s32 %r3, %r4, 16777619;
  add.s32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, %r10;
  @%p1 bra L_top;
  st.global.u32 [%rd3], %r3;
""")


def run(src: str, nthreads: int, data: np.ndarray, n: int, out: type = np.float32) -> np.ndarray:
  return Device["NV"].run_ptx(src, "k", [np.zeros(nthreads, out), data, np.uint32(n)], grid=(1, 1, 1), block=(nthreads, 1, 1))[0]


def both(monkeypatch, src: str, *args, **kw) -> tuple[np.ndarray, np.ndarray, int]:
  """(with the fast path, stepped, fast-path runs taken)."""
  taken = []
  orig = loops.run
  def counting(*a, **k):
    r = orig(*a, **k)
    taken.append(r is not None)
    return r
  monkeypatch.setattr(loops, "run", counting)
  monkeypatch.setattr(loops, "enabled", True)
  a = run(src, *args, **kw)
  monkeypatch.setattr(loops, "enabled", False)
  b = run(src, *args, **kw)
  return a, b, sum(taken)


@pytest.mark.parametrize("nthreads, n", [(1, 1000), (7, 3), (64, 40), (3, 1)])
def test_f32_add_chain_matches_stepped_and_numpy(monkeypatch, nthreads, n):
  data = np.concatenate([SPECIAL, RNG.standard_normal(nthreads * n * 2).astype(np.float32) * 1e4])[:nthreads * n * 2]
  RNG.shuffle(data)
  a, b, taken = both(monkeypatch, SUM_CHAIN, nthreads, data, n)
  assert taken == 1
  assert a.tobytes() == b.tobytes()
  with np.errstate(all="ignore"): ref = np.add.accumulate(np.concatenate([np.full((nthreads, 1), -0.0, np.float32), data.reshape(nthreads, -1)], axis=1), axis=1)[:, -1]
  assert a.tobytes() == ref.astype(np.float32).tobytes()


def test_f32_chain_spans_chunks(monkeypatch):
  monkeypatch.setattr(loops, "CHUNK_ELEMS", 64)   # 5 lanes x 12 iterations per chunk: several chunks
  data = RNG.standard_normal(5 * 70 * 2).astype(np.float32)
  a, b, taken = both(monkeypatch, SUM_CHAIN, 5, data, 70)
  assert taken == 1 and a.tobytes() == b.tobytes()


def test_fma_chain_counting_down_matches_stepped(monkeypatch):
  data = np.concatenate([SPECIAL, RNG.standard_normal(200).astype(np.float32)])[:32 * 6 * 2]
  data = np.resize(data, 32 * 6 * 2)
  a, b, taken = both(monkeypatch, FMA_DOWN, 32, data, 6)
  assert taken == 1 and a.tobytes() == b.tobytes()


def test_integer_chain_matches_stepped(monkeypatch):
  src = INT_CHAIN.replace("%r10", "%r9")
  a, b, taken = both(monkeypatch, src, 40, np.zeros(1, np.float32), 300, out=np.uint32)
  assert taken == 1 and a.tobytes() == b.tobytes()
  h = 0x9E3779B9
  for i in range(300): h = ((h ^ i) * 16777619) & 0xFFFFFFFF
  assert (a == h).all()


def test_lanes_with_different_trip_counts_are_stepped(monkeypatch):
  src = INT_CHAIN.replace("%r10", "%r8")   # bound n + tid: a different trip count per lane
  a, b, taken = both(monkeypatch, src, 9, np.zeros(1, np.float32), 5, out=np.uint32)
  assert taken == 0 and a.tobytes() == b.tobytes()
  for t in range(9):
    h = 0x9E3779B9
    for i in range(5 + t): h = ((h ^ i) * 16777619) & 0xFFFFFFFF
    assert a[t] == h


def test_fault_inside_a_loop_is_reported_as_stepped(monkeypatch):
  data = np.zeros(2 * 4 * 3, np.float32)   # thread 3 reads past the end (4 threads x 5 iterations x 2 floats needed)
  msgs = []
  for on in (True, False):
    monkeypatch.setattr(loops, "enabled", on)
    with pytest.raises(GPUFault) as ex: run(SUM_CHAIN, 4, data, 5)
    msgs.append(re.sub(r"0x[0-9a-f]+|GP entry \d+", "#", str(ex.value)))   # buffer addresses and queue positions differ between runs
  assert msgs[0] == msgs[1]
  assert "by thread (3, 0, 0) of block (0, 0, 0) at PTX line 26 (ld.global.v2.f32" in msgs[0]


def test_plans_reject_loops_with_stores_and_carried_temporaries():
  from emulators.nv.ptx.parse import parse
  store = kernel("""
  mov.u32 %r2, 0;
L_top:
  st.global.u32 [%rd3], %r2;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
""")
  carried = kernel("""
  mov.u32 %r2, 0;
  mov.u32 %r3, 0;
  mov.u32 %r4, 1;
L_top:
  add.s32 %r5, %r3, %r4;
  mov.u32 %r3, %r4;
  mov.u32 %r4, %r5;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.u32 [%rd3], %r4;
""")
  assert loops.plans(parse(store).entries["k"]) == {}
  assert [p.accs != [] for p in loops.plans(parse(SUM_CHAIN).entries["k"]).values()] == [True]
  (fib,) = loops.plans(parse(carried).entries["k"]).values()   # Fibonacci: two carried registers, one region
  assert fib.accs == [] and len(fib.region) == 3


# softmax's max with NaN rules (the PTX renderer's MAX), the running value carried through seven instructions
MAX_NAN = kernel("""
  mul.lo.s32 %r1, %r0, %r9;
  mul.wide.s32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.f32 %f1, 0fFF800000;
  mov.u32 %r2, 0;
L_top:
  ld.global.f32 %f2, [%rd5];
  max.f32 %f3, %f1, %f2;
  setp.eq.f32 %p2, %f1, %f2;
  and.b32 %f4, %f1, %f2;
  selp.f32 %f3, %f4, %f3, %p2;
  setp.nan.f32 %p3, %f1, %f2;
  add.rn.f32 %f5, %f1, %f2;
  selp.f32 %f1, %f5, %f3, %p3;
  add.s64 %rd5, %rd5, 4;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.f32 [%rd3], %f1;
""")


def test_carried_region_matches_stepped(monkeypatch):
  """softmax's max with NaN rules: the carried value feeds several instructions (a region stepped once per iteration)."""
  src = MAX_NAN
  data = np.resize(np.concatenate([SPECIAL, RNG.standard_normal(100).astype(np.float32)]), 16 * 30)
  RNG.shuffle(data)
  a, b, taken = both(monkeypatch, src, 16, data, 30)
  assert taken == 1 and a.tobytes() == b.tobytes()
  x = data.reshape(16, 30)
  assert np.isnan(a[np.isnan(x).any(axis=1)]).all() and np.array_equal(a[~np.isnan(x).any(axis=1)], x[~np.isnan(x).any(axis=1)].max(axis=1))


# registers the body writes, read after the loop as a store address (%rd7), a guard (%p2) and an operand (%r4), and
# ones read nowhere after it (%r6, %r7: not written back)
LIVE_OUT = kernel("""
  mul.lo.s32 %r1, %r0, %r9;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r2, 0;
L_top:
  add.s32 %r5, %r1, %r2;
  mul.wide.s32 %rd4, %r5, 4;
  add.s64 %rd5, %rd1, %rd4;
  ld.global.f32 %f2, [%rd5];
  mul.lo.s32 %r3, %r2, 3;
  add.s32 %r4, %r3, %r0;
  add.s64 %rd7, %rd3, 0;
  setp.gt.f32 %p2, %f2, 0f00000000;
  mul.lo.s32 %r6, %r2, 5;
  add.s32 %r7, %r6, 1;
  cvt.rn.f32.s32 %f6, %r7;
  mul.rn.f32 %f7, %f6, %f2;
  add.rn.f32 %f1, %f1, %f2;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  @%p2 add.rn.f32 %f1, %f1, 0f447A0000;
  cvt.rn.f32.s32 %f5, %r4;
  add.rn.f32 %f1, %f1, %f5;
  st.global.f32 [%rd7], %f1;
""")


@pytest.mark.parametrize("nthreads, n", [(5, 7), (40, 33)])
def test_registers_read_after_the_loop_are_written_back(monkeypatch, nthreads, n):
  """The fast path writes back the registers read after the loop (as an address, a guard, an operand) with their last
  iteration's values, and skips the ones nothing reads after it."""
  from emulators.nv.ptx.parse import parse
  (plan,) = loops.plans(parse(LIVE_OUT).entries["k"]).values()
  assert {"%rd7", "%p2", "%r4", "%f1", "%r2"} <= plan.live_out and not {"%r5", "%r6", "%r7"} & plan.live_out
  data = RNG.standard_normal(nthreads * n).astype(np.float32)
  a, b, taken = both(monkeypatch, LIVE_OUT, nthreads, data, n)
  assert taken and a.tobytes() == b.tobytes()
  x = data.reshape(nthreads, n)
  with np.errstate(all="ignore"):
    acc = np.zeros(nthreads, np.float32)
    for i in range(n): acc = acc + x[:, i]
    acc = np.where(x[:, -1] > 0, acc + np.float32(1000), acc)
    acc = acc + ((n - 1) * 3 + np.arange(nthreads)).astype(np.float32)
  assert a.tobytes() == acc.tobytes()


@pytest.mark.parametrize("drop", [0, 1 << 30])
def test_chunk_registers_dropped_or_kept_give_the_stepped_bits(monkeypatch, drop):
  """Chunk registers are dropped after their last use in large chunks (DROP_ELEMS) and kept in small ones: both give
  the stepped loop's bits, registers read after the loop included."""
  monkeypatch.setattr(loops, "DROP_ELEMS", drop)
  data = RNG.standard_normal(24 * 19 * 2).astype(np.float32)
  for src, n in ((SUM_CHAIN, 19), (LIVE_OUT, 19)):
    a, b, taken = both(monkeypatch, src, 24, data, n)
    assert taken and a.tobytes() == b.tobytes()


def counted(start: int, step: int, cmp: str) -> str:
  """out[tid] = the iterations of `do { r2 += step } while (r2 cmp n)` from r2 = start."""
  return kernel(f"""
  mov.u32 %r2, {start};
  mov.u32 %r5, 0;
L_top:
  add.s32 %r5, %r5, 1;
  add.s32 %r2, %r2, {step};
  setp.{cmp} %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.u32 [%rd3], %r5;
""")


# (start, step, compare, bound, expected iterations, whether the closed form answers: else the scan does)
COUNTED = [(0, 1, "lt.s32", 1000, 1000, True), (0, 1, "ne.s32", 7, 7, True), (10, -1, "gt.s32", 0, 10, True), (0, 3, "lt.u32", 10, 4, True),
           (0, 2, "le.s32", 9, 5, True), (4, 1, "eq.s32", 5, 2, True), (0, 1, "lt.s32", 0, 1, True), (100, 7, "lo.u32", 50, 1, True),
           (0, 1, "gt.s32", 5, 1, True),   # stops at once although the compare would hold later (not a search)
           (0xFFFFFFF0, 1, "lt.s32", 5, 21, True), (3, -1, "ge.s32", 0xFFFFFFFC, 8, True), (0, 1, "ne.u32", 1000, 1000, True),
           (0xFFFFFFF8, 4, "ne.u32", 4, 3, False),    # wraps through 0 to reach the bound: no trip count from unbounded integers
           (0x7FFFF000, 0x100, "gt.s32", 0, 16, False),   # signed overflow ends the loop where unbounded integers go on
           (0x7FFFFFF0, 8, "gt.s32", 0, 2, True)]   # iterations 0 and 1 straddle the overflow: the line through them stops at once


@pytest.mark.parametrize("start, step, cmp, bound, trips, closed", COUNTED)
def test_trip_count_from_the_compare_matches_stepped(monkeypatch, start, step, cmp, bound, trips, closed):
  """The trip count found from the first two iterations of the compare (loops._linear_trips, checked on every iteration)
  gives the stepped loop's bits, and where wrap-around breaks the guess the scan answers instead."""
  found = []
  orig = loops._linear_trips
  def spy(*a):
    found.append(orig(*a))
    return found[-1]
  monkeypatch.setattr(loops, "_linear_trips", spy)
  a, b, taken = both(monkeypatch, counted(start, step, cmp), 4, np.zeros(1, np.float32), bound, out=np.uint32)
  assert taken == 1 and a.tobytes() == b.tobytes()
  assert (a == trips).all()
  assert found and (found[0] == trips if closed else found[0] is None)


@pytest.mark.parametrize("rows, lanes", [(2, 32), (65, 1000), (128, 128), (300, 33), (17, 4096)])
def test_fold_add_adds_each_lanes_rows_in_order(rows, lanes):
  """_fold_add (one reduce over the rows for 32 lanes and more) gives the bits of adding row after row: data where any
  other order (a pairwise sum) rounds differently, NaN payloads, infinities and signed zeros."""
  rng = np.random.default_rng(rows * lanes)
  X = np.tile(np.array([1e8, 1.0, -1e8, 3.0, 0.5, -1.0], np.float32), rows)[:rows, None] * np.ones(lanes, np.float32)
  X = X + (rng.standard_normal((rows, lanes)) * 10.0 ** rng.integers(-8, 8, (rows, lanes))).astype(np.float32)
  X.ravel()[rng.integers(0, X.size, 20)] = np.array([0x7FC00123, 0xFFC00456, 0x7F800000, 0xFF800000, 0x80000000] * 4, np.uint32).view(np.float32)
  c = rng.standard_normal(lanes).astype(np.float32)
  c[:2] = [-0.0, np.float32(1e8)]
  for m in (0, 1):
    with np.errstate(all="ignore"):
      got = loops._fold_add(c, X, m)
      cx = np.concatenate([c[None, :], X])   # the rows built in one array by the caller (c and X its views): the same bits
      got2 = loops._fold_add(cx[0], cx[1:], m, cx)
      acc, want = c.copy(), []
      for r in X[:rows - m]: acc = acc + r
      want.append(acc)
      for r in X[rows - m:]: want.append(want[-1] + r)
    assert len(got) == len(want) and all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    assert len(got2) == len(want) and all(g.tobytes() == w.tobytes() for g, w in zip(got2, want))


@pytest.mark.parametrize("dtype", [np.uint64, np.uint32, np.int32, np.float32, np.float64, np.uint16, np.bool_])
@pytest.mark.parametrize("n, k", [(1, 1), (1, 4096), (1000, 16), (33, 7)])
def test_tile_gives_np_tiles_bytes(dtype, n, k):
  """_tile (the invariant registers of a chunk, k copies end to end) is np.tile's result byte for byte, a fresh writable
  array also for a read-only broadcast input (a 64-bit ld.param pointer) and for NaN payloads."""
  v = np.random.default_rng(n * k).integers(0, 2**63, n, dtype=np.uint64).view(np.uint8)[:n * np.dtype(dtype).itemsize].view(dtype)
  for x in (v, np.broadcast_to(v[:1], (n,))):
    got = loops._tile(x, k)
    assert got.dtype == x.dtype and got.shape == (n * k,) and got.flags.writeable and got.flags.c_contiguous
    assert got.tobytes() == np.tile(x, k).tobytes()


def test_chunk_lane_ids_are_shared_read_only():
  """_lanes(n) is np.arange(n), one array per size, read-only (a chunk's sel and everyone: a write into it would change
  every later chunk of that size, so it raises)."""
  a = loops._lanes(777)
  assert a is loops._lanes(777) and np.array_equal(a, np.arange(777)) and a.dtype == np.arange(1).dtype
  with pytest.raises(ValueError): a[0] = 1
