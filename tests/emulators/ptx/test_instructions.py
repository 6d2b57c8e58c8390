"""Instruction semantics from the PTX ISA (9.0 §9.7), one test per table row family: specials and every modifier."""
from __future__ import annotations

import numpy as np
import pytest

from tests.emulators.ptx.ptxkit import one

F32 = np.float32
inf, nan = np.inf, np.nan


def f32(*v: float) -> np.ndarray: return np.array(v, np.float32)
def bits(a: np.ndarray) -> list[int]: return a.view(np.uint32).tolist()


@pytest.mark.parametrize("mode, expect", [("rn", [1.0, -1.0]), ("rz", [1.0, -1.0]), ("rm", [1.0, -float(np.nextafter(F32(1), F32(2)))]),
                                          ("rp", [float(np.nextafter(F32(1), F32(2))), -1.0])])
def test_add_f32_rounding(mode, expect):
  a, b = f32(1.0, -1.0), f32(2.0**-30, -2.0**-30)
  assert one(f"add.{mode}.f32 %d, %a, %b", [a, b], np.float32, ["f32", "f32"], "f32").tolist() == expect


def test_mul_f32_directed_and_overflow():
  a, b = f32(3.4e38, 1 + 2**-23), f32(2.0, 1 + 2**-23)
  assert one("mul.rz.f32 %d, %a, %b", [a, b], np.float32, ["f32", "f32"], "f32").tolist() == [float(np.finfo(F32).max), 1 + 2**-22]
  assert one("mul.rp.f32 %d, %a, %b", [a, b], np.float32, ["f32", "f32"], "f32").tolist() == [inf, 1 + 2**-22 + 2**-23]


def test_fma_single_rounding():
  a, b, c = f32(1 + 2**-23), f32(1 - 2**-23), f32(-1.0)
  r = one("fma.rn.f32 %d, %a, %b, %c", [a, b, c], np.float32, ["f32"] * 3, "f32")
  assert r.tolist() == [-2.0**-46]   # two roundings would give 0


def test_div_sqrt_rcp_correctly_rounded():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((2, 256)).astype(F32)
  r = one("div.rn.f32 %d, %a, %b", [a, b], np.float32, ["f32", "f32"], "f32")
  assert bits(r) == bits((a.astype(np.float64) / b).astype(F32))
  s = one("sqrt.rn.f32 %d, %a", [np.abs(a)], np.float32, ["f32"], "f32")
  assert bits(s) == bits(np.sqrt(np.abs(a).astype(np.float64)).astype(F32))
  q = one("rcp.rn.f32 %d, %a", [a], np.float32, ["f32"], "f32")
  assert bits(q) == bits((1 / a.astype(np.float64)).astype(F32))
  z = one("div.rn.f32 %d, %a, %b", [f32(1, -1, 0, inf), f32(0, 0, 0, inf)], np.float32, ["f32", "f32"], "f32")
  assert z[0] == inf and z[1] == -inf and np.isnan(z[2]) and np.isnan(z[3])


def test_ftz_sat():
  sub = f32(1e-40, -1e-40, 0.5)
  r = one("add.ftz.f32 %d, %a, %b", [sub, f32(-0.0, -0.0, 0)], np.float32, ["f32", "f32"], "f32")
  assert bits(r) == bits(f32(0.0, -0.0, 0.5))   # flushed to a signed zero: +0 + -0 = +0, -0 + -0 = -0
  s = one("add.sat.f32 %d, %a, %b", [f32(2, -3, nan, 0.25), f32(0, 0, 0, 0)], np.float32, ["f32", "f32"], "f32")
  assert s.tolist() == [1.0, 0.0, 0.0, 0.25]


