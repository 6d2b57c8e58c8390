"""One-block loops run as batches of iterations (emulators/amd/rdna3/loops.py) against the same kernels block by block
and stepped by the interpreter: the same buffers, SGPRs, VGPRs, SCC, PC and (checked mode) VGPR definedness, with inputs
where a wrong batch would give another answer (float sums whose order matters, NaN payloads, inductions wrapping at
2^32, trip counts that differ between waves, a row changed as a seeded bug would), and the same fault text."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.amd.rdna3 import loops as LP
from emulators.amd.rdna3 import machine as MM
from emulators.amd.rdna3 import ops as X
from tests.emulators.rdna3 import kernels as K
from tests.emulators.rdna3.llvm_util import compile_ir, read_elf
from tests.emulators.rdna3.llvm_util import run_machine as machine

NL = 128   # work-items: 2 workgroups of 64 (4 waves)

LANE_ACC = f"""
define amdgpu_kernel void @lane_acc(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {{
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %init = load float, ptr addrspace(1) %po
  %pi = getelementptr float, ptr addrspace(1) %a, i32 %i
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%k1, %loop]
  %acc = phi float [%init, %entry], [%acc1, %loop]
  %off = mul i32 %k, {NL}
  %off64 = zext i32 %off to i64
  %pa = getelementptr float, ptr addrspace(1) %pi, i64 %off64
  %v = load float, ptr addrspace(1) %pa
  %w = fmul float %v, 3.0
  %acc0 = fadd float %acc, %v
  %acc1 = fadd float %acc0, %w
  %k1 = add i32 %k, 1
  %c = icmp ult i32 %k1, %n
  br i1 %c, label %loop, label %done
done:
  store float %acc1, ptr addrspace(1) %po
  ret void
}}"""

UNIFORM_ACC = """
define amdgpu_kernel void @uniform_acc(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %init = load float, ptr addrspace(1) %po
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%k1, %loop]
  %acc = phi float [%init, %entry], [%acc1, %loop]
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %k
  %v = load float, ptr addrspace(1) %pa
  %acc1 = fadd float %v, %acc
  %k1 = add i32 %k, 1
  %c = icmp ult i32 %k1, %n
  br i1 %c, label %loop, label %done
done:
  store float %acc1, ptr addrspace(1) %po
  ret void
}"""

WRAP32 = """
define amdgpu_kernel void @wrap32(ptr addrspace(1) %out, i32 %k0, i32 %kend) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %init = load float, ptr addrspace(1) %po
  br label %loop
loop:
  %k = phi i32 [%k0, %entry], [%k1, %loop]
  %acc = phi float [%init, %entry], [%acc1, %loop]
  %kf = uitofp i32 %k to float
  %acc1 = fadd float %acc, %kf
  %k1 = add i32 %k, 3
  %c = icmp ne i32 %k1, %kend
  br i1 %c, label %loop, label %done
done:
  store float %acc1, ptr addrspace(1) %po
  ret void
}"""

WRAP64 = """
define amdgpu_kernel void @wrap64(ptr addrspace(1) %out, i32 %d) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %init = load float, ptr addrspace(1) %po
  %d64 = zext i32 %d to i64
  %k0 = sub i64 4294967296, %d64
  %kend = add i64 4294967296, %d64
  br label %loop
loop:
  %k = phi i64 [%k0, %entry], [%k1, %loop]
  %acc = phi float [%init, %entry], [%acc1, %loop]
  %kh = lshr i64 %k, 29
  %kt = trunc i64 %kh to i32
  %kf = uitofp i32 %kt to float
  %acc1 = fadd float %acc, %kf
  %k1 = add i64 %k, 8
  %c = icmp ne i64 %k1, %kend
  br i1 %c, label %loop, label %done
done:
  store float %acc1, ptr addrspace(1) %po
  ret void
}"""

WAVE_TRIPS = """
define amdgpu_kernel void @wave_trips(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %lim = add i32 %n, %g
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %init = load float, ptr addrspace(1) %po
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%k1, %loop]
  %acc = phi float [%init, %entry], [%acc1, %loop]
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %k
  %v = load float, ptr addrspace(1) %pa
  %acc1 = fadd float %acc, %v
  %k1 = add i32 %k, 1
  %c = icmp ult i32 %k1, %lim
  br i1 %c, label %loop, label %done
