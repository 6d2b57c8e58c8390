"""The mock AMD GPU against the PYTHON device. Prints tables; run `python -m bench.bench_amd` (sets MOCKGPU=1).

1. The tensor programs of bench/bench_tensor.py on PYTHON (CPU target), PYTHON with EMULATE=AMD (the very programs AMD
   runs: AMD's target is AMD) and the mock AMD GPU on each of its two code paths, each column naming its path:
   "AMD ir": the AMD device built with AMD_CODE=ir (this script sets it, whatever the environment says: isa is the
   default), the mock running refgrad's serialized program; "AMD isa": the AMD_ISA device (always AMD_CODE=isa: LLVM IR
   compiled by llvmlite for gfx1100, the mock running the RDNA3 machine code). Both pay everything a user pays per call:
   scheduling, launches through PM4 (the dispatch recipe in an indirect buffer, one INDIRECT_BUFFER packet + doorbell per
   submission), copies through SDMA, the copy back to numpy. The goal is AMD isa <= 3x PYTHON-EMULATE=AMD. llvmlite's
   compile time is its own line (warm-up compiles, not in the column; cached on disk after the first run).
   By default each program is timed in --interleave 15 rounds of one call per column (every column under the same
   load) and the medians are printed; --interleave 0 prints the best of --reps calls per column, column after column.
   The inputs' copies to the device finish before each timed call (bench_tensor.ready), as PYTHON's do.
2. Launches per second of a tiny kernel through the full command path (enqueue rate and end to end), next to PYTHON and NV
   ("AMD ir" and "AMD isa" as above).
The JIT'd MLP step: `python -m bench.bench_jit --devices PYTHON/AMD AMD`.
"""
from __future__ import annotations

import argparse
import os
import time

from bench.bench_nv import ROUNDS, emulate, launches_per_second
from bench.bench_tensor import PROGRAMS, bench, interleaved


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--reps", type=int, default=5, help="timed calls per column with --interleave 0; the best is printed (default 5)")
  ap.add_argument("--interleave", type=int, default=ROUNDS, metavar="N",
                  help=f"N rounds of one call per column, medians printed (default {ROUNDS}); 0: best of --reps, column after column")
  ap.add_argument("--launches", type=int, default=2000, help="tiny-kernel launches timed for the launch rate (default 2000)")
  ap.add_argument("--programs", help="semicolon list of bench_tensor programs (their names hold commas; default: all)")
  ap.add_argument("--cpu", action="store_true", help="process CPU time instead of wall time (for a loaded machine)")
  args = ap.parse_args()
  clock = time.process_time if args.cpu else time.perf_counter   # CPU time: steadier on a loaded machine
  os.environ.setdefault("MOCKGPU", "1")
  os.environ["AMD_CODE"] = "ir"   # the "AMD" device is the ir column; the isa column is AMD_ISA (named: the knob does not change it)
  from rich.console import Console
  from rich.table import Table

  from refgrad.runtime.ops_amd import AMDLLVMCompiler
  con = Console(width=max(Console().width, 160))
  progs = {k: v for k, v in PROGRAMS.items() if not args.programs or k in args.programs.split(";")}
  how = f"median of {args.interleave} interleaved rounds" if args.interleave else f"best of {args.reps}"
  t = Table(title=f"tensor programs, float32, {how} ({'CPU' if args.cpu else 'wall'} time): PYTHON, PYTHON emulating AMD, "
                  "mock AMD (ir and isa code paths)")
  for c in ("program", "PYTHON ms", "PYTHON-AMD ms", "AMD ir ms", "ir / PYTHON-AMD", "AMD isa ms", "isa / PYTHON-AMD"):
    t.add_column(c, justify="right" if c != "program" else "left")
  for name, (prog, shapes) in progs.items():
    if args.interleave:
      runs = [("PYTHON", lambda: emulate(None)), ("PYTHON", lambda: emulate("AMD")), ("AMD", lambda: emulate(None)), ("AMD_ISA", lambda: emulate(None))]
      py, pyt, mock, isa = interleaved(prog, shapes, runs, args.interleave, clock)
    else:
      with emulate(None): py, mock, isa = (bench(prog, shapes, d, args.reps, clock) for d in ("PYTHON", "AMD", "AMD_ISA"))
      with emulate("AMD"): pyt = bench(prog, shapes, "PYTHON", args.reps, clock)
    t.add_row(name, f"{py * 1e3:.2f}", f"{pyt * 1e3:.2f}", f"{mock * 1e3:.2f}", f"{mock / pyt:.2f}x", f"{isa * 1e3:.2f}", f"{isa / pyt:.2f}x")
  con.print(t)
  con.print(f"llvmlite gfx1100 compile time: {AMDLLVMCompiler.seconds:.2f} s for {AMDLLVMCompiler.count} kernels (not in the isa column: "
            "warm-up compiles, cached on disk after the first run)")
  t = Table(title=f"launches of a 1-element kernel, {args.launches} in a row")
  for c in ("device", "enqueued / s", "end to end / s"): t.add_column(c, justify="right" if c != "device" else "left")
  for dev, label in (("PYTHON", "PYTHON"), ("NV", "NV"), ("AMD", "AMD ir"), ("AMD_ISA", "AMD isa")):
    enq, tot = launches_per_second(dev, args.launches)
    t.add_row(label, f"{enq:,.0f}", f"{tot:,.0f}")
  con.print(t)


if __name__ == "__main__":
  main()
