"""The regression corpus (oracles/corpus/*.json): every saved case reads back, and passes every oracle now, on CPU and
PYTHON; `python -m conformance --group corpus` replays the same cases."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oracles.case import Finding
from oracles.check import check_cases

CORPUS = sorted((Path(__file__).parents[2] / "oracles" / "corpus").glob("*.json"))


def test_corpus_is_not_empty():
  assert len(CORPUS) >= 4

@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_corpus_case_passes(path):
  fd = Finding.load(path)
  assert fd.note, f"{path.name}: say where the case came from"
  r = check_cases([fd.case], ["CPU"])[0]
  assert r.status == "pass", f"{path.name} fails again: {r.oracle} on {r.device}: {r.detail}"

def test_conformance_group_corpus():
  r = subprocess.run([sys.executable, "-m", "conformance", "--group", "corpus", "--device", "CPU", "--device", "PYTHON"],
                     capture_output=True, text=True, check=False)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  assert f"corpus: {2 * len(CORPUS)} of {2 * len(CORPUS)} saved fuzz cases x devices pass" in r.stdout

def test_replay_cli():
  r = subprocess.run([sys.executable, "-m", "fuzz", "replay", str(CORPUS[0].parent)], capture_output=True, text=True, check=False)
  assert r.returncode == 0 and r.stdout.count(": pass") == len(CORPUS), r.stdout + r.stderr
  r = subprocess.run([sys.executable, "-m", "fuzz", "replay", "/nonexistent/x.json"], capture_output=True, text=True, check=False)
  assert r.returncode == 2 and "no such file" in r.stderr
