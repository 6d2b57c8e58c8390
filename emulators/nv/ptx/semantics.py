"""PTX value semantics (PTX ISA 9.0 §9.7): one function per instruction family over whole numpy lane arrays.
Values are numpy arrays of the instruction's type; f32 directed rounding goes through float64 round-to-odd."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from refgrad.uop.semantics import add_round_to_odd, bf16_to_f32, f32_to_bf16, f64_to_bf16, fma_f64, two_prod, two_sum

NP = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
      "b8": np.uint8, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64, "f16": np.float16, "f32": np.float32, "f64": np.float64,
      "bf16": np.uint16, "f16x2": np.uint32, "bf16x2": np.uint32, "pred": np.bool_}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SINT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def is_float(t: str) -> bool: return t[0] == "f" or t.startswith("bf")
def is_signed(t: str) -> bool: return t[0] == "s"


def round_dir(y: np.ndarray, mode: str, dt: type) -> np.ndarray:
  """float64 y (already rounded to odd, or exact) rounded to dt (float32/float16) by mode rn/rz/rm/rp."""
  with np.errstate(all="ignore"):
    r = y.astype(dt)
    if mode == "rn": return r
    rd = r.astype(np.float64)
    if mode == "rz": fix, to = np.abs(rd) > np.abs(y), np.zeros_like(r)
    elif mode == "rm": fix, to = rd > y, np.full_like(r, -np.inf)
    elif mode == "rp": fix, to = rd < y, np.full_like(r, np.inf)
    else: raise ValueError(mode)
    fix &= ~np.isnan(y)
    return np.where(fix, np.nextafter(r, to), r)


def round_f64_dir(s: np.ndarray, e: np.ndarray, mode: str) -> np.ndarray:
  """float64 s = RN(x), e = x - s exactly -> x rounded by mode."""
  if mode == "rn": return s
  with np.errstate(all="ignore"):
    if mode == "rz": fix, to = (e != 0) & (np.sign(e) != np.sign(s)), np.zeros_like(s)
    elif mode == "rm": fix, to = e < 0, np.full_like(s, -np.inf)
    else: fix, to = e > 0, np.full_like(s, np.inf)
    return np.where(fix & np.isfinite(s), np.nextafter(s, to), s)


def ftz(x: np.ndarray) -> np.ndarray:
  """Subnormal f32 -> zero of the same sign (.ftz)."""
  if x.dtype != np.float32: return x
  tiny = (np.abs(x) < np.float32(1.1754944e-38)) & (x != 0)
  return np.where(tiny, np.copysign(np.float32(0), x), x)


def sat(x: np.ndarray) -> np.ndarray:
  """.sat: clamp to [0, 1], NaN -> +0."""
  with np.errstate(invalid="ignore"):
    return np.where(np.isnan(x), x.dtype.type(0), np.clip(x, 0, 1)).astype(x.dtype)


def fadd(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
  with np.errstate(all="ignore"):
    if mode == "rn" or a.dtype == np.float16: return a + b
    if a.dtype == np.float32: return round_dir(add_round_to_odd(a.astype(np.float64), b.astype(np.float64)), mode, np.float32)
    s, e = two_sum(a, b)
    return round_f64_dir(s, e, mode)


def fmul(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
  with np.errstate(all="ignore"):
    if mode == "rn" or a.dtype == np.float16: return a * b
    if a.dtype == np.float32: return round_dir(a.astype(np.float64) * b.astype(np.float64), mode, np.float32)   # exact in f64
    p, e = two_prod(a, b)
    return round_f64_dir(p, e, mode)


def ffma(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str) -> np.ndarray:
  """One rounding of a*b+c."""
  with np.errstate(all="ignore"):
    if a.dtype == np.float32:
      p = a.astype(np.float64) * b.astype(np.float64)   # exact
      return round_dir(add_round_to_odd(p, c.astype(np.float64)), mode, np.float32)
    if a.dtype == np.float16:
      p = a.astype(np.float64) * b.astype(np.float64)
      return round_dir(add_round_to_odd(p, c.astype(np.float64)), mode, np.float16)
    s = fma_f64(a, b, c)
    if mode == "rn": return s
    return _fma_f64_dir(a, b, c, s, mode)


def _sum_sign(terms: list[np.ndarray]) -> np.ndarray:
  """The sign (-1, 0, 1) of the exact sum of float64 terms: Shewchuk's grow-expansion (TwoSum, exact without overflow) makes
  non-overlapping components; the sum has the sign of the largest nonzero one (the last nonzero, in increasing order)."""
  comps: list[np.ndarray] = []
  for t in terms:
    q, nxt = t, []
    for e in comps:
      q, h = two_sum(q, e)
      nxt.append(h)
    comps = [*nxt, q]
  sign = np.zeros(terms[0].shape)
  for c in comps: sign = np.where(c != 0, np.sign(c), sign)   # later components are larger
  return sign


def _fma_f64_dir(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: np.ndarray, mode: str) -> np.ndarray:
  """fma.{rz,rm,rp}.f64 from s = RN(a*b + c): the sign of the exact residual a*b + c - s = (p - s) + pe + c, with
  p + pe = a*b exactly (TwoProduct), says whether s moves one ulp toward the mode's direction. Exact zero results take
  IEEE-754's signs (§6.3: +0 but for roundTowardNegative's -0, unless both addends are zeros of one sign)."""
  operands = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
  finite = operands & np.isfinite(s)
  p = a * b
  live = finite & (p != 0)
  # lanes the residual cannot decide: extreme values, and a result that overflowed or underflowed to zero
  bad = operands & (a != 0) & (b != 0) & ((live & _beyond(*(np.where(live, x, 0.0) for x in (a, b, c, p, s)))) | ~np.isfinite(s) | (s == 0) | (p == 0))
  p, pe = two_prod(np.where(bad, 0.0, a), np.where(bad, 0.0, b))
  sign = np.where(live & ~bad, _sum_sign([np.where(live & ~bad, x, 0.0) for x in (-s, p, pe, c)]), 0.0)
  r = round_f64_dir(s, sign, mode)
  def exact(i: int) -> Fraction | float:
    v = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
    return v if v != 0 else (-0.0 if mode == "rm" else 0.0)   # (a nonzero product cancelled exactly: IEEE's zero sign)
  r = _exact_f64(bad, r, exact, mode)
  if mode == "rm":
    pz = np.where(np.signbit(a) != np.signbit(b), -0.0, 0.0)   # the sign of a zero product
    both_pos = ((p == 0) & ~np.signbit(pz)) & ((c == 0) & ~np.signbit(c))
    r = np.where(finite & ~bad & (r == 0) & (sign == 0), np.where(both_pos, 0.0, -0.0), r)
  return r


def _to_odd(q: np.ndarray, toward: np.ndarray) -> np.ndarray:
  """float64 q = RN(x) and the sign of x - q (0: exact) -> x rounded to odd in float64 (q, or its neighbour toward x
  when q's last bit is even): rounding that once more to float32 by any mode equals rounding x once (53 >= 24 + 2)."""
  even = (q.view(np.uint64) & np.uint64(1)) == 0
  nudge = (toward != 0) & even & np.isfinite(q)
  return np.where(nudge, np.nextafter(q, np.where(toward > 0, np.inf, -np.inf)), q)


_SAFE_LO, _SAFE_HI = 2.0 ** -960, 2.0 ** 960   # float64 operands whose remainders below are exact and never underflow


def _beyond(*xs: np.ndarray) -> np.ndarray:
  """Lanes with a finite nonzero operand or result outside [2**-960, 2**960]: the residual tricks below are not exact
  there, so those lanes are rounded from exact rationals instead (_exact_f64)."""
  bad = np.zeros(xs[0].shape, np.bool_)
  for x in xs:
    ax = np.abs(x)
    bad |= np.isfinite(x) & (x != 0) & ((ax < _SAFE_LO) | (ax > _SAFE_HI))
  return bad


_F64_MAX = float(np.finfo(np.float64).max)


def round_fraction_f64(q: Fraction, mode: str) -> float:
  """The exact nonzero rational q rounded to float64 by mode (rn rz rm rp), subnormals and overflow included."""
  neg, x = q < 0, abs(q)
  e = x.numerator.bit_length() - x.denominator.bit_length()
  if Fraction(2) ** e > x: e -= 1   # 2**e <= x < 2**(e + 1)
  u = max(e - 52, -1074)            # the unit in the last place there
  m = x / Fraction(2) ** u
  k, rem = divmod(m.numerator, m.denominator)
  up = rem != 0 and ((mode == "rp" and not neg) or (mode == "rm" and neg) or
                     (mode == "rn" and (2 * rem > m.denominator or (2 * rem == m.denominator and k & 1))))
  v = Fraction(k + up) * Fraction(2) ** u
  if v <= _F64_MAX: r = float(v)
  else: r = math.inf if mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg) else _F64_MAX   # overflow
  return -r if neg else r


