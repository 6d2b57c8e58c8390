"""bench/bench_mutation.py: cosmic-ray's mutants of refgrad's modules (the optional `mutation` extra; skipped without it)."""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from bench import bench_mutation as bm

needs_cosmic_ray = pytest.mark.skipif(bm.get_operator is None, reason="cosmic-ray is not installed (pip install -e .[mutation])")


@needs_cosmic_ray
def test_sites_leave_annotations_out_and_each_mutant_changes_its_line():
  every = bm.sites("refgrad/schedule.py")
  lines = (bm.ROOT / "refgrad/schedule.py").read_text().splitlines()
  assert len(every) > 100 and not any(lines[m.line - 1].lstrip().startswith("def ") for m in every)
  for m in bm.mutants("refgrad/schedule.py", 5, np.random.default_rng(1)):
    src = bm.mutated_source(m)
    diff = [i for i, (a, b) in enumerate(zip(lines, src.splitlines())) if a != b]
    assert diff and diff[0] + 1 == m.line and bm.change(m, src), m

def test_without_cosmic_ray_the_bench_says_how_to_install_it(monkeypatch, capsys):
  monkeypatch.setattr(bm, "get_operator", None)
  assert bm.main(["--per-module", "1"]) == 2 and "pip install -e .[mutation]" in capsys.readouterr().err

@needs_cosmic_ray
def test_tree_names_the_modules_it_lacks_and_an_old_fuzzer_gets_no_runtime_check(tmp_path, capsys):
  (tmp_path / "fuzz").mkdir()
  (tmp_path / "fuzz" / "__main__.py").write_text("ap.add_argument('--seconds')\n")
  assert bm.main(["--tree", str(tmp_path), "--modules", "refgrad/schedule.py"]) == 2
  assert "refgrad/schedule.py" in capsys.readouterr().err
  (tmp_path / "conformance").mkdir()
  (tmp_path / "conformance" / "__main__.py").write_text("\n")
  assert not bm.has_runtime_level(tmp_path) and [c[2] for c in bm._checks(tmp_path, 1, 0)] == ["conformance", "fuzz"]
  assert "--timeout" not in bm._checks(tmp_path, 1, 0)[0] and "--timeout" in bm._checks(bm.ROOT, 1, 0)[0]
  assert bm.has_runtime_level(bm.ROOT) and len(bm._checks(bm.ROOT, 1, 0)) == 3

def test_the_fuzz_checks_accept_their_arguments(tmp_path):
  # a check that exits 2 on an argument it does not know would count every mutant as killed: run each for one case
  for c in bm._checks(bm.ROOT, 1, 0)[1:]:
    i = c.index("--seconds")
    c[i:i + 2] = ["--cases", "1"]
    c = [str(tmp_path / "corpus") if a.endswith((".mut-corpus", ".mut-corpus-rt")) else a for a in c]
    if "--level" not in c: c += ["--devices", "CPU"]
    r = subprocess.run(c, cwd=bm.ROOT, env={**os.environ, "PYTHONPATH": str(bm.ROOT)}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (c, r.stdout[-2000:], r.stderr[-2000:])

@pytest.mark.slow
@needs_cosmic_ray
def test_one_mutant_runs_conformance_and_fuzz_in_parallel(tmp_path):
  out = tmp_path / "m.json"
  assert bm.main(["--modules", "refgrad/schedule.py", "--per-module", "1", "--fuzz-seconds", "10", "--json", str(out)]) == 0
  rows = json.loads(out.read_text())
  assert len(rows) == 1 and rows[0]["module"] == "refgrad/schedule.py" and rows[0]["status"] in ("killed", "survived", "timeout") and rows[0]["change"]
