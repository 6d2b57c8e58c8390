"""Oracle "numpy": the fuzzer's random tensor programs (oracles/programs.py) evaluated by a small numpy interpreter of
the Tensor ops they use, written from the API's documented semantics (README "Tensors" and "Reference semantics"),
and compared with what refgrad computes for the whole program.

Every value carries an error bound: `err` is 0 where the interpreter follows refgrad's documented op order and
rounding exactly (elementwise arithmetic, comparisons, casts, movement, int arithmetic of any kind), so those elements
must agree bit for bit (all NaNs equal); it grows where the order or the rounding is not pinned down by the API:
  - float reductions (sum, mean, matmul, conv2d, cumsum, prod) are summed here in float64 and bounded by the classic
    n * u * sum|x| (u: the accumulating dtype's unit roundoff) plus what their inputs carry;
  - the decomposed transcendentals (exp, log, sin, sigmoid) are within `TRANSCENDENTAL_ULPS` ulps of the exact
    function of their (rounded) argument (decompositions.py measures <= 1 ulp);
  - a result that depends on an uncertain input discontinuously (a comparison, floor, a float->int cast, argmax, a
    bitcast of a float that carries error, a NaN/inf reached through an uncertain value) is `inf`: not compared.
The result dtype and shape of each step are refgrad's (the step is built on refgrad's lazy tensor alongside, so a
step refgrad refuses is skipped here too); the values are the interpreter's own.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from oracles.inputs import input_caused, values
from oracles.programs import MAX_ELEMENTS, STEPS, _const, _dt, big_view_geometry, bit_test_masks, divmod_constants
from refgrad import Tensor
from refgrad.dtype import DType, dtypes
from refgrad.lazy import SPLIT_REDUCE
from refgrad.runtime.simt import UndefinedBehaviourError
from refgrad.uop import semantics

TRANSCENDENTAL_ULPS = 4      # stated tolerance of exp/log/sin/sigmoid, in ulps of the result dtype (measured <= 1)
SIN_RANGE = 1.5 * 2.0 ** 20  # beyond it SIN is specified as +0 (decompositions.SIN_RANGE); not compared there
LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453
# (mantissa bits incl. the implicit one, smallest normal exponent, largest finite)
_FLOAT = {dtypes.float16: (11, -14, 65504.0), dtypes.bfloat16: (8, -126, 3.3895313892515355e38),
          dtypes.float32: (24, -126, 3.4028234663852886e38), dtypes.float64: (53, -1022, 1.7976931348623157e308)}
_HALF = (dtypes.float16, dtypes.bfloat16)


def round_to(x: np.ndarray, d: DType) -> np.ndarray:
  """float64 x rounded once to float dtype d (round to nearest even, subnormals kept, overflow to inf), as float64."""
  x = np.asarray(x, np.float64)
  if d == dtypes.float64: return x.copy()
  mant, emin, big = _FLOAT[d]
  with np.errstate(all="ignore"):
    _, e = np.frexp(x)
    e = np.maximum(e - 1, emin)                        # exponent of x's binade, clamped at the subnormal range
    step = np.exp2((e - (mant - 1)).astype(np.float64))
    r = np.round(x / step) * step                      # np.round: half to even
    r = np.where(np.abs(r) > big, np.copysign(np.inf, x), r)
    return np.where(np.isfinite(x), np.copysign(r, x), x)

def ulp(x: np.ndarray, d: DType) -> np.ndarray:
  mant, emin, _ = _FLOAT[d]
  with np.errstate(all="ignore"):
    _, e = np.frexp(np.where(np.isfinite(x), x, 0.0))
  return np.exp2((np.maximum(e - 1, emin) - (mant - 1)).astype(np.float64))

def _is_float(d: DType) -> bool: return dtypes.is_float(d)


@dataclass
class V:
  """A value: `v` (floats as float64 holding the dtype's value, ints/bools in their numpy dtype), `e` the error bound
  per element (0: exact, inf: not compared), `dt` refgrad's dtype."""
  v: np.ndarray
  e: np.ndarray
  dt: DType

  def like(self, v: np.ndarray, e: np.ndarray, dt: DType | None = None) -> V: return V(v, e, self.dt if dt is None else dt)


def _np_int(d: DType) -> Any: return d.np

def _fin(d: DType, v: np.ndarray, e: np.ndarray) -> V:
  """Round a float result to d; errors grow by an ulp where they are non-zero, and become inf where the value is
  not finite but an uncertain input could make it so (or the other way)."""
  r = round_to(v, d) if d not in _HALF else round_to(round_to(v, dtypes.float32), d)   # halves: float32 first, then once more
  e = np.where(e > 0, e + ulp(np.abs(r) + e, d), e)
  big = _FLOAT[d][2]
  e = np.where((e > 0) & (~np.isfinite(r) | (np.abs(r) + e >= big)), np.inf, e)
  return V(r, e, d)

def _cdt(d: DType) -> DType: return dtypes.float32 if d in _HALF else d

def _arith(d: DType, fn: Callable, *xs: np.ndarray) -> np.ndarray:
  """fn in float64 rounded to the compute dtype (float32 for halves; the caller rounds once more to d)."""
  with np.errstate(all="ignore"): return round_to(fn(*xs), _cdt(d))


# ---- elementwise ----------------------------------------------------------------------------------------------

def neg(a: V) -> V:
  if a.dt == dtypes.bool: return a.like(~a.v, a.e)
  return a.like(-a.v, a.e)

def add(a: V, b: V) -> V:
  if not _is_float(a.dt):
    return a.like((a.v | b.v) if a.dt == dtypes.bool else (a.v + b.v), np.maximum(a.e, b.e))
  with np.errstate(all="ignore"): r = _arith(a.dt, np.add, a.v, b.v)
  return _fin(a.dt, r, a.e + b.e)

def mul(a: V, b: V) -> V:
  if not _is_float(a.dt): return a.like((a.v & b.v) if a.dt == dtypes.bool else a.v * b.v, np.maximum(a.e, b.e))
  with np.errstate(all="ignore"):
    r = _arith(a.dt, np.multiply, a.v, b.v)
    e = np.where((a.e > 0) | (b.e > 0), np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e, 0.0)
  return _fin(a.dt, r, np.where(np.isnan(e), np.inf, e))

def recip(a: V) -> V:
  with np.errstate(all="ignore"):
    r = _arith(a.dt, lambda x: 1.0 / x, a.v)
    e = np.where(a.e > 0, np.where(np.abs(a.v) > a.e, a.e / (np.abs(a.v) * (np.abs(a.v) - a.e)), np.inf), 0.0)
  return _fin(a.dt, r, e)

def div(a: V, b: V) -> V:
  if a.dt in _HALF:   # _f32: a32 * recip(b32), rounded once to the half at the end
    a32, b32 = V(a.v, a.e, dtypes.float32), V(b.v, b.e, dtypes.float32)
    q = mul(a32, recip(b32))
    return _fin(a.dt, q.v, q.e)
  return mul(a, recip(b))

def _monotone(a: V, f: Callable[[np.ndarray], np.ndarray], arg_rel: float = 0.0, slack: int = TRANSCENDENTAL_ULPS) -> V:
  """A transcendental: f of the value, error from f at the ends of [x-e', x+e'] (e' = e + arg_rel*|x|: the rounding
  of a scaled argument) plus `slack` ulps of the result."""
  d, cd = a.dt, _cdt(a.dt)
  with np.errstate(all="ignore"):
    r = f(a.v)
    ea = a.e + arg_rel * np.abs(a.v)
    lo, hi = f(a.v - ea), f(a.v + ea)
    e = np.maximum(np.abs(lo - r), np.abs(hi - r))
    e = np.where(ea > 0, e, 0.0) + slack * ulp(np.abs(r), cd) + slack * ulp(np.abs(r), d)
    e = np.where(np.isnan(e) | (np.isfinite(r) != np.isfinite(lo)) | (np.isfinite(r) != np.isfinite(hi)), np.inf, e)
  r2 = round_to(r, d)
  e = np.where(np.isfinite(r2) & (np.abs(r2) + e < _FLOAT[d][2]), e, np.where(np.isnan(r2) & (a.e == 0), 0.0, np.inf))
  return V(np.where(np.isnan(r2) & (e == 0), np.nan, r2), e, d)

def exp(a: V) -> V: return _monotone(a, np.exp, 2.0 ** -(_FLOAT[_cdt(a.dt)][0] - 1))
def log(a: V) -> V: return _monotone(a, np.log)
def sigmoid(a: V) -> V: return _monotone(a, lambda x: 1.0 / (1.0 + np.exp(-x)), 2.0 ** -(_FLOAT[_cdt(a.dt)][0] - 1))
def sin(a: V) -> V:
  out = _monotone(a, np.sin)
  return out.like(out.v, np.where(np.abs(a.v) + a.e >= SIN_RANGE, np.inf, out.e))

def sqrt(a: V) -> V:
  with np.errstate(all="ignore"):
    r = _arith(a.dt, np.sqrt, a.v)
    e = np.where(a.e > 0, np.where(a.v - a.e > 0, a.e / (np.sqrt(a.v - a.e) + np.sqrt(a.v + a.e)), np.inf), 0.0)
  return _fin(a.dt, r, e)

def floor(a: V) -> V:
  with np.errstate(all="ignore"):
    r = np.floor(a.v)
    e = np.where((a.e > 0) & (np.floor(a.v - a.e) != np.floor(a.v + a.e)), np.inf, 0.0)
  return a.like(r, np.where(np.isnan(r) & (a.e > 0), np.inf, e))

def maximum(a: V, b: V) -> V:
  if a.dt == dtypes.bool: return a.like(a.v | b.v, np.maximum(a.e, b.e))
  if not _is_float(a.dt): return a.like(np.maximum(a.v, b.v), np.maximum(a.e, b.e))
  with np.errstate(invalid="ignore"):
    r = np.where(a.v > b.v, a.v, b.v)
    r = np.where(a.v == b.v, np.where(np.signbit(a.v), b.v, a.v), r)   # MAX(+0, -0) = +0
    r = np.where(np.isnan(a.v) | np.isnan(b.v), np.nan, r)
  return a.like(r, _nan_uncertain(r, np.maximum(a.e, b.e)))

def minimum(a: V, b: V) -> V:
  if not _is_float(a.dt) and a.dt != dtypes.bool: return a.like(np.minimum(a.v, b.v), np.maximum(a.e, b.e))
  m = maximum(neg(a) if _is_float(a.dt) else a.like(~a.v, a.e), neg(b) if _is_float(a.dt) else b.like(~b.v, b.e))
  return neg(m) if _is_float(a.dt) else m.like(~m.v, m.e)

def _nan_uncertain(r: np.ndarray, e: np.ndarray) -> np.ndarray: return np.where(np.isnan(r) & (e > 0), np.inf, e)

def _cmp(a: V, b: V, fn: Callable, strict_tie: bool) -> V:
  with np.errstate(invalid="ignore"):
    r = fn(a.v, b.v)
    if _is_float(a.dt):
      tot = a.e + b.e
      close = (tot > 0) & ~(np.abs(a.v - b.v) > tot)   # includes NaN distance: uncertain
      e = np.where(close, np.inf, 0.0)
    else: e = np.maximum(a.e, b.e)
  return V(r, e, dtypes.bool)

def lt(a: V, b: V) -> V: return _cmp(a, b, np.less, True)
def eq(a: V, b: V) -> V: return _cmp(a, b, np.equal, False)

def where(c: V, x: V, y: V) -> V:
  r = np.where(c.v, x.v, y.v)
  return x.like(r, np.where(c.e > 0, np.inf, np.where(c.v, x.e, y.e)))

def _int_divmod(a: V, b: V, floor_: bool = True) -> tuple[V, V]:
  zero = b.v == 0
  bs = np.where(zero, 1, b.v).astype(a.v.dtype)
  with np.errstate(all="ignore"):
    if dtypes.is_unsigned(a.dt): q, r = a.v // bs, a.v % bs
    else:
      neg1 = bs == -1
      bb = np.where(neg1, 1, bs).astype(a.v.dtype)
      q = np.where(neg1, -a.v, np.floor_divide(a.v, bb)).astype(a.v.dtype)   # MIN // -1 wraps to MIN (documented)
      r = np.where(neg1, 0, np.mod(a.v, bb)).astype(a.v.dtype)
  e = np.where(zero, np.inf, np.maximum(a.e, b.e))   # division by zero is UB: not compared
  return a.like(q, e), a.like(r, e)

def cast(a: V, d: DType) -> V:
  if d == a.dt: return a
  s = a.dt
  if d == dtypes.bool:
    with np.errstate(invalid="ignore"):
      r = (a.v != 0)
      e = np.where(_is_float(s) & (a.e > 0) & ~(np.abs(a.v) > a.e), np.inf, a.e) if _is_float(s) else a.e
    return V(r, e, d)
  if _is_float(d):
    x = a.v.astype(np.float64) if s not in (dtypes.int64, dtypes.uint64) else a.v
    if not _is_float(s):
      if s in (dtypes.int64, dtypes.uint64):   # exact integers beyond 2^53 would need a second rounding here: not compared
        big = (a.v > (1 << 53)) | ((a.v < -(1 << 53)) if s == dtypes.int64 else False)
        return V(round_to(a.v.astype(np.float64), d), np.where(big, np.inf, a.e), d)
      return V(round_to(x, d), a.e.copy(), d)
    r = round_to(x, d)
    e = np.where(a.e > 0, a.e + ulp(np.abs(r) + a.e, d), 0.0)
    return V(r, np.where((e > 0) & ~np.isfinite(r), np.inf, e), d)
  # -> int
  if _is_float(s):
    lo, hi = dtypes.min(d), dtypes.max(d)
    with np.errstate(invalid="ignore"):
      t = np.trunc(a.v)
      bad = ~np.isfinite(a.v) | (t < lo) | (t > hi) | ((a.e > 0) & (np.trunc(a.v - a.e) != np.trunc(a.v + a.e)))
    return V(np.where(bad, 0, t).astype(d.np), np.where(bad, np.inf, 0.0), d)
  return V(a.v.astype(d.np), a.e.copy(), d)   # int/bool -> int: numpy's astype wraps (two's complement)

_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

def _to_bits(a: V) -> np.ndarray:
  if a.dt == dtypes.bfloat16: return (a.v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
  if _is_float(a.dt): return a.v.astype(a.dt.np).view(_BITS[a.dt.itemsize])
  return a.v.view(_BITS[a.dt.itemsize])

def _from_bits(u: np.ndarray, d: DType) -> np.ndarray:
  if d == dtypes.bfloat16: return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
  if _is_float(d): return u.view(d.np).astype(np.float64)
  return u.view(d.np)

def bitcast(a: V, d: DType) -> V:
  uncertain = (a.e > 0) | (np.isnan(a.v) if _is_float(a.dt) else False)   # a produced NaN's bits are unspecified
  return V(_from_bits(_to_bits(a), d), np.where(uncertain, np.inf, 0.0), d)


# ---- reductions -----------------------------------------------------------------------------------------------

def _u(d: DType) -> float: return 2.0 ** -_FLOAT[d][0]

def fsum(a: V, axis: int | tuple[int, ...], keepdim: bool, out: DType) -> V:
  """A float sum in an unspecified order: float64 here, bounded by n*u*sum|x| of the accumulating dtype."""
  acc = dtypes.float32 if out in _HALF else out
  n = a.v.size // max(1, np.sum(a.v, axis=axis).size) if a.v.size else 0
  with np.errstate(all="ignore"):
    s = np.sum(a.v, axis=axis, keepdims=keepdim)
    mag = np.sum(np.abs(a.v), axis=axis, keepdims=keepdim)
    e = np.sum(a.e, axis=axis, keepdims=keepdim) + (n * _u(acc) if n > 1 else 0.0) * mag
  exact_in = np.max(a.e, axis=axis, keepdims=keepdim, initial=0.0) == 0
  e = np.where(np.isfinite(mag) & (mag < _FLOAT[acc][2]), e, np.inf)
  e = np.where(np.isnan(s), np.where(exact_in, 0.0, np.inf), e)   # a NaN input (or inf - inf) gives NaN in any order
  r = round_to(round_to(s, acc), out)
  e = np.where(e > 0, e + ulp(np.abs(r) + e, acc) + ulp(np.abs(r) + e, out), e)
  e = np.where((e == 0) & (r == 0), ulp(0.0 * r, out), e)   # the sign of a zero sum depends on the order (and the start)
  return V(r, np.where((e > 0) & (~np.isfinite(r) | (np.abs(r) + e >= _FLOAT[out][2])), np.inf, e), out)

def isum(a: V, axis: Any, keepdim: bool, out: DType) -> V:
  wide = np.uint64 if dtypes.is_unsigned(out) else np.int64
  with np.errstate(over="ignore"): s = np.sum(a.v.astype(wide), axis=axis, keepdims=keepdim, dtype=wide)   # wraps mod 2^64
  return V(s.astype(out.np), np.max(a.e, axis=axis, keepdims=keepdim, initial=0.0), out)

def vmax(a: V, axis: int, keepdim: bool) -> V:
  if _is_float(a.dt):
    with np.errstate(invalid="ignore"):
      r = np.max(a.v, axis=axis, keepdims=keepdim)
      pz = np.any((a.v == 0) & ~np.signbit(a.v), axis=axis, keepdims=keepdim)
    r = np.where((r == 0) & pz, 0.0, r)
    return a.like(r, _nan_uncertain(r, np.max(a.e, axis=axis, keepdims=keepdim)))
  return a.like(np.max(a.v, axis=axis, keepdims=keepdim), np.max(a.e, axis=axis, keepdims=keepdim))

def argmax(a: V, axis: int) -> V:
  v = a.v.astype(np.float64) if not _is_float(a.dt) else np.where(np.isnan(a.v), np.inf, a.v)
  nan = np.isnan(a.v) if _is_float(a.dt) else np.zeros(a.v.shape, bool)
  idx = np.argmax(np.where(nan, np.inf, v), axis=axis)
  idx = np.where(np.any(nan, axis=axis), np.argmax(nan, axis=axis), idx)
  top = np.take_along_axis(v, np.expand_dims(idx, axis), axis)
  emax = np.max(a.e, axis=axis, keepdims=True)
  with np.errstate(invalid="ignore"):
    rival = (np.abs(v - top) <= 2 * emax) & (emax > 0)
  unsure = np.sum(rival, axis=axis) > 1
  return V(idx.astype(np.int32), np.where(unsure | (np.any(nan, axis=axis) & (emax.squeeze(axis) > 0)), np.inf, 0.0), dtypes.int32)


# ---- the interpreter ------------------------------------------------------------------------------------------

def const(a: V, c: Any) -> V:
  """A Python scalar in a's dtype (floats rounded to it, as a CONST of that dtype)."""
  if _is_float(a.dt): v = np.full(a.v.shape, round_to(np.float64(c), a.dt))
  else: v = np.full(a.v.shape, c, dtype=a.v.dtype)
  return V(v, np.zeros(a.v.shape), a.dt)

def idx_op(a: V, fn: Callable[[np.ndarray], np.ndarray], dt: DType | None = None) -> V:
  """A movement op: the same indexing applied to the values and to their bounds."""
  return V(fn(a.v), fn(a.e), a.dt if dt is None else dt)

def _relu(a: V) -> V:
  with np.errstate(invalid="ignore"):
    keep = np.isnan(a.v) | (a.v > 0) if _is_float(a.dt) else a.v > 0
    r = np.where(keep, a.v, 0)
  e = np.where(a.v + a.e > 0, a.e, 0.0) if _is_float(a.dt) else a.e
  return a.like(r.astype(a.v.dtype), e)

def _abs(a: V) -> V:
  if dtypes.is_unsigned(a.dt) or a.dt == dtypes.bool: return a
  return maximum(a, neg(a))

def _flip(a: V, ax: int) -> V: return idx_op(a, lambda x: np.flip(x, ax).copy())

def _float_of(a: V, nt: Any) -> V: return a if _is_float(a.dt) else cast(a, nt.dtype)

def _rsum(a: V, ax: Any, keepdim: bool, out: DType) -> V:
  if _is_float(out): return fsum(cast(a, out) if a.dt in _HALF or not _is_float(a.dt) else a, ax, keepdim, out)
  return isum(cast(a, out), ax, keepdim, out)

def _prod(a: V, ax: int, out: DType) -> V:
  x = cast(a, out)
  if not _is_float(out):
    wide = np.uint64 if dtypes.is_unsigned(out) else np.int64
    with np.errstate(over="ignore"): p = np.prod(x.v.astype(wide), axis=ax, dtype=wide)
    return V(p.astype(out.np), np.max(x.e, axis=ax), out)
  n = x.v.shape[ax]
  with np.errstate(all="ignore"):
    p = np.prod(x.v, axis=ax)
    rel = np.sum(np.where(x.e > 0, x.e / np.abs(x.v), 0.0), axis=ax)
    e = np.abs(p) * (np.expm1(rel + 2 * n * _u(out)))   # every pairwise product is rounded in out
    unsure = np.any((x.e > 0) & (np.abs(x.v) <= x.e), axis=ax) | np.isnan(e)
  return _fin(out, p, np.where(unsure, np.inf, e)) if n > 1 else _fin(out, p, np.where(unsure, np.inf, np.max(x.e, axis=ax)))

def _mean(a: V, ax: int, nt: Any) -> V:
  x = cast(a, dtypes.float32 if a.dt in _HALF or not _is_float(a.dt) else a.dt)
  n = a.v.shape[ax]
  s = fsum(x, ax, False, x.dt)
  m = div(s, const(s, n))
  return cast(m, nt.dtype)

def _cumsum(a: V, ax: int, nt: Any) -> V:
  out = nt.dtype
  if not _is_float(out):
    wide = np.uint64 if dtypes.is_unsigned(out) else np.int64
    with np.errstate(over="ignore"): c = np.cumsum(cast(a, out).v.astype(wide), axis=ax, dtype=wide)
    return V(c.astype(out.np), np.maximum.accumulate(a.e, axis=ax), out)
  acc = dtypes.float32 if out in _HALF else out
  x = cast(a, acc).v
  n = x.shape[ax]
  with np.errstate(all="ignore"):
    c = np.cumsum(x, axis=ax)
    mag = np.cumsum(np.abs(x), axis=ax)
    e = np.cumsum(a.e, axis=ax) + (n * _u(acc) if n > 1 else 0) * mag
  e = np.where(np.isfinite(mag) & (mag < _FLOAT[acc][2]), e, np.inf)
  r = round_to(round_to(c, acc), out)
  e = np.where(e > 0, e + ulp(np.abs(r) + e, acc) + ulp(np.abs(r) + e, out), e)
  e = np.where((e == 0) & (r == 0), ulp(0.0 * r, out), e)   # the sign of a zero sum depends on the order
  return V(r, np.where((e > 0) & ~np.isfinite(r), np.inf, e), out)

def _dot(a: V, w: V, out: DType, u: float) -> V:
  """Float a @ w (any order), bounded by (n+1)*u*(|a|@|w|) plus the propagated input errors."""
  n = a.v.shape[-1]
  with np.errstate(all="ignore"):
    r = a.v @ w.v
    mag = np.abs(a.v) @ np.abs(w.v)
    e = np.abs(a.v) @ w.e + a.e @ np.abs(w.v) + a.e @ w.e + (n + 1) * u * mag
  e = np.where(np.isfinite(mag) & np.isfinite(e) & (mag < _FLOAT[out][2]), e, np.inf)
  r2 = round_to(round_to(r, _cdt(out)), out)
  e = np.where((e == 0) & (r2 == 0), ulp(0.0 * r2, out), e)   # the sign of a zero sum depends on the order (and the start)
  e = np.where(e > 0, e + ulp(np.abs(r2) + e, out), e)
  return V(r2, np.where((e > 0) & ~np.isfinite(r2), np.inf, e), out)

def _matmul(a: V, r: list[int], ins: Any, nt: Any) -> V:
  x = a if a.v.ndim >= 2 else idx_op(a, lambda v: v.reshape(1, -1))
  w = next(ins)
  out = nt.dtype
  if _is_float(out): return _dot(cast(x, _cdt(x.dt)), cast(w, _cdt(w.dt)), out, _u(x.dt))
  wide = np.uint64 if dtypes.is_unsigned(out) else np.int64
  with np.errstate(over="ignore"): p = x.v.astype(wide) @ w.v.astype(wide)
  e = np.where((np.max(x.e) > 0) | (np.max(w.e) > 0), np.inf, 0.0) * np.ones(p.shape)
  return V(p.astype(out.np), e, out)

def _conv(a: V, r: list[int], ins: Any, nt: Any) -> V:
  x = a.v.reshape(a.v.shape[-2:]) if a.v.ndim >= 2 else a.v.reshape(1, -1)
  xe = a.e.reshape(x.shape)
  w = next(ins)
  cout, _, kh, kw = w.v.shape
  pad = r[2] % 2
  xp, xep = np.pad(x, pad), np.pad(xe, pad)
  win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw))          # (oh, ow, kh, kw)
  wine = np.lib.stride_tricks.sliding_window_view(xep, (kh, kw))
  oh, ow = win.shape[:2]
  av = V(win.reshape(oh * ow, kh * kw), wine.reshape(oh * ow, kh * kw), a.dt)
  wv = V(w.v.reshape(cout, kh * kw).T, w.e.reshape(cout, kh * kw).T, w.dt)
  o = _dot(av, wv, nt.dtype, _u(nt.dtype))                                 # products rounded in the dtype, then summed
  return idx_op(o, lambda v: v.T.reshape(1, cout, oh, ow))