def _exact_f64(bad: np.ndarray, r: np.ndarray, value, mode: str) -> np.ndarray:
  """r with its `bad` lanes replaced by value(i) (an exact Fraction, or a float for an exact special) rounded by mode."""
  if not bad.any(): return r
  r = r.copy()
  for i in np.flatnonzero(bad).tolist():   # (only operands beyond 2**+-960: rare)
    v = value(i)
    r[i] = v if isinstance(v, float) else round_fraction_f64(v, mode)
  return r


def fdiv(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
  """Correctly rounded a / b by mode. Directed modes: the exact remainder r = a - q*b (one fma; exact for a correctly
  rounded q) says on which side of q = RN(a/b) the true quotient lies."""
  with np.errstate(all="ignore"):
    if a.dtype == np.float64:
      q = a / b
      if mode == "rn": return q
      bad = (_beyond(a, b, q) | np.isinf(q) | (q == 0)) & np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)   # (and over/underflow)
      r = fma_f64(-q, b, a)
      ok = np.isfinite(r) & np.isfinite(q) & (q != 0)
      out = round_f64_dir(q, np.where(ok, np.sign(r) * np.sign(b), 0.0), mode)
      return _exact_f64(bad, out, lambda i: Fraction(float(a[i])) / Fraction(float(b[i])), mode)
    # f64 quotient of f32 operands, then RN to f32: double rounding is innocuous for p=24, q=53 >= 2p+2 (Figueroa)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    q = a64 / b64
    if mode == "rn": return q.astype(a.dtype)
    r = fma_f64(-q, b64, a64)   # f32 operands: quotient and remainder are far from float64's limits
    return round_dir(_to_odd(q, np.where(np.isfinite(r), np.sign(r) * np.sign(b64), 0.0)), mode, a.dtype)


