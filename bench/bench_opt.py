"""What the optimizer buys: kernel time of a 256x256 matmul, unoptimized (NOOPT) vs the hand-coded heuristics, on the
PYTHON device and on CPU, for the CPU target and for the emulated GPUs (EMULATE=CUDA / AMD: work-items, and tensor
cores for the half->float matmul); then BEAM=n vs the heuristics on CPU. Prints a table; run `python -m bench.bench_opt`.

Times are kernel launches only (the program compiled and warmed up first), best of `--reps`. BEAM's search time is
printed beside it and is paid once per kernel (the result is cached; IGNORE_BEAM_CACHE=1 is set here so it is measured).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from refgrad import Tensor, dtypes, schedule
from refgrad.codegen import to_linear
from refgrad.device import Buffer, Device
from refgrad.heuristic import hand_coded_optimizations
from refgrad.kernel import Kernel
from refgrad.program import Runner
from refgrad.search import beam_search
from refgrad.target import TARGETS, Target

N = 256


def matmul_ast(half: bool):
  dt = dtypes.float16 if half else dtypes.float32
  a, b = Tensor.empty(N, N, dtype=dt, device="CPU"), Tensor.empty(N, N, dtype=dt, device="CPU")
  items, _ = schedule.create_schedule([a.matmul(b, dtype=dtypes.float32).uop], "CPU")
  return items[-1].ast, dt

def time_kernel(k: Kernel, device: str, dt, reps: int) -> float:
  """Best launch time in seconds of kernel `k` on `device` (inputs standard normal)."""
  rng = np.random.default_rng(0)
  bufs = [Buffer(device, N * N, dtypes.float32)] + [Buffer.from_numpy(device, rng.standard_normal(N * N).astype(dt.np)) for _ in range(2)]
  r = Runner(k.name, to_linear(k.lower(), Device[device].renderer), device)
  r(*bufs)
  return min(r(*bufs) or 0.0 for _ in range(reps))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=3, help="runs per measurement; the best is shown (default 3)")
  ap.add_argument("--beam", type=int, default=2, help="BEAM width for the last table (0: skip it)")
  args = ap.parse_args()
  print(f"{N}x{N} matmul, kernel time in ms (best of {args.reps})")
  print(f"{'program':<22}{'target':<8}{'device':<8}{'NOOPT':>10}{'heuristic':>11}{'speedup':>9}  heuristic Opts")
  for half in (False, True):
    ast, dt = matmul_ast(half)
    for tname in ("CPU", "CUDA", "AMD"):
      tgt: Target = TARGETS[tname]
      if half and not tgt.tensor_cores: continue
      for device in ("PYTHON", "CPU"):
        k0 = Kernel(ast, "mm", tgt)
        kh = hand_coded_optimizations(k0)
        t0, th = time_kernel(k0, device, dt, args.reps), time_kernel(kh, device, dt, args.reps)
        name = f"{'half->float' if half else 'float'} matmul"
        print(f"{name:<22}{tname:<8}{device:<8}{t0 * 1e3:>10.2f}{th * 1e3:>11.2f}{t0 / th:>8.1f}x  {', '.join(map(repr, kh.applied))}")
  if args.beam > 0:
    os.environ["IGNORE_BEAM_CACHE"] = "1"
    ast, dt = matmul_ast(False)
    k0 = Kernel(ast, "mm")
    th = time_kernel(hand_coded_optimizations(k0), "CPU", dt, args.reps)
    st = time.perf_counter()
    kb = beam_search(k0, "CPU", args.beam)
    search = time.perf_counter() - st
    tb = time_kernel(kb, "CPU", dt, args.reps)
    print(f"\nCPU float matmul: heuristic {th * 1e3:.2f} ms, BEAM={args.beam} {tb * 1e3:.2f} ms ({th / tb:.2f}x; search {search:.1f} s)"
          f"  BEAM Opts: {', '.join(map(repr, kb.applied))}")


if __name__ == "__main__":
  main()
