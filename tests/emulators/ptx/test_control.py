"""Reconvergence, barriers, warp instructions, faults and parse errors of the PTX executor (through run_ptx)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from emulators.nv.ptx import load_entry
from emulators.nv.ptx.parse import PTXError, parse
from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from tests.emulators.ptx.ptxkit import HEAD


def kernel(body: str, regs: str = "") -> str:
  return HEAD + f""".visible .entry k(.param .u64 out)
{{
  .reg .pred %p<8>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  {regs}
  ld.param.u64 %rd0, [out];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd1, %r0, 4;
  add.s64 %rd2, %rd0, %rd1;
{body}
}}
"""


def run(src: str, n: int, grid: int = 1) -> np.ndarray:
  return Device["NV"].run_ptx(src, "k", [np.zeros(n * grid, np.uint32)], grid=(grid, 1, 1), block=(n, 1, 1))[0]


def test_loops_with_different_trip_counts_reconverge():
  # each thread loops tid times, then all (reconverged) take a ballot: every lane must vote
  src = kernel("""
  mov.u32 %r1, 0;
$L_loop:
  setp.ge.u32 %p1, %r1, %r0;
  @%p1 bra $L_done;
  add.u32 %r1, %r1, 1;
  bra $L_loop;
$L_done:
  activemask.b32 %r2;
  add.u32 %r3, %r1, %r2;
  st.global.u32 [%rd2], %r3;
  ret;""")
  r = run(src, 64)
  assert r.tolist() == [t + 0xFFFFFFFF & 0xFFFFFFFF for t in range(64)]


def test_early_exit_and_vote():
  src = kernel("""
  and.b32 %r1, %r0, 1;
  setp.eq.u32 %p1, %r1, 1;
  @%p1 bra $L_odd;
  setp.lt.u32 %p2, %r0, 8;
  vote.sync.ballot.b32 %r2, %p2, 0x55555555;
  st.global.u32 [%rd2], %r2;
  ret;
$L_odd:
  st.global.u32 [%rd2], 7;
  exit;""")
  r = run(src, 32)
  assert r[0::2].tolist() == [0x55] * 16 and r[1::2].tolist() == [7] * 16


def test_shuffles():
  src = kernel("""
  shfl.sync.bfly.b32 %r1, %r0, 1, 31, -1;
  shfl.sync.up.b32 %r2|%p1, %r0, 2, 0, -1;
  shfl.sync.idx.b32 %r3, %r0, 5, 0x181f, -1;
  mul.lo.u32 %r4, %r1, 1000000;
  mad.lo.u32 %r4, %r2, 1000, %r4;
  add.u32 %r4, %r4, %r3;
  st.global.u32 [%rd2], %r4;
  ret;""")
  r = run(src, 32)
  # idx with c = 0x181f: segmask 0x18 -> lanes in groups of 8, each reads lane (lane & 0x18) | 5
  assert r.tolist() == [(t ^ 1) * 1000000 + (t - 2 if t >= 2 else t) * 1000 + ((t & 0x18) | 5) for t in range(32)]


# each thread stores its tid at sh[4 * tid], then all wait at the barrier (the prologue of the shared-memory tests)
_SHARED_TID = """
  mov.u32 %r1, sh;
  shl.b32 %r2, %r0, 2;
  add.u32 %r3, %r1, %r2;
  st.shared.u32 [%r3], %r0;
  bar.sync 0;"""


def test_barrier_and_shared_memory():
  src = kernel(_SHARED_TID + """
  sub.u32 %r4, 63, %r0;
  shl.b32 %r4, %r4, 2;
  add.u32 %r4, %r1, %r4;
  ld.shared.u32 %r5, [%r4];
  bar.sync 0;
  atom.shared.add.u32 %r6, [sh], 1;
  st.global.u32 [%rd2], %r5;
  ret;""", ".shared .align 4 .b8 sh[256];")
  # (the barrier before the atom: thread 63's weak read of sh[0] and the atomic writes would race, PTX ISA §8.7)
  r = run(src, 64, grid=2)   # both blocks store to out[tid] (the same values); each has its own shared memory
  assert r[:64].tolist() == [63 - t for t in range(64)] and not r[64:].any()


def test_partial_barrier_faults():
  src = kernel("""
  setp.lt.u32 %p1, %r0, 16;
  @%p1 bra $L_skip;
  bar.sync 0;
