"""Straight-line address chains `mul.wide; add.s64; ld/st.global` fused into the access (emulators/nv/ptx/chains.py) give
the bits, faults and reports of the chain stepped and of the family handlers."""
from __future__ import annotations

import re

import numpy as np
import pytest

from emulators.nv.ptx import chains, fast
from emulators.nv.ptx.execute import Launch
from emulators.nv.ptx.parse import parse
from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from tests.emulators.ptx.ptxkit import entry

RNG = np.random.default_rng(23)


def kernel(body: str, decl: str = "") -> str:
  """params out, inp (u64) and v (u32); %r0 = tid.x, %rd1 = inp, %rd0 = out."""
  return entry(body, decl, third="v")


# loads of each width through both add orders, a negative index from a base moved up (P not a broadcast), and stores
# of each width; out[4t..4t+3] and bytes of out elsewhere
WIDTHS = kernel("""
  shl.b32 %r1, %r0, 2;
  mul.wide.s32 %rd2, %r1, 4;
  add.s64 %rd2, %rd1, %rd2;
  ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd2];
  mul.wide.u32 %rd3, %r0, 4;
  add.s64 %rd4, %rd3, %rd1;
  ld.global.f32 %f5, [%rd4+12];
  add.s64 %rd7, %rd1, 256;
  sub.s32 %r2, 0, %r0;
  mul.wide.s32 %rd5, %r2, 2;
  add.s64 %rd5, %rd7, %rd5;
  ld.global.u16 %h1, [%rd5];
  cvt.u32.u16 %r3, %h1;
  cvt.rn.f32.u32 %f6, %r3;
  add.rn.f32 %f1, %f1, %f5;
  add.rn.f32 %f2, %f2, %f6;
  mul.wide.s32 %rd6, %r1, 4;
  add.s64 %rd6, %rd0, %rd6;
  st.global.v4.f32 [%rd6], {%f1, %f2, %f3, %f4};
  mul.wide.u32 %rd8, %r0, 2;
  add.s64 %rd8, %rd0, %rd8;
  st.global.u16 [%rd8+1024], %h1;
  mul.wide.s32 %rd9, %r0, 8;
  add.s64 %rd9, %rd0, %rd9;
  ld.global.u64 %rd10, [%rd9+2048];
  mul.wide.s32 %rd11, %r0, 8;
  add.s64 %rd11, %rd0, %rd11;
  st.global.u64 [%rd11+2048], %rd10;
""")


def run(src: str, nthreads: int, out: np.ndarray, inp: np.ndarray, v: int = 0, grid: int = 1) -> np.ndarray:
  return Device["NV"].run_ptx(src, "k", [out, inp, np.uint32(v)], grid=(grid, 1, 1), block=(nthreads, 1, 1))[0]


def three(monkeypatch, src: str, *args, **kw) -> tuple[list[np.ndarray], list]:
  """(fused, chains stepped, every instruction through its family handler) results, and each fused lookup's answer."""
  got = []
  for name in ("gather_scaled", "scaled_offsets"):
    orig = getattr(Launch, name)
    def spy(self, *a, _o=orig):
      got.append(_o(self, *a))
      return got[-1]
    monkeypatch.setattr(Launch, name, spy)
  out = []
  for ch, fa in ((True, True), (False, True), (True, False)):
    monkeypatch.setattr(chains, "enabled", ch)
    monkeypatch.setattr(fast, "enabled", fa)
    out.append(run(src, *args, **kw))
  return out, got


@pytest.mark.parametrize("nthreads, grid", [(16, 1), (64, 3)])
def test_fused_chains_match_stepped_chains_and_handlers(monkeypatch, nthreads, grid):
  inp = RNG.standard_normal(4 * 64 + 64).astype(np.float32)
  outs, got = three(monkeypatch, WIDTHS, nthreads, RNG.integers(0, 2**32, 1024, dtype=np.uint32).view(np.float32), inp, grid=grid)
  assert len(got) == 7 and all(g is not None for g in got)   # every access of the kernel found from its index
  assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()