def test_min_max_nan_and_zero():
  a, b = f32(nan, 1, nan, -0.0, 0.0), f32(2, nan, nan, 0.0, -0.0)
  mn = one("min.f32 %d, %a, %b", [a, b], np.float32, ["f32", "f32"], "f32")
  assert mn[:2].tolist() == [2.0, 1.0] and np.isnan(mn[2]) and bits(mn[3:]) == bits(f32(-0.0, -0.0))
  mx = one("max.f32 %d, %a, %b", [a, b], np.float32, ["f32", "f32"], "f32")
  assert bits(mx[3:]) == bits(f32(0.0, 0.0))
  nn = one("min.NaN.f32 %d, %a, %b", [a, b], np.float32, ["f32", "f32"], "f32")
  assert np.isnan(nn[:3]).all()
  assert one("min.s32 %d, %a, %b", [np.array([-2**31, 5], np.int32), np.array([3, -1], np.int32)], np.int32, ["s32", "s32"], "s32").tolist() == [-2**31, -1]
  assert one("max.u32 %d, %a, %b", [np.array([2**31, 5], np.uint32), np.array([3, 1], np.uint32)], np.uint32, ["u32", "u32"], "u32").tolist() == [2**31, 5]


@pytest.mark.parametrize("cmp, expect", [("lt", [1, 0, 0]), ("ltu", [1, 1, 1]), ("ne", [1, 0, 0]), ("neu", [1, 1, 1]), ("eq", [0, 0, 0]),
                                         ("equ", [0, 1, 1]), ("num", [1, 0, 0]), ("nan", [0, 1, 1]), ("ge", [0, 0, 0]), ("geu", [0, 1, 1])])
def test_setp_ordered_unordered(cmp, expect):
  a, b = f32(1, nan, 1), f32(2, 1, nan)
  assert one(f"setp.{cmp}.f32 %d, %a, %b", [a, b], np.uint8, ["f32", "f32"], "pred").tolist() == expect


def test_setp_unsigned_and_combine():
  a, b = np.array([0xFFFFFFFF, 1], np.uint32), np.array([1, 2], np.uint32)
  assert one("setp.lo.u32 %d, %a, %b", [a, b], np.uint8, ["u32", "u32"], "pred").tolist() == [0, 1]
  assert one("setp.lt.s32 %d, %a, %b", [a.view(np.int32), b.view(np.int32)], np.uint8, ["s32", "s32"], "pred").tolist() == [1, 1]
  p = np.array([0, 1], np.uint8)
  assert one("setp.lt.and.s32 %d, %a, %b, %c", [a.view(np.int32), b.view(np.int32), p], np.uint8, ["s32", "s32", "pred"], "pred").tolist() == [0, 1]


def test_cvt_float_to_int():
  x = f32(2.5, 3.5, -2.5, nan, inf, -inf, 3e9, -0.7)
  assert one("cvt.rni.s32.f32 %d, %a", [x], np.int32, ["f32"], "s32").tolist() == [2, 4, -2, 0, 2**31 - 1, -2**31, 2**31 - 1, -1]
  assert one("cvt.rzi.s32.f32 %d, %a", [x], np.int32, ["f32"], "s32").tolist() == [2, 3, -2, 0, 2**31 - 1, -2**31, 2**31 - 1, 0]
  assert one("cvt.rmi.s32.f32 %d, %a", [x], np.int32, ["f32"], "s32").tolist()[-1] == -1
  assert one("cvt.rpi.u32.f32 %d, %a", [x], np.uint32, ["f32"], "u32").tolist() == [3, 4, 0, 0, 2**32 - 1, 0, 3000000000, 0]