def fsqrt(a: np.ndarray, mode: str) -> np.ndarray:
  """Correctly rounded sqrt by mode; directed modes from the sign of the exact residual a - s*s."""
  with np.errstate(all="ignore"):
    if a.dtype == np.float64:
      s = np.sqrt(a)
      if mode == "rn": return s
      bad = _beyond(a) & (a > 0)
      r = fma_f64(-s, s, a)
      ok = np.isfinite(r) & np.isfinite(s) & (s > 0)
      out = round_f64_dir(s, np.where(ok, np.sign(r), 0.0), mode)
      return _exact_f64(bad, out, lambda i: _sqrt_dir(float(a[i]), mode), mode)
    a64 = a.astype(np.float64)
    s = np.sqrt(a64)
    if mode == "rn": return s.astype(a.dtype)
    r = fma_f64(-s, s, a64)
    return round_dir(_to_odd(s, np.where(np.isfinite(r) & (s > 0), np.sign(r), 0.0)), mode, a.dtype)


def _sqrt_dir(a: float, mode: str) -> float:
  """sqrt(a) of a positive finite float64 rounded by a directed mode: the float s next to the root on the mode's side
  (s*s compared with a exactly); rn's root is np.sqrt's."""
  s = float(np.sqrt(a))
  x = Fraction(a)
  while Fraction(s) ** 2 > x: s = float(np.nextafter(s, 0.0))                  # the largest s with s*s <= a
  while Fraction(float(np.nextafter(s, math.inf))) ** 2 <= x: s = float(np.nextafter(s, math.inf))
  return s if mode != "rp" or Fraction(s) ** 2 == x else float(np.nextafter(s, math.inf))


