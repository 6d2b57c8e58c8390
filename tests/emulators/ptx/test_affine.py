"""Affine integer registers in loops run as arrays (emulators/nv/ptx/affine.py) give the stepped loop's bits: index and
address arithmetic computed once per loop run, values that may leave [0, 2^(w-1)) (negative, wrapping) left to the steps,
registers used after the loop written back with their last iteration's value, the loop condition run once at the end."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.nv.ptx import affine, execute, loops
from emulators.nv.ptx.parse import parse
from refgrad.device import Device
from tests.emulators.ptx.ptxkit import HEAD, entry


@pytest.fixture(autouse=True, params=["drop", "keep"])
def _drops(request, monkeypatch):
  """Every test with chunk registers dropped after their last use and kept (loops.DROP_ELEMS)."""
  monkeypatch.setattr(loops, "DROP_ELEMS", 0 if request.param == "drop" else 1 << 30)
  monkeypatch.setattr(affine, "MIN_ELEMS", 0)   # the small loops here are planned (the size threshold has its own test)
RNG = np.random.default_rng(11)


def kernel(body: str) -> str:
  """Per thread t: acc (f32) and last (u32) written to out[t] and out2[t]; params out, inp, n (u32), out2."""
  return HEAD + f""".visible .entry k(.param .u64 out, .param .u64 inp, .param .u32 n, .param .u64 out2)
{{
  .reg .pred %p<4>;
  .reg .b32 %r<24>;
  .reg .f32 %f<16>;
  .reg .b64 %rd<24>;
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [inp];
  ld.param.u32 %r9, [n];
  ld.param.u64 %rd20, [out2];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd3, %rd0, %rd2;
  add.s64 %rd21, %rd20, %rd2;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r2, 0;
  mov.u32 %r7, 0;
L_top:
{body}
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.f32 [%rd3], %f1;
  st.global.u32 [%rd21], %r7;
  ret;
}}
"""


# in[(t * n + i) * 2 + 1] through mul by an immediate, add, shl, sub, mul.wide.s32, cvt.u64.u32 and an address offset;
# r7 (stored after the loop) is the last iteration's index
INDEX = kernel("""
  mul.lo.s32 %r3, %r0, %r9;
  add.s32 %r4, %r3, %r2;
  shl.b32 %r5, %r4, 1;
  add.s32 %r6, %r5, 3;
  sub.s32 %r7, %r6, 2;
  mul.wide.s32 %rd4, %r7, 4;
  add.s64 %rd5, %rd1, %rd4;
  ld.global.f32 %f2, [%rd5];
  cvt.u64.u32 %rd6, %r5;
  shl.b64 %rd7, %rd6, 2;
  add.s64 %rd8, %rd1, %rd7;
  ld.global.f32 %f3, [%rd8+0];
  add.rn.f32 %f4, %f2, %f3;
  add.rn.f32 %f1, %f1, %f4;
""")

# values outside [0, 2^31): an index that is negative in the first iterations (mul.wide.s32 sign-extends it), a product
# that wraps, an induction times a per-lane value; each turned into a float and summed
RANGES = kernel("""
  add.s32 %r3, %r2, -5;
  mul.wide.s32 %rd4, %r3, 3;
  cvt.rn.f32.s64 %f2, %rd4;
  mul.lo.s32 %r4, %r2, 0x40000001;
  cvt.rn.f32.s32 %f3, %r4;
  mul.lo.s32 %r5, %r2, %r0;
  mul.wide.u32 %rd5, %r5, 1000000;
  cvt.rn.f32.u64 %f4, %rd5;
  add.rn.f32 %f5, %f2, %f3;
  add.rn.f32 %f6, %f5, %f4;
  add.rn.f32 %f1, %f1, %f6;
  sub.s32 %r7, %r4, %r5;
