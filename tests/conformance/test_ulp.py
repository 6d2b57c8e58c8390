"""The native-transcendental measure: ULP errors against the exact value."""
import numpy as np
import pytest

from conformance.ulp import NATIVE_ULP_BOUND, exact, native_inputs, ulp_errors
from refgrad.dtype import dtypes
from refgrad.uop import semantics
from refgrad.uop.ops import Ops


@pytest.mark.parametrize("dt", dtypes.floats, ids=lambda d: d.name)
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN], ids=lambda o: o.name)
def test_correct_rounding_is_within_half_an_ulp_and_two_ulps_off_fails(op, dt):
  x = native_inputs(op, dt, 200, seed=3)
  hi, lo = exact(op, x, dt)
  rounded = semantics.round_float(hi, dt)
  err = ulp_errors(rounded, (hi, lo), dt)
  assert err.max() <= 0.5 + 2.0 ** -20
  # two steps away from the correctly rounded value (on finite, nonzero results) is beyond the bound
  finite = np.isfinite(semantics.to_float64(rounded, dt)) & (semantics.to_float64(rounded, dt) != 0)
  u = np.dtype(f"u{dt.itemsize}")
  off = np.where(finite, (rounded.view(u) + 2).astype(u), rounded.view(u)).view(rounded.dtype)
  assert (ulp_errors(off, (hi, lo), dt)[finite] > NATIVE_ULP_BOUND).all()

def test_non_finite_results_must_be_exact():
  dt = dtypes.float32
  x = semantics.from_python([float("inf"), -1.0, 200.0], dt)
  for op, bad in ((Ops.EXP2, [3.0e38, 0.0, 0.0]), (Ops.LOG2, [0.0, 0.0, 0.0])):
    ref = exact(op, x, dt)
    err = ulp_errors(semantics.from_python(bad, dt), ref, dt)
    assert np.isinf(err[0]) if op is Ops.EXP2 else np.isinf(err[1])
  assert np.isinf(ulp_errors(semantics.from_python([float("inf")], dt), exact(Ops.EXP2, semantics.from_python([3.0], dt), dt), dt)).all()
