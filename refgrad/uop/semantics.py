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
  - NEG flips the sign bit and nothing else (exact for every value, NaN included).
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
    round-to-odd float64 first, so they are never rounded twice. A NaN stays a NaN of the same sign
    (quiet bit and payload implementation-defined); infinities stay infinities; values at or past the
    target's overflow threshold become inf.
  - float -> int truncates toward zero. The source must be finite and the truncated value must fit the
    target, else the cast is undefined (e.g. -0.7 -> uint8 is 0 and defined; -1.0 -> uint8 is UB).
  - anything -> bool is x != 0 (so NaN -> True, -0.0 -> False); bool -> number gives 0 or 1.
  - int -> int keeps the low bits of the two's-complement value, widening by sign extension for a
    signed source and zero extension for an unsigned one.

BITCAST
  Reinterprets the little-endian bytes of each element; source and result have equal itemsize and
  lane count. A bitcast to bool of a byte other than 0 or 1 is undefined (C: a trap representation).

WMMA (tensor cores; refgrad/target.py holds each tensor core's shape and lane layouts)
  D = C + A*B for an M x K matrix A and a K x N matrix B of float16/bfloat16 and M x N matrices C, D of
  float32, held in fragments across the lanes of one warp. Every product a*b is exact in float32 (at most
  2 x 11 significant bits); each element is summed in order of k, rounding once per add:
  d = c; for k in 0..K-1: d = d + a[m][k]*b[k][n]. So a tensor-core matmul whose k loop runs in the same
  order as a plain one gives the same bits. (Real tensor cores sum with wider, non-IEEE adders: not bit-exact
  against this definition.) The lanes of a warp execute a WMMA together: every lane of the warp must reach
  it, and a matrix element held by several lanes (replicas) must be given the same bits by each of them.

Undefined behaviour (`UNDEFINED`; each `ub_check` reason starts with one of its keys)
  - integer division by zero: IDIV or MOD with divisor 0.
  - signed division overflow: IDIV or MOD of a signed MIN by -1.
  - shift amount out of range: SHL/SHR by an amount outside [0, bits).
  - float->int cast of NaN/inf, float->int cast out of range (after truncation toward zero).
  - bitcast to bool of a byte other than 0 or 1.
  - out-of-bounds access (LOAD/STORE outside the buffer: an error whether checked or not),
    uninitialized read, local memory race, global memory race, divergent barrier, load of an invalid
    bool, divergent WMMA, WMMA replicas differ (lanes holding one element give it different bits): found by the
    device, not by this module.
  `evaluate` never raises or warns on undefined inputs; it returns some value, which no backend has to
  match. The CPU backend gives the arithmetic cases a fixed result so that no input traps (refgrad/renderer/cstyle.py:
  IDIV/MOD by 0 -> 0, MIN / -1 -> MIN, MIN % -1 -> 0, shift amounts masked to the width, float->int saturating
  with NaN -> 0); that is the CPU's choice, not part of this definition. In checked mode the PYTHON device calls `ub_check` on its active lanes and reports the kernel,
  uop and thread. The fuzzer must never generate undefined behaviour.

Implementation-defined behaviour (`IMPLEMENTATION_DEFINED`; backends may differ, comparisons must not
depend on it)
  - NaN sign and payload of a NaN produced by an op or a float->float CAST.
  - BITCAST of a produced NaN exposes those unspecified bits.
  - native transcendentals: EXP2/LOG2/SIN without decomposition agree only within the ULP bound.
  - float reduction order: different Opts may reorder float reductions (agreement within a tolerance).
  - values of undefined lanes: whatever an op returns on undefined inputs.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from refgrad.dtype import DType, PtrDType, bf16_to_f32, dtypes, f32_to_bf16, f64_to_bf16
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import value_op_error

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
  "divergent barrier": "a BARRIER reached by only some lanes of a workgroup (the others would wait forever on a GPU)",
  "load of an invalid bool": "LOAD from bool memory of a byte that is neither 0 nor 1",
  "divergent WMMA": "a WMMA reached by only some lanes of a warp, or in a workgroup whose size is not a multiple of the warp",
  "WMMA replicas differ": "lanes that hold the same element of A or B in a WMMA give it different bits",
}

_UB_OPS = frozenset({Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR})

def can_be_undefined(u: UOp) -> bool:
  """Whether the op of u is undefined for some inputs (IDIV, MOD, shifts, float->int casts)."""
  return u.op in _UB_OPS or (u.op is Ops.CAST and dtypes.is_float(u.src[0].dtype) and not dtypes.is_float(u.dtype) and u.dtype != dtypes.bool)

