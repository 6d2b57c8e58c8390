"""`python -m conformance [--device D ...]`: run the suite, print op x dtype tables, exit 1 on any failure."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

from fuzz.cliargs import OneLineParser, cpus, device_problem, file_problem, positive, seed

if TYPE_CHECKING:
  from conformance.suite import Result

MOCK_GPUS = ("NV", "AMD")
MARK = {"pass": "[green]✓[/]", "fail": "[red]✗[/]", "error": "[red]E[/]"}


JOBS_PER_CPU = 4     # --jobs is capped at this many threads per CPU (each mostly waits for a compiler)
GROUPS = ("alu", "cast", "bitcast", "transcendental", "native", "corpus", "kernels")

def _parser() -> argparse.ArgumentParser:
  ap = OneLineParser(prog="python -m conformance", description=__doc__,
                               epilog="Knobs (environment) apply too, e.g. EMULATE=CUDA; a bad value is reported before anything runs. "
                                      "Exit status: 0 all passed, 1 some case failed, 2 bad arguments or environment, 130 interrupted (Ctrl-C; the reports "
                                      "hold the cases finished).")
  ap.add_argument("--device", action="append", metavar="D", help="device to test, e.g. CPU or PYTHON (repeatable); default: every registered device")
  ap.add_argument("--group", action="append", choices=GROUPS, help="only these case groups (repeatable): ALU ops, casts, bitcasts, decomposed "
                  "transcendentals (bit-exact), native transcendentals (ULP bound), corpus (the fuzzer's saved regressions, fuzz/corpus/), "
                  "kernels (every Opt kind x target x dtype class on whole kernels)")
  ap.add_argument("--seed", type=seed, default=0, metavar="S", help="seed of the random inputs (default 0)")
  ap.add_argument("--jobs", type=positive(int, "--jobs"), default=4, metavar="N",
                  help=f"cases run concurrently, so compiles overlap (default 4, at most {JOBS_PER_CPU} per CPU)")
  ap.add_argument("--json", type=Path, metavar="PATH", help="write all results as JSON here")
  ap.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML here")
  return ap


def main(argv: list[str] | None = None) -> int:
  try: return _main(argv)
  except KeyboardInterrupt:
    print("python -m conformance: interrupted", file=sys.stderr)
    return 130

def _main(argv: list[str] | None) -> int:
  args = _parser().parse_args(argv)
  try:   # refgrad reads some knobs when imported: a bad one is one line here, not a traceback per case
    from refgrad import knobs
    knobs.check_all()
  except ValueError as e:
    if not hasattr(e, "knob"): raise
    print(f"error: {e}", file=sys.stderr)
    return 2
  from conformance.suite import all_cases, run_case
  from refgrad.device import Device, write_atomic
  try: _ = Device.DEFAULT   # DEV must name a registered device
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.jobs > (most := JOBS_PER_CPU * cpus()):
    print(f"python -m conformance: note: --jobs {args.jobs} capped at {most} ({JOBS_PER_CPU} per CPU)", file=sys.stderr)
    args.jobs = most
  try: devices = list(dict.fromkeys(Device.canonicalize(d) for d in (args.device or Device.names)))
  except KeyError as e:
    print(f"error: {e.args[0]}", file=sys.stderr)
    return 2
  # the mock GPUs are part of the default run: their runtimes need MOCKGPU=1 to load the mock driver (refgrad/runtime/driver.py)
  if any(d.split(":")[0].split("_")[0] in MOCK_GPUS for d in devices): os.environ.setdefault("MOCKGPU", "1")
  for d in list(devices):   # a device named on the command line must work; one of the default list is skipped with a note
    if (why := device_problem(d, "--device")) is None: continue
    if args.device:
      print(f"error: {why}", file=sys.stderr)
      return 2
    print(f"python -m conformance: note: {why.replace('--device: ', '').replace('cannot be constructed', 'skipped: it cannot be constructed')}",
          file=sys.stderr)
    devices.remove(d)
  if (why := file_problem(args.json, "--json") or file_problem(args.junit, "--junit")):
    print(f"error: {why}", file=sys.stderr)
    return 2
  cases = [c for c in all_cases() if not args.group or c.group in args.group]

  from rich.console import Console
  console = Console()
  st = time.perf_counter()
  jobs = [(c, d) for d in devices for c in cases]
  interrupted = False
  if not console.is_terminal: console.print(f"running {len(cases)} cases on {', '.join(devices)}")   # a log says what it ran
  with console.status(f"running {len(cases)} cases on {', '.join(devices)}..."), ThreadPoolExecutor(args.jobs) as ex:
    futures = [ex.submit(run_case, c, d, args.seed) for c, d in jobs]
    try:
      for fut in futures: fut.result()
    except KeyboardInterrupt:   # Ctrl-C: the cases running finish, the queued ones are dropped, the finished ones are reported
      interrupted = True
      ex.shutdown(wait=True, cancel_futures=True)
  results = [f.result() for f in futures if f.done() and not f.cancelled()]
  if not interrupted and (not args.group or "corpus" in args.group):
    from conformance.corpus import corpus_results
    corpus = corpus_results(devices)
    results += corpus
    console.print(f"corpus: {sum(r.status == 'pass' for r in corpus)} of {len(corpus)} saved fuzz cases x devices pass")
  if not args.group or "kernels" in args.group:
    from conformance.opt_kernels import kernels_results
    with console.status("running the kernels group (Opt kinds x targets x dtype classes)..."): ks = kernels_results(devices)
    results += ks
    console.print(f"kernels: {sum(r.status == 'pass' for r in ks)} of {len(ks)} kernel x Opt cases x devices pass")
  for d in devices: _print_tables(console, [r for r in results if r.device == d], d)
  failed = [r for r in results if r.status != "pass"]
  for r in failed: console.print(f"[red]{r.status.upper()}[/] {r.device} {r.case}: {r.detail}", markup=True, highlight=False)
  console.print(f"{len(results) - len(failed)} passed, {len(failed)} failed ({len(cases)} cases x {len(devices)} devices, "
                f"{sum(r.lanes for r in results)} lanes, {time.perf_counter() - st:.1f} s)")
  if interrupted: console.print(f"interrupted (Ctrl-C): {len(results)} of {len(jobs)} cases x devices finished; the corpus was not run")
  if args.json: write_atomic(args.json, json.dumps([asdict(r) for r in results], indent=1).encode())
  if args.junit: write_atomic(args.junit, _junit(results))
  return 130 if interrupted else 1 if failed else 0


SHORT = {"bool": "bool", "char": "i8", "short": "i16", "int": "i32", "long": "i64", "uchar": "u8", "ushort": "u16", "uint": "u32",
         "ulong": "u64", "half": "f16", "bfloat16": "bf16", "float": "f32", "double": "f64"}

def _print_tables(console, results: list[Result], device: str) -> None:
  from rich.table import Table

  from refgrad.dtype import dtypes
  from refgrad.uop.ops import Ops
  by = {(r.group, r.op if r.group in ("alu", "transcendental", "native") else r.src_dtype, r.dtype): r for r in results}
  cols = [d.name for d in dtypes.all]
  for group, title in (("alu", "ALU op (row) x operand dtype"), ("transcendental", "decomposed transcendentals, bit-exact"),
                       ("native", "native transcendentals, max ULP (bound 1)"),
                       ("cast", "CAST source (row) -> target"), ("bitcast", "BITCAST source (row) -> target")):
    keys = {k[1] for k in by if k[0] == group}
    if not keys: continue
    by_op = group in ("alu", "transcendental", "native")
    rows = sorted(keys, key=lambda k: Ops[k].value) if by_op else [c for c in cols if c in keys]
    t = Table(title=f"{device}: {title}", title_justify="left", padding=(0, 0), pad_edge=False)
    t.add_column("", no_wrap=True)
    for c in cols: t.add_column(SHORT[c], justify="center", no_wrap=True, min_width=4)
    for row in rows:
      t.add_row(SHORT.get(row, row), *(_cell(by.get((group, row, c))) for c in cols))
    console.print(t)


def _cell(r: Result | None) -> str:
  if r is None: return "[dim]·[/]"
  if r.max_ulp is None or r.status == "error": return MARK[r.status]
  return f"[{'green' if r.status == 'pass' else 'red'}]{r.max_ulp:.2f}[/]"


def _junit(results: list[Result]) -> bytes:
  root = ET.Element("testsuites")
  for d in sorted({r.device for r in results}):
    rs = [r for r in results if r.device == d]
    suite = ET.SubElement(root, "testsuite", name=f"conformance.{d}", tests=str(len(rs)),
                          failures=str(sum(r.status == "fail" for r in rs)), errors=str(sum(r.status == "error" for r in rs)))
    for r in rs:
      tc = ET.SubElement(suite, "testcase", classname=f"conformance.{d}.{r.group}", name=r.case)
      if r.status != "pass": ET.SubElement(tc, "failure" if r.status == "fail" else "error", message=r.detail[:200]).text = r.detail
  return ET.tostring(root, encoding="utf-8", xml_declaration=True)


if __name__ == "__main__":
  sys.exit(main())
