"""Input values of a case, per buffer and dtype, from a seed; and whether a kernel is exact on "exact" inputs.

Modes:
  random  ints: the dtype's wrap-around specials (0, +-1, +-2, MIN, MIN+1, MAX, MAX-1, MAX/2, MAX/2+1, ...) mixed with
          uniform bits and small values; floats: scaled normal values mixed with +-0, +-inf, NaN, subnormals, the
          largest finite value, ties at every narrower cast's rounding boundary (`ties`), runs of +-0 pairs and NaNs
          with random sign and payload; bools 0/1.
  exact   floats are small dyadic values (k/4 with |k| <= 32; integers -2..2 for float16/bfloat16), with some +-0, +-inf
          and NaN, so that every order of a reduction gives the same bits when `exact_reductions` says so.
  simple  ints 1..3, floats standard normal, no specials: the fallback when the other modes make the kernel undefined.
"""
from __future__ import annotations

import math

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.runtime.simt import UndefinedBehaviourError
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp

MODES = ("random", "exact", "simple")
SPECIAL_SHARE = 0.08      # share of special values among random/exact inputs


def _float_specials(d: DType) -> list[float]:
  sub = {dtypes.float16: 2.0 ** -24, dtypes.bfloat16: 2.0 ** -133, dtypes.float32: 2.0 ** -149, dtypes.float64: 5e-324}[d]
  big = {dtypes.float16: 65504.0, dtypes.bfloat16: 3.3895313892515355e38, dtypes.float32: 3.4028234663852886e38, dtypes.float64: 1.7976931348623157e308}[d]
  return [0.0, -0.0, math.inf, -math.inf, math.nan, sub, -sub, big, -big, 1.0, -1.0]

_MANT_BITS = {dtypes.bfloat16: 8, dtypes.float16: 11, dtypes.float32: 24, dtypes.float64: 53}