def _pad_amounts(a: V, r: list[int]) -> list[tuple[int, int]]:
  if a.v.ndim == 0: return [(0, 0)] * 0
  return [(r[0] % 3, r[1] % 3) if i == r[2] % a.v.ndim else (0, 0) for i in range(a.v.ndim)]

def _pad_value(a: V, r: list[int], ins: Any, nt: Any) -> V:
  ax = r[2] % a.v.ndim
  amt = [(1 + r[0] % 2, r[1] % 3) if i == ax else (0, 0) for i in range(a.v.ndim)]
  mode = ("constant", "constant", "reflect", "replicate", "circular")[r[1] % 5]
  if mode != "constant":
    if max(amt[ax]) >= a.v.shape[ax]: raise NotModelled(f"pad mode {mode} by {amt[ax]} of an axis of {a.v.shape[ax]}")
    m = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    return idx_op(a, lambda v: np.pad(v, amt, mode=m))
  c = True if a.dt == dtypes.bool else _const(_Dt(a.dt), r[0] >> 3)
  cv = const(V(np.zeros(1, a.v.dtype), np.zeros(1), a.dt), c).v[0]
  return V(np.pad(a.v, amt, constant_values=cv), np.pad(a.e, amt), a.dt)

@dataclass
class _Dt:
  dtype: DType

