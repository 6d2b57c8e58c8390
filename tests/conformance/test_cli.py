"""The conformance CLI: tables, exit codes, JSON and JUnit reports, third-party devices."""
import json
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

from conformance.__main__ import main
from refgrad.device import Device
from tests.cli import run_module, start_module
from tests.plugins.registry import install


def test_passing_run_writes_reports(tmp_path, capsys):
  js, xml = tmp_path / "r.json", tmp_path / "r.xml"
  assert main(["--device", "PYTHON", "--group", "bitcast", "--json", str(js), "--junit", str(xml)]) == 0
  out = capsys.readouterr().out
  assert "PYTHON: BITCAST" in out and " 0 failed" in out
  results = json.loads(js.read_text())
  assert results and all(r["status"] == "pass" and r["device"] == "PYTHON" for r in results)
  suite = ET.parse(xml).getroot().find("testsuite")
  assert suite is not None and suite.get("failures") == "0" and int(suite.get("tests")) == len(results)

def test_unknown_device_exits_2(capsys):
  assert main(["--device", "TPU"]) == 2
  assert "unknown device" in capsys.readouterr().err

def test_a_broken_backend_fails(tmp_path):
  js = tmp_path / "r.json"
  r = _conformance("--device", "BROKEN", "--group", "alu", "--json", str(js), env=install(tmp_path / "site", {"BROKEN": "tests.conformance.broken_device"}))
  assert r.returncode == 1, r.stdout[-2000:] + r.stderr
  failed = [r for r in json.loads(js.read_text()) if r["status"] != "pass"]
  assert {(r["op"], r["dtype"]) for r in failed} == {("ADD", "float")}
  assert "lanes differ" in failed[0]["detail"] and "0x" in failed[0]["detail"]   # the lanes as bits
  assert "FAIL" in r.stdout and "rerun: python -m conformance --device BROKEN --group alu --case 'ADD float'" in r.stdout


def _conformance(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
  return run_module("conformance", *args, env=env, timeout=timeout)

@pytest.mark.parametrize("args, msg", [
  (["--seed", "-1"], "the seed must be an int >= 0"),
  (["--jobs", "0"], "--jobs must be > 0"),
  (["--jobs", "many"], "--jobs must be an int"),
  (["--group", "nope"], "invalid choice: 'nope'"),
  (["--json", "{dir}"], "--json {dir}: is a directory, not a file"),
  (["--junit", "{dir}"], "--junit {dir}: is a directory, not a file"),
  (["--json", "{file}/r.json"], "its directory {file} exists and is not a directory"),
])
def test_bad_argument_is_one_line_before_any_work(tmp_path, args, msg):
  """`--group bitcast --device CPU --json DIR` used to run everything and then die on DIR."""
  (f := tmp_path / "a_file").write_text("x")
  (d := tmp_path / "a_dir").mkdir()
  fill = lambda s: s.format(file=f, dir=d)
  r = _conformance("--group", "bitcast", "--device", "CPU", *map(fill, args), timeout=60)
  assert r.returncode == 2 and fill(msg) in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert "passed" not in r.stdout and "Traceback" not in r.stderr

def test_named_mock_gpu_without_mockgpu_is_one_line():
  """MOCKGPU=0 python -m conformance --device NV used to print a traceback per case."""
  r = _conformance("--device", "NV", env={"MOCKGPU": "0"}, timeout=60)
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
  assert "device NV cannot be constructed" in r.stderr and "set MOCKGPU=1" in r.stderr

def test_default_devices_that_cannot_be_constructed_fail_loudly(tmp_path):
  """A default-list device that cannot be built is a failure line and exit 1, never a silent pass; --exclude leaves it out."""
  js = tmp_path / "r.json"
  r = _conformance("--group", "bitcast", "--jobs", "100000", "--json", str(js), env={"MOCKGPU": "0"})
  assert r.returncode == 1, r.stdout + r.stderr
  assert "FAILED: device NV cannot be constructed" in r.stderr and "FAILED: device AMD cannot be constructed" in r.stderr
  assert "--jobs 100000 capped at" in r.stderr
  rows = json.loads(js.read_text())
  assert {x["device"] for x in rows if x["status"] == "pass"} == {"CPU", "LLVM", "PYTHON"}
  # without nvcc on PATH NV_NVCC is left out with a note, and so is a code-path device while its base device runs that path
  paths = [(d, "construct") for d in ("NV_NVCC", "AMD_ISA") if not (Device.unavailable(d) or Device.duplicate(d))]
  assert {(x["device"], x["case"]) for x in rows if x["status"] != "pass"} == {("NV", "construct"), *paths, ("AMD", "construct")}
  r = _conformance("--group", "bitcast", "--exclude", "nv", "--exclude", "NV_NVCC", "--exclude", "AMD", "--exclude", "AMD_ISA", "--json", str(js), env={"MOCKGPU": "0"})
  assert r.returncode == 0 and "FAILED" not in r.stderr, r.stdout + r.stderr
  assert {x["device"] for x in json.loads(js.read_text())} == {"CPU", "LLVM", "PYTHON"}

def test_ctrl_c_reports_the_cases_finished(tmp_path):
  """SIGINT to the process group during the run: exit 130, no traceback, the reports hold the cases that finished."""
  js = tmp_path / "r.json"
  # the kernels group too: with warm caches on a quiet machine, the faster mocks ran the other groups in about 2 s, so the
  # signal could come after the last case
  p = start_module("conformance", "--device", "PYTHON", "--device", "NV", "--device", "AMD", "--device", "AMD_ISA", "--group", "alu",
                   "--group", "cast", "--group", "transcendental", "--group", "native", "--group", "kernels", "--jobs", "1", "--json", str(js),
                   env={"MOCKGPU": "1", "PYTHONUNBUFFERED": "1"})
  try:
    first = p.stdout.readline()   # "running N cases on ...": the cases have started
    assert first.startswith("running "), first
    total = int(first.split()[1]) * 4
    time.sleep(2)   # of about 15 s on a loaded 2-core machine
    assert p.poll() is None, "the run ended before it could be interrupted"
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
  finally:
    if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
  assert p.returncode == 130 and "Traceback" not in err, (p.returncode, err)
  assert "interrupted (Ctrl-C)" in out
  results = json.loads(js.read_text())
  assert 0 < len(results) < total and all(r["status"] == "pass" for r in results)

def test_group_corpus_replays_a_users_own_corpus(tmp_path):
  import shutil
  from pathlib import Path
  own = tmp_path / "mine"
  own.mkdir()
  src = sorted((Path(__file__).parents[2] / "oracles" / "corpus").glob("*.json"))[0]
  shutil.copy(src, own / src.name)
  (own / "junk.json").write_text("[]")
  r = _conformance("--group", "corpus", "--corpus", str(own), "--device", "PYTHON", timeout=120)
  assert r.returncode == 1 and "corpus: 1 of 2 saved fuzz cases x devices pass" in r.stdout, r.stdout[-2000:] + r.stderr
  assert "ERROR PYTHON corpus junk" in r.stdout and "not a fuzz finding" in r.stdout
  r = _conformance("--group", "corpus", "--corpus", str(tmp_path / "nope"), "--device", "PYTHON", timeout=60)
  assert r.returncode == 2 and "--corpus" in r.stderr and "not a directory" in r.stderr
