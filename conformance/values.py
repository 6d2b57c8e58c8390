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
