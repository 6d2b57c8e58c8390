"""Data types: scalars, vectors, pointers, the promotion lattice and numeric facts.

bfloat16 has no numpy type; its values live in numpy as their raw bits (uint16). Every other
scalar dtype maps to the numpy dtype of the same layout (`DType.np`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Final

import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
  priority: int       # orders dtypes of one kind; used by the promotion lattice
  itemsize: int       # bytes of one element (a vector's is count * scalar's)
  name: str
  fmt: str | None     # struct/array format character, None for bfloat16
  count: int = 1      # lanes of a vector dtype
  _scalar: DType | None = None

  def __repr__(self) -> str: return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar().name}.vec({self.count})"
  def __eq__(self, other: object) -> bool:  # the scalar dtypes are singletons: identity answers almost every comparison
    return self is other or (type(self) is type(other) and self._key() == other._key())  # type: ignore[attr-defined]
  def __hash__(self) -> int:
    if (h := self.__dict__.get("_hash")) is None: h = self.__dict__["_hash"] = hash(self._key())
    return h
  def _key(self) -> tuple:   # computed once per dtype (vector and pointer dtypes are made often and compared a lot)
    if (k := self.__dict__.get("_k")) is None: k = self.__dict__["_k"] = tuple(getattr(self, f) for f in self.__dataclass_fields__)
    return k
  def __lt__(self, other: DType) -> bool: return (self.priority, self.itemsize, self.name) < (other.priority, other.itemsize, other.name)

  def scalar(self) -> DType: return self._scalar if self._scalar is not None else self
  def vec(self, n: int) -> DType:
    if self.count != 1 or n < 1: raise ValueError(f"cannot make a {n}-vector of {self}")
    if n == 1 or self == dtypes.void: return self
    return DType(self.priority, self.itemsize * n, f"{self.name}{n}", None, n, self)
  def ptr(self, size: int = -1, local: bool = False) -> PtrDType:
    """A pointer to `size` elements of this dtype in global (default) or local memory."""
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar, self, local, size)

  @property
  def np(self) -> np.dtype:
    """The numpy dtype holding one scalar element (bfloat16: its bits, as uint16)."""
    s = self.scalar()
    if s.name not in _NP: raise TypeError(f"{self} has no numpy equivalent")
    return np.dtype(_NP[s.name])
  @property
  def bits(self) -> int: return self.scalar().itemsize * 8
  @property
  def min(self) -> int | float | bool:
    """The smallest value (tinygrad's DType.min): the most negative int, -inf, or False."""
    return dtypes.min(self)
  @property
  def max(self) -> int | float | bool:
    """The largest value: the largest int, +inf, or True."""
    return dtypes.max(self)


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  base: DType = None  # type: ignore[assignment]
  local: bool = False
  size: int = -1      # number of elements, -1 when unknown
  def __repr__(self) -> str: return f"{self.base!r}.ptr({self.size}{', local=True' if self.local else ''})"
  def vec(self, n: int) -> DType: raise ValueError("pointer dtypes have no vector form")
  def ptr(self, size: int = -1, local: bool = False) -> PtrDType: raise ValueError("no pointers to pointers")
  def scalar(self) -> DType: return self


class dtypes:
  void: Final[DType] = DType(-1, 0, "void", None)
  bool: Final[DType] = DType(0, 1, "bool", "?")
  int8: Final[DType] = DType(1, 1, "char", "b")
  uint8: Final[DType] = DType(2, 1, "uchar", "B")
  int16: Final[DType] = DType(3, 2, "short", "h")
  uint16: Final[DType] = DType(4, 2, "ushort", "H")
  int32: Final[DType] = DType(5, 4, "int", "i")
  uint32: Final[DType] = DType(6, 4, "uint", "I")
  int64: Final[DType] = DType(7, 8, "long", "q")
  uint64: Final[DType] = DType(8, 8, "ulong", "Q")
  float16: Final[DType] = DType(9, 2, "half", "e")
  bfloat16: Final[DType] = DType(10, 2, "bfloat16", None)
  float32: Final[DType] = DType(11, 4, "float", "f")
  float64: Final[DType] = DType(12, 8, "double", "d")
  # aliases
  half, float, double, char, uchar, short, ushort, int, uint, long, ulong = \
    float16, float32, float64, int8, uint8, int16, uint16, int32, uint32, int64, uint64
  default_float: DType = float32
  default_int: DType = int32

  ints: tuple[DType, ...] = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
  uints: tuple[DType, ...] = (uint8, uint16, uint32, uint64)
  floats: tuple[DType, ...] = (float16, bfloat16, float32, float64)
  all: tuple[DType, ...] = (bool, *ints, *floats)

  @staticmethod
  def is_float(x: DType) -> bool: return x.scalar() in dtypes.floats
  @staticmethod
  def is_int(x: DType) -> bool: return x.scalar() in dtypes.ints
  @staticmethod
  def is_unsigned(x: DType) -> bool: return x.scalar() in dtypes.uints
  @staticmethod
  def is_bool(x: DType) -> bool: return x.scalar() == dtypes.bool

  @staticmethod
  def min(x: DType) -> int | float:
    """Smallest value: the most negative int, or -inf for floats."""
    x = x.scalar()
    if dtypes.is_int(x): return 0 if dtypes.is_unsigned(x) else -2 ** (x.bits - 1)
    return False if x == dtypes.bool else -math.inf
  @staticmethod
  def max(x: DType) -> int | float:
    """Largest value: the largest int, or +inf for floats."""
    x = x.scalar()
    if dtypes.is_int(x): return 2 ** x.bits - 1 if dtypes.is_unsigned(x) else 2 ** (x.bits - 1) - 1
    return True if x == dtypes.bool else math.inf
  @staticmethod
  def finfo(x: DType) -> tuple[int, int]:
    """(exponent bits, mantissa bits) of a float dtype."""
    return _FINFO[x.scalar().name]
  @staticmethod
  def eps(x: DType) -> float:
    """Gap between 1.0 and the next larger value of a float dtype."""
    return 2.0 ** -dtypes.finfo(x)[1]
  @staticmethod
  def max_finite(x: DType) -> float:
    e, m = dtypes.finfo(x)
    return (2 - 2.0 ** -m) * 2.0 ** (2 ** (e - 1) - 1)
  @staticmethod
  def from_name(name: str) -> DType:
    """A scalar dtype from its name or an alias ('float32', 'float', 'half', ...)."""
    d = getattr(dtypes, name, None)
    if not isinstance(d, DType): raise ValueError(f"unknown dtype name {name!r}")
    return d
  @staticmethod
  def from_np(x: np.dtype | type) -> DType:
    n = np.dtype(x)
    for d in dtypes.all:
      if d != dtypes.bfloat16 and d.np == n: return d
    raise TypeError(f"numpy dtype {n} has no refgrad equivalent")
  @staticmethod
  def as_const(x: object, dtype: DType) -> bool | int | float:
    """A Python value held exactly as `dtype` would hold it (ints wrap, floats round)."""
    s = dtype.scalar()
    if s == dtypes.bool: return bool(x)
    if dtypes.is_int(s):
      v = int(x)  # type: ignore[call-overload]
      v &= (1 << s.bits) - 1
      return v - (1 << s.bits) if not dtypes.is_unsigned(s) and v >> (s.bits - 1) else v
    if s == dtypes.float64: return float(x)  # type: ignore[arg-type]
    if not dtypes.is_float(s): raise ValueError(f"round_float: {dtype!r} is not a float dtype")
    v = np.array([float(x)], np.float64)  # type: ignore[arg-type]
    with np.errstate(all="ignore"):   # rounded once to nearest-even, as semantics.round_float; overflow gives inf
      return float(bf16_to_f32(f64_to_bf16(v))[0] if s == dtypes.bfloat16 else v.astype(s.np).astype(np.float64)[0])


_NP = {"bool": np.bool_, "char": np.int8, "uchar": np.uint8, "short": np.int16, "ushort": np.uint16,
       "int": np.int32, "uint": np.uint32, "long": np.int64, "ulong": np.uint64, "half": np.float16,
       "bfloat16": np.uint16, "float": np.float32, "double": np.float64}
_FINFO = {"half": (5, 10), "bfloat16": (8, 7), "float": (8, 23), "double": (11, 52)}

# promotion lattice (as in numpy/jax for the pairs that matter to a tensor library): an edge says
# "this type promotes to these"; the result of mixing two types is their least common upper bound.
_PROMO: dict[DType, tuple[DType, ...]] = {
  dtypes.bool: (dtypes.int8, dtypes.uint8), dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,),
  dtypes.int32: (dtypes.int64,), dtypes.int64: (dtypes.float16, dtypes.bfloat16),
  dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
  dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
  dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,),
  dtypes.float64: ()}

