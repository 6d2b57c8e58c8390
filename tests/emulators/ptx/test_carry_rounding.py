"""Carry arithmetic (PTX ISA 9.0 §9.7.2: add.cc addc sub.cc subc mad.cc madc) and directed rounding of div / sqrt,
checked against Python integers and exact rationals."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from emulators.nv.ptx.semantics import round_fraction_f64
from refgrad.runtime.driver import GPUFault
from tests.emulators.ptx.ptxkit import one

U32 = [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF, 12345, 0xDEADBEEF]


def _pairs(vals: list[int], dt) -> tuple[np.ndarray, np.ndarray]:
  a, b = zip(*[(x, y) for x in vals for y in vals])
  return np.array(a, dt), np.array(b, dt)


@pytest.mark.parametrize("w", [32, 64])
def test_add_cc_addc_is_a_wide_add(w):
  vals = U32 if w == 32 else [v << 32 | u for v in (0, 1, 0xFFFFFFFF) for u in (0, 5, 0xFFFFFFFF)] + [2**63, 2**64 - 1]
  dt, m = (np.uint32, 2**32) if w == 32 else (np.uint64, 2**64)
  a, b = _pairs(vals, dt)
  r = one(f".reg .b{w} %t; add.cc.u{w} %t, %a, %b; addc.u{w} %d, %a, %b", [a, b], dt, [f"b{w}", f"b{w}"], f"b{w}")
  assert r.tolist() == [(x + y + (x + y >= m)) % m for x, y in zip(a.tolist(), b.tolist())]


@pytest.mark.parametrize("w", [32, 64])
def test_sub_cc_subc_borrows(w):
  vals = U32 if w == 32 else [0, 1, 2**32, 2**63, 2**64 - 1, 0x123456789]
  dt, m = (np.uint32, 2**32) if w == 32 else (np.uint64, 2**64)
  a, b = _pairs(vals, dt)
  r = one(f".reg .b{w} %t; sub.cc.u{w} %t, %a, %b; subc.cc.u{w} %d, %a, %b", [a, b], dt, [f"b{w}", f"b{w}"], f"b{w}")
  assert r.tolist() == [(x - y - (x < y)) % m for x, y in zip(a.tolist(), b.tolist())]


def test_carry_chain_into_addc_with_carry_in_and_out():
  # three-word add: the middle addc.cc both takes and passes on the carry
  a, b = _pairs(U32, np.uint32)
  src = ".reg .b32 %t, %u; add.cc.u32 %t, %a, %b; addc.cc.u32 %u, %a, %b; addc.u32 %d, 0, 0"
  r = one(src, [a, b], np.uint32, ["b32", "b32"], "b32")
  expect = [((x << 32 | x) + (y << 32 | y)) >> 64 for x, y in zip(a.tolist(), b.tolist())]
  assert r.tolist() == expect


def test_mad_cc_and_madc_hi():
  a, b = _pairs(U32, np.uint32)
  r = one(".reg .b32 %t; mad.lo.cc.u32 %t, %a, %b, %a; madc.hi.u32 %d, %a, %b, %b", [a, b], np.uint32, ["b32", "b32"], "b32")
  expect = [((x * y >> 32) + y + (((x * y) % 2**32 + x) >> 32)) % 2**32 for x, y in zip(a.tolist(), b.tolist())]
  assert r.tolist() == expect


def test_addc_without_a_carry_is_undefined_in_checked_mode():
  a, b = _pairs(U32[:2], np.uint32)
  with pytest.raises(GPUFault, match=r"carry flag, which no \.cc instruction set.*PTX line"):
    one("addc.u32 %d, %a, %b", [a, b], np.uint32, ["b32", "b32"], "b32")


def _round(q: Fraction, mode: str, dt) -> float:
  """The exact rational q rounded to float32/float64 by mode (no overflow in these tests)."""
  lo = dt(float(q))   # float(q) is q rounded to nearest double; then step to the bracketing dt neighbours
  while Fraction(float(lo)) > q: lo = np.nextafter(lo, dt(-np.inf))
  while Fraction(float(np.nextafter(lo, dt(np.inf)))) <= q: lo = np.nextafter(lo, dt(np.inf))
  if Fraction(float(lo)) == q: return float(lo)
  hi = np.nextafter(lo, dt(np.inf))
  if mode == "rm" or (mode == "rz" and q > 0): return float(lo)
  return float(hi)


def _operands(dt) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(7)
  a = rng.standard_normal(200).astype(dt) * dt(1e3)
  b = rng.standard_normal(200).astype(dt)
  a[:4], b[:4] = [1, 2, -1, 3], [3, 3, 3, 7]   # inexact quotients of both signs
  a[4:8], b[4:8] = [6, -8, 1, 1.5], [3, 2, 1, 0.5]   # exact ones
  return a, b


@pytest.mark.parametrize("dt, t", [(np.float32, "f32"), (np.float64, "f64")])
@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
def test_div_directed_rounding_is_exact(dt, t, mode):
  a, b = _operands(dt)
  r = one(f"div.{mode}.{t} %d, %a, %b", [a, b], dt, [t, t], t)
  assert r.tolist() == [_round(Fraction(float(x)) / Fraction(float(y)), mode, dt) for x, y in zip(a, b)]


def _sqrt_round(x: float, mode: str, dt) -> float:
  q = Fraction(x)
  s = dt(np.sqrt(np.float64(x)))   # a neighbour of the root; step until it brackets
  while Fraction(float(s)) ** 2 > q: s = np.nextafter(s, dt(-np.inf))
  while Fraction(float(np.nextafter(s, dt(np.inf)))) ** 2 <= q: s = np.nextafter(s, dt(np.inf))
  if Fraction(float(s)) ** 2 == q or mode in ("rz", "rm"): return float(s)
  return float(np.nextafter(s, dt(np.inf)))


@pytest.mark.parametrize("dt, t", [(np.float32, "f32"), (np.float64, "f64")])
@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
def test_sqrt_directed_rounding_is_exact(dt, t, mode):
  rng = np.random.default_rng(3)
  x = np.abs(rng.standard_normal(200)).astype(dt) * dt(100)
  x[:4] = [2, 3, 4, 0.25]
  r = one(f"sqrt.{mode}.{t} %d, %a", [x], dt, [t], t)
  assert r.tolist() == [_sqrt_round(float(v), mode, dt) for v in x]


@pytest.mark.parametrize("t, dt", [("f32", np.float32), ("f64", np.float64)])
def test_div_sqrt_directed_specials(t, dt):
  a = np.array([1, -1, 0, np.inf, np.nan, 0], dt)
  b = np.array([0, 0, 0, 2, 1, -3], dt)
  r = one(f"div.rz.{t} %d, %a, %b", [a, b], dt, [t, t], t)
  with np.errstate(all="ignore"): q = a / b
  assert np.array_equal(r, q, equal_nan=True) and np.signbit(r).tolist() == np.signbit(q).tolist()
  x = np.array([-1, 0, -0.0, np.inf, np.nan], dt)
  r = one(f"sqrt.rp.{t} %d, %a", [x], dt, [t], t)
  with np.errstate(invalid="ignore"): ref = np.sqrt(x)
  assert np.array_equal(r, ref, equal_nan=True) and np.signbit(r).tolist() == np.signbit(ref).tolist()


@pytest.mark.parametrize("w", [32, 64])
def test_the_flag_after_a_subtraction_is_its_carry(w):
  # sub.cc is a + ~b + 1 on the carry chain: `addc 0, 0` reads 1 when nothing was borrowed (a >= b), and subc takes
  # 1 - CF as its borrow; nvcc's inline-asm __int128 division relies on it (test_cuda_kernels.py's int128 division)
  vals = U32 if w == 32 else [0, 1, 2**32, 2**63, 2**64 - 1, 0x123456789]
  dt, m = (np.uint32, 2**32) if w == 32 else (np.uint64, 2**64)
  a, b = _pairs(vals, dt)
  r = one(f".reg .b{w} %t; sub.cc.u{w} %t, %a, %b; addc.u{w} %d, 0, 0", [a, b], dt, [f"b{w}", f"b{w}"], f"b{w}")
  assert r.tolist() == [int(x >= y) for x, y in zip(a.tolist(), b.tolist())]
  r = one(f".reg .b{w} %t; add.cc.u{w} %t, %a, %b; subc.u{w} %d, %a, %b", [a, b], dt, [f"b{w}", f"b{w}"], f"b{w}")
  assert r.tolist() == [(x - y - 1 + (x + y >= m)) % m for x, y in zip(a.tolist(), b.tolist())]


def _extremes() -> tuple[np.ndarray, np.ndarray]:
  """float64 operand pairs whose quotients, remainders or products leave [2**-960, 2**960]: subnormals, huge values,
  results that underflow to subnormal or zero, and overflow."""
  a = np.array([3.0, 1e300, 5e-324, 1e30, -7e-310, 1.5e308, 2.0**-1000, -1e-300, 1.0, 1.0, 4.9e-320, 1e200], np.float64)
  b = np.array([1e300, 3.0, 3.0, 1e300, 3.0, 1e-10, 3.0, 7e290, 1e300, -3e-310, 1e10, -1e-200], np.float64)
  return a, b


@pytest.mark.parametrize("mode", ["rz", "rm", "rp", "rn"])
def test_f64_directed_division_and_rcp_over_the_whole_range(mode):
  a, b = _extremes()
  r = one(f"div.{mode}.f64 %d, %a, %b", [a, b], np.float64, ["f64", "f64"], "f64")
  assert r.tolist() == [round_fraction_f64(Fraction(float(x)) / Fraction(float(y)), mode) for x, y in zip(a, b)]
  r = one(f"rcp.{mode}.f64 %d, %a", [b], np.float64, ["f64"], "f64")
  assert r.tolist() == [round_fraction_f64(1 / Fraction(float(y)), mode) for y in b]


@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
def test_f64_directed_sqrt_and_fma_over_the_whole_range(mode):
  x = np.array([5e-324, 1e-310, 2.0**-1000, 1e300, 1.7e308, 3.0], np.float64)
  r = one(f"sqrt.{mode}.f64 %d, %a", [x], np.float64, ["f64"], "f64")
  assert r.tolist() == [_sqrt_round(float(v), mode, np.float64) for v in x]
  a, b = _extremes()
  c = np.array([1e-300, -1e300, 5e-324, 0.0, 1.0, -1e308, 0.0, 1e-10, -3e-301, 2.0, 0.0, 1.0], np.float64)
  a, b, c = np.append(a, [1e-200, -3.0]), np.append(b, [1e-200, 1.0]), np.append(c, [1.0, 3.0])   # (a product underflowing to 0; an exact 0)
  r = one(f"fma.{mode}.f64 %d, %a, %b, %c", [a, b, c], np.float64, ["f64"] * 3, "f64")
  assert r.tolist() == [round_fraction_f64(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), mode) for x, y, z in zip(a, b, c)]


def test_round_fraction_f64_against_numpy_and_neighbours():
  rng = np.random.default_rng(1)
  for _ in range(500):
    x, y = float(rng.standard_normal() * 10.0 ** rng.integers(-320, 300)), float(rng.standard_normal() * 10.0 ** rng.integers(-300, 300))
    if x == 0 or y == 0 or not np.isfinite(x) or not np.isfinite(y): continue
    q = Fraction(x) / Fraction(y)
    with np.errstate(all="ignore"): assert round_fraction_f64(q, "rn") == x / y
    lo, hi = round_fraction_f64(q, "rm"), round_fraction_f64(q, "rp")
    assert round_fraction_f64(q, "rz") == (lo if q > 0 else hi)
    if not (np.isfinite(lo) and np.isfinite(hi)):   # overflow: toward the infinity the largest finite value, else it
      assert (lo, hi) in ((-np.inf, -np.finfo(np.float64).max), (np.finfo(np.float64).max, np.inf))
      continue
    assert Fraction(lo) <= q <= Fraction(hi)
    assert lo == hi if Fraction(lo) == q else np.nextafter(lo, np.inf) == hi   # the two neighbours of q


@pytest.mark.parametrize("mode", ["rz", "rm", "rp"])
def test_cvt_directed_to_f64_from_64_bit_integers_and_to_bf16(mode):
  v = np.array([2**53 + 1, -(2**53 + 1), 2**63 - 1, -2**63, 12345, -(2**62 + 3), 2**60 + 2**7 + 1, 0], np.int64)
  r = one(f"cvt.{mode}.f64.s64 %d, %a", [v], np.float64, ["s64"], "f64")
  assert r.tolist() == [round_fraction_f64(Fraction(int(x)), mode) if x else 0.0 for x in v.tolist()]
  u = np.array([2**64 - 1, 2**63 + 1, 2**53 + 1, 7], np.uint64)
  r = one(f"cvt.{mode}.f64.u64 %d, %a", [u], np.float64, ["u64"], "f64")
  assert r.tolist() == [round_fraction_f64(Fraction(int(x)), mode) for x in u.tolist()]
  f = np.array([1.0048828125, -1.0048828125, 3.0, np.inf, -np.inf, 3.3895313892515355e38, 3.3961e38, 1e-40, -0.0], np.float32)
  r = one(f"cvt.{mode}.bf16.f32 %d, %a", [f], np.uint16, ["f32"], "b16").tolist()
  def bf16(x: float) -> int:   # the directed neighbour among bfloat16 values (float32 with the low 16 bits zero)
    bits = int(np.float32(x).view(np.uint32))
    lo_b = bits & 0xFFFF0000
    if bits & 0xFFFF == 0 or not np.isfinite(np.float32(x)): return bits >> 16
    neg = x < 0
    away = (mode == "rp" and not neg) or (mode == "rm" and neg)
    return (lo_b >> 16) + away
  assert r == [bf16(float(x)) for x in f]
