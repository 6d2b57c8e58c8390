"""Malformed streams and bad launches each give their named GPUFault (device, queue, GP entry, dword, words, address),
raised once by poll(); the queue stops until recover() and the device stays usable."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.mock_driver import make_driver
from refgrad.runtime.driver import GPUFault

from .kernels import Launcher, add_kernel, compute_stream, gather_kernel, oob_kernel, reverse_kernel
from .nvenc import COMPUTE, HOST, REL32, REL64, REL64_TS, Stream, ce_sem, hdr, inc, launch, sem, set_object, u32


@pytest.fixture
def drv():
  return make_driver("NV", 0)

def fault(drv) -> GPUFault:
  with pytest.raises(GPUFault) as e:
    for _ in range(1000): drv.poll()
  f = e.value
  assert f.device == "NV:0"
  return f


def test_truncated_segment(drv):
  s = compute_stream(drv)
  s.entry([0, hdr(1, 5, HOST, 0x5C), 1, 2])   # announces 5 data dwords, the segment has 2
  f = fault(drv)
  assert (f.engine, f.queue, f.gp_entry, f.dword_offset) == ("host", "NV:0 compute", 1, 1)
  assert "announces 5 data dwords" in f.what and f.words == (hdr(1, 5, HOST, 0x5C), 1, 2)

def test_unknown_method(drv):
  s = compute_stream(drv)
  s.entry(inc(COMPUTE, 0x1B8, 1))
  f = fault(drv)
  assert f.engine == "compute" and "unknown method 0x1b8 for class C6C0" in f.what and f.words == (hdr(1, 1, COMPUTE, 0x1B8), 1)

def test_unknown_class_and_unbound_subchannel(drv):
  s = Stream(drv, "compute")
  s.entry(set_object(2, 0xB197))
  assert "unknown class 0xB197" in fault(drv).what
  drv.recover(s.q)
  s.entry(inc(3, 0x300, 1))
  assert "subchannel 3, which has no class bound" in fault(drv).what

def test_compute_class_on_a_copy_channel(drv):
  s = Stream(drv, "copy")
  s.entry(set_object(COMPUTE, 0xC6C0))
  assert "cannot be bound on a copy channel" in fault(drv).what

@pytest.mark.parametrize("op", [2, 6])
def test_unknown_sec_op(drv, op):
  s = compute_stream(drv)
  s.entry([hdr(op, 1, HOST, 0x8), 0])
  f = fault(drv)
  assert f"SEC_OP {op}" in f.what and f.dword_offset == 0

def test_illegal_control_entry(drv):
  s = compute_stream(drv)
  s.gp(1 << 32)   # LENGTH 0, OPCODE 1 ILLEGAL
  s.doorbell()
  f = fault(drv)
  assert "opcode 1 (ILLEGAL)" in f.what and f.gp_entry == 1 and f.words == (0, 1)

def test_unmapped_gp_entry_and_pushbuffer_past_its_mapping(drv):
  s = compute_stream(drv)
  s.gp(0x7_0000_0000 | (4 << 42))
  s.doorbell()
  f = fault(drv)
  assert f.engine == "mmu" and f.address == 0x7_0000_0000 and "pushbuffer segment of GP entry 1" in f.what and "is not mapped" in f.what
  drv.recover(s.q)
  pb = drv.alloc(16, True)
  s.gp(pb.va | (8 << 42))   # 8 dwords from a 16-byte mapping
  s.doorbell()
  f = fault(drv)
  assert f.engine == "mmu" and "runs past the end of the mapping" in f.what and f.gp_entry == 2

def test_freed_memory_faults(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  drv.free(sig)
  s.entry(sem(sig.va, 1, REL32))
  f = fault(drv)
  assert f.engine == "mmu" and f.address == sig.va

@pytest.mark.parametrize("off, execute, align", [(4, REL64, 8), (8, REL64_TS, 16), (4, 0x01000003, 8)])
def test_misaligned_semaphore(drv, off, execute, align):
  s, sig = compute_stream(drv), drv.alloc(32, True)
  s.entry(sem(sig.va + off, 1, execute))
  f = fault(drv)
  assert f.engine == "host" and f.address == sig.va + off and "misaligned semaphore" in f.what and f"{align}-byte aligned" in f.what

def test_misaligned_copy_engine_semaphore(drv):
  s = Stream(drv, "copy")
  sig = drv.alloc(32, True)
  s.entry([*set_object(4, 0xC6B5), *ce_sem(sig.va + 4, 1)])
  f = fault(drv)
  assert f.engine == "copy" and "16-byte aligned" in f.what

def test_inline_data_beyond_the_announced_size(drv):
  s, dst = compute_stream(drv), drv.alloc(16, True)
  s.entry([*inc(COMPUTE, 0x180, 8, 1, dst.va >> 32, dst.va & 0xFFFFFFFF), *inc(COMPUTE, 0x1B0, 0x41), hdr(3, 3, COMPUTE, 0x1B4), 1, 2, 3])
  assert "more than the 2 the inline upload of 8 bytes needs" in fault(drv).what
  drv.recover(s.q)
  s.entry([hdr(3, 1, COMPUTE, 0x1B4), 1])
  assert "no inline upload in progress" in fault(drv).what


# ---- launches ------------------------------------------------------------------------------------

def _add(drv, **qmd):
  a, b, o = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True)
  return Launcher(drv, add_kernel(), [o.va, a.va, b.va], **qmd)

@pytest.mark.parametrize("fields, msg", [
  ({"QMD_MAJOR_VERSION": 2}, "has version 2.0"),
  ({"QMD_VERSION": 1}, "has version 3.1"),
  ({"CTA_RASTER_WIDTH": 0}, "invalid grid dims (0, 1, 1)"),
  ({"CTA_THREAD_DIMENSION0": 1025}, "invalid block dims (1025, 1, 1)"),
  ({"CTA_THREAD_DIMENSION2": 65}, "invalid block dims"),
  ({"CTA_THREAD_DIMENSION0": 64, "CTA_THREAD_DIMENSION1": 32}, "block of 2048 threads"),
  ({"CONSTANT_BUFFER_VALID(0)": 0}, "constant buffer 0 (the kernel parameters) is not valid"),
  ({"CONSTANT_BUFFER_SIZE_SHIFTED4(0)": 1}, "constant buffer 0 holds 16 bytes"),
])
def test_bad_qmd(drv, fields, msg):
  k = _add(drv)
  words = k.qmd.host.view(np.uint32)
  from emulators.nv import qmd as Q
  q = Q.decode(words.tolist())
  q.update(fields)
  words[:] = Q.encode(q)
  s = compute_stream(drv)
  s.entry(k.words())
  f = fault(drv)
  assert f.engine == "compute" and msg in f.what and f.gp_entry == 1

def test_grid_that_does_not_match_the_program(drv):
  k = _add(drv, grid=(8, 1, 1))
  s = compute_stream(drv)
  s.entry(k.words())
  f = fault(drv)
  assert f.kernel == "add" and "SPECIAL gidx0 has size 16 but the launch gives 8" in f.what

def test_unmapped_qmd_program_and_buffer(drv):
  s = compute_stream(drv)
  s.entry(launch(0x9_0000_0000))
  f = fault(drv)
  assert f.engine == "mmu" and f.address == 0x9_0000_0000 and "QMD" in f.what
  drv.recover(s.q)
  k = Launcher(drv, add_kernel(), [0x8_0000_0000, 0x8_0000_0000, 0x8_0000_0000])
  s.entry(k.words())
  f = fault(drv)
  assert f.engine == "mmu" and f.kernel == "add" and f.address == 0x8_0000_0000 and "buffer 0 of kernel add" in f.what
  drv.recover(s.q)
  k = _add(drv)
  k.prog.host[:4] = np.frombuffer(b"PTX\0", np.uint8)
  s.entry(k.words())
  f = fault(drv)
  assert f.engine == "compute" and "b'PTX\\x00', which is no known format" in f.what

def test_buffer_smaller_than_the_kernel_declares(drv):
  a, b, o = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(60, True)
  k = Launcher(drv, add_kernel(), [o.va, a.va, b.va])
  s = compute_stream(drv)
  s.entry(k.words())
  f = fault(drv)
  assert f.engine == "mmu" and "runs past the end of the mapping" in f.what and f.address == o.va

def test_shared_memory_smaller_than_the_program_needs(drv):
  o, i = drv.alloc(128, True), drv.alloc(128, True)
  k = Launcher(drv, reverse_kernel(), [o.va, i.va], (0,), shared=16)
  s = compute_stream(drv)
  s.entry(k.words())
  f = fault(drv)
  assert "SHARED_MEMORY_SIZE is 16 bytes but the kernel's DEFINE_LOCALs need 32" in f.what

def test_out_of_bounds_store_is_an_mmu_fault_naming_the_uop(drv):
  o = drv.alloc(64, True)
  k = Launcher(drv, oob_kernel(), [o.va])
  s = compute_stream(drv)
  s.entry(k.words())
  f = fault(drv)
  assert f.engine == "mmu" and f.kernel == "oob" and f.uop is not None and f.uop.startswith("uop 2 (STORE")
  assert "out-of-bounds STORE" in f.what and "accesses index 16 of buffer 0" in f.what and f.address == o.va + 64

def test_undefined_behaviour_in_a_kernel_keeps_the_simt_report(drv):
  a, idx, o = drv.alloc(64), drv.alloc(64), drv.alloc(64)   # device memory nothing wrote: the indices are undefined
  k = Launcher(drv, gather_kernel(), [o.va, a.va, idx.va])
  s = compute_stream(drv)
  s.entry(k.words())
  f = fault(drv)
  assert f.engine == "compute" and "read of uninitialized memory decides" in f.what and "in kernel gather" in f.what and f.uop.startswith("uop 5 (LOAD")


# ---- reporting and recovery ---------------------------------------------------------------------

def test_a_fault_is_raised_once_and_the_queue_stays_stopped_until_recovered(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  s.entry([hdr(2, 0, 0, 0)])
  s.entry(sem(sig.va, 1, REL32))
  f = fault(drv)
  assert drv.fault_of(s.q) is f and "stopped by a fault" in drv.describe()
  assert drv.poll() is False and u32(sig) == 0   # raised once; nothing runs on the stopped queue
  drv.recover(s.q)
  assert drv.fault_of(s.q) is None and s.gpget == 3
  s.entry(sem(sig.va, 2, REL32))
  assert drv.run_until_idle() and u32(sig) == 2

def test_fault_text_has_every_set_field(drv):
  s = compute_stream(drv)
  s.entry(inc(COMPUTE, 0x1B8, 7))
  text = str(fault(drv))
  for part in ("NV:0", "queue NV:0 compute", "GP entry 1", "dword 0", "words 0x2001206e 0x00000007"): assert part in text

def test_knobs_are_validated(monkeypatch):
  monkeypatch.setenv("MOCKGPU_ORDER", "random")
  with pytest.raises(ValueError, match="MOCKGPU_ORDER='random' is not allowed"): make_driver("NV", 0)
  monkeypatch.setenv("MOCKGPU_ORDER", "seed:-1")
  with pytest.raises(ValueError, match="MOCKGPU_ORDER"): make_driver("NV", 0)
  monkeypatch.setenv("MOCKGPU_ORDER", "seed:3")
  monkeypatch.setenv("MOCKGPU_HAZARDS", "yes")
  with pytest.raises(ValueError, match="MOCKGPU_HAZARDS='yes' is not allowed"): make_driver("NV", 0)
  with pytest.raises(ValueError, match="no mock GPU for architecture 'XX'"): make_driver("XX", 0)

def test_bad_driver_calls(drv):
  with pytest.raises(ValueError, match="power-of-two"): drv.create_queue("compute", 100)
  with pytest.raises(ValueError, match="engine must be one of"): drv.create_queue("video")
  with pytest.raises(ValueError, match="token 5, which belongs to no channel"): drv.ring_doorbell(5)
  m = drv.alloc(10)
  drv.free(m)
  with pytest.raises(ValueError, match="double free"): drv.free(m)

def test_shared_memory_need_is_counted_with_alignment():
  from emulators.executors import LinearKernel
  from refgrad.dtype import dtypes
  from refgrad.renderer.serialize import serialize
  from refgrad.uop.ops import Ops, UOp
  out = UOp.define_global(0, dtypes.int32, 1)
  t1 = UOp(Ops.DEFINE_LOCAL, dtypes.bool.ptr(3, local=True), (), "flags")
  t2 = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(2, local=True), (), "vals")
  zero = UOp.const(dtypes.int32, 0)
  k = LinearKernel(serialize("k", [out, t1, t2, zero, out.store(zero, zero)]).encode())
  assert k.shared_bytes == 4 + 8   # 3 bool bytes, padded to the float's 4-byte alignment, then 2 floats
