"""MathMixin: elementwise math, operators, comparisons, logic/bitwise, reductions, against numpy on Device.DEFAULT
(DEV=CPU or DEV=PYTHON), plus byte identity of the same programs on CPU and PYTHON.

Ints, bools, comparisons, rounding and +,-,* are compared exactly. Each float tolerance is stated where it is
used; they come from how the ops are built (refgrad/tensor/mathops.py docstring): x / y is x * (1/y), exp(x) is
exp2(x*log2(e)) with decomposed EXP2/LOG2/SIN (within 0.8 ulp each), float16 composites run in float32.
"""
from __future__ import annotations

import math
import operator

import numpy as np
import pytest

from refgrad import Tensor, dtypes
from refgrad.dtype import DType, least_upper_dtype
from refgrad.uop.semantics import same_bits

F32_ULP = 2.0 ** -23
F16_ULP = 2.0 ** -10
NAN, INF = math.nan, math.inf


def data(dt: DType, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if dt == dtypes.bool: return rng.random(shape) < 0.5
  if dt == dtypes.uint8: return rng.integers(0, 256, shape).astype(np.uint8)
  if dtypes.is_int(dt): return rng.integers(-1000, 1000, shape).astype(dt.np)
  return (rng.standard_normal(shape) * 3).astype(dt.np)

def check(t: Tensor, expected: np.ndarray, dtype: DType | None = None, rtol: float = 0.0, atol: float = 0.0) -> None:
  """Shape and (optionally) dtype must match; values exactly unless a tolerance is given (NaN == NaN)."""
  got = t.numpy()
  expected = np.asarray(expected)
  assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
  if dtype is not None: assert t.dtype == dtype, f"dtype {t.dtype} != {dtype}"
  if rtol or atol: np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
  else: np.testing.assert_array_equal(got, expected.astype(got.dtype))

def check_bits(t: Tensor, expected: np.ndarray) -> None:
  """Exact bits (NaN == NaN, +0 != -0) for float32/float16/float64 results."""
  got = t.numpy()
  expected = np.asarray(expected, dtype=got.dtype)
  assert got.shape == expected.shape
  ok = same_bits(got, expected, dtypes.from_np(got.dtype))
  assert ok.all(), f"differs at {np.argwhere(~ok).tolist()}: got {got[~ok]}, want {expected[~ok]}"


# ---- binary arithmetic: dtypes, promotion, broadcasting ------------------------------------------------

PAIRS = [(dtypes.float32, dtypes.float32), (dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.int32), (dtypes.uint8, dtypes.int32),
         (dtypes.uint8, dtypes.uint8), (dtypes.float16, dtypes.float16), (dtypes.int32, dtypes.bool), (dtypes.float16, dtypes.uint8)]

@pytest.mark.parametrize("da,db", PAIRS, ids=lambda d: d.name)
def test_add_sub_mul_broadcast_promote(da: DType, db: DType) -> None:
  a, b = data(da, (3, 1, 4), 1), data(db, (5, 4), 2)
  res = least_upper_dtype(da, db)
  an, bn = a.astype(res.np), b.astype(res.np)
  ta, tb = Tensor(a), Tensor(b)
  # IEEE + - * are correctly rounded in numpy too (float16: computed in float32, rounded once): exact; ints wrap in both
  with np.errstate(over="ignore"):
    check(ta + tb, an + bn, res)
    check(ta - tb, an - bn, res)
    check(ta * tb, an * bn, res)

@pytest.mark.parametrize("da,db", PAIRS, ids=lambda d: d.name)
def test_truediv(da: DType, db: DType) -> None:
  a, b = data(da, (3, 1, 4), 3), data(db, (5, 4), 4)
  b = np.where(b == 0, 1, b).astype(b.dtype)
  res = least_upper_dtype(da, db)
  res = res if dtypes.is_float(res) else dtypes.float32
  # x * (1/y): two roundings, within 1.5 ulp of the quotient (float16: computed in float32, then within 1 ulp)
  rtol = 1.5 * F32_ULP if res == dtypes.float32 else F16_ULP
  check(Tensor(a) / Tensor(b), a.astype(np.float64) / b.astype(np.float64), res, rtol=rtol)

@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int8, dtypes.uint8], ids=lambda d: d.name)
def test_int_floordiv_mod_python_semantics(dt: DType) -> None:
  a = data(dt, (6, 7), 5) if dt != dtypes.int8 else np.arange(-128, 127, 6, dtype=np.int8)[:42].reshape(6, 7)
  b = data(dt, (7,), 6)
  if dt == dtypes.int8: b = np.array([3, -3, 7, -7, 1, -1, 100], np.int8)
  b = np.where(b == 0, 3, b).astype(dt.np)
  ta, tb = Tensor(a), Tensor(b)
  check(ta // tb, np.floor_divide(a, b), dt)
  check(ta % tb, np.remainder(a, b), dt)
  check(ta.idiv(tb), np.trunc(a.astype(np.float64) / b).astype(dt.np), dt)   # C division: toward zero
  check(ta.div(tb, rounding_mode="floor"), np.floor_divide(a, b), dt)

def test_int_floordiv_mod_scalars_and_extremes() -> None:
  a = np.array([-7, -6, -1, 0, 1, 6, 7, -2**31, 2**31 - 1], np.int32)
  t = Tensor(a)
  for d in (2, -2, 3, -3):
    check(t // d, np.floor_divide(a, np.int32(d)), dtypes.int32)
    check(t % d, np.remainder(a, np.int32(d)), dtypes.int32)
  d = np.int32([1, -1, -1, 1, -1, 1, -1, -1, -1])   # C traps on MIN / -1 and MIN % -1; here they wrap like numpy
  with np.errstate(all="ignore"):
    check(t // Tensor(d), np.floor_divide(a, d), dtypes.int32)
    check(t % Tensor(d), np.remainder(a, d), dtypes.int32)
    check(t.idiv(Tensor(d)), np.floor_divide(a, d), dtypes.int32)
  check(17 // Tensor([5, -5, 3]), np.array([3, -4, 5]))
  check(17 % Tensor([5, -5, 3]), np.array([2, -3, 2]))

def test_float_floordiv_mod() -> None:
  # quarters over powers of two: every quotient is exact, so floor(a * (1/b)) and numpy agree bit for bit
  a = np.arange(-20, 20, dtype=np.float32).reshape(4, 10) * 0.25
  b = np.array([0.5, -0.5, 2.0, -4.0, 1.0, -1.0, 0.25, 8.0, -2.0, 4.0], np.float32)
  check(Tensor(a) // Tensor(b), np.floor_divide(a, b))
  check(Tensor(a) % Tensor(b), np.remainder(a, b))
  # general values: % is a - floor(a/b)*b corrected into [0, b): within a few ulps of |a| (values here < 10)
  x, y = data(dtypes.float32, (50,), 7), np.abs(data(dtypes.float32, (50,), 8)) + 0.5
  got = (Tensor(x) % Tensor(y)).numpy()
  np.testing.assert_allclose(got, np.remainder(x, y), atol=4e-6)
  assert ((got >= 0) & (got < y)).all()
  assert ((Tensor(x) % Tensor(-y)).numpy() <= 0).all()
  check(Tensor([7.0, 0.3, 1.0]) % Tensor([7.0, 0.1, 1.0]), np.remainder(np.float32([7.0, 0.3, 1.0]), np.float32([7.0, 0.1, 1.0])), atol=1e-7)

def test_div_rounding_modes_float() -> None:
  a = Tensor([-7.5, -2.5, 2.5, 7.5, -0.5])
  check(a.div(2, rounding_mode="trunc"), np.float32([-3, -1, 1, 3, -0.0]))
  check(a.div(2, rounding_mode="floor"), np.float32([-4, -2, 1, 3, -1]))
  check(1 / Tensor([2.0, 4.0, 0.0, -0.0]), np.float32([0.5, 0.25, INF, -INF]))
  with pytest.raises(ValueError, match="rounding_mode"): a.div(2, rounding_mode="round")


# ---- pow ----------------------------------------------------------------------------------------------

def test_pow_float_special_values_like_numpy() -> None:
  base = np.float32([-3, -2.5, -1, -0.5, -0.0, 0.0, 0.5, 1, 2, 3, INF, -INF, NAN])
  exps = np.float32([-3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 2, 3, 7, INF, -INF, NAN])
  b, e = np.broadcast_arrays(base[:, None], exps[None, :])
  with np.errstate(all="ignore"): want = np.power(b, e)
  got = (Tensor(base).reshape(-1, 1) ** Tensor(exps).reshape(1, -1)).numpy()
  # exp2(e*log2|b|): relative error about |e*log2(b)| ulps (< 12 here) -> rtol 2e-6; NaN, inf, zero signs exact
  np.testing.assert_allclose(got, want, rtol=2e-6, equal_nan=True)
  assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()

def test_pow_scalar_exponents() -> None:
  x = data(dtypes.float32, (20,), 9)
  check(Tensor(x) ** 2, x * x)                                              # one multiply: exact
  check(Tensor(x) ** 0, np.ones(20, np.float32))
  check(Tensor([NAN]) ** 0, np.float32([1]))
  # repeated squaring: within ~n/2 ulps for exponent n
  check(Tensor(x) ** 5, x.astype(np.float64) ** 5, rtol=4 * F32_ULP)
  check(Tensor(x) ** -3, x.astype(np.float64) ** -3.0, rtol=4 * F32_ULP)
  check(Tensor(np.abs(x)) ** 0.5, np.sqrt(np.abs(x).astype(np.float64)), rtol=4 * F32_ULP)
  check(2 ** Tensor([0.0, 1.0, -1.0, 10.0, 0.5]), np.float32([1, 2, 0.5, 1024, math.sqrt(2)]), rtol=2 * F32_ULP)
  check(Tensor([1.0, 2.0], dtype=dtypes.float16) ** 3, np.float16([1, 8]), dtypes.float16)

def test_pow_int() -> None:
  a = np.arange(-4, 6, dtype=np.int32)
  for e in (0, 1, 2, 3, 7, 31, 40):
    check(Tensor(a) ** e, np.power(a, np.int32(e)), dtypes.int32)   # wraps like numpy
  e = np.arange(0, 10, dtype=np.int32)
  check(Tensor(a) ** Tensor(e), np.power(a, e), dtypes.int32)
  check(3 ** Tensor(e), np.power(np.int32(3), e), dtypes.int32)
  u = np.arange(0, 8, dtype=np.uint8)
  check(Tensor(u) ** Tensor(u), np.power(u, u), dtypes.uint8)
  # negative exponents: 1 // base**|e| (truncated): 0 except for bases 1 and -1
  check(Tensor([1, -1, -1, 2, -3]) ** Tensor([-3, -3, -2, -1, -1]), np.int32([1, -1, 1, 0, 0]))
  with pytest.raises(ValueError, match="negative power"): Tensor([1, 2]) ** -1
  check(Tensor([1, 2]) ** 0.5, np.sqrt(np.float32([1, 2])), dtypes.float32, rtol=4 * F32_ULP)   # a float exponent promotes
  check(Tensor([3, -2]) ** 2.0, np.float32([9, 4]), dtypes.float32)

def test_pow_float16_in_float32() -> None:
  x = np.abs(data(dtypes.float16, (30,), 10)) + np.float16(0.1)
  y = data(dtypes.float16, (30,), 11) * np.float16(0.5)
  # computed in float32, rounded once: within 1 ulp of float16
  check(Tensor(x) ** Tensor(y), np.power(x.astype(np.float64), y.astype(np.float64)), dtypes.float16, rtol=F16_ULP)


# ---- comparisons ----------------------------------------------------------------------------------------

CMPS = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]

@pytest.mark.parametrize("op", CMPS, ids=lambda f: f.__name__)
def test_comparisons_float_special(op) -> None:
  v = np.float32([-INF, -1, -0.0, 0.0, 1, INF, NAN])
  a, b = np.broadcast_arrays(v[:, None], v[None, :])
  check(op(Tensor(v).reshape(-1, 1), Tensor(v).reshape(1, -1)), op(a, b), dtypes.bool)

@pytest.mark.parametrize("op", CMPS, ids=lambda f: f.__name__)
def test_comparisons_ints_scalars_promotion(op) -> None:
  a = np.int32([-2**31, -1, 0, 1, 2**31 - 1])
  u = np.uint8([0, 1, 127, 128, 255])
  check(op(Tensor(a), 0), op(a, 0), dtypes.bool)
  check(op(0, Tensor(a)), op(0, a), dtypes.bool)
  check(op(Tensor(u), Tensor(a)), op(u.astype(np.int64), a), dtypes.bool)
  check(op(Tensor(a), 0.5), op(a.astype(np.float32), np.float32(0.5)), dtypes.bool)
  bb = np.array([False, True])
  check(op(Tensor(bb).reshape(2, 1), Tensor(bb)), op(bb[:, None], bb), dtypes.bool)

def test_method_comparisons_and_hash() -> None:
  t = Tensor([1, 2, 3])
  check(t.lt(2), [True, False, False]); check(t.le(2), [True, True, False]); check(t.gt(2), [False, False, True])
  check(t.ge(2), [False, True, True]); check(t.eq(2), [False, True, False]); check(t.ne(2), [True, False, True])
  assert isinstance(t == t, Tensor)
  d = {t: 1}
  assert d[t] == 1 and hash(t) == hash(t) and len({t, Tensor([1, 2, 3])}) == 2


# ---- logic and bitwise -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.bool, dtypes.int8], ids=lambda d: d.name)
def test_bitwise(dt: DType) -> None:
  a, b = data(dt, (4, 5), 12), data(dt, (5,), 13)
  ta, tb = Tensor(a), Tensor(b)
  check(ta & tb, a & b, dt); check(ta | tb, a | b, dt); check(ta ^ tb, a ^ b, dt); check(~ta, ~a, dt)
  check(ta.bitwise_and(tb), a & b); check(ta.bitwise_or(tb), a | b); check(ta.bitwise_xor(tb), a ^ b); check(ta.bitwise_not(), ~a)
  if dt != dtypes.bool:
    check(5 & ta, np.bitwise_and(dt.np.type(5), a)); check(5 | ta, dt.np.type(5) | a); check(5 ^ ta, dt.np.type(5) ^ a)

def test_logical() -> None:
  a, b = np.array([0, 1, 2, 0]), np.array([0.0, 0.0, -1.5, NAN])
  check(Tensor(a).logical_and(Tensor(b)), np.logical_and(a, b), dtypes.bool)
  check(Tensor(a).logical_or(Tensor(b)), np.logical_or(a, b), dtypes.bool)
  check(Tensor(a).logical_xor(Tensor(b)), np.logical_xor(a, b), dtypes.bool)
  check(Tensor(b).logical_not(), np.logical_not(b), dtypes.bool)

@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.uint32], ids=lambda d: d.name)
def test_shifts_every_amount_defined(dt: DType) -> None:
  bits = dt.bits
  a = np.array([dtypes.min(dt), -5 if not dtypes.is_unsigned(dt) else 5, 0, 1, 77, dtypes.max(dt)]).astype(dt.np)
  amounts = np.array([-1, 0, 1, 3, bits - 1, bits, bits + 5, 100]).astype(dt.np)   # out of range: numpy's results
  x, s = np.broadcast_arrays(a[:, None], amounts[None, :])
  check(Tensor(a).reshape(-1, 1) << Tensor(amounts).reshape(1, -1), np.left_shift(x, s), dt)
  check(Tensor(a).reshape(-1, 1) >> Tensor(amounts).reshape(1, -1), np.right_shift(x, s), dt)
  for k in (0, 1, bits - 1, bits, bits + 3):
    check(Tensor(a) << k, np.left_shift(a, dt.np.type(k)), dt)
    check(Tensor(a) >> k, np.right_shift(a, dt.np.type(k)), dt)
  check(1 << Tensor(np.array([0, 3, 5], dt.np)), np.array([1, 8, 32], dt.np), dt)
  check(64 >> Tensor(np.array([0, 3, 5], dt.np)), np.array([64, 8, 2], dt.np), dt)


# ---- unary math ------------------------------------------------------------------------------------------

X = (np.random.default_rng(20).standard_normal(64) * 4).astype(np.float32)
X64 = X.astype(np.float64)

def _np_gelu(x): return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
def _np_sigmoid(x): return 1 / (1 + np.exp(-x))
def _np_softplus(x): return np.logaddexp(0, x)

# (name, numpy function, input, rtol, atol); why each bound holds is said next to it
UNARY = [
  ("exp2", np.exp2, X, 1.0 * F32_ULP, 0),                  # decomposed EXP2: within 0.8 ulp
  ("log2", np.log2, np.abs(X) + 1e-3, 1.0 * F32_ULP, 0),   # decomposed LOG2: within 0.8 ulp
  ("exp", np.exp, X * 4, 2e-5, 0),                         # |x| ulps from rounding x*log2(e) (|x| <= ~50 here)
  ("log", np.log, np.abs(X) + 1e-3, 2 * F32_ULP, 0),       # log2 (0.8 ulp) * ln2 (+0.5 ulp, +0.5 for ln2's rounding)
  ("sqrt", np.sqrt, np.abs(X), 0, 0),                      # correctly rounded: exact
  ("reciprocal", lambda x: 1 / x, X, 0, 0),                # correctly rounded: exact
  ("rsqrt", lambda x: 1 / np.sqrt(x), np.abs(X) + 1e-3, 1.5 * F32_ULP, 0),   # two roundings
  ("sin", np.sin, X, 1.0 * F32_ULP, 1e-45),                # decomposed SIN: within 0.8 ulp
  ("cos", np.cos, X, 0, 2e-6),                             # sin(pi/2 - x): |error| <~ ulp(|x|) (|x| < 16 here)
  ("tan", np.tan, X * 0.1, 2e-6, 2e-6),                    # sin/cos away from the poles (|x| < 1.6)
  ("sigmoid", _np_sigmoid, X, 2e-6, 0),                    # exp2's input rounding, |x| < 16
  ("tanh", np.tanh, X, 0, 1e-6),                           # 2*sigmoid(2x) - 1: absolute error ~1 ulp of 1
  ("gelu", _np_gelu, X, 1e-5, 1e-6),
  ("silu", lambda x: x * _np_sigmoid(x), X, 1e-5, 1e-6),
  ("softplus", _np_softplus, X, 1e-5, 1e-6),
  ("relu", lambda x: np.maximum(x, 0), X, 0, 0),
  ("elu", lambda x: np.where(x > 0, x, np.exp(x) - 1), X, 0, 1e-6),
  ("leaky_relu", lambda x: np.where(x < 0, x * np.float32(0.01), x), X, 0, 0),
  ("abs", np.abs, X, 0, 0), ("neg", np.negative, X, 0, 0), ("square", np.square, X, 0, 0), ("sign", np.sign, X, 0, 0),
  ("erf", np.vectorize(math.erf), X * 0.5, 0, 5e-7),       # Abramowitz-Stegun 7.1.26: |error| < 1.5e-7 (+ float32 rounding)
  ("sinh", np.sinh, X, 2e-5, 1e-6), ("cosh", np.cosh, X, 2e-5, 0),
  ("asinh", np.arcsinh, X, 1e-5, 1e-6), ("acosh", np.arccosh, np.abs(X) + 1, 1e-5, 1e-6),
  ("atanh", np.arctanh, np.tanh(X * 0.3).astype(np.float32), 1e-5, 1e-6),
  ("mish", lambda x: x * np.tanh(_np_softplus(x)), X, 1e-5, 1e-6),
  ("softsign", lambda x: x / (1 + np.abs(x)), X, 1.5 * F32_ULP, 0),
  ("hardswish", lambda x: x * np.clip(x + 3, 0, 6) / 6, X, 1e-6, 1e-7),
  ("hardsigmoid", lambda x: np.clip(x / 6 + 0.5, 0, 1), X, 1e-6, 1e-7),
  ("relu6", lambda x: np.clip(x, 0, 6), X, 0, 0),
  ("hardtanh", lambda x: np.clip(x, -1, 1), X, 0, 0),
  ("swish", lambda x: x * _np_sigmoid(x), X, 1e-5, 1e-6),
  ("quick_gelu", lambda x: x * _np_sigmoid(1.702 * x), X, 1e-5, 1e-6),
  ("celu", lambda x: np.where(x > 0, x, np.exp(x) - 1), X, 0, 1e-6),
  ("selu", lambda x: 1.0507 * np.where(x > 0, x, 1.67326 * (np.exp(x) - 1)), X, 1e-6, 2e-6),
  ("logsigmoid", lambda x: -_np_softplus(-x), X, 1e-5, 1e-6),
]

@pytest.mark.parametrize("name,fn,x,rtol,atol", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float32(name, fn, x, rtol, atol) -> None:
  with np.errstate(all="ignore"): want = fn(x.astype(np.float64))
  check(getattr(Tensor(x), name)(), want, dtypes.float32, rtol=rtol, atol=atol)

@pytest.mark.parametrize("name", ["exp", "log", "sigmoid", "tanh", "gelu", "cos", "sqrt", "exp2"])
def test_unary_float16_rounded_once(name: str) -> None:
  x = (np.abs(X[:32]) + 0.1).astype(np.float16) if name in ("log", "sqrt") else (X[:32] * 0.5).astype(np.float16)
  fn = {"exp": np.exp, "log": np.log, "sigmoid": _np_sigmoid, "tanh": np.tanh, "gelu": _np_gelu, "cos": np.cos, "sqrt": np.sqrt, "exp2": np.exp2}[name]
  # computed in float32 (or decomposed in float32) and rounded once: within 1 ulp of float16 (+ tiny absolute near zeros)
  check(getattr(Tensor(x), name)(), fn(x.astype(np.float64)), dtypes.float16, rtol=F16_ULP, atol=1e-4)

def test_unary_ints_become_float() -> None:
  a = np.array([1, 2, 4, 9], np.int32)
  check(Tensor(a).sqrt(), np.sqrt(a.astype(np.float32)), dtypes.float32)
  check(Tensor(a).log2(), np.float32([0, 1, 2, math.log2(9)]), dtypes.float32, rtol=F32_ULP)
  check(Tensor(a).exp(), np.exp(a), dtypes.float32, rtol=1e-6)
  check(Tensor(np.array([True, False])).sigmoid(), np.float32([_np_sigmoid(1.0), 0.5]), dtypes.float32, rtol=1e-6)
  check(Tensor(a).abs(), a, dtypes.int32); check(Tensor(-a).abs(), a); check(Tensor(a - 3).sign(), np.sign(a - 3), dtypes.int32)
  check(Tensor(np.int32([-2**31, -5, 5])).abs(), np.abs(np.int32([-2**31, -5, 5])))   # wraps like numpy
  check(Tensor(np.uint8([0, 3, 255])).sign(), np.uint8([0, 1, 1]), dtypes.uint8)
  check(Tensor(np.int32([-3, 0, 3])).relu(), np.int32([0, 0, 3]), dtypes.int32)

def test_unary_special_values() -> None:
  # exact at these points: infinities, signed zeros, NaN (and -1, 1 for the ops that are exact everywhere)
  s = np.float32([-INF, -0.0, 0.0, INF, NAN])
  e = np.float32([-INF, -1.0, -0.0, 0.0, 1.0, INF, NAN])
  with np.errstate(all="ignore"):
    for name, fn, v in [("exp", np.exp, s), ("exp2", np.exp2, e), ("log", np.log, e), ("log2", np.log2, e), ("sqrt", np.sqrt, e),
                        ("reciprocal", np.reciprocal, e), ("abs", np.abs, e), ("neg", np.negative, e), ("sign", np.sign, e),
                        ("relu", lambda x: np.maximum(x, 0), e), ("sigmoid", _np_sigmoid, s), ("tanh", np.tanh, s), ("square", np.square, e),
                        ("sin", np.sin, s), ("softplus", _np_softplus, s), ("rsqrt", lambda x: 1 / np.sqrt(x), e), ("cos", np.cos, np.float32([-INF, INF, NAN]))]:
      check_bits(getattr(Tensor(v), name)(), fn(v.astype(np.float64)).astype(np.float32))
  check_bits(Tensor(np.float32([1e-5, -1e-5, 1e-30])).tanh(), np.float32([1e-5, -1e-5, 1e-30]))   # tiny |x|: tanh(x) rounds to x

@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.bfloat16], ids=lambda d: d.name)
def test_rounding_exact(dt: DType) -> None:
  big = 2.0 ** dtypes.finfo(dt)[1]
  v = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 0.0, 0.25, -0.25, 3.75, -3.75, 0.75, -0.75, big - 0.5, -(big - 0.5), big, -big, big + 2,
       2 ** 100 if dt != dtypes.float16 else 60000.0, INF, -INF, NAN, 1e-40 if dt != dtypes.float16 else 6e-8, -6e-8]
  t = Tensor(v, dtype=dt)
  x = t.numpy()   # the values as stored (bfloat16 comes back as float32, exactly)
  for name, fn in [("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc), ("round", np.rint)]:
    check_bits(getattr(t, name)(), fn(x))

def test_rounding_has_zero_gradient() -> None:
  x = Tensor([-1.5, 0.25, 2.75], requires_grad=True)
  y = x.floor() + x.ceil() * 2 + x.round() * 3 + x.trunc() * 4 + x
  assert y.requires_grad
  y.sum().backward()
  check(x.grad, np.float32([1, 1, 1]))   # only the "+ x" term has a gradient
  check(y, np.float32([-2 - 2 - 6 - 4 - 1.5, 0 + 2 + 0 + 0 + 0.25, 2 + 6 + 9 + 8 + 2.75]))

def test_rounding_ints_identity_and_clip() -> None:
  a = np.int32([-2**31, -3, 0, 7, 2**31 - 1])
  for name in ("floor", "ceil", "trunc", "round"): check(getattr(Tensor(a), name)(), a, dtypes.int32)
  check(Tensor(a).clip(-5, 5), np.clip(a, -5, 5), dtypes.int32)
  check(Tensor(a).clamp(min_=0), np.maximum(a, 0))
  check(Tensor([1.0, NAN, -3.0, 9.0]).clip(-1, 2.5), np.float32([1.0, NAN, -1.0, 2.5]))
  with pytest.raises(ValueError, match="min_ and max_"): Tensor([1]).clip()

def test_maximum_minimum() -> None:
  a = np.float32([0.0, -0.0, NAN, 1.0, -INF, 3.0])
  b = np.float32([-0.0, 0.0, 1.0, NAN, 5.0, 2.0])
  check_bits(Tensor(a).maximum(Tensor(b)), np.float32([0.0, 0.0, NAN, NAN, 5.0, 3.0]))    # max(+0, -0) = +0 either way
  check_bits(Tensor(a).minimum(Tensor(b)), np.float32([-0.0, -0.0, NAN, NAN, -INF, 2.0]))  # min(+0, -0) = -0 either way
  i = np.int32([-2**31, 5, 2**31 - 1, -1])
  j = np.int32([5, -2**31, -1, 2**31 - 1])
  check(Tensor(i).minimum(Tensor(j)), np.minimum(i, j)); check(Tensor(i).maximum(Tensor(j)), np.maximum(i, j))
  u = np.uint8([0, 255, 7])
  check(Tensor(u).minimum(3), np.minimum(u, 3), dtypes.uint8)
  check(Tensor([True, False]).minimum(Tensor([True, True])), [True, False], dtypes.bool)
  check(Tensor([1, 5]).maximum(2.5), np.float32([2.5, 5]), dtypes.float32)   # promotes

def test_lerp_std_mean_xor() -> None:
  a, b = data(dtypes.float32, (4,), 60), data(dtypes.float32, (4,), 61)
  check(Tensor(a).lerp(Tensor(b), 0.25), a + (b - a) * np.float32(0.25), dtypes.float32)   # same ops in the same order: exact
  s, m = Tensor(a).std_mean()
  check(s, np.std(a.astype(np.float64), ddof=1), rtol=1e-6); check(m, np.mean(a.astype(np.float64)), rtol=1e-6, atol=1e-7)
  check(Tensor([1, 2, 3]).xor(Tensor([3, 3, 3])), np.int32([2, 1, 0]))

def test_int_division_by_zero_is_reported_on_python() -> None:
  # the caller's UB: the PYTHON device (checked mode) names it instead of returning garbage
  with pytest.raises(RuntimeError, match="division by zero"): (Tensor([1, 2], device="PYTHON") // Tensor([0, 1], device="PYTHON")).numpy()

def test_isnan_isinf_isfinite() -> None:
  v = np.float32([0, -INF, INF, NAN, 1e38, -0.0])
  t = Tensor(v)
  check(t.isnan(), np.isnan(v), dtypes.bool); check(t.isinf(), np.isinf(v)); check(t.isfinite(), np.isfinite(v))
  check(t.isinf(detect_negative=False), v == INF); check(t.isinf(detect_positive=False), v == -INF)
  check(Tensor([1, 2]).isnan(), [False, False], dtypes.bool); check(Tensor([1, 2]).isinf(), [False, False])


# ---- reductions -----------------------------------------------------------------------------------------

SHAPE = (2, 3, 4)
AXES = [(None, False), (0, True), (1, False), (-1, False), (2, True), ((0, 2), False), ((-3, -1), True)]

def _np_axis(axis): return axis if axis is None or isinstance(axis, int) else tuple(axis)

@pytest.mark.parametrize("axis,keepdim", AXES, ids=str)
def test_min_max_float_int_uint_bool(axis, keepdim) -> None:
  for dt in (dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.bool):
    x = data(dt, SHAPE, 30)
    check(Tensor(x).min(axis, keepdim), np.min(x, axis=_np_axis(axis), keepdims=keepdim), dt)
    check(Tensor(x).max(axis, keepdim), np.max(x, axis=_np_axis(axis), keepdims=keepdim), dt)

def test_min_extremes_nan_signed_zero() -> None:
  check(Tensor(np.int32([3, -2**31, 2**31 - 1])).min(), np.int32(-2**31))   # no -x overflow
  check(Tensor(np.int8([-128, 127])).min(), np.int8(-128))
  check(Tensor(np.uint8([200, 3, 255])).min(), np.uint8(3))
  check(Tensor([1.0, NAN, -1.0]).min(), np.float32(NAN))
  check_bits(Tensor([0.0, -0.0]).min(), np.float32(-0.0))

@pytest.mark.parametrize("axis,keepdim", AXES, ids=str)
def test_mean_var_std(axis, keepdim) -> None:
  x = data(dtypes.float32, SHAPE, 31)
  ax = _np_axis(axis)
  # sum * (1/n): a few ulps of the values' magnitude (sum of <= 24 values of |x| < 10)
  check(Tensor(x).mean(axis, keepdim), np.mean(x.astype(np.float64), axis=ax, keepdims=keepdim), dtypes.float32, rtol=1e-5, atol=1e-6)
  check(Tensor(x).var(axis, keepdim), np.var(x.astype(np.float64), axis=ax, keepdims=keepdim, ddof=1), dtypes.float32, rtol=1e-5, atol=1e-6)
  check(Tensor(x).std(axis, keepdim, correction=0), np.std(x.astype(np.float64), axis=ax, keepdims=keepdim), dtypes.float32, rtol=1e-5, atol=1e-6)

def test_mean_dtypes_and_empty() -> None:
  i = data(dtypes.int32, (3, 5), 32)
  check(Tensor(i).mean(1), i.mean(1), dtypes.float32, rtol=1e-6)
  check(Tensor(np.array([True, False, True, True])).mean(), np.float32(0.75), dtypes.float32)
  h = data(dtypes.float16, (4, 50), 33)
  check(Tensor(h).mean(1), h.astype(np.float64).mean(1), dtypes.float16, rtol=F16_ULP)   # accumulated in float32, rounded once
  check(Tensor.zeros(0, 3).mean(0), np.full(3, np.nan, np.float32))
  v, m = Tensor(h).var_mean(1)
  check(v, h.astype(np.float64).var(1, ddof=1), dtypes.float16, rtol=2 * F16_ULP)
  check(m, h.astype(np.float64).mean(1), dtypes.float16, rtol=F16_ULP)

@pytest.mark.parametrize("axis,keepdim", AXES, ids=str)
def test_prod(axis, keepdim) -> None:
  ax = _np_axis(axis)
  f = (data(dtypes.float32, SHAPE, 34) * 0.4).astype(np.float32)
  # pairwise products: a few ulps per factor from numpy's left-to-right order (<= 24 factors)
  check(Tensor(f).prod(axis, keepdim), np.prod(f.astype(np.float64), axis=ax, keepdims=keepdim), dtypes.float32, rtol=2e-6)
  i = data(dtypes.int32, SHAPE, 35)
  check(Tensor(i).prod(axis, keepdim), np.prod(i.astype(np.int64), axis=ax, keepdims=keepdim).astype(np.int32), dtypes.int32)   # wraps

def test_prod_sizes_and_dtypes() -> None:
  for n in (1, 2, 3, 5, 8, 13, 33):
    x = np.arange(1, n + 1, dtype=np.int32) % 7 + 1
    check(Tensor(x).prod(), np.prod(x.astype(np.int64)).astype(np.int32))
  check(Tensor(np.uint8([200, 3])).prod(), np.uint32(600), dtypes.uint32)   # widened like sum
  check(Tensor(np.array([True, True, False])).prod(0), np.int32(0), dtypes.int32)
  check(Tensor.zeros(2, 0).prod(1), np.ones(2, np.float32))
  check(Tensor([2.0, NAN, 0.0]).prod(), np.float32(NAN))
  check(Tensor([[1.5, 2.0]]).prod(acc_dtype=dtypes.float64), np.float64(3.0), dtypes.float64)

@pytest.mark.parametrize("axis,keepdim", [(None, False), (0, False), (1, True), (-1, False), (None, True)], ids=str)
def test_argmax_argmin(axis, keepdim) -> None:
  for dt in (dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.bool):
    x = data(dt, (4, 6), 36) if dt != dtypes.int32 else np.random.default_rng(36).integers(-3, 3, (4, 6)).astype(np.int32)   # ties
    want_max = np.argmax(x, axis=axis, keepdims=keepdim)
    want_min = np.argmin(x, axis=axis, keepdims=keepdim)
    check(Tensor(x).argmax(axis, keepdim), want_max, dtypes.int32)
    check(Tensor(x).argmin(axis, keepdim), want_min, dtypes.int32)

def test_argmax_nan_ties_extremes() -> None:
  v = np.float32([1.0, NAN, 5.0, NAN, 5.0])
  check(Tensor(v).argmax(), np.argmax(v)); check(Tensor(v).argmin(), np.argmin(v))
  w = np.float32([[3, 7, 7, 1], [-INF, -INF, -INF, -INF]])
  check(Tensor(w).argmax(1), np.argmax(w, 1)); check(Tensor(w).argmin(1), np.argmin(w, 1))
  i = np.int32([5, -2**31, 2**31 - 1, -2**31, 2**31 - 1])
  check(Tensor(i).argmax(), np.argmax(i)); check(Tensor(i).argmin(), np.argmin(i))
  check(Tensor(3.0).argmax(), np.int32(0))
  with pytest.raises(ValueError, match="empty"): Tensor.zeros(2, 0).argmax(1)

@pytest.mark.parametrize("axis,keepdim", [(None, False), (0, True), (-1, False), ((0, 1), True)], ids=str)
def test_any_all(axis, keepdim) -> None:
  for x in (data(dtypes.bool, (3, 4), 37), np.float32([[0, NAN, 0, 0], [0, 0, 0, 0], [1, 2, -0.0, 3]]), np.int32([[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 1]])):
    check(Tensor(x).any(axis, keepdim), np.any(x, axis=_np_axis(axis), keepdims=keepdim), dtypes.bool)
    check(Tensor(x).all(axis, keepdim), np.all(x, axis=_np_axis(axis), keepdims=keepdim), dtypes.bool)

def _np_softmax(x, axis):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_log_softmax_logsumexp(axis: int) -> None:
  x = data(dtypes.float32, (3, 5), 38).astype(np.float64)
  t = Tensor(x.astype(np.float32))
  # exp on inputs x - max in [-~20, 0]: ~20 ulps; sums of <= 5 terms
  check(t.softmax(axis), _np_softmax(x, axis), dtypes.float32, rtol=1e-5, atol=1e-7)
  check(t.log_softmax(axis), np.log(_np_softmax(x, axis)), dtypes.float32, rtol=1e-5, atol=1e-6)
  m = x.max(axis, keepdims=True)
  check(t.logsumexp(axis), (np.log(np.exp(x - m).sum(axis, keepdims=True)) + m).squeeze(axis), dtypes.float32, rtol=1e-6, atol=1e-6)
  check(t.logsumexp(axis, keepdim=True), np.log(np.exp(x - m).sum(axis, keepdims=True)) + m, rtol=1e-6, atol=1e-6)

def test_softmax_extremes() -> None:
  check(Tensor([1000.0, 1000.0, -INF]).softmax(), np.float32([0.5, 0.5, 0.0]))
  check(Tensor([[-INF, -INF], [INF, 1.0]]).logsumexp(1), np.float32([-INF, INF]))
  h = Tensor(np.float16([1, 2, 3]))
  check(h.softmax(), _np_softmax(np.float64([1, 2, 3]), 0), dtypes.float16, rtol=F16_ULP)
  check(Tensor([1, 2, 3]).softmax(dtype=dtypes.float32), _np_softmax(np.float64([1, 2, 3]), 0), dtypes.float32, rtol=1e-6)
  check(Tensor([[1.0, 2.0]]).logsumexp(), np.float32(np.logaddexp(1, 2)), rtol=1e-6)

@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_cumulative(axis: int) -> None:
  f = data(dtypes.float32, SHAPE, 39)
  # each output is a sum of <= 4 values, added in index order like numpy: a few ulps
  check(Tensor(f).cumsum(axis), np.cumsum(f.astype(np.float64), axis), dtypes.float32, rtol=1e-6, atol=1e-6)
  i = data(dtypes.int32, SHAPE, 40)
  check(Tensor(i).cumsum(axis), np.cumsum(i, axis).astype(np.int32), dtypes.int32)
  check(Tensor(i).cummax(axis)[0], np.maximum.accumulate(i, axis), dtypes.int32)
  check(Tensor(i % 5 - 2).cumprod(axis), np.cumprod((i % 5 - 2).astype(np.int64), axis).astype(np.int32), dtypes.int32)

def test_cumsum_dtypes() -> None:
  u = np.uint8([200, 100, 7])
  check(Tensor(u).cumsum(), np.uint32([200, 300, 307]), dtypes.uint32)        # widened like sum
  check(Tensor(np.array([True, False, True])).cumsum(), np.int32([1, 1, 2]), dtypes.int32)
  check(Tensor([1.0, INF, NAN, 2.0]).cumsum(), np.float32([1, INF, NAN, NAN]))
  check(Tensor(5.0).cumsum(), np.float32(5.0))
  check(Tensor([3.0, NAN, 1.0]).cummax()[0], np.float32([3, NAN, NAN]))


# ---- errors --------------------------------------------------------------------------------------------------

def test_invalid_axis_errors_name_the_axis() -> None:
  t = Tensor.zeros(2, 3)
  for fn in (lambda: t.sum(2), lambda: t.mean(axis=-3), lambda: t.argmax(5), lambda: t.cumsum(2), lambda: t.softmax(3), lambda: t.min((0, 7)),
             lambda: t.prod(axis=4), lambda: t.var(axis=2), lambda: t.any(9), lambda: t.logsumexp(-4)):
    with pytest.raises(IndexError, match=r"axis -?\d+ is out of range"): fn()

def test_broadcast_mismatch_names_both_shapes() -> None:
  a, b = Tensor.zeros(2, 3), Tensor.zeros(4)
  for op in (operator.add, operator.truediv, operator.lt, operator.eq, operator.pow, operator.floordiv, lambda x, y: x.maximum(y)):
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(1, 4\)"): op(a, b)

def test_wrong_dtype_errors() -> None:
  f, i = Tensor([1.5]), Tensor([1])
  for fn, name in ((lambda: f & i, "bitwise_and"), (lambda: f | 1, "bitwise_or"), (lambda: f ^ f, "bitwise_xor"), (lambda: ~f, "bitwise_not"),
                   (lambda: f << 1, "lshift"), (lambda: i >> f, "rshift"), (lambda: Tensor([True]) << 1, "lshift")):
    with pytest.raises(TypeError, match=f"{name} needs int"): fn()
  with pytest.raises(TypeError, match="bool"): Tensor([True]) ** Tensor([False])
  with pytest.raises(TypeError, match="needs int"): Tensor([True]) // Tensor([True])


# ---- CPU and PYTHON give the same bytes ------------------------------------------------------------------------

def _program(dev: str) -> list[np.ndarray]:
  x = Tensor(data(dtypes.float32, (3, 5), 50), device=dev)
  y = Tensor(np.abs(data(dtypes.float32, (5,), 51)) + 0.5, device=dev)
  h = Tensor(data(dtypes.float16, (3, 5), 52), device=dev)
  i = Tensor(data(dtypes.int32, (3, 5), 53), device=dev)
  j = Tensor(np.int32([3, -7, 1, -1, 5]), device=dev)
  outs = [x / y, x // y, x % y, x ** y, (x * 30).exp(), y.log(), (x * 100).sin(), x.cos(), x.tan(), x.sigmoid(), x.tanh(), x.gelu(), x.softplus(),
          x.erf(), (x * 3).round(), (x * 3).floor(), x.rsqrt(), x.abs().sqrt(), h.exp(), h.tanh(), h / h.sum(), i // j, i % j, i ** 3, i >> j.abs(),
          i << 3, x.softmax(1), x.log_softmax(0), x.logsumexp(1), x.var(0), x.std(1), x.prod(1), x.cumsum(1), x.argmax(1), x.argmin(0), x.mean(),
          x.minimum(y), x.clip(-1, 1), x.maximum(i), (x < y).where(x, i)]
  Tensor.realize_all(*outs)
  assert all(o._buffer().device == dev for o in outs)
  return [o.numpy() for o in outs]

def test_cpu_python_byte_identical() -> None:
  for k, (a, b) in enumerate(zip(_program("CPU"), _program("PYTHON"))):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), f"output {k} differs between CPU and PYTHON"
