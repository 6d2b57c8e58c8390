"""`python -m conformance [--device D ...]`: run the suite, print op x dtype tables, exit 1 on any failure."""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from xml.etree import ElementTree as ET

from conformance.suite import Result, all_cases, run_case
from refgrad.device import Device, write_atomic
from refgrad.dtype import dtypes

MARK = {"pass": "[green]✓[/]", "fail": "[red]✗[/]", "error": "[red]E[/]"}


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
  ap.add_argument("--device", action="append", help=f"device to test (repeatable); default: all of {', '.join(Device.names)}")
  ap.add_argument("--group", action="append", choices=["alu", "cast", "bitcast", "transcendental"], help="only these case groups")
  ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
  ap.add_argument("--jobs", type=int, default=4, help="cases run concurrently (compiles overlap)")
  ap.add_argument("--json", type=Path, help="write all results as JSON here")
  ap.add_argument("--junit", type=Path, help="write JUnit XML here")
  args = ap.parse_args(argv)
  try: devices = [Device.canonicalize(d) for d in (args.device or Device.names)]
  except KeyError as e:
    print(f"error: {e.args[0]}", file=sys.stderr)
    return 2
  cases = [c for c in all_cases() if not args.group or c.group in args.group]

  from rich.console import Console
  console = Console()
  st = time.perf_counter()
  jobs = [(c, d) for d in devices for c in cases]
  with console.status(f"running {len(cases)} cases on {', '.join(devices)}..."), ThreadPoolExecutor(args.jobs) as ex:
    results = list(ex.map(lambda cd: run_case(cd[0], cd[1], args.seed), jobs))
  for d in devices: _print_tables(console, [r for r in results if r.device == d], d)
  failed = [r for r in results if r.status != "pass"]
  for r in failed: console.print(f"[red]{r.status.upper()}[/] {r.device} {r.case}: {r.detail}", markup=True, highlight=False)
  console.print(f"{len(results) - len(failed)} passed, {len(failed)} failed ({len(cases)} cases x {len(devices)} devices, "
                f"{sum(r.lanes for r in results)} lanes, {time.perf_counter() - st:.1f} s)")
  if args.json: write_atomic(args.json, json.dumps([asdict(r) for r in results], indent=1).encode())
  if args.junit: write_atomic(args.junit, _junit(results))
  return 1 if failed else 0


def _print_tables(console, results: list[Result], device: str) -> None:
  from rich.table import Table
  by = {(r.group, r.op, r.src_dtype if r.group in ("cast", "bitcast") else "", r.dtype): r for r in results}
  cols = [d.name for d in dtypes.all]
  for group, title in (("alu", "ALU op x operand dtype"), ("transcendental", "decomposed transcendentals (bit-exact)"),
                       ("cast", "CAST source (row) -> target (column)"), ("bitcast", "BITCAST source (row) -> target (column)")):
    rows = sorted({(r.op if group in ("alu", "transcendental") else r.src_dtype) for r in results if r.group == group},
                  key=lambda k: cols.index(k) if k in cols else 0)
    if not rows: continue
    t = Table(title=f"{device}: {title}", title_justify="left")
    t.add_column("")
    for c in cols: t.add_column(c, justify="center")
    for row in rows:
      cells = []
      for c in cols:
        key = (group, row, "", c) if group in ("alu", "transcendental") else (group, "CAST" if group == "cast" else "BITCAST", row, c)
        cells.append(MARK[by[key].status] if key in by else "[dim]·[/]")
      t.add_row(row, *cells)
    console.print(t)


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