IMPLEMENTATION_DEFINED: dict[str, str] = {
  "NaN sign and payload": "the sign and payload bits of a NaN produced by an op or a float->float CAST (same_bits treats all NaNs as equal)",
  "BITCAST of a produced NaN": "a BITCAST of a NaN produced by an op exposes its unspecified sign and payload bits",
  "native transcendentals": "EXP2, LOG2 and SIN without the decomposition pass: results may differ by up to the ULP bound kept in conformance",
  "float reduction order": "different Opts may reorder float reductions; results agree within a stated tolerance, not bit for bit",
  "values of undefined lanes": "the result of an op on inputs with undefined behaviour (unchecked mode returns some value)",
}

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_SIGN_BIT = {2: 0x8000, 4: 0x8000_0000, 8: 0x8000_0000_0000_0000}
_VALUE_OPS = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}


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

def _rounder(d: DType) -> Callable[[np.ndarray], np.ndarray]:
  """float64 -> storage of float dtype d, one RNE rounding. numpy's float64->float32/float16 casts are
  correctly rounded (the tests check them against exact rationals); bfloat16 uses `f64_to_bf16`."""
  if d == dtypes.bfloat16: return f64_to_bf16
  npd = d.np
  return lambda x: x.astype(npd)

def _widener(d: DType) -> Callable[[np.ndarray], np.ndarray]:
  """Storage of d -> float64 (exact for floats and bool)."""
  if d == dtypes.bfloat16: return lambda x: bf16_to_f32(x).astype(np.float64)
  return lambda x: x.astype(np.float64)

def round_float(x: np.ndarray, dtype: DType) -> np.ndarray:
  """float64 values -> storage form of float dtype `dtype`, rounded once to nearest-even (bfloat16 as its
  uint16 bits). Other float inputs are widened to float64 first (exactly)."""
  d = dtype.scalar()
  if not dtypes.is_float(d): raise ValueError(f"round_float: {dtype!r} is not a float dtype")
  with np.errstate(all="ignore"):   # overflow to inf and signalling NaNs must not warn
    return _rounder(d)(np.asarray(x).astype(np.float64))

def to_float64(x: np.ndarray, dtype: DType) -> np.ndarray:
  """Storage form of any numeric dtype -> float64: exact for floats and bool, to nearest-even for ints
  beyond 2**53."""
  with np.errstate(all="ignore"):   # a signalling NaN raises the invalid flag while it is widened
    return _widener(dtype.scalar())(np.asarray(x))

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
# evaluate and ub_check: each signature (op, result dtype, operand dtypes) is checked and planned once

Run = Callable[[list[np.ndarray]], np.ndarray]
UbRun = Callable[[list[np.ndarray]], "tuple[str, np.ndarray] | None"]

class _Plan(NamedTuple):
  storage: tuple[np.dtype, ...]   # numpy dtype of each operand
  counts: tuple[int, ...]         # lanes of each operand's dtype
  out: np.dtype
  run: Run
  ub: UbRun | None                # None: this signature has no undefined inputs

_PLANS: dict[tuple, _Plan] = {}

def evaluate(op: Ops, dtype: DType, srcs: Sequence[np.ndarray], src_dtypes: Sequence[DType]) -> np.ndarray:
  """The result of ALU op `op` (or CAST/BITCAST) with result dtype `dtype` on operands in storage form.

  Operands broadcast with numpy's rules and the result is a new array in the storage form of `dtype`
  (0-d when every operand is 0-d). Never raises or warns on undefined inputs (see `ub_check`); raises
  TypeError/ValueError, naming the op and operand, for operands that are not in storage form or dtypes
  the op does not take."""
  p = _plan(op, dtype, src_dtypes)
  arrs = _operands(op, p, srcs, src_dtypes)
  scalar = all(a.ndim == 0 for a in arrs)
  if scalar: arrs = [a.reshape(1) for a in arrs]
  with np.errstate(all="ignore"):
    out = np.asarray(p.run(arrs))
  if out.dtype != p.out: out = out.astype(p.out)
  return out.reshape(()) if scalar else out

def op_fn(op: Ops, dtype: DType, src_dtypes: Sequence[DType]) -> Callable[[Sequence[np.ndarray]], np.ndarray]:
  """`evaluate` for one signature, with the dtype checks done now and none per call: for callers whose
  operands are always storage-form arrays of at least one dimension (the SIMT executor). Call it
  under `np.errstate(all="ignore")`."""
  p = _plan(op, dtype, src_dtypes)
  run, out = p.run, p.out
  def fn(arrs: Sequence[np.ndarray]) -> np.ndarray:
    r = run(arrs)
    return r if r.dtype == out else r.astype(out)
  return fn