$L_skip:
  st.global.u32 [%rd2], 1;
  ret;""")
  with pytest.raises(GPUFault, match=r"divergent barrier.*PTX line \d+"):
    run(src, 64)


def test_shfl_member_mask_must_match():
  src = kernel("""
  setp.lt.u32 %p1, %r0, 16;
  @%p1 bra $L_end;
  shfl.sync.bfly.b32 %r1, %r0, 1, 31, -1;
  st.global.u32 [%rd2], %r1;
$L_end:
  ret;""")
  with pytest.raises(GPUFault, match=r"member mask 0xffffffff does not match the active lanes 0xffff0000"):
    run(src, 32)


def test_atomics_global_serialize():
  src = kernel("""
  atom.global.add.u32 %r1, [%rd0], 1;
  atom.global.cas.b32 %r2, [%rd0+4], 0, 5;
  atom.global.max.s32 %r3, [%rd0+8], %r0;
  red.global.add.u32 [%rd0+12], %r0;
  ret;""")
  r = run(src, 64)
  assert r[:4].tolist() == [64, 5, 63, sum(range(64))]


def test_out_of_bounds_names_kernel_line_thread():
  src = kernel("""
  add.s64 %rd3, %rd2, 4096;
  ld.global.u32 %r1, [%rd3];
  st.global.u32 [%rd2], %r1;
  ret;""")
  with pytest.raises(GPUFault, match=r"k.*PTX line 16.*thread \(0, 0, 0\)|thread \(0, 0, 0\).*PTX line 16"):
    run(src, 4)


def test_uninitialized_value_as_address():
  # shared memory never stored: the loaded value is undefined (memcheck model); storing it is fine, using it as an address is not
  src = kernel("""
  ld.shared.u64 %rd3, [sh];
  st.shared.u64 [sh+8], %rd3;
  ld.global.u32 %r1, [%rd3];
  ret;""", ".shared .align 8 .b8 sh[16];")
  with pytest.raises(GPUFault, match=r"undefined value used as an address by thread \(0, 0, 0\).*PTX line 17"):
    run(src, 1)


def test_parse_errors_name_the_line():
  with pytest.raises(PTXError, match="PTX line 8: instruction 'frobnicate'"):
    load_entry(HEAD + ".visible .entry k()\n{\n  frobnicate.b32 %r1;\n  ret;\n}\n".replace("{\n", "{\n\n\n", 1), "k")
  with pytest.raises(PTXError, match=r"PTX line 4: directive or statement '\.bogus'"):
    parse(HEAD + ".bogus 3;\n")
  with pytest.raises(PTXError, match="branch to undefined label"):
    load_entry(HEAD + ".visible .entry k()\n{\n bra $L_nowhere;\n}\n", "k")
  with pytest.raises(PTXError, match="not closed"):
    parse(HEAD + ".visible .entry k()\n{\n ret;\n")


def test_malformed_module_is_a_gpu_fault_not_a_crash():
  with pytest.raises(GPUFault, match="PTX line"):
    Device["NV"].run_ptx(HEAD + ".visible .entry k(.param .u64 out)\n{\n  mov.u32 %r1, 1;\n  zap;\n}\n", "k", [np.zeros(1, np.uint32)])


def test_inline_asm_registers_without_percent():
  # what cuda_fp16.h's __low2half / __high2half expand to: a brace block declaring its own registers without %, a vector
  # destination of them, a predicate named without % in a guard and negated as an operand
  body = """
  ld.global.u32 %r1, [%rd2];
  { .reg .f16 low, high; .reg .pred p;
    mov.b32 {low, high}, %r1;
    setp.ne.b32 p, %r0, 3;
    mov.b16 %rs1, high;
    @!p mov.b16 %rs1, low;
    selp.b32 %r3, 1, 0, !p;
  }
  { .reg .f16 low; mov.b32 {low, _}, %r1; mov.b16 %rs2, low; }
  cvt.u32.u16 %r2, %rs1; cvt.u32.u16 %r4, %rs2;
  shl.b32 %r2, %r2, 16; or.b32 %r2, %r2, %r4; add.u32 %r2, %r2, %r3;
  st.global.u32 [%rd2], %r2;
  ret;"""
  x = np.arange(8, dtype=np.uint32) * 0x00010003 + 0x12340000
  out = Device["NV"].run_ptx(kernel(body, ".reg .b16 %rs<3>;"), "k", [x.copy()], block=(8, 1, 1))[0]
  hi, lo = x >> np.uint32(16), x & np.uint32(0xFFFF)
  assert out.tolist() == [int(((lo[i] if i == 3 else hi[i]) << 16) | lo[i]) + (i == 3) for i in range(8)]


def test_debug_directives_ignored():
  m = parse(HEAD + '.file 1 "x.cu"\n.visible .entry k()\n{\n.loc 1 2 3\n ret;\n}\n.section .debug_str\n{\n.b8 0\n}\n')
  assert [i.op for i in m.entries["k"].instrs] == ["ret"]


@pytest.mark.parametrize("ab", ["f16", "bf16"])
def test_mma_m16n8k16_fragment_layout(ab):
  """Each lane loads its fragment registers from per-lane arrays; D must be semantics.wmma of the assembled matrices."""
  from refgrad.dtype import dtypes
  from refgrad.uop.semantics import f32_to_bf16, wmma
  rng = np.random.default_rng(5)
  A = rng.integers(-4, 5, (16, 16)).astype(np.float32)
  B = rng.integers(-4, 5, (16, 8)).astype(np.float32)
  C = rng.standard_normal((16, 8)).astype(np.float32)
  enc = (lambda x: x.astype(np.float16).view(np.uint16)) if ab == "f16" else (lambda x: f32_to_bf16(x).view(np.uint16))
  lane = np.arange(32)
  g, t = lane >> 2, lane % 4
  af = np.stack([A[g + (8 if i in (2, 3, 6, 7) else 0), 2 * t + (i & 1) + (8 if i >= 4 else 0)] for i in range(8)], 1)
  bfr = np.stack([B[2 * t + (i & 1) + (8 if i >= 2 else 0), g] for i in range(4)], 1)
  cf = np.stack([C[g + (8 if i >= 2 else 0), 2 * t + (i & 1)] for i in range(4)], 1)
  src = HEAD + f""".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
  .reg .b32 %r<16>; .reg .f32 %f<12>; .reg .b64 %rd<12>;
  ld.param.u64 %rd0, [pa]; ld.param.u64 %rd1, [pb]; ld.param.u64 %rd2, [pc]; ld.param.u64 %rd3, [pd];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd4, %r0, 16; add.s64 %rd5, %rd0, %rd4; add.s64 %rd7, %rd2, %rd4; add.s64 %rd8, %rd3, %rd4;
  mul.wide.u32 %rd6, %r0, 8; add.s64 %rd6, %rd1, %rd6;
  ld.global.v4.b32 {{%r1, %r2, %r3, %r4}}, [%rd5];
  ld.global.v2.b32 {{%r5, %r6}}, [%rd6];
  ld.global.v4.f32 {{%f1, %f2, %f3, %f4}}, [%rd7];
  mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 {{%f5, %f6, %f7, %f8}}, {{%r1, %r2, %r3, %r4}}, {{%r5, %r6}}, {{%f1, %f2, %f3, %f4}};
  st.global.v4.f32 [%rd8], {{%f5, %f6, %f7, %f8}};
  ret;
}}
"""
  r = Device["NV"].run_ptx(src, "k", [enc(af), enc(bfr), cf, np.zeros((32, 4), np.float32)], grid=(1, 1, 1), block=(32, 1, 1))[3]
  D = wmma(A.astype(np.float16) if ab == "f16" else f32_to_bf16(A).view(np.uint16),
           B.astype(np.float16) if ab == "f16" else f32_to_bf16(B).view(np.uint16), C, dtypes.float16 if ab == "f16" else dtypes.bfloat16)
  expect = np.stack([D[g + (8 if i >= 2 else 0), 2 * t + (i & 1)] for i in range(4)], 1)
  assert r.tobytes() == expect.tobytes()


# (shape, A/B type, A (i) -> (row, col), B (i) -> (row, col), K, A regs, B regs): the fragment tables of PTX ISA 9.0 §9.7.14.5.8
_MMA = {
  ("m16n8k8", "f16"): (lambda g, t, i: (g + 8 * (i >= 2), 2 * t + (i & 1)), lambda g, t, i: (2 * t + i, g), 8, 2, 1),
  ("m16n8k16", "s8"): (lambda g, t, i: (g + 8 * (i >= 4), 4 * t + (i & 3)), lambda g, t, i: (4 * t + i, g), 16, 2, 1),
  ("m16n8k32", "s8"): (lambda g, t, i: (g + 8 * (i in (4, 5, 6, 7, 12, 13, 14, 15)), 4 * t + (i & 3) + 16 * (i >= 8)),
                       lambda g, t, i: (4 * t + (i & 3) + 16 * (i >= 4), g), 32, 4, 2),
  ("m16n8k32", "u8"): (lambda g, t, i: (g + 8 * (i in (4, 5, 6, 7, 12, 13, 14, 15)), 4 * t + (i & 3) + 16 * (i >= 8)),
                       lambda g, t, i: (4 * t + (i & 3) + 16 * (i >= 4), g), 32, 4, 2),
}


@pytest.mark.parametrize("shape, ab, sat", [("m16n8k8", "f16", False), ("m16n8k16", "s8", False), ("m16n8k32", "s8", False), ("m16n8k32", "u8", True)])
def test_mma_other_shapes_fragment_layouts(shape, ab, sat):
  """m16n8k8 f16 -> f32 and the int8 shapes -> s32: fragments packed per the ISA's tables, D from numpy (int: exact, then
  wrapped or with .satfinite clamped) or semantics.wmma (float)."""
  from refgrad.dtype import dtypes
  from refgrad.uop.semantics import wmma
  a_at, b_at, K, na, nb = _MMA[(shape, ab)]
  rng = np.random.default_rng(6)
  lane = np.arange(32)
  g, t = lane >> 2, lane % 4
  w = 2 if ab == "f16" else 1
  if ab == "f16":
    A, B = rng.integers(-4, 5, (16, K)).astype(np.float16), rng.integers(-4, 5, (K, 8)).astype(np.float16)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    ua, ub = A.view(np.uint16).astype(np.uint32), B.view(np.uint16).astype(np.uint32)
  else:
    lo, hi = (-128, 128) if ab == "s8" else (0, 256)
    A, B = rng.integers(lo, hi, (16, K)), rng.integers(lo, hi, (K, 8))
    C = np.where(rng.random((16, 8)) < 0.5, 2**31 - 3000, rng.integers(-2**31, 2**31, (16, 8))).astype(np.int32)
    ua, ub = (A & 0xFF).astype(np.uint32), (B & 0xFF).astype(np.uint32)
  per = 4 // w
  def pack(m, at, nregs):
    vals = [m[at(g, t, i)] for i in range(nregs * per)]
    return np.stack([sum(vals[r * per + j] << (8 * w * j) for j in range(per)) for r in range(nregs)], 1).astype(np.uint32)
  af, bf = pack(ua, a_at, na), pack(ub, b_at, nb)
  cf = np.stack([C[g + (8 if i >= 2 else 0), 2 * t + (i & 1)] for i in range(4)], 1)
  ct, dt = ("f32", np.float32) if ab == "f16" else ("s32", np.int32)
  ra = ", ".join(f"%r{1 + i}" for i in range(na))
  rb = ", ".join(f"%r{5 + i}" for i in range(nb))
  types = f"f32.{ab}.{ab}.f32" if ab == "f16" else f"s32.{ab}.{ab}.s32"
  lda = f"ld.global.v{na}.b32 {{{ra}}}, [%rd5];" if na > 1 else f"ld.global.b32 {ra}, [%rd5];"
  ldb = f"ld.global.v{nb}.b32 {{{rb}}}, [%rd6];" if nb > 1 else f"ld.global.b32 {rb}, [%rd6];"
  src = HEAD + f""".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
  .reg .b32 %r<16>; .reg .{ct} %c<12>; .reg .b64 %rd<12>;
  ld.param.u64 %rd0, [pa]; ld.param.u64 %rd1, [pb]; ld.param.u64 %rd2, [pc]; ld.param.u64 %rd3, [pd];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd4, %r0, {4 * na}; add.s64 %rd5, %rd0, %rd4;
  mul.wide.u32 %rd4, %r0, {4 * nb}; add.s64 %rd6, %rd1, %rd4;
  mul.wide.u32 %rd4, %r0, 16; add.s64 %rd7, %rd2, %rd4; add.s64 %rd8, %rd3, %rd4;
  {lda}
  {ldb}
  ld.global.v4.{ct} {{%c1, %c2, %c3, %c4}}, [%rd7];
  mma.sync.aligned.{shape}.row.col{'.satfinite' if sat else ''}.{types} {{%c5, %c6, %c7, %c8}}, {{{ra}}}, {{{rb}}}, {{%c1, %c2, %c3, %c4}};
  st.global.v4.{ct} [%rd8], {{%c5, %c6, %c7, %c8}};
  ret;
}}
"""
  r = Device["NV"].run_ptx(src, "k", [af, bf, cf, np.zeros((32, 4), dt)], grid=(1, 1, 1), block=(32, 1, 1))[3]
  if ab == "f16": D = wmma(A, B, C, dtypes.float16)
  else:
    exact = C.astype(np.int64) + A.astype(np.int64) @ B.astype(np.int64)
    D = np.clip(exact, -2**31, 2**31 - 1) if sat else exact & 0xFFFFFFFF
    D = D.astype(np.uint32).view(np.int32)
    assert sat or (exact > 2**31 - 1).any()   # the wrap is exercised
  expect = np.stack([D[g + (8 if i >= 2 else 0), 2 * t + (i & 1)] for i in range(4)], 1).astype(dt)
  assert r.tobytes() == expect.tobytes()


def test_endless_loop_is_a_fault_not_a_hang(monkeypatch):
  from emulators.nv.ptx import execute
  monkeypatch.setattr(execute, "MAX_STEPS", 2000)
  src = kernel("""
