"""Vector and scalar ALU semantics, one row per opcode name: a function of the typed source arrays (numpy, one element
per lane or per wave) giving the typed result. Semantics: AMD RDNA3 ISA guide, the "Scalar ALU Operations" and
"Vector ALU Operations" chapters (denormals, rounding, modifiers) and the per-opcode pseudocode of its instruction chapter. Floats are IEEE binary16/32/64 with round-to-
nearest-even and denormals kept (the modes LLVM's kernel descriptors set; the dispatch refuses others).

Approximate instructions: v_rcp_f32/f64, v_rsq_f32/f64, v_sqrt_f32/f64, v_exp_f32 (2^x), v_log_f32 (log2), v_sin_f32,
v_cos_f32 and their f16 forms are documented to within 1 ULP (the guide's "transcendental" accuracy notes); here they
give the correctly rounded value (computed in float64 and rounded once), one of the values the hardware may give. LLVM's IEEE-exact sequences (fdiv through v_div_scale/v_div_fmas/v_div_fixup, sqrt with refinement)
then produce the correctly rounded result as they do on hardware."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i16": np.int16, "u16": np.uint16, "b16": np.uint16,
      "i32": np.int32, "u32": np.uint32, "b32": np.uint32, "m": np.uint32, "i64": np.int64, "u64": np.uint64, "b64": np.uint64,
      "p16": np.uint32, "x16": np.uint32}
RAW = {1: np.uint16, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def fmax_ieee(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """v_max_*: IEEE maxNum (a NaN operand loses to a number), +0 > -0."""
  r = np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.where(a > b, a, b)))
  z = (a == 0) & (b == 0)
  return np.where(z, np.where(np.signbit(a) & np.signbit(b), a, np.abs(a)), r).astype(a.dtype)


def fmin_ieee(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  r = np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.where(a < b, a, b)))
  z = (a == 0) & (b == 0)
  return np.where(z, np.where(np.signbit(a) | np.signbit(b), -np.abs(a), a), r).astype(a.dtype)


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """Fused multiply-add with one rounding. f16/f32: the product is exact in f64 and `_fma_exact` rounds the sum once;
  f64: `_fma64`, on one lane a group where every operand's bits are the same in all lanes of each group (`_per_group`)."""
  t = a.dtype
  if t == np.float64:
    if (one := _per_group(a, b, c)) is not None:   # each group's lanes compute the same fma: once a group, copied to its lanes
      ops, g, shape = one
      r = _fma64(*ops)
      return np.repeat(r, g, axis=1).reshape(shape)
    return _fma64(a, b, c)
  return _fma_exact(a.astype(np.float64), b.astype(np.float64), c.astype(np.float64), t)


PER_GROUP_LANES = 1024   # from this many lanes on, f64 fma tests its operands for the same bits across groups of lanes
GROUPS = (32, 16, 8)     # the group sizes tried (lanes of a wave, a half, a quarter), largest first


