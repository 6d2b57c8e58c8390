"""Mutation score of the oracles users run: `python -m conformance` + a short `python -m fuzz` (kernel level) + a
short `python -m fuzz --level runtime`, over the kernel-path and runtime modules.

    pip install -e .[mutation]     # cosmic-ray, pinned; never part of CI
    python -m bench.bench_mutation [--per-module N] [--modules a.py,b.py] [--fuzz-seconds S] [--seed N] [--json F] [--tree DIR]

The mutants come from cosmic-ray (https://cosmic-ray.readthedocs.io), a maintained mutation-testing library, chosen
over mutmut because its operators and `mutate_code(source, operator, occurrence)` are a plain library API over any
module, and it lets the killer be any command; mutmut 3 rewrites a whole package into trampolines and drives pytest,
while the question here is what the tools a user runs (not refgrad's own test suite) catch. Every mutation site of
cosmic-ray's argument-free core operators (binary, comparison and unary operator replacement, and/or, True/False,
break/continue, number replacement, `not` added, exceptions, decorators removed, loops made zero-iteration) is listed
per module, sites in type annotations and `def` lines left out (never evaluated: always equivalent); `--per-module` of
them are drawn with a seeded generator. Each mutant is written into ONE temporary copy of the tree (restored after),
and the three checks (two where `--tree` names an older checkout whose fuzzer has no runtime level) run on it in parallel with a fresh compile cache (a cached binary built from the unmutated
renderer must not hide the mutant); a non-zero exit or a timeout of any kills it. Survivors are printed with their
place and diff for triage: some are equivalent (dead code, a bound never reached, speed only), which the tool cannot
decide; the README gives the triage. Slow (a minute or more per mutant): `-m slow` at most, never the default CI run.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
  from cosmic_ray.ast import ast_nodes, get_ast
  from cosmic_ray.mutating import mutate_code
  from cosmic_ray.plugins import get_operator, operator_names
except ImportError:   # the optional extra: main() says how to install it
  get_operator = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parents[1]
KERNEL_PATH = ["refgrad/uop/symbolic.py", "refgrad/opt.py", "refgrad/kernel.py", "refgrad/uop/linearize.py", "refgrad/vectorize.py",
               "refgrad/renderer/cstyle.py", "refgrad/runtime/simt.py", "refgrad/schedule.py", "refgrad/gradient.py"]
RUNTIME = ["refgrad/runtime/hcq.py", "refgrad/jit.py", "refgrad/runtime/ops_nv.py", "refgrad/runtime/ops_amd.py"]
_ANNOTATION = re.compile(r"^\s*(async\s+)?def\s|^\s*[A-Za-z_][A-Za-z_0-9.]*\s*:\s*[^=]+(=|$)")   # a def line, or `name: type [= ...]`


@dataclass
class Mutant:
  path: str
  line: int
  col: int
  operator: str      # cosmic-ray's operator name (core/...)
  occurrence: int    # the site's index among that operator's sites in the module


def sites(path: str, root: Path = ROOT) -> list[Mutant]:
  """Every mutation site of the argument-free core operators in a module, annotation and def lines left out."""
  source = (root / path).read_text()
  lines, tree = source.splitlines(), get_ast(source)
  nodes = list(ast_nodes(tree))
  out = []
  for name in operator_names():
    cls = get_operator(name)
    if cls.arguments(): continue   # VariableReplacer / VariableInserter need arguments: not drawn
    op = cls()
    k = 0
    for node in nodes:
      for (line, col), _ in op.mutation_positions(node):
        if not _ANNOTATION.match(lines[line - 1]): out.append(Mutant(path, line, col, name, k))
        k += 1
  return out

def mutants(path: str, n: int, rng: np.random.Generator, root: Path = ROOT) -> list[Mutant]:
  """n sites drawn without replacement: first a (line, col) place, then one operator there (so a place with many
  operator variants is not drawn more often than one with a single variant)."""
  every = sites(path, root)
  places = sorted({(m.line, m.col) for m in every})
  pick = [places[int(j)] for j in rng.choice(len(places), size=min(n, len(places)), replace=False)] if places else []
  out = []
  for p in sorted(pick):
    here = [m for m in every if (m.line, m.col) == p]
    out.append(here[int(rng.integers(len(here)))])
  return out

def mutated_source(m: Mutant, root: Path = ROOT) -> str:
  code = mutate_code((root / m.path).read_text(), get_operator(m.operator)(), m.occurrence)
  if code is None: raise RuntimeError(f"{m.path}:{m.line}: cosmic-ray applied no {m.operator} at occurrence {m.occurrence}")
  return code

def change(m: Mutant, mutated: str, root: Path = ROOT) -> str:
  """The mutant's one-line diff (the changed line, before -> after)."""
  a, b = (root / m.path).read_text().splitlines(), mutated.splitlines()
  d = [x for x in difflib.unified_diff(a, b, lineterm="", n=0) if x[:1] in "+-" and not x.startswith(("+++", "---"))]
  return " | ".join(x.strip() for x in d)[:200]


