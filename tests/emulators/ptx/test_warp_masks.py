"""Warp-level instructions with a member mask per lane (PTX ISA 8.0 §9.7.12: vote.sync, match.sync, redux.sync): each
lane's result covers the threads named in ITS membermask, which may differ between the lanes of one warp (what
cooperative groups' tiled_partition<16>/<8> and labeled_partition emit: `0xFFFF << (lane & 16)`)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from refgrad.device import Device
from refgrad.runtime.hcq import GPUFault
from tests.emulators.ptx.ptxkit import HEAD, ptxas_ok

# %r2 = the member mask of lane %r1: its half, its quarter, or the lanes of its parity
MASKS = {
  "tile16": ("and.b32 %r5, %r1, 16; mov.u32 %r6, 0xFFFF; shl.b32 %r2, %r6, %r5;", lambda lane: 0xFFFF << (lane & 16)),
  "tile8": ("and.b32 %r5, %r1, 24; mov.u32 %r6, 0xFF; shl.b32 %r2, %r6, %r5;", lambda lane: 0xFF << (lane & 24)),
  "parity": ("and.b32 %r5, %r1, 1; mov.u32 %r6, 0x55555555; shl.b32 %r2, %r6, %r5;", lambda lane: 0x55555555 << (lane & 1)),
}


def kernel(op: str, mask: str) -> str:
  """k(out, inp): %r3 = inp[tid], %p1 = %r3 odd, %r2 = the lane's mask; `op` writes %r4 (and %p2), stored at out[tid]
  (and out[64 + tid])."""
  return HEAD + f""".visible .entry k(.param .u64 out, .param .u64 inp)
{{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [inp];
  mov.u32 %r0, %tid.x;
  and.b32 %r1, %r0, 31;
  {mask}
  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.u32 %r3, [%rd3];
  and.b32 %r7, %r3, 1;
  setp.ne.u32 %p1, %r7, 0;
  setp.eq.u32 %p2, %r7, 7;
  mov.u32 %r4, 0;
  {op}
  add.s64 %rd4, %rd0, %rd2;
  st.global.u32 [%rd4], %r4;
  selp.u32 %r8, 1, 0, %p2;
  st.global.u32 [%rd4+256], %r8;
  ret;
}}
"""


OPS = {   # op -> (PTX writing %r4 / %p2, the expected (value, predicate) of one lane from its members' inputs and its own)
  "redux.add": ("redux.sync.add.s32 %r4, %r3, %r2;", lambda m, x: (int(m.sum()), 0)),
  "redux.min": ("redux.sync.min.u32 %r4, %r3, %r2;", lambda m, x: (int(m.min()), 0)),
  "redux.max": ("redux.sync.max.s32 %r4, %r3, %r2;", lambda m, x: (int(m.max()), 0)),
  "redux.and": ("redux.sync.and.b32 %r4, %r3, %r2;", lambda m, x: (int(np.bitwise_and.reduce(m)), 0)),
  "redux.or": ("redux.sync.or.b32 %r4, %r3, %r2;", lambda m, x: (int(np.bitwise_or.reduce(m)), 0)),
  "redux.xor": ("redux.sync.xor.b32 %r4, %r3, %r2;", lambda m, x: (int(np.bitwise_xor.reduce(m)), 0)),
  "vote.any": ("vote.sync.any.pred %p2, %p1, %r2;", lambda m, x: (0, int((m & 1).any()))),
  "vote.all": ("vote.sync.all.pred %p2, %p1, %r2;", lambda m, x: (0, int((m & 1).all()))),
  "vote.uni": ("vote.sync.uni.pred %p2, %p1, %r2;", lambda m, x: (0, int((m & 1).all() or not (m & 1).any()))),
}


def _run(src: str, x: np.ndarray) -> np.ndarray:
  return Device["NV"].run_ptx(src, "k", [np.zeros(128, np.uint32), x], grid=(1, 1, 1), block=(64, 1, 1))[0]


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("op", list(OPS))
def test_redux_and_vote_cover_each_lanes_own_mask(op, mask):
  asm, want_of = OPS[op]
  code, lane_mask = MASKS[mask]
  rng = np.random.default_rng(len(op) * 7 + len(mask))
  x = rng.integers(0, 1 << 16, 64).astype(np.uint32)
  first = np.array([lane_mask(0) >> j & 1 for j in range(32)], np.bool_)   # lane 0's members: odd, high bits set; the rest of
  x[:32] = np.where(first, x[:32] | 0xF0F1, x[:32] & 0x0F0E)              # warp 0 even, low bits: each answer differs from the warp's
  r = _run(kernel(asm, code), x)
  want = []
  for t in range(64):
    m = lane_mask(t % 32) & 0xFFFFFFFF
    want.append(want_of(x[(t // 32) * 32 + np.array([j for j in range(32) if m >> j & 1])], x[t]))
  assert r[:64].tolist() == [v & 0xFFFFFFFF for v, _ in want]
  assert r[64:].tolist() == [p for _, p in want]


@pytest.mark.parametrize("mask", list(MASKS))
def test_ballot_sets_only_bits_of_lanes_in_the_mask(mask):
  code, lane_mask = MASKS[mask]
  x = np.arange(64, dtype=np.uint32) * 3   # odd on every other lane
  r = _run(kernel("vote.sync.ballot.b32 %r4, %p1, %r2;", code), x)
  odd = sum(1 << j for j in range(32) if x[j] & 1)   # the same pattern in both warps
  assert r[:64].tolist() == [lane_mask(t % 32) & 0xFFFFFFFF & odd for t in range(64)]


@pytest.mark.parametrize("mask", list(MASKS))
def test_match_covers_each_lanes_own_mask(mask):
  code, lane_mask = MASKS[mask]
  x = (np.arange(64) % 3).astype(np.uint32)
  x[16:32] = 5   # the second half-warp holds one value: match.all true for the lanes whose members lie in it
  r_any = _run(kernel("match.any.sync.b32 %r4, %r3, %r2;", code), x)
  r_all = _run(kernel("match.all.sync.b32 %r4|%p2, %r3, %r2;", code), x)
  for t in range(64):
    m, w = lane_mask(t % 32) & 0xFFFFFFFF, (t // 32) * 32
    same = sum(1 << j for j in range(32) if m >> j & 1 and x[w + j] == x[t])
    assert r_any[t] == same, t
    assert (r_all[t], r_all[64 + t]) == ((m, 1) if same == m else (0, 0)), t


def test_labeled_partition_reduces_over_the_lanes_of_its_label():
  # labeled_partition(v % 3): the mask is match.any's answer, then a reduction over it; the mask check still holds: a
  # mask without the lane itself, or naming a lane not executing, is reported
  code = "mov.u32 %r2, 0;"
  op = "rem.u32 %r9, %r3, 3; match.any.sync.b32 %r2, %r9, -1; redux.sync.add.u32 %r4, %r3, %r2;"
  x = np.random.default_rng(5).integers(0, 100, 64).astype(np.uint32)
  r = _run(kernel(op, code), x)
  for t in range(64):
    w = x[(t // 32) * 32:(t // 32) * 32 + 32]
    assert r[t] == w[w % 3 == x[t] % 3].sum(), t
  with pytest.raises(GPUFault, match=r"redux member mask 0x0000ffff does not match the active lanes 0xffffffff of thread \(16, 0, 0\)"):
    _run(kernel("mov.u32 %r2, 0xFFFF; redux.sync.add.u32 %r4, %r3, %r2;", code), x)
  with pytest.raises(GPUFault, match=r"vote member mask 0xffffffff does not match the active lanes 0x0000ffff"):
    _run(kernel("setp.lt.u32 %p3, %r1, 16; @%p3 vote.sync.ballot.b32 %r4, %p1, -1;", code), x)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not on PATH: it validates the hand-written PTX")
def test_handwritten_ptx_is_valid_for_ptxas(tmp_path):
  ops = [a for a, _ in OPS.values()] + ["vote.sync.ballot.b32 %r4, %p1, %r2;", "match.any.sync.b32 %r4, %r3, %r2;",
                                         "match.all.sync.b32 %r4|%p2, %r3, %r2;", "rem.u32 %r9, %r3, 3; match.any.sync.b32 %r2, %r9, -1;"]
  for op in ops:
    for code, _ in MASKS.values(): ptxas_ok(kernel(op, code), tmp_path)