def test_cvt_int_to_float_and_halves():
  v = np.array([2**24 + 1, -(2**24 + 1), 2**63 - 1, -2**63], np.int64)
  assert one("cvt.rn.f32.s64 %d, %a", [v], np.float32, ["s64"], "f32").tolist() == [2.0**24, -2.0**24, 2.0**63, -2.0**63]
  assert one("cvt.rz.f32.s64 %d, %a", [v], np.float32, ["s64"], "f32").tolist()[2] == float(np.nextafter(F32(2**63), F32(0)))
  assert one("cvt.rp.f32.s64 %d, %a", [v[:1]], np.float32, ["s64"], "f32").tolist() == [2.0**24 + 2]
  u = np.array([2**64 - 1], np.uint64)
  assert one("cvt.rn.f32.u64 %d, %a", [u], np.float32, ["u64"], "f32").tolist() == [2.0**64]
  x = f32(1 + 2**-11, 65520.0, 1e-8, -0.0)
  h = one("cvt.rn.f16.f32 %d, %a", [x], np.uint16, ["f32"], "b16")
  with np.errstate(over="ignore"): assert h.tobytes() == x.astype(np.float16).tobytes()
  hz = one("cvt.rz.f16.f32 %d, %a", [f32(65520.0, 1 + 2**-10 + 2**-11)], np.uint16, ["f32"], "b16")
  assert hz.view(np.float16).tolist() == [65504.0, 1 + 2**-10]
  bf = one("cvt.rn.bf16.f32 %d, %a", [f32(1 + 2**-8, 1 + 3 * 2**-8, nan)], np.uint16, ["f32"], "b16")
  assert bf.tolist()[:2] == [0x3F80, 0x3F82] and (bf[2] & 0x7F80) == 0x7F80 and bf[2] & 0x7F
  back = one("cvt.f32.bf16 %d, %a", [np.array([0x3F82, 0x8000], np.uint16)], np.float32, ["b16"], "f32")
  assert bits(back) == [0x3F820000, 0x80000000]


def test_cvt_int_int():
  assert one("cvt.s32.s8 %d, %a", [np.array([0xFF, 0x7F], np.uint16)], np.int32, ["b16"], "s32").tolist() == [-1, 127]
  assert one("cvt.sat.u8.s32 %d, %a", [np.array([-5, 300, 7], np.int32)], np.uint32, ["s32"], "u32").tolist() == [0, 255, 7]
  assert one("cvt.u16.u32 %d, %a", [np.array([0x12345678], np.uint32)], np.uint16, ["u32"], "u16").tolist() == [0x5678]


def test_integer_wrap_mul_hi_wide():
  a, b = np.array([2**31 - 1, -2**31, -3], np.int32), np.array([2, -1, 5], np.int32)
  assert one("add.s32 %d, %a, %b", [a, b], np.int32, ["s32", "s32"], "s32").tolist() == [-2**31 + 1, 2**31 - 1, 2]
  assert one("mul.hi.s32 %d, %a, %b", [a, b], np.int32, ["s32", "s32"], "s32").tolist() == [0, 0, -1]
  assert one("mul.wide.s32 %d, %a, %b", [a, b], np.int64, ["s32", "s32"], "s64").tolist() == [2**32 - 2, 2**31, -15]
  x, y = np.array([2**64 - 1, 2**63], np.uint64), np.array([2**64 - 1, 4], np.uint64)
  assert one("mul.hi.u64 %d, %a, %b", [x, y], np.uint64, ["u64", "u64"], "u64").tolist() == [2**64 - 2, 2]
  sx, sy = np.array([-1, -2**63], np.int64), np.array([-1, 3], np.int64)
  assert one("mul.hi.s64 %d, %a, %b", [sx, sy], np.int64, ["s64", "s64"], "s64").tolist() == [0, -2]
  assert one("mad.lo.s32 %d, %a, %b, %c", [a, b, np.array([1, 1, 1], np.int32)], np.int32, ["s32"] * 3, "s32").tolist() == [-1, -2**31 + 1, -14]


def test_shifts_and_funnel():
  a = np.array([0x80000001, 0x80000001, 0x80000001], np.uint32)
  s = np.array([1, 32, 40], np.uint32)
  assert one("shl.b32 %d, %a, %b", [a, s], np.uint32, ["b32", "b32"], "b32").tolist() == [2, 0, 0]
  assert one("shr.s32 %d, %a, %b", [a.view(np.int32), s], np.int32, ["s32", "b32"], "s32").tolist() == [-(2**30), -1, -1]
  assert one("shr.u32 %d, %a, %b", [a, s], np.uint32, ["u32", "b32"], "u32").tolist() == [0x40000000, 0, 0]
  lo, hi, n = np.array([0x11111111, 1], np.uint32), np.array([0x22222222, 2], np.uint32), np.array([4, 36], np.uint32)
  assert one("shf.l.wrap.b32 %d, %a, %b, %c", [lo, hi, n], np.uint32, ["b32"] * 3, "b32").tolist() == [0x22222221, 0x20]
  assert one("shf.r.clamp.b32 %d, %a, %b, %c", [lo, hi, n], np.uint32, ["b32"] * 3, "b32").tolist() == [0x21111111, 2]   # n clamps to 32


