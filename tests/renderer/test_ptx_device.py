"""NV_CODE=ptx end to end: the NV device renders every kernel with refgrad's PTX renderer (no nvcc), launches it as a
b"PTX1" image and the mock's PTX executor runs it, with the bits of the PYTHON device emulating CUDA; DEBUG=4 prints the
PTX. The NV_NVCC device is the nvcc code path under its own name (a fresh process each: the knob is read when the device
is built)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = r"""
import numpy as np, os, sys
from refgrad import Tensor
from refgrad.device import Device
from refgrad.runtime import ops_nv
dev = sys.argv[1]
assert isinstance(Device[dev].compiler, ops_nv.PTXCompiler if dev == "NV" else ops_nv.NVCCCompiler), type(Device[dev].compiler)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((2, 32, 32)).astype(np.float32)
h1, h2 = rng.standard_normal((2, 16, 16)).astype(np.float16)
i8 = rng.integers(-128, 128, (8, 8)).astype(np.int8)
progs = [lambda d: (Tensor(a, device=d) * 3 + Tensor(b, device=d)).exp2().sum(axis=1),
         lambda d: Tensor(a, device=d).softmax(),
         lambda d: Tensor(a, device=d) @ Tensor(b, device=d),
         lambda d: (Tensor(h1, device=d) @ Tensor(h2, device=d)).float(),
         lambda d: (Tensor(a, device=d) * 100).cast("int32") // 7,
         lambda d: Tensor(i8, device=d) * 3 + 1,
         lambda d: (Tensor(a, device=d).relu().cast("bfloat16") * 2).cast("float"),
         lambda d: (Tensor(a, device=d) > 0).where(Tensor(a, device=d), 0.0).sum()]
for i, p in enumerate(progs):
  os.environ["EMULATE"] = "CUDA"
  ref = p("PYTHON").numpy()
  os.environ.pop("EMULATE")
  got = p(dev).numpy()
  assert ref.tobytes() == got.tobytes(), (i, ref, got)
print("ok")
"""


def _run(dev: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
  e = {**os.environ, "MOCKGPU": "1", "PYTHONPATH": str(ROOT), "REFGRAD_CACHE": str(tmp_path), **env}
  e.pop("EMULATE", None)
  return subprocess.run([sys.executable, "-c", SCRIPT, dev], capture_output=True, text=True, env=e, cwd=ROOT, timeout=600)


def test_nv_code_ptx_matches_python_emulating_cuda_and_debug_prints_the_ptx(tmp_path):
  r = _run("NV", tmp_path, NV_CODE="ptx", DEBUG="4")
  assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stdout[-3000:] + r.stderr[-3000:]
  assert ".target sm_80" in r.stdout and "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in r.stdout   # the half matmul uses tensor cores


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: the NV_NVCC device compiles every kernel with it")
def test_nv_nvcc_device_matches_python_emulating_cuda(tmp_path):
  r = _run("NV_NVCC", tmp_path, NV_CODE="ptx")
  assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stdout[-3000:] + r.stderr[-3000:]


def test_code_paths_are_one_table():
  from refgrad import knobs
  from refgrad.renderer.ptx import PTXRenderer
  from refgrad.runtime import ops_nv
  assert set(ops_nv.CODE_PATHS) == {"ptx", "ir", "nvcc"} and ops_nv.CODE_PATHS["ptx"][0] is PTXRenderer
  assert ops_nv.CODE_DEVICES == {"NV": None, "NV_NVCC": "nvcc"}
  assert knobs.get("NV_CODE") in ops_nv.CODE_PATHS
