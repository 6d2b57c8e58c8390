"""Backends that go wrong the ways a backend author meets (tests/plugins/bad_backends.py), registered through real entry
points: each ends with a clear report and the right exit code, and conformance completes its other devices."""
from __future__ import annotations

import json
import platform

import pytest

from tests.cli import run_module
from tests.plugins.registry import install


@pytest.fixture
def plugins(tmp_path):
  return install(tmp_path / "site")

def _run(env, *args, timeout=300):
  return run_module("conformance", *args, env=env, timeout=timeout)

def _rows(path):
  rows = json.loads(path.read_text())
  return rows, {(r["device"], r["case"]): r for r in rows}

@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="gcc's -ffast-math FTZ start-up code and the subnormal inputs are checked on x86-64")
def test_fast_math_cpu_is_caught_and_the_correct_cpu_is_not_blamed(plugins, tmp_path):
  js = tmp_path / "r.json"
  r = _run(plugins, "--device", "FASTCPU", "--device", "CPU", "--group", "alu", "--case", "ADD float", "--case", "MUL float",
           "--case", "ADD int", "--json", str(js))
  rows, by = _rows(js)
  assert r.returncode == 1, r.stdout[-3000:] + r.stderr
  assert by[("FASTCPU", "ADD float")]["status"] == "fail" and by[("FASTCPU", "MUL float")]["status"] == "fail"
  assert "got 0x00000000" in by[("FASTCPU", "MUL float")]["detail"] or "got 0x80000000" in by[("FASTCPU", "MUL float")]["detail"]  # flushed
  assert by[("FASTCPU", "fp-state")]["status"] == "fail" and "to FTZ DAZ" in by[("FASTCPU", "fp-state")]["detail"]
  assert all(x["status"] == "pass" for x in rows if x["device"] == "CPU"), [x for x in rows if x["device"] == "CPU" and x["status"] != "pass"]

@pytest.mark.parametrize("device, outcome", [("SEGV", "crash"), ("HANG", "timeout")])
def test_a_crashing_or_hanging_device_fails_its_case_and_the_run_goes_on(plugins, tmp_path, device, outcome):
  js, xml = tmp_path / "r.json", tmp_path / "r.xml"
  r = _run(plugins, "--device", device, "--device", "PYTHON", "--group", "alu", "--case", "MUL float", "--case", "ADD float",
           "--case", "MUL int", "--timeout", "5", "--json", str(js), "--junit", str(xml))
  assert r.returncode == 1, r.stdout[-3000:] + r.stderr
  rows, by = _rows(js)
  bad = by[(device, "MUL float")]
  assert bad["status"] == outcome and f"{outcome}: {device} MUL float" in bad["detail"]
  assert ("SIGSEGV" in bad["detail"]) if outcome == "crash" else ("--timeout 5 s" in bad["detail"])
  assert by[(device, "ADD float")]["status"] == "pass" and by[(device, "MUL int")]["status"] == "pass"   # its other cases still ran
  assert all(x["status"] == "pass" for x in rows if x["device"] == "PYTHON")
  assert f"rerun: python -m conformance --device {device} --group alu --case 'MUL float'" in r.stdout
  assert xml.read_text().count("<testcase") == len(rows)

@pytest.mark.parametrize("device, msg", [
  ("RAISES", "device RAISES cannot be constructed (RuntimeError: no such accelerator on this machine)"),
  ("WRONGTYPE", "make_device returned dict, not a refgrad.device.Compiled"),
])
def test_a_device_that_cannot_be_built_is_one_line_exit_2(plugins, device, msg):
  r = _run(plugins, "--device", device, "--device", "PYTHON", "--group", "bitcast", timeout=120)
  assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
  assert "passed" not in r.stdout

def test_a_plugin_shadowing_a_builtin_is_refused(tmp_path):
  js = tmp_path / "r.json"
  env = install(tmp_path / "site", {"cpu": "tests.plugins.bad_backends:fast_cpu"})
  r = _run(env, "--device", "CPU", "--group", "alu", "--case", "MUL float", "--json", str(js), timeout=120)
  assert "REFUSED: entry point 'cpu' = 'tests.plugins.bad_backends:fast_cpu' (refgrad.devices) is refused: it would shadow the built-in device CPU" in r.stderr
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr   # the built-in CPU ran, not the fast-math one
  assert all(x["status"] == "pass" for x in json.loads(js.read_text()))

def test_module_colon_function_entry_point(tmp_path):
  env = install(tmp_path / "site", {"MYCPU": "refgrad.runtime.ops_cpu:make_device"})
  r = _run(env, "--device", "mycpu", "--group", "bitcast", timeout=120)
  assert r.returncode == 0 and "MYCPU: BITCAST" in r.stdout, r.stdout[-2000:] + r.stderr

@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="gcc's -ffast-math FTZ start-up code is checked on x86-64")
def test_the_corpus_and_kernels_reference_runs_where_no_device_does(plugins, tmp_path):
  """The corpus and kernels groups' expected bits come from a reference worker: FASTCPU's FTZ library and a --preload
  that spoils every PYTHON run in the process it is loaded in (device workers only) cannot touch them. The correct CPU
  and PYTHON show no false failure; FASTCPU's change of the FP state is reported on its corpus cases."""
  js = tmp_path / "r.json"
  r = _run(plugins, "--device", "FASTCPU", "--device", "CPU", "--device", "PYTHON", "--group", "corpus", "--preload", "tests.conformance.reference_poison",
           "--json", str(js))
  rows, _ = _rows(js)
  assert r.returncode == 1, r.stdout[-3000:] + r.stderr
  corpus = [x for x in rows if x["group"] == "corpus"]
  assert {x["device"] for x in corpus} == {"FASTCPU", "CPU", "PYTHON"} and len(corpus) >= 6
  assert all(x["status"] == "pass" for x in corpus if x["device"] != "FASTCPU"), [x for x in corpus if x["device"] != "FASTCPU" and x["status"] != "pass"]
  fast = [x for x in corpus if x["device"] == "FASTCPU" and x["status"] == "fail"]
  assert fast and all("fp-state on FASTCPU" in x["detail"] or "device on FASTCPU" in x["detail"] for x in fast), fast
  assert any("FTZ" in x["detail"] for x in fast), fast
