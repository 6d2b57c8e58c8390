"""`python -m fuzz --level runtime` (fuzz/runtime_level.py): random HCQ workloads on the mock NV and AMD GPUs pass
against the host model on refgrad as it is; a missing wait before a copy and a TinyJit replay that keeps the capture's
input addresses are each found within a few workloads, shrunk, saved and reloaded."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fuzz import runtime_level as rl

ROOT = Path(__file__).resolve().parents[2]


def test_workloads_are_json_and_deterministic():
  a, b = rl.draw(5), rl.draw(5)
  assert a == b and a != rl.draw(6) and a[0][0] == "new"
  kinds = {op[0] for s in range(40) for op in rl.draw(s)}
  assert kinds == set(rl.OPS)   # every operation kind is drawn

def test_clean_runtime_passes_under_seeded_orders_and_hazard_checks():
  for order in (1, 2):
    res = rl.run_in_child([rl.draw(order * 10 + i) for i in range(4)], order)
    assert [r["status"] for r in res] == ["pass"] * 4, res

@pytest.mark.parametrize("bug, workloads, words", [("runtime_wait", 6, ("GPUHazard", "GPUFault", "read of a tensor", "uninitialized")),
                                                   pytest.param("jit_stale", 12, ("TinyJit",), marks=pytest.mark.slow)])
def test_runtime_bug_found_shrunk_saved(tmp_path, bug, workloads, words):
  s = rl.fuzz(seed=0, seconds=None, cases=workloads, corpus=tmp_path, preload=["tests.fuzz.inject"], env={"FUZZ_INJECT": bug}, quiet=True)
  assert s["findings"], f"{bug}: nothing found in {workloads} workloads"
  f = next(x for x in s["findings"] if "shrunk" in x)
  assert any(w in f["detail"] for w in words), f["detail"]
  assert len(f["shrunk"]) < len(f["workload"]), f
  doc = rl.load(Path(f["path"]))
  assert doc["workload"] == f["workload"] and doc["order"] == f["order"]
  again = rl.run_in_child([f["shrunk"]], f["order"], ["tests.fuzz.inject"], {"FUZZ_INJECT": bug})[0]
  assert again["status"] == "fail"
  assert rl.run_in_child([f["shrunk"]], f["order"])[0]["status"] == "pass"   # without the bug it passes
  replay = subprocess.run([sys.executable, "-m", "fuzz", "--level", "runtime", "--replay", f["path"]], capture_output=True, text=True, cwd=ROOT)
  assert replay.returncode == 0 and ": pass" in replay.stdout, replay.stdout + replay.stderr

def test_cli_level(tmp_path):
  bad = subprocess.run([sys.executable, "-m", "fuzz", "--level", "gpu"], capture_output=True, text=True, cwd=ROOT)
  assert bad.returncode == 2 and "--level takes kernel or runtime" in bad.stderr
  ok = subprocess.run([sys.executable, "-m", "fuzz", "--level", "runtime", "--cases", "2", "--corpus", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
  assert ok.returncode == 0 and "2 workloads" in ok.stdout, ok.stdout + ok.stderr