done:
  store float %acc1, ptr addrspace(1) %po
  ret void
}"""

LANE_IND = """
define amdgpu_kernel void @lane_ind(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %init = load float, ptr addrspace(1) %po
  %s = and i32 %l, 3
  %st = add i32 %s, 1
  %pi = getelementptr float, ptr addrspace(1) %a, i32 %i
  %l64 = zext i32 %l to i64
  %l3 = mul i64 %l64, 5
  %q0 = sub i64 4294967200, %l3
  %dq = add i64 %l64, 1
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%k1, %loop]
  %p = phi ptr addrspace(1) [%pi, %entry], [%p1, %loop]
  %q = phi i64 [%q0, %entry], [%q1, %loop]
  %acc = phi float [%init, %entry], [%acc1, %loop]
  %v = load float, ptr addrspace(1) %p
  %qh = lshr i64 %q, 3
  %qt = trunc i64 %qh to i32
  %qf = uitofp i32 %qt to float
  %acc0 = fadd float %acc, %v
  %acc1 = fadd float %acc0, %qf
  %p1 = getelementptr float, ptr addrspace(1) %p, i32 %st
  %q1 = add i64 %q, %dq
  %k1 = add i32 %k, 1
  %c = icmp ult i32 %k1, %n
  br i1 %c, label %loop, label %done
done:
  store float %acc1, ptr addrspace(1) %po
  ret void
}"""

LANE_MAX = f"""
define amdgpu_kernel void @lane_max(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {{
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %init = load float, ptr addrspace(1) %po
  %pi = getelementptr float, ptr addrspace(1) %a, i32 %i
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%k1, %loop]
  %acc = phi float [%init, %entry], [%acc1, %loop]
  %off = mul i32 %k, {NL}
  %off64 = zext i32 %off to i64
  %pa = getelementptr float, ptr addrspace(1) %pi, i64 %off64
  %v = load float, ptr addrspace(1) %pa
  %acc1 = call float @llvm.maxnum.f32(float %acc, float %v)
  %k1 = add i32 %k, 1
  %c = icmp ult i32 %k1, %n
  br i1 %c, label %loop, label %done
done:
  store float %acc1, ptr addrspace(1) %po
  ret void
}}"""

LANE_MAXIMUM = LANE_MAX.replace("@lane_max", "@lane_maximum").replace("@llvm.maxnum.f32", "@llvm.maximum.f32")
LANE_MINIMUM = LANE_MAX.replace("@lane_max", "@lane_minimum").replace("@llvm.maxnum.f32", "@llvm.minimum.f32")

LANE_SEL = LANE_ACC.replace("@lane_acc", "@lane_sel").replace("""  %w = fmul float %v, 3.0
""", """  %lt = fcmp olt float %v, 0.5
  %w = select i1 %lt, float %v, float 2.0
""")
# two compares per iteration whose lane masks the select reads later (LLVM keeps them in two SGPRs): a packed batch
# writes several mask SGPRs back (`_unpack`, all at once)
LANE_SEL2 = LANE_ACC.replace("@lane_acc", "@lane_sel2").replace("""  %w = fmul float %v, 3.0
""", """  %lt = fcmp olt float %v, 0.5
  %gt = fcmp ogt float %v, -0.25
  %v2 = fmul float %v, 3.0
  %x = select i1 %gt, float %v2, float -1.0
  %y = select i1 %lt, float %x, float 2.0
  %z = select i1 %gt, float %y, float %v
  %u = select i1 %lt, float %z, float %v2
  %w = fadd float %u, %y
