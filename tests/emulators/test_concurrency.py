"""Queues progress independently: deadlocks are reported at once, unordered conflicting accesses are hazards,
MOCKGPU_ORDER=seed:N interleaves deterministically, and several mock GPUs are independent."""
from __future__ import annotations

import time

import numpy as np
import pytest

from emulators.mock_driver import make_driver
from refgrad.runtime.driver import GPUHazard

from .kernels import Launcher, add_kernel, compute_stream
from .nvenc import ACQ_CIRC64, COPY, REL32, REL64, REL64_TS, Stream, ce_copy, ce_sem, inline_upload, sem, set_object, u32, u64


def copy_stream(drv) -> Stream:
  s = Stream(drv, "copy")
  s.entry(set_object(COPY, 0xC6B5))
  return s


def test_unsatisfiable_acquire_is_a_deadlock_within_a_second():
  drv = make_driver("NV", 0)
  c, k = compute_stream(drv), copy_stream(drv)
  sig, other = drv.alloc(16, True), drv.alloc(16, True)
  c.entry([*sem(sig.va, 5, ACQ_CIRC64), *sem(other.va, 1, REL32)])
  k.entry(ce_sem(sig.va, 3))     # releases 3: never enough
  t = time.perf_counter()
  polls = 0
  while drv.poll(): polls += 1
  assert time.perf_counter() - t < 1.0 and polls < 20
  text = drv.describe()
  assert f"blocked: acquire ACQ_CIRC_GEQ (>= wrap-aware) 64-bit on the semaphore at 0x{sig.va:x} waits for 0x5, current value 0x3" in text
  assert "NV:0 compute: GPGet 1, GPPut 2; at GP entry 1 dword 5" in text and "NV:0 copy: GPGet 2, GPPut 2; idle" in text
  assert u32(other) == 0
  assert drv.poll() is False   # still stuck: the runtime reports a deadlock instead of waiting out a timeout

def test_a_submission_without_doorbell_is_named():
  drv = make_driver("NV", 0)
  c = compute_stream(drv)
  sig = drv.alloc(16, True)
  assert drv.run_until_idle()
  c.entry(sem(sig.va, 1, REL32), ring=False)
  c.q.userd.host.view(np.uint32)[0x8C // 4] = c.put
  assert drv.poll() is False and "USERD GPPut is 2: written but no doorbell rung since" in drv.describe()

def test_blocked_acquire_resumes_when_another_queue_releases():
  drv = make_driver("NV", 0)
  c, k = compute_stream(drv), copy_stream(drv)
  sig, done = drv.alloc(16, True), drv.alloc(16, True)
  c.entry([*sem(sig.va, 1, ACQ_CIRC64), *sem(done.va, 7, REL64_TS)])
  assert drv.run_until_idle() is False and u64(done) == 0
  k.entry(ce_sem(sig.va, 1))
  assert drv.run_until_idle() and u64(done) == 7


# ---- hazards ------------------------------------------------------------------------------------

def _copy_then_kernel(drv, wait: bool, observe: bool = False):
  """The copy queue fills a kernel input from staging; the compute queue runs the kernel, waiting for the copy or not."""
  c, k = compute_stream(drv), copy_stream(drv)
  stage, a, b, o, sig = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True), drv.alloc(16, True)
  stage.host.view(np.float32)[:], b.host.view(np.float32)[:] = 2, 3
  kern = Launcher(drv, add_kernel(), [o.va, a.va, b.va])
  k.entry([*ce_copy(a.va, stage.va, 64), *ce_sem(sig.va, 1)])
  if observe:   # the host waits for the copy, tells the driver, then submits the kernel without a GPU-side wait
    drv.run_until_idle()
    assert u64(sig) == 1
    drv.host_observed(sig.va)
  c.entry([*(sem(sig.va, 1, ACQ_CIRC64) if wait else []), *kern.words()])
  return o, a

