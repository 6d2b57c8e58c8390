"""The reference semantics: the exact result of every ALU op, CAST and BITCAST on every dtype.

This module is the written specification that every backend is measured against. The PYTHON device
executes `evaluate` directly; every other backend must reproduce its results bit for bit (compared
with `same_bits`) on the same linear program. Each rule below is implemented by the code beneath it.

Storage form
  A value of dtype d is a numpy array of `d.np`; bfloat16 has no numpy type and is held as its raw
  bits in uint16. A vector dtype d.vec(n) adds a trailing axis of length n and every op works lane by
  lane. Uniform values may have shape (1,) (or be 0-d) and broadcast with the rest by numpy's rules.

Integers (int8..int64, uint8..uint64), two's complement
  - ADD, MUL, NEG, SHL wrap around at the width of the dtype; NEG of an unsigned value is 0 - x
    modulo 2**bits.
  - IDIV rounds the quotient toward zero and MOD takes the sign of the dividend (as C's / and %), so
    a == IDIV(a, b) * b + MOD(a, b).
  - SHL/SHR need a shift amount in [0, bits). SHR is arithmetic (copies of the sign bit come in) for
    signed dtypes and logical for unsigned ones. SHL of a negative signed value is defined: the bits
    shifted out are lost and the result wraps.
  - CMPLT, CMPNE, MAX compare the mathematical values. XOR, OR, AND are bitwise.
  - bool operands are allowed only for XOR/OR/AND (logical), CMPLT/CMPNE (False < True), MAX
    (logical or) and as the selected values of WHERE.

Floats (float16, bfloat16, float32, float64), IEEE-754 binary formats
  - Every op rounds its exact result once, to nearest with ties to even. There is no FMA contraction
    (a MUL followed by an ADD rounds twice), no fast-math, and subnormals are kept (no FTZ/DAZ).
  - float16 and bfloat16 ops (ADD, MUL, NEG, RECIP, SQRT, MAX, CMPLT, CMPNE) are computed in float32
    and the float32 result is rounded once to the 16-bit format. For + - * / and sqrt this equals
    the correctly rounded 16-bit result, because float32 has at least 2p+2 bits for p = 11 and p = 8.
  - RECIP(x) is 1/x correctly rounded; SQRT is correctly rounded, SQRT(-0) = -0 and SQRT(x<0) = NaN.
  - MAX is commutative bit for bit: NaN when either operand is NaN, MAX(+0, -0) = MAX(-0, +0) = +0,
    otherwise the larger operand.
  - CMPLT and CMPNE are IEEE comparisons: anything compared with NaN is not less and is not-equal;
    -0 and +0 are equal.
  - MULACC(a, b, c) is IEEE fusedMultiplyAdd: a*b + c computed exactly and rounded once.
    float16/bfloat16/float32: the product is exact in float64; the sum is formed in float64 with
    round-to-odd (`add_round_to_odd`), then rounded to the target with ties to even. float64 has
    53 >= p + 2 bits, so this pair of roundings equals one correct rounding. float64: an exact fma
    (`fma_f64`: Veltkamp/Dekker exact product, TwoSum, round-to-odd add, final add), with the rare
    lanes where an intermediate could underflow or overflow computed exactly in rational arithmetic
    (Python integers over a power-of-two denominator, correctly rounded by int true division).
    Backends: fma()/fmaf() for float64/float32, the same round-to-odd scheme for float16/bfloat16.
  - NaN: the sign and payload of a NaN *produced by an op* are unspecified; `same_bits` treats any two
    NaNs of one float dtype as equal (+0 and -0 stay different). Copies (LOAD, STORE, WHERE, GEP,
    VECTORIZE) keep every bit, NaN payloads included.
  - Native transcendentals EXP2, LOG2, SIN are computed in float64 and rounded once to the dtype
    (float64: numpy's own result). They are not bit-exact across backends and are checked within a ULP
    bound; for bit-exact results a renderer asks for the software decompositions
    (refgrad/uop/decompositions.py), which rewrite them into the basic ops above. Special values:
    EXP2(-inf) = 0, EXP2(+inf) = inf, LOG2(+-0) = -inf, LOG2(x<0) = NaN, LOG2(inf) = inf,
    SIN(+-inf) = NaN, NaN in gives NaN out.

CAST
  - float -> float and int -> float: one rounding to nearest-even from the exact source value. Wide
    sources that float64 cannot hold exactly (int64/uint64 -> bfloat16/float16/float32) go through a
    round-to-odd float64 first, so they are never rounded twice. A NaN stays a quiet NaN of the same
    sign (payload implementation-defined); infinities stay infinities; too-large values become inf.
  - float -> int truncates toward zero. The source must be finite and the truncated value must fit the
    target, else the cast is undefined (e.g. -0.7 -> uint8 is 0 and defined; -1.0 -> uint8 is UB).
  - anything -> bool is x != 0 (so NaN -> True, -0.0 -> False); bool -> number gives 0 or 1.
  - int -> int keeps the low bits of the two's-complement value, widening by sign extension for a
    signed source and zero extension for an unsigned one.

BITCAST
  Reinterprets the little-endian bytes of each element; source and result have equal itemsize and
  lane count. A bitcast to bool of a byte other than 0 or 1 is undefined (C: a trap representation).

Undefined behaviour (`UNDEFINED`)
  `evaluate` never raises or warns on undefined inputs; it returns some value, which no backend has to
  match. In checked mode the PYTHON device calls `ub_check` on its active lanes and reports the kernel,
  uop and thread. The fuzzer must never generate undefined behaviour.

Implementation-defined behaviour (`IMPLEMENTATION_DEFINED`)
  Backends may differ here; comparisons must not depend on it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.uop.ops import GroupOp, Ops

UNDEFINED: dict[str, str] = {
  "integer division by zero": "IDIV or MOD of an integer dtype with a divisor of 0",
  "signed division overflow": "IDIV or MOD of a signed dtype with dividend MIN and divisor -1 (the quotient does not fit; C traps)",
  "shift amount out of range": "SHL or SHR with a shift amount below 0 or at least the width of the dtype in bits",
  "float->int cast of NaN/inf": "CAST of a NaN or an infinity to an integer dtype",
  "float->int cast out of range": "CAST of a float to an integer dtype where the value truncated toward zero does not fit the target",
  "bitcast to bool of a byte other than 0 or 1": "BITCAST to bool where a source byte is neither 0 nor 1 (not a valid bool)",
  "out-of-bounds access": "LOAD or STORE at an element index outside its buffer (always an error, checked mode or not)",
  "uninitialized read": "LOAD of memory that was neither copied in nor stored to before",
  "local memory race": "two lanes of one workgroup touching the same local-memory address between two barriers, one of them writing",
  "global memory race": "two lanes of one launch storing to the same global address (the result would depend on the order)",
}

IMPLEMENTATION_DEFINED: dict[str, str] = {
  "NaN sign and payload": "the sign and payload bits of a NaN produced by an op or a float->float CAST (same_bits treats all NaNs as equal)",
  "BITCAST of a produced NaN": "a BITCAST of a NaN produced by an op exposes its unspecified sign and payload bits",
  "native transcendentals": "EXP2, LOG2 and SIN without the decomposition pass: results may differ by up to the ULP bound kept in conformance",
  "float reduction order": "different Opts may reorder float reductions; results agree within a stated tolerance, not bit for bit",
  "values of undefined lanes": "the result of an op on inputs with undefined behaviour (unchecked mode returns some value)",
}

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_SIGN_BIT = {2: 0x8000, 4: 0x8000_0000, 8: 0x8000_0000_0000_0000}
_ARITY = {**{op: 1 for op in GroupOp.Unary}, **{op: 2 for op in GroupOp.Binary}, **{op: 3 for op in GroupOp.Ternary},
          Ops.CAST: 1, Ops.BITCAST: 1}
_BOOL_OK = frozenset({Ops.XOR, Ops.OR, Ops.AND, Ops.CMPLT, Ops.CMPNE, Ops.MAX})


def type_name(d: DType) -> str:
  """The conventional name of a scalar dtype ('int8', 'float16', 'bfloat16', 'bool'), for messages."""
  s = d.scalar()
  return "bfloat16" if s == dtypes.bfloat16 else str(s.np)


# ---------------------------------------------------------------------------------------------
# exact float building blocks (each is the model for a helper in the C prelude)

def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(s, e) with s = RN(a + b) and s + e == a + b exactly (Knuth's TwoSum; exact unless s overflows)."""
  with np.errstate(all="ignore"):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)