""")


def run(src: str, nthreads: int, n: int, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  out, _, _, out2 = Device["NV"].run_ptx(src, "k", [np.zeros(nthreads, np.float32), data, np.uint32(n), np.zeros(nthreads, np.uint32)],
                                         grid=(1, 1, 1), block=(nthreads, 1, 1))
  return out, out2


def three(monkeypatch, src: str, *args) -> tuple[list[bytes], list[int]]:
  """(results with affine registers, without them, with loops stepped), and the affine positions planned per loop run."""
  planned: list[int] = []
  orig = loops._affine
  def counting(*a, **k):
    r = orig(*a, **k)
    planned.append(len(r[0]))
    return r
  monkeypatch.setattr(loops, "_affine", counting)
  monkeypatch.setattr(affine, "MIN_TRIPS", 1)
  res = []
  for on_loops, on_affine in ((True, True), (True, False), (False, True)):
    monkeypatch.setattr(loops, "enabled", on_loops)
    monkeypatch.setattr(affine, "enabled", on_affine)
    a, b = run(src, *args)
    res.append(a.tobytes() + b.tobytes())
  return res, planned


@pytest.mark.parametrize("nthreads, n", [(1, 50), (37, 9), (128, 64)])
def test_index_arithmetic_is_affine_and_exact(monkeypatch, nthreads, n):
  data = RNG.standard_normal(nthreads * n * 2 + 4).astype(np.float32)
  res, planned = three(monkeypatch, INDEX, nthreads, n, data)
  assert res[0] == res[1] == res[2]
  assert planned and planned[0] >= 9   # every integer instruction of the body
  x = data[:nthreads * n * 2 + 2]
  with np.errstate(all="ignore"):
    acc = np.zeros(nthreads, np.float32)
    for i in range(n):
      j = (np.arange(nthreads) * n + i) * 2
      acc = acc + (x[j + 1] + x[j])
  out = np.frombuffer(res[0][:4 * nthreads], np.float32)
  last = np.frombuffer(res[0][4 * nthreads:], np.uint32)
  assert out.tobytes() == acc.tobytes()
  assert (last == (np.arange(nthreads) * n + n - 1) * 2 + 1).all()


def test_values_leaving_the_range_are_stepped_exactly(monkeypatch):
  res, planned = three(monkeypatch, RANGES, 40, 30, np.zeros(4, np.float32))
  assert res[0] == res[1] == res[2]
  assert planned and planned[0] >= 2   # r2 * tid (a per-lane stride) and its mul.wide; the rest is stepped
  last = np.frombuffer(res[0][4 * 40:], np.uint32)
  t = np.arange(40, dtype=np.uint64)
  assert (last == ((29 * 0x40000001 - 29 * t) & 0xFFFFFFFF).astype(np.uint32)).all()


def test_chunks_and_the_condition_run_after_the_loop(monkeypatch):
  monkeypatch.setattr(loops, "CHUNK_ELEMS", 100)   # 7 lanes x 14 iterations per chunk: several chunks
  data = RNG.standard_normal(7 * 60 * 2 + 4).astype(np.float32)
  res, _ = three(monkeypatch, INDEX, 7, 60, data)
  assert res[0] == res[1] == res[2]
  (plan,) = loops.plans(parse(INDEX).entries["k"]).values()
  assert [parse(INDEX).entries["k"].instrs[i].op for i in plan.tail] == ["setp"]   # the loop condition: once, after the loop


def test_plan_refuses_products_of_two_iteration_dependent_values():
  e = parse(kernel("""
  mul.lo.s32 %r3, %r2, %r2;
  cvt.rn.f32.s32 %f2, %r3;
  add.rn.f32 %f1, %f1, %f2;