def has_runtime_level(tree: Path) -> bool:
  """Whether the tree's fuzzer has `--level runtime` (an older checkout, measured with --tree, may not)."""
  return "--level" in (tree / "fuzz" / "__main__.py").read_text()

# Seconds one conformance case or fuzz case may take in a check. The tools' defaults (10 s and the fuzzer's) are made
# for a user's machine; three checks in parallel on a loaded one can pass them (a batched nvcc compile), and a per-case
# timeout is a failure row, which would count as a kill the mutant did not earn. A mutant that hangs still ends at
# --timeout, as undecided.
CASE_SECONDS = 120

def _checks(tree: Path, fuzz_seconds: float, seed: int) -> list[list[str]]:
  py, t = sys.executable, str(CASE_SECONDS)
  conformance = [py, "-m", "conformance"] + (["--timeout", t] if "--timeout" in (tree / "conformance" / "__main__.py").read_text() else [])
  kernel = [py, "-m", "fuzz", "--seconds", str(fuzz_seconds), "--seed", str(seed), "--workers", "1", "--quiet", "--no-shrink", "--case-timeout", t,
            "--corpus", str(tree / ".mut-corpus")]
  runtime = [py, "-m", "fuzz", "--level", "runtime", "--seconds", str(fuzz_seconds), "--seed", str(seed), "--no-shrink", "--quiet",   # 120 s a workload, fixed
             "--corpus", str(tree / ".mut-corpus-rt")]
  return [conformance, kernel] + ([runtime] if has_runtime_level(tree) else [])

def _kill_group(p: subprocess.Popen) -> None:
  """Kill a check and every process it started (each check runs in a session of its own)."""
  try: os.killpg(p.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError): pass

