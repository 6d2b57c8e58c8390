"""Checked mode of the RDNA3 machine: uninitialized VGPR / LDS reads, out-of-bounds LDS, divergent barriers, unknown
opcodes and runaway loops are reported naming the kernel, PC, instruction text and lane."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from emulators.amd.rdna3 import machine
from emulators.amd.rdna3.lanes import WaveFault
from tests.emulators.rdna3 import kernels as K
from tests.emulators.rdna3.llvm_util import Kernel, compile_ir, read_elf, run_direct

S_ENDPGM = 0xBFB00000
RSRC2 = (2 << 1) | (1 << 7)   # USER_SGPR = 2, TGID_X_EN


def raw_kernel(*words: int, rsrc1: int = 0) -> Kernel:
  kd = bytearray(64)
  struct.pack_into("<III", kd, 44, 0, rsrc1 | (0xF0 << 12) | (1 << 23), RSRC2)
  return Kernel("raw", struct.pack(f"<{len(words)}I", *words), bytes(kd))


def vop1(op: int, vdst: int, src0: int) -> int: return (0x3F << 25) | (vdst << 17) | (op << 9) | src0


def vopc(op: int, src0: int, vsrc1: int) -> int: return (0x3E << 25) | (op << 17) | (vsrc1 << 9) | src0


V_CMP_EQ_U32 = 0x4A


S_CBRANCH_VCCNZ = 0xBFA40000   # s_cbranch_vccnz +0
V_READFIRSTLANE_B32 = 2


def test_uninitialized_vgpr_read():
  """An uninitialized VGPR may be moved around (LLVM does that with undef values) and compared (the lane mask keeps the
  undefined lanes, as a WHERE's condition on the PYTHON device); a branch on that mask is reported, as is moving the
  value into an SGPR (v_readfirstlane)."""
  mov, cmp = vop1(1, 1, 256 + 5), vopc(V_CMP_EQ_U32, 256 + 1, 0)   # v_mov_b32 v1, v5; v_cmp_eq_u32 vcc, v1, v0
  with pytest.raises(WaveFault) as e: run_direct(raw_kernel(mov, cmp, S_CBRANCH_VCCNZ, S_ENDPGM), [], (1, 1, 1), (32, 1, 1))
  assert "PC 0x8 (s_cbranch_vccnz" in e.value.what and "lane 0 of wave 0: an undefined value" in e.value.what and "decides a branch" in e.value.what
  with pytest.raises(WaveFault) as e: run_direct(raw_kernel(mov, vop1(V_READFIRSTLANE_B32, 0, 256 + 1), S_ENDPGM), [], (1, 1, 1), (32, 1, 1))
  assert "PC 0x4 (v_readfirstlane_b32_e32 s0, v1)" in e.value.what and "lane 0 of wave 0 reads v1, which holds no defined value" in e.value.what
  run_direct(raw_kernel(mov, cmp, S_ENDPGM), [], (1, 1, 1), (32, 1, 1))   # the move and the compare alone are no use


def test_unchecked_mode_reads_zero_registers():
  run_direct(raw_kernel(vop1(1, 0, 256 + 5), S_ENDPGM), [], (1, 1, 1), (32, 1, 1), checked=False)


def test_vgpr_beyond_the_allocation():
  k = raw_kernel(vop1(1, 0, 256 + 9), S_ENDPGM)     # RSRC1.VGPRS = 0 allocates v0..v7
  with pytest.raises(WaveFault) as e: run_direct(k, [], (1, 1, 1), (32, 1, 1), checked=False)
  assert "reads v9, beyond the 8 VGPRs RSRC1.VGPRS allocates" in e.value.what


def test_unknown_opcode_in_the_stream():
  k = raw_kernel(vop1(1, 1, 256), 0xBE807F00, S_ENDPGM)
  with pytest.raises(WaveFault) as e: run_direct(k, [], (1, 1, 1), (32, 1, 1))
  assert "PC 0x4: unknown opcode 127 (format SOP1, words 0xbe807f00)" in e.value.what


def test_runaway_loop_is_reported(monkeypatch):
  monkeypatch.setattr(machine, "MAX_STEPS", 1000)
  k = raw_kernel(0xBFA0FFFF)   # s_branch to itself
  with pytest.raises(WaveFault) as e: run_direct(k, [], (1, 1, 1), (32, 1, 1))
  assert "more than 1000 instruction steps" in e.value.what and "PC 0x0" in e.value.what


LDS_BAD = """
@lds = internal addrspace(3) global [64 x float] undef, align 4
define amdgpu_kernel void @lds_index(ptr addrspace(1) %out, ptr addrspace(1) %ix) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %ix, i32 %l
  %j = load i32, ptr addrspace(1) %pi
  %ps = getelementptr [64 x float], ptr addrspace(3) @lds, i32 0, i32 %j
  store float 1.0, ptr addrspace(3) %ps
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %pr = getelementptr [64 x float], ptr addrspace(3) @lds, i32 0, i32 %l
  %w = load float, ptr addrspace(3) %pr
  %po = getelementptr float, ptr addrspace(1) %out, i32 %l
  store float %w, ptr addrspace(1) %po
  ret void
}
define amdgpu_kernel void @half_barrier(ptr addrspace(1) %out) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %c = icmp ult i32 %l, 32
  br i1 %c, label %wait, label %done
