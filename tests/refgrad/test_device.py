"""Device registry, buffers and copies between devices."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from refgrad.device import Buffer, Device
from refgrad.dtype import dtypes


def test_unknown_device_is_a_clear_error():
  with pytest.raises(KeyError, match=r"unknown device .TPU.*CPU, PYTHON"): Device["TPU"]
  with pytest.raises(KeyError, match="unknown device"): Buffer("nope", 4, dtypes.float32)

def test_default_from_env(monkeypatch):
  monkeypatch.setenv("DEV", "python")
  assert Device.DEFAULT == "PYTHON"
  monkeypatch.setenv("DEV", "cpu")
  assert Device.DEFAULT == "CPU"
  monkeypatch.setenv("DEV", "gpu")
  with pytest.raises(ValueError, match=r"DEV=.gpu. is not allowed: unknown device"): _ = Device.DEFAULT

@pytest.mark.parametrize("dt", [d for d in dtypes.all])
def test_copies_round_trip_between_devices(dt):
  rng = np.random.default_rng(1)
  data = rng.integers(0, 256, 64 * dt.itemsize, dtype=np.uint8).view(dt.np) if dt != dtypes.bool else rng.integers(0, 2, 64).astype(bool)
  b = Buffer.from_numpy("CPU", data, dt)
  back = b.copy_to("PYTHON").copy_to("CPU").copy_to("PYTHON").numpy()
  assert back.tobytes() == data.tobytes()

def test_buffer_size_errors():
  b = Buffer("CPU", 4, dtypes.int32)
  with pytest.raises(ValueError, match="copyin of 8 bytes"): b.copyin(np.zeros(2, np.int32))
  with pytest.raises(TypeError, match="does not hold"): Buffer.from_numpy("CPU", np.zeros(4, np.int64), dtypes.int32)
  with pytest.raises(ValueError, match=">= 0"): Buffer("CPU", -1, dtypes.int32)

def test_vector_buffers_have_a_lane_axis():
  b = Buffer.from_numpy("PYTHON", np.arange(8, dtype=np.float32), dtypes.float32.vec(4))
  assert b.size == 2 and b.numpy().shape == (2, 4)


def test_runner_checks_its_arguments():
  from refgrad.program import Runner
  from refgrad.uop.ops import UOp
  n = UOp.variable("n", 1, 8)
  i = UOp.special("idx0", 4)
  sink = UOp.define_global(0, dtypes.int32, 4).store(i, UOp.define_global(1, dtypes.int32, 4).load(i) + n).sink()
  for dev in ("CPU", "PYTHON"):
    r = Runner.from_sink("args", sink, dev)
    out, a = Buffer(dev, 4, dtypes.int32), Buffer.from_numpy(dev, np.arange(4, dtype=np.int32))
    r(out, a, var_vals={"n": 3})
    assert out.numpy().tolist() == [3, 4, 5, 6]
    with pytest.raises(ValueError, match="takes 2 buffers, got 1"): r(out)
    with pytest.raises(TypeError, match=r"holds dtypes\.float"): r(out, Buffer(dev, 4, dtypes.float32))
    with pytest.raises(ValueError, match="has 5 elements"): r(out, Buffer(dev, 5, dtypes.int32))
    with pytest.raises(ValueError, match="needs a value for variable 'n'"): r(out, a)
    with pytest.raises(ValueError, match=r"n=9 outside its range \[1, 8\]"): r(out, a, var_vals={"n": 9})
    other = "PYTHON" if dev == "CPU" else "CPU"
    with pytest.raises(ValueError, match=f"is on {other}"): r(out, a.copy_to(other), var_vals={"n": 1})


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
  """code in a new interpreter (no device made yet), killed after 60 s so a hang fails instead of passing by accident."""
  root = Path(__file__).resolve().parents[2]
  env = {**os.environ, "PYTHONPATH": str(root)}
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root, env=env)

def test_make_device_may_ask_for_another_device():
  """A backend built on another device (tests/conformance/broken_device.py: on PYTHON) in a process where that device was
  not made yet: the registry's lock is reentrant, so this returns instead of hanging."""
  r = _fresh("from refgrad.device import Device\nDevice._modules['BROKEN'] = 'tests.conformance.broken_device'\n"
             "assert 'PYTHON' not in Device._made\nd = Device['BROKEN']\nassert d.name == 'BROKEN' and 'PYTHON' in Device._made\n"
             "assert Device['broken'] is d\nprint('ok')")
  assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr

def test_make_device_asking_for_itself_raises():
  r = _fresh("import types, sys\nfrom refgrad.device import Device\nm = types.ModuleType('selfish')\n"
             "m.make_device = lambda name: Device[name]\nsys.modules['selfish'] = m\nDevice._modules['SELFISH'] = 'selfish'\n"
             "try: Device['SELFISH']\nexcept RuntimeError as e: print(e)")
  assert r.returncode == 0 and r.stdout.strip() == "device SELFISH: its make_device asks for SELFISH itself (SELFISH -> SELFISH)", r.stderr
