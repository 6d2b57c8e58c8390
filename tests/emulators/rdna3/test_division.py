"""IEEE division through LLVM's gfx11 expansion (v_div_scale, v_rcp, fma refinement, v_div_fmas, v_div_fixup) in the
range where v_div_scale rescales: denormal and huge numerators and denominators, quotients that overflow or are
denormal. Every quotient bit-exact with numpy's (IEEE) division. Also the vectorized f64 fma against exact arithmetic."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from emulators.amd.rdna3 import alu as A
from tests.emulators.rdna3.llvm_util import run_direct
from tests.emulators.rdna3.test_execute import kernels_of

N = 128
RAW = {np.float32: np.uint32, np.float64: np.uint64}


def extremes(t: type, rng: np.random.Generator, n: int) -> np.ndarray:
  """Finite nonzero values over the whole exponent range, denormals included, a third of them at the range ends."""
  fi = np.finfo(t)
  lo, hi = int(np.log2(fi.smallest_subnormal)), int(np.log2(fi.max))
  e = np.where(rng.random(n) < 0.35, rng.choice([lo, lo + 30, hi - 30, hi], n), rng.integers(lo, hi, n, endpoint=True))
  m = rng.uniform(1, 2, n) * np.where(rng.random(n) < 0.5, -1, 1)
  with np.errstate(all="ignore"): v = np.ldexp(m, e).astype(t)
  v[(v == 0) | ~np.isfinite(v)] = fi.tiny
  return v


def specials(t: type) -> np.ndarray:
  fi = np.finfo(t)
  return np.array([fi.max, -fi.max, fi.tiny, fi.smallest_subnormal, fi.tiny / 3, fi.max / 3, 1.0, -3.0, 2.0 ** 20, 2.0 ** -20], t)


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_division_in_the_rescaling_range(t):
  """The kernel LLVM compiles for fdiv, run by the emulator, over every pair of special values and random pairs from
  the range ends: the case table of v_div_scale, the post-scale of v_div_fmas and v_div_fixup's overflow/underflow."""
  name = {np.float32: "div_f32", np.float64: "div_f64"}[t]
  rng = np.random.default_rng(21)
  s = specials(t)
  pa, pb = (x.ravel() for x in np.meshgrid(s, s))
  a = np.concatenate([pa, extremes(t, rng, 4 * N - len(pa))])
  b = np.concatenate([pb, extremes(t, rng, 4 * N - len(pb))])
  for k in range(0, len(a), N):
    x, y = a[k:k + N], b[k:k + N]
    got = run_direct(kernels_of("elementwise")[name], [np.zeros(N, t), x, y], (N // 64, 1, 1), (64, 1, 1))[0]
    with np.errstate(all="ignore"): want = (x / y).astype(t)
    bad = got.view(RAW[t]) != want.view(RAW[t])
    assert not bad.any(), f"{name}: {x[bad][:4]} / {y[bad][:4]} gave {got[bad][:4]}, IEEE gives {want[bad][:4]}"


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_div_scale_case_table(t):
  """One row per case of the guide's V_DIV_SCALE pseudocode: (numerator, denominator) -> (scaled denominator, VCC of the
  denominator call, scaled numerator, VCC of the numerator call)."""
  k = {np.float32: 64, np.float64: 128}[t]
  fi = np.finfo(t)
  up, down = (lambda x: np.ldexp(np.float64(x), k).astype(t)), (lambda x: np.ldexp(np.float64(x), -k).astype(t))
  big = t(2.0 ** (fi.maxexp - 2))
  small = t(2.0 ** (40 - fi.maxexp))   # stored exponent 41: a quotient by the smallest denormal stays below the top
  rows = [  # n, d, (d', vcc), (n', vcc)
    (t(3.0), t(7.0), (t(7.0), False), (t(3.0), False)),                    # no scaling
    (big, t(1.0), (up(1.0), True), (big, True)),                             # quotient near the top: the denominator up, post-scale
    (small, fi.smallest_subnormal, (up(fi.smallest_subnormal), False), (up(small), False)),   # denormal denominator: both up
    (fi.tiny, t(4.0), (t(4.0), True), (up(fi.tiny), True)),                  # denormal quotient: the numerator up, post-scale
    (t(1.0), fi.max, (down(fi.max), True), (t(1.0), True)),                  # 1/D and N/D denormal: the denominator down
    (fi.max, fi.max, (down(fi.max), False), (down(fi.max), False)),          # 1/D denormal: both down
    (fi.tiny, fi.tiny, (up(fi.tiny), False), (up(fi.tiny), False)),          # tiny numerator: both up
  ]
  for n, d, (dw, dv), (nw, nv) in rows:
    n_, d_ = np.array([n], t), np.array([d], t)
    ds, v0 = A.div_scale(d_, d_, n_)
    ns, v1 = A.div_scale(n_, d_, n_)
    assert (ds[0], bool(v0[0]), ns[0], bool(v1[0])) == (dw, dv, nw, nv), f"{n} / {d}"
  z, nan = A.div_scale(np.array([1.0, 0.0], t), np.array([0.0, 1.0], t), np.array([1.0, 0.0], t))
  assert np.isnan(z).all() and not nan.any()


def test_fma64_vectorized_is_exact():
  """The round-to-odd emulated f64 fma against exact rational arithmetic: random operands, cancellation, ties of the
  final rounding, and operands at the range ends (the exact per-lane path)."""
  rng = np.random.default_rng(7)
  n = 4000
  a = np.ldexp(rng.uniform(1, 2, n), rng.integers(-60, 60, n)) * np.where(rng.random(n) < 0.5, -1, 1)
  b = np.ldexp(rng.uniform(1, 2, n), rng.integers(-60, 60, n))
  c = np.where(rng.random(n) < 0.5, -(a * b) * (1 + rng.integers(-3, 4, n) * 2.0 ** -52), np.ldexp(rng.standard_normal(n), rng.integers(-80, 80, n)))
  c[:400] = 1.0
  a[:400], b[:400] = 2.0 ** -27, 2.0 ** -26 * (1 + rng.integers(-1, 2, 400) * 2.0 ** -52)   # a*b at half an ulp of c: ties
  a[400:500] = np.ldexp(1.5, rng.integers(-1070, 1020, 100))
  got = A.fma(a, b, c)
  want = np.array([float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())])
  np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def test_fma64_fast_path_matches_exact_path():
  """The buffer-reusing emulated f64 fma against the exact per-lane path (`_fma64_exact`, rational arithmetic) on every
  combination of special operands (signed zeros, infinities, NaN, denormals, the range ends of the fast path) and on
  random operands over the whole exponent range, with cancellations and raw bit patterns: bit for bit."""
  sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 2.0 ** -1022, np.finfo(np.float64).max, -np.finfo(np.float64).max,
                 1.0, -1.0, 2.0 ** -450, 2.0 ** 450, 2.0 ** -900, 2.0 ** 900, 2.0 ** -960, 3.0, 1 / 3, 2.0 ** -27, 2.0 ** 511, 2.0 ** -537])
  cube = np.array(np.meshgrid(sp, sp, sp)).reshape(3, -1)
  rng = np.random.default_rng(11)
  n = 3000
  with np.errstate(all="ignore"):
    a = np.ldexp(rng.uniform(1, 2, n), rng.integers(-1080, 1030, n)) * np.where(rng.random(n) < 0.5, -1, 1)
    b = np.ldexp(rng.uniform(1, 2, n), rng.integers(-1080, 1030, n))
    c = np.where(rng.random(n) < 0.4, -(a * b) * (1 + rng.integers(-3, 4, n) * 2.0 ** -52), np.ldexp(rng.standard_normal(n), rng.integers(-1080, 1030, n)))
  m = rng.random(n) < 0.5   # moderate exponents: the proved fast path
  a[m], b[m] = rng.standard_normal(m.sum()), rng.standard_normal(m.sum())
  c[m] = np.where(rng.random(m.sum()) < 0.5, -(a[m] * b[m]) * (1 + rng.integers(-3, 4, m.sum()) * 2.0 ** -52), rng.standard_normal(m.sum()))
  c[100:400], a[100:400] = 1.0, 2.0 ** -27   # a*b at half an ulp of c, or next to it: ties of the final rounding
  b[100:400] = 2.0 ** -26 * (1 + rng.integers(-1, 2, 300) * 2.0 ** -52)
  a[:50] = rng.integers(0, 2 ** 64, 50, dtype=np.uint64).view(np.float64)   # raw bit patterns: NaN payloads, denormals
  for x, y, z in (cube, (a, b, c)):
    got = A.fma(x, y, z)
    want = A._fma64_exact(x, y, z)
    # a zero factor or a non-finite operand: x*y + z as numpy computes it (one rounding; the NaN an invalid operation
    # makes is the array unit's, which the per-lane scalar path does not give with the same sign)
    with np.errstate(all="ignore"): plain = (x == 0) | (y == 0) | ~(np.isfinite(x) & np.isfinite(y) & np.isfinite(z)), x * y + z
    want = np.where(plain[0], plain[1], want)
    np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))
  every = rng.standard_normal((3, 2000))   # every lane on the fast path (no operand replaced)
  np.testing.assert_array_equal(A.fma(*every).view(np.uint64), A._fma64_exact(*every).view(np.uint64))


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_div_scale_and_fixup_without_special_lanes_as_with_them(t):
  """div_scale and div_fixup answer at once where no lane is in one of their special cases (the usual division): the
  same bits and VCC as the case-by-case path, which one special lane appended (a zero numerator, a NaN) forces."""
  rng = np.random.default_rng(21)
  n = 4096
  num = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(t)   # no lane in a special case
  den = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(t)
  q = (num / den).astype(t)
  def both(fn, *xs, special):
    fast = fn(*xs)
    full = fn(*(np.append(x, s).astype(t) for x, s in zip(xs, special)))
    return fast, full
  for s0 in (den, num):
    (r, vcc), (rf, vccf) = both(A.div_scale, s0, den, num, special=(1.0, 1.0, 0.0))
    assert np.isnan(rf[-1]) and r.tobytes() == rf[:n].tobytes() and np.array_equal(vcc, vccf[:n]) and not vcc.any()
  r, rf = both(A.div_fixup, q, den, num, special=(np.nan, 1.0, 1.0))
  assert r.tobytes() == rf[:n].tobytes() and r.tobytes() != np.abs(q).tobytes()   # signs applied
