"""Opts on kernels from real tensor programs: each valid Opt alone and random valid Opt lists give
integer results identical to the unoptimized kernel and float results within a tolerance, and CPU equals
PYTHON bit for bit on every optimized program. Plus each Opt's validity rules and messages."""
from __future__ import annotations

import random

import numpy as np
import pytest

from refgrad import Tensor, dtypes, schedule
from refgrad.device import Buffer
from refgrad.kernel import Kernel
from refgrad.lazy import buffer_of
from refgrad.opt import InvalidOptError, Opt, OptOps, apply_opt, apply_opts, valid_opts
from refgrad.program import Runner
from refgrad.uop import semantics
from refgrad.uop.ops import Ops

# float tolerance across Opts: UNROLL and PADTO may reorder a float reduction (ARCHITECTURE.md allows it);
# results must agree within rtol 1e-5 of the largest magnitude in the output (inputs are O(1), sums <= 64 terms)
RTOL = 1e-5


def _programs() -> dict[str, Tensor]:
  rng = np.random.default_rng(0)
  f = lambda *s: Tensor(rng.standard_normal(s).astype(np.float32), device="CPU")
  i = lambda *s: Tensor(rng.integers(-50, 50, s).astype(np.int32), device="CPU")
  x = f(4, 12)
  return {
    "matmul": f(12, 10) @ f(10, 6),
    "int_matmul": i(6, 8) @ i(8, 5),
    "sum_axis": f(6, 7, 5).sum(1),
    "max_axis": i(9, 6).max(0),
    "softmax_exp": (x - x.max(1, keepdim=True)).exp(),
    "conv2d": f(1, 2, 7, 7).conv2d(f(3, 2, 3, 3), padding=1),
    "elementwise_pad": (f(5, 6).permute(1, 0) * 2 + 1).pad(((1, 2), (0, 3))),
    "int_mixed": (i(8, 6) * 3 + i(8, 6)).sum(1) * 7,
  }

@pytest.fixture(scope="module")
def kernels() -> list[tuple[str, schedule.ScheduleItem]]:
  out = []
  for name, t in _programs().items():
    items, done = schedule.create_schedule([t.uop], "CPU")
    schedule.run_schedule(items, set(done.values()))   # keep every buffer: each item can run again on its own
    out += [(f"{name}:{k}", it) for k, it in enumerate(items) if it.ast is not None]
  return out

def _run(it: schedule.ScheduleItem, k: Kernel, device: str) -> np.ndarray:
  bufs = [Buffer(device, b.arg[2], b.dtype) for b in it.bufs]
  for dst, src in zip(bufs[1:], it.bufs[1:]): dst.copyin(buffer_of[src].numpy())
  Runner.from_sink("k", k.lower(), device)(*bufs)
  return bufs[0].numpy()

def _check(it: schedule.ScheduleItem, k: Kernel, ref: np.ndarray) -> None:
  cpu, py = _run(it, k, "CPU"), _run(it, k, "PYTHON")
  assert semantics.same_bits(cpu, py, it.bufs[0].dtype).all(), f"CPU != PYTHON with {k.applied}"
  if dtypes.is_float(it.bufs[0].dtype):
    np.testing.assert_allclose(cpu, ref, rtol=0, atol=RTOL * max(1.0, float(np.abs(ref).max())), err_msg=str(k.applied))
  else: np.testing.assert_array_equal(cpu, ref, err_msg=str(k.applied))


def test_every_single_valid_opt(kernels):
  n = 0
  for name, it in kernels:
    k = Kernel(it.ast, "k")
    ref = _run(it, k, "CPU")
    opts = valid_opts(k)
    assert opts, name
    for o in opts:
      _check(it, apply_opt(k, o), ref)
      n += 1
  assert n > 100

def test_random_valid_opt_lists(kernels):
  rnd = random.Random(1234)
  for name, it in kernels:
    k0 = Kernel(it.ast, "k")
    ref = _run(it, k0, "CPU")
    for _ in range(4):
      k = k0
      for _ in range(rnd.randint(2, 4)):
        if not (opts := valid_opts(k)): break
        k = apply_opt(k, rnd.choice(opts))
      _check(it, k, ref)
      assert apply_opts(k0, k.applied).lower() is k.lower(), f"{name}: {k.applied} is not deterministic"


