"""The other wmma shapes and types: nvcc's PTX of wmma_shapes.cu (kept as wmma_shapes.ptx) for m32n8k16 / m8n32k16 (f16,
bf16, s8, u8), m16n16k8 tf32 (+ cvt.rna.tf32.f32) and m8n8k4 f64, row and col layouts, strided, global / shared /
generic, checked against numpy computed the same way: in-order k, exact products, one float32 rounding per add (f16,
bf16, tf32 with the low 13 mantissa bits of A and B ignored); f64 an in-order chain of correctly rounded fmas (computed
here with exact fractions); integers exact, then 32 bits."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from refgrad.uop.semantics import bf16_to_f32, f32_to_bf16
from tests.emulators.ptx.ptxkit import ptxas_ok

PTX = (Path(__file__).parent / "wmma_shapes.ptx").read_text()
RNG = np.random.default_rng(32)
PAD = 3   # extra elements per leading dimension: every load and store is strided


def _put(m: np.ndarray, col: bool, fill) -> tuple[np.ndarray, int]:
  """m stored row- or col-major with a padded leading dimension: (flat buffer, ld)."""
  src = m.T if col else m
  ld = src.shape[1] + PAD
  buf = np.full((src.shape[0], ld), fill, m.dtype)
  buf[:, :src.shape[1]] = src
  return buf.reshape(-1), ld


def _get(buf: np.ndarray, rows: int, cols: int, ld: int, col: bool) -> np.ndarray:
  b = buf.reshape(-1, ld)
  return b[:, :rows].T if col else b[:, :cols]


def _chain(a32: np.ndarray, b32: np.ndarray, c: np.ndarray) -> np.ndarray:
  d = c.astype(np.float32).copy()
  with np.errstate(all="ignore"):
    for k in range(a32.shape[1]): d = d + a32[:, k, None] * b32[None, k, :]
  return d


def _run(name: str, A, B, C, lay: str, ccol: bool, dcol: bool, sentinel):
  """Run tile kernel name (layouts lay = A's and B's, 'r'/'c') on A (M x K), B (K x N), C (M x N): D, and D's padding."""
  M, N = C.shape
  a, lda = _put(A, lay[0] == "c", 0)
  b, ldb = _put(B, lay[1] == "c", 0)
  c, ldc = _put(C, ccol, 0)
  d, ldd = _put(np.full_like(C, sentinel), dcol, sentinel)
  out = Device["NV"].run_ptx(PTX, name, [a, b, c, d, np.int32(lda), np.int32(ldb), np.int32(ldc), np.int32(ldd), np.int32(ccol), np.int32(dcol)],
                             grid=(1, 1, 1), block=(32, 1, 1))[3]
  pad = out.reshape(-1, ldd)[:, (M if dcol else N):]
  return _get(out, M, N, ldd, dcol), pad


FLOAT_CASES = [("h32x8_rr", 32, 8, "f16"), ("h32x8_cc", 32, 8, "f16"), ("h8x32_rc", 8, 32, "f16"), ("h8x32_cr", 8, 32, "f16"),
               ("b32x8_rc", 32, 8, "bf16"), ("b8x32_cr", 8, 32, "bf16")]


@pytest.mark.parametrize("name, M, N, t", FLOAT_CASES)
@pytest.mark.parametrize("ccol, dcol", [(False, True), (True, False)])
def test_half_tiles(name, M, N, t, ccol, dcol):
  K = 16
  a32, b32 = RNG.standard_normal((M, K)).astype(np.float32), RNG.standard_normal((K, N)).astype(np.float32)
  if t == "f16": A, B = a32.astype(np.float16), b32.astype(np.float16)
  else: A, B = f32_to_bf16(a32), f32_to_bf16(b32)
  C = (RNG.standard_normal((M, N)) * 4).astype(np.float32)
  D, pad = _run(name, A, B, C, name.split("_")[1], ccol, dcol, np.float32(7.5))
  wa, wb = (A.astype(np.float32), B.astype(np.float32)) if t == "f16" else (bf16_to_f32(A), bf16_to_f32(B))
  assert D.tobytes() == np.ascontiguousarray(_chain(wa, wb, C)).tobytes()
  assert (pad == np.float32(7.5)).all()   # the stride's gaps are not written


