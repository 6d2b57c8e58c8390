"""Basic blocks as generated Python (emulators/amd/rdna3/blocks.py) against the interpreter they stand in for: every
corpus kernel ends with the same buffers, SGPRs, VGPRs, SCC and (checked mode) VGPR definedness either way; blocks run
whole runs of instructions; checked mode still names the first undefined read; a fault inside a block names its
instruction."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.amd.rdna3 import machine as MM
from tests.emulators.rdna3 import kernels as K
from tests.emulators.rdna3.llvm_util import Kernel
from tests.emulators.rdna3.llvm_util import run_machine as machine
from tests.emulators.rdna3.test_checked import S_CBRANCH_VCCNZ, S_ENDPGM, V_CMP_EQ_U32, raw_kernel, vop1, vopc
from tests.emulators.rdna3.test_execute import EXPECT, NP, N, inputs, kernels_of


def same_either_way(k: Kernel, bufs: list[np.ndarray], grid, block, vals=(), checked=True) -> MM.Machine:
  (mb, ob), (mi, oi) = (machine(k, [b.copy() for b in bufs], grid, block, vals, checked, on) for on in (True, False))
  for x, y in zip(ob, oi): assert x.tobytes() == y.tobytes()
  assert np.array_equal(mb.s, mi.s) and np.array_equal(mb.v, mi.v) and np.array_equal(mb.scc, mi.scc) and np.array_equal(mb.pc, mi.pc)
  if checked: assert np.array_equal(mb.vinit, mi.vinit)
  assert mb.steps <= mi.steps
  return mb


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_elementwise_kernels_same_with_blocks(name: str):
  t, tin, _ = K.ELEMENTWISE[name]
  a, b = inputs(NP[tin], np.random.default_rng(sum(map(ord, name))))
  if name.startswith("cvt_i"): a, b = np.trunc(a), np.abs(b)
  for checked in (True, False):
    same_either_way(kernels_of("elementwise")[name], [np.zeros(N, NP[t]), a, b], (N // 64, 1, 1), (64, 1, 1), checked=checked)


@pytest.mark.parametrize("name, bufs, grid, block, vals", [
  ("lds_reverse", lambda r: [np.zeros(N, np.float32), np.arange(N, dtype=np.float32)], (2, 1, 1), (64, 1, 1), ()),
  ("loop_sum", lambda r: [np.zeros(N, np.float32), r.standard_normal(N + 16).astype(np.float32)], (2, 1, 1), (64, 1, 1), (3,)),
  ("branch", lambda r: [np.zeros(N, np.int32), r.integers(-50, 50, N).astype(np.int32)], (2, 1, 1), (64, 1, 1), ()),
  ("guarded", lambda r: [np.full(N, -1, np.float32), np.arange(N, dtype=np.float32)], (2, 1, 1), (64, 1, 1), (100,)),
])
def test_control_kernels_same_with_blocks(name, bufs, grid, block, vals):
  same_either_way(kernels_of("control")[name], bufs(np.random.default_rng(3)), grid, block, vals)


def test_blocks_run_runs_of_instructions():
  k = kernels_of("elementwise")["mul_f32"]
  a, b = inputs(np.float32, np.random.default_rng(0))
  m = same_either_way(k, [np.zeros(N, np.float32), a, b], (N // 64, 1, 1), (64, 1, 1))
  built = [blk for blk in m.blocks.values() if blk is not None]
  assert built and max(len(blk.insts) for blk in built) > 3
  assert any("out=" in blk.source or "np.copyto" in blk.source for blk in built)   # VALU rows inline, not through handlers


def raw(*words: int) -> Kernel: return raw_kernel(*words)


@pytest.mark.parametrize("words, what", [
  # v_mov_b32 v1, v5 (undefined: moved, not yet used); v_mov_b32 v2, v1; v_cmp_eq_u32 vcc, v2, v0; s_cbranch_vccnz: the
  # branch on the undefined lanes is reported
  ((vop1(1, 1, 256 + 5), vop1(1, 2, 256 + 1), vopc(V_CMP_EQ_U32, 256 + 2, 0), S_CBRANCH_VCCNZ, S_ENDPGM),
   "PC 0xc (s_cbranch_vccnz @0x10): lane 0 of wave 0: an undefined value"),
  # v_mov_b32 v1, v0; v_mov_b32 v0, v9 (beyond the 8 VGPRs RSRC1 allocates): a fault inside a block names its instruction
  ((vop1(1, 1, 256), vop1(1, 0, 256 + 9), S_ENDPGM), "PC 0x4 (v_mov_b32_e32 v0, v9): reads v9, beyond the 8 VGPRs"),
])
def test_faults_name_the_instruction_with_blocks(words, what):
  """The same fault, naming the same instruction and lane, with blocks on and off (checked mode: the block's entry test
  fails and the interpreter names the first undefined read)."""
  msgs = []
  for on in (True, False):
    with pytest.raises(MM.WaveFault) as e: machine(raw(*words), [], (1, 1, 1), (32, 1, 1), blocks=on)
    msgs.append(e.value.what)
  assert msgs[0] == msgs[1] and what in msgs[0]


def test_launch_state_cached_per_shape():
  """A dispatch's initial state from its RSRC2 and launch shape (Machine.__init__ via machine.LAUNCH, cached): v0 the
  work-item ids (x | y << 10 | z << 20), EXEC the lanes that exist, the enabled workgroup id SGPRs after the user SGPRs;
  a dispatch with the cache filled ends as one with it empty, and the cached arrays are read-only."""
  rsrc2 = (2 << 1) | (1 << 7) | (1 << 8) | (1 << 9)   # 2 user SGPRs, workgroup ids x, y, z
  grid, block = (3, 2, 2), (5, 4, 3)                   # 60 work-items: 2 waves a group, the second with 28 lanes
  wg, s, v0, exists, nuser = MM._launch(rsrc2, grid, block)
  assert nuser == 2 and len(wg) == 24 and list(wg[:4]) == [0, 0, 1, 1]
  for w in (0, 1, 13):
    g, half = w // 2, w % 2
    assert list(s[w, 2:5]) == [g % 3, (g // 3) % 2, g // 6]
    assert s[w, 126] == (0xFFFFFFFF if half == 0 else (1 << 28) - 1)
    for lane in (0, 7, 27):
      t = half * 32 + lane
      assert v0[w, lane] == (t % 5) | ((t // 5) % 4) << 10 | (t // 20) << 20 and exists[w, lane]
    assert not exists[1, 28:].any() and not v0[1, 28:].any()
  assert not any(x.flags.writeable for x in (wg, s, v0, exists))
  k = kernels_of("control")["loop_sum"]
  bufs = [np.zeros(N, np.float32), np.random.default_rng(5).standard_normal(N + 16).astype(np.float32)]
  MM.LAUNCH.clear()
  cold = machine(k, [b.copy() for b in bufs], (2, 1, 1), (64, 1, 1), (3,))
  assert MM.LAUNCH
  warm = machine(k, [b.copy() for b in bufs], (2, 1, 1), (64, 1, 1), (3,))
  assert all(x.tobytes() == y.tobytes() for x, y in zip(cold[1], warm[1]))
  assert np.array_equal(cold[0].s, warm[0].s) and np.array_equal(cold[0].v, warm[0].v) and np.array_equal(cold[0].vinit, warm[0].vinit)