def _kernel(t: Tensor) -> Kernel:
  items, _ = schedule.create_schedule([t.uop], "CPU")
  return Kernel(items[-1].ast, "k")

def test_opts_change_the_program_as_named():
  k = _kernel(Tensor.ones(8, 6) @ Tensor.ones(6, 4))   # axes (8, 4 | 6)
  assert k.full_shape == (8, 4, 6)
  up = apply_opt(k, Opt(OptOps.UPCAST, 0, 2))
  assert up.full_shape == (4, 2, 4, 6) and [up.kinds[r] for r in up.axes] == ["global", "upcast", "global", "reduce"]
  assert len(up.lower().src) == 2                                      # one store per upcast value
  loc = apply_opt(k, Opt(OptOps.LOCAL, 1, 4))
  specials = {u.arg for u in loc.lower().toposort if u.op is Ops.SPECIAL}
  assert ("lidx0", 4) in specials and any(n.startswith("gidx") for n, _ in specials)
  unr = apply_opt(k, Opt(OptOps.UNROLL, 0, 0))
  assert not any(u.op in (Ops.RANGE, Ops.DEFINE_ACC) for u in unr.lower().toposort)   # the whole reduction is unrolled
  pad = apply_opt(k, Opt(OptOps.PADTO, 1, 8))
  assert pad.full_shape == (8, 8, 6)
  sw = apply_opt(k, Opt(OptOps.SWAP, 0, 1))
  assert sw.full_shape == (4, 8, 6)

@pytest.mark.parametrize("opt,why", [
  (Opt(OptOps.UPCAST, 2, 2), "axis must be 0..1 among the output axes"),
  (Opt(OptOps.UPCAST, 0, 3), "3 does not divide the axis size 8"),
  (Opt(OptOps.UPCAST, 0, 1), "arg must be an int >= 2"),
  (Opt(OptOps.UNROLL, 1, 2), "axis must be 0..0 among the reduce axes"),
  (Opt(OptOps.LOCAL, 0, 512), "does not divide"),
  (Opt(OptOps.PADTO, 0, 4), "already a multiple of 4"),
  (Opt(OptOps.SWAP, 1, 0), "needs two output axes"),
  (Opt(OptOps.GROUP, 1, 2), "axis must be 0..0 among the reduce axes"),
  (Opt(OptOps.GROUPTOP, 0, 4), "4 does not divide the axis size 6"),
  (Opt(OptOps.TC, 0, 0), "target CPU has no tensor cores"),
])
def test_invalid_opts_say_why(opt, why):
  k = _kernel(Tensor.ones(8, 6) @ Tensor.ones(6, 4))
  with pytest.raises(InvalidOptError, match=why) as e: apply_opt(k, opt)
  assert repr(opt) in str(e.value) and "8:global" in str(e.value)

def test_limits_and_nolocals():
  k = _kernel(Tensor.ones(64, 32) @ Tensor.ones(32, 64))
  k2 = apply_opts(k, [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UNROLL, 0, 2)])
  with pytest.raises(InvalidOptError, match="product would be 32 > 16"): apply_opt(k2, Opt(OptOps.UPCAST, 1, 2))
  k3 = apply_opts(k, [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16)])
  with pytest.raises(InvalidOptError, match="512 > 256 work-items"): apply_opt(k3, Opt(OptOps.LOCAL, 0, 2))
  nl = apply_opt(k, Opt(OptOps.NOLOCALS))
  with pytest.raises(InvalidOptError, match="NOLOCALS forbids"): apply_opt(nl, Opt(OptOps.LOCAL, 0, 2))
  with pytest.raises(InvalidOptError, match="already has local axes"): apply_opt(k3, Opt(OptOps.NOLOCALS))
  assert all(o.op is not OptOps.LOCAL for o in valid_opts(nl))

def test_padto_refuses_undefined_ops_on_padded_lanes():
  a = Tensor(np.arange(1, 7, dtype=np.int32), device="CPU")
  k = _kernel(a._alu(Ops.IDIV, a))
  with pytest.raises(InvalidOptError, match="can be undefined"): apply_opt(k, Opt(OptOps.PADTO, 0, 4))
