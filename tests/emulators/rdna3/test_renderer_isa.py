"""refgrad's own LLVM IR renderer (issue 21 part 1, refgrad/renderer/llvmir.py) for gfx1100: its kernels decode in
agreement with LLVM's printed assembly, and run on the RDNA3 machine bit-exact with the PYTHON device's SIMT executor
(the reference) on the same linear program. Skipped, saying so, on a branch without the renderer."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, dtypes, schedule
from refgrad.codegen import to_linear
from refgrad.kernel import Kernel
from refgrad.runtime.simt import Memory, Program
from refgrad.target import AMD
from refgrad.uop.ops import Ops
from tests.emulators.rdna3.llvm_util import compile_ir, read_elf, run_direct
from tests.emulators.rdna3.test_decode_llvm import compare

llvmir = pytest.importorskip("refgrad.renderer.llvmir", reason="the LLVM IR renderer (issue 21 part 1) is not on this branch")

N = 256
PROGRAMS = {   # elementwise programs: name -> (inputs' dtypes, function of the input Tensors)
  "add": ((dtypes.float32, dtypes.float32), lambda a, b: a + b),
  "mulacc": ((dtypes.float32, dtypes.float32), lambda a, b: a * b + a),
  "recip_mul": ((dtypes.float32, dtypes.float32), lambda a, b: a / b),
  "maximum": ((dtypes.float32, dtypes.float32), lambda a, b: a.maximum(b)),
  "idiv": ((dtypes.int32,), lambda i: i // (i.abs() + 1)),
  "cast": ((dtypes.float32, dtypes.int32), lambda a, i: a.cast(dtypes.int32) + i),
  "half": ((dtypes.float16,), lambda h: h * h + h),
  "sqrt": ((dtypes.float32,), lambda a: a.abs().sqrt()),
  "where": ((dtypes.float32, dtypes.float32), lambda a, b: (a < b).where(a, b * 2)),
}


def linear(name: str):
  dts, fn = PROGRAMS[name]
  ts = [Tensor.empty(N, dtype=d, device="CPU") for d in dts]
  items, _ = schedule.create_schedule([fn(*ts).uop], "CPU")
  ast = next(it.ast for it in items if it.ast.op is Ops.SINK)
  r = llvmir.LLVMRenderer("amdgcn")
  uops = to_linear(Kernel(ast, name, AMD).lower(), r)
  return r, uops, dts


def inputs(dts) -> list[np.ndarray]:
  rng = np.random.default_rng(11)
  out = []
  for d in dts:
    if d == dtypes.int32: out.append(rng.integers(-1000, 1000, N).astype(np.int32))
    else: out.append((rng.standard_normal(N) * 4).astype(np.float16 if d == dtypes.float16 else np.float32))
  return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_renderer_kernel_decodes_and_matches_python(name):
  r, uops, dts = linear(name)
  ir = r.render(name, uops)
  body = "\n".join(ln for ln in ir.splitlines() if not ln.startswith(("target triple", "target datalayout")))
  assert compare(body) > 10
  k = read_elf(compile_ir(body)[0])[name]
  grid, block = r.launch_dims(uops)
  ins = inputs(dts)
  out_dt = next(u.dtype.base for u in uops if u.op is Ops.DEFINE_GLOBAL and u.arg == 0)
  out = np.zeros(N, np.dtype(out_dt.fmt))
  got = run_direct(k, [out] + ins, tuple(grid), tuple(block))[0]
  mems = [Memory(np.zeros(out.nbytes, np.uint8))] + [Memory(x.view(np.uint8).copy()) for x in ins]
  Program(name, uops)(mems, grid, block)
  want = mems[0].data.view(out.dtype)
  np.testing.assert_array_equal(got.view(f"u{out.itemsize}"), want.view(f"u{out.itemsize}"))