def test_bit_ops():
  v = np.array([0, 1, 0xF0000000, 0xFFFFFFFF], np.uint32)
  assert one("popc.b32 %d, %a", [v], np.uint32, ["b32"], "b32").tolist() == [0, 1, 4, 32]
  assert one("clz.b32 %d, %a", [v], np.uint32, ["b32"], "b32").tolist() == [32, 31, 0, 0]
  assert one("brev.b32 %d, %a", [v], np.uint32, ["b32"], "b32").tolist() == [0, 0x80000000, 0xF, 0xFFFFFFFF]
  w = np.array([2**63 + 1, 1], np.uint64)
  assert one("clz.b64 %d, %a", [w], np.uint32, ["b64"], "b32").tolist() == [0, 63]
  x = np.array([0x0000FF00, 0x0000FF00], np.uint32)
  pos, ln = np.array([8, 12], np.uint32), np.array([8, 8], np.uint32)
  assert one("bfe.u32 %d, %a, %b, %c", [x, pos, ln], np.uint32, ["b32"] * 3, "b32").tolist() == [0xFF, 0xF]
  assert one("bfe.s32 %d, %a, %b, %c", [x.view(np.int32), pos, ln], np.int32, ["s32", "b32", "b32"], "s32").tolist() == [-1, 15]
  p = np.array([0x8040, 0x3210, 0x7654, 0x0000], np.uint32)
  aa, bb = np.full(4, 0x44332211, np.uint32), np.full(4, 0x88776655, np.uint32)
  r = one("prmt.b32 %d, %a, %b, %c", [aa, bb, p], np.uint32, ["b32"] * 3, "b32").tolist()
  assert r[1:] == [0x44332211, 0x88776655, 0x11111111]
  assert r[0] == 0x00115511
  for k, sel in enumerate((0x8040, 0x3210, 0x7654, 0x0000, 0x7FB1)):   # immediate selectors take another path: same bytes
    want = r[k] if k < 4 else 0x88FF0022   # nibbles 1,B,F,7: a.b1, sign(a.b3), sign(b.b3), b.b3
    assert one(f"prmt.b32 %d, %a, %b, {sel}", [aa[:1], bb[:1]], np.uint32, ["b32"] * 2, "b32").tolist() == [want]   # selector nibbles 0,4,0,8: a.b0, b.b0, a.b0, then byte 0 of a sign-replicated (0x11 -> 0x00)


def test_selp_slct():
  a, b = np.array([1, 2], np.int32), np.array([3, 4], np.int32)
  assert one("slct.s32.f32 %d, %a, %b, %c", [a, b, f32(-0.0, -1)], np.int32, ["s32", "s32", "f32"], "s32").tolist() == [1, 4]
  assert one("selp.s32 %d, %a, %b, %c", [a, b, np.array([1, 0], np.uint8)], np.int32, ["s32", "s32", "pred"], "s32").tolist() == [1, 4]


def test_approx_within_bounds():
  x = np.linspace(-4, 4, 64).astype(F32)
  r = one("ex2.approx.f32 %d, %a", [x], np.float32, ["f32"], "f32")
  assert np.all(np.abs(r.astype(np.float64) - np.exp2(x.astype(np.float64))) <= 2 * np.spacing(r))
  s = one("sin.approx.f32 %d, %a", [x], np.float32, ["f32"], "f32")
  assert np.all(np.abs(s.astype(np.float64) - np.sin(x.astype(np.float64))) <= 2.0**-20.5)