def ties(d: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  """n values of float dtype d (as float64) exactly halfway between two neighbours of a narrower float dtype or of
  the integers: where a cast's round-to-nearest-even decides (both even and odd lower neighbours)."""
  narrower = [m for m in _MANT_BITS.values() if m < _MANT_BITS[d]] + [1]   # 1: halfway between integers (k + 0.5)
  m = np.array(narrower)[rng.integers(0, len(narrower), n)]
  k = rng.integers(0, 1 << 62, n) % (1 << (m - 1)).astype(np.int64) + (1 << (m - 1)).astype(np.int64)   # m significant bits
  e = rng.integers(-6, 7, n) * (m > 1)
  x = (k.astype(np.float64) + 0.5) * np.exp2(e.astype(np.float64)) * np.where(rng.random(n) < 0.5, -1.0, 1.0)
  return x if d.itemsize > 2 else np.clip(x, -60000.0, 60000.0)

def _nan_payloads(d: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  """n NaNs of d in storage form with random sign and payload (quiet and signalling)."""
  bits = d.itemsize * 8
  mant = _MANT_BITS[d] - 1
  u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[d.itemsize]
  exp = ((1 << (bits - 1 - mant)) - 1) << mant
  pay = rng.integers(1, 1 << min(mant, 62), n, dtype=np.int64).astype(u)
  sign = (rng.integers(0, 2, n).astype(u) << u(bits - 1))
  raw = (u(exp) | pay | sign).astype(u)
  return raw if d == dtypes.bfloat16 else raw.view(d.np)

def values(d: DType, n: int, mode: str, rng: np.random.Generator) -> np.ndarray:
  """n values of scalar dtype d in storage form (bfloat16 as uint16 bits)."""
  if mode not in MODES: raise ValueError(f"input mode {mode!r}: choose one of {', '.join(MODES)}")
  if d == dtypes.bool: return rng.integers(0, 2, n).astype(np.bool_)
  if dtypes.is_float(d):
    if mode == "simple": x = rng.standard_normal(n)
    elif mode == "exact":
      x = rng.integers(-2, 3, n).astype(np.float64) if d.itemsize == 2 else rng.integers(-32, 33, n) / 4.0
      sp = rng.random(n) < SPECIAL_SHARE / 2
      x[sp] = rng.choice(np.array([0.0, -0.0, math.inf, -math.inf, math.nan]), int(sp.sum()))
    else:
      x = rng.standard_normal(n) * np.exp2(rng.integers(-3, 4, n))
      sp = rng.random(n) < SPECIAL_SHARE
      x[sp] = rng.choice(np.array(_float_specials(d)), int(sp.sum()))
      tie = (rng.random(n) < SPECIAL_SHARE) & ~sp
      x[tie] = ties(d, int(tie.sum()), rng)
      if n >= 2 and rng.random() < 0.25:   # a run of +-0 pairs (MAX/MIN, signs of sums, comparisons of zeros)
        j = int(rng.integers(0, n - 1))
        x[j:j + 2] = [0.0, -0.0] if rng.random() < 0.5 else [-0.0, 0.0]
      out = semantics.round_float(x, d)
      pay = rng.random(n) < SPECIAL_SHARE / 4
      if pay.any(): out[pay] = _nan_payloads(d, int(pay.sum()), rng)
      return out
    return semantics.round_float(x, d)
  info = np.iinfo(d.np)
  if mode == "simple": return rng.integers(1, 4, n).astype(d.np)
  kind = rng.integers(0, 3, n)
  full = rng.integers(info.min, info.max, n, dtype=d.np, endpoint=True)
  small = rng.integers(max(info.min, -9), 10, n).astype(d.np)
  wrap = [0, 1, 2, info.max, info.min, info.max - 1, info.min + 1, info.max // 2, info.max // 2 + 1, info.min // 2, 1 << (d.bits - 2)]
  spec = rng.choice(np.array(wrap + ([-1, -2] if info.min < 0 else []), dtype=d.np), n)
  return np.where(kind == 0, full, np.where(kind == 1, small, spec)).astype(d.np)


# ---- exactness: every order of each float ADD reduction gives the same bits -------------------------------------

_MANT = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}

def _exact_range(d: DType) -> tuple[float, int]:
  """(largest |value|, exponent of its grain) of d's exact-mode inputs."""
  return (2.0, 0) if d.itemsize == 2 else (8.0, -2)

def exact_reductions(ast: UOp) -> bool:
  """Whether, on exact-mode inputs, every float ADD reduction of the kernel sums values that are multiples of one
  power of two and whose every partial sum is representable: then any reduction order gives the same bits (+-inf and
  NaN inputs give the same result in any order too). Values are tracked as (max magnitude, grain exponent)."""
  info: dict[UOp, tuple[float, int] | None] = {}
  for u in ast.toposort:
    info[u] = _range_of(u, info)
    if u.op is Ops.REDUCE and u.arg is Ops.ADD and dtypes.is_float(u.dtype) and info[u] is None: return False
  return True

def _fits(m: float, e: int, d: DType) -> bool:
  return m == 0 or (m < 2.0 ** 60 and m / 2.0 ** e < 2.0 ** _MANT[d] and e >= -24)

def _range_of(u: UOp, info: dict[UOp, tuple[float, int] | None]) -> tuple[float, int] | None:
  d = u.dtype
  if not dtypes.is_float(d):   # ints wrap within their range, bools are 0/1: bounded by the dtype
    if d == dtypes.bool: return (1.0, 0)
    try: ii = np.iinfo(d.np)
    except (ValueError, TypeError, AttributeError): return None   # pointers, void
    return (float(max(-int(ii.min), int(ii.max))), 0)
  s = [info.get(x) for x in u.src]
  out: tuple[float, int] | None
  if u.op is Ops.LOAD: out = _exact_range(d) if len(u.src) == 2 else (max(_exact_range(d)[0], s[3][0]), min(_exact_range(d)[1], s[3][1])) if s[3] else None
  elif u.op is Ops.CONST:
    c = float(u.arg)
    if not math.isfinite(c): out = (0.0, 0)   # inf/nan: order-independent in sums
    elif c == 0: out = (0.0, 0)
    else:
      m, e = math.frexp(abs(c))
      k = 0
      while m != int(m) and k < 1100: m, k = m * 2, k + 1
      out = (abs(c), e - k)
  elif u.op is Ops.CAST: out = s[0] if s[0] is not None and _fits(*s[0], d) else None
  elif any(x is None for x in s[-2:]) if u.op is Ops.WHERE else any(x is None for x in s): out = None
  elif u.op in (Ops.NEG,): out = s[0]
  elif u.op in (Ops.MAX, Ops.WHERE): a, b = s[-2], s[-1]; out = (max(a[0], b[0]), min(a[1], b[1]))  # type: ignore[index]
  elif u.op is Ops.ADD: out = (s[0][0] + s[1][0], min(s[0][1], s[1][1]))  # type: ignore[index]
  elif u.op is Ops.MUL: out = (s[0][0] * s[1][0], s[0][1] + s[1][1])  # type: ignore[index]
  elif u.op is Ops.REDUCE:
    n = math.prod(r.src[0].arg for r in u.src[1:])
    out = (s[0][0] * (n if u.arg is Ops.ADD else 1), s[0][1])  # type: ignore[index]
  else: out = None
  return out if out is not None and _fits(*out, d) else None


# ---- how the optimized kernel's buffers compare with the unoptimized one's --------------------------------------

# ops through which a reordered float sum's rounding difference stays within the cross-Opt tolerance
_SMOOTH = frozenset({Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.WHERE, Ops.REDUCE, Ops.CAST})

def cross_opt_rules(ast: UOp, mode: str) -> dict[int, str]:
  """Per stored buffer: "exact" (every reduction order gives the same bits: no float ADD reduction, or exact-mode
  inputs that `exact_reductions` accepts), "tolerance" (a float buffer computed from reordered float sums through
  ADD/MUL/NEG/MAX/WHERE/float casts only), or "skip" (a comparison, integer cast, floor, exp, ... of a reordered sum:
  Opts may legitimately change the result, e.g. a bool or an int flips; only the device oracle applies)."""
  sums = [u for u in ast.toposort if u.op is Ops.REDUCE and u.arg is Ops.ADD and dtypes.is_float(u.dtype)]
  if not sums or (mode == "exact" and exact_reductions(ast)):
    return {st.src[0].arg: "exact" for st in ast.src}
  inexact = set(sums)
  for u in ast.toposort:   # every node that depends on a reordered float sum
    if u not in inexact and any(s in inexact for s in u.src): inexact.add(u)
  out: dict[int, str] = {}
  for st in ast.src:
    v = st.src[2]
    if v not in inexact: rule = "exact"
    elif not dtypes.is_float(v.dtype): rule = "skip"
    else:
      bad = any(u in inexact and (u.op not in _SMOOTH or (u.op is Ops.CAST and not dtypes.is_float(u.dtype))
                                  or (u.op is Ops.WHERE and u.src[0] in inexact)) for u in v.toposort)
      rule = "skip" if bad else "tolerance"
    prev = out.get(st.src[0].arg, "exact")
    out[st.src[0].arg] = max(prev, rule, key=("exact", "tolerance", "skip").index)
  return out


def nan_views(ast: UOp) -> dict[int, DType | None]:
  """Stored buffers whose bits include a BITCAST of a computed float (semantics.IMPLEMENTATION_DEFINED: the sign and
  payload of a NaN an op or a float cast produces are unspecified, and a BITCAST exposes them): the float dtype to
  compare such a buffer as (all its NaNs equal), when the BITCAST is the stored value; None when the bits go on into
  other ops (the buffer cannot be compared)."""
  out: dict[int, DType | None] = {}
  for st in ast.src:
    v = st.src[2]
    exposed = [u for u in v.toposort if u.op is Ops.BITCAST and dtypes.is_float(u.src[0].dtype) and u.src[0].op not in (Ops.LOAD, Ops.CONST)]
    if not exposed: continue
    b = st.src[0].arg
    view = v.src[0].dtype if exposed == [v] else None
    out[b] = view if out.get(b, view) == view else None
  return out


# undefined behaviour that input values cause (the inputs are regenerated); any other report is a finding
_VALUE_UB = ("integer division by zero", "signed division overflow", "shift amount out of range", "float->int cast",
             "bitcast to bool of a byte", "load of an invalid bool")

def input_caused(e: UndefinedBehaviourError) -> bool: return str(e).startswith(_VALUE_UB)