def run_checks(tree: Path, fuzz_seconds: float, seed: int, timeout: float) -> tuple[str, str]:
  """(killed | survived | timeout, by what): the checks run in parallel in `tree`; one that exits non-zero kills the
  mutant. A check still running after `timeout` seconds with none failed leaves it undecided ("timeout"): on a loaded
  machine a slow run is no evidence (a mutant that hangs a check shows as that, for triage). Their output goes to
  files (an unread pipe would fill and stall them)."""
  cache = tempfile.mkdtemp(prefix="mut-cache-")
  env = {**os.environ, "PYTHONPATH": str(tree), "REFGRAD_CACHE": cache}
  procs = []
  for c in _checks(tree, fuzz_seconds, seed):
    log = tempfile.TemporaryFile(dir=cache)
    procs.append((c, subprocess.Popen(c, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log))
  t0, why, slow = time.monotonic(), "", ""
  try:
    for c, p, log in procs:
      try: rc = p.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
      except subprocess.TimeoutExpired:
        _kill_group(p)
        p.wait()
        slow = slow or f"{' '.join(c[2:4])}: still running after {timeout:g} s"
        continue
      if rc != 0 and not why:
        log.seek(0)
        tail = (log.read().decode(errors="replace").strip().splitlines() or [""])[-1][:160]
        why = f"{' '.join(c[2:4])}: exit {rc}: {tail}"
  finally:
    for _, p, log in procs:
      _kill_group(p)   # its workers too: they would go on writing into the cache removed below
      log.close()
    shutil.rmtree(cache, ignore_errors=True)
  return ("killed", why) if why else ("timeout", slow) if slow else ("survived", "")


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m bench.bench_mutation", description=__doc__.split("\n\n")[0])
  ap.add_argument("--per-module", type=int, default=4, help="mutants drawn per module (default 4)")
  ap.add_argument("--modules", help="comma list of module paths (default: the kernel path and the runtime)")
  ap.add_argument("--fuzz-seconds", type=float, default=60.0, help="seconds of each fuzz run per mutant (default 60)")
  ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a mutant still undecided counts as a timeout (neither killed nor survived)")
  ap.add_argument("--seed", type=int, default=0, help="seed of the mutant draw (default 0)")
  ap.add_argument("--json", type=Path, help="write the results here")
  ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout to mutate and check, e.g. an older commit's worktree for a before/after "
                  "comparison (default: this one; its own conformance and fuzz are the oracles)")
  args = ap.parse_args(argv)
  if get_operator is None:
    print("bench_mutation: cosmic-ray is not installed: pip install -e .[mutation] (cosmic-ray==8.7.0)", file=sys.stderr)
    return 2
  src = args.tree.resolve()
  mods = args.modules.split(",") if args.modules else KERNEL_PATH + RUNTIME
  if missing := [m for m in mods if not (src / m).is_file()]:
    print(f"bench_mutation: not in {src}: {', '.join(missing)}", file=sys.stderr)
    return 2
  rng = np.random.default_rng(args.seed)
  tmp = Path(tempfile.mkdtemp(prefix="mut-tree-"))
  tree = tmp / "refgrad-tree"
  shutil.copytree(src, tree, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", ".mut-*"))
  rows = []
  print(f"mutating {src}; checks: " + ", ".join(" ".join(c[1:4]) for c in _checks(src, args.fuzz_seconds, args.seed)), flush=True)
  try:
    for mod in mods:
      orig = (tree / mod).read_text()
      for m in mutants(mod, args.per_module, rng, src):
        code = mutated_source(m, src)
        (tree / mod).write_text(code)
        t0 = time.monotonic()
        try: status, why = run_checks(tree, args.fuzz_seconds, args.seed, args.timeout)
        finally: (tree / mod).write_text(orig)
        rows.append({"module": mod, "line": m.line, "col": m.col, "operator": m.operator, "occurrence": m.occurrence, "change": change(m, code, src),
                     "status": status, "killed": status == "killed", "by": why, "seconds": round(time.monotonic() - t0, 1)})
        print(f"{status.upper():<8} {mod}:{m.line}:{m.col} {m.operator} {why} ({rows[-1]['seconds']} s)\n    {rows[-1]['change']}", flush=True)
  finally: shutil.rmtree(tmp, ignore_errors=True)
  print("\nmodule                              killed / decided (timeouts)")
  for mod in mods:
    rs = [r for r in rows if r["module"] == mod]
    if rs: print(f"{mod:<36} {sum(r['killed'] for r in rs)} / {sum(r['status'] != 'timeout' for r in rs)} ({sum(r['status'] == 'timeout' for r in rs)})")
  k = sum(r["killed"] for r in rows)
  rows_all, rows = rows, [r for r in rows if r["status"] != "timeout"]
  print(f"{'all':<36} {k} / {len(rows)}" + (f"  ({100 * k / len(rows):.0f}%)" if rows else ""))
  surv = [r for r in rows_all if not r["killed"]]
  if surv:
    print("\nsurvivors and timeouts (triage: equivalent, or a blind spot of the oracles):")
    for r in surv: print(f"  {r['status']:<8} {r['module']}:{r['line']}:{r['col']}  {r['operator']}  {r['change']}")
  if args.json:
    tmpj = args.json.with_suffix(args.json.suffix + ".tmp")
    tmpj.write_text(json.dumps(rows_all, indent=1))
    tmpj.replace(args.json)
  return 0


if __name__ == "__main__":
  sys.exit(main())
