"""The suite's hypothesis profiles (tests/conftest.py): derandomized by default, random under `-m slow` or
REFGRAD_HYPOTHESIS=random, and a bad profile name is a usage error."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = '''
import pytest
from hypothesis import given, settings, strategies as st
@pytest.mark.slow
def test_slow_probe(): print("PROFILE", settings.default.derandomize, settings.default.database)
def test_probe(): print("PROFILE", settings.default.derandomize, settings.default.database)
'''

@pytest.mark.parametrize("args, env, want", [([], {}, "PROFILE True None"), (["-m", "slow"], {}, "PROFILE False "),
                                             ([], {"REFGRAD_HYPOTHESIS": "random"}, "PROFILE False ")])
def test_profile_selection(tmp_path, args, env, want):
  (tmp_path / "test_probe.py").write_text(PROBE)
  e = {k: v for k, v in os.environ.items() if k != "REFGRAD_HYPOTHESIS"} | env
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "tests.conftest", "-p", "no:xdist", *args, str(tmp_path / "test_probe.py")],
                     capture_output=True, text=True, cwd=ROOT, env=e, timeout=120, check=False)
  assert r.returncode == 0 and want in r.stdout, r.stdout + r.stderr

def test_bad_profile_name_is_a_usage_error(tmp_path):
  (tmp_path / "test_probe.py").write_text(PROBE)
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:xdist", str(tmp_path / "test_probe.py")],
                     capture_output=True, text=True, cwd=ROOT, env={**os.environ, "REFGRAD_HYPOTHESIS": "nope"}, timeout=120, check=False)
  assert r.returncode == 4 and "REFGRAD_HYPOTHESIS='nope'" in r.stderr, r.stdout + r.stderr