def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(p, e) with p = RN(a * b) and p + e == a * b exactly for float64 (Dekker's product with Veltkamp's
  split). Exact when |a|, |b| < 2**995, |a*b| < 2**1020 and the exponents keep e above the subnormals."""
  def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = 134217729.0 * x   # 2**27 + 1 splits a 53-bit significand into two 26-bit halves
    hi = t - (t - x)
    return hi, x - hi
  with np.errstate(all="ignore"):
    p = a * b
    ah, al = split(a)
    bh, bl = split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl

def add_round_to_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """float64 a + b rounded to odd: the exact sum when it is a float64, else the one of its two float64
  neighbours whose last significand bit is 1. Rounding that to any format with at most 51 significand
  bits (ties to even) equals rounding the exact sum once. Non-finite sums are returned as IEEE gives them."""
  a = np.asarray(a, np.float64); b = np.asarray(b, np.float64)
  s, e = two_sum(a, b)
  s = np.asarray(s)
  with np.errstate(all="ignore"):
    fix = (e != 0) & np.isfinite(e) & np.isfinite(s) & ((s.view(np.uint64) & np.uint64(1)) == 0)
    # an even RN result with a nonzero error: step one ulp toward the exact sum (the neighbour is odd)
    return np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)

def round_f64_bits(x: np.ndarray, exp_bits: int, man_bits: int) -> np.ndarray:
  """Bits (int64) of float64 values rounded once, to nearest with ties to even, to the binary format with
  `exp_bits` exponent and `man_bits` stored significand bits (man_bits < 52): subnormals kept, values at
  or past the overflow threshold become inf, NaN becomes a quiet NaN with its sign and top payload bits."""
  if not 0 < man_bits < 52 or not 1 < exp_bits <= 11: raise ValueError(f"round_f64_bits: no binary format with {exp_bits} exponent and {man_bits} significand bits")
  x = np.asarray(x, np.float64)
  shape, b = x.shape, x.reshape(-1).view(np.uint64)
  sign = (b >> np.uint64(63)).astype(np.int64) << (exp_bits + man_bits)
  mag = (b & np.uint64(0x7FFF_FFFF_FFFF_FFFF)).astype(np.int64)
  e64 = mag >> 52
  frac = mag & ((1 << 52) - 1)
  sig = np.where(e64 > 0, frac | (1 << 52), frac)   # value = sig * 2**(e - 52)
  e = np.maximum(e64, 1) - 1023
  bias = (1 << (exp_bits - 1)) - 1
  emin = 1 - bias
  # keep man_bits bits below the leading one; below the normal range the grid is fixed at 2**(emin - man_bits)
  shift = np.minimum((52 - man_bits) + np.maximum(emin - e, 0), 62)
  q = sig >> shift
  rem = sig - (q << shift)
  half = np.left_shift(1, shift - 1)
  q = q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))
  # a carry out of the significand lands in the exponent field, which is the right result
  out = (np.maximum(e + bias - 1, 0) << man_bits) + q
  inf = ((1 << exp_bits) - 1) << man_bits
  out = np.minimum(out, inf)
  nan = inf | (1 << (man_bits - 1)) | (frac >> (52 - man_bits))
  return (np.where(mag > 0x7FF0_0000_0000_0000, nan, out) | sign).reshape(shape)

def f64_to_bf16(x: np.ndarray) -> np.ndarray:
  """float64 -> bfloat16 bits (uint16), one rounding to nearest-even; NaN -> quiet NaN, sign kept."""
  return round_f64_bits(x, 8, 7).astype(np.uint16)

def f32_to_bf16(x: np.ndarray) -> np.ndarray:
  """float32 -> bfloat16 bits (uint16), to nearest-even: add 0x7FFF plus the lowest kept bit, drop 16 bits.
  The carry handles subnormals and overflow to inf; NaN -> quiet NaN with sign and top payload bits."""
  u = np.asarray(x, np.float32).view(np.uint32)
  with np.errstate(all="ignore"):
    r = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
  nan = (u & np.uint32(0x7FFF_FFFF)) > np.uint32(0x7F80_0000)
  return np.where(nan, (u >> np.uint32(16)) | np.uint32(0x40), r).astype(np.uint16)

def bf16_to_f32(x: np.ndarray) -> np.ndarray:
  """bfloat16 bits (uint16) -> float32, exact: the bits shifted left by 16."""
  return (np.asarray(x, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)

def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """float64 fusedMultiplyAdd: a*b + c rounded once (ties to even), as IEEE-754 and C's fma().

  Most lanes use Boldo and Melquiond's emulation on a and b rescaled to balanced exponents (exactly; the
  product is unchanged): (uh, ul) = exact a*b, (th, tl) = TwoSum(c, uh), v = round-to-odd(tl + ul),
  result = RN(th + v), which is exact while the product neither overflows nor underflows. Lanes where
  plain float64 arithmetic is already exact take it: a zero product or a non-finite operand, c == 0
  (RN(a*b)), a product so large that any sum overflows, a product below a quarter ulp of c (the result
  is c). The rest (tiny products meeting tiny addends, results near the subnormals, the edge of
  overflow) are computed exactly with Python integers, one lane at a time."""
  a, b, c = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, c)))
  with np.errstate(all="ignore"):
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    ea, eb, ec = (np.frexp(v)[1].astype(np.int64) for v in (a, b, c))
    e = ea + eb   # 2**(e-2) <= |a*b| < 2**e
    # an infinite c wins over a finite product, which float64 might overflow
    out = np.where(np.isfinite(a) & np.isfinite(b) & np.isinf(c), c, a * b + c)
    plain = ~finite | (a == 0) | (b == 0) | (e >= 1027)
    only_p = ~plain & (c == 0)
    only_c = ~plain & (c != 0) & (e <= ec - 56) & (ec > -1021)
    out = np.where(only_p, a * b, np.where(only_c, c, out))
    k = (ea - eb) >> 1
    a2, b2 = np.ldexp(a, -k), np.ldexp(b, k)   # both exponents near e/2: exact, and safe for the split
    uh, ul = two_prod(a2, b2)
    th, tl = two_sum(c, uh)
    z = th + add_round_to_odd(tl, ul)
    rest = ~plain & ~only_p & ~only_c
    fast = rest & (e > -900) & (e < 1015) & (ec < 1015) & ((th == 0) | (np.abs(th) >= 2.0 ** -960))
    out = np.asarray(np.where(fast, z, out))
  for i in np.flatnonzero(rest & ~fast):
    out.flat[i] = _fma_exact(float(a.flat[i]), float(b.flat[i]), float(c.flat[i]))
  return out

def _fma_exact(a: float, b: float, c: float) -> float:
  """fma of finite floats with a nonzero product, in exact integer arithmetic (the rare slow lanes)."""
  (na, da), (nb, db), (nc, dc) = a.as_integer_ratio(), b.as_integer_ratio(), c.as_integer_ratio()
  den = max(da * db, dc)   # all denominators are powers of two
  num = na * nb * (den // (da * db)) + nc * (den // dc)
  if num == 0: return 0.0   # an exact cancellation of a nonzero product rounds to +0
  if abs(num) >= (2 ** 1024 - 2 ** 970) * den: return -math.inf if num < 0 else math.inf   # at or past the overflow midpoint
  return num / den   # Python's int true division is correctly rounded, subnormals and -0 included

def _int_to_f64_odd(v: int) -> float:
  """A Python int as float64 rounded to odd (truncate, then set the last bit if anything was dropped)."""
  n = abs(v).bit_length()
  if n <= 53: return float(v)
  if n > 1024: return -math.inf if v < 0 else math.inf
  shift = n - 53
  m = abs(v) >> shift
  if abs(v) & ((1 << shift) - 1): m |= 1
  r = math.ldexp(m, shift)
  return r if v > 0 else -r


# ---------------------------------------------------------------------------------------------
# conversions between storage forms

def round_float(x: np.ndarray, dtype: DType) -> np.ndarray:
  """float64 values -> storage form of float dtype `dtype`, rounded once to nearest-even (bfloat16 as its
  uint16 bits). Other float inputs are widened to float64 first (exactly)."""
  d = dtype.scalar()
  if not dtypes.is_float(d): raise ValueError(f"round_float: {dtype!r} is not a float dtype")
  x = np.asarray(x)
  if x.dtype != np.float64:
    with np.errstate(all="ignore"): x = x.astype(np.float64)
  if d == dtypes.float64: return x.copy()
  if d == dtypes.float32:
    with np.errstate(all="ignore"): return x.astype(np.float32)   # the hardware conversion is one RNE rounding
  bits = round_f64_bits(x, *dtypes.finfo(d)).astype(np.uint16)
  return bits if d == dtypes.bfloat16 else bits.view(np.float16)

def to_float64(x: np.ndarray, dtype: DType) -> np.ndarray:
  """Storage form of any numeric dtype -> float64: exact for floats and bool, to nearest-even for ints
  beyond 2**53."""
  d = dtype.scalar()
  x = np.asarray(x)
  with np.errstate(all="ignore"):   # a signalling NaN raises the invalid flag while it is widened
    return (bf16_to_f32(x) if d == dtypes.bfloat16 else x).astype(np.float64)

def same_bits(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
  """Elementwise: equal bit patterns, except that any two NaNs of a float dtype are equal (+0 != -0)."""
  d = dtype.scalar()
  a, b = _storage(a, d, "same_bits: first array"), _storage(b, d, "same_bits: second array")
  if not dtypes.is_float(d): return np.asarray(a == b)
  u = _UINT[d.itemsize]
  eq = a.view(u) == b.view(u)
  return np.asarray(eq | (_isnan(a, d) & _isnan(b, d)))

def from_python(values: Any, dtype: DType) -> np.ndarray:
  """Python numbers (a scalar or nested sequences) -> storage form of `dtype`, with the shape of `values`.
  ints wrap to the width of an int dtype; floats truncate toward zero for an int dtype; for a float dtype
  the exact value (Python ints included) is rounded once to nearest-even; bool dtype: truthiness."""
  d = dtype.scalar()
  if isinstance(d, PtrDType) or d == dtypes.void: raise ValueError(f"from_python: {dtype!r} holds no values")
  obj = np.array(values, dtype=object)
  def each(fn, npdt: Any) -> np.ndarray: return np.array([fn(v) for v in obj.reshape(-1)], dtype=npdt).reshape(obj.shape)
  def conv(fn, v: Any) -> Any:
    try: return fn(v)
    except (TypeError, ValueError, OverflowError) as e: raise ValueError(f"from_python: {v!r} is not a value of {dtype!r} ({e})") from None
  if d == dtypes.bool: return each(lambda v: conv(bool, v), np.bool_)
  if dtypes.is_int(d):
    mask, top = (1 << d.bits) - 1, 1 << (d.bits - 1)
    def wrap(v: Any) -> int:
      w = conv(int, v) & mask
      return w - (mask + 1) if w >= top and not dtypes.is_unsigned(d) else w
    return each(wrap, d.np)
  def exact(v: Any) -> float:
    # a Python int is rounded once: directly for float64, through round-to-odd for narrower formats
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
      v = int(v)
      if d != dtypes.float64: return _int_to_f64_odd(v)
      return float(v) if abs(v) < 2 ** 1024 - 2 ** 970 else (-math.inf if v < 0 else math.inf)
    return conv(float, v)
  return round_float(each(exact, np.float64), d)

def to_python(x: np.ndarray, dtype: DType) -> list:
  """Storage form -> nested list of Python bool/int/float values (floats exact; a 0-d array gives a
  one-element list)."""
  d = dtype.scalar()
  x = np.asarray(x)
  if x.ndim == 0: x = x.reshape(1)
  if dtypes.is_float(d): return to_float64(x, d).tolist()
  return x.tolist()


# ---------------------------------------------------------------------------------------------
# evaluate and ub_check

def evaluate(op: Ops, dtype: DType, srcs: Sequence[np.ndarray], src_dtypes: Sequence[DType]) -> np.ndarray:
  """The result of ALU op `op` (or CAST/BITCAST) with result dtype `dtype` on operands in storage form.

  Operands broadcast with numpy's rules and the result is a new array in the storage form of `dtype`.
  Never raises or warns on undefined inputs (see `ub_check`); raises TypeError/ValueError, naming the
  op and operand, for operands that are not in storage form or dtypes the op does not take."""
  arrs = _check(op, dtype, srcs, src_dtypes)
  scalar = all(a.ndim == 0 for a in arrs)
  if scalar: arrs = [a.reshape(1) for a in arrs]
  with np.errstate(all="ignore"):
    out = np.asarray(_evaluate(op, dtype.scalar(), arrs, [s.scalar() for s in src_dtypes]))
  out = out.astype(dtype.np, copy=False)   # comparisons of broadcast scalars may come back as numpy bools
  return out.reshape(()) if scalar else out

def ub_check(op: Ops, dtype: DType, srcs: Sequence[np.ndarray], src_dtypes: Sequence[DType]) -> tuple[str, np.ndarray] | None:
  """None when no lane of this op has undefined behaviour, else (reason, mask). The mask is boolean with
  the broadcast shape of the operands (vector dtypes keep their trailing axis) and marks the offending
  elements. With several kinds of UB present, the first found is reported. Reasons:
    "integer division by zero", "signed division overflow (MIN // -1)", "signed division overflow (MIN % -1)",
    "shift amount out of range [0, BITS)", "float->int cast of NaN/inf", "float->int cast out of range of T",
    "bitcast to bool of a byte other than 0 or 1"."""
  arrs = _check(op, dtype, srcs, src_dtypes)
  d, sd = dtype.scalar(), src_dtypes[0].scalar()
  checks: list[tuple[str, np.ndarray]] = []
  with np.errstate(all="ignore"):
    if op in (Ops.IDIV, Ops.MOD):
      a, b = np.broadcast_arrays(*arrs)
      checks.append(("integer division by zero", b == 0))
      if not dtypes.is_unsigned(d):
        checks.append((f"signed division overflow (MIN {'//' if op is Ops.IDIV else '%'} -1)", (a == dtypes.min(d)) & (b == -1)))
    elif op in (Ops.SHL, Ops.SHR):
      _, b = np.broadcast_arrays(*arrs)
      checks.append((f"shift amount out of range [0, {d.bits})", (b < 0) | (b >= d.bits)))
    elif op is Ops.CAST and dtypes.is_float(sd) and dtypes.is_int(d):
      x = to_float64(arrs[0], sd)
      checks.append(("float->int cast of NaN/inf", ~np.isfinite(x)))
      checks.append((f"float->int cast out of range of {type_name(d)}", np.isfinite(x) & ~_fits_int(np.trunc(x), d)))
    elif op is Ops.BITCAST and d == dtypes.bool and sd != dtypes.bool:
      checks.append(("bitcast to bool of a byte other than 0 or 1", arrs[0].view(np.uint8) > 1))
  for reason, mask in checks:
    if mask.any(): return reason, np.array(mask, np.bool_)
  return None


def _storage(x: Any, d: DType, where: str) -> np.ndarray:
  x = np.asarray(x)
  if x.dtype != d.np:
    raise TypeError(f"{where}: {d!r} is stored as numpy {d.np}" + (" (its raw bits)" if d == dtypes.bfloat16 else "") + f", got an array of {x.dtype}")
  return x

def _check(op: Ops, dtype: DType, srcs: Sequence[np.ndarray], sdts: Sequence[DType]) -> list[np.ndarray]:
  """Operands as arrays, after checking the op takes these dtypes (the rules of refgrad/uop/spec.py)."""
  if op not in _ARITY: raise ValueError(f"semantics: {op!r} is not an ALU op, CAST or BITCAST")
  n = _ARITY[op]
  if len(srcs) != n or len(sdts) != n: raise ValueError(f"{op.name} takes {n} operands, got {len(srcs)} arrays and {len(sdts)} dtypes")
  for i, sd in enumerate((dtype, *sdts)):
    if isinstance(sd, PtrDType) or sd.scalar() == dtypes.void:
      raise ValueError(f"{op.name}: {'result' if i == 0 else f'operand {i - 1}'} dtype {sd!r} holds no values")
  arrs = []
  for i, (x, sd) in enumerate(zip(srcs, sdts)):
    a = _storage(x, sd.scalar(), f"{op.name} operand {i}")
    if sd.count > 1 and (a.ndim == 0 or a.shape[-1] not in (1, sd.count)):
      raise ValueError(f"{op.name} operand {i}: {sd!r} needs a trailing axis of {sd.count} lanes, got shape {a.shape}")
    arrs.append(a)
  def need(cond: bool, msg: str) -> None:
    if not cond: raise ValueError(f"{op.name} to {dtype!r} from ({', '.join(map(repr, sdts))}): {msg}")
  s, d = sdts[0].scalar(), dtype.scalar()
  if op is Ops.CAST: need(dtype.count == sdts[0].count, "lane counts must match")
  elif op is Ops.BITCAST: need(dtype.count == sdts[0].count and d.itemsize == s.itemsize, "needs equal itemsize and lane count")
  elif op is Ops.WHERE:
    need(sdts[0] == dtypes.bool.vec(dtype.count) and sdts[1] == sdts[2] == dtype, "needs (bool condition, a, b) with a and b of the result dtype")
  else:
    need(all(x == sdts[0] for x in sdts), "operands must share one dtype")
    need(dtype == (dtypes.bool.vec(sdts[0].count) if op in GroupOp.Comparison else sdts[0]), "wrong result dtype")
    if op in GroupOp.IntOnly: need(dtypes.is_int(s), "needs int operands")
    elif op in GroupOp.FloatOnly or op is Ops.MULACC: need(dtypes.is_float(s), "needs float operands")
    elif s == dtypes.bool: need(op in _BOOL_OK, "is not defined on bool (bool takes XOR/OR/AND/CMPLT/CMPNE/MAX/WHERE)")
  return arrs

def _isnan(x: np.ndarray, d: DType) -> np.ndarray:
  if d == dtypes.bfloat16: return (x & np.uint16(0x7FFF)) > np.uint16(0x7F80)
  return np.isnan(x)

def _fits_int(t: np.ndarray, d: DType) -> np.ndarray:
  """Which integral float64 values lie in the range of int dtype d (both bounds are powers of two, exact)."""
  return (t >= float(dtypes.min(d))) & (t < float(dtypes.max(d)) + 1.0)

def _evaluate(op: Ops, d: DType, xs: list[np.ndarray], sds: list[DType]) -> np.ndarray:
  if op is Ops.CAST: return _cast(xs[0], sds[0], d)
  if op is Ops.BITCAST:
    if d == dtypes.bool: return xs[0].view(np.uint8) != 0
    return xs[0].view(np.uint8 if sds[0] == dtypes.bool else sds[0].np).view(d.np).copy()
  if op is Ops.WHERE:
    if dtypes.is_float(d):   # select raw bits so NaN payloads are copied untouched
      u = _UINT[d.itemsize]
      return np.where(xs[0], xs[1].view(u), xs[2].view(u)).view(d.np)
    return np.where(*xs)
  s = sds[0]
  if dtypes.is_float(s): return _float_alu(op, s, xs)
  if s == dtypes.bool: return _bool_alu(op, xs)
  return _int_alu(op, s, xs)

def _bool_alu(op: Ops, xs: list[np.ndarray]) -> np.ndarray:
  a, b = xs
  if op is Ops.XOR: return a ^ b
  if op is Ops.OR or op is Ops.MAX: return a | b
  if op is Ops.AND: return a & b
  if op is Ops.CMPLT: return ~a & b
  return a ^ b   # CMPNE

def _int_alu(op: Ops, d: DType, xs: list[np.ndarray]) -> np.ndarray:
  a = xs[0]
  if op is Ops.NEG: return np.negative(a)
  b = xs[1]
  if op is Ops.ADD: return a + b
  if op is Ops.MUL: return a * b
  if op is Ops.MAX: return np.maximum(a, b)
  if op is Ops.CMPLT: return a < b
  if op is Ops.CMPNE: return a != b
  if op is Ops.XOR: return a ^ b
  if op is Ops.OR: return a | b
  if op is Ops.AND: return a & b
  if op in (Ops.IDIV, Ops.MOD):
    bad = b == 0
    if not dtypes.is_unsigned(d): bad = bad | ((a == dtypes.min(d)) & (b == -1))
    bs = np.where(bad, np.ones((), d.np), b)     # undefined lanes divide by 1 instead
    r = np.fmod(a, bs)                            # C's %: the sign of the dividend
    return r if op is Ops.MOD else (a - r) // bs  # a - r is a multiple of bs, so floor == trunc
  # SHL/SHR on the unsigned twin of the dtype: every shift is then defined and wraps
  u = _UINT[d.itemsize]
  amt = b.astype(u)   # negative amounts become huge, so one test catches both ends
  amt = np.where(amt >= d.bits, np.zeros((), u), amt)
  au = a.astype(u)
  if op is Ops.SHL: return (au << amt).astype(d.np)
  r = au >> amt
  if not dtypes.is_unsigned(d): r = np.where(a < 0, r | ~(u(np.iinfo(u).max) >> amt), r)   # arithmetic: shift in sign bits
  return r.astype(d.np)

def _widen(x: np.ndarray, d: DType) -> np.ndarray:
  """Float storage -> the type ops compute in: float32 for float16/bfloat16, else itself."""
  if d == dtypes.bfloat16: return bf16_to_f32(x)
  if d == dtypes.float16: return x.astype(np.float32)
  return x

def _narrow(y: np.ndarray, d: DType) -> np.ndarray:
  """The compute type's result -> storage of d: one rounding to nearest-even for float16/bfloat16."""
  if d == dtypes.bfloat16: return f32_to_bf16(y)
  if d == dtypes.float16: return round_float(y.astype(np.float64), d)
  return y

