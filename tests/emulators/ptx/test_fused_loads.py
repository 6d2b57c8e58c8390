"""Loads of a loop run as arrays whose address chain `mul.wide; add.s64` is fused into the load (loops.Fused, gathered
by Launch.gather_scaled) give the bits and the reports of the chain stepped, and of the loop stepped."""
from __future__ import annotations

import re

import numpy as np
import pytest

from emulators.nv.ptx import loops
from emulators.nv.ptx.parse import parse
from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from tests.emulators.ptx.ptxkit import entry

RNG = np.random.default_rng(17)


def kernel(body: str, pre: str = "") -> str:
  """out[tid] = a sum over n iterations of loads from `inp` (params out, inp, n), the matmul kernel's shape: the load's
  address is `mul.wide.s32 %rdA, index, 4; add.s64 %rdB, %rd1, %rdA` inside the loop."""
  return entry(f"""  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd3, %rd0, %rd2;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r2, 0;
{pre}
L_top:
{body}
  add.rn.f32 %f1, %f1, %f6;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.f32 [%rd3], %f1;""")


# v4 loads of row tid (n iterations of 4 floats), the index signed; a scalar load at an offset through mul.wide.u32
# from the induction variable itself (bits, not typed); a v2 load whose chain adds in the other order
V4 = kernel("""
  mul.lo.s32 %r3, %r0, %r9;
  add.s32 %r4, %r3, %r2;
  mul.lo.s32 %r5, %r4, 4;
  mul.wide.s32 %rd4, %r5, 4;
  add.s64 %rd4, %rd1, %rd4;
  ld.global.v4.f32 {%f2, %f3, %f4, %f5}, [%rd4];
  add.rn.f32 %f6, %f2, %f3;
  add.rn.f32 %f6, %f6, %f4;
  add.rn.f32 %f6, %f6, %f5;
""")
SCALAR = kernel("""
  mul.wide.u32 %rd5, %r2, 4;
  add.s64 %rd6, %rd1, %rd5;
  ld.global.f32 %f2, [%rd6+8];
  mul.rn.f32 %f6, %f2, 0f40000000;
""")
V2 = kernel("""
  shl.b32 %r5, %r2, 1;
  add.s32 %r5, %r5, %r6;
  mul.wide.s32 %rd5, %r5, 4;
  add.s64 %rd5, %rd5, %rd1;
  ld.global.v2.f32 {%f2, %f3}, [%rd5];
  add.rn.f32 %f6, %f2, %f3;
""", pre="  shl.b32 %r6, %r0, 1;")
# the base differs per lane (an invariant that is not one pointer): the chain is stepped
PER_LANE = kernel("""
  mul.wide.s32 %rd5, %r2, 4;
  add.s64 %rd6, %rd7, %rd5;
  ld.global.f32 %f6, [%rd6];
""", pre="  add.s64 %rd7, %rd1, %rd2;")
# v2 loads scaled by 12 bytes, not a whole number of 8-byte elements (the chain is stepped); the index is even, so every
# address is aligned (an odd multiple of 4 bytes would be a misaligned-address fault: PTX ISA §6.4.1.1)
ODD = kernel("""
  shl.b32 %r5, %r2, 1;
  mul.wide.s32 %rd5, %r5, 12;
  add.s64 %rd5, %rd1, %rd5;
  ld.global.v2.f32 {%f2, %f3}, [%rd5];
  add.rn.f32 %f6, %f2, %f3;
""")


def run(src: str, nthreads: int, data: np.ndarray, n: int) -> np.ndarray:
  return Device["NV"].run_ptx(src, "k", [np.zeros(nthreads, np.float32), data, np.uint32(n)], grid=(1, 1, 1), block=(nthreads, 1, 1))[0]


def three(monkeypatch, src: str, *args) -> tuple[list[np.ndarray], list]:
  """(fused, the chain stepped, the loop stepped) results, and what each fused gather returned."""
  got = []
  orig = loops._gather
  def spy(*a):
    got.append(orig(*a))
    return got[-1]
  monkeypatch.setattr(loops, "_gather", spy)
  out = []
  for fuse, on in ((True, True), (False, True), (True, False)):
    monkeypatch.setattr(loops, "fuse_enabled", fuse)
    monkeypatch.setattr(loops, "enabled", on)
    out.append(run(src, *args))
  return out, got


@pytest.mark.parametrize("src, nthreads, n, size", [(V4, 7, 5, 7 * 5 * 4), (V4, 64, 40, 64 * 40 * 4), (SCALAR, 9, 30, 32), (V2, 5, 20, 50)])
def test_fused_loads_match_the_stepped_chain(monkeypatch, src, nthreads, n, size):
  (fused, chain, stepped), got = three(monkeypatch, src, nthreads, RNG.standard_normal(size).astype(np.float32), n)
  (plan,) = loops.plans(parse(src).entries["k"]).values()
  assert len(plan.fused) == 1
  assert got and all(g is not None for g in got)   # every chunk gathered from the index
  assert fused.tobytes() == chain.tobytes() == stepped.tobytes()


@pytest.mark.parametrize("src", [PER_LANE, ODD])
def test_loads_not_gathered_step_the_chain(monkeypatch, src):
  (fused, chain, stepped), got = three(monkeypatch, src, 6, RNG.standard_normal(6 * 4 + 64).astype(np.float32), 12)
  assert got and all(g is None for g in got)
  assert fused.tobytes() == chain.tobytes() == stepped.tobytes()


@pytest.mark.parametrize("src, size", [(V4, 4 * 5 * 4 - 1), (SCALAR, 6)])
def test_a_fused_load_past_the_end_is_reported_as_stepped(monkeypatch, src, size):
  """The last lane's (or the last iterations') elements lie past the buffer: the gather declines, the chain and the load
  step, and the fault names the same thread, line and instruction as the loop stepped."""
  msgs = []
  for on in (True, False):
    monkeypatch.setattr(loops, "enabled", on)
    with pytest.raises(GPUFault) as ex: run(src, 4, np.zeros(size, np.float32), 5)
    msgs.append(re.sub(r"0x[0-9a-f]+|GP entry \d+", "#", str(ex.value)))
  assert msgs[0] == msgs[1] and "MMU fault" in msgs[0] and "ld.global" in msgs[0]


def test_fusion_needs_a_chain_read_by_the_load_only():
  """The add's result read again (by a second load) or the mul's index written between the mul and the load: no fusion."""
  twice = V4.replace("  add.rn.f32 %f6, %f2, %f3;", "  ld.global.f32 %f7, [%rd4+4];\n  add.rn.f32 %f6, %f2, %f7;")
  moved = V4.replace("  add.s64 %rd4, %rd1, %rd4;", "  add.s64 %rd4, %rd1, %rd4;\n  add.s32 %r5, %r5, 1;")
  for src in (twice, moved):
    (plan,) = loops.plans(parse(src).entries["k"]).values()
    assert not plan.fused
