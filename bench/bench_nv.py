"""The mock NV GPU against the PYTHON device. Prints tables; run `python -m bench.bench_nv` (sets MOCKGPU=1).

1. The tensor programs of bench/bench_tensor.py on PYTHON (CPU target), PYTHON with EMULATE=CUDA (the very programs NV
   runs: NV's target is CUDA) and NV: everything a user pays per call, scheduling, launches through GPFIFO + QMD, copies
   through the copy engine, the copy back to numpy. The mock's overhead is NV over PYTHON-EMULATE=CUDA.
   For NV the "NV" column is the default code path (NV_CODE=ptx: refgrad's PTX renderer run by the mock's PTX executor).
   The nvcc columns (when nvcc is on PATH): the same programs on a second mock NV ("NV:1") built with NV_CODE=nvcc, i.e.
   the CUDA renderer's source compiled by nvcc to PTX and run by the PTX executor; nvcc's compile time is its own line.
   "nvcc generic" runs the same with the executor's pre-decoded steps (and the loops run as arrays) off: every instruction
   through its family handler of the table (emulators/nv/ptx/fast.py `enabled`), side by side.
   --cpu-time measures CPU time of the process (all threads) instead of wall time: on a loaded shared machine wall times
   swing with the load, CPU time much less. By default each program is timed in --interleave 15 rounds of one call per
   column (every column of a program under the same load) and the medians are printed: on a shared machine the ratios
   of best-of-N runs, column after column, swing by 30% and more between runs, these much less. --interleave 0 prints
   the best of --reps calls per column instead ("nvcc generic" is always best of --reps).
2. Launches per second of a tiny kernel through the full command path: kernel arguments, a QMD, a pushbuffer segment, a
   GP entry and a doorbell per launch, then the mock decoding and running them (enqueue rate and end to end).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import time
from collections.abc import Iterator

import numpy as np

from bench.bench_tensor import PROGRAMS, bench, interleaved
from emulators.nv.ptx import fast

ROUNDS = 15   # the default of --interleave (bench_amd's too)


@contextlib.contextmanager
def emulate(target: str | None) -> Iterator[None]:
  prev = os.environ.get("EMULATE")
  if target: os.environ["EMULATE"] = target
  else: os.environ.pop("EMULATE", None)
  try: yield
  finally:
    if prev is None: os.environ.pop("EMULATE", None)
    else: os.environ["EMULATE"] = prev


@contextlib.contextmanager
def nv_code(path: str) -> Iterator[None]:
  prev = os.environ.get("NV_CODE")
  os.environ["NV_CODE"] = path
  try: yield
  finally:
    if prev is None: os.environ.pop("NV_CODE", None)
    else: os.environ["NV_CODE"] = prev


@contextlib.contextmanager
def predecoded(on: bool) -> Iterator[None]:
  """The PTX executor with (on) or without its pre-decoded instruction steps (the mock runs in this process)."""
  prev, fast.enabled = fast.enabled, on
  try: yield
  finally: fast.enabled = prev


def launches_per_second(device: str, n: int) -> tuple[float, float]:
  """(launches/s enqueued, launches/s end to end) of a one-element add kernel launched n times."""
  from refgrad import Tensor
  from refgrad.device import Buffer, Device
  from refgrad.schedule import create_schedule, get_runner
  a = Tensor(np.ones(1, np.float32), device=device).realize()
  it = create_schedule([(a + 1).uop], device)[0][-1]
  runner = get_runner(it.ast, device, it.name)
  bufs = [Buffer(device, b.arg[2], b.dtype).copyin(np.ones(b.arg[2], b.dtype.np)) for b in it.bufs]
  Device[device].synchronize()
  st = time.perf_counter()
  for _ in range(n): runner(*bufs, wait=False)
  enq = time.perf_counter() - st
  Device[device].synchronize()
  tot = time.perf_counter() - st
  return n / enq, n / tot


def main(gpu: str = "NV", target: str = "CUDA", launch_devices: tuple[str, ...] = ("PYTHON", "NV"), doc: str | None = None) -> None:
  """The two tables for mock GPU `gpu`, whose kernels are compiled for `target` (bench_amd calls this for AMD)."""
  ap = argparse.ArgumentParser(description=doc or __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--reps", type=int, default=5, help="timed calls per column with --interleave 0, and of nvcc generic; the best is printed (default 5)")
  ap.add_argument("--launches", type=int, default=2000, help="tiny-kernel launches timed for the launch rate (default 2000)")
  ap.add_argument("--cpu-time", action="store_true", help="CPU time of the process (all threads) instead of wall time")
  ap.add_argument("--interleave", type=int, default=ROUNDS, metavar="N",
                  help=f"N rounds of one call per column, medians printed (default {ROUNDS}); 0: best of --reps, column after column")
  args = ap.parse_args()
  clock = time.process_time if args.cpu_time else time.perf_counter   # (bench_tensor.bench binds its default clock at import: passed)
  if args.cpu_time: time.perf_counter = time.process_time   # type: ignore[assignment]   (the launch loop reads it)
  os.environ.setdefault("MOCKGPU", "1")
  from rich.console import Console
  from rich.table import Table
  con = Console(width=max(Console().width, 160))   # the PTX columns need the room when printed to a pipe
  how = f"median of {args.interleave} interleaved rounds" if args.interleave else f"best of {args.reps}"
  t = Table(title=f"tensor programs, float32, {how}: PYTHON, PYTHON emulating {target}, mock {gpu} ({target} target)")
  ptx = gpu == "NV" and shutil.which("nvcc") is not None
  cols = ["program", "PYTHON ms", f"PYTHON-{target} ms", f"{gpu} ms", f"{gpu} / PYTHON-{target}"]
  if ptx: cols += ["nvcc generic ms", "generic / PYTHON-CUDA", "nvcc ms", "nvcc / PYTHON-CUDA"]
  for c in cols: t.add_column(c, justify="right" if c != "program" else "left")
  for name, (prog, shapes) in PROGRAMS.items():
    if args.interleave:   # ("nvcc generic" is timed apart: switching the pre-decoded steps off and on remakes them)
      runs = [("PYTHON", lambda: emulate(None)), ("PYTHON", lambda: emulate(target)), (gpu, lambda: emulate(None))]
      if ptx: runs += [("NV:1", lambda: nv_code("nvcc"))]
      py, pyt, mock, *rest = interleaved(prog, shapes, runs, args.interleave, clock)
    else:
      with emulate(None): py, mock = bench(prog, shapes, "PYTHON", args.reps, clock), bench(prog, shapes, gpu, args.reps, clock)
      with emulate(target): pyt = bench(prog, shapes, "PYTHON", args.reps, clock)
    row = [name, f"{py * 1e3:.2f}", f"{pyt * 1e3:.2f}", f"{mock * 1e3:.2f}", f"{mock / pyt:.2f}x"]
    if ptx:
      with nv_code("nvcc"), predecoded(False): g = bench(prog, shapes, "NV:1", args.reps, clock)
      if args.interleave: p = rest[0]
      else:
        with nv_code("nvcc"): p = bench(prog, shapes, "NV:1", args.reps, clock)
      row += [f"{g * 1e3:.2f}", f"{g / pyt:.2f}x", f"{p * 1e3:.2f}", f"{p / pyt:.2f}x"]
    t.add_row(*row)
  con.print(t)
  if ptx:
    from refgrad.runtime.ops_nv import NVCCCompiler
    con.print(f"nvcc --ptx compile time: {NVCCCompiler.seconds:.2f} s for {NVCCCompiler.count} kernels (not in the PTX column: warm-up compiles, "
              "cached on disk after the first run)")
  t = Table(title=f"launches of a 1-element kernel, {args.launches} in a row")
  for c in ("device", "enqueued / s", "end to end / s"): t.add_column(c, justify="right" if c != "device" else "left")
  for dev in launch_devices:
    enq, tot = launches_per_second(dev, args.launches)
    t.add_row(dev, f"{enq:,.0f}", f"{tot:,.0f}")
  if ptx:
    with nv_code("nvcc"), predecoded(False): enq, tot = launches_per_second("NV:1", args.launches)
    t.add_row("NV nvcc generic (NV:1, NV_CODE=nvcc)", f"{enq:,.0f}", f"{tot:,.0f}")
    with nv_code("nvcc"): enq, tot = launches_per_second("NV:1", args.launches)
    t.add_row("NV nvcc (NV:1, NV_CODE=nvcc)", f"{enq:,.0f}", f"{tot:,.0f}")
  con.print(t)


if __name__ == "__main__":
  main()