""")).entries["k"]
  A = affine.Plan(e, 10, 4, {})
  A.seed("%r2", np.zeros(4, np.uint64), 1, 4)
  (ins,) = [i for i in e.instrs if i.op == "mul" and i.has("lo")]
  assert A.step(ins) is None
  A.cur["%r9"] = affine.Aff(np.full(4, 3, np.int64), 0, 3, 3, 0, 0, 4)
  sq = parse(kernel("  mul.lo.s32 %r3, %r2, %r9;\n")).entries["k"]
  (ins,) = [i for i in sq.instrs if i.op == "mul" and i.has("lo")]
  f = A.step(ins)
  assert f is not None and (f.rows(np.arange(10), 4).reshape(10, 4) == (np.arange(10) * 3)[:, None]).all()


def test_strided_block_loads_and_their_faults(monkeypatch):
  """Loads whose address steps evenly per iteration and per lane read one strided block (global_strided); a block past
  the buffer's end is left to the step closure, which reports the fault as the stepped loop does."""
  import re

  from refgrad.runtime.driver import GPUFault
  calls = []
  orig = loops._strided_load
  def counting(*a):
    r = orig(*a)
    calls.append(r is not None)
    return r
  monkeypatch.setattr(loops, "_strided_load", counting)
  monkeypatch.setattr(affine, "MIN_TRIPS", 1)
  data = RNG.standard_normal(16 * 20 * 2 + 2).astype(np.float32)
  a = run(INDEX, 16, 20, data)
  assert calls and all(calls)
  monkeypatch.setattr(loops, "enabled", False)
  b = run(INDEX, 16, 20, data)
  assert a[0].tobytes() + a[1].tobytes() == b[0].tobytes() + b[1].tobytes()
  msgs = []
  for on in (True, False):
    monkeypatch.setattr(loops, "enabled", on)
    with pytest.raises(GPUFault) as ex: run(INDEX, 16, 20, data[:16 * 20])
    msgs.append(re.sub(r"0x[0-9a-f]+|GP entry \d+", "#", str(ex.value)))
  assert msgs[0] == msgs[1] and "ld.global.f32" in msgs[0]
  assert calls[-1] is False


def _count_blocks(monkeypatch) -> list[bool]:
  """Whether each strided load of a loop run read its block (False: left to the step closure)."""
  calls: list[bool] = []
  orig = loops._strided_load
  def counting(*a):
    r = orig(*a)
    calls.append(r is not None)
    return r
  monkeypatch.setattr(loops, "_strided_load", counting)
  return calls


# per lane t and iteration i: a .v4 load at element (t * n + i) * 4 (lanes evenly spaced) and
# a scalar load at t * t + i (lanes not evenly spaced)
VIEWS = kernel("""
  mul.lo.s32 %r3, %r0, %r9;
  add.s32 %r4, %r3, %r2;
  mul.wide.s32 %rd4, %r4, 16;
  add.s64 %rd5, %rd1, %rd4;
  ld.global.v4.f32 {%f2, %f3, %f4, %f5}, [%rd5];
  mul.lo.s32 %r5, %r0, %r0;
  add.s32 %r6, %r5, %r2;
  mul.wide.s32 %rd6, %r6, 4;
  add.s64 %rd7, %rd1, %rd6;
  ld.global.f32 %f6, [%rd7];
  sub.rn.f32 %f7, %f2, %f3;
  mul.rn.f32 %f8, %f4, %f5;
  add.rn.f32 %f9, %f7, %f8;
  add.rn.f32 %f10, %f9, %f6;
  add.rn.f32 %f1, %f1, %f10;
""")


@pytest.mark.parametrize("nthreads, n", [(1, 20), (24, 17), (64, 33)])
def test_strided_views_and_gathers_give_the_stepped_bits(monkeypatch, nthreads, n):
  """Strided blocks of .v4 loads (lanes evenly spaced) and of scalar loads (lanes not evenly spaced: t * t) give the
  stepped loop's bits (a NaN payload kept) and numpy's sums."""
  blocks = _count_blocks(monkeypatch)
  spaced: list[bool] = []   # whether each block was one strided view (lanes evenly spaced) rather than a gather
  orig = execute._lane_stride
  monkeypatch.setattr(execute, "_lane_stride", lambda a, n: spaced.append((g := orig(a, n)) is not None) or g)
  monkeypatch.setattr(affine, "MIN_TRIPS", 1)
  size = max(nthreads * n * 4 + 4, (nthreads - 1) ** 2 + n + 1)
  data = RNG.standard_normal(size).astype(np.float32)
  # one NaN with a payload (kept by the block's copy; two different NaNs meeting in a lane are another matter: the f32
  # add's NaN choice, not the load's)
  data.view(np.uint32)[(n + 2) * 4 if nthreads > 1 else 8] = 0x7FC01234
  res, planned = three(monkeypatch, VIEWS, nthreads, n, data)
  assert planned and planned[0] >= 6   # the index and address arithmetic of both loads
  assert res[0] == res[1] == res[2]
  assert blocks and all(blocks)   # both loads read strided blocks
  assert True in spaced and (nthreads <= 2 or False in spaced)   # the .v4 load a view, the t * t one a gather
  x = data
  with np.errstate(all="ignore"):
    acc = np.zeros(nthreads, np.float32)
    t = np.arange(nthreads)
    for i in range(n):
      j = (t * n + i) * 4
      acc = acc + (((x[j] - x[j + 1]) + x[j + 2] * x[j + 3]) + x[t * t + i])
  assert res[0][:4 * nthreads] == acc.tobytes()