def ub_check(op: Ops, dtype: DType, srcs: Sequence[np.ndarray], src_dtypes: Sequence[DType]) -> tuple[str, np.ndarray] | None:
  """None when no lane of this op has undefined behaviour, else (reason, mask). The mask is boolean with
  the broadcast shape of the operands (vector dtypes keep their trailing axis) and marks the offending
  elements; with several kinds present, the first of the order below is reported. Each reason starts with
  a key of `UNDEFINED`:
    "integer division by zero", "signed division overflow (MIN // -1)", "signed division overflow (MIN % -1)",
    "shift amount out of range [0, BITS)", "float->int cast of NaN/inf", "float->int cast out of range of T",
    "bitcast to bool of a byte other than 0 or 1"."""
  p = _plan(op, dtype, src_dtypes)
  if p.ub is None: return None
  arrs = _operands(op, p, srcs, src_dtypes)
  with np.errstate(all="ignore"):
    return p.ub(arrs)


def _plan(op: Ops, dtype: DType, sdts: Sequence[DType]) -> _Plan:
  key = (op, dtype, *sdts)
  if (p := _PLANS.get(key)) is None:
    _check_dtypes(op, dtype, sdts)
    d, ss = dtype.scalar(), [x.scalar() for x in sdts]
    p = _Plan(tuple(x.np for x in ss), tuple(x.count for x in sdts), d.np, _runner(op, d, ss), _ub_runner(op, d, ss[0]))
    if len(_PLANS) > 4096: _PLANS.clear()   # bounded, should callers build fresh vector dtypes forever
    _PLANS[key] = p
  return p

def _storage(x: Any, d: DType, where: str) -> np.ndarray:
  x = np.asarray(x)
  if x.dtype != d.np:
    raise TypeError(f"{where}: {d!r} is stored as numpy {d.np}" + (" (its raw bits)" if d == dtypes.bfloat16 else "") + f", got an array of {x.dtype}")
  return x

def _operands(op: Ops, p: _Plan, srcs: Sequence[np.ndarray], sdts: Sequence[DType]) -> list[np.ndarray]:
  if len(srcs) != len(p.storage): raise ValueError(f"{op.name} takes {len(p.storage)} operands, got {len(srcs)} arrays")
  arrs = []
  for i, (x, want, n) in enumerate(zip(srcs, p.storage, p.counts)):
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    if a.dtype != want: _storage(a, sdts[i].scalar(), f"{op.name} operand {i}")
    if n > 1 and (a.ndim == 0 or a.shape[-1] not in (1, n)):
      raise ValueError(f"{op.name} operand {i}: {sdts[i]!r} needs a trailing axis of {n} lanes, got shape {a.shape}")
    arrs.append(a)
  return arrs

def _check_dtypes(op: Ops, dtype: DType, sdts: Sequence[DType]) -> None:
  """Raise unless op takes these dtypes (the rules of refgrad/uop/spec.py)."""
  if op not in _VALUE_OPS: raise ValueError(f"semantics: {op!r} is not an ALU op, CAST or BITCAST")
  if (msg := value_op_error(op, dtype, sdts)) is not None:
    raise ValueError(f"{op.name} to {dtype!r} from ({', '.join(map(repr, sdts))}): {msg}")

def _isnan(x: np.ndarray, d: DType) -> np.ndarray:
  if d == dtypes.bfloat16: return (x & np.uint16(0x7FFF)) > np.uint16(0x7F80)
  return np.isnan(x)

def _fits_int(t: np.ndarray, d: DType) -> np.ndarray:
  """Which integral float64 values lie in the range of int dtype d (both bounds are powers of two, exact)."""
  return (t >= float(dtypes.min(d))) & (t < float(dtypes.max(d)) + 1.0)


# ---- the runners: one function per signature, with every dtype decision taken up front -----------

