"""MathMixin: elementwise math, operators, comparisons, logic and bitwise ops, reductions.

Everything here is built on the core primitives of refgrad/tensor/core.py (`_alu`, `_broadcasted`, `_reduce`,
`sum`, `max`, `where`, `cast`, movement ops), so it runs on every device with the same bits.

Numerics (the graphs below are what every backend runs, so results are bit-identical across devices;
numpy is not the reference, results differ from it by the amounts stated here):
- x / y is x * (1/y): two roundings. float16/bfloat16 math that is more than one basic op (division,
  exp, log, pow, sigmoid, tanh, softmax, mean, var, ...) is computed in float32 and rounded once.
- exp(x) = exp2(x*log2(e)) and log(x) = log2(x)*ln(2) on the decomposed EXP2/LOG2 (each within 0.8 ulp):
  exp has a relative error of about |x| ulps (the rounding of x*log2(e) is amplified), log about 1.5 ulps.
  cos(x) = sin(pi/2 - x), tan = sin/cos: absolute error ~ulp(x) (large near the zeros of cos).
- pow: integral Python exponents up to 16 by repeated squaring; otherwise exp2(e*log2|b|) with the sign
  and the special values of IEEE pow (numpy); relative error about |e*log2(b)| ulps.
- No op here executes undefined behaviour for any input: floor/ceil/trunc/round use float ops only (no
  float->int cast), shifts by out-of-range amounts are defined (numpy's results), signed MIN // -1 wraps.
  The one exception is integer // and % by zero, which is the caller's UB (the PYTHON device reports it).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from refgrad.dtype import DType, dtypes, least_upper_dtype, sum_acc_dtype
from refgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from refgrad.tensor import Tensor

Axis = int | Sequence[int] | None
_HALF = (dtypes.float16, dtypes.bfloat16)
_LOG2E, _LN2 = math.log2(math.e), math.log(2)
_PROD_LEVELS = 3   # halving levels of `prod` fused into one kernel (2**3 loads per output element)
_SCAN_DIRECT = 32  # scans up to this length are one kernel of O(n^2) work; longer ones take log2(n) steps


def least_upper_float(dt: DType) -> DType:
  """dt itself for floats, else the default float (what division, exp, ... of ints return)."""
  return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


def _f(x: Tensor) -> Tensor:
  """x as a float tensor (ints and bool go to the default float, as in tinygrad)."""
  return x.cast(least_upper_float(x.dtype))

def _const_value(u: UOp) -> Any:
  """The value of a constant seen through movement ops (a broadcast scalar), else None."""
  while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.FLIP): u = u.src[0]
  return u.arg if u.op is Ops.CONST else None

def _f32(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
  """fn of float x; float16/bfloat16 are computed in float32 and rounded once at the end."""
  x = _f(x)
  return fn(x.cast(dtypes.float32)).cast(x.dtype) if x.dtype in _HALF else fn(x)


class MathMixin:
  __slots__ = ()

  # ---- helpers -----------------------------------------------------------------------------------
  def _axes(self: Tensor, axis: Axis) -> tuple[int, ...]:
    """Normalized, validated reduction axes (None: all)."""
    if axis is None: return tuple(range(self.ndim))
    return tuple(sorted({self._axis(a) for a in ((axis,) if isinstance(axis, int) else axis)}))

  def _count(self: Tensor, axis: Axis) -> int:
    return math.prod(self.shape[a] for a in self._axes(axis))

  def _iota_along(self: Tensor, axis: int, shape: tuple[int, ...] | None = None) -> Tensor:
    """int32 index along `axis`, expanded to `shape` (self's by default). The IOTA is expanded before any
    arithmetic so that the whole expression fuses into the kernel that uses it."""
    Tensor = type(self)
    shape = self.shape if shape is None else shape
    iota = Tensor(UOp(Ops.IOTA, dtypes.int32, (), shape[axis]), self.device)
    return iota.reshape(tuple(n if i == axis else 1 for i, n in enumerate(shape))).expand(shape)

  def _order_flip(self: Tensor) -> Tensor:
    """An order-reversing bijection of the dtype's values (min = flip(max(flip(x)))): -x for floats,
    ~x for ints (no overflow, unlike -x for the most negative int), not x for bool."""
    if dtypes.is_float(self.dtype): return -self
    return self.bitwise_not()

  def _need_int(self: Tensor, name: str, allow_bool: bool = True) -> None:
    if not (dtypes.is_int(self.dtype) or (allow_bool and self.dtype == dtypes.bool)):
      raise TypeError(f"{name} needs {'int or bool' if allow_bool else 'int'} tensors, got {self.dtype}")

  # ---- division, modulo, power ---------------------------------------------------------------------
  def div(self: Tensor, x: Tensor | Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """self / x. rounding_mode None: true division (ints give the default float), computed as x * (1/y).
    "trunc": rounded toward zero; "floor": rounded down (Python's //). Integer division by zero is UB."""
    a, b = self._broadcasted(x, reverse)
    if rounding_mode not in (None, "trunc", "floor"): raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
    if rounding_mode is not None and (dtypes.is_int(a.dtype) or a.dtype == dtypes.bool):
      return a._int_divmod(b, rounding_mode == "floor")[0]
    d = _f32(a, lambda a32: a32 * _f(b).cast(a32.dtype).reciprocal())
    if rounding_mode == "trunc": return d.trunc()
    if rounding_mode == "floor": return d.floor()
    return d

  def _int_divmod(self: Tensor, b: Tensor, floor: bool) -> tuple[Tensor, Tensor]:
    """(quotient, remainder) of same-shape int tensors: C's (trunc) or Python's (floor). MIN // -1 wraps to MIN."""
    a = self
    a._need_int("integer division", allow_bool=False)
    if _const_value(b.uop) == 0: raise ZeroDivisionError(f"integer division or modulo by zero: the divisor is the constant 0 ({a.dtype!r})")
    if dtypes.is_unsigned(a.dtype): return a._alu(Ops.IDIV, b), a._alu(Ops.MOD, b)
    neg1 = b == -1
    bs = neg1.where(1, b)               # C traps on MIN / -1: divide by 1 there and negate (wraps) instead
    q, r = neg1.where(-a, a._alu(Ops.IDIV, bs)), a._alu(Ops.MOD, bs)
    if not floor: return q, r
    fix = (r != 0) & ((r < 0) != (b < 0))   # inexact and the signs differ: C rounded up
    return fix.where(q - 1, q), fix.where(r + b, r)

  def idiv(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Integer division rounded toward zero (C). Division by zero is UB."""
    a, b = self._broadcasted(x, reverse)
    return a._int_divmod(b, floor=False)[0]

  def floordiv(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """self // x rounded down, as Python and PyTorch (floats: floor(self / x)). Integer division by zero is UB."""
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_int(a.dtype) or a.dtype == dtypes.bool: return a._int_divmod(b, floor=True)[0]
    return a.div(b).floor()

  def mod(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """self % x with the divisor's sign, as Python. Integer modulo by zero is UB. Floats: a - floor(a/b)*b,
    corrected into the divisor's sign (not exact like fmod: errors of a few ulps of a)."""
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_int(a.dtype) or a.dtype == dtypes.bool: return a._int_divmod(b, floor=True)[1]
    def fmod(a: Tensor) -> Tensor:
      bb = b.cast(a.dtype)
      r = a - a.div(bb).floor() * bb
      r = ((r != 0) & ((r < 0) != (bb < 0))).where(r + bb, r)   # floor(a/b) one too large: r has the wrong sign
      return (r.abs() >= bb.abs()).where(r - bb, r)               # one too small (a/b rounded below an integer)
    return _f32(a, fmod)

  def pow(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """self ** x. Floats follow IEEE pow (numpy): a negative base with an integral exponent is exact in sign,
    with a non-integral one NaN; x**0 = 1 and 1**x = 1 for every x (NaN too). Ints: exact with wrap-around;
    a negative exponent gives 1 // self**-x (0 unless self is 1 or -1); a negative Python int exponent raises.
    Gradients are PyTorch's: d/dbase = e * base**(e-1) (0 where e == 0), d/de = out * log(base) (0 where
    base == 0 and e >= 0)."""
    if not reverse and isinstance(x, float) and x == 0.5 and dtypes.is_float(self.dtype): return self.sqrt()   # as PyTorch: (-inf)**0.5 is NaN
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and (isinstance(x, int) or x.is_integer()):
      e = int(x)
      if dtypes.is_int(self.dtype) and isinstance(x, int):   # (a float exponent promotes an int tensor to float)
        if e < 0: raise ValueError(f"pow: integer tensors to the negative power {e} are not allowed (use a float tensor)")
        return self._pow_by_squaring(e)
      if dtypes.is_float(self.dtype) and e == 0:   # 1 everywhere (NaN and inf too), gradient 0
        one = self.detach().isnan().where(1.0, 1.0).cast(self.dtype)
        return self._custom_grad(one, rule=lambda ret, g, b: (None,))
      if dtypes.is_float(self.dtype) and abs(e) <= 16:
        return _f32(self, lambda t: (t.reciprocal() if e < 0 else t)._pow_by_squaring(abs(e)))
    a, b = self._broadcasted(x, reverse)
    if a.dtype == dtypes.bool: raise TypeError("pow is not defined on bool tensors")
    if dtypes.is_int(a.dtype): return a._int_pow(b)
    value = _f32(a, lambda a32: a32._float_pow(b.cast(a32.dtype)))
    def rule(ret: Tensor, g: Tensor, base: Tensor, e: Tensor) -> tuple[Tensor, Tensor]:
      gb = (e == 0).where(0.0, g * e * base.pow(e - 1))
      ge = ((base == 0) & (e >= 0)).where(0.0, g * ret * base.log())
      return gb, ge
    return a._custom_grad(value, b, rule=rule)

  def _pow_by_squaring(self: Tensor, e: int) -> Tensor:
    ret: Tensor | None = None
    base = self
    while e:
      if e & 1: ret = base if ret is None else ret * base
      e >>= 1
      if e: base = base * base
    return ret if ret is not None else self._like(1)

  def _int_pow(self: Tensor, e: Tensor) -> Tensor:
    """Exact (wrapping) integer power, square-and-multiply over the exponent's bits."""
    ret, p = self._like(1), self
    signed = not dtypes.is_unsigned(e.dtype)
    for k in range(e.dtype.bits - signed):
      ret = ((e >> k) & 1).cast(dtypes.bool).where(ret * p, ret)
      if k < e.dtype.bits - signed - 1: p = p * p
    if not signed: return ret
    odd = (e & 1).cast(dtypes.bool)
    neg = (self == 1).where(1, (self == -1).where(odd.where(-1, 1).cast(self.dtype), 0))   # 1 // self**|e| truncated
    return (e < 0).where(neg, ret)

  def _float_pow(self: Tensor, e: Tensor) -> Tensor:
    b = self
    r = (e * b.abs().log2()).exp2()
    e_int = e.trunc() == e                      # False for NaN, True for +-inf
    half = e * 0.5
    e_odd = e_int & (half.trunc() != half)
    r = ((b < 0) & (b > -math.inf) & e_int.logical_not()).where(math.nan, r)   # finite negative base, non-integral exponent
    r = (b._signbit() & e_odd).where(-r, r)
    return ((e == 0) | (b == 1) | ((b == -1) & e.isinf())).where(1.0, r)

  def _signbit(self: Tensor) -> Tensor:
    """True where the sign bit is set (-0.0 included; NaN: False), without a bitcast."""
    return (self < 0) | ((self == 0) & (self.reciprocal() < 0))

  def __truediv__(self: Tensor, x: Any) -> Tensor: return self.div(x)
  def __rtruediv__(self: Tensor, x: Any) -> Tensor: return self.div(x, True)
  def __floordiv__(self: Tensor, x: Any) -> Tensor: return self.floordiv(x)
  def __rfloordiv__(self: Tensor, x: Any) -> Tensor: return self.floordiv(x, True)
  def __mod__(self: Tensor, x: Any) -> Tensor: return self.mod(x)
  def __rmod__(self: Tensor, x: Any) -> Tensor: return self.mod(x, True)
  def __pow__(self: Tensor, x: Any) -> Tensor: return self.pow(x)
  def __rpow__(self: Tensor, x: Any) -> Tensor: return self.pow(x, True)

  # ---- comparisons (return bool tensors; NaN compares unequal, as IEEE) ------------------------------
  def lt(self: Tensor, x: Tensor | Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a._alu(Ops.CMPLT, b)
  def gt(self: Tensor, x: Tensor | Any) -> Tensor:
    a, b = self._broadcasted(x)
    return b._alu(Ops.CMPLT, a)
  def ne(self: Tensor, x: Tensor | Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a._alu(Ops.CMPNE, b)
  def eq(self: Tensor, x: Tensor | Any) -> Tensor: return self.ne(x).logical_not()
  def le(self: Tensor, x: Tensor | Any) -> Tensor:
    # a <= b  <=>  max(a, b) == b: False when either is NaN (max is then NaN), and 0 <= -0 holds
    a, b = self._broadcasted(x)
    return a._alu(Ops.MAX, b).eq(b)
  def ge(self: Tensor, x: Tensor | Any) -> Tensor:
    a, b = self._broadcasted(x)
    return b.le(a)

  def __lt__(self: Tensor, x: Any) -> Tensor: return self.lt(x)
  def __gt__(self: Tensor, x: Any) -> Tensor: return self.gt(x)
  def __le__(self: Tensor, x: Any) -> Tensor: return self.le(x)
  def __ge__(self: Tensor, x: Any) -> Tensor: return self.ge(x)
  def __eq__(self: Tensor, x: Any) -> Tensor: return self.eq(x)
  def __ne__(self: Tensor, x: Any) -> Tensor: return self.ne(x)
  def __hash__(self: Tensor) -> int: return id(self)   # __eq__ builds a tensor; tensors hash by identity

  # ---- logic and bitwise --------------------------------------------------------------------------------
  def _bitwise(self: Tensor, x: Tensor | Any, op: Ops, name: str, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    a._need_int(name)
    return a._alu(op, b)
  def bitwise_and(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor: return self._bitwise(x, Ops.AND, "bitwise_and", reverse)
  def bitwise_or(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor: return self._bitwise(x, Ops.OR, "bitwise_or", reverse)
  def bitwise_xor(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor: return self._bitwise(x, Ops.XOR, "bitwise_xor", reverse)
  def xor(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor: return self.bitwise_xor(x, reverse)
  def bitwise_not(self: Tensor) -> Tensor:
    """~x: all bits flipped for ints, logical not for bool."""
    self._need_int("bitwise_not")
    if self.dtype == dtypes.bool: return self.logical_not()
    return self._alu(Ops.XOR, self._like(dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1))

  def logical_and(self: Tensor, x: Tensor | Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a.cast(dtypes.bool)._alu(Ops.AND, b.cast(dtypes.bool))
  def logical_or(self: Tensor, x: Tensor | Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a.cast(dtypes.bool)._alu(Ops.OR, b.cast(dtypes.bool))
  def logical_xor(self: Tensor, x: Tensor | Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a.cast(dtypes.bool)._alu(Ops.XOR, b.cast(dtypes.bool))

  def _shift(self: Tensor, x: Tensor | Any, op: Ops, reverse: bool) -> Tensor:
    """Shifts defined for every amount, as numpy: amounts outside [0, bits) shift everything out
    (0; right shifts of negative signed values give -1)."""
    name = "lshift" if op is Ops.SHL else "rshift"
    if not reverse and isinstance(x, int) and not isinstance(x, bool):
      self._need_int(name, allow_bool=False)
      if 0 <= x < self.dtype.bits: return self._alu(op, self._like(x))
      if op is Ops.SHL or dtypes.is_unsigned(self.dtype): return self._like(0)
      return self._alu(op, self._like(self.dtype.bits - 1))
    a, b = self._broadcasted(x, reverse)
    a._need_int(name, allow_bool=False)
    ok = (b >= 0) & (b < a.dtype.bits) if not dtypes.is_unsigned(b.dtype) else b < a.dtype.bits
    if op is Ops.SHR and not dtypes.is_unsigned(a.dtype): return a._alu(op, ok.where(b, a.dtype.bits - 1))
    return ok.where(a._alu(op, ok.where(b, 0)), 0)
  def lshift(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor: return self._shift(x, Ops.SHL, reverse)
  def rshift(self: Tensor, x: Tensor | Any, reverse: bool = False) -> Tensor: return self._shift(x, Ops.SHR, reverse)

  def __invert__(self: Tensor) -> Tensor: return self.bitwise_not()
  def __and__(self: Tensor, x: Any) -> Tensor: return self.bitwise_and(x)
  def __rand__(self: Tensor, x: Any) -> Tensor: return self.bitwise_and(x, True)
  def __or__(self: Tensor, x: Any) -> Tensor: return self.bitwise_or(x)
  def __ror__(self: Tensor, x: Any) -> Tensor: return self.bitwise_or(x, True)
  def __xor__(self: Tensor, x: Any) -> Tensor: return self.bitwise_xor(x)
  def __rxor__(self: Tensor, x: Any) -> Tensor: return self.bitwise_xor(x, True)
  def __lshift__(self: Tensor, x: Any) -> Tensor: return self.lshift(x)
  def __rlshift__(self: Tensor, x: Any) -> Tensor: return self.lshift(x, True)
  def __rshift__(self: Tensor, x: Any) -> Tensor: return self.rshift(x)
  def __rrshift__(self: Tensor, x: Any) -> Tensor: return self.rshift(x, True)

  # ---- unary math ---------------------------------------------------------------------------------
  def abs(self: Tensor) -> Tensor:
    """|x|: max(x, -x), exact (abs(-0.0) = +0.0, NaN stays NaN, the most negative int stays as it is)."""
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
    return self._alu(Ops.MAX, -self)
  def __abs__(self: Tensor) -> Tensor: return self.abs()
  def sign(self: Tensor) -> Tensor:
    """-1, 0 or 1 in self's dtype (NaN stays NaN, sign(-0.0) = 0.0 as numpy)."""
    if self.dtype == dtypes.bool: return self
    if dtypes.is_unsigned(self.dtype): return (self != 0).cast(self.dtype)
    return (self < 0).where(-1, (self > 0).where(1, self * 0 + 0))
  def square(self: Tensor) -> Tensor: return self * self
  def reciprocal(self: Tensor) -> Tensor: return _f(self)._alu(Ops.RECIP)
  def sqrt(self: Tensor) -> Tensor: return _f(self)._alu(Ops.SQRT)
  def rsqrt(self: Tensor) -> Tensor: return _f32(self, lambda x: x.sqrt().reciprocal())
  def exp2(self: Tensor) -> Tensor: return _f(self)._alu(Ops.EXP2)
  def log2(self: Tensor) -> Tensor: return _f(self)._alu(Ops.LOG2)
  def exp(self: Tensor) -> Tensor: return _f32(self, lambda x: (x * _LOG2E).exp2())
  def log(self: Tensor) -> Tensor: return _f32(self, lambda x: x.log2() * _LN2)
  def sin(self: Tensor) -> Tensor: return _f(self)._alu(Ops.SIN)
  def cos(self: Tensor) -> Tensor: return _f32(self, lambda x: (math.pi / 2 - x).sin())
  def tan(self: Tensor) -> Tensor: return _f32(self, lambda x: x.sin() / x.cos())
  def sinh(self: Tensor) -> Tensor: return _f32(self, lambda x: (x.exp() - (-x).exp()) * 0.5)
  def cosh(self: Tensor) -> Tensor: return _f32(self, lambda x: (x.exp() + (-x).exp()) * 0.5)
  def asinh(self: Tensor) -> Tensor: return _f32(self, lambda x: (x.abs() + (x * x + 1).sqrt()).log() * x.sign())
  def acosh(self: Tensor) -> Tensor: return _f32(self, lambda x: (x + (x * x - 1).sqrt()).log())
  def atanh(self: Tensor) -> Tensor: return _f32(self, lambda x: ((1 + x) / (1 - x)).log() * 0.5)
  def erf(self: Tensor) -> Tensor:
    """Abramowitz-Stegun 7.1.26 (absolute error < 1.5e-7), as tinygrad."""
    def f(x: Tensor) -> Tensor:
      t = 1.0 / (1.0 + 0.3275911 * x.abs())
      poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
      return x.sign() * (1.0 - poly * (-(x * x)).exp())
    return _f32(self, f)

  def log10(self: Tensor) -> Tensor: return _f32(self, lambda x: x.log2() * math.log10(2))
  def atan(self: Tensor) -> Tensor:
    """Arctangent: reduced to |t| <= tan(pi/8) (atan(x) = pi/2 - atan(1/x), pi/4 + atan((x-1)/(x+1))) and an odd
    polynomial there (Cephes' float32 coefficients: relative error ~2e-7 in every dtype). Gradient 1 / (1 + x^2)."""
    def f(x: Tensor) -> Tensor:
      a = x.abs()
      big, mid = a > 2.414213562373095, a > 0.4142135623730950
      t = big.where(-1 / a, mid.where((a - 1) / (a + 1), a))
      z = t * t
      p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
      r = big.where(math.pi / 2, mid.where(math.pi / 4, 0.0)) + p
      return (x < 0).where(-r, x._signbit().where(x, r))   # odd; atan(+-0) = +-0, NaN stays NaN
    x = _f(self)
    return x._custom_grad(_f32(x, f), rule=lambda y, g, x: (g / (1 + x * x),))
  def asin(self: Tensor) -> Tensor:
    """asin(x) = 2 atan(x / (1 + sqrt((1 - x)(1 + x)))) (well conditioned on [-1, 1]; NaN outside). Gradient 1/sqrt(1 - x^2)."""
    x = _f(self)
    value = _f32(x, lambda x: 2 * (x / (1 + ((1 - x) * (1 + x)).sqrt())).atan())
    return x._custom_grad(value, rule=lambda y, g, x: (g * (1 - x * x).rsqrt(),))   # PyTorch's formula
  def acos(self: Tensor) -> Tensor:
    """acos(x) = 2 atan(sqrt((1 - x) / (1 + x))) (accurate near 1 where acos is small; NaN outside [-1, 1])."""
    x = _f(self)
    value = _f32(x, lambda x: 2 * ((1 - x) / (1 + x)).sqrt().atan())
    return x._custom_grad(value, rule=lambda y, g, x: (-g * (1 - x * x).rsqrt(),))

  def copysign(self: Tensor, other: Tensor | Any) -> Tensor:
    """|self| with the sign bit of other (exact, -0.0 included). Gradient as PyTorch: result / self, 0 at self == 0."""
    a, b = _f(self)._broadcasted(other)
    ut = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[a.dtype.itemsize]
    sign = 1 << (a.dtype.bits - 1)
    bits = (a.detach().bitcast(ut) & (sign - 1)) | (b.detach().bitcast(ut) & sign)
    return a._custom_grad(bits.bitcast(a.dtype), b, rule=lambda y, g, x, o: ((x == 0).where(0.0, g * (y / x)), None))
  def fmod(self: Tensor, other: Tensor | Any) -> Tensor:
    """C's fmod: the remainder with the dividend's sign (ints: C's %; division by zero is UB). Floats are built on
    `mod` (errors of a few ulps of self). Gradient: 1 for self, -trunc(self / other) for other."""
    a, b = self._broadcasted(other)
    if dtypes.is_int(a.dtype) or a.dtype == dtypes.bool: return a._int_divmod(b, floor=False)[1]
    r = a.mod(b)
    value = ((r != 0) & (r._signbit() != a._signbit())).where(r - b, r)
    value = ((value == 0) & a._signbit()).where(-0.0, value)   # the dividend's sign, zeros included
    return a._custom_grad(value, b, rule=lambda y, g, x, o: (g, -g * x.div(o).trunc()))
  def logaddexp(self: Tensor, other: Tensor | Any) -> Tensor:
    """log(exp(self) + exp(other)) without overflow: max + log(1 + exp(min - max)); +-inf handled as PyTorch."""
    a, b = _f(self)._broadcasted(other)
    def f(x: Tensor, y: Tensor) -> Tensor:
      m, n = x.maximum(y), x.minimum(y)
      return m.isinf().where(m, m + (1 + (n - m).exp()).log())
    value = _f32(a, lambda x: f(x, b.cast(x.dtype)))
    return a._custom_grad(value, b, rule=lambda r, g, x, y: (g / (1 + (y - x).exp()), g / (1 + (x - y).exp())))   # PyTorch's form
  def isclose(self: Tensor, other: Tensor | Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other| (PyTorch, numpy); equal infinities are close, NaNs only with equal_nan."""
    a, b = self._broadcasted(other)
    if not dtypes.is_float(a.dtype): return a == b if rtol == 0 and atol == 0 else _f(a).isclose(_f(b), rtol, atol, equal_nan)
    close = (a == b) | (((a - b).abs() <= atol + rtol * b.abs()) & (a.isinf() | b.isinf()).logical_not())   # inf only equals itself
    return (close | (a.isnan() & b.isnan())) if equal_nan else close
  def allclose(self: Tensor, other: Tensor | Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element is close (see isclose): a Python bool, so it realizes."""
    return bool(self.isclose(other, rtol, atol, equal_nan).all().item())
  def softmin(self: Tensor, axis: int = -1, dtype: DType | None = None) -> Tensor: return (-self).softmax(axis, dtype)
  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """self / max(||self||_p along dim, eps) (PyTorch's F.normalize)."""
    norm = self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p) if p != 2.0 else self.square().sum(dim, keepdim=True).sqrt()
    return self / norm.maximum(eps)

  # ---- activations --------------------------------------------------------------------------------
  def relu(self: Tensor) -> Tensor:
    """max(x, 0), NaN kept; the gradient is 0 at 0."""
    return self.le(0).where(0, self)
  def relu6(self: Tensor) -> Tensor: return self.relu().minimum(6)
  def sigmoid(self: Tensor) -> Tensor:
    """1 / (1 + exp(-x)); gradient y * (1 - y) from the output (0, not 0 * inf, where exp overflows)."""
    x = _f(self)
    value = _f32(x, lambda x: (1 + (x * -_LOG2E).exp2()).reciprocal())
    return x._custom_grad(value, rule=lambda y, g, x: (g * y * (1 - y),))
  def tanh(self: Tensor) -> Tensor:
    """2*sigmoid(2x) - 1 (as tinygrad: absolute error ~1 ulp of 1), and x itself where |x| is so small that x
    is tanh(x) correctly rounded (this keeps tanh(-0.0) = -0.0 and tiny inputs exact). Gradient 1 - y^2."""
    x = _f(self)
    value = _f32(x, lambda x: (x.abs() < 2.0 ** -(dtypes.finfo(x.dtype)[1] // 2 + 1)).where(x, 2.0 * (2.0 * x).sigmoid() - 1.0))
    return x._custom_grad(value, rule=lambda y, g, x: (g * (1 - y * y),))
  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor: return (alpha * _f(self) + beta).clip(0, 1)
  def hardswish(self: Tensor) -> Tensor: return _f(self) * (_f(self) + 3).relu6() * (1 / 6)
  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor: return self.clip(min_val, max_val)
  def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
    """GELU. approximate="tanh" (the default, as tinygrad) or "none" (x * Phi(x) with erf, PyTorch's default)."""
    if approximate == "none": return _f32(self, lambda x: 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf()))
    if approximate != "tanh": raise ValueError(f"gelu: approximate must be 'tanh' or 'none', not {approximate!r}")
    return _f32(self, lambda x: 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh()))
  def quick_gelu(self: Tensor) -> Tensor: return _f32(self, lambda x: x * (x * 1.702).sigmoid())
  def silu(self: Tensor) -> Tensor: return _f32(self, lambda x: x * x.sigmoid())
  def swish(self: Tensor) -> Tensor: return self.silu()
  def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta*x)) / beta, in the overflow-free form relu(bx) + log(1 + exp(-|bx|)); gradient sigmoid(bx)
    (the form's own derivative is wrong at 0, where relu and abs have kinks)."""
    x = _f(self)
    value = _f32(x, lambda x: ((x * beta).relu() + (1 + (-(x * beta).abs()).exp()).log()) * (1 / beta))
    return x._custom_grad(value, rule=lambda y, g, x: (g * (x * beta).sigmoid(),))
  def logsigmoid(self: Tensor) -> Tensor: return -(-self).softplus()
  def mish(self: Tensor) -> Tensor: return _f32(self, lambda x: x * x.softplus().tanh())
  def softsign(self: Tensor) -> Tensor: return _f32(self, lambda x: x / (1 + x.abs()))
  def elu(self: Tensor, alpha: float = 1.0) -> Tensor: return _f32(self, lambda x: (x > 0).where(x, alpha * (x.exp() - 1)))
  def celu(self: Tensor, alpha: float = 1.0) -> Tensor: return _f32(self, lambda x: (x > 0).where(x, alpha * ((x / alpha).exp() - 1)))
  def selu(self: Tensor, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor: return gamma * self.elu(alpha)
  def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor: return (self < 0).where(self * neg_slope, self)

  # ---- elementwise binary / clipping ----------------------------------------------------------------
  def maximum(self: Tensor, x: Tensor | Any) -> Tensor:
    """Elementwise max (NaN if either is NaN; maximum(0.0, -0.0) = 0.0)."""
    a, b = self._broadcasted(x)
    return a._alu(Ops.MAX, b)
  def minimum(self: Tensor, x: Tensor | Any) -> Tensor:
    """Elementwise min (NaN if either is NaN; minimum(0.0, -0.0) = -0.0)."""
    a, b = self._broadcasted(x)
    return a._order_flip()._alu(Ops.MAX, b._order_flip())._order_flip()
  def clip(self: Tensor, min_: Tensor | Any = None, max_: Tensor | Any = None) -> Tensor:
    """min(max(x, min_), max_) (max_ wins where min_ > max_). Gradient as PyTorch: x gets it inside [min_, max_],
    bounds included; a tensor bound gets it where it is the result."""
    Tensor = type(self)
    if min_ is None and max_ is None: raise ValueError("clip: at least one of min_ and max_ must be given")
    if not dtypes.is_float(self.dtype) and self.dtype != dtypes.bool:   # int bounds past the dtype's range: its own min/max
      lim = lambda v: min(max(v, dtypes.min(self.dtype)), dtypes.max(self.dtype)) if isinstance(v, int) and not isinstance(v, bool) else v
      min_, max_ = lim(min_), lim(max_)
    ret = self.maximum(min_) if min_ is not None else self
    ret = ret.minimum(max_) if max_ is not None else ret
    if not dtypes.is_float(ret.dtype): return ret
    lo = min_ if isinstance(min_, Tensor) else None
    hi = max_ if isinstance(max_, Tensor) else None
    x = self.cast(ret.dtype)._expand_to(ret.shape)
    bounds = [b.cast(ret.dtype)._expand_to(ret.shape) for b in (lo, hi) if b is not None]
    def rule(y: Tensor, g: Tensor, x: Tensor, *bs: Tensor) -> tuple[Tensor | None, ...]:
      it = iter(bs)
      b_lo = next(it) if lo is not None else min_
      b_hi = next(it) if hi is not None else max_
      no = x._like(False, dtypes.bool)
      to_hi = no if max_ is None else (x > b_hi) | (no if min_ is None else b_lo > b_hi)   # the result is max_
      to_lo = no if min_ is None else (x < b_lo) & to_hi.logical_not()                    # the result is min_
      out = [(to_hi | to_lo | x.isnan()).where(0.0, g)]
      if lo is not None: out.append(to_lo.where(g, 0.0))
      if hi is not None: out.append(to_hi.where(g, 0.0))
      return tuple(out)
    return x._custom_grad(ret, *bounds, rule=rule)
  def clamp(self: Tensor, min_: Tensor | Any = None, max_: Tensor | Any = None) -> Tensor: return self.clip(min_, max_)
  def lerp(self: Tensor, end: Tensor | Any, weight: Tensor | Any) -> Tensor: return self + (end - self) * weight

  # ---- rounding (float ops only: no float->int cast, so no UB for NaN/inf/huge values) ----------------
  # The results are piecewise constant: their gradient is 0 (a custom rule: the graph computing them has nonzero
  # derivatives, e.g. (a + big) - big), whether or not x needed gradients when they were built.
  def _round_op(self: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    return self._custom_grad(fn(self.detach()), rule=lambda y, g, x: (None,))

  def _round_parts(self: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(|x|, |x| rounded to the nearest integer (ties to even), where that rounding applies)."""
    big = 2.0 ** dtypes.finfo(self.dtype)[1]   # from here on every float is an integer
    a = self.abs()
    r = (a + big) - big                        # exact: a + big lies in [big, 2*big), where the spacing is 1
    return a, r, (a < big) & (a != 0)          # outside: x itself (0, -0, huge, inf, NaN)
  def _with_sign(self: Tensor, mag: Tensor, apply: Tensor) -> Tensor:
    return apply.where((self < 0).where(-mag, mag), self)
  def _round(self: Tensor) -> Tensor:
    _, r, apply = self._round_parts()
    return self._with_sign(r, apply)
  def _trunc(self: Tensor) -> Tensor:
    a, r, apply = self._round_parts()
    return self._with_sign((r > a).where(r - 1, r), apply)
  def round(self: Tensor) -> Tensor:
    """Round half to even (as numpy; -0.4 -> -0.0). Ints and bool: unchanged."""
    return self._round_op(lambda x: x._round())
  def trunc(self: Tensor) -> Tensor:
    """Round toward zero."""
    return self._round_op(lambda x: x._trunc())
  def floor(self: Tensor) -> Tensor:
    def f(x: Tensor) -> Tensor:
      t = x._trunc()
      return (t > x).where(t - 1, t)
    return self._round_op(f)
  def ceil(self: Tensor) -> Tensor:
    def f(x: Tensor) -> Tensor:
      t = x._trunc()
      return (t < x).where(t + 1, t)
    return self._round_op(f)

  # ---- classification ------------------------------------------------------------------------------
  def isnan(self: Tensor) -> Tensor:
    return self != self if dtypes.is_float(self.dtype) else self._like(False, dtypes.bool)
  def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    if not dtypes.is_float(self.dtype): return self._like(False, dtypes.bool)
    return ((self == math.inf) & detect_positive) | ((self == -math.inf) & detect_negative)
  def isfinite(self: Tensor) -> Tensor: return (self.isinf() | self.isnan()).logical_not()

  # ---- reductions ---------------------------------------------------------------------------------
  def min(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """Smallest value (NaN if any is NaN); min = flip(max(flip(x))) with an order-reversing flip. An empty reduced axis raises, as max."""
    return self._nonempty("min", axis)._min(axis, keepdim)
  def _min(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """min without the empty-axis check, for internal reductions whose axis may be empty (they mask the result)."""
    return self._order_flip()._reduce(Ops.MAX, axis, keepdim)._order_flip()

  def mean(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """Mean over axis: sum * (1/n) (floats keep their dtype, accumulating float16/bfloat16 in float32;
    ints and bool give the default float). An empty reduction gives NaN."""
    n = self._count(axis)
    return _f32(self, lambda x: x.sum(axis, keepdim).div(n))

  def var(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Variance: sum((x - mean)^2) / max(0, n - correction) (correction=1: Bessel's, as tinygrad)."""
    n = self._count(axis)
    return _f32(self, lambda x: (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim).div(max(0, n - correction)))
  def std(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    return self.var(axis, keepdim, correction).sqrt()
  def var_mean(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  def prod(self: Tensor, axis: Axis = None, keepdim: bool = False, acc_dtype: DType | None = None, dtype: DType | str | None = None) -> Tensor:
    """Product over axis, in acc_dtype (default as sum: small ints widen to int32/uint32; ints wrap).
    There is no MUL reduction: the reduced axes are flattened, padded with 1s to a power of two and halved
    (x[:h] * x[h:]) until one element is left, a kernel every few levels. Floats are multiplied pairwise,
    not left to right as numpy, so the last bits can differ."""
    if dtype is not None: return self.cast(dtypes.from_name(dtype) if isinstance(dtype, str) else dtype).prod(axis, keepdim, acc_dtype)
    axes = self._axes(axis)
    if self.ndim == 0: return self.cast(acc_dtype or sum_acc_dtype(self.dtype))
    x = self.cast(acc_dtype or sum_acc_dtype(self.dtype))
    keep = [i for i in range(self.ndim) if i not in axes]
    out_shape = tuple(1 if i in axes else n for i, n in enumerate(self.shape)) if keepdim else tuple(self.shape[i] for i in keep)
    n = math.prod(self.shape[a] for a in axes)
    if n == 0: return x._like(1, shape=out_shape)
    x = x.permute(*keep, *axes).reshape(*(self.shape[i] for i in keep), n)
    size = 1 << (n - 1).bit_length()
    if size != n: x = x.pad(((0, 0),) * (x.ndim - 1) + ((0, size - n),), value=1)
    level = 0
    while size > 1:
      size //= 2
      rest = tuple((0, s) for s in x.shape[:-1])
      x = x.shrink((*rest, (0, size))) * x.shrink((*rest, (size, 2 * size)))
      level += 1
      if size > 1 and level % _PROD_LEVELS == 0: x = x.contiguous()
    return x.reshape(out_shape)

  def any(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)   # empty: False
  def all(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    return self.cast(dtypes.bool).logical_not()._reduce(Ops.MAX, axis, keepdim).logical_not()   # empty: True

  def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index (int32) of the first largest value along axis (None: of the flattened tensor); a NaN counts as the
    largest (numpy). Built as tinygrad: compare with the max, then the max of (n - index) over the matches."""
    if axis is None:
      ret = self.reshape(-1).argmax(0)
      return ret.reshape((1,) * self.ndim) if keepdim else ret
    ax = self._axis(axis)
    if self.ndim == 0: return self._like(0, dtypes.int32)
    n = self.shape[ax]
    if n == 0: raise ValueError(f"argmax: axis {axis} of shape {self.shape} is empty")
    hit = (self == self.max(ax, keepdim=True)) | self.isnan()
    first = hit.where(n - self._iota_along(ax), 0).max(ax, keepdim)
    return n - first
  def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index (int32) of the first smallest value (a NaN counts as the smallest, numpy)."""
    return self._order_flip().argmax(axis, keepdim)

  def softmax(self: Tensor, axis: int = -1, dtype: DType | None = None) -> Tensor:
    x = self.cast(dtype) if dtype is not None else self
    def f(x: Tensor) -> Tensor:
      e = (x - x._reduce(Ops.MAX, axis, True).detach()).exp()   # an empty axis gives an empty result
      return e.div(e.sum(axis, keepdim=True))
    return _f32(x, f)
  def log_softmax(self: Tensor, axis: int = -1, dtype: DType | None = None) -> Tensor:
    x = self.cast(dtype) if dtype is not None else self
    def f(x: Tensor) -> Tensor:
      m = x - x._reduce(Ops.MAX, axis, True).detach()
      return m - m.exp().sum(axis, keepdim=True).log()
    return _f32(x, f)
  def logsumexp(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) without overflow; rows of -inf give -inf, a +inf gives +inf."""
    def f(x: Tensor) -> Tensor:
      m = x._reduce(Ops.MAX, axis, True).detach()   # an empty axis: -inf, and the result is log(0) = -inf
      m = m.isinf().where(0, m)
      ret = (x - m).exp().sum(axis, keepdim=True).log() + m
      return ret if keepdim else ret.reshape(tuple(n for i, n in enumerate(x.shape) if i not in x._axes(axis)))
    return _f32(self, f)

  def _cumulative(self: Tensor, axis: int, fn: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """fn(mask, X) over a new last axis, X[..., i, j] = x[..., j] and mask = (j <= i): O(n^2) work, one kernel."""
    ax = self._axis(axis)
    if self.ndim == 0: return fn(self._like(True, dtypes.bool, (1, 1)), self.reshape(1, 1)).reshape(())
    order = [i for i in range(self.ndim) if i != ax] + [ax]
    x = self.permute(*order)
    n = x.shape[-1]
    full = (*x.shape[:-1], n, n)
    xs = x.reshape(*x.shape[:-1], 1, n).expand(full)
    mask = (self._iota_along(len(full) - 2, full) < self._iota_along(len(full) - 1, full)).logical_not()
    ret = fn(mask, xs)
    inv = [order.index(i) for i in range(self.ndim)]
    return ret.permute(*inv)
  def _scan(self: Tensor, axis: int, xs: tuple[Tensor, ...], ids: tuple[Any, ...],
            combine: Callable[[tuple[Tensor, ...], tuple[Tensor, ...]], tuple[Tensor, ...]]) -> tuple[Tensor, ...]:
    """Inclusive scan of the tensors xs (self's shape) along axis with an associative combine(earlier, later), in
    ceil(log2 n) steps (Hillis-Steele: step k combines each element with the one 2^k before it, identities `ids`
    shifted in): O(n log n) work, one kernel per step. Floats are combined in a tree order, not left to right."""
    ax = self._axis(axis)
    if self.ndim == 0: return xs
    order = [i for i in range(self.ndim) if i != ax] + [ax]
    ys = tuple(x.permute(*order) for x in xs)
    n = ys[0].shape[-1]
    k = 1
    while k < n:
      keep = ((0, 0),) * (ys[0].ndim - 1)
      bounds = tuple(None for _ in keep) + ((0, n),)
      shifted = tuple(y.pad(keep + ((k, 0),), value=i).shrink(bounds) for y, i in zip(ys, ids))
      ys = combine(shifted, ys)
      k *= 2
      if k < n: ys = tuple(y.contiguous() for y in ys)
    inv = [order.index(i) for i in range(self.ndim)]
    return tuple(y.permute(*inv) for y in ys)

  def cumsum(self: Tensor, axis: int = 0) -> Tensor:
    """Running sum along axis (accumulated as sum: small ints widen to int32, float16/bfloat16 in float32)."""
    x = self.cast(sum_acc_dtype(self.dtype))
    if x.dtype in _HALF: return x.cast(dtypes.float32).cumsum(axis).cast(x.dtype)
    if self.ndim and self.shape[self._axis(axis)] <= _SCAN_DIRECT: return x._cumulative(axis, lambda m, x: m.where(x, 0).sum(-1))
    return x._scan(axis, (x,), (0,), lambda a, b: (a[0] + b[0],))[0]
  def cumprod(self: Tensor, axis: int = 0) -> Tensor:
    x = self.cast(sum_acc_dtype(self.dtype))
    if self.numel() == 0: return x * 1   # nothing to multiply (and the gradient stays connected, as PyTorch's empty one)
    if x.dtype in _HALF: return x.cast(dtypes.float32).cumprod(axis).cast(x.dtype)
    if self.ndim and self.shape[self._axis(axis)] <= _SCAN_DIRECT: return x._cumulative(axis, lambda m, x: m.where(x, 1).prod(-1))
    return x._scan(axis, (x,), (1,), lambda a, b: (a[0] * b[0],))[0]
  def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """(running maximum, int32 index where it was attained) along axis, as PyTorch: ties and NaNs take the later index,
    a NaN stays the maximum."""
    if self.ndim == 0: return self, self._like(0, dtypes.int32)
    ax = self._axis(axis)
    idx = self._iota_along(ax)
    def combine(a: tuple[Tensor, ...], b: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
      take = b[0].isnan() | (a[0].isnan().logical_not() & (b[0] >= a[0]))
      return take.where(b[0], a[0]), take.where(b[1], a[1])
    v, i = self._scan(ax, (self, idx), (dtypes.min(self.dtype), 0), combine)
    return v, i
  def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """(running minimum, index): cummax of the order-reversed values (ties take the later index)."""
    v, i = self._order_flip().cummax(axis)
    return v._order_flip(), i
  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along axis without overflow: a logsumexp per prefix (short axes) or a scan of logaddexp."""
    if self.ndim and self.shape[self._axis(axis)] <= _SCAN_DIRECT:
      return _f32(self, lambda x: x._cumulative(axis, lambda m, x: m.where(x, -math.inf).logsumexp(-1)))
    return _f32(self, lambda x: x._scan(axis, (x,), (-math.inf,), lambda a, b: (a[0].logaddexp(b[0]),))[0])

  # ---- small helpers the math above needs (full_like/zeros_like/ones_like also live in CreationMixin) ----
  def _like(self: Tensor, value: Any, dtype: DType | None = None, shape: tuple[int, ...] | None = None) -> Tensor:
    Tensor = type(self)
    return Tensor.full(self.shape if shape is None else shape, value, dtype or self.dtype, self.device)