@functools.cache
def _uppers(d: DType) -> frozenset[DType]:
  return frozenset({d}).union(*(_uppers(p) for p in _PROMO[d]))

@functools.cache
def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every argument promotes to (bool < ints < floats; int64+uint64 -> float16
  follows the lattice, as in jax)."""
  return min(frozenset.intersection(*(_uppers(d.scalar()) for d in ds)))

def sum_acc_dtype(d: DType) -> DType:
  """Accumulator dtype for a sum: small ints widen to int32/uint32, floats keep their type."""
  if dtypes.is_unsigned(d): return least_upper_dtype(d, dtypes.uint32)
  if dtypes.is_int(d) or d == dtypes.bool: return least_upper_dtype(d, dtypes.int32)
  return d


# ---- bfloat16 storage (raw bits in uint16): exact conversions, each rounding once to nearest-even ----------------

def f64_to_bf16(x: np.ndarray) -> np.ndarray:
  """float64 -> bfloat16 bits (uint16), one rounding to nearest-even; NaN -> quiet NaN, sign kept.
  First float64 -> float32 rounded to odd (RNE, then one step toward x when inexact and even: float32 keeps
  >= 2 more bits than bfloat16 everywhere, subnormals included), then `f32_to_bf16`. Values past float32's
  range overflow to inf, as they must: bfloat16's overflow threshold is below float32's largest value."""
  x = np.asarray(x, np.float64)
  with np.errstate(all="ignore"):
    y = np.asarray(x.astype(np.float32))
    fix = (y.astype(np.float64) != x) & np.isfinite(y) & ((y.view(np.uint32) & np.uint32(1)) == 0)
    y = np.where(fix, np.nextafter(y, np.where(x > y, np.float32(np.inf), np.float32(-np.inf))), y)
  return f32_to_bf16(y)

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