def _runner(op: Ops, d: DType, ss: list[DType]) -> Run:
  s = ss[0]
  if op is Ops.CAST:
    cast = _caster(s, d)
    return lambda xs: cast(xs[0])
  if op is Ops.BITCAST:
    if d == dtypes.bool: return lambda xs: xs[0].view(np.uint8) != 0
    src, dst = (np.uint8 if s == dtypes.bool else s.np), d.np
    return lambda xs: xs[0].view(src).view(dst).copy()
  if op is Ops.WHERE:
    if not dtypes.is_float(d): return lambda xs: np.where(*xs)
    u, npd = _UINT[d.itemsize], d.np   # select raw bits so NaN payloads are copied untouched
    return lambda xs: np.where(xs[0], xs[1].view(u), xs[2].view(u)).view(npd)
  if dtypes.is_float(s): return _float_runner(op, s)
  if s == dtypes.bool:
    fb = {Ops.XOR: np.bitwise_xor, Ops.OR: np.bitwise_or, Ops.MAX: np.bitwise_or, Ops.AND: np.bitwise_and, Ops.CMPNE: np.not_equal,
          Ops.CMPLT: lambda a, b: ~a & b}[op]
    return lambda xs: fb(*xs)
  return _int_runner(op, s)

def _int_runner(op: Ops, d: DType) -> Run:
  simple = {Ops.NEG: np.negative, Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
            Ops.XOR: np.bitwise_xor, Ops.OR: np.bitwise_or, Ops.AND: np.bitwise_and}   # numpy integer arithmetic wraps
  if op in simple:
    f = simple[op]
    return lambda xs: f(*xs)
  npd, u, bits = d.np, _UINT[d.itemsize], d.bits
  mn = None if dtypes.is_unsigned(d) else dtypes.min(d)
  if op in (Ops.IDIV, Ops.MOD):
    one, is_mod = np.ones((), npd), op is Ops.MOD
    def divmod_(xs: list[np.ndarray]) -> np.ndarray:
      a, b = xs
      bad = b == 0
      if mn is not None: bad = bad | ((a == mn) & (b == -1))
      bs = np.where(bad, one, b)                # undefined lanes divide by 1 instead
      r = np.fmod(a, bs)                        # C's %: the sign of the dividend
      return r if is_mod else (a - r) // bs     # a - r is a multiple of bs, so floor == trunc
    return divmod_
  # SHL/SHR on the unsigned twin of the dtype: every shift is then defined and wraps
  zero, ones, left = np.zeros((), u), u(np.iinfo(u).max), op is Ops.SHL
  def shift(xs: list[np.ndarray]) -> np.ndarray:
    a, b = xs
    amt = b.astype(u)   # negative amounts become huge, so one test catches both ends
    amt = np.where(amt >= bits, zero, amt)
    au = a.astype(u)
    if left: return (au << amt).astype(npd)
    r = au >> amt
    if mn is not None: r = np.where(a < 0, r | ~(ones >> amt), r)   # arithmetic: shift in copies of the sign bit
    return r.astype(npd)
  return shift

def _float_runner(op: Ops, d: DType) -> Run:
  npd = d.np
  if op is Ops.NEG:   # flips the sign bit only
    u = _UINT[d.itemsize]
    sign = u(_SIGN_BIT[d.itemsize])
    return lambda xs: (xs[0].view(u) ^ sign).view(npd)
  wide, rnd = _widener(d), _rounder(d)
  if op is Ops.MULACC:
    if d == dtypes.float64: return lambda xs: fma_f64(*xs)
    # a*b is exact in float64 for these formats; round-to-odd then one RNE rounding equals one rounding
    return lambda xs: rnd(add_round_to_odd(wide(xs[0]) * wide(xs[1]), wide(xs[2])))
  if op in GroupOp.Transcendental:
    fn = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}[op]
    return lambda xs: rnd(fn(wide(xs[0])))
  core = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.RECIP: lambda x: np.divide(x.dtype.type(1), x), Ops.SQRT: np.sqrt,
          Ops.MAX: _fmax, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal}[op]
  if d in (dtypes.float32, dtypes.float64): return lambda xs: core(*xs)
  # float16/bfloat16: computed in float32 (exact widening), the result rounded once back
  w, n = (bf16_to_f32, f32_to_bf16) if d == dtypes.bfloat16 else ((lambda x: x.astype(np.float32)), (lambda y: y.astype(np.float16)))
  if op in GroupOp.Comparison: return lambda xs: core(w(xs[0]), w(xs[1]))
  return lambda xs: n(np.asarray(core(*[w(x) for x in xs])))

def _fmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  r = np.maximum(a, b)   # NaN if either is NaN
  u = _UINT[a.dtype.itemsize]
  # equal operands differ at most in the sign of a zero; AND of the bits makes max(+0, -0) = +0 either way
  return np.where(a == b, (a.view(u) & b.view(u)).view(a.dtype), r)

