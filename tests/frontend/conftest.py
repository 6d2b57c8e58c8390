"""Every frontend test runs on each local device and, on the PYTHON device, under each emulated GPU target:
CPU, PYTHON, PYTHON with EMULATE=CUDA, PYTHON with EMULATE=AMD (GPU-shaped kernels: work-groups, GROUP reductions
through local memory, tensor cores), and once on the mock NV GPU (NV with MOCKGPU=1: every kernel through GPFIFO + QMD,
every copy through the copy engine). `DEV=X` restricts the device and `EMULATE=Y` the target (`DEV=PYTHON EMULATE=CUDA
pytest tests/frontend`, `MOCKGPU=1 DEV=NV pytest tests/frontend`, the tox envs). Tensors made without device= go to
Device.DEFAULT."""
from __future__ import annotations

import os

import pytest

_DEVICES = [os.environ["DEV"].upper()] if os.environ.get("DEV") else ["CPU", "PYTHON"]
if os.environ.get("EMULATE"): _VARIANTS = [(d, os.environ["EMULATE"].upper()) for d in _DEVICES]
else:
  _VARIANTS = [(d, "") for d in _DEVICES] + ([("PYTHON", "CUDA"), ("PYTHON", "AMD")] if "PYTHON" in _DEVICES else [])
  if not os.environ.get("DEV"): _VARIANTS.append(("NV", ""))   # one pass on the mock NV GPU (its own target is CUDA)


@pytest.fixture(autouse=True, params=_VARIANTS, ids=[f"{d}-EMULATE={e}" if e else d for d, e in _VARIANTS])
def default_device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
  dev, emulate = request.param
  monkeypatch.setenv("DEV", dev)
  if dev.split(":")[0] == "NV": monkeypatch.setenv("MOCKGPU", os.environ.get("MOCKGPU") or "1")
  if emulate: monkeypatch.setenv("EMULATE", emulate)
  else: monkeypatch.delenv("EMULATE", raising=False)
  return dev
