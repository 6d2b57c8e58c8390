"""Every frontend test runs on each local device and, on the PYTHON device, under each emulated GPU target:
CPU, PYTHON, PYTHON with EMULATE=CUDA and PYTHON with EMULATE=AMD (GPU-shaped kernels: work-groups, GROUP
reductions through local memory, tensor cores). `DEV=X` restricts the device and `EMULATE=Y` the target
(`DEV=PYTHON EMULATE=CUDA pytest tests/frontend`, the tox envs). Tensors made without device= go to Device.DEFAULT."""
from __future__ import annotations

import os

import pytest

_DEVICES = [os.environ["DEV"].upper()] if os.environ.get("DEV") else ["CPU", "PYTHON"]
if os.environ.get("EMULATE"): _VARIANTS = [(d, os.environ["EMULATE"].upper()) for d in _DEVICES]
else: _VARIANTS = [(d, "") for d in _DEVICES] + ([("PYTHON", "CUDA"), ("PYTHON", "AMD")] if "PYTHON" in _DEVICES else [])


@pytest.fixture(autouse=True, params=_VARIANTS, ids=[f"{d}-EMULATE={e}" if e else d for d, e in _VARIANTS])
def default_device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
  dev, emulate = request.param
  monkeypatch.setenv("DEV", dev)
  if emulate: monkeypatch.setenv("EMULATE", emulate)
  else: monkeypatch.delenv("EMULATE", raising=False)
  return dev
