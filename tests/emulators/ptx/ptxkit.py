"""Hand-written PTX for instruction tests: one instruction over arrays of operands, run through Device["NV"].run_ptx; nvcc's
PTX of the CUDA C fixtures."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from refgrad.device import Device

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"   # the module header every hand-written kernel starts with


def entry(body: str, decl: str = "", third: str = "n") -> str:
  """A kernel `k(out, inp: u64, <third>: u32)` whose `body` starts with %rd0 = out, %rd1 = inp, %r9 = <third>, %r0 = tid.x
  (registers %p<4>, %h<4>, %r<16>, %f<16>, %rd<16> and `decl` declared) and ends at `ret`."""
  return HEAD + f""".visible .entry k(.param .u64 out, .param .u64 inp, .param .u32 {third})
{{
  .reg .pred %p<4>;
  .reg .b16 %h<4>;
  .reg .b32 %r<16>;
  .reg .f32 %f<16>;
  .reg .b64 %rd<16>;
  {decl}
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [inp];
  ld.param.u32 %r9, [{third}];
  mov.u32 %r0, %tid.x;
{body}
  ret;
}}
"""


REG = {1: "b16", 2: "b16", 4: "b32", 8: "b64"}   # bytes -> register class used for loads/stores (8-bit values live in b16)


def one(instr: str, ins: list[np.ndarray], out: np.dtype, ityp: list[str], otyp: str, n_threads: int | None = None) -> np.ndarray:
  """Run `instr` (operands %a %b %c -> %d) once per element; ityp / otyp are the register types (.f32, .pred, ...)."""
  n = len(ins[0]) if ins else n_threads
  regs, loads = [], []
  names = "abc"
  for i, (a, t) in enumerate(zip(ins, ityp)):
    w = a.dtype.itemsize
    regs.append(f".reg .{t} %{names[i]};")
    lt = {1: "u8", 2: "b16", 4: "b32", 8: "b64"}[w]
    if t == "pred":
      regs.append(f".reg .b16 %t{i};")
      loads.append(f"add.s64 %rd9, %rd{i}, %rd8; ld.global.u8 %t{i}, [%rd9]; setp.ne.b16 %{names[i]}, %t{i}, 0;")
    else:
      loads.append(f"mul.wide.u32 %rd9, %r0, {w}; add.s64 %rd9, %rd{i}, %rd9; ld.global.{lt} %{names[i]}, [%rd9];")
  ow = np.dtype(out).itemsize
  if otyp == "pred":
    regs.append(".reg .pred %d; .reg .b32 %o;")
    store = "selp.b32 %o, 1, 0, %d; add.s64 %rd9, %rd3, %rd8; st.global.u8 [%rd9], %o;"
  else:
    regs.append(f".reg .{otyp} %d;")
    st = {1: "u8", 2: "b16", 4: "b32", 8: "b64"}[ow]
    store = f"mul.wide.u32 %rd9, %r0, {ow}; add.s64 %rd9, %rd3, %rd9; st.global.{st} [%rd9], %d;"
  src = f"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u64 p3)
{{
  .reg .b32 %r<4>;
  .reg .b64 %rd<10>;
  {' '.join(regs)}
  ld.param.u64 %rd0, [p0]; ld.param.u64 %rd1, [p1]; ld.param.u64 %rd2, [p2]; ld.param.u64 %rd3, [p3];
  mov.u32 %r0, %tid.x;
  cvt.u64.u32 %rd8, %r0;
  {' '.join(loads)}
  {instr};
  {store}
  ret;
}}
"""
  args = [*ins] + [np.zeros(1, np.uint8)] * (3 - len(ins)) + [np.zeros(n, out)]
  return Device["NV"].run_ptx(src, "k", args, grid=(1, 1, 1), block=(n, 1, 1))[3]


def nvcc_ptx(tmp_path_factory, cu: Path, *flags: str) -> str:
  """nvcc's PTX (-O3, sm_80) of a CUDA C fixture next to the tests (skips the test where nvcc is missing)."""
  if shutil.which("nvcc") is None: pytest.skip("nvcc is not on PATH: these tests compile CUDA C to PTX with it")
  out = tmp_path_factory.mktemp("ptx") / (cu.stem + ".ptx")
  subprocess.run(["nvcc", "--ptx", "-arch=sm_80", "-O3", *flags, str(cu), "-o", str(out)], check=True, capture_output=True)
  return out.read_text()


def ptxas_ok(src: str, tmp_path: Path, *flags: str) -> None:
  """Hand-written PTX is what `ptxas -arch=sm_80` takes (nothing to check where ptxas is missing: the emulator's answer
  is checked either way)."""
  if shutil.which("ptxas") is None: return
  p = tmp_path / "k.ptx"
  p.write_text(src)
  r = subprocess.run(["ptxas", *flags, "-arch=sm_80", str(p), "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
  assert r.returncode == 0, (src, r.stderr)