INT_CASES = [("s32x8_rc", 32, 8, np.int8), ("s8x32_cr", 8, 32, np.int8), ("u32x8_cc", 32, 8, np.uint8), ("u8x32_rr", 8, 32, np.uint8)]


@pytest.mark.parametrize("name, M, N, t", INT_CASES)
def test_int8_tiles_wrap(name, M, N, t):
  K = 16
  info = np.iinfo(t)
  A = RNG.integers(info.min, info.max + 1, (M, K)).astype(t)
  B = RNG.integers(info.min, info.max + 1, (K, N)).astype(t)
  C = RNG.integers(-2**31, 2**31, (M, N)).astype(np.int32)
  D, pad = _run(name, A, B, C, name.split("_")[1], True, False, np.int32(-99))
  exact = C.astype(np.int64) + A.astype(np.int64) @ B.astype(np.int64)
  assert D.tolist() == (exact & 0xFFFFFFFF).astype(np.uint32).view(np.int32).tolist()
  assert (pad == -99).all()


def _tf32_rna(x: np.ndarray) -> np.ndarray:
  """Round to 10 mantissa bits, to nearest, ties away from zero, chosen by exact float64 distances (bits: float32's)."""
  u = x.view(np.uint32)
  lo_bits = u & np.uint32(0xFFFFE000)
  lo = lo_bits.view(np.float32).astype(np.float64)
  e = np.maximum((u >> np.uint32(23)) & np.uint32(0xFF), 1).astype(np.float64)
  with np.errstate(invalid="ignore"):
    hi = lo + np.copysign(2.0 ** (e - 137), lo)   # the next tf32 away from zero, unbounded (2**128 past the top: inf as float32)
  xd = x.astype(np.float64)
  with np.errstate(invalid="ignore"):
    up = np.abs(hi - xd) <= np.abs(xd - lo)
  with np.errstate(over="ignore"):
    r = np.where(up & (lo_bits != u), hi, lo).astype(np.float32)
  return np.where(np.isnan(x), np.uint32(0x7FFFFFFF), r.view(np.uint32))


def test_tf32_low_mantissa_bits_are_ignored():
  A = RNG.standard_normal((16, 8)).astype(np.float32)
  B = RNG.standard_normal((8, 16)).astype(np.float32)
  assert (A.view(np.uint32) & 0x1FFF).any() and (B.view(np.uint32) & 0x1FFF).any()
  C = RNG.standard_normal((16, 16)).astype(np.float32)
  D, _ = _run("t16x16_rc", A, B, C, "rc", False, True, np.float32(0))
  mask = np.uint32(0xFFFFE000)
  want = _chain((A.view(np.uint32) & mask).view(np.float32), (B.view(np.uint32) & mask).view(np.float32), C)
  assert D.tobytes() == np.ascontiguousarray(want).tobytes()
  assert D.tobytes() != np.ascontiguousarray(_chain(A, B, C)).tobytes()   # the full float32 values would differ


def test_float_to_tf32_rounds_to_nearest_ties_away():
  A = RNG.standard_normal((16, 8)).astype(np.float32)
  B = RNG.standard_normal((16, 8)).astype(np.float32)   # col-major B (8 x 16): B.T's rows
  special = np.array([1 + 2**-11, -(1 + 2**-11), 1 + 3 * 2**-11, 1 + 2**-11 - 2**-23, 3.4028235e38, 2**-140, -2**-149,
                      np.inf, -np.inf, np.nan, -0.0, 65504.0], np.float32)
  A.reshape(-1)[:special.size] = special
  A.reshape(-1)[special.size:32] = (RNG.integers(0, 2**32, 32 - special.size, dtype=np.uint64).astype(np.uint32)
                                   & np.uint32(0xBFFFFFFF)).view(np.float32)   # random bits, finite
  out = Device["NV"].run_ptx(PTX, "tf32_cvt", [A, B, np.zeros((16, 16), np.float32), np.zeros(32, np.uint32)],
                             grid=(1, 1, 1), block=(32, 1, 1))
  want_r = _tf32_rna(A.reshape(-1)[:32])
  assert out[3].tolist() == want_r.tolist()
  assert out[3][0] == 0x3F802000 and out[3][1] == 0xBF802000 and out[3][2] == 0x3F804000 and out[3][3] == 0x3F800000 and out[3][4] == 0x7F800000
  A2 = A.copy()
  A2[0, :8], A2[1, 0:4] = 1.0, 2.0   # the specials above (inf, nan) would make the product all NaN: the mma's own check
  out = Device["NV"].run_ptx(PTX, "tf32_cvt", [A2, B, np.zeros((16, 16), np.float32), np.zeros(32, np.uint32)], grid=(1, 1, 1), block=(32, 1, 1))
  ra, rb = _tf32_rna(A2.reshape(-1)).view(np.float32).reshape(16, 8), _tf32_rna(B.reshape(-1)).view(np.float32).reshape(16, 8).T
  assert out[2].tobytes() == np.ascontiguousarray(_chain(ra, rb, np.zeros((16, 16), np.float32))).tobytes()


