"""Every frontend test runs on each local device: CPU and PYTHON, or only $DEV when it is set
(`DEV=PYTHON pytest tests/frontend`, the tox envs). Tensors made without device= go to Device.DEFAULT."""
from __future__ import annotations

import os

import pytest

_DEVICES = [os.environ["DEV"].upper()] if os.environ.get("DEV") else ["CPU", "PYTHON"]


@pytest.fixture(autouse=True, params=_DEVICES)
def default_device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
  monkeypatch.setenv("DEV", request.param)
  return request.param