""")

_MOD: dict = {}


def kernel(name: str):
  if not _MOD: _MOD.update(read_elf(compile_ir(K.module(LANE_ACC, UNIFORM_ACC, WRAP32, WRAP64, WAVE_TRIPS, LANE_IND, LANE_MAX, LANE_MAXIMUM, LANE_MINIMUM, LANE_SEL, LANE_SEL2))[0]))
  return _MOD[name]


def three_ways(name: str, bufs: list[np.ndarray], vals=(), checked=True, batches=True, get_machine: bool = False):
  """Run with batches, block by block and stepped; everything the same; batches: whether one must have run."""
  runs = []
  for loops, blocks in ((True, True), (False, True), (False, False)):
    old = MM.Machine.use_loops
    MM.Machine.use_loops = loops
    try: runs.append(machine(kernel(name), [b.copy() for b in bufs], (NL // 64, 1, 1), (GROUP[0], 1, 1), vals, checked, blocks))
    finally: MM.Machine.use_loops = old
  (m0, o0) = runs[0]
  assert m0.steps == runs[1][0].steps <= runs[2][0].steps   # a batch counts its instructions as the blocks do
  for m, o in runs[1:]:
    for x, y in zip(o0, o): assert x.tobytes() == y.tobytes()
    assert np.array_equal(m0.s, m.s) and np.array_equal(m0.v, m.v) and np.array_equal(m0.scc, m.scc) and np.array_equal(m0.pc, m.pc)
    if checked: assert np.array_equal(m0.vinit, m.vinit)
  assert (m0.batches > 0) == batches, m0.batches
  return m0 if get_machine else o0


@pytest.fixture(params=["accumulate", "fold", "reduce"], autouse=True)
def fold(request, monkeypatch) -> bool:
  """Accumulators by the row's accumulate (few lanes), by its calls iteration by iteration or (an add chain) by one
  np.add.reduce down the stacked operands (many lanes): every way."""
  if request.param != "accumulate": monkeypatch.setattr(LP, "FOLD_LANES", 0)
  if request.param != "reduce": monkeypatch.setattr(LP, "REDUCE_LANES", 1 << 30)
  return request.param != "accumulate"


GROUP = {0: 64}   # work-items per workgroup (of the 64 the kernels index by): 40 leaves 24 lanes of each group's 2nd wave off


@pytest.fixture(params=[64, 40, 8], autouse=True)
def group(request, monkeypatch) -> None:
  """Whole waves, waves with lanes EXEC leaves off (a lane-wise batch computes them and drops their values), and one
  wave of 8 lanes a workgroup (a lane-wise batch packs the enabled lanes of both waves into one)."""
  monkeypatch.setitem(GROUP, 0, request.param)


def same(got: np.ndarray, ref: np.ndarray, out: np.ndarray) -> bool:
  """The work-items that exist hold ref, the others still out."""
  live = np.arange(NL) % 64 < GROUP[0]
  return got.view(np.float32)[live].tobytes() == ref[live].tobytes() and got.view(np.float32)[~live].tobytes() == out[~live].tobytes()


def wide(rng: np.random.Generator, n: int) -> np.ndarray:
  """Floats over a wide range of magnitudes and both signs: sums whose rounding depends on the order of the adds."""
  return (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 9, n)).astype(np.float32)


@pytest.mark.parametrize("checked", [True, False])
def test_lane_accumulators_in_iteration_order(checked):
  rng = np.random.default_rng(1)
  n = 37
  out = wide(rng, NL)
  a = wide(rng, NL * n)
  got = three_ways("lane_acc", [out, a], (n,), checked)
  ref = out.copy()
  for k in range(n):   # the reference: the adds one by one in float32
    v = a[k * NL:(k + 1) * NL]
    ref = (ref + v).astype(np.float32) + (v * np.float32(3)).astype(np.float32)
  assert same(got[0], ref.astype(np.float32), out)
  rev = out.copy()
  for k in reversed(range(n)):
    v = a[k * NL:(k + 1) * NL]
    rev = (rev + v).astype(np.float32) + (v * np.float32(3)).astype(np.float32)
  assert rev.tobytes() != ref.tobytes()   # the inputs do tell the order apart


def test_lane_accumulators_with_nans():
  """NaN accumulators and NaN operands with distinct payloads (acc as the first operand: its payload wins when both are
  NaNs): the same payloads batched, block by block and stepped."""
  rng = np.random.default_rng(10)
  n = 11
  out, a = wide(rng, NL), wide(rng, NL * n)
  out[::5] = nans(list(range(1, NL, 5)))
  a[::7] = nans(list(range(0x100, 0x100 + len(a[::7]))))
  got = three_ways("lane_acc", [out, a], (n,))
  assert np.isnan(got[0].view(np.float32)).any()


def nans(payloads: list[int]) -> np.ndarray:
  return np.array([0x7FC00000 | p for p in payloads], np.uint32).view(np.float32)


def test_accumulator_as_second_operand_with_nans(fold):
  """acc = x + acc (a uniform x in an SGPR must be src0): x + acc == acc + x holds for np.add unless x is a NaN (the
  first operand's payload wins on x86): without NaNs accumulate runs, with them the loop runs block by block (the fold
  calls the row as x + acc: a batch either way)."""
  rng = np.random.default_rng(2)
  n = 20
  out, a = wide(rng, NL), wide(rng, n)
  three_ways("uniform_acc", [out, a], (n,))
  out[::3] = nans(list(range(1, NL, 3)))   # NaN accumulators with distinct payloads
  three_ways("uniform_acc", [out, a], (n,))
  a[5] = nans([0x1234])[0]
  got = three_ways("uniform_acc", [out, a], (n,), batches=fold)
  pay = got[0].view(np.uint32)
  assert (pay[np.arange(NL) % 64 < GROUP[0]] == 0x7FC01234).all()   # x's payload in every lane: x + acc, x first


def test_32_bit_induction_wraps():
  rng = np.random.default_rng(3)
  out = wide(rng, NL)
  got = three_ways("wrap32", [out], ((1 << 32) - 30 - (1 << 32), 30))   # k from 2^32 - 30 by 3 through 0 to 30
  ks = np.arange(20, dtype=np.uint64) * 3 + ((1 << 32) - 30)
  ref = out.copy()
  for k in ks & 0xFFFFFFFF: ref = (ref + np.float32(int(k))).astype(np.float32)
  assert same(got[0], ref, out)


def test_64_bit_induction_carries_across_2_32():
  rng = np.random.default_rng(4)
  out = wide(rng, NL)
  got = three_ways("wrap64", [out], (200,))
  ref = out.copy()
  for k in range((1 << 32) - 200, (1 << 32) + 200, 8): ref = (ref + np.float32((k >> 29) & 0xFFFFFFFF)).astype(np.float32)
  assert same(got[0], ref, out)


def test_vgpr_inductions_per_lane():
  """A per-lane pointer (a 64-bit VGPR pair stepped by a per-lane stride) and a per-lane 64-bit counter whose low word
  wraps at different iterations in different lanes: predicted from the first iteration's change and checked."""
  rng = np.random.default_rng(8)
  n = 30
  out, a = wide(rng, NL), wide(rng, NL + 4 * n)
  got = three_ways("lane_ind", [out, a], (n,))
  ref = out.copy()
  lane = np.arange(NL) % 64
  q = ((1 << 32) - 96 - 5 * lane).astype(np.uint64)
  for k in range(n):
    ref = (ref + a[np.arange(NL) + k * ((lane & 3) + 1)]).astype(np.float32)
    ref = (ref + ((q >> np.uint64(3)) & np.uint64(0xFFFFFFFF)).astype(np.float32)).astype(np.float32)
    q = q + (lane + 1).astype(np.uint64)
  assert same(got[0], ref, out)


