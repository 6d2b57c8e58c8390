"""CreationMixin: linspace, eye, *_like, triangular masks, and the random number generator.

Random numbers are counter-based: threefry2x32 with 20 rounds (Salmon et al., "Parallel random numbers:
as easy as 1, 2, 3", the Random123 / JAX generator), computed with uint32 tensor ops only (ADD wraps, XOR,
OR, shifts by constants in (0, 32)). The key is the seed; the counter of value i of a call is
`offset + i` (64 bits: low word, high word), where `offset` is a process-wide count of the values drawn
since `manual_seed`, so consecutive calls never reuse a counter. The key and the offset travel in a small
uint32 buffer, so every call with the same shape and dtype runs the same compiled kernel.
Integer ops are exact everywhere, so the same seed and the same sequence of calls give the same bits on
every device.

From one counter block (x0, x1) of 64 random bits:
- float32: the top 23 bits of x0 as the mantissa of a float in [1, 2), minus 1: multiples of 2**-23 in [0, 1).
- float16 / bfloat16: the same with only the top 10 / 7 bits (the dtype's mantissa), then cast (exact).
- float64: 52 bits (32 of x0, the top 20 of x1) the same way.
- randint: floor(x0 * (high - low) / 2**32) + low in 64-bit integers (bias < (high - low) / 2**32).
- randn: Box-Muller, z = cos(2*pi*u1) * sqrt(-2*log(1 - u2)) from two float32 (float64 for float64) uniforms,
  on the decomposed transcendentals, so it is bit-identical across devices too.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, ClassVar

from refgrad.dtype import DType, dtypes
from refgrad.tensor.args import _shape_arg
from refgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from refgrad.tensor import Tensor

_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)   # threefry2x32 rotation constants
_PARITY = 0x1BD11BDA                            # threefry key-schedule parity constant
_M32 = 0xFFFFFFFF


def _dtype(d: DType | str | None, default: DType) -> DType:
  if d is None: return default
  return dtypes.from_name(d) if isinstance(d, str) else d

def _shape(shape: tuple[Any, ...]) -> tuple[int, ...]: return _shape_arg(shape)

def _finish(t: Tensor, requires_grad: bool | None) -> Tensor:
  """A random tensor that will be a parameter is computed now, so it is a leaf buffer like any other."""
  if requires_grad:
    t.realize()
    t.requires_grad_(True)
  return t


def threefry2x32(key: tuple[Tensor, Tensor], ctr: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
  """threefry2x32-20 of uint32 tensors: key (k0, k1), counter (c0, c1) -> (x0, x1). Keys broadcast."""
  k0, k1 = key
  ks = (k0, k1, k0 ^ k1 ^ _PARITY)
  x0, x1 = ctr[0] + ks[0], ctr[1] + ks[1]
  for i in range(20):
    r = _ROTATIONS[i % 8]
    x0 = x0 + x1
    x1 = (x1 << r) | (x1 >> (32 - r))
    x1 = x1 ^ x0
    if i % 4 == 3:   # key injection every 4 rounds
      j = (i + 1) // 4
      x0 = x0 + ks[j % 3]
      x1 = x1 + ks[(j + 1) % 3] + j
  return x0, x1


class CreationMixin:
  __slots__ = ()
  _seed: ClassVar[int] = int(time.time())
  _rng_counter: ClassVar[int] = 0   # values drawn since the last manual_seed

  # ---- deterministic creation ------------------------------------------------------------------------
  @classmethod
  def linspace(cls, start: int | float, stop: int | float, steps: int, dtype: DType | str | None = None, device: str | None = None,
               requires_grad: bool | None = None) -> Tensor:
    """`steps` evenly spaced values from start to stop (both included): start + i * step, the last one
    exactly stop (as numpy). Int dtypes: computed in float64 and rounded down (as numpy 2)."""
    Tensor = cls
    dt = _dtype(dtype, dtypes.default_float)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0: raise ValueError(f"linspace: steps must be an int >= 0, got {steps!r}")
    if dt == dtypes.bool: raise ValueError("linspace: bool dtype is not supported")
    if dtypes.is_int(dt) and not all(math.isfinite(v) and dtypes.min(dt) <= v < dtypes.max(dt) + 1 for v in (start, stop)):
      raise ValueError(f"linspace: start {start} and stop {stop} must lie in the range of {dt}")
    ft = dt if dtypes.is_float(dt) else dtypes.float64
    if steps <= 1: return Tensor.full((steps,), math.floor(start) if dtypes.is_int(dt) else start, dt, device, requires_grad)
    i = Tensor(UOp(Ops.IOTA, dtypes.int32, (), steps), device)
    y = i.cast(ft) * ((stop - start) / (steps - 1)) + start
    ret = (i == steps - 1).where(Tensor.full((), stop, ft, device), y)
    ret = (ret.floor() if dtypes.is_int(dt) else ret).cast(dt)
    return _finish(ret, requires_grad)

  @classmethod
  def eye(cls, n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """n x m (default n x n) identity matrix."""
    Tensor = cls
    m = n if m is None else m
    for name, v in (("n", n), ("m", m)):
      if not isinstance(v, int) or isinstance(v, bool) or v < 0: raise ValueError(f"eye: {name} must be an int >= 0, got {v!r}")
    z = Tensor.zeros(n, m, dtype=dtypes.bool, device=device)
    ret = (z._iota_along(0) == z._iota_along(1)).cast(_dtype(dtype, dtypes.default_float))
    return _finish(ret, requires_grad)

  def full_like(self: Tensor, fill_value: Any, dtype: DType | str | None = None, device: str | None = None,
                requires_grad: bool | None = None) -> Tensor:
    Tensor = type(self)
    return Tensor.full(self.shape, fill_value, _dtype(dtype, self.dtype), device or self.device, requires_grad)
  def zeros_like(self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    return self.full_like(0, dtype, device, requires_grad)
  def ones_like(self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    return self.full_like(1, dtype, device, requires_grad)
  def empty_like(self: Tensor, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    Tensor = type(self)
    return Tensor.empty(self.shape, dtype=_dtype(dtype, self.dtype), device=device or self.device)

  def _tri_mask(self: Tensor, diagonal: int, upper: bool) -> Tensor:
    if self.ndim < 2: raise ValueError(f"{'triu' if upper else 'tril'} needs at least 2 dimensions, got shape {self.shape}")
    r, c = self.shape[-2:]
    d = max(-r, min(c, diagonal))   # beyond these every element is in or out: no int32 overflow in i + d
    i, j = self._iota_along(self.ndim - 2), self._iota_along(self.ndim - 1)
    return (j >= i + d) if upper else (j <= i + d)
  def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    """Elements on and above the `diagonal`-th diagonal (0: main, > 0 above), zeros elsewhere."""
    mask = self._tri_mask(diagonal, True)
    if diagonal <= 1 - self.shape[-2]: return self          # everything kept / nothing kept: no kernel needed
    return self.zeros_like() if diagonal >= self.shape[-1] else mask.where(self, self._like(0))   # keeps self's dtype (bool too)
  def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    """Elements on and below the `diagonal`-th diagonal, zeros elsewhere."""
    mask = self._tri_mask(diagonal, False)
    if diagonal >= self.shape[-1] - 1: return self
    return self.zeros_like() if diagonal <= -self.shape[-2] else mask.where(self, self._like(0))

  # ---- random numbers ------------------------------------------------------------------------------
  @classmethod
  def manual_seed(cls, seed: int = 0) -> None:
    """Seed the generator and restart its counter: the same calls then give the same numbers."""
    Tensor = cls
    if not isinstance(seed, int) or isinstance(seed, bool): raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    Tensor._seed, Tensor._rng_counter = seed, 0

  @classmethod
  def _random_bits(cls, shape: tuple[int, ...], device: str | None) -> tuple[Tensor, Tensor]:
    """Two uint32 tensors of `shape`: the threefry block of each element's counter. Advances the counter."""
    Tensor = cls
    n = math.prod(shape)
    off, seed = Tensor._rng_counter, Tensor._seed % 2**64
    if off + n >= 2**64: raise OverflowError("random number counter exhausted: call Tensor.manual_seed")
    Tensor._rng_counter = off + n
    state = Tensor([seed & _M32, seed >> 32, off & _M32, off >> 32], device=device, dtype=dtypes.uint32)
    k0, k1, off_lo, off_hi = (state.shrink(((i, i + 1),)).reshape(()) for i in range(4))
    # counter = offset + i as two words; every operand is broadcast before it is combined, so one kernel does it all
    c_lo = Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), device).cast(dtypes.uint32) + off_lo
    c_hi = (c_lo < off_lo).cast(dtypes.uint32) + off_hi
    k0e, k1e = k0._expand_to((n,)), k1._expand_to((n,))
    x0, x1 = threefry2x32((k0e, k1e), (c_lo, c_hi))
    return x0.reshape(shape), x1.reshape(shape)

  @classmethod
  def rand(cls, *shape: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform random values in [0, 1) (see the module docstring for how they are made)."""
    Tensor = cls
    shp, dt = _shape(shape), _dtype(dtype, dtypes.default_float)
    if not dtypes.is_float(dt): raise TypeError(f"rand: dtype must be a float, got {dt} (use randint for ints)")
    if math.prod(shp) == 0: return Tensor.zeros(shp, dtype=dt, device=device)
    x0, x1 = Tensor._random_bits(shp, device)
    if dt == dtypes.float64:
      bits = (x0.cast(dtypes.uint64) << 20) | (x1 >> 12).cast(dtypes.uint64)
      return _finish((bits | 0x3FF0000000000000).bitcast(dtypes.float64) - 1.0, requires_grad)
    mbits = dtypes.finfo(dt)[1]
    mant = (x0 >> 9) & (((1 << 23) - 1) ^ ((1 << (23 - mbits)) - 1))   # the top mbits random bits
    return _finish(((mant | 0x3F800000).bitcast(dtypes.float32) - 1.0).cast(dt), requires_grad)

  @classmethod
  def randn(cls, *shape: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Standard normal values (Box-Muller on two uniform draws)."""
    Tensor = cls
    shp, dt = _shape(shape), _dtype(dtype, dtypes.default_float)
    if not dtypes.is_float(dt): raise TypeError(f"randn: dtype must be a float, got {dt}")
    ft = dtypes.float64 if dt == dtypes.float64 else dtypes.float32
    u = Tensor.rand(2, *shp, dtype=ft, device=device)
    rest = tuple((0, s) for s in shp)
    u1, u2 = u.shrink(((0, 1), *rest)).reshape(shp), u.shrink(((1, 2), *rest)).reshape(shp)
    z = (u1 * (2 * math.pi)).cos() * ((1 - u2).log() * -2).sqrt()
    return _finish(z.cast(dt), requires_grad)

  @classmethod
  def randint(cls, *shape: Any, low: int = 0, high: int = 10, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    """Uniform random ints in [low, high)."""
    shp, dt = _shape(shape), _dtype(dtype, dtypes.int32)
    Tensor = cls
    if not isinstance(low, int) or not isinstance(high, int): raise TypeError(f"randint: low and high must be ints, got {low!r}, {high!r}")
    if not dtypes.is_int(dt): raise TypeError(f"randint: dtype must be an int dtype, got {dt}")
    if not dtypes.min(dt) <= low < high <= dtypes.max(dt) + 1: raise ValueError(f"randint: need {dtypes.min(dt)} <= low < high <= {dtypes.max(dt) + 1} for {dt}, got [{low}, {high})")
    if high - low > 2**32: raise ValueError(f"randint: the range high - low = {high - low} is larger than 2**32")
    if math.prod(shp) == 0: return Tensor.zeros(shp, dtype=dt, device=device)
    x0, _ = Tensor._random_bits(shp, device)
    v = (x0.cast(dtypes.uint64) * (high - low)) >> 32   # < high - low
    return (v + (low % 2**64)).cast(dt)                   # low bits of the wrapped sum: exact in [low, high)

  @classmethod
  def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None, device: str | None = None,
              requires_grad: bool | None = None) -> Tensor:
    """Uniform random values in [low, high): rand * (high - low) + low."""
    Tensor = cls
    ret = Tensor.rand(*shape, dtype=dtype, device=device) * (high - low) + low
    return _finish(ret, requires_grad)

  @classmethod
  def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None, device: str | None = None,
             requires_grad: bool | None = None) -> Tensor:
    Tensor = cls
    return _finish(Tensor.randn(*shape, dtype=dtype, device=device) * std + mean, requires_grad)

  @classmethod
  def scaled_uniform(cls, *shape: Any, **kwargs: Any) -> Tensor:
    """Uniform in [-1, 1) scaled by 1/sqrt(numel)."""
    Tensor = cls
    shp = _shape(shape)
    return _scaled(Tensor.uniform(*shp, low=-1.0, high=1.0, **{k: v for k, v in kwargs.items() if k != "requires_grad"}),
                   math.prod(shp) ** -0.5, kwargs.get("requires_grad"))

  @classmethod
  def glorot_uniform(cls, *shape: Any, **kwargs: Any) -> Tensor:
    """Uniform in [-1, 1) scaled by sqrt(6 / (shape[0] + prod(shape[1:]))) (Glorot & Bengio)."""
    Tensor = cls
    shp = _shape(shape)
    return _scaled(Tensor.uniform(*shp, low=-1.0, high=1.0, **{k: v for k, v in kwargs.items() if k != "requires_grad"}),
                   (6 / (shp[0] + math.prod(shp[1:]))) ** 0.5, kwargs.get("requires_grad"))

  @classmethod
  def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """Uniform in [-b, b), b = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(prod(shape[1:])) (He et al., fan-in)."""
    Tensor = cls
    shp = _shape(shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(math.prod(shp[1:]))
    return Tensor.uniform(*shp, low=-bound, high=bound, **kwargs)

  @classmethod
  def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """Normal with std = sqrt(2 / (1 + a^2)) / sqrt(prod(shape[1:]))."""
    Tensor = cls
    shp = _shape(shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(math.prod(shp[1:]))
    return Tensor.normal(*shp, mean=0.0, std=std, **kwargs)

  def rand_like(self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    Tensor = type(self)
    return Tensor.rand(self.shape, dtype=_dtype(dtype, self.dtype), device=device or self.device, requires_grad=requires_grad)
  def randn_like(self: Tensor, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    Tensor = type(self)
    return Tensor.randn(self.shape, dtype=_dtype(dtype, self.dtype), device=device or self.device, requires_grad=requires_grad)


def _scaled(t: Tensor, scale: float, requires_grad: bool | None) -> Tensor:
  return _finish(t * scale, requires_grad)

