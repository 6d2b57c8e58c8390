"""Forward and backward results against PyTorch's, recorded in tests/golden/*.json by tests/golden/make_golden.py
(torch is never imported here). Every case runs on the default device; when that is not the CPU, the CPU runs it
too and the two must agree byte for byte.

Comparison with PyTorch: NaN exactly where PyTorch has NaN, +-inf exactly where it has them (with the same sign),
finite values within PyTorch's own default tolerances for the dtype (torch.testing.assert_close: float32 rtol 1.3e-6
atol 1e-5, float64 1e-7/1e-7, float16 1e-3/1e-5, bfloat16 1.6e-2/1e-5) unless the case states its own. Integer
outputs (indices, int32 cases) must be equal.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from refgrad import Device, Tensor, dtypes
from tests.golden.cases import GROUPS, Case
from tests.golden.golden_io import as_float64, decode, load

TOL = {"float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "int32": (0.0, 0.0)}
_DATA = {g: load(g)["cases"] for g in GROUPS}
_PARAMS = [(g, c, dt) for g, cases in GROUPS.items() for c in cases for dt in c.dtypes]


def _tensor(obj: dict[str, Any], kind: str, device: str) -> Tensor:
  a, dt = decode(obj)
  if kind == "i": return Tensor(a.astype(np.int32), device=device)
  if kind == "b": return Tensor(a, device=device)
  if dt == "bfloat16": return Tensor(a, device=device).bitcast(dtypes.bfloat16)
  return Tensor(a, device=device)


def run(case: Case, rec: dict[str, Any], device: str) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
  """refgrad's outputs and input gradients (float inputs) for a recorded case, as numpy arrays of the raw values."""
  xs = [_tensor(obj, case.kind(i), device) for i, obj in enumerate(rec["inputs"])]
  if case.grad:
    for i, x in enumerate(xs):
      if case.kind(i) == "f": x.requires_grad_(True)
  outs = case.rg(*xs)
  outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
  if case.grad:
    outs[0].backward(_tensor(rec["gout"], "f", device))
  res = [o.numpy() for o in outs]
  grads = [None if x.grad is None else x.grad.numpy() for i, x in enumerate(xs) if case.kind(i) == "f"] if case.grad else []
  return res, grads


def _check(name: str, got: np.ndarray, want_obj: dict[str, Any], rtol: float, atol: float) -> None:
  want_raw, dt = decode(want_obj)
  want = as_float64(want_raw, dt)
  assert got.shape == want.shape, f"{name}: shape {got.shape}, PyTorch {want.shape}"
  if dt in ("int64", "int32", "bool"):
    np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64), err_msg=name)
    return
  g = got.astype(np.float64)
  np.testing.assert_array_equal(np.isnan(g), np.isnan(want), err_msg=f"{name}: NaN positions differ")
  inf = np.isinf(want)
  np.testing.assert_array_equal(np.isinf(g), inf, err_msg=f"{name}: inf positions differ")
  np.testing.assert_array_equal(g[inf], want[inf], err_msg=f"{name}: inf signs differ")
  fin = np.isfinite(want)
  np.testing.assert_allclose(g[fin], want[fin], rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("group,case,dtype", _PARAMS, ids=[f"{c.name}@{dt}" for _, c, dt in _PARAMS])
def test_matches_pytorch(group: str, case: Case, dtype: str) -> None:
  rec = _DATA[group][f"{case.name}@{dtype}"]
  rtol, atol = case.tol.get(dtype, TOL[dtype])
  outs, grads = run(case, rec, Device.DEFAULT)
  assert len(outs) == len(rec["outs"])
  for k, (o, w) in enumerate(zip(outs, rec["outs"])): _check(f"{case.name}@{dtype} output {k}", o, w, rtol, atol)
  if case.grad:
    assert len(grads) == len(rec["grads"])
    for k, (gr, w) in enumerate(zip(grads, rec["grads"])):
      if w is None: assert gr is None or not np.any(gr), f"{case.name}@{dtype}: input {k} has a gradient, PyTorch none"
      else:
        assert gr is not None, f"{case.name}@{dtype}: input {k} got no gradient"
        _check(f"{case.name}@{dtype} grad {k}", gr, w, rtol, atol)
  if Device.DEFAULT != "CPU":   # the same program on the CPU: the same bytes
    c_outs, c_grads = run(case, rec, "CPU")
    for a, b in zip([*outs, *grads], [*c_outs, *c_grads]):
      assert (a is None) == (b is None)
      if a is not None: assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"{case.name}@{dtype}: {Device.DEFAULT} and CPU differ"
