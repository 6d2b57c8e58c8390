"""The conformance CLI: tables, exit codes, JSON and JUnit reports, third-party devices."""
import json
import xml.etree.ElementTree as ET

import pytest

from conformance.__main__ import main
from refgrad.device import Device


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

@pytest.fixture
def broken_device(monkeypatch):
  # what an entry point in the "refgrad.devices" group does for a third-party backend
  monkeypatch.setitem(Device._modules, "BROKEN", "tests.conformance.broken_device")
  return "BROKEN"

def test_a_broken_backend_fails(broken_device, tmp_path, capsys):
  js = tmp_path / "r.json"
  assert main(["--device", broken_device, "--group", "alu", "--json", str(js)]) == 1
  failed = [r for r in json.loads(js.read_text()) if r["status"] != "pass"]
  assert {(r["op"], r["dtype"]) for r in failed} == {("ADD", "float")}
  assert "lanes differ" in failed[0]["detail"] and "FAIL" in capsys.readouterr().out
