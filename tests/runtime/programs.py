"""Small programs the HCQ runtime tests (NV and AMD) share."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, dtypes
from refgrad.device import Buffer, Device
from refgrad.program import Runner
from refgrad.runtime import ops_amd


def add_one(device: str, n: int) -> tuple[Runner, Buffer, Buffer]:
  """The compiled kernel of `a + 1` for n float32s on `device`, an output buffer and an input holding 0..n-1."""
  from refgrad.schedule import create_schedule, get_runner
  a = Tensor(np.zeros(n, np.float32), device=device).realize()
  it = create_schedule([(a + 1).uop], device)[0][-1]
  r = get_runner(it.ast, device, it.name)
  out, inp = Buffer(device, n, dtypes.float32), Buffer(device, n, dtypes.float32).copyin(np.arange(n, dtype=np.float32))
  return r, out, inp



AMD_IR = "AMD:60"   # the AMD mock GPU that amd_ir opens on the `ir` path (no other test uses this index)

def amd_ir(monkeypatch: pytest.MonkeyPatch) -> str:
  """The name of an AMD device on AMD_CODE=ir whatever the session's default, for the checks of what only that path has
  (RGL1 images, the descriptor refgrad makes, uop names in faults): the code path is chosen when a device is made, so
  the knob is set and the device opened now; it keeps that path for the session."""
  monkeypatch.setenv("AMD_CODE", "ir")
  prg = Device[AMD_IR].runtime   # type: ignore[attr-defined]
  assert getattr(prg, "func", None) is ops_amd.AMDProgram, f"{AMD_IR} was opened on another code path before amd_ir"
  return AMD_IR
