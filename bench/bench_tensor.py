"""PYTHON-device vs CPU time on tensor programs. Prints a table; run `python -m bench.bench_tensor`.

Each program is realized once to compile and warm up (kernel cache), then timed over `--reps`
realizations of the same graph on fresh inputs (best time): everything a user pays per call —
scheduling, the kernel launches and copies back to numpy.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from refgrad import Tensor
from refgrad.device import Device


def _inputs(device: str, *shapes: tuple[int, ...]) -> list[Tensor]:
  rng = np.random.default_rng(0)
  return [Tensor(rng.standard_normal(s).astype(np.float32), device=device) for s in shapes]

def ready(device: str, ins: list[Tensor]) -> list[Tensor]:
  """The inputs, once their copies to the device have finished: making them is not part of a call. (A mock GPU queues the
  copy-ins and returns, so without this its timed call would run them too, where PYTHON's copies were made before.)"""
  Device[device].synchronize()
  return ins

PROGRAMS: dict[str, tuple[Callable[..., Tensor], tuple[tuple[int, ...], ...]]] = {
  "matmul 64x64": (lambda a, b: a @ b, ((64, 64), (64, 64))),
  "matmul 256x256": (lambda a, b: a @ b, ((256, 256), (256, 256))),
  "sum 1,000,000": (lambda a: a.sum(), ((1_000_000,),)),
  "conv2d 1x3x32x32, 8x3x3x3": (lambda x, w: x.conv2d(w), ((1, 3, 32, 32), (8, 3, 3, 3))),
  "softmax 128x128": (lambda x: x.softmax(), ((128, 128),)),
}


def bench(prog: Callable[..., Tensor], shapes: tuple[tuple[int, ...], ...], device: str, reps: int,
          clock: Callable[[], float] = time.perf_counter) -> float:
  """The best of `reps` timed calls by `clock` (bench_amd --cpu passes time.process_time: the mock's thread included)."""
  prog(*_inputs(device, *shapes)).numpy()   # compile + warm up
  times = []
  for _ in range(reps):
    ins = ready(device, _inputs(device, *shapes))
    st = clock()
    prog(*ins).numpy()
    times.append(clock() - st)
  return min(times)


def interleaved(prog: Callable[..., Tensor], shapes: tuple[tuple[int, ...], ...], runs: list[tuple[str, Callable[[], Any]]],
                rounds: int, clock: Callable[[], float] = time.perf_counter) -> list[float]:
  """The median time per call of each (device, context factory) in `runs`: each warmed up, then `rounds` rounds of one
  call each, so every column of a program runs under the same load (best-of-N runs column after column, which a shared
  machine's load swings between)."""
  for dev, ctx in runs:
    with ctx(): bench(prog, shapes, dev, 1, clock)
  times: list[list[float]] = [[] for _ in runs]
  for _ in range(rounds):
    for (dev, ctx), t in zip(runs, times):
      with ctx():
        ins = ready(dev, _inputs(dev, *shapes))
        st = clock()
        prog(*ins).numpy()
        t.append(clock() - st)
  return [float(np.median(t)) for t in times]


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--reps", type=int, default=5, help="runs per measurement; the best is shown (default 5)")
  args = ap.parse_args()
  from rich.console import Console
  from rich.table import Table
  t = Table(title=f"tensor programs, PYTHON vs CPU, float32 (best of {args.reps})")
  for c in ("program", "PYTHON ms", "CPU ms", "PYTHON / CPU"): t.add_column(c, justify="right" if c != "program" else "left")
  for name, (prog, shapes) in PROGRAMS.items():
    py, cpu = bench(prog, shapes, "PYTHON", args.reps), bench(prog, shapes, "CPU", args.reps)
    t.add_row(name, f"{py * 1e3:.2f}", f"{cpu * 1e3:.2f}", f"{py / cpu:.1f}x")
  Console().print(t)


if __name__ == "__main__":
  main()
