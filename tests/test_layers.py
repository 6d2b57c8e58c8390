"""The import graph of the product packages has no cycle (grimp builds the graph import-linter checks; the layer
contracts themselves live in pyproject.toml and run as `lint-imports`)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with the lint extra (pip install -e '.[lint]')")

PACKAGES = ("refgrad", "emulators", "conformance", "fuzz")
ROOT = Path(__file__).resolve().parent.parent


def _cycles(graph) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
  edges = {m: sorted(t for t in graph.find_modules_directly_imported_by(m) if t in graph.modules) for m in graph.modules}
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on: set[str] = set()
  out: list[list[str]] = []
  for root in sorted(edges):
    if root in index: continue
    work = [(root, 0)]
    while work:
      v, i = work.pop()
      if i == 0:
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
      for j in range(i, len(edges[v])):
        w = edges[v][j]
        if w not in index:
          work += [(v, j + 1), (w, 0)]
          break
        if w in on: low[v] = min(low[v], index[w])
      else:
        if low[v] == index[v]:
          comp = []
          while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
          if len(comp) > 1: out.append(sorted(comp))
        if work: low[work[-1][0]] = min(low[work[-1][0]], low[v])
  return out


def test_cycle_finder_finds_a_cycle() -> None:
  class Fake:
    modules = {"a", "b", "c", "d"}
    def find_modules_directly_imported_by(self, m: str) -> set[str]: return {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}[m]
  assert _cycles(Fake()) == [["a", "b", "c"]]


def test_no_import_cycles(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.syspath_prepend(str(ROOT))
  graph = grimp.build_graph(*PACKAGES, cache_dir=None, exclude_type_checking_imports=True)
  assert len(graph.modules) > 50
  assert _cycles(graph) == [], "import cycles among the product modules (see docs/architecture.md for the layers)"


def _local_imports(path: Path) -> list[tuple[int, str]]:
  out = []
  for fn in ast.walk(ast.parse(path.read_text())):
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
      out += [(n.lineno, ast.unparse(n)) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))]
  return out


def test_refgrad_has_no_function_local_imports_but_loaders() -> None:
  """Function-local imports hide layering from the graph. refgrad keeps them only where a module is loaded on demand:
  the device/driver loader and plugins. A new one needs a reason here."""
  allowed = {"refgrad/device.py": {"from importlib.metadata import entry_points"},   # third-party devices, looked up on demand
             "refgrad/schedule.py": {"from refgrad.search import cached_beam"},   # BEAM search (and the executor it times with) on demand
             "refgrad/runtime/simt.py": {"from refgrad.uop.spec import verify_linear"}}   # (pyspeed's file this round)
  found = {str(p.relative_to(ROOT)): {s for _, s in _local_imports(p)} for p in sorted((ROOT / "refgrad").rglob("*.py"))}
  extra = {f: sorted(s - allowed.get(f, set())) for f, s in found.items() if s - allowed.get(f, set())}
  assert extra == {}, f"function-local imports in refgrad: {extra}"