def fminmax(a: np.ndarray, b: np.ndarray, is_max: bool, nan: bool) -> np.ndarray:
  """min/max: a NaN operand gives the other (both NaN: canonical NaN); .NaN propagates; -0 < +0."""
  with np.errstate(invalid="ignore"):
    r = np.fmax(a, b) if is_max else np.fmin(a, b)
    z = (a == 0) & (b == 0)
    if z.any():
      sa, sb = np.signbit(a), np.signbit(b)
      neg = (sa & sb) if is_max else (sa | sb)
      r = np.where(z, np.where(neg, -np.zeros_like(a), np.zeros_like(a)), r)
    either = np.isnan(a) | np.isnan(b) if nan else np.isnan(a) & np.isnan(b)
    return np.where(either, np.array(np.nan, a.dtype), r)


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


def cmp(a: np.ndarray, b: np.ndarray, c: str, t: str) -> np.ndarray:
  """setp/set comparison c on type t (unordered forms are true when either is NaN)."""
  with np.errstate(invalid="ignore"):
    if is_float(t):
      nan = np.isnan(a) | np.isnan(b)
      if c == "num": return ~nan
      if c == "nan": return nan
      if c.endswith("u"): return _CMP[c[:-1]](a, b) | nan
      r = _CMP[c](a, b)
      return r & ~nan if c == "ne" else r
    if c in ("lo", "ls", "hi", "hs"):
      a, b = a.view(UINT[a.itemsize]), b.view(UINT[b.itemsize])
    return _CMP[c](a, b)