def test_chains_found_only_where_their_registers_die():
  e = parse(WIDTHS.replace("  st.global.u64 [%rd11+2048], %rd10;", "  st.global.u64 [%rd11+2048], %rd9;")).entries["k"]
  found = [i for i in range(len(e.instrs)) if chains.chain(e, i) is not None]
  assert len(found) == 7
  from emulators.nv.ptx.run import _dead_after
  fns = fast.compile_entry(e)
  before = list(fns)
  chains.fuse(e, fns, _dead_after(e))
  fused = [i + 2 for i in found if fns[i] is chains._nothing]
  # the u64 load's address is stored as a value too (read after the load): that chain stays stepped
  assert len(fused) == 6 and all(fns[j] is not before[j] for j in fused) and found[5] + 2 not in fused


def test_divergent_lanes_step_the_chain(monkeypatch):
  """A chain some lanes skip (a branch around it): where not every lane is selected the chain is stepped for those lanes;
  the store after the join is fused again."""
  src = kernel("""
  and.b32 %r1, %r0, 1;
  setp.eq.u32 %p1, %r1, 1;
  mov.f32 %f2, 0f3F800000;
  @%p1 bra SKIP;
  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd2, %rd1, %rd2;
  ld.global.f32 %f2, [%rd2];
SKIP:
  mul.wide.u32 %rd3, %r0, 4;
  add.s64 %rd3, %rd0, %rd3;
  st.global.f32 [%rd3], %f2;""")
  inp = RNG.standard_normal(32).astype(np.float32)
  outs, got = three(monkeypatch, src, 32, np.zeros(32, np.float32), inp)
  assert len(got) == 1 and got[0] is not None   # the store only: the load runs for half the lanes
  assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()
  assert (outs[0][::2] == inp[::2]).all() and (outs[0][1::2] == 1).all()


@pytest.mark.parametrize("what", ["past the end", "undefined index", "undefined memory", "unaligned"])
def test_chains_not_fused_report_as_stepped(monkeypatch, what):
  """An access outside the buffer, an index or loaded bytes not defined (memcheck), an address not a multiple of the
  access: the chain steps, and the fault (or result) is the stepped one's."""
  body = {
    "past the end": "  mul.wide.u32 %rd2, %r0, 16;\n  add.s64 %rd2, %rd1, %rd2;\n  ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd2];\n  st.global.f32 [%rd0], %f1;",
    "undefined index": "  ld.shared.u32 %r1, [sh];\n  mul.wide.u32 %rd2, %r1, 4;\n  add.s64 %rd2, %rd1, %rd2;\n  ld.global.f32 %f1, [%rd2];\n  st.global.f32 [%rd0], %f1;",
    # bytes stored from shared memory nothing wrote are undefined: the load through a chain gets them, then uses one as an address
    "undefined memory": "  ld.shared.u32 %r1, [sh];\n  st.global.u32 [%rd1+8], %r1;\n  mul.wide.u32 %rd2, %r0, 4;\n  add.s64 %rd2, %rd1, %rd2;\n"
                        "  ld.global.u32 %r2, [%rd2];\n  mul.wide.u32 %rd3, %r2, 4;\n  add.s64 %rd3, %rd1, %rd3;\n  ld.global.f32 %f1, [%rd3];\n"
                        "  st.global.f32 [%rd0], %f1;",
    "unaligned": "  shl.b32 %r1, %r0, 1;\n  add.s32 %r1, %r1, 1;\n  mul.wide.u32 %rd2, %r1, 4;\n  add.s64 %rd2, %rd1, %rd2;\n"
                 "  ld.global.v2.f32 {%f1, %f2}, [%rd2];\n  add.rn.f32 %f1, %f1, %f2;\n  mul.wide.u32 %rd3, %r0, 4;\n  add.s64 %rd3, %rd0, %rd3;\n"
                 "  st.global.f32 [%rd3], %f1;",
  }[what]
  src = kernel(body, ".shared .align 8 .b8 sh[16];")
  res = []
  for ch in (True, False):
    monkeypatch.setattr(chains, "enabled", ch)
    try: res.append(run(src, 8, np.zeros(8, np.float32), np.arange(16, dtype=np.float32)).tobytes())
    except GPUFault as ex: res.append(re.sub(r"0x[0-9a-f]+|GP entry \d+", "#", str(ex)))
  assert res[0] == res[1]
  if what != "unaligned": assert isinstance(res[0], str) and ("MMU fault" in res[0] if what == "past the end" else "undefined value used as an address" in res[0])
