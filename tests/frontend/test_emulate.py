"""Emulated GPUs (EMULATE=CUDA / EMULATE=AMD, the conftest's PYTHON-EMULATE=... variants): the default heuristics give
tensor programs GPU-shaped kernels (work-items, GROUP reductions through local memory, tensor cores), and the PYTHON
device runs them with the reference's results; so does the mock NV GPU, whose own target is CUDA. Without EMULATE the CPU
target uses none of them."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, dtypes, schedule
from refgrad.device import Device, target_for
from refgrad.opt import OptOps
from refgrad.program import Runner
from refgrad.target import Target
from refgrad.uop import semantics
from refgrad.uop.ops import Ops


def _gpu_target() -> Target | None:
  """The GPU target kernels of the default device are made for (EMULATE's, or NV's CUDA), None for the CPU target."""
  return t if (t := target_for(Device.DEFAULT)).gpu else None

def _run(t: Tensor) -> tuple[np.ndarray, list[Runner]]:
  with schedule.recording() as log: out = t.numpy()
  return out, [step.runner for step in log if step.runner is not None]

def _ops(runners: list[Runner]) -> set[OptOps]: return {o.op for r in runners for o in r.opts}
def _uops(runners: list[Runner]) -> set[Ops]: return {u.op for r in runners for u in r.spec.uops}

def test_tensor_cores_when_emulated(monkeypatch: pytest.MonkeyPatch):
  rng = np.random.default_rng(5)
  a, b = rng.standard_normal((64, 48)).astype(np.float16), rng.standard_normal((48, 32)).astype(np.float16)
  got, ran = _run(Tensor(a).matmul(Tensor(b), dtype=dtypes.float32))
  monkeypatch.setenv("NOOPT", "1")
  plain, _ = _run(Tensor(a).matmul(Tensor(b), dtype=dtypes.float32))
  # float tolerance across Opts (docs/architecture.md): the CPU heuristics unroll k, which reorders the sum; 1e-5 of the largest |out|
  np.testing.assert_allclose(got, plain, rtol=0, atol=1e-5 * np.abs(plain).max())
  if _gpu_target() is not None:
    assert OptOps.TC in _ops(ran) and Ops.WMMA in _uops(ran), [r.opts for r in ran]
    # the tensor cores sum k in the same order as the plain loop (semantics.wmma): the same bits, not just close
    assert semantics.same_bits(got, plain, dtypes.float32).all()
  else: assert OptOps.TC not in _ops(ran) and Ops.WMMA not in _uops(ran)

def test_grouped_reduction_through_local_memory_when__gpu_target():
  x = (np.arange(4 * 2048) % 97 - 48).astype(np.int32).reshape(4, 2048)
  got, ran = _run(Tensor(x).sum(1))
  assert np.array_equal(got, x.sum(1))
  fx = np.random.default_rng(6).standard_normal((4, 2048)).astype(np.float32)
  fgot, fran = _run(Tensor(fx).sum(1))
  # GROUP reorders the float sum (docs/architecture.md allows it across Opts): within 1e-5 of the largest partial magnitude
  np.testing.assert_allclose(fgot, fx.astype(np.float64).sum(1), rtol=0, atol=1e-5 * np.abs(fx).sum(1).max())
  for r in (ran, fran):
    if _gpu_target() is not None:
      assert _ops(r) & {OptOps.GROUP, OptOps.GROUPTOP} and {Ops.DEFINE_LOCAL, Ops.BARRIER} <= _uops(r), [k.opts for k in r]
    else: assert not _ops(r) & {OptOps.GROUP, OptOps.GROUPTOP} and Ops.DEFINE_LOCAL not in _uops(r)

def test_work_items_within_the_targets_limits_when__gpu_target():
  x = np.arange(64 * 96, dtype=np.float32).reshape(64, 96)
  got, ran = _run(Tensor(x) * 2 + 1)
  assert np.array_equal(got, x * 2 + 1)
  lsz = [r.spec.local_size for r in ran]
  if (t := _gpu_target()) is not None:
    assert OptOps.LOCAL in _ops(ran) and all(1 < np.prod(s) <= t.max_threads_per_block for s in lsz), lsz
    assert all(s[d] <= t.max_block_dims[d] for s in lsz for d in range(3))
  else: assert OptOps.LOCAL not in _ops(ran) and lsz == [(1, 1, 1)] * len(ran)

def test_emulate_names_a_gpu(monkeypatch: pytest.MonkeyPatch):
  for bad in ("TPU", "CPU"):
    monkeypatch.setenv("EMULATE", bad)
    with pytest.raises(ValueError, match=f"EMULATE='{bad}' is not allowed: EMULATE takes CUDA or AMD"): (Tensor([1.0, 2.0]) + 1).numpy()
