"""`python -m conformance [--device D ...]`: run the suite, print op x dtype tables, exit 1 on any failure.

refgrad and the modules that import it (conformance.suite, ...) are imported inside the functions, after
knobs.check_all(): refgrad reads some knobs (DEBUG, ...) when imported, and a bad one must be one line and exit 2, not
a traceback."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.table import Table

from oracles.cliargs import OneLineParser, cpus, file_problem, positive, seed

if TYPE_CHECKING:
  from conformance.suite import Result

MOCK_GPUS = ("NV", "NV_NVCC", "AMD", "AMD_ISA")   # NV_NVCC: the mock NV running nvcc's PTX (ops_nv.CODE_DEVICES); AMD_ISA: RDNA3 code
MARK = {"pass": "[green]✓[/]", "fail": "[red]✗[/]", "error": "[red]E[/]", "crash": "[red]C[/]", "timeout": "[red]T[/]"}


JOBS_PER_CPU = 4     # --jobs is capped at this many worker processes per CPU (each mostly waits for a compiler)
TIMEOUT = 10.0       # default --timeout: a case takes milliseconds; a fresh worker's first compile on a loaded machine, seconds
ORACLE_TIMEOUT_FACTOR = 6   # a corpus or kernels case runs several programs and oracles: this many times --timeout
AHEAD = 128   # cases per batched compile (conformance/suite.py run_on_device)
GROUPS = ("alu", "cast", "bitcast", "transcendental", "native", "corpus", "kernels")

def _parser() -> argparse.ArgumentParser:
  ap = OneLineParser(prog="python -m conformance", description=__doc__,
                               epilog="Knobs (environment) apply too, e.g. EMULATE=CUDA; a bad value is reported before anything runs. "
                                      "Exit status: 0 all passed, 1 some case failed, 2 bad arguments or environment, 130 interrupted (Ctrl-C; the reports "
                                      "hold the cases finished).")
  ap.add_argument("--device", action="append", metavar="D", help="device to test, e.g. CPU or PYTHON (repeatable); default: every registered device")
  ap.add_argument("--group", action="append", choices=GROUPS, help="only these case groups (repeatable): ALU ops, casts, bitcasts, decomposed "
                  "transcendentals (bit-exact), native transcendentals (ULP bound), corpus (the fuzzer's saved regressions, oracles/corpus/), "
                  "kernels (every Opt kind x target x dtype class on whole kernels)")
  ap.add_argument("--seed", type=seed, default=0, metavar="S", help="seed of the random inputs (default 0)")
  ap.add_argument("--jobs", type=positive(int, "--jobs"), default=4, metavar="N",
                  help=f"cases run concurrently, so compiles overlap (default 4, at most {JOBS_PER_CPU} per CPU)")
  ap.add_argument("--exclude", action="append", default=[], metavar="D", help="leave device D out (repeatable)")
  ap.add_argument("--preload", action="append", default=[], metavar="MODULE",
                  help="module each device worker imports first, never the parent that computes expected values (a plugin; repeatable)")
  ap.add_argument("--case", action="append", metavar="NAME", help="only the case(s) of this name, e.g. 'ADD float' (repeatable; a rerun line prints it)")
  ap.add_argument("--timeout", type=positive(float, "--timeout"), default=TIMEOUT, metavar="S",
                  help=f"seconds a case may take on a device before it is a failed 'timeout' case and its worker is killed (default {TIMEOUT:g})")
  ap.add_argument("--corpus", type=Path, metavar="DIR", help="the directory of saved findings `--group corpus` replays (default: refgrad's own, oracles/corpus/)")
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
  from refgrad.device import Device, write_atomic
  try: _ = Device.DEFAULT   # DEV must name a registered device
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  for why in Device.refused.values(): print(f"python -m conformance: REFUSED: {why}", file=sys.stderr)
  if args.jobs > (most := JOBS_PER_CPU * cpus()):
    print(f"python -m conformance: note: --jobs {args.jobs} capped at {most} ({JOBS_PER_CPU} per CPU)", file=sys.stderr)
    args.jobs = most
  try:
    devices = list(dict.fromkeys(Device.canonicalize(d) for d in (args.device or Device.names)))
    excluded = {Device.canonicalize(d) for d in args.exclude}
  except KeyError as e:
    print(f"error: {e.args[0]}", file=sys.stderr)
    return 2
  devices = [d for d in devices if d not in excluded]
  if not args.device:   # a default device that needs a program this machine lacks (NV_NVCC: nvcc), or runs another's code, is left out with a note
    for d, why in [(d, why) for d in devices if (why := Device.unavailable(d) or Device.duplicate(d))]:
      print(f"python -m conformance: note: device {d} left out: {why}", file=sys.stderr)
      devices.remove(d)
  if not devices:
    print("error: --exclude leaves no device to test", file=sys.stderr)
    return 2
  if (why := file_problem(args.json, "--json") or file_problem(args.junit, "--junit")):
    print(f"error: {why}", file=sys.stderr)
    return 2
  if args.corpus is not None and not args.corpus.is_dir():
    print(f"error: --corpus {args.corpus}: not a directory", file=sys.stderr)
    return 2
  # the mock GPUs are part of the default run: their runtimes need MOCKGPU=1 to load the mock driver (refgrad/runtime/driver.py)
  if any(d.split(":")[0] in MOCK_GPUS for d in devices): os.environ.setdefault("MOCKGPU", "1")
  from conformance.isolate import REFERENCE, Pool
  reference = not args.group or any(g in args.group for g in ("corpus", "kernels"))   # their expected bits come from a reference worker
  pool = Pool(devices, max(1, args.jobs // len(devices)), {k: os.environ[k] for k in ("MOCKGPU", "REFGRAD_CACHE") if k in os.environ}, tuple(args.preload),
              total=args.jobs, reference=reference)
  results: list[Result] = []
  try:   # the reports are written however the run ends
    broken = pool.start()
    if (why := broken.pop(REFERENCE, None)) is not None:
      print(f"error: the reference worker could not start: {why}", file=sys.stderr)
      return 2
    for d, why in broken.items():   # a device named on the command line must work; one of the default list is a failure line
      if args.device:
        print(f"error: {why}", file=sys.stderr)
        pool.close()
        return 2
      print(f"python -m conformance: FAILED: {why}", file=sys.stderr)
      results.append(_construct_failure(d, why))
    return _run(args, pool, [d for d in devices if d not in broken], results)
  finally:
    pool.close()
    if args.json: write_atomic(args.json, json.dumps([asdict(r) for r in results], indent=1).encode())
    if args.junit: write_atomic(args.junit, _junit(results))


def _construct_failure(device: str, why: str) -> Result:
  from conformance.suite import Result
  return Result("construct", "isolation", "", "", "", device, "error", 0, why)


def _run(args: argparse.Namespace, pool: Any, devices: list[str], results: list[Result]) -> int:
  from conformance.suite import Case, Result, all_cases, case_inputs, judge, result_of
  console = Console()
  st = time.perf_counter()
  cases = [(i, c) for i, c in enumerate(all_cases()) if (not args.group or c.group in args.group) and (not args.case or c.name in args.case)]
  inputs = {i: case_inputs(c, args.seed) for i, c in cases}
  cases_by = dict(cases)   # here, in the process that never loads a backend
  from conformance.ulp import NATIVE_UNMEASURED
  def measured(d: str, c: Case) -> bool: return c.group != "native" or d.split(":")[0] not in NATIVE_UNMEASURED
  for d in sorted({d for d in devices for _, c in cases if not measured(d, c)}):
    print(f"python -m conformance: note: native group not measured on {d}: {NATIVE_UNMEASURED[d.split(':')[0]]}", file=sys.stderr)
  # each job names the next AHEAD cases of its device: a worker whose compiler batches (nvcc) compiles them in one call
  mine = {d: [(i, len(inputs[i][0][0])) for i, c in cases if measured(d, c)] for d in devices}
  jobs: list[tuple[str, str, Any, Any, float]] = [(d, "alu", (i, inputs[i][0], mine[d][k + 1:k + AHEAD]), (cases_by[i].name, cases_by[i], i), args.timeout)
                                                  for d in devices for k, (i, _) in enumerate(mine[d])]
  more, unreadable = _oracle_jobs(args, devices)
  jobs += more
  results += unreadable
  from conformance.isolate import REFERENCE, oracle_results
  def on_result(device: str, job: Any, outcome: str, out: Any) -> None:
    try: judge_one(device, job, outcome, out)
    except Exception as e:   # judging is conformance's own code: a bug there is an error row, not the end of the run
      results.append(Result(job[0], "error", "", "", "", device, "error", 0, f"judging the answer failed: {type(e).__name__}: {e}"))
  def judge_one(device: str, job: Any, outcome: str, out: Any) -> None:
    label, what = job[0], job[1]
    if outcome == "ok" and isinstance(what, Case):
      cols, want = inputs[job[2]]   # by index: a native and a decomposed transcendental case share a name
      results.append(judge(what, device, cols, want, out))
    elif outcome == "ok" and what == "prepare":   # the reference's answer: PYTHON's results are its own, every other device runs its programs
      for d in devices:
        if d == "PYTHON": oracle_rows(d, job, oracle_results(out, d, None))
        else: pool.add((d, "programs", out[1], (label, "programs", job[2], job[3], out, job[5]), job[5]), on_result)
    elif outcome == "ok": oracle_rows(device, job, oracle_results(job[4], device, out))
    elif isinstance(what, Case): results.append(result_of(what, device, outcome if outcome != "error" else "error", 0, _why(outcome, device, label, out, args)))
    else:   # a reference job that failed fails the case on every device
      results.extend(_failed_oracle(r, d, outcome, _why(outcome, device, label, out, args)) for d in (devices if device == REFERENCE else [device])
                     for r in job[3] if not args.case or r[0] in args.case)
  def oracle_rows(device: str, job: Any, rs: list[dict[str, Any]]) -> None:
    results.extend(r for r in (job[2](device, x) for x in rs) if not args.case or r.case in args.case)
  n_cases = len(cases) + len({row[0] for j in jobs if j[1] == "prepare" for row in j[3][3]})
  if not console.is_terminal: console.print(f"running {n_cases} cases on {', '.join(devices)}")   # a log says what it ran
  with console.status(f"running {n_cases} cases on {', '.join(devices)}..."): pool.run(jobs, on_result)
  for d in devices:
    note = pool.fp_notes.get(d)
    results.append(Result("fp-state", "isolation", "", "", "", d, "fail" if note else "pass", 0, note or ""))
  if note := pool.fp_notes.get(REFERENCE):   # refgrad's own reference changed the FP state: its corpus and kernels bits are suspect
    results.append(Result("fp-state", "isolation", "", "", "", REFERENCE, "fail", 0, note))
  for group, what in (("corpus", "saved fuzz cases"), ("kernels", "kernel x Opt cases")):
    if rs := [r for r in results if r.group == group]: console.print(f"{group}: {sum(r.status == 'pass' for r in rs)} of {len(rs)} {what} x devices pass")
  for d in devices: _print_tables(console, [r for r in results if r.device == d], d)
  failed = [r for r in results if r.status != "pass"]
  for r in failed:
    console.print(f"[red]{r.status.upper()}[/] {r.device} {r.case}: {r.detail}", markup=True, highlight=False)
    if r.group not in ("isolation",): console.print(f"  rerun: {_rerun(r, args)}", markup=False, highlight=False)
  console.print(f"{len(results) - len(failed)} passed, {len(failed)} failed ({n_cases} cases x {len(devices)} devices, "
                f"{sum(r.lanes for r in results)} lanes, {time.perf_counter() - st:.1f} s)")
  if pool.interrupted: console.print(f"interrupted (Ctrl-C): {len(results)} of {len(jobs)} cases x devices finished")
  return 130 if pool.interrupted else 1 if failed else 0


def _oracle_jobs(args: argparse.Namespace, devices: list[str]) -> tuple[list[tuple[str, str, Any, Any, float]], list[Result]]:
  """The corpus and kernels groups: one reference job per case group (cases sharing a kernel, target and inputs share a
  run), whose answer starts a job per device (`_run`); and an error row per device for each corpus file that cannot be read.
  A job's info: (label, stage, conv(device, oracle result dict) -> Result, rows for a failure, the reference's answer, timeout)."""
  from conformance.isolate import REFERENCE
  from conformance.suite import Result
  jobs: list[tuple[str, str, Any, Any, float]] = []
  unreadable: list[Result] = []
  wanted = lambda *names: not args.case or any(n in args.case for n in names)
  slow = args.timeout * ORACLE_TIMEOUT_FACTOR
  if not args.group or "corpus" in args.group:
    from conformance.corpus import corpus_findings, corpus_result
    for name, fd in corpus_findings(args.corpus):
      if not wanted(name): continue
      if isinstance(fd, str):
        unreadable += [Result(name, "corpus", "?", "", "", d, "error", 0, fd) for d in devices]
        continue
      conv = lambda d, r, name=name, fd=fd: corpus_result(name, fd, d, r)
      jobs.append((REFERENCE, "prepare", [fd.case.to_json()], (name, "prepare", conv, [(name, "corpus", fd.oracle)], None, slow), slow))
  if not args.group or "kernels" in args.group:
    from conformance.opt_kernels import kernel_case_name, kernel_cases, kernel_result
    groups: dict[str, list[Any]] = {}
    for c in kernel_cases(): groups.setdefault(c.group_key(), []).append(c)
    for cs in groups.values():
      conv = lambda d, r, cs=cs: kernel_result(next(c for c in cs if c.index == r["index"]), d, r)
      rows = [(kernel_case_name(c), "kernels", c.opts[-1][0] if c.opts else "NONE") for c in cs]
      if not wanted(*(r[0] for r in rows)): continue
      jobs.append((REFERENCE, "prepare", [c.to_json() for c in cs], (rows[0][0], "prepare", conv, rows, None, slow * len(cs)), slow * len(cs)))
  return jobs, unreadable

def _failed_oracle(row: tuple[str, str, str], device: str, outcome: str, why: str) -> Result:
  from conformance.suite import Result
  return Result(row[0], row[1], row[2], "", "", device, outcome, 0, why)

def _why(outcome: str, device: str, label: str, detail: str, args: argparse.Namespace) -> str:
  if outcome == "timeout": return f"timeout: {device} {label}: no answer within --timeout {args.timeout:g} s; the worker was killed"
  if outcome == "crash": return f"crash: {device} {label}: {detail}"
  return detail

def _rerun(r: Result, args: argparse.Namespace) -> str:
  """One command that runs just this case again on this device."""
  group = f" --group {r.group}"
  sel = f" --case {shlex.quote(r.case)}"
  corpus = f" --corpus {shlex.quote(str(args.corpus))}" if args.corpus is not None and r.group == "corpus" else ""
  return f"python -m conformance --device {r.device}{group}{sel}{corpus} --seed {args.seed}"


SHORT = {"bool": "bool", "char": "i8", "short": "i16", "int": "i32", "long": "i64", "uchar": "u8", "ushort": "u16", "uint": "u32",
         "ulong": "u64", "half": "f16", "bfloat16": "bf16", "float": "f32", "double": "f64"}

def _print_tables(console, results: list[Result], device: str) -> None:
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