MATRIX = HEAD + """.visible .entry m(.param .u64 out, .param .u64 a, .param .u64 b, .param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<16>;
  .reg .f32 %f<12>;
  .reg .b64 %rd<16>;
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [a];
  ld.param.u64 %rd2, [b];
  ld.param.u32 %r9, [n];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %tid.y;
  mov.u32 %r2, %ntid.x;
  mad.lo.s32 %r3, %r1, %r2, %r0;
  mul.wide.u32 %rd3, %r3, 4;
  add.s64 %rd4, %rd0, %rd3;
  mul.lo.s32 %r4, %r1, %r9;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r5, 0;
L_top:
  add.s32 %r6, %r4, %r5;
  mul.wide.s32 %rd5, %r6, 4;
  add.s64 %rd6, %rd1, %rd5;
  ld.global.f32 %f2, [%rd6];
  mul.lo.s32 %r7, %r5, %r2;
  add.s32 %r8, %r7, %r0;
  mul.wide.s32 %rd7, %r8, 16;
  add.s64 %rd8, %rd2, %rd7;
  ld.global.v4.f32 {%f3, %f4, %f5, %f6}, [%rd8];
  add.rn.f32 %f7, %f3, %f4;
  add.rn.f32 %f8, %f7, %f5;
  add.rn.f32 %f9, %f8, %f6;
  mul.rn.f32 %f10, %f2, %f9;
  add.rn.f32 %f1, %f1, %f10;
  add.s32 %r5, %r5, 1;
  setp.lt.s32 %p1, %r5, %r9;
  @%p1 bra L_top;
  st.global.f32 [%rd4], %f1;
  ret;
}
"""


@pytest.mark.parametrize("bx, by, n", [(4, 8, 17), (16, 16, 20), (1, 5, 16)])
def test_block_loads_with_two_lane_strides(monkeypatch, bx, by, n):
  """A matmul's loads: a[y * n + k] is the same for every x, b[k][x] (16 bytes) the same for every y: strided blocks
  with the stepped loop's and numpy's bits."""
  blocks = _count_blocks(monkeypatch)
  monkeypatch.setattr(affine, "MIN_TRIPS", 1)
  a = RNG.standard_normal(by * n).astype(np.float32)
  b = RNG.standard_normal(n * bx * 4).astype(np.float32)
  res = []
  for on in (True, False):
    monkeypatch.setattr(loops, "enabled", on)
    out, _, _, _ = Device["NV"].run_ptx(MATRIX, "m", [np.zeros(bx * by, np.float32), a, b, np.uint32(n)], grid=(1, 1, 1), block=(bx, by, 1))
    res.append(out.tobytes())
  assert res[0] == res[1]
  assert blocks and all(blocks)
  with np.errstate(all="ignore"):
    acc = np.zeros((by, bx), np.float32)
    b4 = b.reshape(n, bx, 4)
    for k in range(n): acc = acc + a.reshape(by, n)[:, k:k + 1] * (((b4[k, :, 0] + b4[k, :, 1]) + b4[k, :, 2]) + b4[k, :, 3])[None, :]
  assert res[0] == acc.tobytes()


