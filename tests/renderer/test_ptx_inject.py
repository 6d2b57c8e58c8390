"""Oracle power on the PTX path: a bug seeded into refgrad's PTX renderer (a wrong rounding modifier, a missing bar.sync,
a wrong fragment lane) or into an executor row is caught by `python -m conformance` (NV with NV_CODE=ptx), by the
fuzzer, and by the renderer's own differential tests. The bugs are tests/renderer/ptx_inject.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from refgrad.runtime.hcq import GPUFault
from tests.refgrad import test_gpu_renderers as tgr
from tests.renderer import test_ptx
from tests.renderer.ptxrun import nv_run

ROOT = Path(__file__).resolve().parents[2]


def _conformance(bug: str, groups: list[str], tmp_path: Path) -> tuple[int, list[dict]]:
  """`python -m conformance --device NV` with NV_CODE=ptx and the bug injected in the device's workers (--preload)."""
  script = "import sys; from conformance.__main__ import main; sys.exit(main(sys.argv[1:]))"
  out = tmp_path / "r.json"
  args = ["--device", "NV", "--preload", "tests.renderer.ptx_inject", *[a for g in groups for a in ("--group", g)], "--jobs", "2", "--json", str(out)]
  env = {**os.environ, "FUZZ_INJECT": bug, "NV_CODE": "ptx", "MOCKGPU": "1", "PYTHONPATH": str(ROOT), "REFGRAD_CACHE": str(tmp_path / "cache")}
  r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
  assert out.exists(), r.stdout[-3000:] + r.stderr[-3000:]
  return r.returncode, [x for x in json.loads(out.read_text()) if x["status"] != "pass"]


def test_wrong_rounding_modifier_is_caught_by_conformance(tmp_path):
  rc, failed = _conformance("ptx_rz", ["alu"], tmp_path)
  assert rc == 1 and failed, "add.rz instead of add.rn went unnoticed"
  assert {(f["op"], f["dtype"]) for f in failed} <= {("ADD", d) for d in ("half", "bfloat16", "float", "double")}, failed


@pytest.mark.slow
@pytest.mark.parametrize("bug, what", [("ptx_nobar", "GROUP"), ("ptx_lane", "TC")])
def test_missing_barrier_and_wrong_fragment_lane_are_caught_by_conformance(tmp_path, bug: str, what: str):
  rc, failed = _conformance(bug, ["kernels"], tmp_path)
  assert rc == 1 and failed and all(what in f["case"] for f in failed), failed


def test_missing_barrier_is_a_race_on_the_executor(monkeypatch: pytest.MonkeyPatch):
  from refgrad.renderer import ptx
  a, out = np.arange(256, dtype=np.float32), np.zeros(256, np.float32)
  nv_run("loc", tgr.locals_program(), [a, out])   # the unbroken renderer: no fault
  monkeypatch.setattr(ptx, "BARRIER", "// no barrier")
  with pytest.raises(GPUFault, match=r"race|barrier|uninitialized"): nv_run("loc", tgr.locals_program(), [a, out])


def test_wrong_fragment_lane_and_rounding_fail_the_differential_tests(monkeypatch: pytest.MonkeyPatch):
  from refgrad.dtype import dtypes
  from refgrad.renderer import ptx
  with monkeypatch.context() as m:
    m.setattr(ptx, "PAIR", (1, 0))
    with pytest.raises(AssertionError): test_ptx.test_wmma_is_the_reference(dtypes.float16)
  with monkeypatch.context() as m:
    m.setitem(ptx.FLOAT_OPS, ptx.Ops.ADD, "add.rz.{t}")   # the bug ptx_rz, restored when the context ends
    with pytest.raises(AssertionError, match="ADD on float"): test_ptx.test_alu_ops_match_the_reference(dtypes.float32)
  test_ptx.test_alu_ops_match_the_reference(dtypes.float32)


def test_executor_row_bug_is_caught_by_conformance(tmp_path):
  rc, failed = _conformance("ptx_exec_rcp", ["alu"], tmp_path)
  assert rc == 1 and {f["op"] for f in failed} == {"RECIP"}, failed


@pytest.mark.slow
def test_fuzzer_finds_a_seeded_ptx_bug(tmp_path):
  from fuzz.run import Fuzzer, Options
  from oracles.models import load_models
  opts = Options(corpus=tmp_path, preload=["tests.renderer.ptx_inject"], devices=["NV"], targets=["CUDA"], workers=2, cases=96,
                 env={"FUZZ_INJECT": "ptx_rz", "NV_CODE": "ptx"}, shrink=False)
  f = Fuzzer(opts, load_models())
  f.run()
  assert f.stats.findings and {x["oracle"] for x in f.stats.findings} == {"device"}, f.stats.findings
