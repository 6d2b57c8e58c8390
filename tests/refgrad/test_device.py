"""Device registry, buffers and copies between devices."""
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
  with pytest.raises(KeyError): _ = Device.DEFAULT

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
