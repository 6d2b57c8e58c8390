"""The conformance `kernels` group: every Opt kind x target appears (TC where the target has tensor cores), GROUP on
the GPU targets, PADTO after an UPCAST, a two-stage reduction and a launch past the PYTHON executor's lane batch; the
cases are the same every run."""
from __future__ import annotations

from conformance.opt_kernels import BIG, kernel_cases
from refgrad.opt import OptOps
from refgrad.runtime.simt import MAX_LANES


def test_every_opt_kind_and_target_is_covered_deterministically():
  cases = kernel_cases()
  seen = {(c.target, o[0]) for c in cases for o in c.opts}
  for t in ("CPU", "CUDA", "AMD"):
    for k in OptOps:
      if k is OptOps.TC and t == "CPU": continue   # no tensor cores on the CPU target
      assert (t, k.name) in seen, (t, k.name)
  assert any([o[0] for o in c.opts] == ["UPCAST", "PADTO"] for c in cases)
  assert any(c.kernel.startswith("recipe0/") for c in cases)           # the two-stage sum
  assert any(c.kernel == "big_launch" for c in cases) and BIG > MAX_LANES
  assert [c.to_json() for c in cases] == [c.to_json() for c in kernel_cases()]
