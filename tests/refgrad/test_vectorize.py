"""Vector memory access (refgrad/vectorize.py): upcast copies of loads and stores become one vector access exactly
where the elements are consecutive and the first index is provably aligned, up to the target's widest access; the
program computes the same bits either way (CPU == PYTHON == the scalar program)."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, schedule
from refgrad.kernel import Kernel
from refgrad.opt import Opt, OptOps, apply_opt
from refgrad.target import CPU, CUDA, Target
from refgrad.uop.ops import Ops
from tests.refgrad.test_opt import _run


def _item(t: Tensor) -> schedule.ScheduleItem:
  items, done = schedule.create_schedule([t.uop], "CPU")
  schedule.run_schedule(items, set(done.values()))
  return items[-1]

def _widths(k: Kernel) -> tuple[list[int], list[int]]:
  """Lane counts of the global LOADs and of the STOREs of the lowered kernel."""
  uops = k.lower().toposort
  loads = sorted(u.dtype.count for u in uops if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL)
  stores = sorted(u.src[2].dtype.count for u in uops if u.op is Ops.STORE)
  return loads, stores

def _x(*shape: int) -> Tensor: return Tensor(np.random.default_rng(1).standard_normal(shape).astype(np.float32), device="CPU")

@pytest.mark.parametrize("target,amt,width", [(CPU, 4, 4), (CPU, 8, 8), (CUDA, 8, 4), (CUDA, 2, 2)], ids=["CPU4", "CPU8", "CUDA8", "CUDA2"])
def test_aligned_upcast_becomes_vectors_up_to_the_targets_width(target: Target, amt: int, width: int):
  """CPU accesses up to 32 bytes, CUDA up to 16: an upcast of 8 floats is one access on CPU, two on CUDA."""
  it = _item(_x(16, 64) * 2 + _x(16, 64))
  k0 = Kernel(it.ast, "k", target)
  k = apply_opt(k0, Opt(OptOps.UPCAST, 1, amt))
  assert _widths(k) == ([width] * (2 * amt // width), [width] * (amt // width))
  ref = _run(it, k0, "CPU")
  for dev in ("CPU", "PYTHON"): assert np.array_equal(_run(it, k, dev).view(np.uint32), ref.view(np.uint32))

def test_unaligned_or_strided_accesses_stay_scalar():
  """x[:, 1:] of a 65-wide array starts rows at 65*r + 1 (not a multiple of 4): its loads stay scalar while the
  contiguous output is still stored as vectors; a transposed read is strided and stays scalar too."""
  it = _item(_x(16, 65)[:, 1:] + 1)
  k = apply_opt(Kernel(it.ast, "k", CPU), Opt(OptOps.UPCAST, 1, 4))
  assert _widths(k) == ([1, 1, 1, 1], [4])
  ref = _run(it, Kernel(it.ast, "k", CPU), "CPU")
  for dev in ("CPU", "PYTHON"): assert np.array_equal(_run(it, k, dev).view(np.uint32), ref.view(np.uint32))
  it = _item(_x(64, 16).T + 1)
  assert _widths(apply_opt(Kernel(it.ast, "k", CPU), Opt(OptOps.UPCAST, 1, 4))) == ([1, 1, 1, 1], [4])
