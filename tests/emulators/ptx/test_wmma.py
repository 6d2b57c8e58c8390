"""wmma.load / wmma.mma / wmma.store: nvcc's PTX of the nvcuda::wmma API (wmma.cu, kept as wmma.ptx) runs with the bits of
the reference arithmetic (refgrad's semantics.wmma: in-order k, exact products, one float32 rounding per add)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from refgrad.device import Device
from refgrad.uop.semantics import bf16_to_f32, f32_to_bf16

PTX = (Path(__file__).parent / "wmma.ptx").read_text()
RNG = np.random.default_rng(8)


def _inorder(a32: np.ndarray, b32: np.ndarray, c: np.ndarray) -> np.ndarray:
  d = c.astype(np.float32).copy()
  with np.errstate(all="ignore"):
    for k in range(a32.shape[1]): d = d + a32[:, k, None] * b32[None, k, :]
  return d


@pytest.mark.parametrize("M, N, K", [(16, 16, 16), (32, 48, 80)])
def test_hgemm_tiles_loop_and_elementwise_fragment_ops(M, N, K):
  A = RNG.standard_normal((M, K)).astype(np.float16)
  B = RNG.standard_normal((K, N)).astype(np.float16)
  A[0, 0], B[1, 1] = np.float16(np.inf), np.float16(-0.0)
  alpha = np.float32(0.75)
  warps = (M // 16) * (N // 16)
  C = Device["NV"].run_ptx(PTX, "hgemm", [A, B, np.zeros((M, N), np.float32), np.int32(M), np.int32(N), np.int32(K), alpha],
                           grid=(-(-warps // 2), 1, 1), block=(64, 1, 1))[2]
  want = (_inorder(A.astype(np.float32), B.astype(np.float32), np.zeros((M, N), np.float32)) * alpha).astype(np.float32)
  assert C.tobytes() == want.tobytes()


def test_bf16_col_major_through_shared_memory():
  A = f32_to_bf16(RNG.standard_normal((16, 16)).astype(np.float32))
  B = f32_to_bf16(RNG.standard_normal((16, 16)).astype(np.float32))
  C = RNG.standard_normal((16, 16)).astype(np.float32)
  # col-major storage: element (r, c) at c * 16 + r, i.e. the transpose's row-major bytes
  D = Device["NV"].run_ptx(PTX, "bgemm_shared", [A.T.copy(), B.T.copy(), C.T.copy(), np.zeros((16, 16), np.float32)],
                           grid=(1, 1, 1), block=(32, 1, 1))[3]
  want = _inorder(bf16_to_f32(A), bf16_to_f32(B), C)
  assert D.T.tobytes() == np.ascontiguousarray(want).tobytes()


def test_wmma_needs_whole_warps():
  from refgrad.runtime.driver import GPUFault
  A = np.zeros((16, 16), np.float16)
  with pytest.raises(GPUFault, match="needs whole warps"):
    Device["NV"].run_ptx(PTX, "hgemm", [A, A, np.zeros((16, 16), np.float32), np.int32(16), np.int32(16), np.int32(16), np.float32(1)],
                         grid=(1, 1, 1), block=(16, 1, 1))


def test_int8_wraps_and_satfinite_clamps():
  A = RNG.integers(-128, 128, (16, 16)).astype(np.int8)
  B = RNG.integers(-128, 128, (16, 16)).astype(np.int8)
  C = RNG.integers(-2**31, 2**31, (16, 16)).astype(np.int32)
  D = Device["NV"].run_ptx(PTX, "igemm", [A, B.T.copy(), C.copy()], grid=(1, 1, 1), block=(32, 1, 1))[2]
  exact = C.astype(np.int64) + A.astype(np.int64) @ B.astype(np.int64)
  assert D.tolist() == ((exact & 0xFFFFFFFF).astype(np.uint32).view(np.int32)).tolist()
  Au, Bu = RNG.integers(0, 256, (16, 16)).astype(np.uint8), RNG.integers(0, 256, (16, 16)).astype(np.uint8)
  Cu = np.where(RNG.random((16, 16)) < 0.5, 2**31 - 1000, -5).astype(np.int32)   # half the sums overflow: clamped
  D = Device["NV"].run_ptx(PTX, "ugemm_sat", [Au.T.copy(), Bu, Cu.T.copy()], grid=(1, 1, 1), block=(32, 1, 1))[2].T
  exact = Cu.astype(np.int64) + Au.astype(np.int64) @ Bu.astype(np.int64)
  assert (exact > 2**31 - 1).any() and D.tolist() == np.clip(exact, -2**31, 2**31 - 1).tolist()


LDMATRIX = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 src, .param .u64 out)
{
  .reg .b32 %r<16>; .reg .b64 %rd<8>;
  .shared .align 16 .b8 sh[512];
  ld.param.u64 %rd0, [src]; ld.param.u64 %rd1, [out];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd2, %r0, 16; add.s64 %rd3, %rd0, %rd2;
  ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd3];
  mov.u32 %r5, sh; shl.b32 %r6, %r0, 4; add.u32 %r7, %r5, %r6;
  st.shared.v4.u32 [%r7], {%r1, %r2, %r3, %r4};
  bar.sync 0;
  xor.b32 %r8, %r6, 16; add.u32 %r8, %r5, %r8;   // thread t gives the address of row t ^ 1
  ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {%r9, %r10, %r11, %r12}, [%r8];
  mul.wide.u32 %rd4, %r0, 16; add.s64 %rd5, %rd1, %rd4;
  st.global.v4.u32 [%rd5], {%r9, %r10, %r11, %r12};
  ret;
}
"""


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_x4(trans):
  rows = RNG.integers(0, 2**16, (32, 8)).astype(np.uint16)   # 32 rows of 8 b16: row q at sh[16q]
  src = LDMATRIX.replace("{trans}", ".trans" if trans else "")
  got = Device["NV"].run_ptx(src, "k", [rows, np.zeros((32, 4), np.uint32)], grid=(1, 1, 1), block=(32, 1, 1))[1]
  lane = np.arange(32)
  want = np.zeros((32, 4), np.uint32)
  for j in range(4):
    M = rows[[(8 * j + r) ^ 1 for r in range(8)]]   # matrix j: rows from threads 8j..8j+7
    if trans: M = M.T
    r, c = lane // 4, 2 * (lane % 4)
    want[:, j] = M[r, c].astype(np.uint32) | (M[r, c + 1].astype(np.uint32) << 16)
  assert got.tolist() == want.tolist()


@pytest.mark.skipif(__import__("shutil").which("ptxas") is None, reason="ptxas is not on PATH: it validates the hand-written PTX")
def test_ldmatrix_ptx_is_valid_for_ptxas(tmp_path):
  import subprocess
  for t in ("", ".trans"):
    (tmp_path / "k.ptx").write_text(LDMATRIX.replace("{trans}", t))
    r = subprocess.run(["ptxas", "-arch=sm_80", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
