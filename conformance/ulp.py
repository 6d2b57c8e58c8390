"""Native transcendentals: each backend's own EXP2/LOG2/SIN measured in ULPs against the exact value.

Native results are not bit-exact across backends (refgrad/uop/semantics.py, IMPLEMENTATION_DEFINED);
a backend conforms when every finite result is within `NATIVE_ULP_BOUND` ULPs of the exact value
(ULPs of the result dtype at the exact value, subnormal spacing below the normal range) and every
result the correctly rounded value makes non-finite (inf, NaN) is exactly that.

SIN is measured in ULPs for |x| < `SIN_RANGE[dtype]` (refgrad/uop/decompositions.py), the range where refgrad's own SIN
is accurate, on every device alike: GPUs have no accurate native sine of huge arguments (PTX's sin.approx, gfx11's
v_sin), so their renderers build SIN from refgrad's parts. A finite input at or beyond it must give a finite value in
[-1, 1] (what the decomposition promises there), on every device. (The amdgcn renderer's native SIN is accurate past
it too, by an exact reduction: tests/refgrad/test_native_sin.py.)
"""
from __future__ import annotations

import mpmath as mp
import numpy as np

from conformance.values import special_values
from refgrad.dtype import DType, dtypes
from refgrad.uop import semantics
from refgrad.uop.decompositions import SIN_RANGE
from refgrad.uop.ops import Ops

# devices whose native EXP2/LOG2/SIN the native group does not measure, and why (printed as a note; never a pass)
NATIVE_UNMEASURED = {
  "NV_NVCC": "its native transcendentals are CUDA's math library compiled by nvcc (documented to 2 ULP for sinf, so beyond "
             "the 1-ULP bound by design)",
}
NATIVE_ULP_BOUND = 1.0   # glibc's libm and numpy measure <= 0.65 ULP in float64; one rounding of float64 adds 0.5 + 2^-29 for narrower types


def native_inputs(op: Ops, dt: DType, n: int, seed: int) -> np.ndarray:
  """Special values plus n seeded values spread over the range where the op is interesting."""
  rng = np.random.default_rng(seed)
  e, m = dtypes.finfo(dt)
  emax = 2 ** (e - 1)
  if op is Ops.EXP2: x = rng.uniform(-(emax + m + 2), emax + 1, n)
  elif op is Ops.LOG2: x = np.exp2(rng.uniform(-(emax + m - 1), emax, n))
  else: x = np.concatenate([rng.uniform(-4, 4, n // 2), rng.uniform(-1e4, 1e4, n - n // 2)])
  return np.concatenate([special_values(dt), semantics.round_float(x, dt)])

def exact(op: Ops, x: np.ndarray, dt: DType) -> tuple[np.ndarray, np.ndarray]:
  """The exact result as an unevaluated float64 sum hi + lo: float64 numpy for the 16/32-bit types (lo = 0;
  numpy's own error is < 2^-29 of their ULP), mpmath at 120 bits for float64."""
  x64 = semantics.to_float64(x, dt)
  if dt != dtypes.float64:
    with np.errstate(all="ignore"): return {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}[op](x64), np.zeros_like(x64)
  fn = {Ops.EXP2: lambda v: mp.power(2, v), Ops.LOG2: lambda v: mp.log(v, 2), Ops.SIN: mp.sin}[op]
  hi, lo = np.empty_like(x64), np.zeros_like(x64)
  with mp.workprec(120):
    for i, v in enumerate(x64.tolist()):
      if v != v or (op is Ops.LOG2 and v < 0) or (op is Ops.SIN and abs(v) == float("inf")): hi[i] = float("nan")
      elif op is Ops.LOG2 and v == 0: hi[i] = -float("inf")
      elif op is Ops.EXP2 and abs(v) == float("inf"): hi[i] = 0.0 if v < 0 else v
      else:
        r = fn(mp.mpf(v))
        hi[i] = float(r)
        if np.isfinite(hi[i]): lo[i] = float(r - hi[i])
  return hi, lo

def ulp_errors(got: np.ndarray, ref: tuple[np.ndarray, np.ndarray], dt: DType) -> np.ndarray:
  """|got - exact| in ULPs of dt at the exact value hi + lo; inf where a result that must be non-finite
  is not bit for bit the correctly rounded value, or where a result that must be finite is not."""
  e, m = dtypes.finfo(dt)
  hi, lo = ref
  rounded = semantics.round_float(hi, dt)
  g64 = semantics.to_float64(got, dt)
  with np.errstate(all="ignore"):
    mag = np.abs(hi)
    ex = np.maximum(np.floor(np.log2(np.where(mag > 0, mag, 1.0))), 2 - 2 ** (e - 1))
    err = np.abs((g64 - hi) - lo) / np.exp2(ex - m)
  special = ~np.isfinite(semantics.to_float64(rounded, dt))
  err = np.where(special, np.where(semantics.same_bits(got, rounded, dt), 0.0, np.inf), err)
  return np.where(~special & ~np.isfinite(g64), np.inf, err)

def beyond_sin_range(op: Ops, x: np.ndarray, dt: DType) -> np.ndarray:
  """The lanes of a SIN case whose finite input is at or beyond SIN_RANGE[dt] (none for the other ops)."""
  if op is not Ops.SIN: return np.zeros(len(x), dtype=bool)
  x64 = np.abs(semantics.to_float64(x, dt))
  return np.isfinite(x64) & (x64 >= SIN_RANGE[dt])

def sin_range_errors(err: np.ndarray, beyond: np.ndarray, got: np.ndarray, dt: DType) -> np.ndarray:
  """`err` with the lanes beyond SIN's range judged by the range rule instead: 0 for a finite value in [-1, 1], inf else."""
  g64 = semantics.to_float64(got, dt)
  with np.errstate(invalid="ignore"): ok = np.isfinite(g64) & (np.abs(g64) <= 1.0)
  return np.where(beyond, np.where(ok, 0.0, np.inf), err)
