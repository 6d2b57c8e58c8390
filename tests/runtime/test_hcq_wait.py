"""Host waits on the mock NV and AMD GPUs (MOCKGPU=1) honour HCQ_TIMEOUT while one long step (a kernel) runs: the wait
gives up within a bounded overshoot, the step finishes in the background, and the device goes on correctly."""
from __future__ import annotations

import time

import numpy as np
import pytest

from refgrad import Tensor
from refgrad.device import Device


@pytest.fixture(autouse=True)
def mockgpu(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("MOCKGPU", "1")


@pytest.mark.parametrize("device", ["NV", "AMD"])
def test_timeout_fires_during_a_long_kernel(device: str, monkeypatch: pytest.MonkeyPatch):
  # ~1-2 s on each mock: the NV mock runs PTX with loops as arrays (448 had become ~0.25 s once loop registers were affine
  # and loads strided blocks), the AMD one the serialized program with loops as arrays (640 had become ~0.45 s); the
  # check below needs more than 0.5 s
  n = {"NV": 1024, "AMD": 800}[device]
  a = Tensor(np.ones((n, n), np.float32), device=device).realize()
  Device[device].synchronize()
  r = (a @ a).realize()             # one launch that runs for seconds on the mock (one poll step)
  b = (Tensor([1.0, 2.0], device=device) * 3).realize()   # queued behind it
  monkeypatch.setenv("HCQ_TIMEOUT", "0.2")
  st = time.perf_counter()          # after the launches: compiling them (NV_CODE=nvcc: nvcc, seconds on a loaded machine) is no wait
  with pytest.raises(TimeoutError, match=r"did not reach .* in 0.2 s \(HCQ_TIMEOUT"): Device[device].synchronize()
  waited = time.perf_counter() - st
  monkeypatch.delenv("HCQ_TIMEOUT")
  assert waited < 1.0, f"the 0.2 s limit fired after {waited:.2f} s"
  assert b.tolist() == [3.0, 6.0]   # the step left running finishes, then the work behind it
  assert float(r.numpy()[0, 0]) == n and float(r.numpy()[-1, -1]) == n
  assert time.perf_counter() - st > 0.5   # the kernel was long indeed: the timeout did not fire merely because it ended
