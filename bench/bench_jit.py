"""TinyJit: an Adam training step of the MLP in examples/mnist_mlp.py (64-32-10, batch 32), per device, without the JIT,
with it (launch by launch, JIT=2) and on HCQ devices with the graph (one command buffer per step). Prints a table.

  python -m bench.bench_jit [--steps 20] [--devices CPU PYTHON PYTHON/CUDA NV PYTHON/AMD AMD]   (sets MOCKGPU=1)

PYTHON/CUDA is the PYTHON device with EMULATE=CUDA: the very kernels the mock NV GPU runs, without the mock (and
PYTHON/AMD the mock AMD GPU's).

Each step gets new input tensors already on the device; the time is the steps' wall time until the last loss is on the
host, divided by the steps (the first two calls, which compile and capture, are not counted). The loss of every step is
checked to be bit-identical across the variants.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import numpy as np


def _example() -> Any:
  spec = importlib.util.spec_from_file_location("mnist_mlp", Path(__file__).resolve().parents[1] / "examples" / "mnist_mlp.py")
  assert spec is not None and spec.loader is not None
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


HCQ = ("NV", "AMD")   # devices whose replay can be one command buffer


def run(device: str, variant: str, steps: int) -> tuple[float, float, list[bytes], int | None]:
  """(seconds per call, seconds per step, each step's loss bits, launches per replay) for variant 'eager' | 'jit' (JIT=2) |
  'graph'. A call returns once the step is enqueued (HCQ devices run it asynchronously); a step ends with its loss read."""
  from refgrad import Tensor, TinyJit
  from refgrad.device import Device
  from refgrad.nn.optim import Adam
  from refgrad.nn.state import get_parameters
  ex = _example()
  os.environ["JIT"] = "2" if variant == "jit" else "1"
  with ex.default_device(device):
    Tensor.manual_seed(0)
    model = ex.MLP()
    opt = Adam(get_parameters(model), lr=0.01)
    def step(x: Tensor, y: Tensor) -> Tensor:
      opt.zero_grad()
      loss = ex.cross_entropy(model(x), y)
      loss.backward()
      Tensor.realize_all(loss, *opt.schedule_step())
      return loss
    f = step if variant == "eager" else TinyJit(step)
    rng = np.random.default_rng(0)
    n = steps + 2
    xs = [Tensor(rng.standard_normal((ex.BATCH, ex.FEATURES)).astype(np.float32), device=device).realize() for _ in range(n)]
    ys = [Tensor(rng.integers(0, ex.CLASSES, ex.BATCH).astype(np.int32), device=device).realize() for _ in range(n)]
    losses = [f(xs[i], ys[i]).numpy().tobytes() for i in range(2)]
    Device[device].synchronize()
    st, call = time.perf_counter(), 0.0
    for i in range(2, n):
      c0 = time.perf_counter()
      loss = f(xs[i], ys[i])
      call += time.perf_counter() - c0
      losses.append(loss.numpy().tobytes())   # read each loss: a JIT output is valid until the next call
    Device[device].synchronize()
    dt = (time.perf_counter() - st) / steps
  return call / steps, dt, losses, getattr(f, "captured", None)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=20, help="training steps timed per configuration (default 20)")
  ap.add_argument("--devices", nargs="+", default=["CPU", "PYTHON", "PYTHON/CUDA", "NV", "PYTHON/AMD", "AMD"], help="DEVICE or DEVICE/EMULATED_TARGET")
  args = ap.parse_args()
  os.environ.setdefault("MOCKGPU", "1")
  from rich.console import Console
  from rich.table import Table
  t = Table(title=f"Adam step of the 64-32-10 MLP (batch 32), ms, mean of {args.steps} steps: call (until the step is enqueued) / step (loss read)")
  for c in ("device", "launches", "no JIT", "JIT, launch by launch", "JIT + graph", "step speed-up"):
    t.add_column(c, justify="left" if c == "device" else "right")
  for row in args.devices:
    dev, _, target = row.partition("/")
    if target: os.environ["EMULATE"] = target
    else: os.environ.pop("EMULATE", None)
    res = {v: run(dev, v, args.steps) for v in ("eager", "jit", "graph") if v != "graph" or dev.split(":")[0] in HCQ}
    for v, r in res.items():
      if r[2] != res["eager"][2]: raise SystemExit(f"{dev}: the losses of {v} differ from the eager ones")
    cell = {v: f"{r[0] * 1e3:.2f} / {r[1] * 1e3:.2f}" for v, r in res.items()}
    best = min(r[1] for v, r in res.items() if v != "eager")
    t.add_row(row, str(res["jit"][3]), cell["eager"], cell["jit"], cell.get("graph", "-"), f"{res['eager'][1] / best:.1f}x")
  Console(width=150).print(t)


if __name__ == "__main__":
  main()
