"""`pytest --refgrad-device NAME` (conformance/pytest_plugin.py): conformance cases and corpus replays as pytest items,
-k / -m selection, JUnit through --junitxml, xdist, and a crashing device that fails only its own item."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib.metadata import entry_points

from tests.plugins.registry import install

# refgrad installed (CI: pip install -e .) loads the plugin through its pytest11 entry point; a source tree names it with -p
LOAD = [] if any(e.value == "conformance.pytest_plugin" for e in entry_points(group="pytest11")) else ["-p", "conformance.pytest_plugin"]

def _pytest(tmp_path, *args, env=None, timeout=300):
  run_dir = tmp_path / "run"
  run_dir.mkdir(exist_ok=True)
  return subprocess.run([sys.executable, "-m", "pytest", *LOAD, "-p", "no:cacheprovider", "-q", *args],
                        cwd=run_dir, capture_output=True, text=True, check=False, timeout=timeout, env=env)

def test_items_selection_and_junit(tmp_path):
  env = {**os.environ, **install(tmp_path / "site", {})}   # the C compiler needs PATH (the corpus's program oracle runs the CPU)
  xml = tmp_path / "r.xml"
  r = _pytest(tmp_path, "--refgrad-device", "PYTHON", "-m", "refgrad_bitcast or refgrad_corpus", "-k", "float or corpus", f"--junitxml={xml}", "-n", "2", env=env)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
  cases = ET.parse(xml).getroot().iter("testcase")
  names = [c.get("name") for c in cases]
  assert any(n.startswith("bitcast/BITCAST") and "float" in n for n in names) and any(n.startswith("corpus/corpus ") for n in names)
  assert not any(n.startswith("alu/") for n in names)   # deselected by -m

def test_a_crashing_device_fails_its_item_only(tmp_path):
  env = install(tmp_path / "site")
  xml = tmp_path / "r.xml"
  r = _pytest(tmp_path, "--refgrad-device", "SEGV", "-k", "MUL and float and not MULACC or ADD and int", f"--junitxml={xml}", env=env)
  assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
  assert "crash: SEGV MUL float: the worker was killed by signal SIGSEGV" in r.stdout
  assert "rerun outside pytest: python -m conformance --device SEGV --group alu --case 'MUL float'" in r.stdout
  suite = ET.parse(xml).getroot().find("testsuite")
  assert suite.get("failures") == "1" and int(suite.get("tests")) >= 3   # MUL float fails; ADD int, ADD/MUL of other ints pass

def test_without_the_option_the_plugin_collects_nothing(tmp_path):
  (tmp_path / "run").mkdir()
  (tmp_path / "run" / "test_x.py").write_text("def test_x(): assert True\n")
  r = _pytest(tmp_path)
  assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr

def test_corpus_items_on_a_device_under_test(tmp_path):
  """A corpus replay on CPU: the reference runs in a reference worker, CPU's programs in the CPU's worker, judged here."""
  env = {**os.environ, **install(tmp_path / "site", {})}   # the C compiler needs PATH
  xml = tmp_path / "r.xml"
  r = _pytest(tmp_path, "--refgrad-device", "CPU", "-m", "refgrad_corpus", f"--junitxml={xml}", env=env)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
  names = [c.get("name") for c in ET.parse(xml).getroot().iter("testcase")]
  assert names and all(n.startswith("corpus/corpus ") for n in names), names