def _per_group(*xs: np.ndarray) -> tuple[list[np.ndarray], int, tuple[int, ...]] | None:
  """(the operands' first lane of each group of g consecutive lanes ([rows, 1]; a constant as it is), g, the result's
  shape) where the operands are [waves, 32] float64 (or constants) and each one's bits are the same in every lane of
  each group of g (softmax's reciprocal of a row's sum: one value per row, a row 16 lanes of a wave), so that an
  elementwise op on them gives every lane of a group its first lane's result; else None. Bits are compared (-0.0 is
  not 0.0, NaN payloads differ); tests of lane 7 and of each group's last lane first spare the whole comparison."""
  shape = np.broadcast_shapes(*(np.shape(x) for x in xs))
  if len(shape) != 2 or shape[1] != 32 or shape[0] * 32 < PER_GROUP_LANES: return None
  g = GROUPS[0]
  for x in xs:
    x = np.asarray(x)
    if x.ndim == 0 or x.shape == (1, 1) or x.shape == (shape[0], 1): continue
    if x.shape != shape or x.dtype != np.float64: return None
    bits = x.view(np.uint64)
    if not (bits[:, GROUPS[-1] - 1] == bits[:, 0]).all(): return None   # no group at all (lane 7 is not lane 0): at once
    while True:
      r = bits.reshape(-1, g)
      if (r[:, -1] == r[:, 0]).all() and (r == r[:, :1]).all(): break
      if g == GROUPS[-1]: return None
      g = GROUPS[GROUPS.index(g) + 1]
  out = []
  for x in xs:
    x = np.asarray(x)
    if x.ndim == 0 or x.shape == (1, 1): out.append(x)
    elif x.shape == (shape[0], 1): out.append(np.repeat(x, 32 // g, axis=0))   # one value a wave: one a group
    else: out.append(x.reshape(-1, g)[:, :1])
  return out, g, shape


def _fma_exact(a: np.ndarray, b: np.ndarray, c: np.ndarray, t: type, wide: bool = False) -> np.ndarray:
  """round_t(a*b + c) for a, b, c exactly representable in t (f16/f32): a*b is exact in f64; the f64 sum s may be
  inexact, and rounding s to t then double-rounds. Round-to-odd on the f64 sum (using the exact error of the sum)
  makes the second rounding correct (f64 has > 2p+1 bits for p = 24)."""
  with np.errstate(all="ignore"):
    p = a * b
    s = p + c
    # two-sum error of s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    sb = s.view(np.uint64)
    inexact = (err != 0) & np.isfinite(s)
    odd = (sb & np.uint64(1)) == 1
    # round to odd: if inexact and the last bit is even, move one ulp toward the exact value
    toward = np.where((err > 0) == (s > 0), np.uint64(1), np.uint64(0))
    fix = inexact & ~odd
    adj = np.where(toward == 1, sb + np.uint64(1), sb - np.uint64(1))
    s2 = np.where(fix, adj, sb).view(np.float64)
    s2 = np.where(s == 0, s, s2)
    return s2 if wide else s2.astype(t)   # wide: the round-to-odd f64 sum itself


def _fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """f64 fma rounded once, vectorized: Boldo and Melquiond's emulated FMA ("Emulation of FMA and correctly-rounded sums:
  proved algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008, Algorithm 5): the exact product uh + ul
  (Veltkamp/Dekker), th + tl = c + uh exactly (TwoSum), v = round-to-odd(tl + ul), result = round-to-nearest(th + v).
  Proved for binary64 without underflow or overflow, so lanes near the range ends (and zero/inf/NaN operands, and
  results near the denormal range) take the exact per-lane path (`_fma64_exact`). The arithmetic reuses its buffers
  (`out=`): fresh arrays of a dispatch's size cost page faults, more than the operations."""
  A, B, C = (np.asarray(x, np.float64) for x in np.broadcast_arrays(a, b, c))
  with np.errstate(all="ignore"):
    # the common case first, by whole-array min/max (no per-lane masks) of the operands as given (a constant one
    # once, not broadcast): every lane's operands in range (NaN fails)
    a0, b0, c0 = (np.asarray(x, np.float64) for x in (a, b, c))
    every = _all_in(a0, 2.0 ** -450, 2.0 ** 450) and _all_in(b0, 2.0 ** -450, 2.0 ** 450) and _all_in(c0, 2.0 ** -900, 2.0 ** 900)
    if every: x, y, z = A, B, C
    else:
      ok = _in_range(A, 2.0 ** -450, 2.0 ** 450)
      ok &= _in_range(B, 2.0 ** -450, 2.0 ** 450)
      ok &= _in_range(C, 2.0 ** -900, 2.0 ** 900) | (C == 0)
      x, y, z = np.where(ok, A, 1.0), np.where(ok, B, 1.0), np.where(ok, C, 0.0)
    uh, ul = _two_prod(x, y)
    th, tl = _two_sum(z, uh)
    if not tl.any(): r = th + ul   # c + uh exact (th): the exact result th + ul, rounded once (RO(ul) = ul: exact)
    else:
      r = _add_odd(tl, ul)
      r += th
    if every and _all_in(r, 2.0 ** -960, np.finfo(np.float64).max): return r
    if every: ok = np.ones(r.shape, np.bool_)
    t = np.abs(r)
    ok &= (t >= 2.0 ** -960) & (t <= np.finfo(np.float64).max) | (r == 0)   # finite, and zero or far from the denormals
    if ok.all(): return r
    # a zero factor (the product is an exact +-0) or a non-finite operand: a*b + c rounds once, as fma does
    plain = (A == 0) | (B == 0) | ~(np.isfinite(A) & np.isfinite(B) & np.isfinite(C))
    r = np.where(plain, A * B + C, r)
  if not (ok | plain).all():
    rest = ~(ok | plain)
    r[rest] = _fma64_exact(A[rest], B[rest], C[rest])
  return r


def _all_in(x: np.ndarray, lo: float, hi: float) -> bool:
  """lo <= |x| <= hi for every element (False where one is NaN: min/max propagate it). Elements of one sign (a Newton
  step's -d or estimate): |x|'s range from x's own min and max, no |x| array."""
  mn, mx = x.min(), x.max()
  if mn > 0: return bool(mn >= lo and mx <= hi)
  if mx < 0: return bool(-mx >= lo and -mn <= hi)
  t = np.abs(x)
  return bool(t.min() >= lo and t.max() <= hi)


def _mag_range(x: np.ndarray) -> tuple[float, float]:
  """(smallest |x|, largest |x|) as floats (NaN where an element is NaN); elements of one sign: from x's own min and max,
  no |x| array."""
  mn, mx = float(x.min()), float(x.max())
  if mn > 0: return mn, mx
  if mx < 0: return -mx, -mn
  t = np.abs(x)
  return float(t.min()), float(t.max())


def _in_range(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
  """lo <= |x| <= hi (False for NaN)."""
  t = np.abs(x)
  return (t >= lo) & (t <= hi)


LOW27 = np.uint64((1 << 27) - 1)   # the low 27 bits of a float64's significand field


def _short(x: np.ndarray) -> bool:
  """Whether every element's significand fits in 26 bits (the low 27 bits of each field 0; one OR over the array):
  a float32 value (24 bits) widened, or a Newton step's residual, as LLVM's f64 division makes them."""
  return not int(np.bitwise_or.reduce(x.view(np.uint64), axis=None)) & int(LOW27)


def _two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """p + e == a * b exactly (Dekker's product with Veltkamp's split at 2^27 + 1; no overflow or underflow). A factor of
  at most 26 significant bits (`_short`) is its own high part (its low part 0): only the other one is split, and the
  terms with the low part drop out (a*bh and a*bl are exact, 26 + 27 bits; a*bh - p is exact as in Dekker's proof)."""
  p = a * b
  if _short(b): a, b = b, a
  if _short(a):
    bh, bl = _split(b)
    e = a * bh
    e -= p
    t = np.multiply(a, bl, out=bh)
    e += t
    return p, e
  ah, al = _split(a)
  bh, bl = _split(b)
  e = ah * bh          # e = ((ah*bh - p) + ah*bl + al*bh) + al*bl, left to right, in place
  e -= p
  t = np.multiply(ah, bl, out=ah)
  e += t
  t = np.multiply(al, bh, out=ah)
  e += t
  t = np.multiply(al, bl, out=ah)
  e += t
  return p, e


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Veltkamp's split: x == h + l with h of 26 significant bits (h = t - (t - x), t = (2^27 + 1) x)."""
  t = x * 134217729.0
  d = t - x
  h = np.subtract(t, d, out=t)
  return h, np.subtract(x, h, out=d)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """s + e == a + b exactly (Knuth's TwoSum): e = (a - (s - bb)) + (b - bb), bb = s - a."""
  s = a + b
  bb = s - a
  t = s - bb
  e = np.subtract(a, t, out=t)
  bb = np.subtract(b, bb, out=bb)
  e += bb
  return s, e


def _add_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """a + b rounded to odd: the nearest sum, moved one ulp toward the exact sum when inexact with an even last bit."""
  s, e = _two_sum(a, b)
  bits = s.view(np.uint64)
  fix = (bits & np.uint64(1)) == 0
  fix &= e != 0
  # +1 ulp away from zero where e has s's sign (the exact sum is larger in magnitude), else -1: the bit pattern moves
  # by 1 - 2 * (sign bits differ), modulo 2^64, only where fix (integer ops only: no np.where)
  step = np.bitwise_xor(e.view(np.uint64), bits, out=e.view(np.uint64))
  step >>= np.uint64(63)
  step <<= np.uint64(1)
  np.subtract(np.uint64(1), step, out=step)
  step *= fix
  bits += step
  return s


def _fma64_exact(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  from fractions import Fraction  # exact per-lane path: operands near the range ends, zeros, inf/NaN (rare)
  out = np.empty(a.shape, np.float64)
  for ix in np.ndindex(out.shape):
    x, y, z = float(a[ix]), float(b[ix]), float(c[ix])
    if not all(np.isfinite(v) for v in (x, y, z)) or x == 0 or y == 0:
      with np.errstate(all="ignore"): out[ix] = np.float64(x) * np.float64(y) + np.float64(z)
      continue
    ex = Fraction(x) * Fraction(y) + Fraction(z)
    out[ix] = _round_f64(ex, z)
  return out


def _round_f64(ex, z: float) -> float:
  """The exact sum rounded once (Fraction -> float rounds half to even); an exact zero is +0 (round to nearest)."""
  if ex == 0: return 0.0
  try: return float(ex)
  except OverflowError: return float("inf") if ex > 0 else float("-inf")


def trans(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
  """A transcendental op: computed in float64, rounded once to the operand's type (see the module docstring)."""
  def f(a: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"): return fn(a.astype(np.float64)).astype(a.dtype)
  return f


def sqrt_exact(a: np.ndarray) -> np.ndarray:
  # f32/f16: the f64 square root rounded to the narrower type is correctly rounded (2p+2 <= 53)
  with np.errstate(all="ignore"): return np.sqrt(a.astype(np.float64)).astype(a.dtype) if a.dtype != np.float64 else np.sqrt(a)


def cvt_f_to_i(a: np.ndarray, t: type) -> np.ndarray:
  """v_cvt_{i,u}32_f*: truncate toward zero, saturate to the integer range, NaN -> 0 (ISA guide, V_CVT_I32_F32)."""
  info = np.iinfo(t)
  x = np.trunc(a.astype(np.float64))
  x = np.where(np.isnan(x), 0, x)
  return np.clip(x, info.min, info.max).astype(t)


def frexp_exp(a: np.ndarray) -> np.ndarray:
  _, e = np.frexp(a.astype(np.float64))
  return np.where(np.isfinite(a), e, 0).astype(np.int32)


def frexp_mant(a: np.ndarray) -> np.ndarray:
  m, _ = np.frexp(a.astype(np.float64))
  return np.where(np.isfinite(a), m, a).astype(a.dtype)


def ldexp(a: np.ndarray, e: np.ndarray) -> np.ndarray:
  with np.errstate(all="ignore"):
    if a.dtype == np.float64: return _ldexp64(a, e)
    return np.ldexp(a.astype(np.float64), np.clip(e.astype(np.int64), -400, 400).astype(np.int32)).astype(a.dtype)


def _ldexp64(a: np.ndarray, e: np.ndarray) -> np.ndarray:
  return np.ldexp(a, np.clip(e.astype(np.int64), -2200, 2200).astype(np.int32))


def fract(a: np.ndarray) -> np.ndarray:
  with np.errstate(all="ignore"):
    r = a - np.floor(a)
    one_minus = np.nextafter(a.dtype.type(1), a.dtype.type(0))
    return np.where(np.isinf(a), a.dtype.type(np.nan), np.minimum(r, one_minus)).astype(a.dtype)


def cls_class(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """v_cmp_class_*: bit k of the mask tests class k (0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0,
  7 +denormal, 8 +normal, 9 +inf)."""
  t = a.dtype
  nbits = t.itemsize * 8
  raw = a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[t.itemsize]).astype(np.uint64)
  mbits = {16: 10, 32: 23, 64: 52}[nbits]
  quiet_bit = np.uint64(1) << np.uint64(mbits - 1)
  nan = np.isnan(a)
  snan = nan & ((raw & quiet_bit) == 0)
  neg = np.signbit(a)
  inf = np.isinf(a)
  zero = a == 0
  den = ~nan & ~inf & ~zero & (np.abs(a) < np.finfo(t).tiny)
  norm = ~nan & ~inf & ~zero & ~den
  classes = [snan, nan & ~snan, inf & neg, norm & neg, den & neg, zero & neg, zero & ~neg, den & ~neg, norm & ~neg, inf & ~neg]
  m = mask.astype(np.uint32)
  out = np.zeros(np.broadcast(a, m).shape, np.bool_)
  for k, c in enumerate(classes): out |= c & (((m >> np.uint32(k)) & np.uint32(1)) == 1)
  return out


SCALE = {np.float32: (64, 96, 23, 8), np.float64: (128, 768, 53, 11)}   # v_div_scale: 2^k, exponent gap, tiny numerator, exponent bits


def _biased_exp(x: np.ndarray) -> np.ndarray:
  """The exponent field of x as stored (0 for zeros and denormals, all ones for inf/NaN): the guide's exponent()."""
  t = x.dtype.type
  mant, ebits = {np.float32: 23, np.float64: 52}[t], SCALE[t][3]
  raw = x.view({np.float32: np.uint32, np.float64: np.uint64}[t]).astype(np.uint64, copy=False)
  return ((raw >> np.uint64(mant)) & np.uint64((1 << ebits) - 1)).astype(np.int64)


def _denorm(x: np.ndarray) -> np.ndarray: return (x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny)


def div_scale(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """V_DIV_SCALE_F32/F64 (S0 = the value to scale, S1 = denominator, S2 = numerator): the result and VCC, the guide's
  pseudocode case by case (RDNA3 ISA guide, VOP3 opcodes 480/481; docs/hw/rdna3.md "Division"). k = 64 (f32) / 128 (f64):
  zero numerator or denominator -> NaN; exponent(S2) - exponent(S1) >= 96/768 (quotient near the top) -> VCC, S0 * 2^k
  if S0 is the denominator; a denormal denominator -> S0 * 2^k; 1/S1 denormal (f64: |S1| > 2^1022) with a denormal
  quotient -> VCC, S0 * 2^k if S0 is the denominator; 1/S1 denormal -> S0 * 2^-k; a denormal quotient S2/S1 -> VCC,
  S0 * 2^k if S0 is the numerator; exponent(S2) <= 23/53 (tiny numerator) -> S0 * 2^k; otherwise S0 unchanged."""
  t = s0.dtype.type
  k, gap, tiny, ebits = SCALE[t]
  with np.errstate(all="ignore"):
    # no lane can be in a case (the usual): both operands normal and finite, the numerator not tiny, the exponent gap
    # below `gap`, and far from where 1/S1 (|S1| > 2^(bias-1)) or S2/S1 (< 2^(1-bias)) would be denormal (30 binades
    # of margin): S0 unchanged, no VCC, without the divisions the cases need. Found from the operands' smallest and
    # largest magnitudes (a NaN fails every test): a normal x's exponent field is frexp's exponent + bias - 1, and a
    # lane's gap lies between (smallest |S2|, largest |S1|) and (largest |S2|, smallest |S1|)'s
    bias = (1 << (ebits - 1)) - 1
    fi = np.finfo(t)
    (m1, x1), (m2, x2) = _mag_range(s1), _mag_range(s2)
    def ef(v: float) -> int: return int(np.frexp(v)[1]) + bias - 1   # the exponent field of a normal v
    if (float(fi.tiny) <= m1 and x1 <= float(fi.max) and float(fi.tiny) <= m2 and x2 <= float(fi.max) and ef(x1) <= 2 * bias - 30
        and ef(m2) > tiny and ef(m2) - ef(x1) > 30 - bias and ef(x2) - ef(m1) < gap):
      shape = np.broadcast(s0, s1, s2).shape
      return np.broadcast_to(s0, shape).astype(s0.dtype), np.zeros(shape, np.bool_)
    e1, e2 = _biased_exp(s1), _biased_exp(s2)
    rcp_den = _denorm((t(1.0) / s1).astype(t))   # 1/S1 denormal in S1's type (see the docstring)
    q_den = _denorm((s2 / s1).astype(t))
    rest = np.ones(np.broadcast(s0, s1, s2).shape, np.bool_)
    def case(c: np.ndarray) -> np.ndarray:
      nonlocal rest
      c = rest & c
      rest = rest & ~c
      return c
    zero = case((s2 == 0) | (s1 == 0))
    big = case(e2 - e1 >= gap)
    den_dn = case(_denorm(s1))
    both = case(rcp_den & q_den)
    rcp_dn = case(rcp_den)
    quo_dn = case(q_den)
    small = case(e2 <= tiny)
    vcc = big | both | quo_dn
    if rest.all(): return np.broadcast_to(s0, rest.shape).astype(s0.dtype), vcc   # no lane in a case: S0 unchanged (the usual)
    up, down = ldexp(s0, np.full(s0.shape, k)), ldexp(s0, np.full(s0.shape, -k))
    d = np.where(big & (s0 == s1), up, s0)
    d = np.where(both & (s0 == s1), down, d)
    d = np.where(den_dn | small | (quo_dn & (s0 == s2)), up, d)
    d = np.where(rcp_dn, down, d)
    d = np.where(zero, t(np.nan), d)
  return d.astype(s0.dtype), vcc


def div_fmas(a: np.ndarray, b: np.ndarray, c: np.ndarray, vcc: np.ndarray) -> np.ndarray:
  """V_DIV_FMAS_F32/F64: fma(a, b, c), and in VCC lanes the post-scale that undoes V_DIV_SCALE's: 2^k when |c| >= 2 (the
  denominator was scaled up: the quotient is 2^-k too small), else 2^-k (the numerator was scaled up), k = 64 (f32) /
  128 (f64), applied to the exact fma before its one rounding. The guide's pseudocode (opcodes 482/483) writes the
  factor as 2^32 / 2^64 without a direction; that would not invert V_DIV_SCALE's 2^64 / 2^128 (see docs/hw/rdna3.md)."""
  r = fma(a, b, c)
  if not vcc.any(): return r
  t = a.dtype.type
  k = SCALE[t][0]
  A, B, C, V = (np.broadcast_to(x, r.shape) for x in (a, b, c, vcc))
  sh = np.where(np.abs(C) >= 2, k, -k)
  if t == np.float32:
    with np.errstate(all="ignore"):
      x, y, z = A.astype(np.float64), B.astype(np.float64), C.astype(np.float64)
      wide = _fma_exact(x, y, z, np.float64, wide=True)   # round-to-odd in f64: scaling it is exact, one rounding to f32 after
      scaled = np.ldexp(wide, sh.astype(np.int32)).astype(np.float32)
    return np.where(V, scaled, r).astype(np.float32)
  out = r.copy()
  from fractions import Fraction  # VCC lanes of f64 (a division at the ends of the range: rare): exact, one rounding
  for ix in zip(*np.nonzero(V)):
    x, y, z = float(A[ix]), float(B[ix]), float(C[ix])
    if not all(np.isfinite(v) for v in (x, y, z)):
      with np.errstate(all="ignore"): out[ix] = np.ldexp(np.float64(x) * np.float64(y) + np.float64(z), int(sh[ix]))
      continue
    out[ix] = _round_f64((Fraction(x) * Fraction(y) + Fraction(z)) * Fraction(2) ** int(sh[ix]), z)
  return out


def div_fixup(q: np.ndarray, d: np.ndarray, n: np.ndarray) -> np.ndarray:
  """V_DIV_FIXUP (S0 = quotient estimate, S1 = denominator, S2 = numerator): the IEEE special cases of n / d (RDNA3 ISA
  guide, opcodes 351/479 and the f16 form): NaN operands, 0/0 and inf/inf, x/0 and inf/y, x/inf and 0/y, and (f32/f64)
  exponent(S2) - exponent(S1) < -150 / -1075: a quotient below half the smallest denormal, +-0. Then a NaN estimate
  left by an overflowing quotient (the scaled Newton-Raphson steps compute inf - inf) gives +-inf, as GCN's
  V_DIV_FIXUP describes (docs/hw/rdna3.md "Division"); otherwise the estimate with the quotient's sign."""
  t = q.dtype.type
  with np.errstate(all="ignore"):
    # no lane can be in a case, by whole-array reductions (the usual division): d and n finite and nonzero (min/max of
    # their magnitudes; a NaN fails both), the estimate no NaN (max propagates one), and the smallest |n| over the
    # largest |d| far from a tiny quotient: a lane's exponent fields differ by at least frexp's exponents of those two
    # (the largest |d| normal: its field is its frexp exponent + bias - 1; a denormal n's field 0 is above that), with
    # 8 binades of margin
    if t in SCALE and q.size:
      fi = np.finfo(t)
      (dmin, dmax), (nmin, nmax) = _mag_range(d), _mag_range(n)
      if (0 < dmin and float(fi.tiny) <= dmax <= float(fi.max) and 0 < nmin and nmax <= float(fi.max) and not np.isnan(q.max())
          and np.frexp(nmin)[1] - np.frexp(dmax)[1] > {np.float32: -150, np.float64: -1075}[t] + 8):
        # |q| with the sign of d * n: the quotient's (both finite and nonzero: an overflowing or underflowing product
        # keeps its sign)
        return np.copysign(q, np.multiply(d, n, dtype=q.dtype)).astype(q.dtype, copy=False)
    sign = np.signbit(d) ^ np.signbit(n)
    inf = np.where(sign, t(-np.inf), t(np.inf))
    zero = np.where(sign, t(-0.0), t(0.0))
    r = np.where(sign, -np.abs(q), np.abs(q))
    tiny = _biased_exp(n) - _biased_exp(d) < {np.float32: -150, np.float64: -1075}[t] if t in SCALE else False
    # no lane with a special case (every operand finite, d and n nonzero, the estimate no NaN, the quotient not tiny):
    # the estimate with the quotient's sign, as the cases below leave it (the usual)
    if not (tiny | np.isnan(q) | ~np.isfinite(d) | ~np.isfinite(n) | (d == 0) | (n == 0)).any(): return r.astype(q.dtype)
    r = np.where(np.isnan(q), inf, r)
    if t in SCALE: r = np.where(tiny, zero, r)
    r = np.where(np.isinf(d) | (n == 0), zero, r)
    r = np.where((d == 0) | np.isinf(n), inf, r)
    r = np.where(((d == 0) & (n == 0)) | (np.isinf(d) & np.isinf(n)), t(np.nan), r)
    r = np.where(np.isnan(d), d, r)
    r = np.where(np.isnan(n), n, r)
  return r.astype(q.dtype)


def bfe(x: np.ndarray, off: np.ndarray, width: np.ndarray, signed: bool, bits: int = 32) -> np.ndarray:
  ut = np.uint32 if bits == 32 else np.uint64
  o = off.astype(np.uint64) & np.uint64(bits - 1)
  w = width.astype(np.uint64) & np.uint64(bits - 1 if bits == 32 else 127)
  xu = x.astype(ut).astype(np.uint64) if bits == 32 else x.astype(np.uint64)
  v = (xu >> o) & ((np.uint64(1) << w) - np.uint64(1)) if bits == 32 else _mask64(xu >> o, w)
  if signed:
    sh = np.uint64(64) - w
    v = np.where(w == 0, np.uint64(0), ((v << sh).view(np.int64) >> sh.astype(np.int64)).view(np.uint64))
  return v.astype(ut) if bits == 32 else v


def _mask64(v: np.ndarray, w: np.ndarray) -> np.ndarray:
  return np.where(w >= 64, v, v & ((np.uint64(1) << np.minimum(w, 63)) - np.uint64(1)))


def u32(x) -> np.ndarray: return np.asarray(x).astype(np.uint32)


def mul24(a: np.ndarray, b: np.ndarray, signed: bool) -> np.ndarray:
  """The 24-bit multiplies: the low 24 bits of each operand (sign-extended for the signed forms), the 48-bit product."""
  if signed:
    x = (a.astype(np.int64) << 40) >> 40
    y = (b.astype(np.int64) << 40) >> 40
  else:
    x = a.astype(np.int64) & 0xFFFFFF
    y = b.astype(np.int64) & 0xFFFFFF
  return x * y


def clz(x: np.ndarray, bits: int) -> np.ndarray:
  """Leading zeros (all ones = -1 for a zero input: V_CLZ_I32_U32 / S_CLZ_I32_U32)."""
  v = x.astype(np.uint64)
  n = np.full(v.shape, -1, np.int64)
  for k in range(bits - 1, -1, -1):
    hit = (n < 0) & (((v >> np.uint64(k)) & np.uint64(1)) == 1)
    n = np.where(hit, bits - 1 - k, n)
  return n.astype(np.int32)


def ctz(x: np.ndarray, bits: int) -> np.ndarray:
  v = x.astype(np.uint64)
  n = np.full(v.shape, -1, np.int64)
  for k in range(bits):
    hit = (n < 0) & (((v >> np.uint64(k)) & np.uint64(1)) == 1)
    n = np.where(hit, k, n)
  return n.astype(np.int32)


def popcount(x: np.ndarray) -> np.ndarray:
  v = x.astype(np.uint64)
  n = np.zeros(v.shape, np.uint32)
  for k in range(64): n += ((v >> np.uint64(k)) & np.uint64(1)).astype(np.uint32)
  return n


def brev32(x: np.ndarray) -> np.ndarray:
  v = x.astype(np.uint32)
  out = np.zeros(v.shape, np.uint32)
  for k in range(32): out |= ((v >> np.uint32(k)) & np.uint32(1)) << np.uint32(31 - k)
  return out


def perm_b32(s0: np.ndarray, s1: np.ndarray, sel: np.ndarray) -> np.ndarray:
  """V_PERM_B32: each result byte picks a byte of {s0, s1} (selector 0-7; 8-11 sign bytes; 12 -> 0x00; >= 13 -> 0xFF)."""
  data = (s0.astype(np.uint64) << np.uint64(32)) | s1.astype(np.uint64)
  out = np.zeros(np.broadcast(s0, s1, sel).shape, np.uint32)
  for k in range(4):
    b = (sel.astype(np.uint32) >> np.uint32(8 * k)) & np.uint32(0xFF)
    byte = ((data >> (np.minimum(b, 7).astype(np.uint64) * np.uint64(8))) & np.uint64(0xFF)).astype(np.uint32)
    sgn = lambda bit: np.where(((data >> np.uint64(bit)) & np.uint64(1)) == 1, np.uint32(0xFF), np.uint32(0))
    byte = np.where(b == 8, sgn(15), np.where(b == 9, sgn(31), np.where(b == 10, sgn(47), np.where(b == 11, sgn(63), byte))))
    byte = np.where(b == 12, np.uint32(0), np.where(b >= 13, np.uint32(0xFF), byte))
    out |= byte << np.uint32(8 * k)
  return out