def test_missing_wait_between_copy_and_compute_is_a_hazard():
  drv = make_driver("NV", 0)
  _, a = _copy_then_kernel(drv, wait=False)
  with pytest.raises(GPUHazard) as e:
    for _ in range(100): drv.poll()
  msg = str(e.value)
  assert "NV:0 copy GP entry 1: copy of 64 bytes" in msg and "NV:0 compute GP entry 1: kernel add" in msg
  assert f"0x{a.va:x}..0x{a.va + 64:x}" in msg and "writes" in msg and "reads" in msg and "no semaphore ordering them" in msg

def test_the_same_stream_with_the_wait_is_clean():
  drv = make_driver("NV", 0)
  o, _ = _copy_then_kernel(drv, wait=True)
  assert drv.run_until_idle()
  assert o.host.view(np.float32).tolist() == [5.0] * 16

def test_host_observation_orders_later_submissions():
  drv = make_driver("NV", 0)
  o, _ = _copy_then_kernel(drv, wait=False, observe=True)
  assert drv.run_until_idle() and o.host.view(np.float32).tolist() == [5.0] * 16

def test_hazard_checker_can_be_turned_off(monkeypatch):
  monkeypatch.setenv("MOCKGPU_HAZARDS", "0")
  drv = make_driver("NV", 0)
  _copy_then_kernel(drv, wait=False)
  for _ in range(100): drv.poll()

def test_two_readers_are_no_hazard_and_semaphores_are_not_memory():
  drv = make_driver("NV", 0)
  c, k = compute_stream(drv), copy_stream(drv)
  src, d1, d2, sig = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True), drv.alloc(16, True)
  c.entry([*set_object(COPY, 0xC6B5), *ce_copy(d1.va, src.va, 64), *sem(sig.va, 1, REL64)])
  k.entry([*ce_copy(d2.va, src.va, 64), *ce_sem(sig.va, 2)])
  assert drv.run_until_idle()

def test_hazard_through_a_chain_of_semaphores_is_ordered():
  # copy writes A, releases s1; compute 0 waits s1, releases s2; compute 1 waits s2 then reads A: ordered transitively
  drv = make_driver("NV", 0)
  k, c0, c1 = copy_stream(drv), compute_stream(drv), compute_stream(drv)
  src, a, out, s1, s2 = drv.alloc(64, True), drv.alloc(64), drv.alloc(64, True), drv.alloc(16, True), drv.alloc(16, True)
  c1.entry([*sem(s2.va, 1, ACQ_CIRC64), *set_object(COPY, 0xC6B5), *ce_copy(out.va, a.va, 64)])
  c0.entry([*sem(s1.va, 1, ACQ_CIRC64), *sem(s2.va, 1, REL64)])
  k.entry([*ce_copy(a.va, src.va, 64), *ce_sem(s1.va, 1)])
  assert drv.run_until_idle()


# ---- interleaving -------------------------------------------------------------------------------

def _racy(seed: int | None, monkeypatch) -> list[int]:
  """Queue A: 6 times (counter += 1, then copy the counter into its log); queue B: 6 times counter += 100. The log shows
  how the queues interleaved (semaphore words are synchronization, so the checker has nothing to say)."""
  monkeypatch.setenv("MOCKGPU_ORDER", "" if seed is None else f"seed:{seed}")
  drv = make_driver("NV", 0)
  a, b = compute_stream(drv), compute_stream(drv)
  counter, log = drv.alloc(16, True), drv.alloc(64, True)
  add = lambda n: sem(counter.va, n, 6 | (5 << 27) | (1 << 31))   # REDUCTION IADD unsigned 32-bit
  wa = list(set_object(COPY, 0xC6B5))
  for i in range(6): wa += [*add(1), *ce_copy(log.va + 4 * i, counter.va, 4)]
  a.entry(wa)
  b.entry([w for _ in range(6) for w in add(100)])
  assert drv.run_until_idle()
  assert u32(counter) == 606
  return log.host.view(np.uint32)[:6].tolist()

