"""Opts on kernels from real tensor programs, optimized for each target (CPU, and the CUDA and AMD GPUs: work-groups,
GROUP reductions through local memory, tensor cores): each valid Opt alone and random valid Opt lists give integer
results identical to the unoptimized kernel and float results within a tolerance, and CPU (C) equals PYTHON (the SIMT
executor) bit for bit on every optimized program. Tensor-core kernels are bit-exact with the plain kernel. Plus each
Opt's validity rules and messages, and broken GPU programs that the PYTHON device reports."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from refgrad import Tensor, dtypes, schedule
from refgrad.device import Buffer
from refgrad.kernel import Kernel
from refgrad.lazy import buffer_of
from refgrad.opt import InvalidOptError, Opt, OptOps, apply_opt, apply_opts, valid_opts
from refgrad.program import Runner
from refgrad.runtime.simt import OutOfBoundsError, UndefinedBehaviourError
from refgrad.target import AMD, CPU, CUDA, Target
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp

# float tolerance across Opts: UNROLL, GROUP/GROUPTOP and PADTO may reorder a float reduction (docs/architecture.md allows
# it); results must agree within rtol 1e-5 of the largest magnitude in the output (inputs are O(1), sums <= 256 terms).
# TC keeps the order of k, so tensor-core kernels must match the unoptimized kernel bit for bit.
RTOL = 1e-5


def _programs() -> dict[str, Tensor]:
  rng = np.random.default_rng(0)
  f = lambda *s: Tensor(rng.standard_normal(s).astype(np.float32), device="CPU")
  i = lambda *s: Tensor(rng.integers(-50, 50, s).astype(np.int32), device="CPU")
  h = lambda *s: Tensor(rng.standard_normal(s).astype(np.float16), device="CPU")
  x = f(4, 12)
  return {
    "half_matmul": h(32, 32).matmul(h(32, 16), dtype=dtypes.float32),   # tensor cores: CUDA m16n8k16, AMD 16x16x16
    "long_sum": f(3, 256).sum(1),                                         # GROUP/GROUPTOP have room
    "matmul": f(12, 10) @ f(10, 6),
    "int_matmul": i(6, 8) @ i(8, 5),
    "sum_axis": f(6, 7, 5).sum(1),
    "max_axis": i(9, 6).max(0),
    "softmax_exp": (x - x.max(1, keepdim=True)).exp(),
    "conv2d": f(1, 2, 7, 7).conv2d(f(3, 2, 3, 3), padding=1),
    "elementwise_pad": (f(5, 6).permute(1, 0) * 2 + 1).pad(((1, 2), (0, 3))),
    "int_mixed": (i(8, 6) * 3 + i(8, 6)).sum(1) * 7,
    "int_div": (i(8, 12) // 7 + i(8, 12) % 5).sum(0),          # IDIV/MOD: PADTO must not pad them
    "argmax": f(6, 16).argmax(1),
    "cumsum": f(4, 12).cumsum(1),
    "max_pool": f(1, 2, 8, 8).max_pool2d(),
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


TARGETS = [CPU, CUDA, AMD]

@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_every_single_valid_opt(kernels, target: Target):
  n, used = 0, set()
  for name, it in kernels:
    k = Kernel(it.ast, "k", target)
    ref = _run(it, Kernel(it.ast, "k"), "CPU")
    opts = valid_opts(k)
    assert opts, name
    for o in opts:
      _check(it, ko := apply_opt(k, o), ref)
      if o.op is OptOps.TC:
        assert semantics.same_bits(_run(it, ko, "CPU"), ref, dtypes.float32).all(), f"{name}: {o} is not bit-exact"
      used.add(o.op)
      n += 1
  assert n > 100
  gpu = {OptOps.TC, OptOps.GROUP, OptOps.GROUPTOP, OptOps.LOCAL}
  assert used >= (gpu if target.gpu else gpu - {OptOps.TC}), f"{target.name}: {used}"

@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_random_valid_opt_lists(kernels, target: Target):
  rnd = random.Random(1234)
  for name, it in kernels:
    k0 = Kernel(it.ast, "k", target)
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


# ---- GPU targets: what TC, GROUP and LOCAL refuse, and broken GPU programs the PYTHON device reports -------------

def _gpu_kernel(target: Target, shape: tuple[int, int, int] = (32, 32, 16), dt=dtypes.float16) -> Kernel:
  M, K, N = shape
  a, b = Tensor.empty(M, K, dtype=dt, device="CPU"), Tensor.empty(K, N, dtype=dt, device="CPU")
  items, _ = schedule.create_schedule([a.matmul(b, dtype=dtypes.float32).uop], "CPU")
  return Kernel(items[-1].ast, "k", target)

T0, NL = Opt(OptOps.TC, 0, 0), Opt(OptOps.NOLOCALS)

@pytest.mark.parametrize("target", [CUDA, AMD], ids=lambda t: t.name)
@pytest.mark.parametrize("opts,why", [
  ([Opt(OptOps.UPCAST, 0, 2), T0], "TC must be the first Opt"),
  ([NL, T0], "TC must be the first Opt"),
  ([Opt(OptOps.TC, 0, 2)], r"arg must be 0..1: a tensor core of (CUDA|AMD)"),
  ([Opt(OptOps.TC, 9, 0)], r"axis must be 0..\d among the \(M, N, K\) axis choices"),
  ([Opt(OptOps.TC, 0, 1)], r"takes products of dtypes.bfloat16 values cast to dtypes.float"),
  ([T0, Opt(OptOps.UNROLL, 0, 2)], "the reduction runs on tensor cores: its axes can be neither unrolled nor grouped"),
  ([T0, Opt(OptOps.GROUPTOP, 0, 2)], "the reduction runs on tensor cores"),
  ([NL, Opt(OptOps.GROUP, 0, 2)], "NOLOCALS forbids local axes"),
])
def test_invalid_gpu_opts_say_why(target: Target, opts: list[Opt], why: str):
  *pre, last = opts
  k = apply_opts(_gpu_kernel(target), pre)
  with pytest.raises(InvalidOptError, match=why) as e: apply_opt(k, last)
  assert repr(last) in str(e.value)

def test_tensor_core_shapes_and_inputs_must_fit():
  with pytest.raises(InvalidOptError, match="M axis of size 24 is not a multiple of CUDA_m16n8k16_half_float's M = 16"):
    apply_opt(_gpu_kernel(CUDA, (24, 32, 16)), T0)
  with pytest.raises(InvalidOptError, match="N axis of size 8 is not a multiple of AMD_16x16x16_half_float's N = 16"):
    apply_opt(_gpu_kernel(AMD, (32, 32, 8)), T0)
  assert not [o for o in valid_opts(_gpu_kernel(CUDA, dt=dtypes.float32)) if o.op is OptOps.TC]
  with pytest.raises(InvalidOptError, match="not a single ADD reduction of products of two casts"): apply_opt(_gpu_kernel(CUDA, dt=dtypes.float32), T0)
  with pytest.raises(InvalidOptError, match="target CPU has no tensor cores"): apply_opt(_gpu_kernel(CPU), T0)

def test_local_limits_are_the_targets():
  k = _kernel(Tensor.ones(4096) + 1)
  for tgt, ok, bad in ((CPU, 256, 512), (CUDA, 1024, 2048), (AMD, 1024, 2048)):
    kt = Kernel(k.ast, "k", tgt)
    assert apply_opt(kt, Opt(OptOps.LOCAL, 0, ok)).local_size == ok
    with pytest.raises(InvalidOptError, match=f"workgroup would have {bad} > {ok} work-items"): apply_opt(kt, Opt(OptOps.LOCAL, 0, bad))
  tiny = dataclasses.replace(CUDA, shared_memory_per_block=64)   # 16 float partials fit, 32 do not
  long = Kernel(_kernel(Tensor.ones(4, 256).sum(1)).ast, "k", tiny)
  apply_opt(long, Opt(OptOps.GROUP, 0, 16))
  with pytest.raises(InvalidOptError, match="the partials of the grouped reductions would need 128 bytes of local memory > 64"):
    apply_opt(long, Opt(OptOps.GROUPTOP, 0, 32))

def _group_sink(barrier: bool = True, local_scale: int = 1):
  """A GROUPTOP-16 sum over 256 (CUDA), lowered; optionally with its BARRIER taken out, or its local memory shrunk."""
  k = apply_opt(Kernel(_kernel(Tensor.empty(4, 256).sum(1)).ast, "k", CUDA), Opt(OptOps.GROUPTOP, 0, 16))
  sink = k.lower()
  sub, keep = {}, []
  for u in sink.toposort:
    if u.op is Ops.BARRIER and not barrier: keep += list(u.src)   # the stores of the partials, now reached from the sink
    if u.op is Ops.LOAD and not barrier and u.src[-1].op is Ops.BARRIER: sub[u] = u.replace(src=u.src[:-1])
    if u.op is Ops.DEFINE_LOCAL and local_scale != 1: sub[u] = u.replace(dtype=u.dtype.base.ptr(u.dtype.size // local_scale, local=True))
  return UOp.sink(*sink.src, *keep).substitute(sub) if sub else sink

def _run_sum(sink) -> np.ndarray:
  out, x = Buffer("PYTHON", 4, dtypes.float32), Buffer("PYTHON", 1024, dtypes.float32)
  x.copyin(np.arange(1024, dtype=np.float32) % 7)
  Runner.from_sink("k", sink, "PYTHON")(out, x)
  return out.numpy()

def test_broken_group_programs_are_reported_by_the_python_device():
  """The grouped reduction is right as lowered; without its barrier the reads of the partials race with their writes;
  with half the local memory its partials are stored out of bounds. Both name the uop and the thread."""
  sink = _group_sink()
  assert any(u.op is Ops.BARRIER for u in sink.toposort) and any(u.op is Ops.DEFINE_LOCAL for u in sink.toposort)
  assert np.array_equal(_run_sum(sink), (np.arange(1024, dtype=np.float32) % 7).reshape(4, 256).sum(1))
  with pytest.raises(UndefinedBehaviourError, match=r"local memory race in kernel k at uop \d+ \((LOAD|STORE).*thread gidx=\(\d, 0, 0\) lidx="):
    _run_sum(_group_sink(barrier=False))
  with pytest.raises(OutOfBoundsError, match=r"out-of-bounds STORE in kernel k at uop \d+ \(STORE.*thread gidx=\(0, 0, 0\) lidx=\(8, 0, 0\) "
                                             r"accesses index 8 of local temp0 with 8 elements"):
    _run_sum(_group_sink(local_scale=2))
