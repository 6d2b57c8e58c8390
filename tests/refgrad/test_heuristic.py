"""The hand-coded heuristics (refgrad/heuristic.py): which Opts each kind of kernel gets on each target, and that the
choice is a valid, reproducible Opt list whose program gives the unoptimized kernel's results (CPU == PYTHON)."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, dtypes, schedule
from refgrad.heuristic import MIN_WORK, hand_coded_optimizations
from refgrad.kernel import Kernel
from refgrad.opt import Opt, OptOps, apply_opts
from refgrad.target import AMD, CPU, CUDA, Target
from tests.refgrad.test_opt import _run


def _kernel(t: Tensor, target: Target) -> Kernel:
  items, _ = schedule.create_schedule([t.uop], "CPU")
  return Kernel(items[-1].ast, "k", target)

def _opts(t: Tensor, target: Target) -> list[Opt]: return hand_coded_optimizations(_kernel(t, target)).applied

def E(*s: int, dt=dtypes.float32) -> Tensor: return Tensor.empty(*s, dtype=dt, device="CPU")

def test_cpu_choices():
  assert _opts(E(256, 256) @ E(256, 256), CPU) == [Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.UPCAST, 1, 4)]   # reuse both loads
  assert _opts(E(512, 256) + 1, CPU) == [Opt(OptOps.UPCAST, 1, 4)]                                  # vector loads/stores
  assert _opts(E(256, 512).exp().sum(1), CPU) == [Opt(OptOps.UNROLL, 0, 4)], "no reuse: a reduction is not upcast"
  assert _opts(E(16384, 6).sum(1) * 2, CPU)[0] == Opt(OptOps.UNROLL, 0, 0), "a short reduction is unrolled whole"
  assert 32 * 64 < MIN_WORK and _opts(E(32, 64) + 1, CPU) == [] and _opts(E(8, 8) @ E(8, 8), CPU) == [], "small kernels run as they are"
  assert not {o.op for o in _opts(E(4, 4096).sum(1), CPU)} & {OptOps.GROUP, OptOps.GROUPTOP, OptOps.LOCAL, OptOps.TC}

@pytest.mark.parametrize("target", [CUDA, AMD], ids=lambda t: t.name)
def test_gpu_choices(target: Target):
  half = _opts(E(256, 256, dt=dtypes.float16).matmul(E(256, 256, dt=dtypes.float16), dtype=dtypes.float32), target)
  assert half[0] == Opt(OptOps.TC, 0, 0) and OptOps.LOCAL in {o.op for o in half}
  bf = _opts(E(64, 64, dt=dtypes.bfloat16).matmul(E(64, 64, dt=dtypes.bfloat16), dtype=dtypes.float32), target)
  assert bf[0] == Opt(OptOps.TC, 0, 1), "the tensor core that takes bfloat16"
  assert _opts(E(4, 4096).sum(1), target)[0] == Opt(OptOps.GROUPTOP, 0, 16), "few outputs, long reduction: shared by 16 work-items"
  assert OptOps.GROUPTOP not in {o.op for o in _opts(E(2048, 256).sum(1), target)}, "enough outputs to fill the GPU"
  small = _opts(E(32, 64) + 1, target)
  assert small and {o.op for o in small} == {OptOps.LOCAL}, "small kernels still get work-items"
  assert np.prod([o.arg for o in small]) <= 256

@pytest.mark.parametrize("target", [CPU, CUDA, AMD], ids=lambda t: t.name)
def test_choice_is_valid_reproducible_and_correct(target: Target):
  rng = np.random.default_rng(2)
  a, b = (Tensor(rng.standard_normal(s).astype(np.float16), device="CPU") for s in ((256, 256), (256, 64)))
  for t in (a.matmul(b, dtype=dtypes.float32), a.float().exp2().sum(0), a.float() * 3 - 1):
    items, done = schedule.create_schedule([t.uop], "CPU")
    schedule.run_schedule(items, set(done.values()))
    it = items[-1]
    k0 = Kernel(it.ast, "k", target)
    k = hand_coded_optimizations(k0)
    assert k.applied and apply_opts(k0, k.applied).lower() is k.lower()
    ref, cpu, py = _run(it, k0, "CPU"), _run(it, k, "CPU"), _run(it, k, "PYTHON")
    assert np.array_equal(cpu.view(np.uint32), py.view(np.uint32))
    np.testing.assert_allclose(cpu, ref, rtol=0, atol=1e-5 * max(1.0, float(np.abs(ref).max())))   # reordered float sums only
