"""The fuzzer's regression corpus as conformance cases (`--group corpus`): every saved case in oracles/corpus/*.json (a
kernel AST, a target, Opts, inputs) is checked again on each device with the fuzzer's oracles (oracles/check.py: the
device against PYTHON bit for bit on the same program, optimized against unoptimized, red zones, checked mode, the AST
evaluator). A case passes when none of them fails: the bug it was saved for is fixed and stays fixed."""
from __future__ import annotations

from pathlib import Path

from conformance.suite import Result


def corpus_dir() -> Path:
  import oracles
  return Path(oracles.__file__).with_name("corpus")

def corpus_results(devices: list[str], directory: Path | None = None) -> list[Result]:
  # the oracles live with the fuzzer that found these cases; importing them here keeps one definition of each check
  from oracles.case import Finding
  from oracles.check import check_cases
  out = []
  for path in sorted((directory or corpus_dir()).glob("*.json")):
    try: fd = Finding.load(path)
    except ValueError as e:
      out += [Result(f"corpus {path.stem}", "corpus", "?", "", "", d, "error", 0, str(e)) for d in devices]
      continue
    for d in devices:
      try: r = check_cases([fd.case], [] if d == "PYTHON" else [d])[0]
      except Exception as e: out.append(Result(f"corpus {path.stem}", "corpus", fd.oracle, "", "", d, "error", 0, f"{type(e).__name__}: {e}")); continue
      status = {"pass": "pass", "fail": "fail"}.get(r.status, "error")
      detail = f"{r.oracle} on {r.device}: {r.detail}" if r.status == "fail" else r.detail if r.status != "pass" else ""
      out.append(Result(f"corpus {path.stem}", "corpus", fd.oracle, "", "", d, status, 0, detail))
  return out
