"""The mock NV GPU decodes hand-written command streams (encoded here from docs/hw/NV.md) to the expected actions."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.mock_driver import make_driver
from emulators.nv import qmd as Q
from emulators.nv.compute import TABLE as COMPUTE_TABLE
from emulators.nv.copy import TABLE as COPY_TABLE
from emulators.nv.host import TABLE as HOST_TABLE
from refgrad.device import Buffer

from .kernels import Launcher, add_kernel, compute_stream, reverse_kernel
from .nvenc import (
  COMPUTE,
  COPY,
  HOST,
  REL32,
  REL64,
  REL64_TS,
  Stream,
  ce_copy,
  ce_sem,
  hdr,
  immd,
  inc,
  inline_upload,
  non_inc,
  one_inc,
  sem,
  set_object,
  u32,
  u64,
)


@pytest.fixture
def drv():
  return make_driver("NV", 0)

def run(drv) -> None:
  assert drv.run_until_idle(), drv.describe()

def copy_stream(drv) -> Stream:
  s = Stream(drv, "copy")
  s.entry(set_object(COPY, 0xC6B5))
  return s


# ---- tables ------------------------------------------------------------------------------------

def test_method_tables_have_the_fact_sheet_offsets():
  host = {r.name: off for off, r in HOST_TABLE.items()}
  assert host == {**host, "SET_OBJECT": 0, "NOP": 8, "NON_STALL_INTERRUPT": 0x20, "MEM_OP_D": 0x34, "SET_REFERENCE": 0x50, "SEM_ADDR_LO": 0x5C,
                  "SEM_ADDR_HI": 0x60, "SEM_PAYLOAD_LO": 0x64, "SEM_PAYLOAD_HI": 0x68, "SEM_EXECUTE": 0x6C, "WFI": 0x78}
  comp = {r.name: off for off, r in COMPUTE_TABLE.items()}
  assert comp == {**comp, "LINE_LENGTH_IN": 0x180, "OFFSET_OUT": 0x18C, "LAUNCH_DMA": 0x1B0, "LOAD_INLINE_DATA": 0x1B4, "SEND_PCAS_A": 0x2B4,
                  "SEND_SIGNALING_PCAS2_B": 0x2C0, "SET_INLINE_QMD_ADDRESS_A": 0x318, "LOAD_INLINE_QMD_DATA(63)": 0x320 + 4 * 63,
                  "INVALIDATE_SHADER_CACHES_NO_WFI": 0x1698, "SET_SHADER_LOCAL_MEMORY_A": 0x790}
  cp = {r.name: off for off, r in COPY_TABLE.items()}
  assert cp == {**cp, "SET_SEMAPHORE_A": 0x240, "LAUNCH_DMA": 0x300, "OFFSET_IN_UPPER": 0x400, "OFFSET_OUT_LOWER": 0x40C, "LINE_LENGTH_IN": 0x418}

def test_qmd_field_table_matches_the_fact_sheet_and_round_trips():
  spec = {name: (dw, hi, lo) for name, dw, hi, lo in Q.FIELDS}
  assert spec["CTA_RASTER_WIDTH"] == (12, 31, 0) and spec["CTA_THREAD_DIMENSION0"] == (18, 31, 16) and spec["QMD_MAJOR_VERSION"] == (18, 7, 4)
  assert spec["RELEASE1_ENABLE"] == (29, 23, 23) and spec["CONSTANT_BUFFER_SIZE_SHIFTED4(0)"] == (33, 31, 19)
  assert spec["PROGRAM_ADDRESS_UPPER"] == (49, 16, 0) and spec["SHARED_MEMORY_SIZE"] == (17, 17, 0) and spec["RELEASE2_PAYLOAD_LOWER"] == (54, 31, 0)
  f = {"CTA_RASTER_WIDTH": 0xFFFFFFF, "CTA_THREAD_DIMENSION2": 64, "RELEASE0_PAYLOAD64B": 1, "CONSTANT_BUFFER_ADDR_UPPER(3)": 0x1FFFF}
  words = Q.encode(f)
  assert words[12] == 0xFFFFFFF and words[19] == 64 << 16 and words[25] == 1 << 29 and words[39] == 0x1FFFF
  assert {k: v for k, v in Q.decode(words).items() if v} == f


# ---- headers -----------------------------------------------------------------------------------

def test_inc_header_writes_consecutive_methods(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  s.entry(sem(sig.va, 0x1234_5678_9ABC, REL64))
  run(drv)
  assert u64(sig) == 0x1234_5678_9ABC

def test_non_inc_one_inc_immd_and_count_zero(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  words = [*inc(HOST, 0x5C, sig.va & 0xFFFFFFFF, sig.va >> 32),
           *non_inc(HOST, 0x64, 1, 2, 77),          # NON_INC: the last data wins
           hdr(1, 0, HOST, 0x64),                    # COUNT 0: a no-op header without data
           0,                                        # the NOP dword
           *immd(HOST, 0x68, 5),                     # IMMD: 13-bit data in the header (payload hi = 5)
           *one_inc(HOST, 0x68, 5, REL64)]           # ONE_INC: first to 0x68, the rest to 0x6C (execute)
  s.entry(words)
  run(drv)
  assert u64(sig) == (5 << 32) | 77

def test_end_pb_segment_ignores_the_rest(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  s.entry([*sem(sig.va, 1, REL32), hdr(7, 0, 0, 0), 0xDEADBEEF, *sem(sig.va, 2, REL32)])
  run(drv)
  assert u32(sig) == 1 and s.gpget == 2

def test_subdevice_mask_ops_and_control_entries_are_no_ops(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  s.gp(0)                       # control entry: LENGTH 0, opcode NOP
  s.entry([(1 << 16) | 1, *sem(sig.va, 3, REL32)])   # GRP0 SET_SUBDEVICE_MASK, then a release
  run(drv)
  assert u32(sig) == 3 and s.gpget == 3

def test_gpget_advances_per_entry_and_ring_wraps(drv):
  s = Stream(drv, "compute", entries=4)
  sig = drv.alloc(16, True)
  for v in range(1, 10):
    s.entry(sem(sig.va, v, REL32))
    run(drv)
    assert u32(sig) == v and s.gpget == v % 4


# ---- host semaphores -----------------------------------------------------------------------------

def test_release_32_bit_leaves_the_upper_word(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  sig.host[:8] = np.frombuffer(np.uint64(0xAAAA_AAAA_0000_0000).tobytes(), np.uint8)
  s.entry(sem(sig.va, 0x1_0000_0007, REL32))   # a 32-bit payload ignores SEM_PAYLOAD_HI
  run(drv)
  assert u64(sig) == 0xAAAA_AAAA_0000_0007

def test_release_with_timestamp_writes_the_timer_at_plus_8(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  t0 = drv.read_timer()
  s.entry(sem(sig.va, 9, REL64_TS))
  run(drv)
  assert u64(sig) == 9 and t0 < u64(sig, 8) < drv.read_timer()

@pytest.mark.parametrize("op, bits, sv, pv, ok", [
  (0, 32, 5, 5, True), (0, 32, 5, 6, False),                       # ACQUIRE ==
  (2, 64, 7, 6, True), (2, 64, 5, 6, False), (2, 32, 0xFFFFFFFF, 1, True),   # STRICT_GEQ unsigned
  (3, 32, 1, 0xFFFFFFFF, True), (3, 32, 0xFFFFFFFF, 1, False), (3, 64, 10, 9, True), (3, 64, 8, 9, False),   # CIRC_GEQ wraps
  (4, 32, 0b1010, 0b0010, True), (4, 32, 0b1010, 0b0101, False),     # ACQ_AND
  (5, 32, 0b1010, 0b0101, True), (5, 32, 0xFFFFFFF0, 0xF, False),     # ACQ_NOR
])
def test_acquire_conditions(drv, op, bits, sv, pv, ok):
  s, sig, out = compute_stream(drv), drv.alloc(16, True), drv.alloc(16, True)
  sig.host[:8] = np.frombuffer(np.uint64(sv).tobytes(), np.uint8)
  s.entry([*sem(sig.va, pv, op | ((bits == 64) << 24)), *sem(out.va, 1, REL32)])
  assert drv.run_until_idle() is ok
  assert u32(out) == ok
  if not ok: assert "blocked: acquire" in drv.describe() and f"0x{sig.va:x}" in drv.describe()

@pytest.mark.parametrize("red, fmt, sv, pv, want", [
  (0, 0, 0xFFFFFFFE, 3, 0xFFFFFFFE), (0, 1, 0xFFFFFFFE, 3, 3),       # IMIN signed / unsigned
  (1, 0, 0xFFFFFFFE, 3, 3), (1, 1, 0xFFFFFFFE, 3, 0xFFFFFFFE),       # IMAX
  (2, 1, 0b1100, 0b1010, 0b0110), (3, 1, 0b1100, 0b1010, 0b1000), (4, 1, 0b1100, 0b1010, 0b1110),
  (5, 1, 0xFFFFFFFF, 2, 1),                                         # IADD wraps
  (6, 1, 3, 5, 4), (6, 1, 5, 5, 0), (7, 1, 3, 5, 2), (7, 1, 0, 5, 5),   # INC / DEC wrap at the payload
])
def test_host_reductions(drv, red, fmt, sv, pv, want):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  sig.host[:4] = np.frombuffer(np.uint32(sv).tobytes(), np.uint8)
  s.entry(sem(sig.va, pv, 6 | (red << 27) | (fmt << 31)))
  run(drv)
  assert u32(sig) == want

def test_64_bit_reduction(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  sig.host[:8] = np.frombuffer(np.uint64(0xFFFF_FFFF).tobytes(), np.uint8)
  s.entry(sem(sig.va, 1, 6 | (5 << 27) | (1 << 24)))
  run(drv)
  assert u64(sig) == 1 << 32

def test_other_host_methods(drv):
  s, sig = compute_stream(drv), drv.alloc(16, True)
  s.entry([*inc(HOST, 0x8, 0), *inc(HOST, 0x78, 1), *inc(HOST, 0x20, 0x42), *inc(HOST, 0x28, 0, 0, 0, 5 << 27), *inc(HOST, 0x50, 0x77),
           *sem(sig.va, 1, REL32)])
  run(drv)
  ch = drv.channels[0]
  assert u32(sig) == 1 and ch.interrupts == [0x42] and u32(s.q.userd, 0x48) == 0x77


# ---- compute class -------------------------------------------------------------------------------

def test_inline_upload(drv):
  s, dst = compute_stream(drv), drv.alloc(64)
  data = bytes(range(1, 42))   # not a multiple of 4: the last dword is partly used
  s.entry([*inline_upload(dst.va + 8, data), *inc(COMPUTE, 0x1698, 0x1011)])
  run(drv)
  mem = drv.region(dst.va).mem.data
  assert mem[8:8 + 41].tobytes() == data and not mem[49:].any() and not mem[:8].any()

def test_inline_upload_split_over_two_headers(drv):
  s, dst = compute_stream(drv), drv.alloc(16, True)
  w = inline_upload(dst.va, bytes(range(16)))
  head, data = w[:-4], w[-4:]
  s.entry([*head[:-1], *non_inc(COMPUTE, 0x1B4, *data[:2]), *non_inc(COMPUTE, 0x1B4, *data[2:])])
  run(drv)
  assert dst.host.tobytes() == bytes(range(16))

def test_qmd_launch_matches_the_python_device(drv):
  r = reverse_kernel()
  inp = np.arange(32, dtype=np.int32) * 7 - 50
  out, src = drv.alloc(128), drv.alloc(128, True)
  src.host[:] = inp.view(np.uint8)
  k = Launcher(drv, r, [out.va, src.va], (5,))
  s = compute_stream(drv)
  s.entry(k.words())
  run(drv)
  got = drv.region(out.va).mem.data.view(np.int32)
  po, pi = Buffer("PYTHON", 32, r.spec.globals[0][1].base), Buffer.from_numpy("PYTHON", inp)
  r2 = type(r)("rev", list(r.spec.uops), "PYTHON")
  r2(po, pi, var_vals={"v": 5})
  assert got.tobytes() == po.numpy().tobytes()
  assert got.tolist()[:8] == [int(x) * 3 + 5 for x in inp[:8][::-1]]

def test_qmd_release_semaphores(drv):
  r = add_kernel()
  a, b, o = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True)
  a.host.view(np.float32)[:], b.host.view(np.float32)[:] = 1.5, np.arange(16)
  s0, s1 = drv.alloc(16, True), drv.alloc(16, True)
  k = Launcher(drv, r, [o.va, a.va, b.va], RELEASE0_ENABLE=1, RELEASE0_PAYLOAD64B=1, RELEASE0_ADDRESS_LOWER=s0.va & 0xFFFFFFFF,
               RELEASE0_ADDRESS_UPPER=s0.va >> 32, RELEASE0_PAYLOAD_LOWER=2, RELEASE0_PAYLOAD_UPPER=1,
               RELEASE1_ENABLE=1, RELEASE1_STRUCTURE_SIZE=1, RELEASE1_ADDRESS_LOWER=s1.va & 0xFFFFFFFF, RELEASE1_ADDRESS_UPPER=s1.va >> 32,
               RELEASE1_PAYLOAD_LOWER=33)
  s = compute_stream(drv)
  t0 = drv.read_timer()
  s.entry(k.words(action=3))   # INVALIDATE_COPY_SCHEDULE launches too (Mesa's kick)
  run(drv)
  assert o.host.view(np.float32).tolist() == [1.5 + i for i in range(16)]
  assert u64(s0) == (1 << 32) | 2 and t0 < u64(s0, 8) < drv.read_timer()   # four words: payload, then the ns timer
  assert u64(s1) == 33                                                     # one word
  assert drv.counters["qmd_launch"] == 1 and drv.counters["gp_entry"] == 2 and drv.counters["doorbell"] == 2

def test_inline_qmd_and_dependent_qmd(drv):
  r = add_kernel()
  a, b, o1, o2 = (drv.alloc(64, True) for _ in range(4))
  a.host.view(np.float32)[:], b.host.view(np.float32)[:] = 1, 2
  k2 = Launcher(drv, r, [o2.va, o1.va, b.va])
  k1 = Launcher(drv, r, [o1.va, a.va, b.va], DEPENDENT_QMD0_ENABLE=1, DEPENDENT_QMD0_ACTION=1, DEPENDENT_QMD0_POINTER=k2.qmd.va >> 8)
  qmd = drv.alloc(256, True)
  s = compute_stream(drv)
  s.entry([*inc(COMPUTE, 0x318, (qmd.va >> 8) >> 32, (qmd.va >> 8) & 0xFFFFFFFF), *inc(COMPUTE, 0x320, *k1.qmd.host.view(np.uint32).tolist())])
  run(drv)
  assert qmd.host.tobytes() == k1.qmd.host.tobytes()
  assert o1.host.view(np.float32).tolist() == [3.0] * 16 and o2.host.view(np.float32).tolist() == [5.0] * 16


# ---- copy engine -------------------------------------------------------------------------------

def test_copy_engine_linear_copy_and_four_word_semaphore(drv):
  s = copy_stream(drv)
  src, dst, sig = drv.alloc(1000, True), drv.alloc(1000), drv.alloc(16, True)
  src.host[:] = np.arange(1000) % 251
  sig.host[:8] = 0xFF
  s.entry([*ce_copy(dst.va + 3, src.va + 1, 990, 0x186), *ce_sem(sig.va, 7)])
  run(drv)
  assert (drv.region(dst.va).mem.data[3:993] == src.host[1:991]).all()
  assert u64(sig) == 7 and 0 < u64(sig, 8) < drv.read_timer()   # upper payload word cleared
  assert drv.counters["ce_copy"] == 1 and drv.counters["ce_release"] == 1

def test_copy_engine_multi_line_one_word_semaphore_and_reduction(drv):
  s = copy_stream(drv)
  src, dst, sig = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(16, True)
  src.host[:] = np.arange(64)
  sig.host[:8] = 0xFF
  s.entry([*inc(COPY, 0x410, 16, 8, 4, 3), *ce_copy(dst.va, src.va, 4, 0x182 | (1 << 9)), *ce_sem(sig.va, 5, 0x0C)])
  run(drv)
  assert dst.host[:24].tolist() == [0, 1, 2, 3, 0, 0, 0, 0, 16, 17, 18, 19, 0, 0, 0, 0, 32, 33, 34, 35, 0, 0, 0, 0]
  assert u64(sig) == 0xFFFFFFFF_00000005   # one word: only 4 bytes
  s.entry(ce_sem(sig.va, 10, 0x0C | (1 << 19) | (5 << 14) | (1 << 18)))   # reduction IADD unsigned
  run(drv)
  assert u32(sig) == 15

def test_copy_class_on_the_compute_channel_subchannel_4(drv):
  s = compute_stream(drv)
  src, dst = drv.alloc(8, True), drv.alloc(8, True)
  src.host[:] = 9
  s.entry([*set_object(COPY, 0xC6B5), *ce_copy(dst.va, src.va, 8)])
  run(drv)
  assert dst.host.tolist() == [9] * 8


# ---- executors ---------------------------------------------------------------------------------

def test_executor_is_chosen_by_the_image_magic_and_programs_are_parsed_once(drv, monkeypatch):
  from emulators import executors
  r = add_kernel()
  a, b, o = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True)
  k = Launcher(drv, r, [o.va, a.va, b.va])
  img = k.prog.host.tobytes()
  assert executors.load(img) is executors.load(img)   # cached by the image bytes
  ran = []
  class Fake:   # what a PTX executor would provide
    name, nglobals, nvars, arg_bytes, shared_bytes, params = "fake", 3, 0, 24, 0, [(64, False, True), (64, True, False), (64, True, False)]
    def __init__(self, payload: bytes): self.payload = payload
    def run(self, bufs, gsz, lsz, vals, vas): ran.append((self.payload, gsz, lsz, [m.nbytes for m in bufs], vas))
  monkeypatch.setitem(executors.EXECUTORS, b"TEST", Fake)
  k.prog.host[:4] = np.frombuffer(b"TEST", np.uint8)
  s = compute_stream(drv)
  s.entry(k.words())
  run(drv)
  assert ran == [(r.lib, (16, 1, 1), (1, 1, 1), [64, 64, 64], [o.va, a.va, b.va])]