def _cconst(a: V, r: int) -> V:
  return const(a, _const(_Dt(a.dt), r))

def _const_chain(a: V, r: list[int], mul_: bool) -> V:
  out = mul(a, _cconst(a, r[0])) if mul_ else add(a, _cconst(a, r[0]))
  if r[1] % 3 == 1: out = mul(out, _cconst(out, r[0] >> 4)) if mul_ else add(out, _cconst(out, r[0] >> 4))
  elif r[1] % 3 == 2 and mul_ and not _is_float(a.dt): out = _int_divmod(out, const(out, 1 + (r[0] >> 4) % 8))[0]
  return out

def _cdivmod(a: V, c: int) -> tuple[V, V]:
  """C's integer division by a positive constant: the quotient rounded toward zero, the remainder with a's sign."""
  with np.errstate(all="ignore"):
    rem = np.fmod(a.v, a.v.dtype.type(c))
    q = (a.v - rem) // a.v.dtype.type(c)   # a - rem is a multiple of c (no wrap: rem has a's sign and |rem| < |a|)
  return a.like(q.astype(a.v.dtype), a.e), a.like(rem.astype(a.v.dtype), a.e)

def _divmod_join(a: V, r: list[int]) -> V:
  c1, n, c2, c3 = divmod_constants(a.dt, r)
  s = add(mul(a, const(a, c2)), _cdivmod(a, c3)[1])
  parts = [add(mul(_cdivmod(a, c1)[0], const(a, c2)), _cdivmod(a, c3)[1]), add(mul(_cdivmod(_cdivmod(a, c1)[0], n)[1], const(a, c2)), _cdivmod(a, c3)[1]),
           *_cdivmod(s, c1)]
  return a.like(np.bitwise_xor.reduce([p.v for p in parts]), a.e)

