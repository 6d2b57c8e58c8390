"""The NV runtime end to end on the mock NV GPU (MOCKGPU=1): launches through GPFIFO + QMD, copies through the copy engine,
results byte-identical to the PYTHON device emulating CUDA; asynchrony, faults, deadlocks, hazards, two GPUs, DEBUG=2 times."""
from __future__ import annotations

import time

import numpy as np
import pytest

from refgrad import Tensor, dtypes
from refgrad.codegen import to_linear
from refgrad.device import Buffer, Device
from refgrad.program import Runner
from refgrad.runtime import ops_nv
from refgrad.runtime.driver import GPUDeadlock, GPUFault, GPUHazard
from refgrad.uop.ops import Ops, UOp

from .programs import add_one


@pytest.fixture(autouse=True)
def mockgpu(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("MOCKGPU", "1")
  monkeypatch.setenv("EMULATE", "CUDA")   # PYTHON compiles the very programs NV runs


def _nv() -> ops_nv.NVDevice:
  hcq = Device["NV"].hcq   # type: ignore[attr-defined]
  assert isinstance(hcq, ops_nv.NVDevice)
  return hcq

def _bits(t: Tensor) -> bytes: return np.ascontiguousarray(t.numpy()).tobytes()

_rng = np.random.default_rng(0)
PROGRAMS = {
  "matmul": (lambda a, b: a @ b, [_rng.standard_normal((24, 40)).astype(np.float32), _rng.standard_normal((40, 8)).astype(np.float32)]),
  "half matmul (tensor cores)": (lambda a, b: (a @ b).float(), [_rng.standard_normal((32, 32)).astype(np.float16)] * 2),
  "long sum (GROUP, local memory)": (lambda a: a.sum(), [_rng.standard_normal(70000).astype(np.float32)]),
  "softmax": (lambda a: a.softmax(), [_rng.standard_normal((16, 33)).astype(np.float32)]),
  "conv2d": (lambda x, w: x.conv2d(w, padding=1), [_rng.standard_normal((1, 3, 9, 9)).astype(np.float32), _rng.standard_normal((4, 3, 3, 3)).astype(np.float32)]),
  "int ops": (lambda a, b: (a // b) * 3 + (a % b) - (a << 2), [_rng.integers(-1000, 1000, 500).astype(np.int32), _rng.integers(1, 50, 500).astype(np.int32)]),
}

@pytest.mark.parametrize("name", list(PROGRAMS))
def test_results_equal_python_device_byte_for_byte(name: str):
  fn, ins = PROGRAMS[name]
  drv = _nv().drv
  launches, copies = drv.counters["qmd_launch"], drv.counters["ce_copy"]
  got = _bits(fn(*[Tensor(x, device="NV") for x in ins]))
  want = _bits(fn(*[Tensor(x, device="PYTHON") for x in ins]))
  assert got == want
  assert drv.counters["qmd_launch"] > launches          # kernels ran as QMD launches
  assert drv.counters["ce_copy"] >= copies + len(ins) + 1   # inputs in and the result out through the copy engine


def test_copies_go_through_the_copy_engine():
  drv = _nv().drv
  before = dict(drv.counters)
  x = np.arange(1000, dtype=np.int32)
  b = Buffer("NV", 1000, dtypes.int32).copyin(x)
  assert np.array_equal(b.numpy(), x)
  assert drv.counters["ce_copy"] == before.get("ce_copy", 0) + 2 and drv.counters["qmd_launch"] == before.get("qmd_launch", 0)


def test_launch_returns_before_the_kernel_runs():
  dev = _nv()
  r, out, inp = add_one("NV", 64)
  dev.synchronize()
  launched = dev.drv.counters["qmd_launch"]
  assert r(out, inp, wait=False) is None
  assert dev.timeline.value < dev.timeline_value - 1 and dev.drv.counters["qmd_launch"] == launched   # queued, not run
  assert np.array_equal(out.numpy(), np.arange(64, dtype=np.float32) + 1)   # reading the result synchronizes
  assert dev.timeline.value == dev.timeline_value - 1 and dev.drv.counters["qmd_launch"] == launched + 1


def test_schedule_is_sent_without_waiting():
  dev = _nv()
  dev.synchronize()
  t = (Tensor(np.ones(100, np.float32), device="NV") * 3 + 1).realize()
  assert dev.timeline.value < dev.timeline_value - 1     # realize() queued the work and returned
  assert t.tolist() == [4.0] * 100


def _oob_runner() -> Runner:
  g0 = UOp.define_global(0, dtypes.float32, 4)
  i = UOp.range(8, 0)
  sink = UOp(Ops.SINK, dtypes.void, (g0.store(i, UOp.const(dtypes.float32, 1.0)),))
  return Runner("oob_store", to_linear(sink, Device["NV"].renderer), "NV")

def test_kernel_fault_surfaces_at_next_wait_and_device_recovers():
  dev = _nv()
  r = _oob_runner()
  buf = Buffer("NV", 4, dtypes.float32)
  r(buf, wait=False)                                     # returns: the fault happens on the GPU later
  with pytest.raises(GPUFault, match="oob_store") as e:
    dev.synchronize()
  # the failing operation: the STORE uop (NV_CODE=ir) or the PTX line of the st instruction (ptx, nvcc)
  assert e.value.kernel == "oob_store" and e.value.device == "NV:0" and e.value.engine == "mmu" and \
    ("STORE" in str(e.value.uop) or "st.global" in str(e.value.uop))
  print(e.value)
  x = Tensor(np.arange(10, dtype=np.float32), device="NV")
  assert (x * 2).tolist() == [2.0 * i for i in range(10)]   # the device stays usable


def test_results_of_work_dropped_by_a_fault_are_never_read_silently():
  dev = _nv()
  r, out, inp = add_one("NV", 4)
  dev.synchronize()
  _oob_runner()(Buffer("NV", 4, dtypes.float32), wait=False)   # faults
  r(out, inp, wait=False)                                # queued behind it on the compute queue: dropped by the fault
  again = Buffer("NV", 4, dtypes.float32)
  r(again, out, wait=False)                              # computed from the dropped result
  with pytest.raises(GPUFault, match="oob_store"): dev.synchronize()
  for b in (out, again):
    with pytest.raises(RuntimeError, match=f"invalid: {r.spec.name}, which writes it, was dropped by the GPU fault"): b.numpy()
  assert np.array_equal(inp.numpy(), np.arange(4, dtype=np.float32))   # what the dropped work only read is fine
  r(out, inp)                                            # writing it again from valid data makes it valid
  assert np.array_equal(out.numpy(), np.arange(4, dtype=np.float32) + 1)
  out.copyin(np.zeros(4, np.float32))
  assert not out.numpy().any()


def test_bad_qmd_fault_names_the_kernel_queued_there():
  dev = _nv()
  r, out, inp = add_one("NV", 8)
  dev.synchronize()
  q = dev.ordered("compute")
  q.exec(r.prg, r.prg.args([out.handle.va, inp.handle.va], [], q), r.spec.global_size, r.spec.local_size)
  va = q.words[q.cmds[-1][1] + 1] << 8                   # the QMD this launch points at: make its version wrong
  host = dev.scratch.maps[-1].host
  off = va - dev.scratch.maps[-1].va
  qmd = host[off:off + 256].view(np.uint32)
  ops_nv.qmd_set(qmd, "QMD_MAJOR_VERSION", 2)
  dev.finish(q)
  with pytest.raises(GPUFault, match=r.spec.name) as e:
    dev.synchronize()
  assert e.value.queue == dev.compute.handle.name and "version" in str(e.value).lower()
  assert (Tensor(np.ones(3, np.float32), device="NV") + 1).tolist() == [2.0, 2.0, 2.0]


def test_unsatisfiable_wait_is_a_deadlock_within_a_second():
  dev = _nv()
  sig = dev.new_signal(0)
  v = dev.finish(dev.ordered("compute").wait(sig, 1))
  st = time.perf_counter()
  with pytest.raises(GPUDeadlock, match="no queue can move") as e:
    dev.synchronize()
  assert time.perf_counter() - st < 1.0 and f"{v}" in str(e.value)
  sig.value = 1                                          # the host releases the wait: the device goes on
  dev.synchronize()
  assert dev.timeline.value == v


def test_missing_wait_between_queues_is_a_hazard(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setenv("MOCKGPU_HAZARDS", "1")
  dev = ops_nv.make_device("NV:7").hcq                   # a fresh mock GPU with the hazard checker on
  assert isinstance(dev, ops_nv.NVDevice)
  r, _, _ = add_one("NV", 16)
  prg = ops_nv.NVProgram(dev, r.prg.name, r.lib)
  out, inp = dev.drv.alloc(64), dev.drv.alloc(64)
  q = dev.ordered("compute")
  dev.finish(q.exec(prg, prg.args([out.va, inp.va], [], q), r.spec.global_size, r.spec.local_size))
  staging = dev.drv.alloc(64, host_visible=True)
  done = dev.new_signal(0)
  dev.queue("copy").copy(staging.va, out.va, 64).signal(done, 1).submit(dev)   # reads `out` without waiting for the kernel
  with pytest.raises(GPUHazard) as e:
    dev.synchronize()
    dev.wait_signal(done, 1)
  assert r.prg.name in str(e.value) and "copy" in str(e.value)


def test_runtime_runs_clean_under_the_hazard_checker_and_random_order(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setenv("MOCKGPU_HAZARDS", "1")
  monkeypatch.setenv("MOCKGPU_ORDER", "seed:3")
  monkeypatch.setitem(Device._modules, "NVH", "refgrad.runtime.ops_nv")   # a separate mock GPU made with these knobs
  x = np.arange(300, dtype=np.float32)
  t = Tensor(x, device="NVH:4")
  got = ((t * 2).sum() + t.max()).numpy()
  assert got.tobytes() == ((Tensor(x, device="PYTHON") * 2).sum() + Tensor(x, device="PYTHON").max()).numpy().tobytes()


def test_two_gpus_and_moves_between_devices():
  a, b = Device["NV"].hcq, Device["NV:1"].hcq          # type: ignore[attr-defined]
  assert a is not b and a.drv is not b.drv and Device["NV:0"] is Device["NV"]
  x = np.arange(20, dtype=np.float32)
  t0 = Tensor(x, device="NV") + 1
  t1 = (t0.to("NV:1") * 2).realize()
  assert t1.device == "NV:1"
  t2 = t1.to("CPU") - 1
  t3 = t2.to("PYTHON").to("NV:1").to("NV")
  assert t3.tolist() == ((x + 1) * 2 - 1).tolist()
  b = Buffer.from_numpy("NV:1", x).copy_to("NV").copy_to("CPU").copy_to("NV:1")   # Buffer.copy_to through the host
  assert b.device == "NV:1" and np.array_equal(b.numpy(), x)


def test_debug2_times_come_from_gpu_timestamps(monkeypatch: pytest.MonkeyPatch):
  dev = _nv()
  r, out, inp = add_one("NV", 8)
  dev.synchronize()
  clock = iter(range(0, 10**15, 10**9))                   # the GPU timer advances one second per reading
  monkeypatch.setattr(dev.drv, "read_timer", lambda: next(clock))
  st = time.perf_counter()
  et = r(out, inp, wait=True)
  assert et is not None and et >= 1.0 and float(et).is_integer() and time.perf_counter() - st < 1.0


def test_conformance_runs_the_mock_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path):
  import json

  from conformance.__main__ import main
  monkeypatch.delenv("MOCKGPU")                          # conformance sets it for the mock GPUs itself
  assert "NV" in Device.names
  assert main(["--device", "NV", "--device", "PYTHON", "--group", "bitcast", "--jobs", "4", "--json", str(tmp_path / "r.json")]) == 0
  results = json.loads((tmp_path / "r.json").read_text())
  assert {r["device"] for r in results} == {"NV", "PYTHON"} and all(r["status"] == "pass" for r in results)


def test_debug2_prints_gpu_times_from_the_scheduler(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
  from refgrad import program
  dev = _nv()
  x = Tensor(np.arange(50, dtype=np.float32), device="NV").realize()
  dev.synchronize()
  clock = iter(range(0, 10**15, 10**9))
  monkeypatch.setattr(dev.drv, "read_timer", lambda: next(clock))
  monkeypatch.setattr(program, "DEBUG", 2)
  (x * 5 + 2).realize()
  line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("NV ") and " lanes " in ln)
  ms = float(line.split()[-2])
  assert ms >= 1000.0 and (ms / 1000.0).is_integer()   # whole GPU-timer seconds, not host time


def test_wait_timeout_names_device_signal_and_values(monkeypatch: pytest.MonkeyPatch):
  dev = _nv()
  sig = dev.new_signal(3)
  monkeypatch.setattr(dev.drv, "poll", lambda: True)     # a GPU that claims progress but never releases the signal
  with pytest.raises(TimeoutError) as e:
    dev.wait_signal(sig, 7, timeout=0.2)
  msg = str(e.value)
  assert "NV" in msg and f"0x{sig.va:x}" in msg and "reach 7" in msg and "it is 3" in msg and "GPGet" in msg


def test_rings_wrap_around(monkeypatch: pytest.MonkeyPatch):
  # small rings: the GP ring (64 entries), the pushbuffer (4 KiB) and the kernel-argument scratch (8 KiB) all wrap many times
  r, _, _ = add_one("NV", 16)                          # (before patching: this may open Device["NV"], which must keep full rings)
  monkeypatch.setattr(ops_nv.NVChannel, "PUSHBUFFER_BYTES", 4096)
  monkeypatch.setattr(ops_nv.NVDevice, "SCRATCH_BYTES", 8192)
  monkeypatch.setattr(ops_nv.NVDevice, "RING_ENTRIES", 64)
  dev = ops_nv.NVDevice("NV:9", ops_nv.open_driver("NV", 9))
  prg = ops_nv.NVProgram(dev, r.prg.name, r.lib)
  alloc = ops_nv.HCQAllocator(dev)
  bufs = [alloc.alloc(64) for _ in range(2)]
  alloc.copyin(bufs[0], memoryview(np.zeros(16, np.float32)))
  for i in range(300):                                   # each launch reads one buffer and writes the other
    prg(bufs[(i + 1) % 2], bufs[i % 2], global_size=r.spec.global_size, local_size=r.spec.local_size)
  out = np.empty(16, np.float32)
  alloc.copyout(memoryview(out), bufs[300 % 2])
  assert np.array_equal(out, np.full(16, 300, np.float32))
  assert dev.compute.entries == 64 and dev.drv.counters["gp_entry"] > 4 * 64   # one entry per launch: the GP ring wrapped 4 times


def test_resubmitted_queue_with_patched_values():
  dev = _nv()
  r, a, b = add_one("NV", 8)                            # b = arange(8)
  c = Buffer("NV", 8, dtypes.float32)
  dev.synchronize()
  q = dev.queue("compute", persistent=True)
  args = r.prg.args([a.handle.va, b.handle.va], [], q)
  v = dev.next_value()
  q.wait(dev.timeline, v - 1).exec(r.prg, args, r.spec.global_size, r.spec.local_size).memory_barrier().signal(dev.timeline, v).submit(dev)
  dev.synchronize()
  for src, dst in ((a, c), (c, a)):                      # replay: a+1 -> c, then c+1 -> a, same command words, patched
    v = dev.next_value()
    args.set_buffer(0, dst.handle.va)
    args.set_buffer(1, src.handle.va)
    q.update_wait(0, value=v - 1).update_signal(3, value=v).submit(dev)
    dev.synchronize()
  assert np.array_equal(a.numpy(), np.arange(8, dtype=np.float32) + 3) and np.array_equal(c.numpy(), np.arange(8, dtype=np.float32) + 2)
