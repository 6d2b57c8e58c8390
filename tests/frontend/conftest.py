"""Every frontend test runs on each local device and, on the PYTHON device, under each emulated GPU target:
CPU, PYTHON, PYTHON with EMULATE=CUDA, PYTHON with EMULATE=AMD (GPU-shaped kernels: work-groups, GROUP reductions
through local memory, tensor cores), and once on each mock GPU with MOCKGPU=1 set here: NV (every kernel through GPFIFO +
QMD, every copy through the copy engine) and AMD (PM4 dispatches, SDMA copies). `DEV=X` restricts the device and
`EMULATE=Y` the target (`DEV=PYTHON EMULATE=CUDA pytest tests/frontend`, `DEV=NV pytest tests/frontend`, the tox envs).
Tensors made without device= go to Device.DEFAULT."""
from __future__ import annotations

import os

import pytest

_MOCK_GPUS = ("NV", "AMD")   # devices that run on emulators/' mock GPUs (MOCKGPU=1)
_DEVICES = [os.environ["DEV"].upper()] if os.environ.get("DEV") else ["CPU", "PYTHON"]
if os.environ.get("EMULATE"): _VARIANTS = [(d, os.environ["EMULATE"].upper()) for d in _DEVICES]
else:
  _VARIANTS = [(d, "") for d in _DEVICES] + ([("PYTHON", "CUDA"), ("PYTHON", "AMD")] if "PYTHON" in _DEVICES else [])
  if not os.environ.get("DEV"): _VARIANTS += [("NV", ""), ("AMD", "")]   # one pass on each mock GPU (their own targets: CUDA, AMD)


@pytest.fixture(autouse=True, params=_VARIANTS, ids=[f"{d}-EMULATE={e}" if e else d for d, e in _VARIANTS])
def default_device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
  dev, emulate = request.param
  monkeypatch.setenv("DEV", dev)
  if dev.split(":")[0] in _MOCK_GPUS: monkeypatch.setenv("MOCKGPU", os.environ.get("MOCKGPU") or "1")
  if emulate: monkeypatch.setenv("EMULATE", emulate)
  else: monkeypatch.delenv("EMULATE", raising=False)
  return dev