$L_spin:
  add.u32 %r1, %r0, 1;
  bra $L_spin;""")
  with pytest.raises(GPUFault, match="more than 2000 instruction steps"):
    run(src, 32)


def test_match_and_redux():
  src = kernel("""
  shr.u32 %r1, %r0, 3;
  match.any.sync.b32 %r2, %r1, -1;
  setp.ne.u32 %p1, %r0, %r0;
  setp.lt.u32 %p2, %r0, 8;
  @%p2 match.all.sync.b32 %r3|%p1, %r1, 0xff;
  redux.sync.add.u32 %r4, %r0, -1;
  redux.sync.max.u32 %r5, %r0, -1;
  add.u32 %r6, %r4, %r5;
  selp.u32 %r7, 1, 0, %p1;
  st.global.u32 [%rd2], %r2;
  st.global.u32 [%rd2+128], %r6;
  st.global.u32 [%rd2+256], %r7;
  ret;""")
  r = Device["NV"].run_ptx(src, "k", [np.zeros(96, np.uint32)], grid=(1, 1, 1), block=(32, 1, 1))[0]
  assert r[:32].tolist() == [0xFF << (8 * (t // 8)) for t in range(32)]
  assert r[32:64].tolist() == [sum(range(32)) + 31] * 32
  assert r[64:].tolist() == [1] * 8 + [0] * 24


def test_shared_memory_race_between_barriers():
  body = """
  mov.u32 %r1, sh;
  shl.b32 %r2, %r0, 2;
  add.u32 %r3, %r1, %r2;
  st.shared.u32 [%r3], %r0;
  {sync}
  xor.b32 %r4, %r2, 4;
  add.u32 %r4, %r1, %r4;
  ld.shared.u32 %r5, [%r4];
  st.global.u32 [%rd2], %r5;
  ret;"""
  ok = run(kernel(body.replace("{sync}", "bar.sync 0;"), ".shared .align 4 .b8 sh[256];"), 64)
  assert ok.tolist() == [t ^ 1 for t in range(64)]
  with pytest.raises(GPUFault, match=r"shared-memory race: thread \(0, 0, 0\).*reads shared byte 4, which thread \(1, 0, 0\).*wrote since the last barrier at PTX line 22"):
    run(kernel(body.replace("{sync}", ""), ".shared .align 4 .b8 sh[256];"), 64)


def test_warp_sync_orders_a_warps_shared_accesses():
  """bar.warp.sync (__syncwarp) orders the shared accesses of its warp's lanes, not those of other warps."""
  body = """
  mov.u32 %r1, sh;
  shl.b32 %r2, %r0, 2;
  add.u32 %r3, %r1, %r2;
  st.shared.u32 [%r3], %r0;
  bar.warp.sync {mask};
  xor.b32 %r4, %r2, {other};
  add.u32 %r4, %r1, %r4;
  ld.shared.u32 %r5, [%r4];
  bar.warp.sync {mask};
  st.shared.u32 [%r3], %r5;
  st.global.u32 [%rd2], %r5;
  ret;"""
  sh = ".shared .align 4 .b8 sh[256];"
  ok = run(kernel(body.replace("{mask}", "-1").replace("{other}", "4"), sh), 64)   # lane t reads lane t^1's word, then (synced again) overwrites its own
  assert ok.tolist() == [t ^ 1 for t in range(64)]
  with pytest.raises(GPUFault, match=r"shared-memory race: thread \(0, 0, 0\).*reads shared byte 128, which the threads of warp 1 \(synced among themselves\) wrote"):
    run(kernel(body.replace("{mask}", "-1").replace("{other}", "128"), sh), 64)   # lane t reads lane t^32's: another warp
  with pytest.raises(GPUFault, match=r"bar member mask 0x0000ffff does not match the active lanes 0xffffffff"):
    run(kernel(body.replace("{mask}", "0xFFFF").replace("{other}", "4"), sh), 64)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not on PATH: it validates the hand-written PTX")
