"""The AMD runtime end to end on the mock AMD GPU (MOCKGPU=1): launches through PM4 (the dispatch recipe in an indirect
buffer), copies through SDMA, results byte-identical to the PYTHON device emulating AMD with WMMA/GROUP/locals in use;
kernel descriptors, asynchrony, faults, deadlocks, hazards, ring wrap, two GPUs and moves to NV/CPU/PYTHON, DEBUG=2
times from RELEASE_MEM timestamps, TinyJit replays as one indirect buffer with one doorbell."""
from __future__ import annotations

import time

import numpy as np
import pytest

from refgrad import Tensor, TinyJit, dtypes
from refgrad import schedule as sched
from refgrad.device import Buffer, Device, target_for
from refgrad.program import Runner
from refgrad.runtime import ops_amd
from refgrad.runtime.driver import GPUDeadlock, GPUFault, GPUHazard
from refgrad.uop.ops import Ops, UOp

from .programs import add_one, amd_ir


@pytest.fixture(autouse=True)
def mockgpu(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("MOCKGPU", "1")
  monkeypatch.setenv("EMULATE", "AMD")   # PYTHON compiles the very programs AMD runs
  monkeypatch.delenv("JIT", raising=False)


def _amd(name: str = "AMD") -> ops_amd.AMDDevice:
  hcq = Device[name].hcq   # type: ignore[attr-defined]
  assert isinstance(hcq, ops_amd.AMDDevice)
  return hcq

def _bits(t: Tensor) -> bytes: return np.ascontiguousarray(t.numpy()).tobytes()

_rng = np.random.default_rng(1)
PROGRAMS = {
  "matmul": (lambda a, b: a @ b, [_rng.standard_normal((24, 40)).astype(np.float32), _rng.standard_normal((40, 8)).astype(np.float32)]),
  "half matmul (WMMA)": (lambda a, b: a.matmul(b, dtype=dtypes.float32), [_rng.standard_normal((64, 48)).astype(np.float16),
                                                                        _rng.standard_normal((48, 32)).astype(np.float16)]),
  "long sum (GROUP, LDS)": (lambda a: a.sum(1), [_rng.standard_normal((4, 4096)).astype(np.float32)]),
  "softmax": (lambda a: a.softmax(), [_rng.standard_normal((16, 33)).astype(np.float32)]),
  "conv2d": (lambda x, w: x.conv2d(w, padding=1), [_rng.standard_normal((1, 3, 9, 9)).astype(np.float32),
                                                   _rng.standard_normal((4, 3, 3, 3)).astype(np.float32)]),
  "int ops": (lambda a, b: (a // b) * 3 + (a % b) - (a << 2), [_rng.integers(-1000, 1000, 500).astype(np.int32),
                                                               _rng.integers(1, 50, 500).astype(np.int32)]),
}

@pytest.mark.parametrize("name", list(PROGRAMS))
def test_results_equal_python_device_byte_for_byte(name: str, monkeypatch: pytest.MonkeyPatch):
  fn, ins = PROGRAMS[name]
  drv = _amd().drv
  launches, copies = drv.counters["dispatch"], drv.counters["sdma_copy"]
  with sched.recording() as log: got = _bits(fn(*[Tensor(x, device="AMD") for x in ins]))
  ran = [step.runner for step in log if step.runner is not None]
  want = _bits(fn(*[Tensor(x, device="PYTHON") for x in ins]))
  assert got == want
  assert drv.counters["dispatch"] > launches                  # kernels ran as DISPATCH_DIRECTs
  assert drv.counters["sdma_copy"] >= copies + len(ins) + 1   # inputs in and the result out through SDMA
  uops = {u.op for r in ran for u in r.spec.uops}
  if "WMMA" in name: assert any(u.op is Ops.WMMA and u.arg == "AMD_16x16x16_half_float" for r in ran for u in r.spec.uops)
  if "GROUP" in name: assert {Ops.DEFINE_LOCAL, Ops.BARRIER} <= uops

def test_amd_device_compiles_for_the_amd_target(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.delenv("EMULATE")
  assert target_for("AMD").name == "AMD" and target_for("AMD:1").name == "AMD"


def test_kernel_descriptor_fills_the_dispatch_registers(monkeypatch: pytest.MonkeyPatch):
  """AMD_CODE=ir: the descriptor refgrad makes for a serialized program (its isa twin is below)."""
  r = _reduce_runner(name := amd_ir(monkeypatch))
  prg = r.prg
  assert isinstance(prg, ops_amd.AMDProgram) and not isinstance(prg, ops_amd.AMDISAProgram)
  kd = prg.kd
  img = np.empty(64, np.uint8)
  dev = _amd(name)   # the descriptor is in device memory: read it back through the copy queue
  st = dev.drv.alloc(64, host_visible=True)
  q = dev.ordered("copy").copy(st.va, prg.image.va, 64)
  dev.wait_signal(dev.timeline, dev.finish(q))
  img[:] = st.host
  assert ops_amd.KernelDescriptor.unpack(img.tobytes()) == kd
  shared = sum(u.dtype.size * u.dtype.base.itemsize for u in r.spec.uops if u.op is Ops.DEFINE_LOCAL)
  assert shared > 0 and kd.group_segment == shared and kd.entry == 256
  assert (kd.rsrc2 >> 15) & 0x1FF == -(-shared // 512) and (kd.rsrc2 >> 1) & 0x1F == 2          # LDS_SIZE, USER_SGPR
  assert kd.properties == (1 << 3) | (1 << 10)                                                   # kernarg pointer, wave32
  q = dev.queue("compute")
  args = prg.args([0] * prg.nbufs, [0] * prg.nvars)
  q.exec(prg, args, r.spec.global_size, r.spec.local_size)
  w = q.words
  assert w[:4] == ops_amd.pkt3("SET_SH_REG", 0x20C, ((prg.image.va + 256) >> 8) & 0xFFFFFFFF, (prg.image.va + 256) >> 40)
  assert w[4:8] == ops_amd.pkt3("SET_SH_REG", 0x212, kd.rsrc1, kd.rsrc2)
  s = q.cmds[0][2]["kernarg"][0]
  assert w[s] | (w[s + 1] << 32) == args.va and w[s - 2] == 0xC0027600 and w[s - 1] == 0x240
  assert ops_amd.pkt3("DISPATCH_DIRECT", *r.spec.global_size, 0x8005) == w[-5:]   # no partial flush after it: launches overlap

def test_isa_kernel_descriptor_fills_the_dispatch_registers():
  """AMD_CODE=isa: LLVM's descriptor, read back from device memory, gives the dispatch its RSRC registers and entry."""
  r = _reduce_runner("AMD_ISA")
  prg = r.prg
  assert isinstance(prg, ops_amd.AMDISAProgram)
  kd, dev = prg.code.kd, _amd("AMD_ISA")
  st = dev.drv.alloc(64, host_visible=True)
  q = dev.ordered("copy").copy(st.va, prg.image.va + prg.code.kd_offset, 64)
  dev.wait_signal(dev.timeline, dev.finish(q))
  assert ops_amd.KernelDescriptor.unpack(bytes(st.host)) == kd
  assert prg.entry == prg.image.va + prg.code.kd_offset + kd.entry and prg.entry % 256 == 0
  shared = sum(u.dtype.size * u.dtype.base.itemsize for u in r.spec.uops if u.op is Ops.DEFINE_LOCAL)
  assert kd.group_segment >= shared > 0 and (prg.rsrc[1] >> 15) & 0x1FF == -(-kd.group_segment // 512)   # LDS_SIZE as dispatched
  assert prg.rsrc[0] == kd.rsrc1 and prg.rsrc[1] & ~(0x1FF << 15) == kd.rsrc2 & ~(0x1FF << 15) and prg.user_sgprs == (kd.rsrc2 >> 1) & 0x1F
  assert kd.properties & (1 << 3) and kd.properties & (1 << 10)                                  # kernarg pointer, wave32
  q = dev.queue("compute")
  args = prg.args([0] * prg.nbufs, [0] * prg.nvars)
  q.exec(prg, args, r.spec.global_size, r.spec.local_size)
  w = q.words
  assert w[:4] == ops_amd.pkt3("SET_SH_REG", 0x20C, (prg.entry >> 8) & 0xFFFFFFFF, prg.entry >> 40)
  assert w[4:8] == ops_amd.pkt3("SET_SH_REG", 0x212, prg.rsrc[0], prg.rsrc[1])
  s = q.cmds[0][2]["kernarg"][0]
  assert w[s] | (w[s + 1] << 32) == args.va


def _reduce_runner(device: str = "AMD") -> Runner:
  x = Tensor(np.ones((4, 4096), np.float32), device=device)
  with sched.recording() as log: x.sum(1).realize()
  return next(r for r in (step.runner for step in log) if r is not None and any(u.op is Ops.DEFINE_LOCAL for u in r.spec.uops))


def test_launch_returns_before_the_kernel_runs():
  dev = _amd()
  r, out, inp = add_one("AMD", 64)
  dev.synchronize()
  n = dev.drv.counters["dispatch"]
  assert r(out, inp, wait=False) is None
  assert dev.timeline.value < dev.timeline_value - 1 and dev.drv.counters["dispatch"] == n
  assert np.array_equal(out.numpy(), np.arange(64, dtype=np.float32) + 1)
  assert dev.drv.counters["dispatch"] == n + 1


def test_kernel_fault_surfaces_at_next_wait_and_device_recovers(monkeypatch: pytest.MonkeyPatch):
  """AMD_CODE=ir: the serialized program names the uop that faulted (its isa twin is below)."""
  from refgrad.codegen import to_linear
  name = amd_ir(monkeypatch)
  dev = _amd(name)
  g0 = UOp.define_global(0, dtypes.float32, 4)
  i = UOp.range(8, 0)
  r = Runner("oob_store", to_linear(UOp(Ops.SINK, dtypes.void, (g0.store(i, UOp.const(dtypes.float32, 1.0)),)), Device[name].renderer), name)
  buf = Buffer(name, 4, dtypes.float32)
  r(buf, wait=False)
  with pytest.raises(GPUFault, match="oob_store") as e: dev.synchronize()
  assert e.value.kernel == "oob_store" and e.value.device == name and e.value.engine == "mmu" and "STORE" in str(e.value.uop)
  assert e.value.queue == dev.compute.handle.name and e.value.dword_offset is not None
  assert (Tensor(np.arange(10, dtype=np.float32), device=name) * 2).tolist() == [2.0 * i for i in range(10)]


def test_isa_kernel_fault_surfaces_at_next_wait_and_device_recovers():
  """AMD_CODE=isa: the fault names the kernel (the runtime registered the code object's symbols with the driver, as
  ROCr tells a debugger), the PC and instruction, the lane and the address (no uop: machine code has none); the device
  stays usable."""
  from refgrad.codegen import to_linear
  dev = _amd("AMD_ISA")
  g0 = UOp.define_global(0, dtypes.float32, 4)
  i = UOp.range(8, 0)
  r = Runner("oob_store", to_linear(UOp(Ops.SINK, dtypes.void, (g0.store(i, UOp.const(dtypes.float32, 1.0)),)), Device["AMD_ISA"].renderer), "AMD_ISA")
  buf = Buffer("AMD_ISA", 4, dtypes.float32)
  r(buf, wait=False)
  with pytest.raises(GPUFault, match=r"global_store_b\d+ .*MMU fault: lane \d+ of wave 0: global store") as e: dev.synchronize()
  assert e.value.kernel == "oob_store" and "kernel oob_store: PC 0x" in e.value.what and e.value.device.startswith("AMD")
  assert e.value.engine == "mmu" and e.value.uop is None and "RDNA3 code at" not in str(e.value)
  assert e.value.address is not None and e.value.queue == dev.compute.handle.name and e.value.dword_offset is not None
  assert (Tensor(np.arange(10, dtype=np.float32), device="AMD_ISA") * 2).tolist() == [2.0 * i for i in range(10)]


def test_isa_integer_division_by_zero_faults_in_checked_mode(monkeypatch: pytest.MonkeyPatch):
  """AMD_CODE=isa: IDIV/MOD by 0 is undefined behaviour; in checked mode the LLVM IR guards the divisor with
  llvm.debugtrap, whose s_trap the mock reports as the division by zero (as the PYTHON device does); unchecked, the
  division is total (by 0 gives 0), as on the CPU."""
  a, b = np.array([7, -9, 4], np.int32), np.array([2, 0, 3], np.int32)
  assert (Tensor(a, device="AMD_ISA") // Tensor(b + (b == 0), device="AMD_ISA")).tolist() == [3, -9, 1]   # no zero: no trap
  with pytest.raises(GPUFault, match=r"lane 1 of wave 0: s_trap 3: integer division by zero"):
    (Tensor(a, device="AMD_ISA") // Tensor(b, device="AMD_ISA")).tolist()
  monkeypatch.setenv("CHECKED", "0")   # the same kernel, compiled again without the trap (the kernel cache keys on CHECKED)
  assert (Tensor(a, device="AMD_ISA") // Tensor(b, device="AMD_ISA")).tolist() == [3, 0, 1]
  monkeypatch.setenv("CHECKED", "1")
  with pytest.raises(GPUFault, match="integer division by zero"): (Tensor(a, device="AMD_ISA") // Tensor(b, device="AMD_ISA")).tolist()


def test_unsatisfiable_wait_is_a_deadlock_within_a_second():
  dev = _amd()
  sig = dev.new_signal(0)
  v = dev.finish(dev.ordered("compute").wait(sig, 1))
  st = time.perf_counter()
  with pytest.raises(GPUDeadlock, match="no queue can move") as e: dev.synchronize()
  assert time.perf_counter() - st < 1.0 and "WAIT_REG_MEM64" in str(e.value) and "rptr" in str(e.value)
  sig.value = 1
  dev.synchronize()
  assert dev.timeline.value == v


CODE = {"AMD": ops_amd.AMDProgram, "AMD_ISA": ops_amd.AMDISAProgram}   # each code path ("AMD": ir, pinned by amd_ir), its program class


@pytest.mark.parametrize("device", list(CODE))
def test_missing_wait_between_queues_is_a_hazard(monkeypatch: pytest.MonkeyPatch, device: str):
  monkeypatch.setenv("MOCKGPU_HAZARDS", "1")
  if device == "AMD_ISA": monkeypatch.setenv("CHECKED", "0")   # the machine code reads `inp` unwritten: checked mode reports that first
  compiled_on = amd_ir(monkeypatch) if device == "AMD" else device
  dev = ops_amd.make_device(f"{device}:7").hcq
  assert isinstance(dev, ops_amd.AMDDevice)
  r, _, _ = add_one(compiled_on, 16)
  prg = CODE[device](dev, r.prg.name, r.lib)
  out, inp = dev.drv.alloc(64), dev.drv.alloc(64)
  q = dev.ordered("compute")
  dev.finish(q.exec(prg, prg.args([out.va, inp.va], [], q), r.spec.global_size, r.spec.local_size))
  staging = dev.drv.alloc(64, host_visible=True)
  done = dev.new_signal(0)
  dev.queue("copy").copy(staging.va, out.va, 64).signal(done, 1).submit(dev)   # SDMA reads `out` without waiting for the kernel
  with pytest.raises(GPUHazard) as e:
    dev.synchronize()
    dev.wait_signal(done, 1)
  assert f"kernel {r.prg.name}" in str(e.value) and "RDNA3 code at" not in str(e.value)   # isa: the registered code object's symbol
  assert "AMD:7 copy ring byte" in str(e.value) and "AMD:7 compute" in str(e.value)


@pytest.mark.parametrize("device", list(CODE))
def test_rings_and_indirect_buffers_wrap(monkeypatch: pytest.MonkeyPatch, device: str):
  r, _, _ = add_one(amd_ir(monkeypatch) if device == "AMD" else device, 16)   # before patching: this may open the device, which must keep its full-size rings
  monkeypatch.setattr(ops_amd.AMDChannel, "IB_BYTES", 4096)
  monkeypatch.setattr(ops_amd.AMDDevice, "SCRATCH_BYTES", 8192)
  monkeypatch.setattr(ops_amd.AMDDevice, "RING_ENTRIES", 64)
  dev = ops_amd.AMDDevice(f"{device}:9", ops_amd.open_driver("AMD", 9))
  prg = CODE[device](dev, r.prg.name, r.lib)
  alloc = ops_amd.HCQAllocator(dev)
  bufs = [alloc.alloc(64) for _ in range(2)]
  alloc.copyin(bufs[0], memoryview(np.zeros(16, np.float32)))
  for i in range(300):
    prg(bufs[(i + 1) % 2], bufs[i % 2], global_size=r.spec.global_size, local_size=r.spec.local_size)
    if i % 7 == 0: alloc.copyin(alloc.alloc(16), memoryview(np.ones(4, np.float32)))   # SDMA packets around its 256-byte ring
  out = np.empty(16, np.float32)
  alloc.copyout(memoryview(out), bufs[300 % 2])
  assert np.array_equal(out, np.full(16, 300, np.float32))
  assert dev.compute.position() > 4 * 64 and dev.copy.position() > 4 * 4 * 64   # pointers ran around the rings several times


def test_two_gpus_and_moves_between_amd_nv_cpu_python():
  a, b = _amd("AMD"), _amd("AMD:1")
  assert a is not b and a.drv is not b.drv and Device["AMD:0"] is Device["AMD"]
  x = np.arange(20, dtype=np.float32)
  t = ((Tensor(x, device="AMD") + 1).to("AMD:1") * 2).realize()
  assert t.device == "AMD:1"
  t = (t.to("NV") - 1).to("AMD").to("CPU").to("PYTHON").to("AMD:1").to("NV:1").to("AMD")
  assert t.tolist() == ((x + 1) * 2 - 1).tolist()


def test_debug2_times_come_from_release_mem_timestamps(monkeypatch: pytest.MonkeyPatch):
  dev = _amd()
  r, out, inp = add_one("AMD", 8)
  dev.synchronize()
  clock = iter(range(0, 10**15, 10**9))
  monkeypatch.setattr(dev.drv, "read_timer", lambda: next(clock))
  et = r(out, inp, wait=True)
  assert et is not None and et >= 1.0 and float(et).is_integer()


def test_tinyjit_replays_one_indirect_buffer_with_one_doorbell():
  dev = _amd()
  w = Tensor(_rng.standard_normal((8, 8)).astype(np.float32), device="AMD").realize()
  @TinyJit
  def step(x: Tensor) -> Tensor: return ((x @ w).relu() + 1).sum(0)
  xs = [_rng.standard_normal((4, 8)).astype(np.float32) for _ in range(5)]
  want = [_bits(((Tensor(x, device="PYTHON") @ Tensor(w.numpy(), device="PYTHON")).relu() + 1).sum(0)) for x in xs]
  got = []
  for i, x in enumerate(xs):
    t = Tensor(x, device="AMD").realize()
    dev.synchronize()
    c = dict(dev.drv.counters)
    out = step(t).realize()
    dev.synchronize()
    if i >= 2:   # a replay: one INDIRECT_BUFFER packet and one doorbell on the compute queue, every launch inside it
      d = {k: dev.drv.counters[k] - c.get(k, 0) for k in ("doorbell", "indirect_buffer", "dispatch", "pm4_packet")}
      assert d["indirect_buffer"] == 1 and d["pm4_packet"] == 1 and d["doorbell"] == 1 and d["dispatch"] == step.captured, d
    got.append(_bits(out))
  assert got == want
