"""NV_CODE=nvcc: refgrad's own kernels, rendered by the CUDA renderer and compiled by nvcc, run on the mock NV's PTX
executor with the bits of the PYTHON device emulating CUDA (a fresh process: the knob is read when the device is built)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = r"""
import numpy as np, os
from refgrad import Tensor
from refgrad.runtime import ops_nv
from refgrad.device import Device
assert isinstance(Device["NV"].compiler, ops_nv.NVCCCompiler), type(Device["NV"].compiler)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((2, 32, 32)).astype(np.float32)
h1, h2 = rng.standard_normal((2, 16, 16)).astype(np.float16)
progs = [lambda d: (Tensor(a, device=d) * 3 + Tensor(b, device=d)).exp2().sum(axis=1),
         lambda d: Tensor(a, device=d).softmax(),
         lambda d: Tensor(a, device=d) @ Tensor(b, device=d),
         lambda d: (Tensor(h1, device=d) @ Tensor(h2, device=d)).float(),
         lambda d: (Tensor(a, device=d) * 100).cast("int32") // 7]
for i, p in enumerate(progs):
  os.environ["EMULATE"] = "CUDA"
  ref = p("PYTHON").numpy()
  os.environ.pop("EMULATE")
  got = p("NV").numpy()
  assert ref.tobytes() == got.tobytes(), (i, ref, got)
print("ok", ops_nv.NVCCCompiler.count)
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: NV_CODE=nvcc compiles every kernel with it")
def test_nv_code_nvcc_matches_python_emulating_cuda(tmp_path):
  env = {**os.environ, "MOCKGPU": "1", "NV_CODE": "nvcc", "PYTHONPATH": str(ROOT), "REFGRAD_CACHE": str(tmp_path)}
  env.pop("EMULATE", None)
  r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
  assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


def test_nv_code_knob_rejects_other_values():
  from refgrad import knobs
  os.environ["NV_CODE"] = "ptxas"
  try:
    with pytest.raises(knobs.KnobError, match="NV_CODE"): knobs.get("NV_CODE")
  finally: os.environ.pop("NV_CODE")
