"""Malformed AMD streams each give their named GPUFault (device, queue, ring offset, raw dwords, address), raised once by
poll(), never a hang; the queue stops until recover(). Also: the ring wrap (packets crossing the end of the ring), doorbell
rules, and the hazard checker across the compute and SDMA queues."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.mock_driver import make_driver
from refgrad.runtime.driver import GPUFault, GPUHazard

from . import amdenc as A
from .kernels import add_kernel, oob_kernel, reverse_kernel


@pytest.fixture
def drv():
  return make_driver("AMD", 0)

def fault(drv) -> GPUFault:
  with pytest.raises(GPUFault) as e:
    for _ in range(1000): drv.poll()
  f = e.value
  assert f.device == "AMD:0" and f.gp_entry is None
  return f

def u32(m, off: int = 0) -> int: return int(m.host[off:off + 4].view(np.uint32)[0])


def test_unknown_opcode(drv):
  r = A.Ring(drv, "compute")
  r.push(A.pkt3(A.NOP, 0) + A.pkt3(0x37, 1, 2, 3))   # WRITE_DATA: not a row of the mock's table
  f = fault(drv)
  assert (f.engine, f.queue, f.dword_offset) == ("compute", "AMD:0 compute", 2)
  assert "unknown PM4 opcode 0x37" in f.what and f.words[0] == 0xC0023700 and "ring dword 2" in f.what

def test_type0_header(drv):
  r = A.Ring(drv, "compute")
  r.push([0x00001234])
  assert "type-0 packet" in fault(drv).what

def test_wrong_count(drv):
  r = A.Ring(drv, "compute")
  r.push(A.pkt3(A.DISPATCH_DIRECT, 1, 1, 1, 0x8005, 0))
  assert "DISPATCH_DIRECT header 0xc0041500 has COUNT 4" in fault(drv).what

def test_unknown_register(drv):
  r = A.Ring(drv, "compute")
  r.push(A.sh(0x1FF, 1))
  f = fault(drv)
  assert "offset 0x1ff (register dword address 0x2dff)" in f.what and f.words == (0xC0017600, 0x1FF, 1)

def test_packet_past_the_write_pointer(drv):
  r = A.Ring(drv, "compute")
  r.push(A.release64(drv.alloc(16, True).va, 1)[:5])   # 5 of the 8 dwords written, wptr after them
  f = fault(drv)
  assert "RELEASE_MEM packet (header 0xc0064900) is 8 dwords but only 5 dwords remain before the write pointer" in f.what
  assert f.dword_offset == 0 and f.words[0] == 0xC0064900

def test_sdma_packet_past_the_write_pointer_and_unknown_op(drv):
  c = A.Ring(drv, "copy")
  c.push(A.copy_linear(0, 0, 4)[:6])
  assert "COPY_LINEAR packet (header 0x00000001) is 7 dwords but only 6" in fault(drv).what
  drv.recover(c.q)
  c.push([0x0000000F])
  f = fault(drv)
  assert "unknown SDMA packet OP 15 SUB_OP 0" in f.what and f.engine == "copy" and "ring byte 24" in f.what

def test_indirect_buffer_unmapped_or_truncated(drv):
  r = A.Ring(drv, "compute")
  r.push(A.ib(0x7_0000_0000, 16))
  f = fault(drv)
  assert f.engine == "mmu" and f.address == 0x7_0000_0000 and "indirect buffer of 16 dwords" in f.what and "is not mapped" in f.what
  drv.recover(r.q)
  buf = drv.alloc(64, True)
  buf.host.view(np.uint32)[:3] = A.release64(0, 0)[:3]
  r.push(A.ib(buf.va, 3))
  f = fault(drv)
  assert "only 3 dwords remain before the end of the indirect buffer" in f.what and f"indirect buffer 0x{buf.va:x} dword 0" in f.what
  drv.recover(r.q)
  r.push(A.ib(buf.va, 3, valid=0))
  assert "VALID 0" in fault(drv).what

def test_kernel_mmu_fault_names_the_uop(drv):
  out = drv.alloc(64, True)
  k = A.Kernel(drv, oob_kernel(16), [out.va])
  r = A.Ring(drv, "compute")
  r.push(k.words())
  f = fault(drv)
  assert f.engine == "mmu" and f.kernel == "oob" and f.uop is not None and "STORE" in f.uop and f.address is not None

def test_kernarg_pointer_unmapped(drv):
  out = drv.alloc(64, True)
  k = A.Kernel(drv, add_kernel(16), [out.va] * 3)
  r = A.Ring(drv, "compute")
  r.push(A.dispatch(k.prog.va, 0x9_0000_0000, (16, 1, 1), (1, 1, 1)))
  f = fault(drv)
  assert f.engine == "mmu" and "kernel arguments (USER_DATA_0/1) of kernel add" in f.what

@pytest.mark.parametrize("spoil,msg", [
  (dict(r2=A.rsrc2(user=4)), "RSRC2.USER_SGPR is 4"),
  (dict(lds=0), "RSRC2.LDS_SIZE gives 0 bytes of LDS but the kernel's DEFINE_LOCALs need 32"),
  (dict(block=(4, 1, 1)), "NUM_THREAD_X/Y/Z = (4, 1, 1) but the kernel's work-group is (8, 1, 1)"),
  (dict(r2=A.rsrc2(tgid=(0, 1, 1), lds_bytes=32)), "4 work-groups along X but RSRC2.TGID_X_EN is 0"),
  (dict(initiator=0x0005), "wave64 (CS_W32_EN 0)"),
  (dict(grid=(0, 1, 1)), "DIM_* and NUM_THREAD_* must be >= 1"),
])
def test_inconsistent_dispatch(drv, spoil, msg):
  inp, out = drv.alloc(128, True), drv.alloc(128, True)
  k = A.Kernel(drv, reverse_kernel(4, 8), [out.va, inp.va], (1,))
  grid, block = spoil.pop("grid", (4, 1, 1)), spoil.pop("block", (8, 1, 1))
  spoil.setdefault("lds", 32)
  r = A.Ring(drv, "compute")
  r.push(A.dispatch(k.prog.va, k.args.va, grid, block, **spoil))
  f = fault(drv)
  assert msg in f.what and f.engine == "compute" and f.words[0] == 0xC0031500

def test_misaligned_release(drv):
  sig = drv.alloc(16, True)
  r = A.Ring(drv, "compute")
  r.push(A.release64(sig.va + 4, 1))
  f = fault(drv)
  assert "misaligned semaphore" in f.what and f.address == sig.va + 4

def test_doorbell_rules(drv):
  r = A.Ring(drv, "compute", 64)
  r.push(A.pkt3(A.NOP, 0))
  drv.run_until_idle()
  r.bell(1)
  assert "below the previous write pointer 2" in fault(drv).what
  drv.recover(r.q)
  r.bell(r.rptr + 65)
  assert "more than the ring holds (64 dwords)" in fault(drv).what
  c = A.Ring(drv, "copy")
  c.bell(6)
  assert "not a whole number of dwords" in fault(drv).what

def test_fault_raised_once_queue_stops_then_recovers(drv):
  sig = drv.alloc(16, True)
  r = A.Ring(drv, "compute")
  r.push(A.pkt3(0x37, 0) + A.release32(sig.va, 1))
  fault(drv)
  assert not drv.poll() and drv.fault_of(r.q) is not None and "stopped by a fault" in drv.describe()
  drv.recover(r.q)
  r.push(A.release32(sig.va, 2))
  assert drv.run_until_idle() and u32(sig) == 2


def test_ring_wrap_pm4(drv):
  """Packets cross the end of a 16-dword ring; pointers keep growing past it."""
  sig = drv.alloc(64, True)
  r = A.Ring(drv, "compute", 16)
  r.push(A.pkt3(A.NOP, *[0] * 11))                     # 12 dwords
  assert drv.run_until_idle() and r.rptr == 12
  r.push(A.release64(sig.va, 0x77))                    # dwords 12..19: crosses the end
  assert drv.run_until_idle() and int(sig.host[:8].view(np.uint64)[0]) == 0x77 and r.rptr == 20
  assert list(r.ring[:4]) == A.release64(sig.va, 0x77)[4:]
  for v in range(3):                                   # around the ring again, a wait crossing too
    r.push(A.wait32(sig.va, 0x77) + A.release64(sig.va + 8, v))   # 15 of the ring's 16 dwords
    assert drv.run_until_idle() and int(sig.host[8:16].view(np.uint64)[0]) == v
  assert r.rptr == r.wptr == 20 + 3 * 15

def test_ring_wrap_sdma(drv):
  src, dst = drv.alloc(16, True), drv.alloc(16, True)
  src.host[:] = np.arange(16, dtype=np.uint8)
  c = A.Ring(drv, "copy", 16)
  c.push(A.fence(dst.va + 12, 1) + A.fence(dst.va + 12, 2) + A.fence(dst.va + 12, 3))   # 12 dwords = 48 bytes
  assert drv.run_until_idle() and c.rptr == 48
  c.push(A.copy_linear(dst.va, src.va, 8))             # bytes 48..76: crosses the 64-byte end
  assert drv.run_until_idle() and list(dst.host[:8]) == list(range(8)) and c.rptr == 76


def test_missing_wait_between_compute_and_sdma_is_a_hazard(drv):
  n = 16
  a, b, out, res = drv.alloc(4 * n, True), drv.alloc(4 * n, True), drv.alloc(4 * n), drv.alloc(4 * n, True)
  k = A.Kernel(drv, add_kernel(n), [out.va, a.va, b.va])
  r, c = A.Ring(drv, "compute"), A.Ring(drv, "copy")
  r.push(k.words())
  c.push(A.copy_linear(res.va, out.va, 4 * n))   # reads what the kernel writes, no POLL_REGMEM before it
  with pytest.raises(GPUHazard) as e: drv.run_until_idle()
  assert "AMD:0 compute ring dword" in str(e.value) and "kernel add writes" in str(e.value) and "AMD:0 copy ring byte 0: copy of 64 bytes" in str(e.value)

def test_wait_orders_compute_and_sdma(drv):
  n = 16
  a, b, out, res, sig = drv.alloc(4 * n, True), drv.alloc(4 * n, True), drv.alloc(4 * n), drv.alloc(4 * n, True), drv.alloc(16, True)
  k = A.Kernel(drv, add_kernel(n), [out.va, a.va, b.va])
  r, c = A.Ring(drv, "compute"), A.Ring(drv, "copy")
  c.push(A.poll(sig.va, 1) + A.copy_linear(res.va, out.va, 4 * n) + A.fence(sig.va, 2))
  r.push(k.words() + A.release64(sig.va, 1) + A.wait64(sig.va, 2) + k.words())   # the second launch rewrites out after the copy
  assert drv.run_until_idle() and drv.counters["dispatch"] == 2

def test_unsatisfiable_waits_leave_nothing_to_run(drv):
  sig = drv.alloc(16, True)
  A.Ring(drv, "compute").push(A.wait64(sig.va, 5))
  A.Ring(drv, "copy").push(A.poll(sig.va, 5))
  assert not drv.run_until_idle()
  d = drv.describe()
  assert "AMD:0 compute: rptr 0, wptr 9 (dwords)" in d and "AMD:0 copy: rptr 0, wptr 24 (bytes)" in d and d.count("blocked") == 2