def test_seeded_interleaving_is_deterministic_and_differs_across_seeds(monkeypatch):
  runs = {seed: _racy(seed, monkeypatch) for seed in range(6)}
  assert all(_racy(seed, monkeypatch) == runs[seed] for seed in (0, 3))
  assert len({tuple(v) for v in runs.values()}) > 1
  assert _racy(None, monkeypatch) == _racy(None, monkeypatch)


# ---- several devices ----------------------------------------------------------------------------

def test_two_devices_are_independent():
  d0, d1 = make_driver("NV", 0), make_driver("NV", 1)
  m0, m1 = d0.alloc(16, True), d1.alloc(16, True)
  assert m0.va == m1.va and m0.host is not m1.host   # separate address spaces
  s0, s1 = compute_stream(d0), compute_stream(d1)
  assert s0.q.name == "NV:0 compute" and s1.q.name == "NV:1 compute"
  s1.entry(sem(m1.va, 5, ACQ_CIRC64))
  s0.entry(sem(m0.va, 5, REL64))
  assert d0.run_until_idle() and u64(m0) == 5 and u64(m1) == 0
  assert d1.run_until_idle() is False   # device 1's queue waits on its own memory, which device 0 never wrote
  d1.free(m1)
  assert d0.region(m0.va) is not None

def test_kernel_writes_and_inline_uploads_race_across_compute_queues():
  drv = make_driver("NV", 0)
  c0, c1 = compute_stream(drv), compute_stream(drv)
  a, b, o = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True)
  kern = Launcher(drv, add_kernel(), [o.va, a.va, b.va])
  c0.entry(kern.words())
  c1.entry(inline_upload(o.va + 16, bytes(8)))   # writes into the kernel's output with no ordering
  with pytest.raises(GPUHazard, match=r"kernel add writes .* NV:0 compute 1 GP entry 1: inline upload of 8 bytes writes"):
    drv.run_until_idle()

def test_many_ordered_operations_then_one_unordered_is_still_found():
  # 40 rounds of ping-pong: the copy queue fills dst and signals, the compute queue copies dst out and signals back
  # (so the next fill waits for it); then one more fill the compute queue does not wait for (older records get pruned)
  drv = make_driver("NV", 0)
  k, c = copy_stream(drv), compute_stream(drv)
  src, dst, out, sig, back = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True), drv.alloc(16, True), drv.alloc(16, True)
  wk, wc = [], list(set_object(COPY, 0xC6B5))
  for i in range(1, 41):
    wk += [*sem(back.va, i - 1, ACQ_CIRC64), *ce_copy(dst.va, src.va, 64), *ce_sem(sig.va, i)]
    wc += [*sem(sig.va, i, ACQ_CIRC64), *ce_copy(out.va, dst.va, 64), *sem(back.va, i, REL64)]
  k.entry(wk)
  c.entry(wc)
  assert drv.run_until_idle()
  assert len(drv.hz.records[dst.va]) <= 4
  k.entry(ce_copy(dst.va, src.va, 64))
  c.entry(ce_copy(out.va, dst.va, 64))
  with pytest.raises(GPUHazard, match="copy of 64 bytes"): drv.run_until_idle()

def test_recover_orders_the_faulted_queues_work_before_later_submissions():
  from refgrad.runtime.driver import GPUFault

  from .kernels import oob_kernel
  drv = make_driver("NV", 0)
  c, k = compute_stream(drv), copy_stream(drv)
  o, dst = drv.alloc(64, True), drv.alloc(64, True)
  c.entry(Launcher(drv, oob_kernel(), [o.va]).words())   # stores to o (lanes 0..15) before the out-of-bounds lanes fault
  with pytest.raises(GPUFault):
    for _ in range(10): drv.poll()
  drv.recover(c.q)
  k.entry(ce_copy(dst.va, o.va, 64))                      # the host reads the output afterwards: no hazard
  assert drv.run_until_idle()
