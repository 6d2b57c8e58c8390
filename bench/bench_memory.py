"""Peak host memory of the PYTHON device on an elementwise program, against the bytes of the live buffers.

`python -m bench.bench_memory [N]` (default N = 50,000,000 float32): a, b, c are realized on PYTHON, then
`(a * b + c).realize()` runs under tracemalloc. Live buffers: a, b, c and the result (4 * N * 4 bytes). The peak
counts everything numpy and Python allocate while the kernel runs, on top of the live buffers. The PYTHON device tracks
which bytes are defined in a bitmap (1/8 of a buffer) that is dropped once the buffer is fully written, and race
tracking for a buffer only its one identity-indexed STORE writes is skipped, so the target is peak <= 1.5x the live
bytes. Run it with another checkout first on PYTHONPATH to compare (it prints which refgrad it measured).
"""
from __future__ import annotations

import sys
import time
import tracemalloc

import numpy as np


def main() -> None:
  import refgrad
  from refgrad import Tensor
  n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000_000
  rng = np.random.default_rng(0)
  a, b, c = (Tensor(rng.standard_normal(n, dtype=np.float32), device="PYTHON").realize() for _ in range(3))
  tracemalloc.start()
  base = tracemalloc.get_traced_memory()[0]   # the inputs were allocated before tracing: counted from their size
  st = time.perf_counter()
  out = (a * b + c).realize()
  et = time.perf_counter() - st
  peak = tracemalloc.get_traced_memory()[1] - base
  tracemalloc.stop()
  live = 4 * n * 4
  inputs = 3 * n * 4
  print(f"refgrad from {refgrad.__file__}")
  print(f"{'program':24s} {'N':>12s} {'live buffers':>14s} {'peak':>12s} {'peak / live':>12s} {'time':>9s}")
  print(f"{'a*b+c float32 PYTHON':24s} {n:12,d} {live / 2**20:11.0f} MiB {(inputs + peak) / 2**20:8.0f} MiB {(inputs + peak) / live:11.2f}x "
        f"{et:8.2f}s")
  assert out.shape == (n,)


if __name__ == "__main__":
  main()