def _float_alu(op: Ops, d: DType, xs: list[np.ndarray]) -> np.ndarray:
  if op is Ops.NEG:   # flips the sign bit only
    u = _UINT[d.itemsize]
    return (xs[0].view(u) ^ u(_SIGN_BIT[d.itemsize])).view(d.np)
  if op is Ops.MULACC:
    if d == dtypes.float64: return fma_f64(*xs)
    a, b, c = (to_float64(x, d) for x in xs)
    return round_float(add_round_to_odd(a * b, c), d)   # a*b is exact in float64 for these formats
  if op in GroupOp.Transcendental:
    fn = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}[op]
    return round_float(fn(to_float64(xs[0], d)), d)
  w = [_widen(x, d) for x in xs]
  if op is Ops.CMPLT: return w[0] < w[1]
  if op is Ops.CMPNE: return w[0] != w[1]
  if op is Ops.ADD: r = w[0] + w[1]
  elif op is Ops.MUL: r = w[0] * w[1]
  elif op is Ops.RECIP: r = np.divide(np.ones((), w[0].dtype), w[0])
  elif op is Ops.SQRT: r = np.sqrt(w[0])
  elif op is Ops.MAX: r = _fmax(w[0], w[1])
  else: raise ValueError(f"{op.name} is not defined on {d!r}")
  return _narrow(np.asarray(r), d)