def test_dp4a_dp2a():
  a = np.array([0x01FF7F80, 0x04030201], np.uint32)   # bytes (little-endian): 0x80 0x7F 0xFF 0x01 ; 1 2 3 4
  b = np.array([0x02020202, 0x01010101], np.uint32)
  c = np.array([10, 0], np.uint32)
  s = one("dp4a.s32.s32 %d, %a, %b, %c", [a.view(np.int32), b.view(np.int32), c.view(np.int32)], np.int32, ["b32"] * 3, "s32")
  assert s.tolist() == [10 + 2 * (-128 + 127 - 1 + 1), 10]
  u = one("dp4a.u32.u32 %d, %a, %b, %c", [a, b, c], np.uint32, ["b32"] * 3, "u32")
  assert u.tolist() == [10 + 2 * (128 + 127 + 255 + 1), 10]
  lo = one("dp2a.lo.u32.u32 %d, %a, %b, %c", [np.array([0x00030002], np.uint32), np.array([0x0A0B0405], np.uint32), np.array([1], np.uint32)],
           np.uint32, ["b32"] * 3, "u32")
  hi = one("dp2a.hi.u32.u32 %d, %a, %b, %c", [np.array([0x00030002], np.uint32), np.array([0x0A0B0405], np.uint32), np.array([1], np.uint32)],
           np.uint32, ["b32"] * 3, "u32")
  assert lo.tolist() == [1 + 2 * 5 + 3 * 4] and hi.tolist() == [1 + 2 * 0x0B + 3 * 0x0A]


def _fma_ref(a: float, b: float, c: float, mode: str) -> float:
  """a*b + c rounded once by mode, from exact rationals (Python's float(Fraction) rounds to nearest even)."""
  import math
  from fractions import Fraction
  if not all(map(math.isfinite, (a, b, c))): return math.fma(a, b, c) if hasattr(math, "fma") else a * b + c
  x = Fraction(a) * Fraction(b) + Fraction(c)
  if x == 0:
    p_neg = math.copysign(1, a) * math.copysign(1, b) < 0 if a * b == 0 else None
    if p_neg is not None and c == 0: same = p_neg == (math.copysign(1, c) < 0)
    else: same = False
    if same: return -0.0 if math.copysign(1, c) < 0 else 0.0
    return -0.0 if mode == "rm" else 0.0
  s = float(x)
  if Fraction(s) == x: return s
  if mode == "rz" and abs(Fraction(s)) > abs(x): s = math.nextafter(s, 0.0)
  if mode == "rm" and Fraction(s) > x: s = math.nextafter(s, -math.inf)
  if mode == "rp" and Fraction(s) < x: s = math.nextafter(s, math.inf)
  return s


@pytest.mark.parametrize("mode", ["rz", "rm", "rp", "rn"])
def test_fma_f64_directed_rounding(mode):
  rng = np.random.default_rng(3)
  a = rng.standard_normal(160) * 2.0 ** rng.integers(-300, 300, 160)
  b = rng.standard_normal(160) * 2.0 ** rng.integers(-300, 300, 160)
  c = np.where(rng.random(160) < 0.3, -(a * b), rng.standard_normal(160) * 2.0 ** rng.integers(-600, 600, 160))   # cancellations
  c[:8] = [0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 2.0 ** -52, 3.0]
  a[:8] = [0.0, 0.0, -0.0, 2.0, 1.0 + 2.0 ** -52, 1.0 - 2.0 ** -53, 1.0, 1.5]
  b[:8] = [-0.0, 5.0, 0.0, 0.0, 1.0 - 2.0 ** -52, 1.0 + 2.0 ** -52, 2.0 ** -53, 2.0 ** -54]   # exact zeros, ties, sticky bits
  got = one(f"fma.{mode}.f64 %d, %a, %b, %c", [a, b, c], np.float64, ["f64", "f64", "f64"], "f64")
  want = np.array([_fma_ref(float(x), float(y), float(z), mode) for x, y, z in zip(a, b, c)])
  assert got.view(np.uint64).tolist() == want.view(np.uint64).tolist()