def umulhi(a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
  """High half of the unsigned product of two `bits`-bit arrays."""
  if bits <= 32:
    return ((a.astype(np.uint64) * b.astype(np.uint64)) >> np.uint64(bits)).astype(UINT[bits // 8])
  a, b = a.view(np.uint64), b.view(np.uint64)
  m = np.uint64(0xFFFFFFFF)
  s32 = np.uint64(32)
  al, ah, bl, bh = a & m, a >> s32, b & m, b >> s32
  ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
  mid = (ll >> s32) + (lh & m) + (hl & m)
  return hh + (lh >> s32) + (hl >> s32) + (mid >> s32)


def mulhi(a: np.ndarray, b: np.ndarray, signed: bool) -> np.ndarray:
  bits = a.itemsize * 8
  if not signed: return umulhi(a, b, bits)
  if bits <= 32: return ((a.astype(np.int64) * b.astype(np.int64)) >> np.int64(bits)).astype(a.dtype)
  ua, ub = a.view(np.uint64), b.view(np.uint64)
  h = umulhi(ua, ub, 64)
  h = h - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
  return h.view(np.int64)


INT_ROUND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def to_int(x: np.ndarray, t: str, rnd: str) -> np.ndarray:
  """Float -> integer type t: round by rnd (rni rzi rmi rpi; plain = rzi), saturate to t's range, NaN -> 0 (PTX cvt)."""
  with np.errstate(all="ignore"):
    f = x.astype(np.float64)
    f = INT_ROUND.get(rnd, np.trunc)(f)
    dt = NP[t]
    info = np.iinfo(dt)
    lo, hi = float(info.min), float(info.max)
    f = np.where(np.isnan(f), 0.0, f)
    big = f >= hi   # 2**63 and 2**64 are not below the max as floats
    small = f <= lo
    r = np.where(big | small, 0.0, f).astype(dt)
    return np.where(big, dt(info.max), np.where(small, dt(info.min), r))


TF32_ROUNDS = ("rna", "rn", "rz")


def to_tf32(x: np.ndarray, rnd: str) -> np.ndarray:
  """cvt.{rna,rn,rz}.tf32.f32: float32 x rounded to tf32 (float32's sign and exponent, 10 mantissa bits), returned as the
  .b32 float32 bits whose low 13 bits are zero. rna: to nearest, ties away from zero (what __float_to_tf32 emits); rn:
  ties to even; rz: toward zero. Rounding works on the magnitude's bits, so subnormals round the same way and a carry
  out of the largest finite values gives infinity. A NaN gives the canonical NaN 0x7FFFFFFF (its payload may lie only
  in the dropped bits)."""
  u = np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32)
  mag, sign = u & np.uint32(0x7FFFFFFF), u & np.uint32(0x80000000)
  with np.errstate(over="ignore"):
    if rnd == "rna": mag = mag + np.uint32(0x1000)
    elif rnd == "rn": mag = mag + np.uint32(0xFFF) + ((mag >> np.uint32(13)) & np.uint32(1))
    elif rnd != "rz": raise ValueError(f"cvt to tf32: rounding .{rnd} is not one of .rna .rn .rz")
  r = (mag & np.uint32(0xFFFFE000)) | sign
  return np.where(np.isnan(np.asarray(x, np.float32)), np.uint32(0x7FFFFFFF), r).astype(np.uint32)


def to_float(x: np.ndarray, src: str, dst: str, rnd: str) -> np.ndarray:
  """cvt to a float type (f16 bf16 f32 f64; bf16 returned as its u16 bits) from any type, rounding by rnd (rn rz rm rp)."""
  mode = rnd or "rn"
  with np.errstate(all="ignore"):
    if src == "bf16": x, src = bf16_to_f32(x), "f32"
    if is_float(src): f = x.astype(np.float64)
    else: f = int_to_f64_odd(x)
    if dst == "f64":
      if is_float(src) or x.itemsize < 8: return f
      return x.astype(np.float64) if mode == "rn" else _int64_to_f64_dir(x, mode)
    if dst == "f32": return round_dir(f, mode, np.float32)
    if dst == "f16": return round_dir(f, mode, np.float16)
    if dst == "bf16":
      if mode == "rn": return f64_to_bf16(f).view(np.uint16) if f.dtype == np.float64 else f32_to_bf16(f).view(np.uint16)
      return _bf16_dir(f, mode)
  raise NotImplementedError(f"cvt to {dst}")


def _int64_to_f64_dir(v: np.ndarray, mode: str) -> np.ndarray:
  """64-bit integers -> float64 rounded by a directed mode: RN, then one step back where it went the wrong way."""
  f = v.astype(np.float64)
  over = f >= (2.0**63 if v.dtype == np.int64 else 2.0**64)   # (rounded up to a power of two past the type's range)
  back = np.where(over, 0, f).astype(v.dtype)
  above, below = over | (back > v), ~over & (back < v)   # f against the exact integer
  down = above & ((mode == "rm") | ((mode == "rz") & (v > 0)))
  up = below & ((mode == "rp") | ((mode == "rz") & (v < 0)))
  return np.where(down, np.nextafter(f, -np.inf), np.where(up, np.nextafter(f, np.inf), f))


def _bf16_dir(f: np.ndarray, mode: str) -> np.ndarray:
  """float64 values (exact, or rounded to odd) -> bfloat16 bits rounded by a directed mode: to float32 by rounding to
  odd (innocuous before a rounding to 8 bits), then the low 16 bits dropped, the kept part stepped away from zero when
  the mode rounds that way and something was dropped. NaN stays a quiet NaN."""
  f32 = f.astype(np.float32)
  wrong = np.isfinite(f) & (f32.astype(np.float64) != f) & ((f32.view(np.uint32) & np.uint32(1)) == 0)
  f32 = np.where(wrong, np.nextafter(f32, np.where(f > f32, np.float32(np.inf), np.float32(-np.inf))), f32)
  b = f32.view(np.uint32)
  hi, lost, neg = (b >> np.uint32(16)).astype(np.uint16), (b & np.uint32(0xFFFF)) != 0, (b >> np.uint32(31)) == 1
  away = lost & np.isfinite(f32) & (((mode == "rp") & ~neg) | ((mode == "rm") & neg))
  out = np.where(away, hi + np.uint16(1), hi).astype(np.uint16)   # (past the largest finite value: the infinity)
  return np.where(np.isnan(f32), np.uint16(0x7FC0) | (hi & np.uint16(0x8000)), out).astype(np.uint16)


def int_to_f64_odd(v: np.ndarray) -> np.ndarray:
  """Integers -> float64 rounded to odd (exact below 2**53): one more rounding to a narrower float is then exact."""
  with np.errstate(all="ignore"):
    f = v.astype(np.float64)
    if v.dtype not in (np.int64, np.uint64): return f
    over = f >= (2.0**63 if v.dtype == np.int64 else 2.0**64)
    back = np.where(over, 0, f).astype(v.dtype)
    gt, lt = over | (back > v), ~over & (back < v)
    even = (f.view(np.uint64) & np.uint64(1)) == 0
    return np.where((gt | lt) & even, np.nextafter(f, np.where(lt, np.inf, -np.inf)), f)
