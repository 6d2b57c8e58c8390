"""LLVM-compiled gfx1100 kernels end to end through the mock AMD GPU: code uploaded to GPU memory, the dispatch
registers from the kernel descriptor, PM4 DISPATCH_DIRECT on a compute ring; the ISA branch of the dispatch runs the
machine code. Faults (unknown opcode, MMU, uninitialized memory, bad float mode) name what they should."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from emulators.mock_driver import make_driver
from refgrad.runtime.driver import GPUFault, GPUHazard
from tests.emulators import amdenc as A
from tests.emulators.rdna3.llvm_util import Kernel, descriptor
from tests.emulators.rdna3.test_execute import kernels_of

RSRC2_OFF, USER_SGPR_MASK = 0x213, 0x3E


@pytest.fixture
def drv():
  return make_driver("AMD", 0)


def upload(drv, k: Kernel, code: bytes | None = None):
  code = k.code if code is None else code
  prog = drv.alloc(len(code), True)
  prog.host[:len(code)] = np.frombuffer(code, np.uint8)
  return prog


def dispatch_words(drv, k: Kernel, prog, bufs: list[int], vals: tuple[int, ...], grid, block, rsrc1: int | None = None) -> list[int]:
  d = descriptor(k.descriptor)
  args = struct.pack(f"<{len(bufs)}Q", *bufs) + struct.pack(f"<{len(vals)}i", *vals)
  ka = drv.alloc(max(16, len(args)), True)
  ka.host[:len(args)] = np.frombuffer(args, np.uint8)
  nuser = (d.rsrc2 >> 1) & 0x1F
  user = [ka.va & 0xFFFFFFFF, ka.va >> 32] + [0] * (nuser - 2)
  r2 = d.rsrc2 | (-(-d.group_segment // 512) << 15)
  return (A.sh(A.PGM_LO, (prog.va >> 8) & 0xFFFFFFFF, prog.va >> 40) + A.sh(A.RSRC1, d.rsrc1 if rsrc1 is None else rsrc1, r2)
          + A.sh(A.RSRC3, d.rsrc3) + A.sh(A.TMPRING, 0) + A.sh(A.RESTART_X, 0, 0, 0) + A.sh(A.USER_DATA_0, *user)
          + A.sh(A.START_X, 0, 0, 0, *block) + A.pkt3(A.DISPATCH_DIRECT, *grid, A.INITIATOR_W32) + A.pkt3(A.EVENT_WRITE, 0x407))


def buffer(drv, a: np.ndarray):
  m = drv.alloc(a.nbytes, True)
  m.host[:] = a.view(np.uint8).reshape(-1)
  return m


def run(drv, words: list[int]) -> None:
  r = A.Ring(drv, "compute", 1024)
  r.push(words)
  assert drv.run_until_idle()


def test_mul_f32_through_pm4(drv):
  k = kernels_of("elementwise")["mul_f32"]
  a, b = np.linspace(-3, 3, 128, dtype=np.float32), np.linspace(1, 2, 128, dtype=np.float32)
  out, ma, mb = buffer(drv, np.zeros(128, np.float32)), buffer(drv, a), buffer(drv, b)
  run(drv, dispatch_words(drv, k, upload(drv, k), [out.va, ma.va, mb.va], (), (2, 1, 1), (64, 1, 1)))
  np.testing.assert_array_equal(out.host.view(np.float32), a * b)
  assert drv.counters["dispatch"] == 1


def test_lds_barrier_through_pm4(drv):
  k = kernels_of("control")["lds_reverse"]
  a = np.arange(128, dtype=np.float32)
  out, ma = buffer(drv, np.zeros(128, np.float32)), buffer(drv, a)
  run(drv, dispatch_words(drv, k, upload(drv, k), [out.va, ma.va], (), (2, 1, 1), (64, 1, 1)))
  np.testing.assert_array_equal(out.host.view(np.float32), np.concatenate([a[63::-1], a[:63:-1]]))


def fault(drv, words: list[int]) -> GPUFault:
  r = A.Ring(drv, "compute", 1024)
  r.push(words)
  with pytest.raises(GPUFault) as e:
    for _ in range(100): drv.poll()
  return e.value


def test_out_of_bounds_store_is_an_mmu_fault_naming_pc_instruction_lane(drv):
  k = kernels_of("elementwise")["add_f32"]
  out, ma, mb = buffer(drv, np.zeros(64, np.float32)), buffer(drv, np.ones(128, np.float32)), buffer(drv, np.ones(128, np.float32))
  f = fault(drv, dispatch_words(drv, k, upload(drv, k), [out.va, ma.va, mb.va], (), (2, 1, 1), (64, 1, 1)))
  assert f.engine == "mmu" and "MMU fault" in f.what and "global_store_b32" in f.what and "PC 0x" in f.what and "lane 0 of wave 2" in f.what
  assert f.address == out.va + 256 and f.kernel.startswith("<RDNA3 code at")


def test_unknown_opcode_names_pc_words_format(drv):
  k = kernels_of("elementwise")["add_f32"]
  bad = struct.pack("<I", 0xBE80_7F00) + k.code   # SOP1 with opcode 127: no such instruction
  f = fault(drv, dispatch_words(drv, k, upload(drv, k, bad), [], (), (1, 1, 1), (64, 1, 1)))
  assert "PC 0x0" in f.what and "unknown opcode 127" in f.what and "format SOP1" in f.what and "0xbe807f00" in f.what


def test_no_encoding_names_the_word(drv):
  k = kernels_of("elementwise")["add_f32"]
  f = fault(drv, dispatch_words(drv, k, upload(drv, k, b"\xff\xff\xff\xff" + k.code), [], (), (1, 1, 1), (64, 1, 1)))
  assert "PC 0x0" in f.what and "0xffffffff is no RDNA3 instruction encoding" in f.what


def test_uninitialized_global_read_in_checked_mode(drv):
  """Loading bytes nothing wrote is no fault (the PYTHON device's memcheck model): the sums are undefined, so the
  stored bytes are, and the host reading them back is reported, naming the load that read the undefined bytes."""
  k = kernels_of("elementwise")["add_f32"]
  out, mb = buffer(drv, np.zeros(128, np.float32)), buffer(drv, np.ones(128, np.float32))
  never = drv.alloc(512, False)   # device memory nobody wrote
  run(drv, dispatch_words(drv, k, upload(drv, k), [out.va, never.va, mb.va], (), (2, 1, 1), (64, 1, 1)))
  mem = drv.vm.find(out.va).mem
  assert mem.undefined_bytes().size == 512
  assert "global_load_b32" in mem.origin and "lane 0 of wave 0" in mem.origin and f"from 0x{never.va:x}, which nothing has written" in mem.origin


def test_unsupported_float_mode_is_refused(drv):
  k = kernels_of("elementwise")["add_f32"]
  d = descriptor(k.descriptor)
  f = fault(drv, dispatch_words(drv, k, upload(drv, k), [], (), (1, 1, 1), (64, 1, 1), rsrc1=d.rsrc1 & ~(0xFF << 12)))
  assert "FLOAT_MODE 0x00 is not emulated" in f.what


def _mul_then_copy(drv, wait: bool, register: bool = False):
  """An ISA kernel writes `out`; an SDMA copy reads it, after a semaphore the kernel's release sets (`wait`) or not;
  `register`: the code object's symbol is registered with the driver as a loader does."""
  k = kernels_of("elementwise")["mul_f32"]
  a = np.ones(128, np.float32)
  out, ma, mb, res, sig = buffer(drv, np.zeros(128, np.float32)), buffer(drv, a), buffer(drv, a), drv.alloc(512, True), drv.alloc(16, True)
  r, c = A.Ring(drv, "compute", 1024), A.Ring(drv, "copy")
  prog = upload(drv, k)
  if register: drv.code_object_loaded(prog.va, len(k.code), [(k.name, prog.va, len(k.code))])
  r.push(dispatch_words(drv, k, prog, [out.va, ma.va, mb.va], (), (2, 1, 1), (64, 1, 1)) + (A.release64(sig.va, 1) if wait else []))
  c.push((A.poll(sig.va, 1) if wait else []) + A.copy_linear(res.va, out.va, 512))
  return out, ma


def test_isa_launch_records_its_writes_for_the_hazard_checker(drv):
  out, _ = _mul_then_copy(drv, wait=False)
  with pytest.raises(GPUHazard) as e: drv.run_until_idle()
  msg = str(e.value)
  assert "kernel <RDNA3 code at" in msg and f"writes 0x{out.va:x}..0x{out.va + 512:x}" in msg and "copy of 512 bytes" in msg


def test_isa_launch_ordered_by_a_release_is_clean(drv):
  _mul_then_copy(drv, wait=True)
  assert drv.run_until_idle()


def test_isa_launches_in_flight_together_conflict_on_what_they_read_and_write(drv):
  """Two dispatches of one ring with no ordering command between them: the second reads what the first writes."""
  k = kernels_of("elementwise")["mul_f32"]
  a = np.ones(128, np.float32)
  out, ma, mb, out2 = (buffer(drv, x) for x in (np.zeros(128, np.float32), a, a, np.zeros(128, np.float32)))
  prog = upload(drv, k)
  words = dispatch_words(drv, k, prog, [out.va, ma.va, mb.va], (), (2, 1, 1), (64, 1, 1))[:-2]   # no EVENT_WRITE (an ordering event) after it
  words += dispatch_words(drv, k, prog, [out2.va, out.va, mb.va], (), (2, 1, 1), (64, 1, 1))
  r = A.Ring(drv, "compute", 1024)
  r.push(words)
  with pytest.raises(GPUHazard) as e: drv.run_until_idle()
  msg = str(e.value)
  assert f"writes 0x{out.va:x}..0x{out.va + 512:x}" in msg and f"reads 0x{out.va:x}..0x{out.va + 512:x}" in msg and "both in flight" in msg


def test_isa_launches_in_flight_on_disjoint_bytes_of_one_buffer_are_clean(drv):
  """What an ISA launch records is the bytes it touched: two launches in flight writing the two halves of one buffer do
  not conflict (a launch recording its whole buffer would report them)."""
  k = kernels_of("elementwise")["mul_f32"]
  a = np.full(128, 2, np.float32)
  out, ma = buffer(drv, np.zeros(128, np.float32)), buffer(drv, a)
  prog = upload(drv, k)
  words = dispatch_words(drv, k, prog, [out.va, ma.va, ma.va], (), (1, 1, 1), (64, 1, 1))[:-2]
  words += dispatch_words(drv, k, prog, [out.va + 256, ma.va, ma.va], (), (1, 1, 1), (64, 1, 1))
  r = A.Ring(drv, "compute", 1024)
  r.push(words)
  assert drv.run_until_idle()
  np.testing.assert_array_equal(out.host.view(np.float32), np.full(128, 4, np.float32))


def test_registered_code_object_names_the_kernel_in_faults_and_hazards(drv):
  """The loader registers the code object's symbols (Driver.code_object_loaded, as ROCr tells a debugger): faults and
  hazards of that code name the kernel; code outside every registered symbol keeps the address form (tests above)."""
  k = kernels_of("elementwise")["add_f32"]
  out, ma, mb = buffer(drv, np.zeros(64, np.float32)), buffer(drv, np.ones(128, np.float32)), buffer(drv, np.ones(128, np.float32))
  prog = upload(drv, k)
  drv.code_object_loaded(prog.va, len(k.code), [(k.name, prog.va, len(k.code))])
  assert drv.symbol_at(prog.va) == k.name and drv.symbol_at(prog.va + len(k.code)) is None
  f = fault(drv, dispatch_words(drv, k, prog, [out.va, ma.va, mb.va], (), (2, 1, 1), (64, 1, 1)))
  assert f.kernel == k.name and f"kernel {k.name}: PC 0x" in f.what and "RDNA3 code at" not in str(f)
  drv.free(prog)   # the registration ends with the mapping: memory reused for other code is not named after it
  assert drv.symbol_at(prog.va) is None and not drv.code_objects


def test_registration_outside_the_mapping_is_refused(drv):
  prog = drv.alloc(256, True)
  with pytest.raises(ValueError, match="not inside one mapping"): drv.code_object_loaded(prog.va, 8192, [])
  with pytest.raises(ValueError, match=r"symbol 'k' at .* is not inside the code object"): drv.code_object_loaded(prog.va, 256, [("k", prog.va + 200, 100)])


def test_registered_kernel_names_its_hazards(drv):
  _mul_then_copy(drv, wait=False, register=True)
  with pytest.raises(GPUHazard) as e: drv.run_until_idle()
  assert "kernel mul_f32" in str(e.value) and "RDNA3 code at" not in str(e.value)
