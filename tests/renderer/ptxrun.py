"""Run refgrad's PTX (refgrad/renderer/ptx.py) of a linear program on the mock NV GPU, and check it with ptxas."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np

from refgrad.device import Device
from refgrad.renderer.ptx import PTXRenderer
from refgrad.uop.ops import Ops, UOp

PTXAS = shutil.which("ptxas")
NO_PTXAS = "ptxas is not on PATH: the PTX text is only checked by the mock's parser and executor"


def ptxas_ok(src: str, tmp) -> None:
  """ptxas -arch=sm_80 accepts the module (the caller skips where ptxas is missing)."""
  p = tmp / "k.ptx"
  p.write_text(src)
  r = subprocess.run([PTXAS, "-arch=sm_80", str(p), "-o", str(tmp / "k.cubin")], capture_output=True, text=True)   # type: ignore[list-item]
  assert r.returncode == 0, f"ptxas refused the module:\n{r.stderr}\n{src}"


def nv_run(name: str, uops: list[UOp], bufs: list[np.ndarray], var_vals: dict[str, int] | None = None, ren: PTXRenderer | None = None) -> str:
  """Render, launch with the renderer's grid and block, and write the results into `bufs` (numbered by DEFINE_GLOBAL).
  Returns the PTX."""
  ren = ren or PTXRenderer()
  src = ren.render(name, uops)
  grid, block = ren.launch_dims(uops)
  vv = var_vals or {}
  vars_ = [u.dtype.np.type(vv[u.arg[0]]) for u in uops if u.op is Ops.DEFINE_VAR]   # each at its dtype's width (.s32 / .s64)
  out = Device["NV"].run_ptx(src, name, [*bufs, *vars_], grid=grid, block=block)
  for b, o in zip(bufs, out): b[...] = o
  return src
