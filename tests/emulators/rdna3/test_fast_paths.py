"""The executor's fast paths against the general ones they stand for, with the same bits: whole-dword global stores
(Machine.store_dwords) against the byte path (Machine.scatter), V_DIV_SCALE's test that no lane is in a case against
the case-by-case path, and a packed loop batch's padding lanes (loops._packed)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from emulators.amd.rdna3 import alu as A
from emulators.amd.rdna3 import blocks as B
from emulators.amd.rdna3 import loops as LP
from emulators.amd.rdna3 import ops as X
from emulators.amd.rdna3.machine import Machine
from tests.emulators.rdna3 import kernels as K
from tests.emulators.rdna3.llvm_util import compile_ir, read_elf
from tests.emulators.rdna3.test_undefined_loads import run_partial

STORES = """
define amdgpu_kernel void @store_overlap(ptr addrspace(1) %out, ptr addrspace(1) %a) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %v = load i32, ptr addrspace(1) %pa
  %j = lshr i32 %i, 1
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %j
  store i32 %v, ptr addrspace(1) %po
  ret void
}

define amdgpu_kernel void @store_vec_masked(ptr addrspace(1) %out, ptr addrspace(1) %a) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %v = load i32, ptr addrspace(1) %pa
  %s = and i32 %l, 3
  %c = icmp ne i32 %s, 2
  br i1 %c, label %then, label %done
then:
  %w = xor i32 %v, 12345
  %x0 = insertelement <4 x i32> poison, i32 %v, i32 0
  %x1 = insertelement <4 x i32> %x0, i32 %w, i32 1
  %x2 = insertelement <4 x i32> %x1, i32 %i, i32 2
  %x3 = insertelement <4 x i32> %x2, i32 %s, i32 3
  %po = getelementptr <4 x i32>, ptr addrspace(1) %out, i32 %i
  store <4 x i32> %x3, ptr addrspace(1) %po, align 16
  br label %done
done:
  ret void
}

define amdgpu_kernel void @load_offsets(ptr addrspace(1) %out, ptr addrspace(1) %a) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %e = mul i32 %i, 12
  %p0 = getelementptr i32, ptr addrspace(1) %a, i32 %e
  %p1 = getelementptr i32, ptr addrspace(1) %p0, i32 4
  %p2 = getelementptr i32, ptr addrspace(1) %p0, i32 8
  %p3 = getelementptr i32, ptr addrspace(1) %p0, i32 5
  %x0 = load <4 x i32>, ptr addrspace(1) %p0, align 16
  %x1 = load <4 x i32>, ptr addrspace(1) %p1, align 16
  %x2 = load <4 x i32>, ptr addrspace(1) %p2, align 16
  %x3 = load i32, ptr addrspace(1) %p3, align 4
  %y0 = xor <4 x i32> %x0, %x1
  %y1 = mul <4 x i32> %y0, %x2
  %z0 = extractelement <4 x i32> %y1, i32 0
  %z1 = extractelement <4 x i32> %y1, i32 1
  %z2 = extractelement <4 x i32> %y1, i32 2
  %z3 = extractelement <4 x i32> %y1, i32 3
  %w0 = add i32 %z0, %z1
  %w1 = sub i32 %z2, %z3
  %w2 = xor i32 %w0, %w1
  %w3 = mul i32 %w2, %x3
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %w3, ptr addrspace(1) %po
  ret void
}

