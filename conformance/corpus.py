"""The fuzzer's regression corpus as conformance cases (`--group corpus`): every saved case in oracles/corpus/*.json (a
kernel AST, a target, Opts, inputs), or in a user's own `--corpus DIR`, is checked again on each device with the
shared oracles (oracles/check.py: the device against PYTHON bit for bit on the same program, optimized against
unoptimized, red zones, checked mode, the AST evaluator). A case passes when none of them fails: the bug it was saved
for is fixed and stays fixed."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import oracles
from conformance.suite import Result
from oracles.case import Finding
from oracles.case import Result as OracleResult
from oracles.check import check_cases


def corpus_dir() -> Path:
  return Path(oracles.__file__).with_name("corpus")

def corpus_findings(directory: Path | None = None) -> list[tuple[str, Finding | str]]:
  """(case name, the finding or why its file cannot be read) of every *.json in the corpus directory."""
  out: list[tuple[str, Finding | str]] = []
  for path in sorted((directory or corpus_dir()).glob("*.json")):
    try: out.append((f"corpus {path.stem}", Finding.load(path)))
    except ValueError as e: out.append((f"corpus {path.stem}", str(e)))
  return out

def corpus_result(name: str, fd: Finding, device: str, r: dict[str, Any]) -> Result:
  """The conformance Result of an oracle result (a dict of oracles.case.Result) of a corpus case on a device."""
  status = {"pass": "pass", "fail": "fail"}.get(r["status"], "error")
  detail = f"{r['oracle']} on {r['device']}: {r['detail']}" if r["status"] == "fail" else r["detail"] if r["status"] != "pass" else ""
  return Result(name, "corpus", fd.oracle, "", "", device, status, 0, detail)

def corpus_results(devices: list[str], directory: Path | None = None) -> list[Result]:
  """Every corpus case on every device in this process (no isolation: the CLI prepares the reference in a reference worker
  and runs each device in its own, conformance/isolate.py)."""
  out = []
  for name, fd in corpus_findings(directory):
    for d in devices:
      if isinstance(fd, str): out.append(Result(name, "corpus", "?", "", "", d, "error", 0, fd)); continue
      try: r = check_cases([fd.case], [] if d == "PYTHON" else [d])[0]
      except Exception as e: r = OracleResult(0, "error", detail=f"{type(e).__name__}: {e}")
      out.append(corpus_result(name, fd, d, r.__dict__))
  return out