def test_handwritten_ptx_is_valid_for_ptxas(tmp_path):
  src = kernel(_SHARED_TID + """
  shfl.sync.bfly.b32 %r4, %r0, 1, 31, -1;
  setp.lt.u32 %p1, %r0, 3;
  vote.sync.ballot.b32 %r5, %p1, -1;
  add.u32 %r4, %r4, %r5;
  st.global.u32 [%rd2], %r4;
  ret;""", ".shared .align 4 .b8 sh[256];")
  f = tmp_path / "k.ptx"
  f.write_text(src)
  r = subprocess.run(["ptxas", "-arch=sm_80", str(f), "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
  assert r.returncode == 0, r.stderr
  assert run(src, 64)[:4].tolist() == [1 + 7, 0 + 7, 3 + 7, 2 + 7]   # the butterfly partner's tid + the ballot (lanes 0-2)


SPIN_LOCK = HEAD + """.visible .entry lock(.param .u64 lk, .param .u64 cnt)
{
  .reg .pred %p<2>; .reg .b32 %r<4>; .reg .b64 %rd<2>;
  ld.param.u64 %rd0, [lk]; ld.param.u64 %rd1, [cnt];
SPIN:
  atom.global.cas.b32 %r0, [%rd0], 0, 1;
  setp.ne.s32 %p0, %r0, 0;
  @%p0 bra SPIN;
  ld.volatile.global.u32 %r1, [%rd1];
  add.s32 %r1, %r1, 1;
  st.volatile.global.u32 [%rd1], %r1;
  membar.gl;
  atom.global.exch.b32 %r2, [%rd0], 0;
  ret;
}
.visible .entry flag(.param .u64 fl, .param .u64 out)
{
  .reg .pred %p<3>; .reg .b32 %r<4>; .reg .b64 %rd<2>;
  ld.param.u64 %rd0, [fl]; ld.param.u64 %rd1, [out];
  mov.u32 %r0, %tid.x;
  setp.ne.u32 %p0, %r0, 32;
  @%p0 bra PRODUCER;
WAIT:
  ld.volatile.global.u32 %r1, [%rd0];
  setp.eq.u32 %p1, %r1, 0;
  @%p1 bra WAIT;
  st.global.u32 [%rd1], %r1;
  ret;
PRODUCER:
  setp.ne.u32 %p2, %r0, 0;
  @%p2 bra DONE;
  st.volatile.global.u32 [%rd0], 5;
DONE:
  ret;
}
"""


@pytest.mark.parametrize("grid, block", [((2, 1, 1), (1, 1, 1)), ((1, 1, 1), (32, 1, 1)), ((4, 1, 1), (64, 1, 1))])
def test_spin_lock_lets_the_holder_run(grid, block):
  # every thread spins on a CAS lock that one thread holds further on: lanes spinning in a loop that reads memory other
  # threads write step aside for the others (run.SPIN_YIELD), so the holder releases it and every thread gets its turn
  r = Device["NV"].run_ptx(SPIN_LOCK, "lock", [np.zeros(1, np.int32), np.zeros(1, np.int32)], grid=grid, block=block)
  assert r[0].tolist() == [0] and r[1].tolist() == [grid[0] * block[0]]


def test_a_waiter_placed_first_sees_the_flag():
  # thread 32 waits for a flag thread 0 sets in code placed after the wait loop (another warp)
  assert Device["NV"].run_ptx(SPIN_LOCK, "flag", [np.zeros(1, np.uint32), np.zeros(1, np.uint32)], block=(64, 1, 1))[1].tolist() == [5]


@pytest.mark.parametrize("bar, ok", [("barrier.sync 0", True), ("bar.sync 0", False), ("barrier.sync.aligned 0", False)])
def test_unaligned_barrier_may_be_reached_at_different_instructions(bar, ok):
  # cooperative groups' block.sync() is `barrier.sync` (not .aligned): threads in divergent paths may reach it at
  # different instructions; bar.sync / .aligned require one instruction for the whole CTA
  body = f"""
  mov.u32 %r3, sh;
  shl.b32 %r4, %r0, 2;
  add.u32 %r4, %r3, %r4;
  st.shared.u32 [%r4], %r0;
  and.b32 %r5, %r0, 1;
  setp.eq.u32 %p1, %r5, 0;
  @%p1 bra EVEN;
  {bar};
  bra.uni JOIN;
EVEN:
  {bar};
JOIN:
  xor.b32 %r6, %r4, 4;
  ld.shared.u32 %r7, [%r6];
  st.global.u32 [%rd2], %r7;
  ret;"""
  src = kernel(body, ".shared .align 4 .b32 sh[64];")
  if ok: assert run(src, 64).tolist() == (np.arange(64) ^ 1).tolist()
  else:
    with pytest.raises(GPUFault, match="divergent barrier"): run(src, 64)


def test_declarations_without_a_space_before_the_type():
  # cuda_fp16.hpp's hsqrt writes `{.reg.b32 f; ...}`
  body = """
  { .reg.b32 f; .reg.b16 hl, hu;
    mov.b32 f, 7;
    mov.b32 {hl, hu}, f;
    cvt.u32.u16 %r5, hl;
    add.u32 %r5, %r5, f;
  }
  st.global.u32 [%rd2], %r5;
  ret;"""
  assert run(kernel(body), 2).tolist() == [14, 14]


def test_a_32_bit_address_register_wraps_with_its_offset():
  # nvcc's unrolled shared-memory loops: [%r1+16] with %r1 = sh - 16, which wraps below 0 when sh sits at offset 0
  body = """
  mov.u32 %r3, sh;
  add.s32 %r4, %r3, -16;
  mov.u32 %r5, 7;
  st.shared.u32 [%r4+16], %r5;
  ld.shared.u32 %r6, [%r3];
  st.global.u32 [%rd2], %r6;
  ret;"""
  assert run(kernel(body, ".shared .align 4 .b8 sh[64];"), 1).tolist() == [7]