def test_bounds_follow_the_operands():
  """A result's bounds come from its operands' (interval arithmetic): a difference that is negative in one lane is
  refused, one that is not is accepted with exact values, and a product's bounds hold every lane's value."""
  e = parse(kernel("""
  sub.s32 %r3, %r4, %r5;
  mul.lo.s32 %r6, %r4, %r5;
  add.s32 %r7, %r3, %r2;
""")).entries["k"]
  sub, mul, add = [i for i in e.instrs if i.op in ("sub", "mul", "add") and i.args[0].value in ("%r3", "%r6", "%r7")]
  for a4, a5, ok in (([10, 0], [0, 5], False), ([10, 7], [3, 5], True)):
    A = affine.Plan(e, 8, 2, {"%r4": np.array(a4, np.uint64), "%r5": np.array(a5, np.uint64)})
    A.seed("%r2", np.array([1, 2], np.uint64), 3, 4)
    f = A.step(sub)
    assert (f is not None) == ok
    if f is None: continue
    assert (f.rows(np.arange(8), 2).reshape(8, 2) == np.array(a4) - np.array(a5)).all() and f.alo <= 2 and f.ahi >= 7
    A.cur["%r3"] = f
    g = A.step(mul)
    assert g is not None and g.alo <= 21 and g.ahi >= 35 and (g.rows(np.arange(8), 2).reshape(8, 2) == np.array(a4) * np.array(a5)).all()
    h = A.step(add)
    want = (np.array(a4) - np.array(a5))[None, :] + np.array([1, 2])[None, :] + 3 * np.arange(8)[:, None]
    assert h is not None and (h.rows(np.arange(8), 2).reshape(8, 2) == want).all()
    lo, hi = h.bounds(8)
    assert lo <= want.min() and hi >= want.max()


NESTED = entry("""  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd3, %rd0, %rd2;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r10, 1;
L_outer:
  mov.u32 %r2, 0;
L_inner:
  mul.lo.s32 %r4, %r0, %r9;
  add.s32 %r3, %r4, %r2;
  mul.wide.s32 %rd4, %r3, 4;
  add.s64 %rd5, %rd1, %rd4;
  ld.global.f32 %f2, [%rd5];
  add.rn.f32 %f1, %f1, %f2;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r10;
  @%p1 bra L_inner;
  add.s32 %r10, %r10, 1;
  setp.le.s32 %p2, %r10, %r9;
  @%p2 bra L_outer;
  st.global.f32 [%rd3], %f1;""")


def test_runs_of_one_loop_with_and_without_affine_planning(monkeypatch):
  """An inner loop whose trip count grows with the outer one (1..n): its short runs step every instruction, its long
  runs plan affine registers (affine.MIN_TRIPS), each with its own kept layout, all with the stepped loop's bits."""
  n, nthreads = 24, 8
  data = RNG.standard_normal(nthreads * n).astype(np.float32)
  blocks = _count_blocks(monkeypatch)
  res = []
  for on in (True, False):
    monkeypatch.setattr(loops, "enabled", on)
    (out, _, _) = Device["NV"].run_ptx(NESTED, "k", [np.zeros(nthreads, np.float32), data, np.uint32(n)], grid=(1, 1, 1), block=(nthreads, 1, 1))
    res.append(out.tobytes())
  assert res[0] == res[1]
  assert blocks and all(blocks) and len(blocks) == n - affine.MIN_TRIPS + 1   # one strided block per planned run (T >= 16)
  x = data.reshape(nthreads, n)
  with np.errstate(all="ignore"):
    acc = np.zeros(nthreads, np.float32)
    for t in range(1, n + 1):
      for i in range(t): acc = acc + x[:, i]
  assert res[0] == acc.tobytes()