def _caster(s: DType, d: DType) -> Callable[[np.ndarray], np.ndarray]:
  npd = d.np
  if s == d: return np.copy
  if d == dtypes.bool:
    if dtypes.is_float(s):
      wide = _widener(s)
      return lambda x: wide(x) != 0   # NaN != 0
    return lambda x: x != 0
  if dtypes.is_int(d) and not dtypes.is_float(s): return lambda x: x.astype(npd)   # low bits kept; extension by the source's sign
  if dtypes.is_float(d):
    rnd = _rounder(d)
    if dtypes.is_float(s) or s == dtypes.bool or s.bits <= 32:   # exact in float64, then one rounding
      wide = _widener(s)
      return lambda x: rnd(wide(x))
    # int64/uint64: split into two parts that float64 holds exactly, then add them with one rounding
    # (to nearest for float64; to odd before a narrower rounding, so the value is never rounded twice)
    low = s.np.type(0xFFFF_FFFF)
    def wide_int(x: np.ndarray) -> np.ndarray:
      lo = x & low
      hi, lo = (x - lo).astype(np.float64), lo.astype(np.float64)
      return hi + lo if d == dtypes.float64 else rnd(add_round_to_odd(hi, lo))
    return wide_int
  wide = _widener(s)
  def float_to_int(x: np.ndarray) -> np.ndarray:
    t = np.trunc(wide(x))
    t = np.where(np.isfinite(t) & _fits_int(t, d), t, 0.0)   # undefined lanes give 0
    if d != dtypes.uint64: return t.astype(npd)
    big = t >= 2.0 ** 63   # beyond int64: convert t - 2**63 (exact) and add the top bit back
    return np.where(big, (t - 2.0 ** 63).astype(np.uint64) + np.uint64(1 << 63), t.astype(np.uint64))
  return float_to_int

def _ub_runner(op: Ops, d: DType, s: DType) -> UbRun | None:
  if op in (Ops.IDIV, Ops.MOD):
    mn = None if dtypes.is_unsigned(d) else dtypes.min(d)
    ovf = f"signed division overflow (MIN {'//' if op is Ops.IDIV else '%'} -1)"
    def div_ub(xs: list[np.ndarray]) -> tuple[str, np.ndarray] | None:
      a, b = xs if xs[0].shape == xs[1].shape else np.broadcast_arrays(*xs)
      if (m := b == 0).any(): return "integer division by zero", m
      if mn is not None and (m := (a == mn) & (b == -1)).any(): return ovf, m
      return None
    return div_ub
  if op in (Ops.SHL, Ops.SHR):
    bits, why = d.bits, f"shift amount out of range [0, {d.bits})"
    def shift_ub(xs: list[np.ndarray]) -> tuple[str, np.ndarray] | None:
      b = xs[1] if xs[0].shape == xs[1].shape else np.broadcast_arrays(*xs)[1]
      return (why, m) if (m := (b < 0) | (b >= bits)).any() else None
    return shift_ub
  if op is Ops.CAST and dtypes.is_float(s) and dtypes.is_int(d):
    wide, why = _widener(s), f"float->int cast out of range of {type_name(d)}"
    def cast_ub(xs: list[np.ndarray]) -> tuple[str, np.ndarray] | None:
      x = wide(xs[0])
      if (m := ~np.isfinite(x)).any(): return "float->int cast of NaN/inf", m
      return (why, m) if (m := ~_fits_int(np.trunc(x), d)).any() else None
    return cast_ub
  if op is Ops.BITCAST and d == dtypes.bool and s != dtypes.bool:
    def bool_ub(xs: list[np.ndarray]) -> tuple[str, np.ndarray] | None:
      return ("bitcast to bool of a byte other than 0 or 1", m) if (m := xs[0].view(np.uint8) > 1).any() else None
    return bool_ub
  return None


def wmma(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype_in: DType) -> np.ndarray:
  """The WMMA of whole matrices in storage form: a (..., M, K) and b (..., K, N) of dtype_in (float16 or
  bfloat16), c (..., M, N) float32 -> d (..., M, N) float32: d = c + sum over k in order, one rounding per add
  (the products are exact in float32)."""
  if dtype_in not in (dtypes.float16, dtypes.bfloat16): raise ValueError(f"wmma: inputs must be float16 or bfloat16, not {dtype_in!r}")
  w = bf16_to_f32 if dtype_in == dtypes.bfloat16 else (lambda x: x.astype(np.float32))
  af, bf = w(np.asarray(a)), w(np.asarray(b))
  d = np.asarray(c, np.float32).copy()
  with np.errstate(all="ignore"):
    for k in range(af.shape[-1]): d = d + af[..., :, k, None] * bf[..., None, k, :]
  return d
