"""Test inputs for every dtype: the values where semantics are subtle, plus seeded random bits."""
from __future__ import annotations

import itertools

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.uop import semantics


def special_values(dt: DType) -> np.ndarray:
  """The edge cases of a dtype in storage form: ±0, ±1, extremes, denormals, ±inf, NaN, ..."""
  if dt == dtypes.bool: return np.array([False, True])
  if dtypes.is_int(dt):
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    vals = {0, 1, 2, 3, 7, dt.bits - 1, dt.bits, lo, lo + 1, hi, hi - 1, hi // 2, lo // 2, 100 % (hi + 1)}
    if lo < 0: vals |= {-1, -2, -3, -7, -(dt.bits - 1)}
    return semantics.from_python(sorted(vals), dt)
  e, m = dtypes.finfo(dt)
  tiny, sub = 2.0 ** (2 - 2 ** (e - 1)), 2.0 ** (2 - 2 ** (e - 1) - m)
  big = dtypes.max_finite(dt)
  pos = [0.0, 1.0, 0.5, 1.5, 2.0, 3.0, 10.0, 0.1, 1 / 3, 1 + 2.0 ** -m, 1 - 2.0 ** (-m - 1), 3.141592653589793,
         big, big / 2, tiny, tiny * (1 - 2.0 ** -m), sub, 3 * sub, 2.0 ** (m + 1), 2.0 ** (m + 1) + 2, float("inf")]
  vals = pos + [-v for v in pos] + [float("nan")]
  return semantics.from_python(vals, dt)

def random_values(dt: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  """n values with uniformly random bits (so every exponent, denormals and NaNs appear)."""
  if dt == dtypes.bool: return rng.integers(0, 2, n).astype(np.bool_)
  raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8)
  out = raw.view(dt.np).copy()
  if dtypes.is_float(dt):  # also values of moderate size, where most arithmetic happens
    k = n // 2
    out[:k] = semantics.round_float(rng.standard_normal(k) * 10.0 ** rng.integers(-3, 4, k), dt)
  return out

def operand_sets(dts: tuple[DType, ...], n_random: int, seed: int) -> list[np.ndarray]:
  """Input columns for an op with these operand dtypes: every combination of special values (for
  3 operands, the first 12 of each), then n_random random tuples."""
  rng = np.random.default_rng(seed)
  specials = [special_values(d) for d in dts]
  if len(dts) == 3: specials = [s[:12] if len(s) > 12 else s for s in specials]
  combos = list(itertools.product(*(range(len(s)) for s in specials)))
  cols = [np.concatenate([s[[c[k] for c in combos]], random_values(dts[k], n_random, rng)]) for k, s in enumerate(specials)]
  return cols


def without_ub(op, out_dtype: DType, cols: list[np.ndarray], src_dtypes: tuple[DType, ...]) -> list[np.ndarray]:
  """The same columns with every lane whose inputs are undefined behaviour for `op` set to ones
  (1 // 1, 1 << 1, int(1.0) are all defined), so a kernel's size does not depend on its inputs."""
  while (ub := semantics.ub_check(op, out_dtype, cols, src_dtypes)) is not None:  # one UB kind at a time
    mask = np.broadcast_to(ub[1], cols[0].shape[:1])
    cols = [np.where(mask, semantics.from_python([1], d), c) for c, d in zip(cols, src_dtypes)]
  return cols


def cast_ties(src: DType, dst: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  """n values of `src` (storage form) exactly halfway between two neighbouring values of `dst`, where the cast's
  round-to-nearest-even decides (lower neighbours even and odd, both signs), and one step of `src` either side of
  each tie; for float -> int casts, values halfway between integers near the ends of `dst`'s range. Empty when src
  cannot hold such a value (a narrower source, bool)."""
  if dtypes.bool in (src, dst) or n <= 0: return semantics.from_python([], src) if src != dtypes.bool else np.zeros(0, np.bool_)
  out: list[float | int] = []
  if dtypes.is_float(dst):
    p = dtypes.finfo(dst)[1] + 1                                # significant bits of dst
    room = dtypes.finfo(src)[1] + 1 if dtypes.is_float(src) else src.bits - (0 if dtypes.is_unsigned(src) else 1)
    if room <= p: return semantics.from_python([], src)
    emax_dst = 2 ** (dtypes.finfo(dst)[0] - 1) - 1
    for _ in range(n // 3):
      k = int(rng.integers(1 << (p - 1), 1 << p))
      if dtypes.is_float(src):
        sub_e = 1 - emax_dst - (p - 1)                             # exponent of dst's smallest step (its subnormals)
        emin = max(-(2 ** (dtypes.finfo(src)[0] - 1)) + 2 + p, sub_e)
        e = int(rng.integers(emin, emax_dst - p + 2))             # (k + 1/2) * 2**e: halfway between normals of dst
        if rng.random() < 0.2 and sub_e - 1 >= -(2 ** (dtypes.finfo(src)[0] - 1)) + 2 - dtypes.finfo(src)[1]:
          k, e = int(rng.integers(0, 1 << (p - 1))), sub_e           # halfway between subnormals of dst
        t = (k + 0.5) * 2.0 ** e
        step = t * 2.0 ** -(dtypes.finfo(src)[1] + 1)
        sign = -1.0 if rng.random() < 0.5 else 1.0
        out += [sign * t, sign * (t - step), sign * (t + step)]
      else:
        s = int(rng.integers(0, max(1, min(room - p, emax_dst + 1 - p))))   # (2k + 1) * 2**s, p + 1 significant bits
        t = (2 * k + 1) << s
        if t >= 2 ** room: continue
        sign = -1 if rng.random() < 0.5 and not dtypes.is_unsigned(src) else 1
        out += [sign * t, sign * (t - 1), sign * (t + 1) if t + 1 < 2 ** room else sign * t]
  elif dtypes.is_float(src):
    hi = min(float(dtypes.max(dst)), 2.0 ** (dtypes.finfo(src)[1]))
    lo = max(float(dtypes.min(dst)), -hi)
    for _ in range(n):
      v = float(rng.integers(int(lo), int(hi))) + 0.5 if rng.random() < 0.5 else (hi - 0.5 if rng.random() < 0.5 else lo + 0.5)
      out.append(v)
  return semantics.from_python(out, src)
