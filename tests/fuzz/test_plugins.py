"""`python -m fuzz` with third-party devices from real entry points (tests/plugins/): a named device that cannot be
built is one line and exit 2; in the default list it is a FAILED line and exit 1, and --exclude leaves it out."""
from __future__ import annotations

import json
import platform

import pytest

from tests.cli import run_module
from tests.plugins.registry import install


@pytest.mark.parametrize("device, msg", [("RAISES", "RuntimeError: no such accelerator on this machine"),
                                         ("WRONGTYPE", "make_device returned dict, not a refgrad.device.Compiled")])
def test_named_device_that_cannot_be_built(tmp_path, device, msg):
  r = run_module("fuzz", "--devices", f"CPU,{device}", "--cases", "8", "--corpus", str(tmp_path / "c"), env=install(tmp_path / "site"), timeout=120)
  assert r.returncode == 2 and msg in r.stderr and f"device {device} cannot be constructed" in r.stderr, r.stderr
  assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr

def test_default_list_failure_is_loud_and_exclude_leaves_it_out(tmp_path):
  env = {**install(tmp_path / "site", {"RAISES": "tests.plugins.bad_backends:raising"}), "MOCKGPU": "1"}
  args = ["--cases", "8", "--workers", "1", "--targets", "CPU", "--quiet", "--exclude", "NV", "--exclude", "AMD", "--corpus", str(tmp_path / "c")]
  r = run_module("fuzz", *args, env=env, timeout=300)
  assert r.returncode == 1 and "FAILED: device RAISES cannot be constructed" in r.stderr and "--exclude RAISES" in r.stderr, r.stdout[-2000:] + r.stderr
  r = run_module("fuzz", *args, "--exclude", "raises", env=env, timeout=300)
  assert r.returncode == 0 and "FAILED" not in r.stderr, r.stdout[-2000:] + r.stderr

@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="gcc's -ffast-math FTZ start-up code is checked on x86-64")
def test_fast_math_device_is_an_fp_state_finding_that_replays(tmp_path):
  env = install(tmp_path / "site", {"FASTCPU": "tests.plugins.bad_backends:fast_cpu"})
  report = tmp_path / "r.json"
  r = run_module("fuzz", "--devices", "FASTCPU", "--cases", "16", "--targets", "CPU", "--quiet", "--corpus", str(tmp_path / "c"),
                 "--json", str(report), "--shrink-seconds", "10", env=env, timeout=300)
  assert r.returncode == 1, r.stdout[-2000:] + r.stderr
  doc = json.loads(report.read_text())
  fp = [x for x in doc["findings"] if x["oracle"] == "fp-state"]
  assert fp and fp[0]["device"] == "FASTCPU" and "to FTZ DAZ" in fp[0]["detail"], doc["findings"]
  assert f"rerun: {fp[0]['rerun']}" in r.stdout
  r = run_module("fuzz", "replay", fp[0]["path"], "--devices", "FASTCPU", env=env, timeout=120)
  assert r.returncode == 1 and "FAILS (same failure): fp-state on FASTCPU" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="gcc's -ffast-math FTZ start-up code is checked on x86-64")
def test_fast_math_device_beside_the_cpu_spoils_only_its_own_results(tmp_path):
  """FASTCPU's library switches its worker to FTZ/DAZ; PYTHON and the CPU run in workers of their own, so the CPU shows
  no false failure and FASTCPU's flushed subnormals are "device" findings against an unflushed reference (no FP state
  is restored to keep the reference clean: FASTCPU goes on running in the state it chose, as in a process of its own)."""
  env = install(tmp_path / "site", {"FASTCPU": "tests.plugins.bad_backends:fast_cpu"})
  report = tmp_path / "r.json"
  r = run_module("fuzz", "--devices", "FASTCPU,CPU", "--cases", "48", "--targets", "CPU", "--quiet", "--corpus", str(tmp_path / "c"),
                 "--json", str(report), "--no-shrink", "--seed", "3", env=env, timeout=300)
  assert r.returncode == 1, r.stdout[-2000:] + r.stderr
  doc = json.loads(report.read_text())
  assert doc["findings"] and all(x["device"] == "FASTCPU" for x in doc["findings"]), doc["findings"]
  kinds = {x["oracle"] for x in doc["findings"]}
  assert {"fp-state", "device"} <= kinds, doc["findings"]
  assert doc["programs_per_device"]["CPU"] == doc["programs_per_device"]["FASTCPU"] > 0
