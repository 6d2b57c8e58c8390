"""What a run shows and writes: the live display, the final table, JSON and JUnit reports."""
from __future__ import annotations

import json
from typing import Any
from xml.etree import ElementTree as ET

from rich.console import Group
from rich.table import Table

from fuzz.run import Fuzzer, Stats
from fuzz.stream import OPT_KINDS
from oracles.case import ORACLES
from oracles.programs import DTYPES, STEPS
from refgrad.device import write_atomic


def summary(f: Fuzzer, final: bool = False) -> Any:
  """A rich renderable: throughput, per target, findings by oracle, coverage."""
  s, o = f.stats, f.opts
  head = Table.grid(padding=(0, 2))
  head.add_row(f"[b]{s.checked}[/] cases checked", f"[b]{s.rate:.1f}[/] cases/s", f"{s.elapsed:.0f} s",
               f"{s.exact} bit-exact cross-Opt", f"UB inputs: {s.regenerated} regenerated, {s.ub} dropped", f"{s.invalid} skipped",
               f"[{'red' if s.findings else 'green'}]{len(s.findings)} findings[/]")
  head.add_row(f"seed {o.seed}", f"shard {o.shard[0]}/{o.shard[1]}", f"workers {o.workers}", "devices PYTHON + " + (", ".join(o.devices) or "none"),
               "targets " + ", ".join(o.targets), "")
  cov = Table(title="Opt kinds exercised per target (cases)", title_justify="left", padding=(0, 1))
  cov.add_column("target")
  for k in OPT_KINDS: cov.add_column(k, justify="right")
  cov.add_column("cases", justify="right")
  for t in o.targets: cov.add_row(t, *(_n(s.opt_cov[(t, k)]) for k in OPT_KINDS), str(s.by_target[t]))
  cells = len({(st, d) for st, (kinds, _) in STEPS.items() for d in DTYPES})
  covered = len(s.op_cov)
  finds = Table(title="findings by oracle", title_justify="left", padding=(0, 1))
  finds.add_column("oracle")
  finds.add_column("count", justify="right")
  finds.add_column("what it checks")
  for k, what in ORACLES.items(): finds.add_row(k, f"[red]{s.by_oracle[k]}[/]" if s.by_oracle[k] else "0", what if final else "")
  parts: list[Any] = [head, cov, f"ops x dtypes drawn: {covered} of {cells} (step, dtype) cells", f.coverage.line(_cells_total(f)), finds]
  if final and s.findings:
    ft = Table(title="findings", title_justify="left", padding=(0, 1))
    for c in ("oracle", "device", "dtype", "first diff", "Opts", "dups", "file", "detail"): ft.add_column(c, overflow="fold")
    for x in s.findings:
      ft.add_row(x["oracle"], x["device"], x.get("dtype", ""), first_diff_text(x.get("first_diff")), str(x.get("opts", "?")), str(x.get("duplicates", 0)),
                 x["path"], x["detail"][:160])
    parts.append(ft)
  if final and f.notes: parts.append("\n".join(f.notes))
  return Group(*parts)

def first_diff_text(fd: dict[str, Any] | None) -> str:
  """"MAX float (uop 15, element 1)": the first UOp whose value differs, "sum float (step 2)": the first step of a tensor
  program whose output differs; "" where not known."""
  if not fd: return ""
  return f"{fd['op']} {fd['dtype']} " + (f"(step {fd['step']})" if "step" in fd else f"(uop {fd['uop_index']}, element {fd['element']})")

def _cells_total(f: Fuzzer) -> int: return len(f.opts.targets) * (len(OPT_KINDS) + 1) * (len(DTYPES) + 1)   # + no Opt, + model kernels

def _n(x: int) -> str: return str(x) if x else "[dim]0[/]"


def to_json(f: Fuzzer) -> dict[str, Any]:
  s = f.stats
  return {"format": "refgrad.fuzz.report/1", "seed": f.opts.seed, "shard": list(f.opts.shard), "workers": f.opts.workers,
          "devices": f.opts.devices, "targets": f.opts.targets, "seconds": round(s.elapsed, 3), "checked": s.checked,
          "cases_per_second": round(s.rate, 2), "exact": s.exact, "ub_regenerated": s.regenerated, "ub_dropped": s.ub, "skipped": s.invalid, "by_target": dict(s.by_target),
          "programs_per_device": dict(s.device_programs),
          "findings_by_oracle": dict(s.by_oracle), "findings": s.findings, "notes": f.notes, "interrupted": f.interrupted,
          "opt_coverage": {f"{t}/{k}": n for (t, k), n in sorted(s.opt_cov.items())},
          "op_coverage": {f"{st}/{d}": n for (st, d), n in sorted(s.op_cov.items())},
          "coverage": {**f.coverage.to_json(), "cells_total": _cells_total(f)}, "runtime_level": f.runtime_level}

def write_json(f: Fuzzer, path: Any) -> None: write_atomic(path, (json.dumps(to_json(f), indent=1) + "\n").encode())

def write_junit(f: Fuzzer, path: Any) -> None:
  s: Stats = f.stats
  root = ET.Element("testsuites")
  suite = ET.SubElement(root, "testsuite", name="fuzz", tests=str(s.checked), failures=str(len(s.findings)), time=f"{s.elapsed:.3f}")
  for t in f.opts.targets:
    ET.SubElement(suite, "testcase", classname="fuzz.target", name=f"{t}: {s.by_target[t]} cases")
  for x in s.findings:
    tc = ET.SubElement(suite, "testcase", classname=f"fuzz.{x['oracle']}", name=f"case {x['index']} on {x['device']}")
    ET.SubElement(tc, "failure", message=x["detail"][:200]).text = f"{x['detail']}\nsaved: {x['path']}\nrerun: {x.get('rerun', '')}"
  write_atomic(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))