def _fma_chain(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
  """d = fma(a_k, b_k, d) for k in order, each rounded once (exact fractions, then Python's correctly rounded float)."""
  D = C.copy()
  for i in range(C.shape[0]):
    for j in range(C.shape[1]):
      d = float(C[i, j])
      for k in range(A.shape[1]): d = float(Fraction(float(A[i, k])) * Fraction(float(B[k, j])) + Fraction(d))
      D[i, j] = d
  return D


@pytest.mark.parametrize("name", ["d8x8_rr", "d8x8_cc"])
def test_f64_is_a_chain_of_fmas(name):
  A, B, C = RNG.standard_normal((8, 4)), RNG.standard_normal((4, 8)), RNG.standard_normal((8, 8))
  A[0, 0], B[0, 0] = 1 + 2**-30, 1 - 2**-30
  C[0, 0] = -1.0   # the fma keeps -2**-60 (+ the rest); a rounded product would lose it
  D, pad = _run(name, A, B, C, name.split("_")[1], name.endswith("cc"), False, -5.0)
  want = _fma_chain(A, B, C)
  assert D.tobytes() == np.ascontiguousarray(want).tobytes()
  plain = C.copy()
  for k in range(4): plain = plain + A[:, k, None] * B[None, k, :]
  assert D.tobytes() != np.ascontiguousarray(plain).tobytes()
  assert (pad == -5.0).all()


def test_shared_memory_tile():
  A, B = RNG.standard_normal((32, 16)).astype(np.float16), RNG.standard_normal((16, 8)).astype(np.float16)
  C = RNG.standard_normal((32, 8)).astype(np.float32)
  D = Device["NV"].run_ptx(PTX, "h32x8_shared", [A, B, C, np.zeros((32, 8), np.float32)], grid=(1, 1, 1), block=(32, 1, 1))[3]
  assert D.tobytes() == _chain(A.astype(np.float32), B.astype(np.float32), C).tobytes()


@pytest.mark.parametrize("use_shared", [0, 1])
def test_generic_pointer_and_satfinite(use_shared):
  A = RNG.integers(-128, 128, (8, 16)).astype(np.int8)
  B = RNG.integers(-128, 128, (16, 32)).astype(np.int8)
  C = np.where(RNG.random((8, 32)) < 0.5, 2**31 - 2000, -2**31 + 2000).astype(np.int32)
  D = Device["NV"].run_ptx(PTX, "s8x32_generic", [A, B, C, np.zeros((8, 32), np.int32), np.int32(use_shared)],
                           grid=(1, 1, 1), block=(32, 1, 1))[3]
  exact = C.astype(np.int64) + A.astype(np.int64) @ B.astype(np.int64)
  assert ((exact > 2**31 - 1).any() and (exact < -2**31).any()) and D.tolist() == np.clip(exact, -2**31, 2**31 - 1).tolist()


BAD = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
  .reg .b32 %r<16>; .reg .f32 %f<16>; .reg .b64 %rd<4>; .reg .f64 %fd<4>;
  ld.param.u64 %rd0, [p];
  LINE
  ret;
}
"""


@pytest.mark.parametrize("line, msg", [
  ("wmma.load.c.sync.aligned.row.m16n16k16.f16 {%r1, %r2, %r3, %r4}, [%rd0], 16;", "wmma.load.c.sync.aligned.row.m16n16k16"),
  ("wmma.load.a.sync.aligned.row.m16n16k8.f16 {%r1, %r2, %r3, %r4}, [%rd0], 16;", "m16n16k8: A/B tf32"),
  ("wmma.load.a.sync.aligned.row.m32n8k16.bf16 {%r1, %r2, %r3, %r4}, [%rd0], 16;", "needs 8 registers, not 4"),
  ("wmma.load.a.sync.aligned.row.m8n8k32.s4 {%r1}, [%rd0], 32;", "wmma shape m8n8k32 is not supported"),
  ("wmma.mma.sync.aligned.row.row.m8n8k4.f64.f64.f64.f64.rz {%fd0, %fd1}, {%fd2}, {%fd3}, {%fd0, %fd1};", "f64 with .rn"),
  ("cvt.rna.satfinite.tf32.f32 %r1, %f1;", "to .tf32: only"),
  ("wmma.mma.sync.aligned.row.row.m16n16k16.f16.f16 {%r1, %r2, %r3, %r4}, {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, "
   "{%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, {%r1, %r2, %r3, %r4};", r"wmma\.mma\.sync\.aligned\.row\.row\.m16n16k16\.f16\.f16 is not supported"),
  ("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2}, {%r3}, {%f1, %f2, %f3, %f4};", "m16n8k8 f32 \\+= tf32"),
  ("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%r1, %r2}, {%r1, %r2}, {%r3}, {%r1, %r2};", "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 is not"),
])
def test_unsupported_forms_are_clear_errors(line, msg):
  with pytest.raises(GPUFault, match=msg) as e:
    Device["NV"].run_ptx(BAD.replace("LINE", line), "k", [np.zeros(64, np.float64)], grid=(1, 1, 1), block=(32, 1, 1))
  assert line.split()[0] in str(e.value)   # names the PTX line


MMA_TF32 = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{
  .reg .b32 %r<8>; .reg .f32 %f<8>; .reg .b64 %rd<12>;
  ld.param.u64 %rd0, [pa]; ld.param.u64 %rd1, [pb]; ld.param.u64 %rd2, [pc]; ld.param.u64 %rd3, [pd];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd4, %r0, 16; add.s64 %rd5, %rd0, %rd4; ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd5];
  mul.wide.u32 %rd6, %r0, 8; add.s64 %rd7, %rd1, %rd6; ld.global.v2.b32 {%r5, %r6}, [%rd7];
  add.s64 %rd8, %rd2, %rd4; ld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd8];
  mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%f4, %f5, %f6, %f7}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f0, %f1, %f2, %f3};
  add.s64 %rd9, %rd3, %rd4; st.global.v4.f32 [%rd9], {%f4, %f5, %f6, %f7};
  ret;
}
"""

