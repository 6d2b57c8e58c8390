"""Recovery from a GPU fault with work queued behind it, on the mock NV and AMD GPUs (MOCKGPU=1): the faulted queue's
work is dropped (its results raise naming the fault when read), the other queue's work runs in its turn on what it finds,
memory that queued work uses stays allocated until it ran, and the device stays usable."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor
from refgrad.device import Device
from refgrad.runtime.driver import GPUFault


@pytest.fixture(autouse=True)
def mockgpu(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("MOCKGPU", "1")
  monkeypatch.delenv("CHECKED", raising=False)


@pytest.mark.parametrize("device", ["NV", "AMD"])
def test_issue_one_liner_device_stays_usable(device: str):
  a, b = Tensor([1, 2, 3], device=device), Tensor([0, 1, 0], device=device)
  r = ((a // b).contiguous() * 5).sum()
  with pytest.raises(GPUFault, match="division by zero"): r.item()
  assert (Tensor([1.0, 2.0], device=device) * 3).tolist() == [3.0, 6.0]


@pytest.mark.parametrize("device", ["NV", "AMD"])
def test_compute_fault_with_launches_and_copies_queued_behind(device: str):
  a, b = Tensor([1, 2, 3], device=device).realize(), Tensor([0, 1, 0], device=device).realize()
  Device[device].synchronize()
  bad = (a // b).contiguous().realize()                                         # faults on the GPU, later
  xs = [Tensor(np.arange(4, dtype=np.float32) + 10 * i, device=device).realize() for i in range(3)]   # copies (staging) behind it
  ys = [(x * 3 + 1).realize() for x in xs]                                      # launches behind it (new programs too)
  dep = (bad * 2).realize()                                                     # depends on the faulted result
  with pytest.raises(GPUFault, match="division by zero"): Device[device].synchronize()
  for i, x in enumerate(xs): assert x.tolist() == [10.0 * i + k for k in range(4)]   # the copy queue's work ran, its staging intact
  for y in ys + [dep, bad]:
    with pytest.raises(RuntimeError, match=r"invalid: .*was dropped by the GPU fault"): y.numpy()
  assert [(x - 1).tolist() for x in xs] == [[10.0 * i + k - 1 for k in range(4)] for i in range(3)]   # usable
  assert (Tensor([4, 6], device=device) // Tensor([2, 3], device=device)).tolist() == [2, 2]


@pytest.mark.parametrize("device", ["NV", "AMD"])
def test_copy_fault_with_copies_and_program_uploads_queued_behind(device: str):
  hcq = Device[device].hcq   # type: ignore[attr-defined]
  x = Tensor(np.arange(6, dtype=np.float32), device=device).realize()
  Device[device].synchronize()
  hcq.finish(hcq.ordered("copy").copy(0xdead0000, 0xbeef0000, 64))            # the copy engine faults on unmapped memory
  ys = [Tensor(np.full(5, i, np.float32), device=device).realize() for i in range(3)]   # copies behind it: dropped
  z = (x * 5 - 2).realize()                                                     # a new program (its image upload is dropped too) and a launch
  with pytest.raises(GPUFault, match="not mapped"): Device[device].synchronize()
  for y in ys:
    with pytest.raises(RuntimeError, match="invalid: copyin, which writes it, was dropped by the GPU fault"): y.numpy()
  # the launch read its program's dropped upload: the GPU faults on the image (a fault of its own, reported clearly)
  with pytest.raises(GPUFault, match=r"program image starts with|unknown opcode 0 \(format VOP2, words 0x00000000\)"): z.numpy()   # zeros: no image magic, so run as RDNA3 code
  x2 = Tensor(np.arange(6, dtype=np.float32) + 1, device=device)
  assert (x2 * 5 - 2).tolist() == [5.0 * k + 3 for k in range(6)]              # the same program: its image uploaded again
  assert (x * 5 - 3).tolist() == [5.0 * k - 3 for k in range(6)]              # usable: copies, uploads and launches run
  ys[0].assign(Tensor(np.ones(5, np.float32), device=device)).realize()
  assert ys[0].tolist() == [1.0] * 5