@pytest.mark.parametrize("name", ["lane_max", "lane_maximum"])
def test_a_recurrence_that_is_no_induction_runs_split(name):
  """acc = max(acc, x) (maxnum: one v_max_f32; maximum: LLVM's NaN-exact compare/select sequence, softmax's) carries a
  VGPR that is neither an add chain nor linear: the prediction fails its check once (that dispatch runs block by block);
  later dispatches run the loop split (loops.Split): the loads and the counter as one batch, the max chain once per
  iteration; the same buffers, registers and definedness as block by block and stepped, NaN payloads included."""
  LP.LOOPS.clear()
  rng = np.random.default_rng(9)
  a = wide(rng, NL * 12)
  a[::13], a[5::17] = 0.0, -0.0   # zeros of both signs: max's +0 > -0
  a[3::11] = nans([0x1, 0x80000002, 0x3, 0x80000004] * 64)[:a[3::11].size]   # NaNs of both signs and several payloads
  three_ways(name, [wide(rng, NL), a], (12,), batches=False)
  assert any(lp is not None and lp.failed and lp.badv for d in LP.LOOPS.values() for lp in d.values())
  three_ways(name, [wide(rng, NL), a], (12,), batches=True)
  assert any(lp is not None and lp.split is not None for d in LP.LOOPS.values() for lp in d.values())


@pytest.fixture
def waves(monkeypatch) -> list[int]:
  """The wave count of every loop batch run (a packed batch runs on fewer waves than the dispatch)."""
  seen: list[int] = []
  real = LP._batch
  def spy(m, lp, prev, *args, **kw):
    seen.append(m.W)
    return real(m, lp, prev, *args, **kw)
  monkeypatch.setattr(LP, "_batch", spy)
  return seen


@pytest.mark.parametrize("group", [8], indirect=True)   # packing needs waves at most half full: groups of 8 only
def test_packed_lanes(waves):
  """Waves of 8 enabled lanes: the batch runs on the lanes packed into fewer waves (here 2 -> 1), and its lane masks
  (the carry of the address adds: VCC) go back bit by bit: the same registers as block by block."""
  assert GROUP[0] == 8
  rng = np.random.default_rng(11)
  out, a = wide(rng, NL), wide(rng, NL * 13)
  three_ways("lane_acc", [out, a], (13,))
  assert waves and waves[0] == 1
  waves.clear()
  m = three_ways("lane_sel", [out, a], (13,), get_machine=True)   # a compare per lane and iteration: VCC differs by both
  assert waves and waves[0] == 1
  last = a[12 * NL:13 * NL][np.arange(NL) % 64 < 8]   # the last iteration's operands of the live lanes, wave by wave
  assert [int(x) for x in m.s[:, 106]] == [sum(1 << k for k in range(8) if last[8 * w + k] < 0.5) for w in range(2)]