wait:
  call void @llvm.amdgcn.s.barrier()
  br label %done
done:
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %l
  store i32 %l, ptr addrspace(1) %po
  ret void
}"""


@pytest.fixture(scope="module")
def lds_kernels():
  return read_elf(compile_ir(K.module(LDS_BAD))[0])


def test_lds_ok_when_every_slot_written(lds_kernels):
  got = run_direct(lds_kernels["lds_index"], [np.zeros(64, np.float32), np.arange(64, dtype=np.int32)[::-1].copy()], (1, 1, 1), (64, 1, 1))[0]
  np.testing.assert_array_equal(got, np.ones(64, np.float32))


def test_uninitialized_lds_read(lds_kernels):
  ix = np.zeros(64, np.int32)   # every lane writes slot 0: slots 1.. stay unwritten
  with pytest.raises(WaveFault) as e: run_direct(lds_kernels["lds_index"], [np.zeros(64, np.float32), ix], (1, 1, 1), (64, 1, 1))
  assert "ds_load_b32" in e.value.what and "lane 1 of wave 0 reads LDS bytes 4..8 that were never written" in e.value.what


def test_out_of_bounds_lds(lds_kernels):
  ix = np.arange(64, dtype=np.int32)
  ix[5] = 4000
  with pytest.raises(WaveFault) as e: run_direct(lds_kernels["lds_index"], [np.zeros(64, np.float32), ix], (1, 1, 1), (64, 1, 1))
  assert "ds_store_b32" in e.value.what and "lane 5 of wave 0: LDS access of 4 bytes at 16000 is out of bounds" in e.value.what


def test_divergent_barrier(lds_kernels):
  with pytest.raises(WaveFault) as e: run_direct(lds_kernels["half_barrier"], [np.zeros(64, np.int32)], (1, 1, 1), (64, 1, 1))
  assert "divergent barrier" in e.value.what and "wave 1 ended while others wait at s_barrier" in e.value.what


def test_wmma_replicas_and_exec_are_checked():
  from tests.emulators.rdna3.test_execute import kernels_of
  k = kernels_of("control")["wmma_f16"]
  a = np.ones((32, 16), np.float16)
  a[20, 3] = 2   # lane 20's A fragment differs from lane 4's
  bufs = [np.zeros((32, 8), np.float32), a, np.ones((32, 16), np.float16), np.zeros((32, 8), np.float32)]
  with pytest.raises(WaveFault) as e: run_direct(k, bufs, (1, 1, 1), (32, 1, 1))
  assert "v_wmma_f32_16x16x16_f16" in e.value.what and "A fragment of lane 20 of wave 0 differs from lane 4's" in e.value.what
  bufs[1] = np.ones((32, 16), np.float16)
  with pytest.raises(WaveFault) as e: run_direct(k, bufs, (1, 1, 1), (16, 1, 1), checked=False)
  assert "WMMA with EXEC not covering all 32 lanes" in e.value.what
