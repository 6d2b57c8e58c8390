"""WMMA (tensor cores) in the renderers: the C backend emulates each tensor core bit for bit with the reference
(semantics.wmma, the PYTHON device's SIMT executor), CUDA renders inline PTX mma.sync (compiled with `nvcc --ptx` when
nvcc is on PATH) and HIP the gfx11 WMMA builtins; every renderer refuses a tensor core its target lacks and a workgroup
that is not whole warps, naming the uop."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from refgrad import Tensor, dtypes, schedule
from refgrad.codegen import to_linear
from refgrad.dtype import DType
from refgrad.kernel import Kernel
from refgrad.opt import Opt, OptOps, apply_opt
from refgrad.renderer.cstyle import CRenderer
from refgrad.renderer.gpu import CUDARenderer, HIPRenderer
from refgrad.renderer.serialize import PythonRenderer
from refgrad.target import AMD, CUDA, Target
from refgrad.uop.ops import Ops, UOp
from tests.refgrad.test_cpu_barriers import both

M, K, N = 32, 64, 32

def _ast(dt: DType) -> UOp:
  a, b = Tensor.empty(M, K, dtype=dt, device="CPU"), Tensor.empty(K, N, dtype=dt, device="CPU")
  items, _ = schedule.create_schedule([a.matmul(b, dtype=dtypes.float32).uop], "CPU")
  return items[-1].ast

def _program(dt: DType, target: Target, extra: tuple[Opt, ...] = (), tc: bool = True) -> list[UOp]:
  k = Kernel(_ast(dt), "mm", target)
  tci = [t.dtype_in for t in target.tensor_cores].index(dt) if target.tensor_cores else 0   # the tensor core for dt
  for o in ((Opt(OptOps.TC, 0, tci),) if tc else ()) + extra: k = apply_opt(k, o)
  return to_linear(k.lower(), CRenderer())

def _inputs(dt: DType) -> list[tuple[np.ndarray, DType]]:
  rng = np.random.default_rng(3)
  a, b = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N)))
  if dt == dtypes.float16: a, b = a.astype(np.float16), b.astype(np.float16)
  else: a, b = ((x.view(np.uint32) >> 16).astype(np.uint16) for x in (a, b))   # bfloat16 bits (truncated: any values do)
  return [(np.zeros(M * N, np.float32), dtypes.float32), (a, dt), (b, dt)]

@pytest.mark.parametrize("target", [CUDA, AMD], ids=lambda t: t.name)
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("extra", [(), (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.LOCAL, 0, 2))], ids=["tc", "tc+upcast+local"])
def test_c_wmma_is_the_reference(target: Target, dt: DType, extra: tuple[Opt, ...]):
  """A tensor-core matmul on CPU (C) and PYTHON: the same bits, and the bits of the plain kernel (k summed in the same order)."""
  uops = _program(dt, target, extra)
  assert sum(u.op is Ops.WMMA for u in uops) == (2 if extra else 1)
  src = CRenderer().render("mm", uops)
  tc = next(t for t in target.tensor_cores if t.dtype_in == dt)
  assert f"static void rg_wmma_{tc.name}(" in src and src.count(f"rg_wmma_{tc.name}(") == 1 + (2 if extra else 1)
  plain = both("plain", _program(dt, target, tc=False), _inputs(dt))[0]
  got = both("mm", uops, _inputs(dt))[0]
  assert np.array_equal(got.view(np.uint32), plain.view(np.uint32))

def test_wmma_needs_whole_warps_and_the_targets_tensor_core(monkeypatch: pytest.MonkeyPatch):
  uops = _program(dtypes.float16, CUDA)
  lid = next(u for u in uops if u.op is Ops.SPECIAL and u.arg[0] == "lidx0")
  broken = _rebuild(uops, {lid: lid.replace(arg=("lidx0", 16))})   # half a warp: lanes 16..31 missing
  monkeypatch.setenv("EMULATE", "CUDA")   # the PYTHON renderer checks the emulated target's limits
  for ren in (CRenderer(), CUDARenderer(), PythonRenderer()):
    with pytest.raises(ValueError, match=r"uop \d+ \(WMMA .*\): a workgroup of 16 work-items is not whole warps of 32 lanes"):
      ren.render("mm", broken)
  monkeypatch.delenv("EMULATE")
  amd = _program(dtypes.float16, AMD)
  with pytest.raises(ValueError, match=r"uop \d+ \(WMMA .*\): CUDA has no tensor core"): CUDARenderer().render("mm", amd)
  with pytest.raises(ValueError, match=r"uop \d+ \(WMMA .*\): AMD has no tensor core"): HIPRenderer().render("mm", _program(dtypes.float16, CUDA))
  with pytest.raises(ValueError, match=r"CUDA has no tensor core .*\(it has: none\)"): CUDARenderer("sm_75").render("mm", _program(dtypes.float16, CUDA))
  no_tc = dataclasses.replace(AMD, warp_size=64, tensor_cores=())
  assert HIPRenderer("gfx942").target == no_tc
  with pytest.raises(ValueError, match="AMD has no tensor core"): HIPRenderer("gfx942").render("mm", amd)

def _rebuild(uops: list[UOp], sub: dict[UOp, UOp]) -> list[UOp]:
  """uops with some nodes replaced and every user rebuilt, in program order."""
  sink = UOp.sink(*uops).substitute(sub)
  return list(sink.src)

def test_gpu_texts_use_the_tensor_core_instructions():
  cu = CUDARenderer().render("mm", _program(dtypes.float16, CUDA))
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in cu and cu.count("asm volatile") == 1
  cb = CUDARenderer().render("mm", _program(dtypes.bfloat16, CUDA))
  assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in cb
  hp = HIPRenderer().render("mm", _program(dtypes.float16, AMD))
  assert "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32(" in hp
  assert "__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(" in HIPRenderer().render("mm", _program(dtypes.bfloat16, AMD))

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: this test compiles the CUDA renderer's output with it")
def test_cuda_wmma_compiles_with_nvcc(tmp_path):
  for dt in (dtypes.float16, dtypes.bfloat16):
    src = CUDARenderer().render(f"mm_{dt.name}", _program(dt, CUDA, (Opt(OptOps.UPCAST, 0, 2),)))
    (cu := tmp_path / f"mm_{dt.name}.cu").write_text(src)
    r = subprocess.run(["nvcc", "--ptx", "-arch=sm_80", str(cu), "-o", str(ptx := tmp_path / f"mm_{dt.name}.ptx")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{src}"
    text = ptx.read_text()
    ty = "f16" if dt == dtypes.float16 else "bf16"
    assert text.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32") in (2, 8), text   # 2 per k step; nvcc may unroll the 4 steps
