"""Mutation score of the oracles users run: `python -m conformance` + a short `python -m fuzz` (kernel level) + a
short `python -m fuzz --level runtime`, over the kernel-path and runtime modules.

    python -m bench.bench_mutation [--per-module N] [--modules a.py,b.py] [--fuzz-seconds S] [--seed N] [--json F]

Why a small mutator of our own and not mutmut or cosmic-ray: neither is installed here (and the project installs
nothing for a benchmark); both also run the *test suite* as the killer, while the question here is what the tools a
user runs catch. The mutator parses a module with `ast`, lists its mutation sites (one row per operator kind in
`SWAPS`: arithmetic, comparison, boolean and bitwise operators, small int constants +-1, `not` dropped), draws
`--per-module` of them with a seeded generator, and for each mutant writes the mutated module into ONE temporary
copy of the tree (the original is restored after), runs the three checks in parallel with a fresh compile cache
(a cached binary built from the unmutated renderer must not hide the mutant), and calls the mutant killed when any
check exits non-zero or times out. Survivors are printed with their place and change for triage: some are
equivalent (the mutated code is dead or gives the same results, e.g. `<` -> `<=` on a bound never reached), which
the tool cannot decide; the README gives the triage. Slow (a minute or two per mutant): never part of CI.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KERNEL_PATH = ["refgrad/uop/symbolic.py", "refgrad/opt.py", "refgrad/kernel.py", "refgrad/uop/linearize.py", "refgrad/vectorize.py",
               "refgrad/renderer/cstyle.py", "refgrad/runtime/simt.py", "refgrad/schedule.py", "refgrad/gradient.py"]
RUNTIME = ["refgrad/runtime/hcq.py", "refgrad/jit.py", "refgrad/runtime/ops_nv.py", "refgrad/runtime/ops_amd.py"]

# node type -> what it may become (one row per operator kind)
SWAPS: dict[type, list[type]] = {
  ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.FloorDiv], ast.FloorDiv: [ast.Mult], ast.Mod: [ast.FloorDiv],
  ast.LShift: [ast.RShift], ast.RShift: [ast.LShift], ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd],
  ast.Lt: [ast.LtE], ast.LtE: [ast.Lt], ast.Gt: [ast.GtE], ast.GtE: [ast.Gt], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq],
  ast.And: [ast.Or], ast.Or: [ast.And], ast.Is: [ast.IsNot], ast.IsNot: [ast.Is], ast.In: [ast.NotIn], ast.NotIn: [ast.In],
}


@dataclass
class Mutant:
  path: str
  line: int
  col: int
  what: str
  index: int   # the site's position in the module's walk order (to re-find it)


def _sites(tree: ast.AST) -> list[tuple[ast.AST, str, object]]:
  """(node, description, how to mutate) for every site, in ast.walk order."""
  out: list[tuple[ast.AST, str, object]] = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.BinOp, ast.BoolOp, ast.AugAssign)) and type(node.op) in SWAPS:
      out.append((node, f"{type(node.op).__name__} -> {SWAPS[type(node.op)][0].__name__}", "op"))
    elif isinstance(node, ast.Compare) and type(node.ops[0]) in SWAPS:
      out.append((node, f"{type(node.ops[0]).__name__} -> {SWAPS[type(node.ops[0])][0].__name__}", "cmp"))
    elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 64:
      out.append((node, f"{node.value} -> {node.value + 1}", "int"))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
      out.append((node, "not x -> x", "not"))
  return out

def _docstring_lines(tree: ast.AST) -> set[int]:
  return {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(getattr(n, "value", None), ast.Constant)}

def mutants(path: str, n: int, rng: np.random.Generator) -> list[Mutant]:
  tree = ast.parse((ROOT / path).read_text())
  sites, doc = _sites(tree), _docstring_lines(tree)
  ok = [i for i, s in enumerate(sites) if getattr(s[0], "lineno", 0) not in doc]
  pick = sorted(int(ok[j]) for j in rng.choice(len(ok), size=min(n, len(ok)), replace=False)) if ok else []
  return [Mutant(path, sites[i][0].lineno, sites[i][0].col_offset, sites[i][1], i) for i in pick]   # type: ignore[attr-defined]

class _Apply(ast.NodeTransformer):
  def __init__(self, target: ast.AST, kind: object):
    self.target, self.kind = target, kind
  def visit(self, node: ast.AST) -> ast.AST:
    if node is self.target:
      if self.kind == "op": node.op = SWAPS[type(node.op)][0]()  # type: ignore[attr-defined]
      elif self.kind == "cmp": node.ops[0] = SWAPS[type(node.ops[0])][0]()  # type: ignore[attr-defined]
      elif self.kind == "int": node.value = node.value + 1  # type: ignore[attr-defined]
      elif self.kind == "not": return node.operand  # type: ignore[attr-defined]
      return node
    return self.generic_visit(node)

def mutated_source(m: Mutant) -> str:
  tree = ast.parse((ROOT / m.path).read_text())
  node, _, kind = _sites(tree)[m.index]
  return ast.unparse(ast.fix_missing_locations(_Apply(node, kind).visit(tree)))


def _checks(tree: Path, fuzz_seconds: float, seed: int) -> list[list[str]]:
  py = sys.executable
  return [[py, "-m", "conformance"],
          [py, "-m", "fuzz", "--seconds", str(fuzz_seconds), "--seed", str(seed), "--workers", "1", "--quiet", "--no-shrink", "--corpus", str(tree / ".mut-corpus")],
          [py, "-m", "fuzz", "--level", "runtime", "--seconds", str(fuzz_seconds), "--seed", str(seed), "--no-shrink", "--quiet", "--corpus", str(tree / ".mut-corpus-rt")]]

def run_checks(tree: Path, fuzz_seconds: float, seed: int, timeout: float) -> tuple[bool, str]:
  """(killed, by what): the checks run in parallel in `tree`; the first that fails kills the mutant."""
  cache = tempfile.mkdtemp(prefix="mut-cache-")
  env = {**os.environ, "PYTHONPATH": str(tree), "REFGRAD_CACHE": cache}
  procs = [(c, subprocess.Popen(c, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)) for c in _checks(tree, fuzz_seconds, seed)]
  t0, why = time.monotonic(), ""
  try:
    for c, p in procs:
      try: rc = p.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
      except subprocess.TimeoutExpired:
        p.kill()
        rc = "timeout"
      if rc != 0 and not why: why = f"{' '.join(c[2:4])}: {'timeout' if rc == 'timeout' else 'exit ' + str(rc)}"
  finally:
    for _, p in procs:
      if p.poll() is None: p.kill()
    shutil.rmtree(cache, ignore_errors=True)
  return bool(why), why


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m bench.bench_mutation", description=__doc__.split("\n\n")[0])
  ap.add_argument("--per-module", type=int, default=4, help="mutants drawn per module (default 4)")
  ap.add_argument("--modules", help="comma list of module paths (default: the kernel path and the runtime)")
  ap.add_argument("--fuzz-seconds", type=float, default=60.0, help="seconds of each fuzz run per mutant (default 60)")
  ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a mutant's checks count as a timeout (killed)")
  ap.add_argument("--seed", type=int, default=0, help="seed of the mutant draw (default 0)")
  ap.add_argument("--json", type=Path, help="write the results here")
  args = ap.parse_args(argv)
  mods = args.modules.split(",") if args.modules else KERNEL_PATH + RUNTIME
  rng = np.random.default_rng(args.seed)
  tmp = Path(tempfile.mkdtemp(prefix="mut-tree-"))
  tree = tmp / "refgrad-tree"
  shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", ".mut-*"))
  rows = []
  try:
    for mod in mods:
      orig = (tree / mod).read_text()
      for m in mutants(mod, args.per_module, rng):
        (tree / mod).write_text(mutated_source(m))
        t0 = time.monotonic()
        try: killed, why = run_checks(tree, args.fuzz_seconds, args.seed, args.timeout)
        finally: (tree / mod).write_text(orig)
        rows.append({"module": mod, "line": m.line, "col": m.col, "mutation": m.what, "killed": killed, "by": why, "seconds": round(time.monotonic() - t0, 1)})
        print(f"{'KILLED  ' if killed else 'SURVIVED'} {mod}:{m.line}:{m.col} {m.what:<16} {why} ({rows[-1]['seconds']} s)", flush=True)
  finally: shutil.rmtree(tmp, ignore_errors=True)
  print("\nmodule                              killed / sampled")
  for mod in mods:
    rs = [r for r in rows if r["module"] == mod]
    if rs: print(f"{mod:<36} {sum(r['killed'] for r in rs)} / {len(rs)}")
  k = sum(r["killed"] for r in rows)
  print(f"{'all':<36} {k} / {len(rows)}" + (f"  ({100 * k / len(rows):.0f}%)" if rows else ""))
  surv = [r for r in rows if not r["killed"]]
  if surv:
    print("\nsurvivors (triage: equivalent, or a blind spot of the oracles):")
    for r in surv: print(f"  {r['module']}:{r['line']}:{r['col']}  {r['mutation']}")
  if args.json:
    tmpj = args.json.with_suffix(args.json.suffix + ".tmp")
    tmpj.write_text(json.dumps(rows, indent=1))
    tmpj.replace(args.json)
  return 0


if __name__ == "__main__":
  sys.exit(main())
