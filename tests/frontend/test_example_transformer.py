"""examples/transformer.py (a tinygrad-style program: scaled_dot_product_attention, cross_entropy, chunk, gelu, Adam):
it trains, and the CPU and the PYTHON device compute the same losses bit for bit."""
import functools
import importlib.util
import os
from pathlib import Path

from refgrad import Device

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "transformer.py"
STEPS = 3


@functools.cache
def _losses(device: str, emulate: str) -> tuple[float, ...]:
  spec = importlib.util.spec_from_file_location("transformer_example", EXAMPLE)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return tuple(mod.main(device, STEPS))

def losses(device: str) -> tuple[float, ...]: return _losses(device, os.environ.get("EMULATE", ""))


def test_transformer_trains_identically_on_cpu_and_python():
  other = "PYTHON" if Device.DEFAULT == "CPU" else "CPU"
  a, b = losses(Device.DEFAULT), losses(other)
  assert a == b, f"{Device.DEFAULT} {a} vs {other} {b}"
  assert len(a) == STEPS and 2.5 < a[0] < 3.5, a       # about ln(16) at the start
  assert a[-1] < a[0] - 0.2, a                         # and lower after a few Adam steps
