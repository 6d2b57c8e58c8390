"""PYTHON-device vs CPU time on basic kernels. Prints a table; run `python -m bench.bench_kernels`.

Kernels (float32, N = 1,000,000):
  a*b+c         one lane per element (SPECIAL idx0 of N), two roundings (no FMA)
  sum loop      one lane, a RANGE loop of N iterations into an accumulator
  sum 1000x1000 1000 lanes, each summing 1000 consecutive elements (the same work split SIMT-style)
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from refgrad.device import Buffer
from refgrad.dtype import dtypes
from refgrad.program import Runner
from refgrad.uop.ops import Ops, UOp

f32 = dtypes.float32


def muladd(n: int) -> UOp:
  i = UOp.special("idx0", n)
  a, b, c = (UOp.define_global(k, f32, n).load(i) for k in (1, 2, 3))
  return UOp.define_global(0, f32, n).store(i, a * b + c).sink()

def sum_loop(n: int, lanes: int) -> UOp:
  per = n // lanes
  lane = UOp.special("idx0", lanes)
  r = UOp.range(per, 0)
  acc = UOp(Ops.DEFINE_ACC, f32, (UOp.const(f32, 0.0), r), (0,))
  red = UOp(Ops.ASSIGN, f32, (acc, acc + UOp.define_global(1, f32, n).load(lane * per + r)))
  return UOp.define_global(0, f32, lanes).store(lane, red).sink()


def bench(name: str, sink: UOp, n_in: int, n_out: int, n_inputs: int, device: str, reps: int) -> float:
  rng = np.random.default_rng(0)
  bufs = [Buffer(device, n_out, f32)] + [Buffer.from_numpy(device, rng.standard_normal(n_in).astype(np.float32)) for _ in range(n_inputs)]
  prg = Runner.from_sink(name, sink, device)
  prg(*bufs)  # warm up (and load)
  times = []
  for _ in range(reps):
    st = time.perf_counter()
    prg(*bufs)
    times.append(time.perf_counter() - st)
  return min(times)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("-n", type=int, default=1_000_000, help="elements per kernel (default 1,000,000)")
  ap.add_argument("--reps", type=int, default=5, help="runs per measurement; the best is shown (default 5)")
  args = ap.parse_args()
  n = args.n
  rows = [("a*b+c", "muladd", muladd(n), n, n, 3, args.reps), ("sum loop (1 lane)", "sum1", sum_loop(n, 1), n, 1, 1, 1),
          ("sum 1000 lanes x loop", "sum1000", sum_loop(n, 1000), n, 1000, 1, args.reps)]
  from rich.console import Console
  from rich.table import Table
  t = Table(title=f"PYTHON vs CPU, float32, N={n} (best of {args.reps}; sum loop (1 lane): 1 run)")
  for c in ("kernel", "PYTHON ms", "CPU ms", "PYTHON / CPU"): t.add_column(c, justify="right")
  for title, name, sink, n_in, n_out, k, reps in rows:
    tp = bench(name, sink, n_in, n_out, k, "PYTHON", reps)
    tc = bench(name, sink, n_in, n_out, k, "CPU", args.reps)
    t.add_row(title, f"{tp * 1e3:.2f}", f"{tc * 1e3:.3f}", f"{tp / tc:.1f}x")
  Console().print(t)


if __name__ == "__main__":
  main()