define amdgpu_kernel void @load_below(ptr addrspace(1) %out, ptr addrspace(1) %a) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %e = mul i32 %i, 12
  %e4 = add i32 %e, 4
  %p1 = getelementptr i32, ptr addrspace(1) %a, i32 %e4
  %p0 = getelementptr i32, ptr addrspace(1) %p1, i32 -4
  %p2 = getelementptr i32, ptr addrspace(1) %p1, i32 4
  %x1 = load <4 x i32>, ptr addrspace(1) %p1, align 16
  %x0 = load <4 x i32>, ptr addrspace(1) %p0, align 16
  %x2 = load <4 x i32>, ptr addrspace(1) %p2, align 16
  %y0 = xor <4 x i32> %x0, %x1
  %y1 = mul <4 x i32> %y0, %x2
  %z0 = extractelement <4 x i32> %y1, i32 0
  %z1 = extractelement <4 x i32> %y1, i32 1
  %z2 = extractelement <4 x i32> %y1, i32 2
  %z3 = extractelement <4 x i32> %y1, i32 3
  %w0 = add i32 %z0, %z1
  %w1 = sub i32 %z2, %z3
  %w2 = xor i32 %w0, %w1
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %w2, ptr addrspace(1) %po
  ret void
}"""

_MOD: dict = {}


def kernel(name: str):
  if not _MOD: _MOD.update(read_elf(compile_ir(K.module(STORES))[0]))
  return _MOD[name]


@pytest.mark.parametrize("name, nout", [("store_overlap", 64), ("store_vec_masked", 4 * 128)])
@pytest.mark.parametrize("undef_in", [False, True])
@pytest.mark.parametrize("undef_out", [False, True])
@pytest.mark.parametrize("blocks", [True, False])
def test_store_dwords_same_as_the_byte_path(name, nout, undef_in, undef_out, blocks, monkeypatch):
  """Two lanes storing to one dword (the later lane's value stays), lanes EXEC leaves off, 16-byte stores; inputs and
  outputs partly never written (checked mode: an undefined lane's store is left to the byte path, which marks its
  bytes undefined; a store into a partly undefined buffer marks what it wrote defined): the same bytes, the same
  definedness and the same ranges touched with the fast path as without it."""
  rng = np.random.default_rng(3)
  a = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
  out = rng.integers(0, 2**32, nout, dtype=np.uint64).astype(np.uint32)
  ua = (np.arange(128) % 7 == 3) if undef_in else None
  uo = (np.arange(nout) % 5 == 1) if undef_out else None
  calls: list[bool] = []
  real = Machine.store_dwords
  def spy(self, *args):
    calls.append(r := real(self, *args))
    return r
  monkeypatch.setattr(Machine, "store_dwords", spy)
  m1, r1 = run_partial(kernel(name), [out, a], [uo, ua], (2, 1, 1), (64, 1, 1), blocks=blocks)
  assert any(calls) != undef_in   # the fast path stored, unless a lane's value is undefined (then the byte path)
  monkeypatch.setattr(Machine, "store_dwords", lambda *args: False)
  m2, r2 = run_partial(kernel(name), [out, a], [uo, ua], (2, 1, 1), (64, 1, 1), blocks=blocks)
  for x, y in zip(r1, r2):
    assert x.mem.data.tobytes() == y.mem.data.tobytes()
    i1, i2 = x.mem.init, y.mem.init
    assert (i1 is None) == (i2 is None) and (i1 is None or np.array_equal(i1, i2))
  assert sorted(m1.accesses()) == sorted(m2.accesses())
  assert np.array_equal(m1.v, m2.v) and np.array_equal(m1.vinit, m2.vinit)


def _operands(t: type, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """Numerators and denominators over the whole exponent range but its ends (signs both)."""
  bits, mant, ebits = (np.uint32, 23, 8) if t == np.float32 else (np.uint64, 52, 11)
  emax = (1 << ebits) - 1
  def one() -> np.ndarray:
    e = rng.integers(1, emax, n).astype(bits)
    m = rng.integers(0, 1 << mant, n, dtype=np.uint64).astype(bits)
    s = rng.integers(0, 2, n).astype(bits) << bits(8 * np.dtype(bits).itemsize - 1)
    return (s | (e << bits(mant)) | m).view(t)
  return one(), one()


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_div_scale_without_cases_same_as_case_by_case(t, monkeypatch):
  """Operands where no lane is in a case (the quotient far from the range ends) take the fast return; the same result
  and VCC as the case-by-case path (forced by one more lane with a zero numerator, dropped after), on all three operand
  choices LLVM uses (S0 = the denominator or the numerator). Operands over the whole range go both ways: the same."""
  rng = np.random.default_rng(8)
  n, d = _operands(t, 4000, rng)
  near = rng.integers(0, 2, 4000).astype(bool)   # half the lanes with quotients near 1 (the usual): no case
  with np.errstate(over="ignore"): n = np.where(near, d * t(1.5), n)
  for s0 in (d, n):
    slow = A.div_scale(np.append(s0, t(1)), np.append(d, t(1)), np.append(n, t(0)))
    got = A.div_scale(s0, d, n)
    assert got[0].tobytes() == slow[0][:-1].tobytes() and np.array_equal(got[1], slow[1][:-1])
  ok = near & (np.abs(np.log2(np.abs(d.astype(np.float64)))) < 10)
  def no(*args): raise AssertionError("the case-by-case path ran")
  monkeypatch.setattr(A, "_denorm", no)
  for s0 in (d[ok], n[ok]):
    r, vcc = A.div_scale(s0, d[ok], n[ok])
    assert r.tobytes() == s0.tobytes() and not vcc.any()


def test_packed_batch_runs_every_lane(monkeypatch):
  """The packed machine enables every lane (its last wave's rest are copies of the first lane, dropped after) and runs
  the loop's first iteration as well as the batch: the same registers, lane masks and steps as block by block and
  stepped (test_loops.three_ways), and no masked write in the batch."""
  from tests.emulators.rdna3 import test_loops as TL
  monkeypatch.setitem(TL.GROUP, 0, 8)   # one wave of 8 lanes a workgroup: both waves' 16 lanes packed into one wave
  execs = []
  real = LP._batch
  def spy(m, lp, prev, *args, **kw):
    execs.append(m.s[:, 126].copy())
    return real(m, lp, prev, *args, **kw)
  monkeypatch.setattr(LP, "_batch", spy)
  firsts = []
  real_first = LP.first_packed
  def spy_first(m, lp, b):
    firsts.append(got := real_first(m, lp, b))
    return got
  monkeypatch.setattr(LP, "first_packed", spy_first)
  rng = np.random.default_rng(12)
  for name in ("lane_acc", "lane_sel"):
    firsts.clear()
    TL.three_ways(name, [TL.wide(rng, TL.NL), TL.wide(rng, TL.NL * 11)], (11,))
    assert execs and all((e == 0xFFFFFFFF).all() for e in execs)
    assert 1 in firsts   # the loop's first iteration ran packed too (loops.first_packed), then the batch



@pytest.mark.parametrize("name", ["div_f32", "div_f64"])
@pytest.mark.parametrize("lanes", [64, 40])
def test_division_inline_in_blocks_same_as_stepped(name, lanes):
  """V_DIV_SCALE/V_DIV_FMAS inline in blocks (blocks._div_inline) against the interpreter's handler: quotients in the
  rescaling range, specials (zeros, infinities, NaN, denormals) and ordinary ones, every lane or 24 of each 64 off; the
  same buffers, registers and definedness either way."""
  from emulators.amd.rdna3 import machine as MM
  from tests.emulators.rdna3.test_blocks import same_either_way
  from tests.emulators.rdna3.test_execute import NP, N, inputs, kernels_of
  t = NP[K.ELEMENTWISE[name][1]]
  a, b = inputs(t, np.random.default_rng(4))
  fi = np.finfo(t)
  a[4:12] = [fi.max, fi.tiny, fi.tiny / t(4), np.inf, np.nan, -fi.max, 1, fi.smallest_subnormal]
  b[4:12] = [fi.tiny, fi.max, t(3), t(2), t(1), fi.tiny / t(8), np.inf, fi.max]
  for checked in (True, False):
    m = same_either_way(kernels_of("elementwise")[name], [np.zeros(N, t), a, b], (N // 64, 1, 1), (lanes, 1, 1), checked=checked)
  src = "".join(blk.source for blk in MM.BLOCKS[(m.code, m.nv)].values() if blk is not None)
  assert "divscale(" in src and "A.div_fmas(" in src


def test_fma64_when_c_plus_the_product_head_is_exact(monkeypatch):
  """The Newton steps of a division (1 - d*r, n - d*q: c + the product's head is exact by Sterbenz) take the f64 fma's
  short path (no round-to-odd sum): bit for bit the exact per-lane rational result; and operands mixing both forms."""
  rng = np.random.default_rng(13)
  d = np.ldexp(rng.uniform(1, 2, 3000), rng.integers(-300, 300, 3000)) * np.where(rng.random(3000) < 0.5, -1, 1)
  r = 1.0 / d
  n = np.ldexp(rng.uniform(1, 2, 3000), rng.integers(-300, 300, 3000))
  q = n / d
  def no(*args): raise AssertionError("the round-to-odd path ran")
  with monkeypatch.context() as mp:
    mp.setattr(A, "_add_odd", no)
    for x, y, z in ((-d, r, np.ones_like(d)), (-d, q, n)):
      np.testing.assert_array_equal(A.fma(x, y, z).view(np.uint64), A._fma64_exact(x, y, z).view(np.uint64))
  x, y, z = -d, np.where(rng.random(3000) < 0.5, r, rng.standard_normal(3000)), np.ones_like(d)   # some lanes inexact
  np.testing.assert_array_equal(A.fma(x, y, z).view(np.uint64), A._fma64_exact(x, y, z).view(np.uint64))


def test_fma64_with_a_short_factor_as_exact(monkeypatch):
  """A factor of at most 26 significant bits (alu._short: a float32 widened, a division's residual) is not split: the
  f64 fma with such a factor in either place, the other any, c random, cancelling or at a tie of the final rounding, is
  bit for bit the exact per-lane rational result; the short path runs (the general split of both factors would fail)."""
  rng = np.random.default_rng(31)
  n = 3000
  s = np.ldexp(rng.integers(1 << 25, 1 << 26, n).astype(np.float64), rng.integers(-200, 200, n)) * np.where(rng.random(n) < 0.5, -1, 1)
  s[:500] = rng.standard_normal(500).astype(np.float32)   # float32 values (24 bits)
  w = np.ldexp(rng.uniform(1, 2, n), rng.integers(-200, 200, n))
  c = np.where(rng.random(n) < 0.4, -(s * w) * (1 + rng.integers(-3, 4, n) * 2.0 ** -52), np.ldexp(rng.standard_normal(n), rng.integers(-250, 250, n)))
  c[600:900], s[600:900] = 1.0, 2.0 ** -27   # s*w at half an ulp of c, or next to it: ties of the final rounding
  w[600:900] = 2.0 ** -26 * (1 + rng.integers(-1, 2, 300) * 2.0 ** -52)
  d = s[:500]
  r = 1.0 / d
  e = A._fma64_exact(-d, r, np.ones_like(d))   # a residual: short too
  assert A._short(s) and A._short(e) and not A._short(w)
  split = A._split
  def split_short(x):
    assert not A._short(x), "a short factor was split"
    return split(x)
  monkeypatch.setattr(A, "_split", split_short)
  for x, y, z in ((s, w, c), (w, s, c), (-d, r, np.ones_like(d)), (r, e, r), (e, r, r)):
    np.testing.assert_array_equal(A.fma(x, y, z).view(np.uint64), A._fma64_exact(x, y, z).view(np.uint64))


@pytest.mark.parametrize("name", sorted(B.NARROW))
def test_narrow_integer_rows_as_the_rows(name):
  """blocks.NARROW: each uint32 ufunc chain a block runs for an integer VALU row gives the row's result as the register
  keeps it (its low 32 bits) on edge and random operands (wrapping sums, shift counts of 32 and more, all ones), both
  into a register (out=) and as a value; in a block, the row itself runs where it is not the table's (test_injection)."""
  rng = np.random.default_rng(41)
  edge = np.array([0, 1, 2, 31, 32, 33, 63, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF], np.uint32)
  k = 3 if "{2}" in B.NARROW[name][1] else 2
  grid = np.array(np.meshgrid(*[edge] * k)).reshape(k, -1)   # every combination of edge values
  ops = [np.concatenate([grid[j], rng.integers(0, 2 ** 32, 3000, dtype=np.uint64).astype(np.uint32)]) for j in range(k)]
  r = np.asarray(X.VALU[name](*ops))
  want = r.astype(np.int64 if r.dtype.kind == "i" else np.uint64).astype(np.uint32)   # the register's 32 bits
  names = [f"a{j}" for j in range(k)]
  env = {"np": np, "SHIFT5": np.uint32(31), **dict(zip(names, ops))}
  got = eval(B.NARROW[name][1].format(*names, o=""), env)
  assert got.dtype == np.uint32 and np.array_equal(got, want)
  out = np.zeros_like(want)
  eval(B.NARROW[name][1].format(*names, o=", out=out"), {**env, "out": out})
  assert np.array_equal(out, want)
  assert B.NARROW[name][0] is X.VALU[name]


def test_add_odd_rounds_to_odd():
  """alu._add_odd (the integer-op step toward the exact sum) against exact rational arithmetic rounded to odd: random
  sums, exact ones, both signs, sums that are powers of two and cancellations."""
  rng = np.random.default_rng(37)
  n = 4000
  a = np.ldexp(rng.uniform(1, 2, n), rng.integers(-40, 40, n)) * np.where(rng.random(n) < 0.5, -1, 1)
  b = np.ldexp(rng.uniform(1, 2, n), rng.integers(-100, 40, n)) * np.where(rng.random(n) < 0.5, -1, 1)
  b[:300] = -a[:300] * (1 + rng.integers(-2, 3, 300) * 2.0 ** -52)
  b[300:600] = np.ldexp(1.0, rng.integers(-120, -50, 300)) * np.where(rng.random(300) < 0.5, -1, 1)
  a[300:600] = np.ldexp(1.0, rng.integers(-2, 3, 300)) * np.where(rng.random(300) < 0.5, -1, 1)
  got = A._add_odd(a.copy(), b.copy())
  for x, y, g in zip(a.tolist(), b.tolist(), got.tolist()):
    ex = Fraction(x) + Fraction(y)
    f = float(ex)
    if Fraction(f) != ex and int(np.float64(f).view(np.uint64)) % 2 == 0:   # inexact, even: the odd neighbour toward ex
      f = float(np.nextafter(f, np.inf if ex > Fraction(f) else -np.inf))
    assert g == f and (g != 0 or np.signbit(g) == np.signbit(f) or ex != 0), (x, y, g, f)


def test_block_before_a_loop_ends_at_the_loop_head():
  """Code that runs into a loop (no branch between them) is a block up to the loop's head, and the loop a block of its
  own that loops.py takes as a one-block loop (its first iteration included); the same results as stepped."""
  from emulators.amd.rdna3 import blocks as B
  from emulators.amd.rdna3 import machine as MM
  from emulators.amd.rdna3.decode import branch_target
  from tests.emulators.rdna3 import test_loops as TL
  rng = np.random.default_rng(14)
  m = TL.three_ways("lane_acc", [TL.wide(rng, TL.NL), TL.wide(rng, TL.NL * 9)], (9,), get_machine=True)
  blks = MM.BLOCKS[(m.code, m.nv)]
  entry = blks[0]
  head = B.build(m, entry.insts[-1].pc + entry.insts[-1].size)   # where the entry block ends
  assert entry.insts[-1].op.name not in B.TERMINATORS
  assert head.insts[-1].op.name.startswith("s_cbranch") and branch_target(head.insts[-1]) == entry.insts[-1].pc + entry.insts[-1].size
  assert LP.analyze(m, branch_target(head.insts[-1]), head) is not None


@pytest.mark.parametrize("name", ["uniform_acc", "lane_acc"])
def test_uniform_scalar_loads_same_as_the_general_path(name, monkeypatch):
  """Scalar loads of one address in every wave (the kernel arguments; a loop's uniform loads) read once
  (execute._smem_uniform): the same SGPRs, registers and buffers as the per-wave path, loops and blocks on or off;
  a loop batch's loads of different addresses per wave take the general path."""
  from emulators.amd.rdna3 import execute as E
  from tests.emulators.rdna3 import test_loops as TL
  rng = np.random.default_rng(15)
  bufs = [TL.wide(rng, TL.NL), TL.wide(rng, TL.NL * 9)]
  calls: list[bool] = []
  real = E._smem_uniform
  def spy(*args):
    calls.append(r := real(*args))
    return r
  monkeypatch.setattr(E, "_smem_uniform", spy)
  m1 = TL.three_ways(name, bufs, (9,), get_machine=True)
  assert True in calls
  monkeypatch.setattr(E, "_smem_uniform", lambda *args: False)
  m2 = TL.three_ways(name, bufs, (9,), get_machine=True)
  assert np.array_equal(m1.s, m2.s) and np.array_equal(m1.v, m2.v) and sorted(m1.accesses()) == sorted(m2.accesses())


def test_split_loop_inner_runs_same_as_block_by_block(monkeypatch):
  """A split loop runs from its first iteration (loops.split_from_start) and its carried part's middle iterations as
  an inner block (no entry test, no mask or definedness writes at its end: loops.Split.cinner): the same buffers,
  registers, lane masks, definedness and steps as block by block and stepped (softmax's NaN-exact max: NaN payloads of
  both signs, signed zeros), with lanes EXEC leaves off too."""
  from tests.emulators.rdna3 import test_loops as TL
  starts = []
  real = LP.split_from_start
  def spy(*args):
    starts.append(r := real(*args))
    return r
  monkeypatch.setattr(LP, "split_from_start", spy)
  for group in (64, 40):
    TL.GROUP[0] = group
    try:
      LP.LOOPS.clear()
      rng = np.random.default_rng(16)
      a = TL.wide(rng, TL.NL * 12)
      a[::13], a[5::17] = 0.0, -0.0
      a[3::11] = TL.nans([0x1, 0x80000002, 0x3, 0x80000004] * 64)[:a[3::11].size]
      TL.three_ways("lane_maximum", [TL.wide(rng, TL.NL), a], (12,), batches=False)
      TL.three_ways("lane_maximum", [TL.wide(rng, TL.NL), a], (12,), batches=True)
      splits = [lp.split for d in LP.LOOPS.values() for lp in d.values() if lp is not None and lp.split is not None]
      assert splits and all(sp.cinner is not None for sp in splits) and 1 in starts
    finally: TL.GROUP[0] = 64


@pytest.mark.parametrize("name, data", [("lane_maximum", "plain"), ("lane_minimum", "plain"), ("lane_maximum", "special"), ("lane_minimum", "special")])
@pytest.mark.parametrize("group", [64, 40])
def test_split_loop_chain_by_a_checked_scan(name, data, group, monkeypatch):
  """A split loop's carried chain (one VGPR: llvm.maximum/minimum's compare-and-select sequence) over its middle
  iterations from a guessed fold (loops.SCANS: maximum first, minimum at the next dispatch once maximum failed), used only
  where one run of the carried part over those iterations gives every guess back: the same buffers, registers, lane
  masks, definedness and steps as block by block and stepped, whether the guess holds (plain data) or fails somewhere
  (NaNs of both signs and payloads, signed zeros: the stepped chain from there)."""
  from tests.emulators.rdna3 import test_loops as TL
  monkeypatch.setitem(TL.GROUP, 0, group)
  got = []
  real = LP._scan
  def spy(*args):
    got.append((args[1].scan, r := real(*args)))
    return r
  monkeypatch.setattr(LP, "_scan", spy)
  LP.LOOPS.clear()
  rng = np.random.default_rng(21)
  for k in range(4):
    a = TL.wide(rng, TL.NL * 12)
    if data == "special":
      a[k::13], a[5::17] = 0.0, -0.0
      a[3 + k::29] = TL.nans([0x1, 0x80000002, 0x3, 0x80000004] * 64)[:a[3 + k::29].size]
    TL.three_ways(name, [TL.wide(rng, TL.NL), a], (12,), batches=k > 0)
  if data == "plain":   # the first guess that holds is kept; one that failed is not tried again
    want = [(0, True)] * 3 if name == "lane_maximum" else [(0, False), (1, True), (1, True)]
    assert got == want, got
  else: assert got and (0, False) in got


@pytest.mark.parametrize("name, bufs", [("uniform_acc", (1, 40)), ("lane_ind", (1, 1 + 4 * 30 // 128 + 1)), ("lane_acc", (1, 30))])
@pytest.mark.parametrize("group", [64, 40, 8])
def test_loop_batch_from_its_first_iteration(name, bufs, group, monkeypatch):
  """A loop whose carried registers the scalar instructions and the vector ones computing its inductions (per-lane
  64-bit pointers and counters wrapping at different iterations: lane_ind) determine runs as one batch from its first
  iteration (loops.dry_prev: those instructions on copies of the registers give the step), on the waves as they are or
  packed: the same buffers, registers, SCC, PC, definedness and steps as block by block and stepped."""
  from tests.emulators.rdna3 import test_loops as TL
  monkeypatch.setitem(TL.GROUP, 0, group)
  monkeypatch.setattr(LP, "DRY_SHARE", 1)   # these small bodies are mostly induction work: a dry run of any size
  got = []
  real = LP.dry_prev
  def spy(*args):
    got.append((r := real(*args)) is not None)
    return r
  monkeypatch.setattr(LP, "dry_prev", spy)
  LP.LOOPS.clear()
  rng = np.random.default_rng(17)
  TL.three_ways(name, [TL.wide(rng, TL.NL * k) for k in bufs[:1]] + [TL.wide(rng, bufs[1] if name == "uniform_acc" else TL.NL * bufs[1])], (30,))
  assert True in got


@pytest.mark.parametrize("name, bufs", [("uniform_acc", (1, 40)), ("lane_ind", (1, 1 + 4 * 30 // 128 + 1)), ("lane_acc", (1, 30))])
@pytest.mark.parametrize("group", [64, 40, 8])
@pytest.mark.parametrize("wrong", [False, True])
def test_loop_batch_from_kept_steps(name, bufs, group, wrong, monkeypatch):
  """A loop's next dispatch from its first iteration takes the steps the last such batch took (loops._kept_prev)
  instead of the dry run of its scalar work, on the waves as they are or packed (group 8): the same buffers, registers, SCC, PC, definedness and steps as block by
  block and stepped. Kept steps that do not hold (wrong: each one off by 4) are caught by the batch's checks: nothing
  changes, the loop is marked never to guess again, and the dry run's batch runs as before (same results)."""
  from tests.emulators.rdna3 import test_loops as TL
  monkeypatch.setitem(TL.GROUP, 0, group)
  monkeypatch.setattr(LP, "DRY_SHARE", 1)
  LP.LOOPS.clear()
  rng = np.random.default_rng(23)
  bs = [TL.wide(rng, TL.NL * k) for k in bufs[:1]] + [TL.wide(rng, bufs[1] if name == "uniform_acc" else TL.NL * bufs[1])]
  TL.three_ways(name, bs, (30,))   # the dry run's batch, whose steps are kept
  lps = [lp for d in LP.LOOPS.values() for lp in d.values() if lp is not None and lp.steps is not None]
  assert lps and not any(lp.noguess for lp in lps)
  if wrong:
    for lp in lps:
      w, ss, vs = lp.steps
      assert ss or vs
      lp.steps = (w, {r: x + np.uint64(4) for r, x in ss.items()}, {r: x + np.uint64(4) for r, x in vs.items()})
  got = _batches(monkeypatch)
  TL.three_ways(name, bs, (30,))
  if wrong: assert got == [(True, False), (False, True)] and all(lp.noguess and lp.steps is None for lp in lps), got
  else: assert got == [(True, True)] and not any(lp.noguess for lp in lps), got


def _batches(monkeypatch) -> list[tuple[bool, bool]]:
  """(guessed, kept) of each loops._batch call from now on."""
  got: list[tuple[bool, bool]] = []
  real = LP._batch
  def spy(*args, **kw):
    got.append((kw.get("guess", False), r := real(*args, **kw)))
    return r
  monkeypatch.setattr(LP, "_batch", spy)
  return got


def test_loop_batch_kept_steps_other_trip_count(monkeypatch):
  """Kept steps (loops._kept_prev) hold whatever the trip count: a dispatch of the same loop with another count (a
  kernel argument) guesses them and its batch runs (the exit compare on the predictions gives the new count); the
  same results as block by block and stepped."""
  from tests.emulators.rdna3 import test_loops as TL
  LP.LOOPS.clear()
  rng = np.random.default_rng(25)
  bs = [TL.wide(rng, TL.NL), TL.wide(rng, TL.NL * 37)]
  TL.three_ways("lane_acc", bs, (30,))
  got = _batches(monkeypatch)
  TL.three_ways("lane_acc", bs, (37,))
  assert got == [(True, True)], got


@pytest.mark.parametrize("g", [32, 16, 8])
def test_f64_fma_once_a_group_same_as_every_lane(g):
  """f64 fma on operands whose bits are the same in each group of g lanes (alu._per_group: once a group, copied to
  its lanes) against `_fma64` on every lane: the same bits, over ordinary values, zeros of both signs, infinities, NaNs
  with payloads, denormals and operands near the range ends (the exact per-lane path); a constant and a per-wave
  operand broadcast. Operands differing in one lane by sign of zero or NaN payload only take the every-lane path."""
  rng = np.random.default_rng(24)
  W = 64
  special = np.array([0.0, -0.0, np.inf, -np.inf, 5e-324, -2.5e-310, 1.7e308, 2.0 ** -600, 3.0, -1.5], np.float64)
  nans = np.array([0x7FF8000000000001, 0xFFF0000000000002], np.uint64).view(np.float64)
  def grouped() -> np.ndarray:
    vals = (rng.standard_normal(W * 32 // g) * 10.0 ** rng.integers(-30, 30, W * 32 // g)).astype(np.float64)
    k = rng.integers(0, vals.size, 12)
    vals[k[:10]], vals[k[10:]] = special, nans
    return np.repeat(vals, g).reshape(W, 32)
  a, b, c = grouped(), grouped(), grouped()
  for ops in ((a, b, c), (-a, b, np.float64(1.0).reshape(1, 1)), (a, np.ascontiguousarray(b[:, :1]) if g == 32 else b, c)):
    got = A._per_group(*ops)
    assert got is not None and got[1] <= g and 32 % got[1] == 0
    assert A.fma(*ops).view(np.uint64).tobytes() == A._fma64(*ops).view(np.uint64).tobytes()
  for rest, bad in ((0, 0x8000000000000000), (0x7FF8000000000001, 0x7FF8000000000003)):   # -0.0 among +0.0; a NaN payload among another
    x = a.copy()
    x.view(np.uint64)[5], x.view(np.uint64)[5, 3] = rest, bad
    assert A._per_group(x, b, c) is None
    assert A.fma(x, b, c).view(np.uint64).tobytes() == A._fma64(x, b, c).view(np.uint64).tobytes()


@pytest.mark.parametrize("n", ["v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"])
def test_carry_ops_in_uint32_against_integers(n):
  """execute.carry_op in uint32 (result, carry/borrow out) against Python integers: random operands and the edges
  (0, 1, 2^32 - 1, equal operands), carry-in both ways."""
  from emulators.amd.rdna3 import execute as E
  rng = np.random.default_rng(18)
  edge = np.array([0, 1, 0xFFFFFFFF, 0xFFFFFFFE, 0x80000000], np.uint32)
  a = np.concatenate([rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32), np.repeat(edge, 5)])
  b = np.concatenate([rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32), np.tile(edge, 5)])
  cin = rng.random(a.size) < 0.5 if "_ci_" in n else None
  r, cy = E.carry_op(n, a, b, cin)
  for k in range(a.size):
    x, y, c = int(a[k]), int(b[k]), int(cin[k]) if cin is not None else 0
    if "subrev" in n: x, y = y, x
    t = x + y + c if "add" in n else x - y - c
    assert int(r[k]) == t % (1 << 32) and bool(cy[k]) == (t >= 1 << 32 if "add" in n else t < 0), (n, x, y, c)


@pytest.mark.parametrize("t", [np.float16, np.float32, np.float64])
def test_ordered_unordered_compares(t):
  """v_cmp_o/v_cmp_u (ops.FCMP, by numpy's NaN-propagating maximum): unordered exactly where either operand is a NaN
  (quiet or signaling, either sign), over every pair of special and ordinary values."""
  from emulators.amd.rdna3 import ops as X
  bits = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}[t]
  snan = np.array([{np.float16: 0x7C01, np.float32: 0x7F800001, np.float64: 0x7FF0000000000001}[t]], bits).view(t)[0]
  vals = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, -np.nan, snan, np.finfo(t).max, np.finfo(t).smallest_subnormal], t)
  a, b = np.meshgrid(vals, vals)
  want = np.isnan(a) | np.isnan(b)
  assert np.array_equal(X.FCMP["u"](a, b), want) and np.array_equal(X.FCMP["o"](a, b), ~want)


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_div_fixup_without_cases_same_as_case_by_case(t, monkeypatch):
  """V_DIV_FIXUP's whole-array test that no lane is in a case (alu.div_fixup) against the case-by-case path (forced
  by one more lane with a NaN estimate, dropped after): operands over the whole exponent range, denormal numerators and
  denominators, quotients near the tiny limit; and the test taken where it should be (ordinary quotients)."""
  rng = np.random.default_rng(19)
  n, d = _operands(t, 4000, rng)
  fi = np.finfo(t)
  d[:200] = fi.smallest_subnormal * rng.integers(1, 1000, 200)   # denormal denominators
  n[200:400] = fi.smallest_subnormal * rng.integers(1, 1000, 200)   # denormal numerators
  with np.errstate(all="ignore"): q = (n / d).astype(t)
  for lo, hi in ((0, 4000), (0, 200), (200, 400), (400, 4000)):
    x, y, z = q[lo:hi], d[lo:hi], n[lo:hi]
    got = A.div_fixup(x, y, z)
    full = A.div_fixup(np.append(x, t(np.nan)), np.append(y, t(1)), np.append(z, t(1)))
    assert got.tobytes() == full[:-1].tobytes()
  n2, d2 = (rng.standard_normal(4000) * 10.0 ** rng.integers(-8, 8, 4000)).astype(t), rng.standard_normal(4000).astype(t)
  q2 = (n2 / d2).astype(t)
  monkeypatch.setattr(A, "_biased_exp", lambda x: (_ for _ in ()).throw(AssertionError("the case-by-case path ran")))
  r = A.div_fixup(q2, d2, n2)
  assert r.tobytes() == np.where(np.signbit(d2) ^ np.signbit(n2), -np.abs(q2), np.abs(q2)).tobytes()


def test_fma64_range_test_by_sign_same_as_by_magnitude():
  """alu._all_in (the f64 fma's whole-array operand test) and alu._mag_range: |x|'s range from x's min and max where
  every element has one sign, the same answer as from |x| itself over signed zeros, range ends, infinities, NaN and
  subnormals, both signs."""
  def by_abs(x, lo, hi):
    t = np.abs(x)
    return bool(t.min() >= lo and t.max() <= hi)
  rng = np.random.default_rng(25)
  vals = np.array([0.0, -0.0, 1.0, 2.0 ** -450, 2.0 ** 450, 2.0 ** -451, 2.0 ** 451, np.inf, np.nan, 5e-324, 1e300, 2.0 ** -960])
  seen = set()
  for _ in range(4000):
    x = rng.choice(vals, rng.integers(1, 5)) * rng.choice([1.0, -1.0], 4)[:1]
    if rng.random() < 0.3: x = x * rng.choice([1.0, -1.0], x.size)
    for lo, hi in ((2.0 ** -450, 2.0 ** 450), (2.0 ** -960, np.finfo(np.float64).max)):
      got = A._all_in(x, lo, hi)
      assert got == by_abs(x, lo, hi), (x, lo, hi)
      seen.add(got)
    # alu._mag_range (div_scale's and div_fixup's operand test): |x|'s smallest and largest, NaN where |x|'s are
    t = np.abs(x)
    np.testing.assert_array_equal(np.array(A._mag_range(x)), np.array([t.min(), t.max()]))
  assert seen == {True, False}


@pytest.mark.parametrize("group", [64, 40])
@pytest.mark.parametrize("undef_in", [False, True])
@pytest.mark.parametrize("name", ["load_offsets", "load_below"])
def test_loads_at_offsets_of_one_base_same_as_stepped(group, undef_in, name, monkeypatch):
  """Loads at several offsets of one VGPR pair base in a block (Machine.load_dwords with base and boff: the base's
  address facts kept from the first load, `_amemo`; 16-byte loads 16 and 32 bytes on, a dword 20 bytes on: computed
  afresh; load_below: 16 bytes below the kept load, then 16 above), lanes EXEC leaves off, inputs partly never written
  (checked mode: the per-dword test from the kept offsets): the same bytes, registers, definedness and accesses as
  stepped (no kept facts)."""
  rng = np.random.default_rng(29)
  a = rng.integers(0, 2**32, 12 * 128, dtype=np.uint64).astype(np.uint32)
  out = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
  # never written: dword 9 of every 5th lane's 12 (read by the load 32 bytes on only: the load 16 bytes on finds the span
  # not all defined and tests its dwords from the kept offsets)
  ua = ((np.arange(a.size) % 12 == 9) & (np.arange(a.size) // 12 % 5 == 2)) if undef_in else None
  hits: list[bool] = []
  real = Machine.load_dwords
  def spy(self, idx, addr, nd, lanes, r0, base=None, boff=0):
    mm = self._amemo
    kept = addr is None and mm is not None and mm[0] is base and boff != mm[3]
    got = real(self, idx, addr, nd, lanes, r0, base, boff)
    # the kept facts served it (none computed afresh); load_below: a load below the kept one
    hits.append(kept and got and self._amemo is mm and (name != "load_below" or (boff - mm[3]) % (1 << 64) >= 1 << 63))
    return got
  monkeypatch.setattr(Machine, "load_dwords", spy)
  if name == "load_below": a[:12 * 4] = 0   # lane 0's load 16 bytes below its base reads a's first dwords
  m1, r1 = run_partial(kernel(name), [out, a], [None, ua], (2, 1, 1), (group, 1, 1), blocks=True)
  assert any(hits)
  m2, r2 = run_partial(kernel(name), [out, a], [None, ua], (2, 1, 1), (group, 1, 1), blocks=False)
  for x, y in zip(r1, r2):
    assert x.mem.data.tobytes() == y.mem.data.tobytes()
    i1, i2 = x.mem.init, y.mem.init
    assert (i1 is None) == (i2 is None) and (i1 is None or np.array_equal(i1, i2))
  assert sorted(m1.accesses()) == sorted(m2.accesses())
  assert np.array_equal(m1.v, m2.v) and np.array_equal(m1.vinit, m2.vinit)


SALU_CHAIN = """
define amdgpu_kernel void @salu_chain(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g1 = mul i32 %g, 37
  %g2 = add i32 %g1, %n
  %q = sdiv i32 %g2, 7
  %r = srem i32 %g2, 5
  %s = shl i32 %q, 3
  %t = ashr i32 %g2, 2
  %u = lshr i32 %g2, 1
  %w = xor i32 %s, %t
  %x = and i32 %w, %u
  %y = sub i32 %x, %r
  %z = or i32 %y, 3
  %zz = and i32 %z, 63
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %zz
  %v = load i32, ptr addrspace(1) %pa
  %g64 = mul i32 %g, 64
  %i = add i32 %l, %g64
  %vv = add i32 %v, %y
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %vv, ptr addrspace(1) %po
  ret void
}"""


@pytest.mark.parametrize("n", [0, 5, -1000, 2**31 - 40])
def test_salu_direct_in_blocks_same_as_stepped(n, monkeypatch):
  """Per-wave scalar arithmetic (sdiv/srem/shifts of the workgroup id, a scalar load at a per-wave address: conv2d's
  index math) as blocks.SALU32 lines on the SGPR columns, dead SCC writes dropped: the same SGPRs, SCC, VGPRs and bytes
  as stepped, and as blocks without the direct rows."""
  from emulators.amd.rdna3 import blocks as B
  from tests.emulators.rdna3.test_undefined_loads import run_partial
  k = read_elf(compile_ir(K.module(SALU_CHAIN))[0])["salu_chain"]
  rng = np.random.default_rng(21)
  a = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
  out = np.zeros(64 * 9, np.uint32)
  runs = [run_partial(k, [out, a], [None, None], (9, 1, 1), (64, 1, 1), (n,), blocks=b) for b in (True, False)]
  texts = [b.source for b in runs[0][0].blocks.values() if b is not None]
  assert any("s[:, " in t and "] = r" in t for t in texts) and any("SCC: overwritten" in t for t in texts)
  monkeypatch.setattr(B, "SALU32", {})
  runs.append(run_partial(k, [out, a], [None, None], (9, 1, 1), (64, 1, 1), (n,), blocks=True))
  (m0, r0) = runs[0]
  for m, r in runs[1:]:
    assert r0[0].mem.data.tobytes() == r[0].mem.data.tobytes()
    assert np.array_equal(m0.s, m.s) and np.array_equal(m0.scc, m.scc) and np.array_equal(m0.v, m.v) and m0.steps == m.steps


@pytest.mark.parametrize("name", sorted(__import__("emulators.amd.rdna3.blocks", fromlist=["SALU32"]).SALU32))
def test_salu32_rows_same_as_the_uint64_rows(name):
  """Each blocks.SALU32 row (uint32 on the SGPR columns) against ops.SALU's row (or execute.sopk_op's s_addk_i32) on
  random and edge operands, SCC in and out, with SGPR columns and with uint32 constants as either operand."""
  from emulators.amd.rdna3 import blocks as B
  from emulators.amd.rdna3 import execute as E
  from emulators.amd.rdna3 import ops as X
  rng = np.random.default_rng(22)
  edge = np.array([0, 1, 2, 31, 32, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFF, 0xFFFFFFFE], np.uint32)
  a = np.concatenate([rng.integers(0, 2**32, 400, dtype=np.uint64).astype(np.uint32), np.repeat(edge, edge.size)])
  b = np.concatenate([rng.integers(0, 2**32, 400, dtype=np.uint64).astype(np.uint32), np.tile(edge, edge.size)])
  scc = rng.random(a.size) < 0.5
  res, sccx, reads = B.SALU32[name]
  def direct(A, B_, sc):
    ns = dict(B.RUNTIME, A=A, B=B_, scc=sc.copy(), r=None)
    if reads: ns["sc32"] = sc.astype(np.uint32)
    r = np.broadcast_to(eval(res, ns), sc.shape)
    ns["r"] = r
    return r, (None if sccx is None else np.broadcast_to(eval(sccx, ns), sc.shape))
  def ref(x, y, sc):
    if name == "s_addk_i32":
      k = int(y) - (1 << 32) if int(y) & 0x80000000 else int(y)
      return E.sopk_op(name, np.array([x], np.uint64), k & 0xFFFF if -32768 <= k < 32768 else None)
    f = X.SALU[name]
    args = (np.array([x], np.uint64),) if name == "s_mov_b32" else (np.array([x], np.uint64), np.array([y], np.uint64))
    return f(*args, np.array([sc], np.uint64))
  for A_, B_ in ((a, b), (a, b[7]), (a[3], b)):
    r, sc = direct(A_, B_, scc)
    for j in range(0, a.size, 7):
      x, y = int(np.broadcast_to(A_, a.shape)[j]), int(np.broadcast_to(B_, a.shape)[j])
      if name == "s_addk_i32" and not (y < 0x8000 or y >= 0xFFFF8000): continue   # SIMM16: sign-extended 16 bits only
      rr, rs = ref(x, y, bool(scc[j]))
      assert int(r[j]) == int(rr[0]), (name, x, y)
      assert (sc is None) == (rs is None) and (rs is None or bool(sc[j]) == bool(np.asarray(rs).reshape(-1)[0])), (name, x, y, bool(scc[j]))


@pytest.mark.parametrize("undef", [False, True])
def test_scalar_loads_at_wave_addresses_same_as_per_address(undef, monkeypatch):
  """Scalar loads at per-wave addresses gathered by dword (execute._smem_gather, the base pair read as one int64) against
  the per-address reads (Machine.mem_read): the same SGPRs, their definedness, the bytes and ranges touched; with some
  loaded dwords never written (checked mode) the gather declines and the reads mark them undefined."""
  from emulators.amd.rdna3 import execute as E
  from tests.emulators.rdna3.test_undefined_loads import run_partial
  k = read_elf(compile_ir(K.module(SALU_CHAIN))[0])["salu_chain"]
  a = np.arange(64, dtype=np.uint32) * np.uint32(2654435761)   # (wraps)
  ua = (np.arange(64) % 4 == 3) if undef else None
  out = np.zeros(64 * 9, np.uint32)
  calls: list[bool] = []
  real = E._smem_gather
  def spy(*args):
    calls.append((r := real(*args)) is not None)
    return r
  monkeypatch.setattr(E, "_smem_gather", spy)
  m1, r1 = run_partial(k, [out, a], [None, ua], (9, 1, 1), (64, 1, 1), (11,))
  assert calls and any(calls) != undef
  monkeypatch.setattr(E, "_smem_gather", lambda *args: None)
  m2, r2 = run_partial(k, [out, a], [None, ua], (9, 1, 1), (64, 1, 1), (11,))
  for x, y in zip(r1, r2):
    assert x.mem.data.tobytes() == y.mem.data.tobytes()
    i1, i2 = x.mem.init, y.mem.init
    assert (i1 is None) == (i2 is None) and (i1 is None or np.array_equal(i1, i2))
  assert np.array_equal(m1.s, m2.s) and np.array_equal(m1.v, m2.v) and sorted(m1.accesses()) == sorted(m2.accesses())
  assert (m1.sundef is None) == (m2.sundef is None) and (m1.sundef is None or np.array_equal(m1.sundef, m2.sundef))


def test_salu_rows_outside_salu_scc_ignore_scc():
  """A block passes SCC to an ops.SALU row only where the row is in ops.SALU_SCC: every other row gives the same result
  and SCC with no SCC as with SCC 0 and 1."""
  from emulators.amd.rdna3 import ops as X
  rng = np.random.default_rng(23)
  a, b = (rng.integers(0, 2**32, 64, dtype=np.uint64) for _ in range(2))
  for name, f in X.SALU.items():
    if name in X.SALU_SCC: continue
    args = (a,) if f.__code__.co_argcount == 2 else (a, b)
    r0, c0 = f(*args, None)
    for sc in (np.zeros(64, np.uint64), np.ones(64, np.uint64)):
      r1, c1 = f(*args, sc)
      assert np.array_equal(r0, r1) and (c0 is None) == (c1 is None) and (c0 is None or np.array_equal(c0, c1)), name