# per thread t: sum over i of (t * s + i) as a float, s a parameter: with a small s every index is affine, with a large one
# (t * s past 2^31) they leave the range and are stepped; one module launched with both, in turns
SCALED = HEAD + """.visible .entry k(.param .u64 out, .param .u32 n, .param .u32 s)
{
  .reg .pred %p<2>;
  .reg .b32 %r<12>;
  .reg .f32 %f<6>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd0, [out];
  ld.param.u32 %r9, [n];
  ld.param.u32 %r8, [s];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd3, %rd0, %rd2;
  mul.lo.s32 %r1, %r0, %r8;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r2, 0;
L_top:
  add.s32 %r3, %r1, %r2;
  cvt.rn.f32.s32 %f2, %r3;
  add.rn.f32 %f1, %f1, %f2;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.f32 [%rd3], %f1;
  ret;
}
"""


def test_affine_positions_remembered_between_runs_stay_exact(monkeypatch):
  """A loop remembers which positions were ever affine in its runs (loops._affine tries only those, all candidates every
  16th run): launches whose values leave the range, between ones that stay in it, give the stepped bits each time, and
  a position refused once is affine again when its values allow."""
  plans, found = [], []
  orig = loops._affine
  def spy(L, P, *a):
    r = orig(L, P, *a)
    plans.append(P)
    found.append(len(r[0]))
    return r
  monkeypatch.setattr(loops, "_affine", spy)
  n, nthreads = 20, 8
  for s in (1, 1 << 29, 3, 1 << 30, 1, 1 << 29):
    res = []
    for on in (True, False):
      monkeypatch.setattr(loops, "enabled", on)
      (out, _, _) = Device["NV"].run_ptx(SCALED, "k", [np.zeros(nthreads, np.float32), np.uint32(n), np.uint32(s)], grid=(1, 1, 1), block=(nthreads, 1, 1))
      res.append(out.tobytes())
    assert res[0] == res[1], s
    t = np.arange(nthreads, dtype=np.int64)
    with np.errstate(all="ignore"):
      acc = np.zeros(nthreads, np.float32)
      for i in range(n): acc = acc + ((t * s + i) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.float32)
    assert res[0] == acc.tobytes(), s
  assert len({id(P) for P in plans}) == 1   # one plan, launch after launch
  assert found[0] > found[1] and found[2] == found[0]   # t * s + i affine with s = 1, 3; not with s = 2^29


def test_small_loops_are_not_planned(monkeypatch):
  """A loop of at most affine.MIN_ELEMS iterations x lanes steps its integer instructions on the chunk's rows (planning
  costs more there), with the same bits as a planned run; a larger one is planned."""
  src = HEAD + """.visible .entry k(.param .u64 out, .param .u64 inp, .param .u32 n)
{
  .reg .pred %p;
  .reg .b32 %r<6>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [inp];
  ld.param.u32 %r5, [n];
  mov.u32 %r0, %tid.x;
  mov.f32 %f0, 0f00000000;
  mov.u32 %r1, 0;
L:
  mad.lo.s32 %r2, %r1, 64, %r0;
  mul.wide.u32 %rd2, %r2, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.f32 %f1, [%rd3];
  add.rn.f32 %f0, %f0, %f1;
  add.s32 %r1, %r1, 1;
  setp.lt.u32 %p, %r1, %r5;
  @%p bra L;
  mul.wide.u32 %rd4, %r0, 4;
  add.s64 %rd5, %rd0, %rd4;
  st.global.f32 [%rd5], %f0;
  ret;
}
"""
  planned = []
  orig = loops._affine
  def spy(*a):
    planned.append(True)
    return orig(*a)
  monkeypatch.setattr(loops, "_affine", spy)
  monkeypatch.setattr(affine, "MIN_ELEMS", 64 * 20)
  data = RNG.standard_normal(64 * 40).astype(np.float32)
  res = {}
  for trips in (20, 40):   # 64 lanes x 20 trips: at the threshold (stepped); x 40: planned
    planned.clear()
    res[trips] = Device["NV"].run_ptx(src, "k", [np.zeros(64, np.float32), data, np.uint32(trips)], grid=(1, 1, 1), block=(64, 1, 1))[0]
    assert bool(planned) == (trips == 40)
    ref = np.zeros(64, np.float32)
    for k in range(trips): ref = ref + data[k * 64:(k + 1) * 64]
    assert res[trips].tobytes() == ref.tobytes()
