"""`python -m fuzz` with third-party devices from real entry points (tests/plugins/): a named device that cannot be
built is one line and exit 2; in the default list it is a FAILED line and exit 1, and --exclude leaves it out."""
from __future__ import annotations

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