def _fmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  r = np.maximum(a, b)   # NaN if either is NaN
  u = _UINT[a.dtype.itemsize]
  # equal operands differ at most in the sign of a zero; AND of the bits makes max(+0, -0) = +0 either way
  return np.where(a == b, (a.view(u) & b.view(u)).view(a.dtype), r)

def _cast(x: np.ndarray, s: DType, d: DType) -> np.ndarray:
  if s == d: return x.copy()
  if d == dtypes.bool: return (to_float64(x, s) if dtypes.is_float(s) else x) != 0
  if s == dtypes.bool: return round_float(x.astype(np.float64), d) if dtypes.is_float(d) else x.astype(d.np)
  if dtypes.is_int(s) and dtypes.is_int(d): return x.astype(d.np)   # numpy keeps the low bits, extends by the source's sign
  if dtypes.is_float(s) and dtypes.is_float(d): return round_float(to_float64(x, s), d)
  if dtypes.is_int(s): return _int_to_float(x, s, d)
  return _float_to_int(x, s, d)

def _int_to_float(x: np.ndarray, s: DType, d: DType) -> np.ndarray:
  if s.bits <= 32: return round_float(x.astype(np.float64), d)   # exact in float64, one rounding after
  # split into two parts that float64 holds exactly, then add them with one rounding (to nearest for
  # float64, to odd before a narrower rounding, so the value is never rounded twice)
  lo = x & x.dtype.type(0xFFFF_FFFF)
  hi, lo = (x - lo).astype(np.float64), lo.astype(np.float64)
  if d == dtypes.float64: return hi + lo
  return round_float(add_round_to_odd(hi, lo), d)

def _float_to_int(x: np.ndarray, s: DType, d: DType) -> np.ndarray:
  t = np.trunc(to_float64(x, s))
  t = np.where(np.isfinite(t) & _fits_int(t, d), t, 0.0)   # undefined lanes give 0
  if d != dtypes.uint64: return t.astype(d.np)
  big = t >= 2.0 ** 63   # beyond int64: convert t - 2**63 (exact) and add the top bit back
  return np.where(big, (t - 2.0 ** 63).astype(np.uint64) + np.uint64(1 << 63), t.astype(np.uint64))
