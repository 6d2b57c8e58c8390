"""examples/mnist_mlp.py: the loss falls on each device, and CPU and PYTHON compute the same losses bit for bit."""
import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

from refgrad import Device

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_mlp.py"
STEPS = 12


def load_example():
  spec = importlib.util.spec_from_file_location("mnist_mlp", EXAMPLE)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

@functools.cache
def losses(device: str) -> tuple[float, ...]:
  """Adam's losses on device (cached: a worker trains on each device once)."""
  before = Device.DEFAULT
  ls = load_example().main(device, STEPS, "adam")
  assert Device.DEFAULT == before   # main trains on `device` without changing the caller's default
  return tuple(ls)


def test_loss_falls_on_default_device():
  ls = losses(Device.DEFAULT)
  assert len(ls) == STEPS and all(isinstance(v, float) for v in ls)
  assert 1.8 < ls[0] < 3.5, ls                        # about ln(10) at the start
  assert sum(ls[-3:]) / 3 < 0.6 * sum(ls[:3]) / 3, ls   # and clearly lower after a few steps

def test_cpu_and_python_losses_identical():
  cpu, py = losses("CPU"), losses("PYTHON")
  assert cpu == py, f"first difference at step {next(i for i, (a, b) in enumerate(zip(cpu, py)) if a != b)}: {cpu} vs {py}"

def test_cli_prints_losses():
  out = subprocess.run([sys.executable, str(EXAMPLE), "--device", "PYTHON", "--steps", "2", "--opt", "sgd"],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  lines = [ln for ln in out.stdout.splitlines() if ln.startswith("step")]
  assert len(lines) == 2 and "loss" in lines[0] and float(lines[1].split()[3]) > 0
