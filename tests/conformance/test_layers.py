"""conformance/ and fuzz/ never import each other (function-local imports included): what they share is oracles/."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

def _imported(pkg: str) -> dict[str, set[str]]:
  out: dict[str, set[str]] = {}
  for path in sorted((ROOT / pkg).rglob("*.py")):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import): names |= {a.name for a in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0: names.add(node.module)
    out[str(path.relative_to(ROOT))] = names
  return out

@pytest.mark.parametrize("pkg, other", [("conformance", "fuzz"), ("fuzz", "conformance"), ("oracles", "fuzz"), ("oracles", "conformance")])
def test_no_cross_imports(pkg, other):
  bad = {f: sorted(m for m in ms if m == other or m.startswith(other + ".")) for f, ms in _imported(pkg).items()}
  assert not {f: m for f, m in bad.items() if m}, f"{pkg} imports {other}"
