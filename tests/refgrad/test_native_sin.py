"""The native SIN a renderer without an accurate instruction gets (decompose_transcendentals(native=True), the amdgcn
renderer's): float32 (float16/bfloat16 in it) accurate for every finite input, past SIN_RANGE too (exact Payne-Hanek
reduction in float64), and the decomposition's result bit for bit inside SIN_RANGE. Evaluated op by op through the
reference semantics (refgrad/uop/evaluate.py), so the results are exactly what every backend computes."""
from __future__ import annotations

import functools

import mpmath as mp
import numpy as np
import pytest

from refgrad.dtype import DType, dtypes
from refgrad.uop import semantics
from refgrad.uop.decompositions import SIN_RANGE, ULP_BOUNDS, decompose_transcendentals
from refgrad.uop.evaluate import eval_graph
from refgrad.uop.ops import Ops, UOp


@functools.cache
def program(dt: DType, native: bool) -> tuple[UOp, UOp]:
  idx = UOp.special("gidx0", 4)
  x = UOp.define_global(0, dt).load(idx, dtype=dt)
  out = decompose_transcendentals(UOp.define_global(1, dt).store(idx, UOp(Ops.SIN, dt, (x,))).sink(), native=native)
  return x, out.src[0].src[2]

def sin(x: np.ndarray, dt: DType, native: bool = True) -> np.ndarray:
  leaf, val = program(dt, native)
  return eval_graph(val, {leaf: x}, check_ub=True)

def ulps(got: np.ndarray, x: np.ndarray, dt: DType) -> np.ndarray:
  """|got - sin(x)| in ULPs of dt at sin(x) (numpy's float64 sin: libm's exact reduction, < 2^-29 of these ULPs off)."""
  ref = np.sin(semantics.to_float64(x, dt))
  _, ex = np.frexp(ref)
  m = {dtypes.float32: 23, dtypes.bfloat16: 7}[dt]
  return np.abs(semantics.to_float64(got, dt) - ref) / np.ldexp(1.0, np.maximum(ex - 1, -126) - m)


def test_float32_past_sin_range_within_half_an_ulp_and_more():
  rng = np.random.default_rng(5)
  # every binade from SIN_RANGE to the largest float32, and the largest ones
  mags = np.ldexp(rng.uniform(1, 2, 200_000), rng.integers(20, 128, 200_000))
  x = np.concatenate([mags, -mags, [SIN_RANGE[dtypes.float32], np.finfo(np.float32).max, 2.0 ** 127, 16367173 * 2.0 ** 72]]).astype(np.float32)
  err = ulps(sin(x, dtypes.float32), x, dtypes.float32)
  past = np.abs(x) >= SIN_RANGE[dtypes.float32]   # below it: the decomposition (ULP_BOUNDS, tests/refgrad/test_decompositions.py)
  assert past.sum() > 300_000 and err[past].max() < 0.51, f"max {err[past].max()} ULP at {x[past][np.argmax(err[past])]!r}"
  assert err.max() <= ULP_BOUNDS[(Ops.SIN, dtypes.float32)]
  assert np.array_equal(sin(-x, dtypes.float32), -sin(x, dtypes.float32))   # odd: exactly


def test_bfloat16_every_finite_input_within_an_ulp():
  x = np.arange(1 << 16, dtype=np.uint16)
  x = x[np.isfinite(semantics.to_float64(x, dtypes.bfloat16))]
  err = ulps(sin(x, dtypes.bfloat16), x, dtypes.bfloat16)
  past = np.abs(semantics.to_float64(x, dtypes.bfloat16)) >= SIN_RANGE[dtypes.bfloat16]
  assert past.sum() > 10_000 and err[past].max() <= 0.51 and err.max() <= ULP_BOUNDS[(Ops.SIN, dtypes.bfloat16)], f"max {err.max()} ULP"


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.bfloat16, dtypes.float64])
def test_inside_sin_range_it_is_the_decomposition_bit_for_bit(dt: DType):
  rng = np.random.default_rng(6)
  x64 = np.concatenate([rng.uniform(-SIN_RANGE[dt], SIN_RANGE[dt], 20_000), rng.uniform(-8, 8, 20_000), [0.0, -0.0, 1e-40]])
  x = semantics.from_python(x64, dt)
  x = x[np.abs(semantics.to_float64(x, dt)) < SIN_RANGE[dt]]   # after rounding to dt
  assert semantics.same_bits(sin(x, dt), sin(x, dt, native=False), dt).all()


def test_special_values():
  """inf and NaN give NaN, +-0 itself, on both widths."""
  x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
  got = sin(x, dtypes.float32)
  assert np.isnan(got[:3]).all() and got[3:].tobytes() == x[3:].tobytes()
  assert np.isnan(sin(x.astype(np.float64)[:3], dtypes.float64)).all()


def test_float64_past_sin_range_within_the_decompositions_bound():
  """Against mpmath at 200 bits: random doubles in every binade from 2^31 to the largest, the largest, and the double
  closest to a multiple of pi/2 (6381956970095103 * 2^797, about 2^-61 from it: the reduction's worst case)."""
  rng = np.random.default_rng(7)
  mags = np.ldexp(rng.uniform(1, 2, 1500), rng.integers(31, 1024, 1500))
  x = np.concatenate([mags, -mags[:200], [np.finfo(np.float64).max, 6381956970095103 * 2.0 ** 797, 1.5 * 2.0 ** 30]])
  got = sin(x, dtypes.float64)
  with mp.workprec(200):
    err = []
    for v, g in zip(x.tolist(), got.tolist()):
      r = mp.sin(mp.mpf(v))
      err.append(float(abs(mp.mpf(g) - r) / mp.mpf(2) ** (int(mp.floor(mp.log(abs(r), 2))) - 52)))
  assert max(err) <= ULP_BOUNDS[(Ops.SIN, dtypes.float64)], f"max {max(err)} ULP at {x[int(np.argmax(err))]!r}"
