"""Host waits on the mock GPUs poll short steps on the waiting thread (Driver.poll_inline): a launch whose kernel and launch
shape last ran in at most INLINE_SECONDS, copies up to INLINE_COPY_BYTES, semaphores. The first launch of a kernel, a
longer one, a big copy, a wait allowed less than INLINE_MIN_LIMIT and a seeded order go to the worker thread; results,
faults and deadlocks are the same either way, and a Ctrl-C lands between steps."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from emulators import mock_driver
from refgrad import Tensor
from refgrad.device import Device
from refgrad.runtime import hcq
from refgrad.runtime.driver import GPUDeadlock, GPUFault


@pytest.fixture(autouse=True)
def mockgpu(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("MOCKGPU", "1")


@pytest.fixture
def worker_polls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
  """Counts the waits that handed polling to the worker thread."""
  calls: list[int] = []
  orig = hcq.HCQDevice._poll_until
  def spy(self, done, cancel):
    calls.append(1)
    return orig(self, done, cancel)
  monkeypatch.setattr(hcq.HCQDevice, "_poll_until", spy)
  return calls


def _double(dev: str, n: int) -> list[float]:
  return (Tensor(np.arange(n, dtype=np.float32), device=dev) * 2).tolist()


@pytest.mark.parametrize("dev", ["NV", "AMD"])
def test_a_known_short_launch_runs_on_the_waiting_thread(worker_polls, dev: str):
  assert _double(dev, 37) == [2.0 * i for i in range(37)]   # first launch of this kernel and shape: the worker runs it
  assert worker_polls
  worker_polls.clear()
  for _ in range(3): assert _double(dev, 37) == [2.0 * i for i in range(37)]
  assert not worker_polls   # known short now: every step ran inline
  assert _double(dev, 38) == [2.0 * i for i in range(38)]   # another launch shape is a first launch again
  assert worker_polls


def test_a_launch_that_was_long_goes_to_the_worker(worker_polls, monkeypatch: pytest.MonkeyPatch):
  _double("NV", 41)
  drv = Device["NV"].hcq.drv   # type: ignore[attr-defined]
  for key in drv.costs: drv.costs[key] = mock_driver.INLINE_SECONDS * 2   # as if every kernel had run longer than that
  worker_polls.clear()
  assert _double("NV", 41) == [2.0 * i for i in range(41)]
  assert worker_polls


def test_short_wait_limits_and_seeded_orders_poll_on_the_worker(worker_polls, monkeypatch: pytest.MonkeyPatch):
  _double("NV", 43)
  worker_polls.clear()
  monkeypatch.setenv("HCQ_TIMEOUT", "0.5")   # below INLINE_MIN_LIMIT: a wait meant to give up
  assert _double("NV", 43) == [2.0 * i for i in range(43)] and worker_polls
  monkeypatch.delenv("HCQ_TIMEOUT")
  drv = Device["NV"].hcq.drv   # type: ignore[attr-defined]
  assert drv.poll_inline() is not None   # nothing queued: nothing moves, inline
  monkeypatch.setattr(drv.order, "rng", np.random.default_rng(0))
  assert drv.poll_inline() is None


def test_big_copies_poll_on_the_worker(worker_polls):
  # (NV's copy engine moves a buffer in one LAUNCH_DMA; the AMD runtime's SDMA packets move 4 MiB each: short steps)
  x = np.arange(mock_driver.INLINE_COPY_BYTES // 4 + 1024, dtype=np.float32)
  t = Tensor(x, device="NV").realize()
  worker_polls.clear()
  assert np.array_equal(t.numpy(), x)   # the copy back is over the inline limit
  assert worker_polls


STORE = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 off)
{
  .reg .b32 %r<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd0, [out]; ld.param.u32 %r1, [off];
  mov.u32 %r0, %tid.x; add.u32 %r2, %r0, %r1;
  mul.wide.u32 %rd1, %r2, 4; add.s64 %rd2, %rd0, %rd1;
  st.global.u32 [%rd2], %r0;
  ret;
}"""


def test_faults_and_deadlocks_are_the_same_inline(worker_polls):
  nv = Device["NV"]
  assert nv.run_ptx(STORE, "k", [np.zeros(32, np.uint32), np.uint32(0)], block=(32, 1, 1))[0].tolist() == list(range(32))
  worker_polls.clear()
  with pytest.raises(GPUFault, match=r"kernel k: MMU fault.*PTX line 10"):   # the same kernel and shape, now out of bounds: inline
    nv.run_ptx(STORE, "k", [np.zeros(32, np.uint32), np.uint32(1 << 20)], block=(32, 1, 1))
  assert not worker_polls
  assert nv.run_ptx(STORE, "k", [np.zeros(32, np.uint32), np.uint32(0)], block=(32, 1, 1))[0].tolist() == list(range(32))
  dev = nv.hcq   # type: ignore[attr-defined]
  sig = dev.new_signal(0)
  v = dev.finish(dev.ordered("compute").wait(sig, 1))   # a GPU wait nothing will satisfy
  with pytest.raises(GPUDeadlock, match="no queue can move"): dev.synchronize()
  assert not worker_polls
  sig.value = 1   # the host releases it: the device goes on
  dev.synchronize()
  assert dev.timeline.value == v


def test_ctrl_c_lands_between_steps(monkeypatch: pytest.MonkeyPatch):
  _double("NV", 47)
  _double("NV", 47)
  drv = Device["NV"].hcq.drv   # type: ignore[attr-defined]
  orig = type(drv).poll
  hits: list[int] = []
  def poll(self):
    if not hits: os.kill(os.getpid(), signal.SIGINT)   # arrives while the first step runs
    hits.append(1)
    return orig(self)
  monkeypatch.setattr(type(drv), "poll", poll)
  with pytest.raises(KeyboardInterrupt):
    _double("NV", 47)
  assert len(hits) == 1   # the step it arrived in finished; no further step ran
  monkeypatch.setattr(type(drv), "poll", orig)
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  Device["NV"].synchronize()   # the device goes on from where it stopped
  assert _double("NV", 47) == [2.0 * i for i in range(47)]


def test_ctrl_c_in_the_last_step_is_not_lost(monkeypatch: pytest.MonkeyPatch):
  _double("NV", 53)
  _double("NV", 53)
  orig = hcq.HCQDevice._poll_inline
  def poll_inline(self, done, deadline):   # SIGINT arrives just as the wait is satisfied
    def done_and_interrupted() -> bool:
      d = done()
      if d: os.kill(os.getpid(), signal.SIGINT)
      return d
    return orig(self, done_and_interrupted, deadline)
  monkeypatch.setattr(hcq.HCQDevice, "_poll_inline", poll_inline)
  with pytest.raises(KeyboardInterrupt):
    _double("NV", 53)
  monkeypatch.setattr(hcq.HCQDevice, "_poll_inline", orig)
  assert _double("NV", 53) == [2.0 * i for i in range(53)]