MMA_F64 = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{
  .reg .b32 %r<2>; .reg .f64 %fd<8>; .reg .b64 %rd<12>;
  ld.param.u64 %rd0, [pa]; ld.param.u64 %rd1, [pb]; ld.param.u64 %rd2, [pc]; ld.param.u64 %rd3, [pd];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd4, %r0, 8; add.s64 %rd5, %rd0, %rd4; ld.global.f64 %fd0, [%rd5]; add.s64 %rd6, %rd1, %rd4; ld.global.f64 %fd1, [%rd6];
  mul.wide.u32 %rd7, %r0, 16; add.s64 %rd8, %rd2, %rd7; ld.global.v2.f64 {%fd2, %fd3}, [%rd8];
  mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd4, %fd5}, {%fd0}, {%fd1}, {%fd2, %fd3};
  add.s64 %rd9, %rd3, %rd7; st.global.v2.f64 [%rd9], {%fd4, %fd5};
  ret;
}
"""

LANE = np.arange(32)
G, T = LANE >> 2, LANE % 4   # the ISA's groupID and threadID_in_group


def test_mma_sync_m16n8k8_tf32_fragment_layout():
  A = RNG.standard_normal((16, 8)).astype(np.float32)   # low mantissa bits set: ignored
  B = RNG.standard_normal((8, 8)).astype(np.float32)
  C = RNG.standard_normal((16, 8)).astype(np.float32)
  # PTX ISA m16n8k8 .tf32 fragments: a0..a3 rows g, g+8, g, g+8 and cols t, t, t+4, t+4; b0, b1 rows t, t+4, col g;
  # c0..c3 rows g, g, g+8, g+8 and cols 2t, 2t+1, 2t, 2t+1
  fa = np.stack([A[G, T], A[G + 8, T], A[G, T + 4], A[G + 8, T + 4]], 1)
  fb = np.stack([B[T, G], B[T + 4, G]], 1)
  crow, ccol = [G, G, G + 8, G + 8], [2 * T, 2 * T + 1, 2 * T, 2 * T + 1]
  fc = np.stack([C[r, c] for r, c in zip(crow, ccol)], 1)
  fd = Device["NV"].run_ptx(MMA_TF32, "k", [fa, fb, fc, np.zeros((32, 4), np.float32)], grid=(1, 1, 1), block=(32, 1, 1))[3]
  mask = np.uint32(0xFFFFE000)
  want = _chain((A.view(np.uint32) & mask).view(np.float32), (B.view(np.uint32) & mask).view(np.float32), C)
  assert fd.tobytes() == np.stack([want[r, c] for r, c in zip(crow, ccol)], 1).tobytes()


def test_mma_sync_m8n8k4_f64_fragment_layout():
  A, B, C = RNG.standard_normal((8, 4)), RNG.standard_normal((4, 8)), RNG.standard_normal((8, 8))
  A[1, 0], B[0, 3], C[1, 3] = 1 + 2**-30, 1 - 2**-30, -1.0   # an fma keeps what a rounded product loses
  # PTX ISA m8n8k4 .f64 fragments: a0 = A[g][t], b0 = B[t][g], c0, c1 = C[g][2t], C[g][2t+1]
  fc = np.stack([C[G, 2 * T], C[G, 2 * T + 1]], 1)
  fd = Device["NV"].run_ptx(MMA_F64, "k", [A[G, T].copy(), B[T, G].copy(), fc, np.zeros((32, 2), np.float64)], grid=(1, 1, 1), block=(32, 1, 1))[3]
  want = _fma_chain(A, B, C)
  assert fd.tobytes() == np.stack([want[G, 2 * T], want[G, 2 * T + 1]], 1).tobytes()


@pytest.mark.skipif(__import__("shutil").which("ptxas") is None, reason="ptxas is not on PATH: it validates the hand-written PTX")
@pytest.mark.parametrize("src", [MMA_TF32, MMA_F64, BAD.replace("LINE", "cvt.rna.tf32.f32 %r1, %f1;")])
def test_hand_written_ptx_is_valid_for_ptxas(tmp_path, src):
  ptxas_ok(src, tmp_path)


def _bits_tf32(x: np.ndarray) -> np.ndarray: return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("name, tm, tn, tk, t", [("gemm_h32x8", 32, 8, 16, "f16"), ("gemm_b8x32", 8, 32, 16, "bf16"),
                                                 ("gemm_t16x16", 16, 16, 8, "tf32"), ("gemm_d8x8", 8, 8, 4, "f64")])
def test_tiled_gemm_several_warps_and_k_steps(name, tm, tn, tk, t):
  M, N, K = 2 * tm, 3 * tn, 3 * tk   # 6 warps over 3 blocks of 2, 3 mma each
  a, b = RNG.standard_normal((M, K)), RNG.standard_normal((K, N))
  if t == "f16": A, B, wa, wb = a.astype(np.float16), b.astype(np.float16), a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32)
  elif t == "bf16":
    A, B = f32_to_bf16(a.astype(np.float32)), f32_to_bf16(b.astype(np.float32))
    wa, wb = bf16_to_f32(A), bf16_to_f32(B)
  elif t == "tf32":
    A, B = a.astype(np.float32), b.astype(np.float32)
    wa, wb = _bits_tf32(A), _bits_tf32(B)
  else: A, B = a, b
  acc = np.float64 if t == "f64" else np.float32
  C = Device["NV"].run_ptx(PTX, name, [A, B.T.copy(), np.zeros((M, N), acc), np.int32(M), np.int32(N), np.int32(K)],
                           grid=(3, 1, 1), block=(64, 1, 1))[2]
  want = _fma_chain(A, B, np.zeros((M, N))) if t == "f64" else _chain(wa, wb, np.zeros((M, N), np.float32))
  assert C.tobytes() == np.ascontiguousarray(want).tobytes()
