"""Hand-written PM4 and SDMA streams (from docs/hw/AMD.md) decode to the expected actions on the mock AMD GPU:
one test per opcode row, every WAIT_REG_MEM compare function with its mask, kernels through the dispatch registers."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.amd import pm4, sdma
from emulators.mock_driver import make_driver
from refgrad.runtime.driver import GPUFault

from . import amdenc as A
from .kernels import add_kernel, reverse_kernel


@pytest.fixture
def drv():
  return make_driver("AMD", 0)

def u64(m, off: int = 0) -> int: return int(m.host[off:off + 8].view(np.uint64)[0])
def u32(m, off: int = 0) -> int: return int(m.host[off:off + 4].view(np.uint32)[0])


def test_tables_have_one_row_per_opcode():
  assert {r.name for r in pm4.TABLE.values()} == {"NOP", "DISPATCH_DIRECT", "WAIT_REG_MEM", "INDIRECT_BUFFER", "EVENT_WRITE", "RELEASE_MEM",
                                                  "ACQUIRE_MEM", "SET_SH_REG", "WAIT_REG_MEM64"}
  assert {o: r.name for o, r in pm4.TABLE.items()}[0x93] == "WAIT_REG_MEM64"
  assert {"COPY_LINEAR", "FENCE", "POLL_REGMEM", "TIMESTAMP_GET_GLOBAL", "TRAP", "CONSTANT_FILL"} <= {r.name for r in sdma.TABLE.values()}

def test_ready_headers_from_the_fact_sheet():
  assert A.pkt3(A.SET_SH_REG, 0x20C, 0)[0] == 0xC0017600 and A.pkt3(A.DISPATCH_DIRECT, 1, 1, 1, 0)[0] == 0xC0031500
  assert A.release64(0, 0)[0] == 0xC0064900 and A.wait32(0, 0)[0] == 0xC0053C00 and A.wait64(0, 0)[0] == 0xC0079300
  assert A.ib(0, 1)[0] == 0xC0023F00 and A.pkt3(A.EVENT_WRITE, 0x407)[0] == 0xC0004600
  assert [pm4.packet_dwords(h) for h in (0xC0017600, 0xC0031500, 0xC0064900, 0xC0053C00, 0xC0079300, A.FILLER)] == [3, 5, 8, 7, 9, 1]


def test_set_sh_reg_stores_registers_and_nop_skips(drv):
  r = A.Ring(drv, "compute")
  r.push(A.pkt3(A.NOP, 0xDEAD, 0xBEEF) + [A.FILLER] + A.sh(A.START_X, 0, 0, 0, 8, 4, 2) + A.sh(A.USER_DATA_0 + 15, 7))
  assert drv.run_until_idle()
  regs = drv.channels[0].engine.regs
  assert [regs[0x207], regs[0x208], regs[0x209], regs[0x24F]] == [8, 4, 2, 7]
  assert r.rptr == r.wptr == 3 + 1 + 8 + 3

def test_release_mem_32_64_and_clock(drv):
  sig = drv.alloc(64, True)
  drv.read_timer = lambda: 123456789
  r = A.Ring(drv, "compute")
  r.push(A.release64(sig.va, 0x1_2345_6789) + A.release32(sig.va + 16, 0xABCD) + A.release64(sig.va + 24, 0, sel=3))
  assert drv.run_until_idle()
  assert u64(sig) == 0x1_2345_6789 and u32(sig, 16) == 0xABCD and u64(sig, 24) == 123456789
  assert drv.counters["release_mem"] == 3

@pytest.mark.parametrize("func,value,ref,mask,passes", [
  (0, 5, 9, 0xFFFFFFFF, True), (1, 5, 9, 0xFFFFFFFF, True), (1, 9, 9, 0xFFFFFFFF, False), (2, 9, 9, 0xFFFFFFFF, True),
  (3, 0x1F5, 5, 0xF, True), (3, 0x1F5, 5, 0xFF, False), (4, 5, 9, 0xFFFFFFFF, True), (4, 9, 9, 0xFFFFFFFF, False),
  (5, 9, 9, 0xFFFFFFFF, True), (5, 8, 9, 0xFFFFFFFF, False), (6, 10, 9, 0xFFFFFFFF, True), (6, 9, 9, 0xFFFFFFFF, False)])
def test_wait_reg_mem_functions_with_mask(drv, func, value, ref, mask, passes):
  sig, out = drv.alloc(16, True), drv.alloc(16, True)
  sig.host.view(np.uint32)[0] = value
  r = A.Ring(drv, "compute")
  r.push(A.wait32(sig.va, ref, func, mask) + A.release32(out.va, 1))
  assert drv.run_until_idle() is passes
  assert u32(out) == int(passes)
  if not passes:
    assert "WAIT_REG_MEM semaphore" in drv.describe() and "blocked" in drv.describe()
    sig.host.view(np.uint32)[0] = ref if func in (2, 3, 5) else ref - 1 if func == 1 else ref + 1 if func == 6 else ref + 7
    assert drv.run_until_idle() and u32(out) == 1

def test_wait_reg_mem64_compares_all_64_bits(drv):
  sig, out = drv.alloc(16, True), drv.alloc(16, True)
  sig.host.view(np.uint64)[0] = 0xFFFFFFFF
  r = A.Ring(drv, "compute")
  r.push(A.wait64(sig.va, 1 << 32) + A.release32(out.va, 1))
  assert not drv.run_until_idle() and u32(out) == 0
  sig.host.view(np.uint64)[0] = 1 << 32
  assert drv.run_until_idle() and u32(out) == 1

def test_event_write_and_acquire_mem_are_accepted(drv):
  r = A.Ring(drv, "compute")
  r.push(A.pkt3(A.EVENT_WRITE, 0x407) + A.pkt3(A.ACQUIRE_MEM, 0, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 0xA, 0xC3C1))
  assert drv.run_until_idle() and r.rptr == 2 + 8

def test_dispatch_runs_the_kernel(drv):
  n = 16
  a, b, out = drv.alloc(4 * n, True), drv.alloc(4 * n, True), drv.alloc(4 * n)
  a.host.view(np.float32)[:] = np.arange(n)
  b.host.view(np.float32)[:] = 100
  k = A.Kernel(drv, add_kernel(n), [out.va, a.va, b.va])
  res = drv.alloc(4 * n, True)
  sig = drv.alloc(16, True)
  r = A.Ring(drv, "compute")
  c = A.Ring(drv, "copy")
  r.push(k.words() + A.release64(sig.va, 1))
  c.push(A.poll(sig.va, 1) + A.copy_linear(res.va, out.va, 4 * n))
  assert drv.run_until_idle()
  assert np.array_equal(res.host.view(np.float32), np.arange(n) + 100)
  assert drv.counters["dispatch"] == 1 and drv.counters["sdma_copy"] == 1

def test_dispatch_with_lds_barrier_and_variable(drv):
  g, w = 4, 8
  inp, out = drv.alloc(4 * g * w, True), drv.alloc(4 * g * w, True)
  inp.host.view(np.int32)[:] = np.arange(g * w)
  k = A.Kernel(drv, reverse_kernel(g, w), [out.va, inp.va], (5,))
  r = A.Ring(drv, "compute")
  r.push(k.words())
  assert drv.run_until_idle()
  want = (np.arange(g * w).reshape(g, w)[:, ::-1] * 3 + 5).reshape(-1)
  assert np.array_equal(out.host.view(np.int32), want)

def test_indirect_buffer_runs_then_returns_to_the_ring(drv):
  sig = drv.alloc(32, True)
  body = A.release64(sig.va, 7) + A.pkt3(A.NOP, 0)
  buf = drv.alloc(4 * len(body), True)
  buf.host.view(np.uint32)[:] = body
  r = A.Ring(drv, "compute")
  r.push(A.ib(buf.va, len(body)) + A.release64(sig.va + 8, 9))
  assert drv.poll() and u64(sig) == 7 and r.rptr == 0   # inside the buffer: rptr still at the INDIRECT_BUFFER packet
  assert drv.run_until_idle() and u64(sig, 8) == 9 and r.rptr == 4 + 8
  r.push(A.ib(buf.va, len(body)))   # replayed: the same buffer again
  sig.host[:] = 0
  assert drv.run_until_idle() and u64(sig) == 7 and drv.counters["indirect_buffer"] == 2


def test_sdma_copy_fence_fill_timestamp_trap_write(drv):
  src, dst = drv.alloc(64, True), drv.alloc(64, True)
  src.host[:] = np.arange(64, dtype=np.uint8)
  drv.read_timer = lambda: 0x55AA
  c = A.Ring(drv, "copy")
  c.push(A.copy_linear(dst.va, src.va + 8, 40) + A.fence(dst.va + 48, 0xCAFE) + A.fill(dst.va + 56, 0x04030201, 6)
         + A.timestamp(src.va + 0) + A.trap(3) + [0, 0, 0 | (2 << 16), 1, 2] + [2, src.va + 40 & 0xFFFFFFFF, src.va >> 32, 1, 0x11, 0x22])
  assert drv.run_until_idle()
  assert np.array_equal(dst.host[:40], np.arange(8, 48, dtype=np.uint8))
  assert u32(dst, 48) == 0xCAFE and list(dst.host[56:62]) == [1, 2, 3, 4, 1, 2] and dst.host[62] == 0
  assert u64(src) == 0x55AA and drv.channels[0].interrupts == [3]
  assert u32(src, 40) == 0x11 and u32(src, 44) == 0x22
  assert c.rptr == c.wptr == 4 * (7 + 4 + 5 + 3 + 2 + 5 + 6)   # the NOPs: two zero dwords, one burst of 2

def test_sdma_poll_regmem_waits(drv):
  sig, out = drv.alloc(16, True), drv.alloc(16, True)
  c = A.Ring(drv, "copy")
  c.push(A.poll(sig.va, 3) + A.fence(out.va, 1))
  assert not drv.run_until_idle() and u32(out) == 0 and "POLL_REGMEM" in drv.describe()
  sig.host.view(np.uint32)[0] = 3
  assert drv.run_until_idle() and u32(out) == 1

def test_queues_of_two_devices_are_separate():
  d0, d1 = make_driver("AMD", 0), make_driver("AMD", 1)
  assert d0.device == "AMD:0" and d1.device == "AMD:1"
  m = [d0.alloc(16, True) for _ in range(8)][-1]   # past everything d1 maps
  c = A.Ring(d1, "copy")
  c.push(A.fence(m.va, 1))   # d0's address means nothing on d1
  with pytest.raises(GPUFault, match="not mapped"): d1.run_until_idle()

def test_sdma_gcr_req_is_accepted_and_timestamp_set_faults(drv):
  c = A.Ring(drv, "copy")
  c.push([17, 0, 0xC3C1 << 16, 0xFFFFFF80, 0xFFFF])   # GCR_REQ: invalidate + write back, whole address range
  assert drv.run_until_idle() and c.rptr == 20
  c.push([13, 0, 0])                                 # TIMESTAMP SET
  with pytest.raises(GPUFault, match="TIMESTAMP SET"): drv.run_until_idle()

def test_wait_reg_mem_hdp_flush_form_is_satisfied(drv):
  out = drv.alloc(16, True)
  r = A.Ring(drv, "compute")
  r.push(A.pkt3(A.WAIT_REG_MEM, 3 | (1 << 6), 0x1234, 0x1235, 0, 0, 4) + A.release32(out.va, 1))   # register space, write-wait-write
  assert drv.run_until_idle() and u32(out) == 1
