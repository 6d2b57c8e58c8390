"""Software transcendentals: EXP2, LOG2 and SIN rewritten into basic ops, so every backend computes
them bit for bit alike.

`decompose_transcendentals` (rule set `transcendental_rules`) replaces each EXP2/LOG2/SIN of float16,
bfloat16, float32 or float64 (scalar or vector) by ADD, MUL, NEG, MAX, CMPLT, CMPNE, WHERE, AND, OR,
SHL, SHR (ints), CAST, BITCAST, RECIP and constants. No MULACC (a fused multiply-add rounds once, a*b+c
twice: backends must not differ) and no IDIV/MOD. Every one of those ops is correctly rounded under the
reference semantics, so the result is fixed by the graph alone. The graphs rely on exact IEEE evaluation
of every op as written (error-free transformations such as TwoSum): a pass that reassociates float ops
or contracts a*b+c breaks them.

float16 and bfloat16 are computed in float32 and rounded once at the end. float32 and float64 run in
their own precision (range reduction + Horner polynomials; coefficients fitted offline by a weighted
minimax fit, each one rounded to the target precision before the next was refitted).

Special values follow the reference semantics: exp2(-inf) = +0, exp2(+inf) = +inf; log2(+-0) = -inf,
log2(x < 0) = NaN, log2(+inf) = +inf; sin(+-inf) = NaN, sin(+-0) = +-0; a NaN input is returned as is.
No input (NaN and inf included) makes the graphs execute undefined behaviour: every float->int cast is
of a value clamped into range first, every shift amount is a constant in range.

Accuracy: max |result - exact| in ULPs of the result dtype (0.5 = correctly rounded), bounded by `ULP_BOUNDS`
(asserted by tests/refgrad/test_decompositions.py). Measured over every input for the 16-bit dtypes and for
float32 (EXP2: every x in [-152, 129]; LOG2: every x > 0; SIN: every |x| < 1.5*2^20); for float64 by 2-3
million random inputs in each worst region (mpmath reference):

          float16  bfloat16  float32  float64
  EXP2    0.5000   0.5000    0.776    0.767   (largest on subnormal results; 0.647 / 0.63 on normal ones)
  LOG2    0.4999   0.4998    0.743    0.749   (largest just below sqrt(2), where the result's ULP halves)
  SIN     0.5000   0.4999    0.766    0.741

SIN is accurate for |x| < `SIN_RANGE[dtype]` (1.5*2^20 for float32/bfloat16, 1.5*2^30 for float64, every
finite float16); finite inputs beyond it give +0 (a finite value in [-1, 1], not an approximation of sin).
Size of one decomposition (ops, constants not counted): EXP2 58/68, LOG2 72/80, SIN 204/192 for float32/float64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from refgrad.dtype import DType, dtypes
from refgrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite


@dataclass(frozen=True)
class _Fmt:
  """Per float dtype facts and constants of the decompositions (float32 also serves float16/bfloat16)."""
  int: DType                    # signed int of the same width (for BITCAST)
  mbits: int                    # stored mantissa bits
  bias: int                     # exponent bias
  exp2_poly: tuple[float, ...]  # 2^r = 1 + r*ln2 + r^2*Q(r) on |r| <= 1/2; Q's coefficients, constant first
  exp2_ln2: tuple[float, float] # ln2 = hi + lo, hi short enough that high(r)*hi is exact
  log_poly: tuple[float, ...]   # ln(1+f) = f - f^2/2 + s*(f^2/2 + R), s = f/(2+f), R = z*L(z), z = s^2
  sin_poly: tuple[float, ...]   # sin(r) = r + r^3*S(r^2) on |r| <= pi/4 (+ margin)
  cos_poly: tuple[float, ...]   # cos(r) = 1 - r^2/2 + r^4*C(r^2)
  himask: int                   # AND mask on the bits: high(v) keeps so few leading bits that high(v)*high(w) and
                                #   high(v)*(a hi constant) are exact
  log2e: tuple[float, float, float]  # 1/ln2 rounded, its high part (few bits), the rest
  sin_kbits: int                # the quadrant index k of sin's reduction has |k| < 2^sin_kbits
  pio2: tuple[float, ...]       # pi/2 in parts: all but the last have few enough bits that (k half)*part is exact
  pio2_hl: tuple[float, float]  # pi/2 = hi + lo, hi rounded to the dtype

  @property
  def p(self) -> int: return self.mbits + 1


_F32 = _Fmt(
  int=dtypes.int32, mbits=23, bias=127,
  exp2_poly=(0.24022647738456726, 0.05550362542271614, 0.009618510492146015, 0.0013390033273026347, 0.00015324365813285112),
  exp2_ln2=(float.fromhex("0x1.62e0000000000p-1"), float.fromhex("0x1.0bfbe80000000p-15")),
  log_poly=(0.6666677594184875, 0.39977583289146423, 0.2987080514431),
  sin_poly=(-0.1666666716337204, 0.008333379402756691, -0.00019853073172271252, 2.83273925560934e-06),
  cos_poly=(0.04166664555668831, -0.0013887310633435845, 2.4432563805021346e-05),
  himask=-(1 << 12), log2e=(float.fromhex("0x1.7154760000000p+0"), float.fromhex("0x1.7160000000000p+0"), float.fromhex("-0x1.7135a80000000p-13")),
  sin_kbits=20,
  pio2=tuple(float.fromhex(h) for h in ("0x1.9220000000000p+0", "-0x1.2af0000000000p-18", "0x1.0b48000000000p-34", "-0x1.ee58000000000p-50",
                                        "-0x1.d9d0000000000p-66", "0x1.8a2e040000000p-81")),
  pio2_hl=(float.fromhex("0x1.921fb60000000p+0"), float.fromhex("-0x1.777a5c0000000p-25")))

_F64 = _Fmt(
  int=dtypes.int64, mbits=52, bias=1023,
  exp2_poly=(0.24022650695910122, 0.05550410866482073, 0.00961812910759704, 0.0013333558146687663, 0.0001540353045399444,
             1.5252733545047505e-05, 1.3215436644016924e-06, 1.017818552600207e-07, 7.073573550985742e-09, 4.4361587982522275e-10),
  exp2_ln2=(float.fromhex("0x1.62e42ff000000p-1"), float.fromhex("-0x1.718432a1b0e26p-35")),
  log_poly=(0.6666666666666734, 0.3999999999941702, 0.2857142874190443, 0.2222219861981468, 0.18183562032072667, 0.1531410632352409,
            0.14795418144582448),
  sin_poly=(-0.1666666666666663, 0.008333333333321863, -0.0001984126982939805, 2.7557313559190774e-06, -2.5050738605666343e-08,
            1.58957283912554e-10),
  cos_poly=(0.041666666666666595, -0.0013888888888873342, 2.4801587289001412e-05, -2.7557314216607435e-07, 2.0875705306008493e-09,
            -1.1358743116507249e-11),
  himask=-(1 << 32), log2e=(float.fromhex("0x1.71547652b82fep+0"), float.fromhex("0x1.7154765200000p+0"), float.fromhex("0x1.705fc2eefa200p-33")),
  sin_kbits=30,
  pio2=tuple(float.fromhex(h) for h in ("0x1.921fb54440000p+0", "0x1.68c234c4c8000p-39", "-0x1.9d747f23e0000p-79", "-0x1.976b7ed8f8000p-118",
                                        "-0x1.dd660ce2ff7d1p-157")),
  pio2_hl=(float.fromhex("0x1.921fb54442d18p+0"), float.fromhex("0x1.1a62633145c07p-54")))

_FMT = {dtypes.float32: _F32, dtypes.float64: _F64}

# |x| below which SIN is accurate (|k| = |rint(x*2/pi)| stays below 2^sin_kbits); float16: every finite input
SIN_RANGE: dict[DType, float] = {dtypes.float16: math.inf, dtypes.bfloat16: 1.5 * 2.0 ** 20, dtypes.float32: 1.5 * 2.0 ** 20,
                                 dtypes.float64: 1.5 * 2.0 ** 30}

# max error in ULPs of the result dtype (EXP2, LOG2: every input; SIN: |x| < SIN_RANGE); see the module docstring
ULP_BOUNDS: dict[tuple[Ops, DType], float] = {
  (Ops.EXP2, dtypes.float16): 0.501, (Ops.EXP2, dtypes.bfloat16): 0.501, (Ops.EXP2, dtypes.float32): 0.78, (Ops.EXP2, dtypes.float64): 0.8,
  (Ops.LOG2, dtypes.float16): 0.501, (Ops.LOG2, dtypes.bfloat16): 0.501, (Ops.LOG2, dtypes.float32): 0.75, (Ops.LOG2, dtypes.float64): 0.8,
  (Ops.SIN, dtypes.float16): 0.501, (Ops.SIN, dtypes.bfloat16): 0.501, (Ops.SIN, dtypes.float32): 0.77, (Ops.SIN, dtypes.float64): 0.8,
}


# ---------------------------------------------------------------------------------------------
# building blocks (x: a float UOp of float32/float64, scalar or vector)

def _fmt(x: UOp) -> _Fmt: return _FMT[x.dtype.scalar()]
def _ints(x: UOp) -> DType: return _fmt(x).int.vec(x.dtype.count)
def _c(x: UOp, v: float | int) -> UOp: return x.const_like(v)

def _horner(x: UOp, coeffs: tuple[float, ...]) -> UOp:
  """sum c_i x^i, one MUL and one ADD per step (never fused)."""
  acc = _c(x, coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = acc * x + c
  return acc

def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
  """s = fl(a+b) and the exact error a+b-s (Knuth's TwoSum: no ordering condition on a, b)."""
  s = a + b
  bb = s - a
  return s, (a - (s - bb)) + (b - bb)

def _rint_int(y: UOp) -> UOp:
  """y rounded to the nearest integer (ties either way) as an int of y's width; |y| must fit (clamped by the caller)."""
  t = y.cast(_ints(y))
  d = y - t.cast(y.dtype)  # exact: the fractional part, in (-1, 1)
  return (d > 0.5).where(t + 1, (d < -0.5).where(t + -1, t))

def _high(v: UOp) -> UOp:
  """v with its low mantissa bits cleared (see _Fmt.himask); v - _high(v) is exact."""
  return (v.bitcast(_ints(v)) & _fmt(v).himask).bitcast(v.dtype)

def _pow2(n: UOp, x: UOp) -> UOp:
  """2^n as x's float dtype from exponent bits; n must be in the normal exponent range."""
  f = _fmt(x)
  return ((n + f.bias) << f.mbits).bitcast(x.dtype)


def _exp2(x: UOp) -> UOp:
  f = _fmt(x)
  lo, hi = -(f.bias + f.p + 1), f.bias + 2   # below lo the result rounds to 0, above hi to inf
  isnan = x.ne(x)
  xc = (x < lo).where(_c(x, lo), (x > hi).where(_c(x, hi), x))
  xc = isnan.where(_c(x, 0), xc)   # now a float->int cast is defined on every lane
  n = xc.cast(_ints(x))            # truncates; then |xc - n| < 1 exactly
  r = xc - n.cast(x.dtype)
  up, down = r > 0.5, r < -0.5
  n = up.where(n + 1, down.where(n + -1, n))
  r = up.where(r + -1.0, down.where(r + 1.0, r))   # exact (Sterbenz); |r| <= 1/2
  # 2^r = 1 + t_hi + t_lo with t_hi = r_hi*ln2_hi exact (r_hi: r's high bits), so the only sizeable rounding is the last ADD
  r_hi = _high(r)
  t_hi = r_hi * f.exp2_ln2[0]
  t_lo = ((r - r_hi) * f.exp2_ln2[0] + r * f.exp2_ln2[1]) + (r * r) * _horner(r, f.exp2_poly)
  one_t = 1.0 + t_hi
  p = one_t + (((1.0 - one_t) + t_hi) + t_lo)   # (1 - one_t) + t_hi: exact error of one_t (|t_hi| < 1)
  # scale by 2^n in two steps: 2^(n>>1) keeps p*2^(n>>1) normal (exact), so only the last MUL rounds: once into the
  # subnormal range or to inf (p itself is rounded, which is why subnormal results have the largest errors)
  n1 = n >> 1
  y = (p * _pow2(n1, x)) * _pow2(n - n1, x)
  return isnan.where(x, y)


def _log2(x: UOp) -> UOp:
  f = _fmt(x)
  ints = _ints(x)
  tiny = x < 2.0 ** (1 - f.bias)                   # subnormal (or <= 0): scale into the normal range first
  xs = tiny.where(x * 2.0 ** f.p, x)
  bits = xs.bitcast(ints)
  e = (bits >> f.mbits) + -f.bias
  e = tiny.where(e + -f.p, e)
  m = ((bits & ((1 << f.mbits) - 1)) | (f.bias << f.mbits)).bitcast(x.dtype)   # mantissa in [1, 2)
  big = m > 2.0 ** 0.5
  m, e = big.where(m * 0.5, m), big.where(e + 1, e)   # m in [sqrt(1/2), sqrt(2))
  g = m + -1.0                                         # exact
  s = g * (g + 2.0).alu(Ops.RECIP)
  z = s * s
  g_hi = _high(g)
  h_hi = 0.5 * (g_hi * g_hi)                           # exact; h = g^2/2 = h_hi + h_lo to far beyond working precision
  h_lo = 0.5 * ((g - g_hi) * (g + g_hi))
  h = h_hi + h_lo
  # ln(1+g) = (g - h) + b, split into a_hi (the leading bits of its rounded value, so a_hi*LOG2E_HI is exact) and a_lo
  # (about 2^-12 of it, so its roundings hardly matter); g - a_hi is exact (Sterbenz)
  b = s * (h + z * _horner(z, f.log_poly))
  a_hi = _high((g - h) + b)
  a_lo = ((g - a_hi) - h_hi) + (b - h_lo)
  log2e, log2e_hi, log2e_lo = f.log2e
  t1 = a_hi * log2e_hi                                 # exact
  tail = a_lo * log2e + a_hi * log2e_lo
  ef = e.cast(x.dtype)
  w = ef + t1
  y = w + (((ef - w) + t1) + tail)                     # (ef - w) + t1 is w's exact error (|ef| >= 1 > |t1| or ef = 0)
  nan, inf = _c(x, float("nan")), _c(x, float("inf"))
  y = (x < 0).where(nan, x.ne(0).where(x.ne(inf).where(y, inf), -inf))
  return x.ne(x).where(x, y)


def _sin(x: UOp) -> UOp:
  f = _fmt(x)
  ok = x.maximum(-x) < SIN_RANGE[x.dtype.scalar()]   # false for NaN and +-inf too (float16 runs as float32: its range)
  xe = ok.where(x, _c(x, 0))
  k = _rint_int(xe * (2 / 3.141592653589793))        # |k| < 2^sin_kbits
  half = f.sin_kbits // 2
  kh = (k < 0).where(-(-k & -(1 << half)), k & -(1 << half))   # k = kh + kl, both of k's sign: few bits each
  kh, kl = kh.cast(x.dtype), (k - kh).cast(x.dtype)
  # Cody-Waite: r = x - k*pi/2 with products of k's halves and short parts of pi/2 (all exact); the subtractions
  # are tracked with TwoSum so (r_hi, r_lo) holds r to far more than working precision even after cancellation
  # x - kh*P1 is exact (Sterbenz), and so is the next step: x - k*P1 is a multiple of min(ulp(x), ulp(P1)) small
  # enough to be representable
  a = (xe + kh * -f.pio2[0]) + kl * -f.pio2[0]
  lo = _c(x, 0)
  for t in [t for p in f.pio2[1:-1] for t in (kh * -p, kl * -p)] + [k.cast(x.dtype) * -f.pio2[-1]]:
    a, err = _two_sum(a, t)
    lo = lo + err
  r_hi = a + lo
  r_lo = lo - (r_hi - a)
  # x*2/pi was rounded, so k can be one off near a half-integer (float32: for |x| ~ 2^20 by up to 2^-5): move such r
  # by one quadrant to keep |r| <= pi/4 (+ a hair); r_hi -+ pio2_hi is exact (Sterbenz)
  pio2_hi, pio2_lo = f.pio2_hl
  up, down = r_hi > pio2_hi / 2, r_hi < -pio2_hi / 2
  r_hi = up.where(r_hi + -pio2_hi, down.where(r_hi + pio2_hi, r_hi))
  r_lo = up.where(r_lo + -pio2_lo, down.where(r_lo + pio2_lo, r_lo))
  k = up.where(k + 1, down.where(k + -1, k))
  v = _sin_reduced(f, r_hi, r_lo, k)
  y = ok.where(v, (x - x).ne(0).where(_c(x, float("nan")), _c(x, 0)))   # x - x: NaN exactly for +-inf and NaN
  return x.ne(0).where(y, x)                                            # keeps the sign of +-0


def _sin_reduced(f: _Fmt, r_hi: UOp, r_lo: UOp, k: UOp) -> UOp:
  """sin(x) from its reduction x = k*pi/2 + r, r = r_hi + r_lo with |r| <= pi/4 (+ a hair), k an int."""
  z = r_hi * r_hi
  rr = _high(r_hi)
  hz_hi = 0.5 * (rr * rr)                            # exact; r_hi^2/2 = hz_hi + hz_lo
  hz_lo = 0.5 * ((r_hi - rr) * (r_hi + rr))
  # sin(r_hi + r_lo) ~ sin(r_hi) + r_lo*(1 - r^2/2);  cos(r_hi + r_lo) ~ cos(r_hi) - r_hi*r_lo
  sin_v = r_hi + ((r_hi * z) * _horner(z, f.sin_poly) + (r_lo - r_lo * hz_hi))
  w = 1.0 - hz_hi
  cos_v = w + (((1.0 - w) - hz_hi) + (((z * z) * _horner(z, f.cos_poly) - hz_lo) - r_hi * r_lo))
  q = k & 3
  v = (q & 1).ne(0).where(cos_v, sin_v)
  return (q & 2).ne(0).where(-v, v)


# 2/pi to 1300 bits (floor(2/pi * 2^1300)), cut into chunks for the wide reductions (float32: 8 of 28 bits; float64: 46
# of 26 bits, scaled by 2^600 so that every chunk is a normal float64)
_TWO_OVER_PI_1300 = int(
  "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561B7246E3A424DD2E006492EEA09D1921CFE1D"
  "EB1CB129A73EE88235F52EBB4484E99C7026B45F7E413991D639835339F49C845F8BBDF9283B1FF897FFDE05980FEF2F118B"
  "5A0A6D1F6D367ECF27CB09B74F463F669E5FEA2D7527BAC7EBE5F17B3D0739F78A5292EA6BFB5FB11F8D5D0856033046FC7B"
  "6BABF0CFBC209AF4361DA9E39", 16)

def _chunks(bits: int, n: int, scale: int = 0) -> tuple[float, ...]:
  """2/pi's first n chunks of `bits` bits, each exactly a float64 (times 2^scale)."""
  return tuple(math.ldexp((_TWO_OVER_PI_1300 >> (1300 - bits * (i + 1))) & ((1 << bits) - 1), scale - bits * (i + 1)) for i in range(n))

_TWO_OVER_PI_CHUNKS = _chunks(28, 8)
_F64_SCALE = 600
_TWO_OVER_PI_CHUNKS_F64 = _chunks(26, 46, _F64_SCALE)
_PIO2_D = (1.5707963267948966, 6.123233995736766e-17)   # pi/2 = hi + lo in float64


def _rint_f64(v: UOp) -> UOp:
  """v rounded to the nearest integer, ties to even, as float64: below 2^52 by adding and taking away 1.5*2^52 (two
  roundings that are exact but the first, which is the one we want); from 2^52 on v is an integer already."""
  magic = _c(v, 1.5 * 2.0 ** 52)
  return (v.maximum(-v) < 2.0 ** 52).where((v + magic) - magic, v)


def _sin_wide_f32(x: UOp) -> UOp:
  """SIN of float32 for every input, past SIN_RANGE too (a device's native SIN; the decomposition gives +0 there). Inside
  SIN_RANGE it is _sin bit for bit; beyond, the argument is reduced exactly in float64 (Payne-Hanek with 224 bits of
  2/pi): x (exact in float64) times each 28-bit chunk C_i of 2/pi is exact (24 + 28 bits), p_i - 4*rint(p_i/4) drops
  the multiples of 4 exactly (the quadrant keeps its value mod 4), and the remainders (in [-2, 2], exact) are summed
  with TwoSum. The chunks left out weigh < 2^128 * 2^-224 = 2^-96, far below what the 24 bits of the result need at
  any float32's distance from a multiple of pi/2. The float64 polynomial then gives sin within about 0.5 ULP of float32."""
  d64 = dtypes.float64.vec(x.dtype.count)
  finite = (x - x).eq(0)                              # false for +-inf and NaN
  X = finite.where(x, _c(x, 0)).cast(d64)
  s_hi, s_lo = X.const_like(0.0), X.const_like(0.0)
  for c in _TWO_OVER_PI_CHUNKS:
    p = X * c                                         # exact
    rem = p - _rint_f64(p * 0.25) * 4.0               # exact, in [-2, 2]
    s_hi, e = _two_sum(s_hi, rem)
    s_lo = s_lo + e
  kd = _rint_f64(s_hi)                                # |s_hi| <= 16
  t_hi = s_hi - kd                                    # exact, |t_hi| <= 1/2
  t = t_hi + s_lo
  t_lo = s_lo - (t - t_hi)                            # exact (|t_hi| >= |s_lo| or t_hi = 0)
  ph, pl = _PIO2_D
  r_hi = t * ph
  r_lo = t.alu(Ops.MULACC, X.const_like(ph), -r_hi) + (t * pl + t_lo * ph)   # fma: the exact error of r_hi
  r = r_hi + r_lo
  r_lo = r_lo - (r - r_hi)
  big = _sin_reduced(_F64, r, r_lo, kd.cast(dtypes.int64.vec(x.dtype.count))).cast(x.dtype)
  ok = x.maximum(-x) < SIN_RANGE[x.dtype.scalar()]
  return ok.where(_sin(x), finite.where(big, _c(x, float("nan"))))


def _mod4(v: UOp) -> UOp:
  """v - 4*rint(v/4), exact (in [-2, 2]) for a float64 v."""
  return v - _rint_f64(v * 0.25) * 4.0


def _sin_wide_f64(x: UOp) -> UOp:
  """SIN of float64 for every input, past SIN_RANGE too (see _sin_wide_f32; inside the range it is _sin bit for bit).
  x = x_hi + x_lo (26 + 27 bits), scaled by 2^-600 so that it and every 26-bit chunk of 2/pi (scaled by 2^600; 46 of
  them, to 2^-1196) are normal floats: each product is exact, its multiple of 4 is dropped exactly, and the remainders
  are summed in triple-double kept mod 4, about 2^-145 from x*2/pi mod 4. That is far below what 53 bits need at
  any double's distance from a multiple of pi/2 (about 2^-62 at the closest)."""
  ints = dtypes.int64.vec(x.dtype.count)
  finite = (x - x).eq(0)
  X = finite.where(x, _c(x, 0)) * 2.0 ** -_F64_SCALE     # exact: |x| >= SIN_RANGE here, so no underflow
  x_hi = (X.bitcast(ints) & ~((1 << 27) - 1)).bitcast(x.dtype)
  x_lo = X - x_hi
  s0, s1, s2 = _c(x, 0), _c(x, 0), _c(x, 0)
  for c in _TWO_OVER_PI_CHUNKS_F64:
    for part in (x_hi, x_lo):
      s0, e0 = _two_sum(s0, _mod4(part * c))          # the product is exact (or far too small to matter)
      s1, e1 = _two_sum(s1, e0)
      s2 = s2 + e1
      s0 = _mod4(s0)                                  # exact; keeps the leading sum small
  kd = _rint_f64(s0)
  u, e = _two_sum(s0 - kd, s1)                        # s0 - kd exact, |.| <= 1/2
  t_hi = u + (e + s2)
  t_lo = (e + s2) - (t_hi - u)
  ph, pl = _PIO2_D
  r_hi = t_hi * ph
  r_lo = t_hi.alu(Ops.MULACC, _c(x, ph), -r_hi) + (t_hi * pl + t_lo * ph)   # fma: the exact error of r_hi
  r = r_hi + r_lo
  r_lo = r_lo - (r - r_hi)
  big = _sin_reduced(_F64, r, r_lo, kd.cast(ints))
  ok = x.maximum(-x) < SIN_RANGE[x.dtype.scalar()]
  return ok.where(_sin(x), finite.where(big, _c(x, float("nan"))))


_IMPL = {Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin}
# a device's native ones built from the same parts (a renderer with no accurate instruction of its own): SIN reduced
# exactly past SIN_RANGE (float16/bfloat16 run in float32)
_NATIVE_IMPL = {**_IMPL, Ops.SIN: lambda x: _sin_wide_f32(x) if x.dtype.scalar() == dtypes.float32 else _sin_wide_f64(x)}

def _decompose(u: UOp, impl: dict = _IMPL) -> UOp:
  x = u.src[0]
  if u.dtype.scalar() in (dtypes.float16, dtypes.bfloat16):  # in float32, one rounding back at the end
    return impl[u.op](x.cast(dtypes.float32.vec(u.dtype.count))).cast(u.dtype)
  return impl[u.op](x)

_TRANSCENDENTAL = UPat((Ops.EXP2, Ops.LOG2, Ops.SIN), dtype=dtypes.floats, name="u", src=(UPat.var("x"),))
transcendental_rules = PatternMatcher([(_TRANSCENDENTAL, lambda u, x: _decompose(u))])
native_transcendental_rules = PatternMatcher([(_TRANSCENDENTAL, lambda u, x: _decompose(u, _NATIVE_IMPL))])

def decompose_transcendentals(sink: UOp, native: bool = False) -> UOp:
  """Rewrite every EXP2, LOG2 and SIN under `sink` into basic ops (see the module docstring); native: as a device's own
  EXP2/LOG2/SIN (the same, but SIN accurate past SIN_RANGE: `_sin_wide_f32`, `_sin_wide_f64`)."""
  return graph_rewrite(sink, native_transcendental_rules if native else transcendental_rules)