def _shrink(a: V, r: list[int]) -> V:
  ax = r[2] % a.v.ndim
  n = a.v.shape[ax]
  lo = r[0] % max(1, n // 2)
  hi = n - r[1] % max(1, (n - lo) // 2)
  sl = tuple(slice(lo, hi) if i == ax else slice(None) for i in range(a.v.ndim))
  return idx_op(a, lambda v: v[sl])

def _big_view(a: V, r: list[int]) -> V:
  """The window of a repeated, padded, flattened view (oracles/programs.py big_view), by index arithmetic in int64."""
  n = a.v.size
  rep, total, lo, hi = big_view_geometry(n, r)
  j = np.arange(lo, hi, dtype=np.int64)
  inside = j < rep * n
  src = np.where(inside, j % n, 0)
  v, e = a.v.reshape(-1)[src], a.e.reshape(-1)[src]
  if total > rep * n:
    c = const(V(v, e, a.dt), True if a.dt == dtypes.bool else _const(_Dt(a.dt), r[0] >> 2))
    v, e = np.where(inside, v, c.v), np.where(inside, e, 0.0)
  if r[2] % 2: v, e = v[::-1].copy(), e[::-1].copy()
  return V(v, e, a.dt)

def _gather(a: V, r: list[int]) -> V:
  ax = r[0] % a.v.ndim
  idx = np.random.default_rng(r[1]).integers(0, a.v.shape[ax], a.v.shape).astype(np.int32)
  return idx_op(a, lambda v: np.take_along_axis(v, idx, ax))

def _long_sum(a: V, r: list[int], nt: Any) -> V:
  n = a.v.size
  rep = -(-SPLIT_REDUCE // n) + r[0] % 3
  flat = idx_op(a, lambda v: np.broadcast_to(v.reshape(1, n), (rep, n)).copy())
  if r[1] % 3 == 0: return idx_op(vmax(flat, None, False), lambda v: v.reshape(()))  # type: ignore[arg-type]
  return _rsum(flat, None, False, nt.dtype)

def _wrap_cmp(a: V, r: list[int]) -> V:
  hi = dtypes.max(a.dt)
  c = const(a, hi - r[0] % 3)
  return lt(add(a.like(a.v & a.v.dtype.type(hi >> 1), a.e), c), c)

def _bit_test(a: V, r: list[int]) -> V:
  m, m2 = bit_test_masks(r)
  v, ty = a.v, a.v.dtype.type
  with np.errstate(all="ignore"): out = np.where((v & ty(m)) == 0, v, v + ty(1)) ^ np.where((v & ty(m2)) < 1, v, ~v)
  return a.like(out, a.e)

def _vmin(a: V, ax: int) -> V:
  if _is_float(a.dt): return neg(vmax(neg(a), ax, False))
  return a.like(np.min(a.v, axis=ax), np.max(a.e, axis=ax))

def _shift(a: V, r: list[int], left: bool) -> V:
  s = r[1] % (8 * a.dt.itemsize)
  return a.like((np.left_shift if left else np.right_shift)(a.v, a.v.dtype.type(s)), a.e)

def _other(a: V, r: list[int], ins: Any) -> V: return next(ins) if r[2] % 2 else _flip(a, r[1] % a.v.ndim)

def _where(a: V, r: list[int], ins: Any) -> V:
  c = lt(a, _other(a, r, ins))   # other > t
  return where(c, a, _other(a, [r[0], r[1] + 1, r[2] + 1], ins))

def _bin(f: Callable[[V, V], V]) -> Callable: return lambda a, r, ins, nt: f(a, _other(a, r, ins))
def _un(f: Callable[[V], V]) -> Callable: return lambda a, r, ins, nt: f(_float_of(a, nt))

def _bitwise(f: Callable) -> Callable: return lambda a, r, ins, nt: (lambda b: a.like(f(a.v, b.v), np.maximum(a.e, b.e)))(_other(a, r, ins))

# name -> fn(value, [r0, r1, r2], iterator over the step's new inputs, refgrad's lazy result) : the value after the step
NP_STEPS: dict[str, Callable[[V, list[int], Any, Any], V]] = {
  "neg": lambda a, r, ins, nt: neg(a), "abs": lambda a, r, ins, nt: _abs(a), "relu": lambda a, r, ins, nt: _relu(a),
  "exp": _un(exp), "log": _un(log), "sqrt": _un(sqrt), "sin": _un(sin), "recip": _un(recip), "sigmoid": _un(sigmoid),
  "floor": lambda a, r, ins, nt: floor(a), "square": lambda a, r, ins, nt: mul(a, a),
  "add": _bin(add), "sub": _bin(lambda a, b: add(a, neg(b))), "mul": _bin(mul), "div": _bin(div),
  "idiv_const": lambda a, r, ins, nt: _int_divmod(a, const(a, 1 + r[0] % 7))[0],
  "mod_const": lambda a, r, ins, nt: _int_divmod(a, const(a, 1 + r[0] % 7))[1],
  "idiv": _bin(lambda a, b: _int_divmod(a, b)[0]),
  "maximum": _bin(maximum), "minimum": _bin(minimum), "lt": _bin(lt), "eq": _bin(eq),
  "where": lambda a, r, ins, nt: _where(a, r, ins),
  "and": _bitwise(np.bitwise_and), "or": _bitwise(np.bitwise_or), "xor": _bitwise(np.bitwise_xor),
  "not": lambda a, r, ins, nt: a.like(~a.v, a.e),
  "shl": lambda a, r, ins, nt: _shift(a, r, True), "shr": lambda a, r, ins, nt: _shift(a, r, False),
  "cast": lambda a, r, ins, nt: cast(a, nt.dtype), "bitcast": lambda a, r, ins, nt: bitcast(a, nt.dtype),
  "sum": lambda a, r, ins, nt: _rsum(a, r[0] % a.v.ndim, bool(r[1] % 2), nt.dtype),
  "max": lambda a, r, ins, nt: vmax(a, r[0] % a.v.ndim, False), "min": lambda a, r, ins, nt: _vmin(a, r[0] % a.v.ndim),
  "prod": lambda a, r, ins, nt: _prod(a, r[0] % a.v.ndim, nt.dtype), "mean": lambda a, r, ins, nt: _mean(a, r[0] % a.v.ndim, nt),
  "argmax": lambda a, r, ins, nt: argmax(a, r[0] % a.v.ndim), "cumsum": lambda a, r, ins, nt: _cumsum(a, r[0] % a.v.ndim, nt),
  "permute": lambda a, r, ins, nt: idx_op(a, lambda v: np.transpose(v, np.random.default_rng(r[0]).permutation(v.ndim)).copy()),
  "reshape": lambda a, r, ins, nt: idx_op(a, lambda v: v.reshape(nt.shape)),
  "pad": lambda a, r, ins, nt: idx_op(a, lambda v: np.pad(v, _pad_amounts(a, r)) if v.ndim else v.copy()),
  "shrink": lambda a, r, ins, nt: _shrink(a, r), "flip": lambda a, r, ins, nt: _flip(a, r[0] % a.v.ndim),
  "expand": lambda a, r, ins, nt: idx_op(a, lambda v: np.broadcast_to(v[None], nt.shape).copy()),
  "matmul": _matmul, "conv2d": _conv, "gather": lambda a, r, ins, nt: _gather(a, r),
  "contiguous": lambda a, r, ins, nt: a,
  "add_const": lambda a, r, ins, nt: _const_chain(a, r, False), "mul_const": lambda a, r, ins, nt: _const_chain(a, r, True),
  "wrap_cmp": lambda a, r, ins, nt: _wrap_cmp(a, r), "big_view": lambda a, r, ins, nt: _big_view(a, r),
  "divmod_join": lambda a, r, ins, nt: _divmod_join(a, r), "bit_test": lambda a, r, ins, nt: _bit_test(a, r),
  "lt_const": lambda a, r, ins, nt: lt(a, _cconst(a, r[0])), "pad_value": _pad_value, "long_sum": lambda a, r, ins, nt: _long_sum(a, r, nt),
}


class Mismatch(Exception):
  """refgrad and the interpreter disagree on a step's shape or dtype."""

class NotModelled(Exception):
  """A corner of the API the interpreter does not model (the recipe is not compared)."""


def input_value(dt: DType, n: int, rng: np.random.Generator) -> tuple[np.ndarray, V]:
  """Seeded "simple" input values (oracles/inputs.py) for refgrad (storage form) and for the interpreter."""
  raw = values(dt, n, "simple", rng)
  v = semantics.to_float64(raw, dt) if _is_float(dt) else raw
  return raw, V(np.asarray(v), np.zeros(n), dt)


@dataclass
class Step:
  """One step the recipe applied (refgrad accepted it): its name, ints, and refgrad's result shape and dtype."""
  name: str
  r: list[int]
  shape: tuple[int, ...]
  dtype: DType
  n_inputs: int


@dataclass
class Run:
  tensor: Any                 # refgrad's lazy result
  value: V                    # the interpreter's
  steps: list[Step]           # what was applied, for `replay`
  inputs: list[Any]           # refgrad's input tensors, in the order they were made
  values: list[V]             # the same inputs for the interpreter


def run_both(recipe: dict[str, Any], seed: int, device: str = "PYTHON", dtype: str | None = None, requires_grad: bool = False) -> Run:
  """Build the recipe on refgrad (lazy, on `device`) and interpret it here, step by step in lockstep: the same inputs,
  and a step refgrad refuses (or that makes an empty or too large tensor) is skipped by both, as `programs.build`.
  `dtype` overrides the recipe's; `requires_grad` marks every float input."""
  rng = np.random.default_rng(seed)
  made: list[V] = []
  inputs: list[Any] = []
  def new(shape: tuple[int, ...], dt: DType) -> Any:
    raw, v = input_value(dt, math.prod(shape), rng)
    made.append(V(v.v.reshape(shape), v.e.reshape(shape), dt))
    rg = requires_grad and _is_float(dt)
    if dt == dtypes.bfloat16: x = Tensor(semantics.to_float64(raw, dt).astype(np.float32).reshape(shape), device=device, requires_grad=rg).cast(dt)
    else: x = Tensor(raw.reshape(shape), device=device, dtype=dt, requires_grad=rg)
    inputs.append(x)
    return x
  t = new(tuple(recipe["shape"]), _dt(dtype or recipe["dtype"]))
  val = made.pop()
  values, steps = [val], []
  for name, *r in recipe["steps"]:
    made.clear()
    n_in = len(inputs)
    try: nt = STEPS[name][1](t, r, new)
    except (TypeError, ValueError, AssertionError, IndexError, ZeroDivisionError):
      del inputs[n_in:]
      continue
    if nt.numel() == 0 or nt.numel() > 4 * MAX_ELEMENTS:
      del inputs[n_in:]
      continue
    step = Step(name, r, tuple(nt.shape), nt.dtype, len(made))
    nv = apply(step, val, list(made))
    t, val = nt, nv
    steps.append(step)
    values.extend(made)
  return Run(t, val, steps, inputs, values)


def apply(step: Step, val: V, made: list[V]) -> V:
  """The interpreter's value after `step` (made: the step's new inputs); Mismatch when the shape or dtype is not
  refgrad's."""
  nv = NP_STEPS[step.name](val, step.r, iter(made), step)
  if tuple(nv.v.shape) != step.shape: raise Mismatch(f"step {step.name}: refgrad's shape {step.shape}, the API's {tuple(nv.v.shape)}")
  if nv.dt != step.dtype: raise Mismatch(f"step {step.name}: refgrad's dtype {step.dtype.name}, the interpreter's {nv.dt.name}")
  return nv


def replay(steps: list[Step], values: list[V]) -> V:
  """The interpreter alone on recorded steps and (possibly changed) inputs: no refgrad involved (finite differences)."""
  it = iter(values)
  val = next(it)
  for st in steps: val = apply(st, val, [next(it) for _ in range(st.n_inputs)])
  return val


def compare(got: np.ndarray, want: V) -> str | None:
  """None when refgrad's result `got` (numpy(): bfloat16 as float32) agrees with the interpreter's: bit for bit (NaNs
  equal, zeros by sign) where the bound is 0, within it where finite, not at all where inf."""
  g = np.asarray(got).reshape(-1)
  w, e = want.v.reshape(-1), np.where(np.isnan(want.e.reshape(-1)), np.inf, want.e.reshape(-1))
  if g.size != w.size: return f"{g.size} elements, the interpreter has {w.size}"
  if _is_float(want.dt):
    g = g.astype(np.float64)
    with np.errstate(invalid="ignore"):
      exact_ok = (g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))
      near_ok = np.abs(g - w) <= e
    ok = np.where(e == 0, exact_ok, np.where(np.isinf(e), True, near_ok))
  else:
    ok = (g.astype(want.v.dtype) == w) | np.isinf(e)
  if ok.all(): return None
  j = int(np.argmin(ok))
  how = "bit for bit" if e[j] == 0 else f"within {e[j]:.3g}"
  return f"element {j} of {w.size} ({want.dt.name}): refgrad {g[j]!r}, numpy interpreter {w[j]!r} (must agree {how}); {int((~ok).sum())} differ"


def interp_differs(recipe: dict[str, Any], seed: int, device: str = "PYTHON") -> str | None:
  """Oracle "numpy": None when refgrad's whole program agrees with the interpreter, else what differs."""
  try:
    run = run_both(recipe, seed, device)
    t, val = run.tensor, run.value
  except Mismatch as m: return str(m)
  except NotModelled: return None
  try: got = t.numpy()
  except UndefinedBehaviourError as e:
    if input_caused(e): return None   # value UB on these inputs (a float->int cast out of range, x // 0): nothing to compare
    return f"refgrad failed: {type(e).__name__}: {str(e)[:300]}"
  except Exception as e: return f"refgrad failed: {type(e).__name__}: {str(e)[:300]}"
  return compare(got, val)