@pytest.mark.parametrize("group", [8], indirect=True)
@pytest.mark.parametrize("by_index", [False, True])
def test_packed_lanes_several_masks(by_index, monkeypatch, waves):
  """A packed batch whose body leaves lane masks in several SGPRs: each goes back to its SGPR bit by bit (`_unpack`
  puts them all back at once), the same SGPRs as block by block and stepped, on both packing paths."""
  if by_index: monkeypatch.setattr(LP, "_first_lanes", lambda lanes: 0)
  rng = np.random.default_rng(14)
  out, a = wide(rng, NL), (rng.standard_normal(NL * 13) * 0.5).astype(np.float32)
  m = three_ways("lane_sel2", [out, a], (13,), get_machine=True)
  assert waves and waves[0] == 1
  lp = next(lp for d in LP.LOOPS.values() for lp in d.values() if lp is not None and lp.block.insts[0].pc and len(lp.block.maskw) >= 2)
  masks = sorted(lp.block.maskw)
  assert len({tuple(int(x) for x in m.s[:, c]) for c in masks}) == len(masks)   # the masks differ: an exchange would show


@pytest.mark.parametrize("group", [8], indirect=True)
def test_packed_lanes_by_index(monkeypatch, waves):
  """The packing's general path (lanes by index, for masks other than every wave's first k lanes; `_unpack`'s `sel`
  copy), forced on the first-8 masks whose slice path the other tests take: the same registers and bytes as block by
  block and stepped."""
  monkeypatch.setattr(LP, "_first_lanes", lambda lanes: 0)
  rng = np.random.default_rng(12)
  out, a = wide(rng, NL), wide(rng, NL * 13)
  for name in ("lane_acc", "lane_sel"):
    waves.clear()
    three_ways(name, [out, a], (13,))
    assert waves and waves[0] == 1   # packed: 2 waves of 8 lanes -> 1


@pytest.mark.parametrize("window", [2, 1 << 12])
def test_trip_count_window_grown_or_wide(window, monkeypatch):
  """The trip count from a window of predicted iterations: one grown 8x from 2 (2, 16, 128 for 37 iterations) and one
  far wider than the loop: the same batch as block by block and stepped."""
  monkeypatch.setattr(LP, "TRIPS0", window)
  rng = np.random.default_rng(15)
  three_ways("lane_acc", [wide(rng, NL), wide(rng, NL * 37)], (37,))


def test_trip_counts_differing_between_waves():
  rng = np.random.default_rng(5)
  three_ways("wave_trips", [wide(rng, NL), wide(rng, 40)], (30,), batches=False)


@pytest.mark.parametrize("row", [np.subtract, lambda a, b: np.add(a, b) * np.float32(2)])
def test_a_changed_row_takes_effect(row, monkeypatch):
  """A seeded bug in v_add_f32's row: the batch folds with the changed ufunc, or is refused (not a ufunc) and the blocks
  use it; either way the result is the changed row's and the same as stepping."""
  rng = np.random.default_rng(6)
  out, a = wide(rng, NL), wide(rng, NL * 9)
  good = three_ways("lane_acc", [out, a], (9,))
  monkeypatch.setitem(X.VALU, "v_add_f32", row)
  for mod, cache in ((MM, "DECODED"), (MM, "BLOCKS"), (LP, "LOOPS")): monkeypatch.setattr(mod, cache, {})   # as a fresh process
  bad = three_ways("lane_acc", [out, a], (9,), batches=isinstance(row, np.ufunc))
  assert good[0].tobytes() != bad[0].tobytes()


def test_fault_in_a_loop_names_the_same_pc_and_lane():
  """Loads past the end of the buffer at iteration 7: the batch is discarded and the fault is the interpreter's."""
  rng = np.random.default_rng(7)
  msgs = []
  for loops in (True, False):
    old = MM.Machine.use_loops
    MM.Machine.use_loops = loops
    try:
      with pytest.raises(MM.WaveFault) as e: machine(kernel("lane_acc"), [wide(rng, NL), wide(rng, NL * 7)], (NL // 64, 1, 1), (64, 1, 1), (9,))
    finally: MM.Machine.use_loops = old
    msgs.append(e.value.what)
  assert msgs[0] == msgs[1] and "MMU fault" in msgs[0] and "global_load" in msgs[0]
