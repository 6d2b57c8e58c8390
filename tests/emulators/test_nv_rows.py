"""Every row of the method tables: state methods latch their data, trigger methods act or fault with their reason."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.mock_driver import make_driver
from emulators.nv.compute import TABLE as COMPUTE_TABLE
from emulators.nv.copy import TABLE as COPY_TABLE
from emulators.nv.host import TABLE as HOST_TABLE
from refgrad.runtime.driver import GPUFault

from .kernels import Launcher, add_kernel, compute_stream
from .nvenc import COMPUTE, COPY, HOST, ce_copy, inc, set_object, u64

LATCHES = [("host", HOST, r) for r in HOST_TABLE.values() if r.action is None] + \
          [("compute", COMPUTE, r) for r in COMPUTE_TABLE.values() if r.action is None] + \
          [("copy", COPY, r) for r in COPY_TABLE.values() if r.action is None]


@pytest.mark.parametrize("kind, subch, row", LATCHES, ids=[f"{k}-{r.name}" for k, _, r in LATCHES])
def test_state_methods_latch(kind, subch, row):
  drv = make_driver("NV", 0)
  s = compute_stream(drv)
  s.entry([*set_object(COPY, 0xC6B5), *inc(subch, row.offset, 0x1234_5678)])
  assert drv.run_until_idle()
  ch = drv.channels[0]
  eng = ch.host if kind == "host" else ch.sub[subch]
  assert eng.regs[row.offset] == 0x1234_5678

def _fault(drv) -> GPUFault:
  with pytest.raises(GPUFault) as e:
    for _ in range(100): drv.poll()
  return e.value

def _add(drv):
  a, b, o = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True)
  b.host.view(np.float32)[:] = 4
  return Launcher(drv, add_kernel(), [o.va, a.va, b.va]), o

@pytest.mark.parametrize("action, launches", [(0, False), (1, False), (2, True), (3, True), (8, False), (9, True), (0xA, True), (0xB, True)])
def test_pcas2_actions(action, launches):
  drv = make_driver("NV", 0)
  k, o = _add(drv)
  s = compute_stream(drv)
  s.entry(k.words(action))
  assert drv.run_until_idle()
  assert o.host.view(np.float32).tolist() == ([4.0] * 16 if launches else [0.0] * 16)

@pytest.mark.parametrize("action, msg", [(6, "INCREMENT_PUT (queue-mode QMDs) is not emulated"), (5, "unknown PCAS_ACTION 5"),
                                         (0xF, "unknown PCAS_ACTION 15")])
def test_pcas2_actions_that_fault(action, msg):
  drv = make_driver("NV", 0)
  k, _ = _add(drv)
  s = compute_stream(drv)
  s.entry(k.words(action))
  assert msg in _fault(drv).what

def test_pre_ampere_signaling_pcas_b():
  drv = make_driver("NV", 0)
  k, o = _add(drv)
  s = compute_stream(drv)
  s.entry([*inc(COMPUTE, 0x2B4, k.qmd.va >> 8), *inc(COMPUTE, 0x2BC, 1)])   # INVALIDATE only: no launch
  assert drv.run_until_idle() and not o.host.any()
  s.entry(inc(COMPUTE, 0x2BC, 2))                                            # SCHEDULE
  assert drv.run_until_idle() and o.host.view(np.float32).tolist() == [4.0] * 16

def test_report_semaphore_release():
  drv = make_driver("NV", 0)
  sig = drv.alloc(32, True)
  s = compute_stream(drv)
  s.entry([*inc(COMPUTE, 0x1B00, sig.va >> 32, sig.va & 0xFFFFFFFF, 11, 0), *inc(COMPUTE, 0x1B00, (sig.va + 16) >> 32, (sig.va + 16) & 0xFFFFFFFF, 12,
                                                                                      1 << 28)])
  assert drv.run_until_idle()
  assert u64(sig) == 11 and u64(sig, 8) > 0 and u64(sig, 16) == 12 and u64(sig, 24) == 0   # four words with timer; one word

def test_qmd_release_reduction_and_bad_release_structure():
  drv = make_driver("NV", 0)
  sig = drv.alloc(16, True)
  sig.host[:4] = 5
  k, _ = _add(drv)
  lo, hi = sig.va & 0xFFFFFFFF, sig.va >> 32
  k2 = Launcher(drv, add_kernel(), [k.cb.host.view(np.uint64)[i] for i in range(3)], RELEASE0_ENABLE=1, RELEASE0_STRUCTURE_SIZE=1,
                RELEASE0_REDUCTION_ENABLE=1, RELEASE0_REDUCTION_OP=0, RELEASE0_ADDRESS_LOWER=lo, RELEASE0_ADDRESS_UPPER=hi, RELEASE0_PAYLOAD_LOWER=10)
  s = compute_stream(drv)
  s.entry(k2.words())
  assert drv.run_until_idle() and int(sig.host[:4].view(np.uint32)[0]) == 0x05050505 + 10   # ADD
  k3 = Launcher(drv, add_kernel(), [k.cb.host.view(np.uint64)[i] for i in range(3)], RELEASE1_ENABLE=1, RELEASE1_STRUCTURE_SIZE=3,
                RELEASE1_ADDRESS_LOWER=lo, RELEASE1_ADDRESS_UPPER=hi)
  s.entry([*inc(HOST, 0x78, 1), *k3.words()])   # WFI: k3 writes what k2 wrote (the queue ordering model, README)
  assert "STRUCTURE_SIZE 3 is not a structure size" in _fault(drv).what

@pytest.mark.parametrize("words, msg", [
  (inc(HOST, 0x34, 3 << 27), "MEM_OP_D operation 0x3 is not one the mock knows"),
  (inc(HOST, 0x10, 0), "legacy SEMAPHOREA..D methods are not emulated"),
  (inc(HOST, 0x6C, 7), "OPERATION 7, which is not an operation"),
  ([*inc(COMPUTE, 0x180, 4, 1, 0, 0), *inc(COMPUTE, 0x1B0, 0x40)], "BLOCKLINEAR destinations are not emulated"),
  ([*inc(COMPUTE, 0x1B00, 0, 0, 0), *inc(COMPUTE, 0x1B0C, 3)], "only OPERATION RELEASE is emulated"),
  ([*set_object(COPY, 0xC6B5), *ce_copy(0, 0, 4, 0x102)], "BLOCKLINEAR layouts are not emulated"),
  ([*set_object(COPY, 0xC6B5), *ce_copy(0, 0, 4, 0x182 | (1 << 12))], "PHYSICAL addressing is not emulated"),
  ([*set_object(COPY, 0xC6B5), *inc(COPY, 0x240, 0, 0x1000_0000, 1), *inc(COPY, 0x300, 0x0C | (1 << 19) | (0xA << 14))],
   "SEMAPHORE_REDUCTION 0xa is not emulated"),
])
def test_unsupported_or_invalid_data_faults(words, msg):
  drv = make_driver("NV", 0)
  s = compute_stream(drv)
  s.entry(words)
  assert msg in _fault(drv).what

def test_dependent_qmd_actions_other_than_schedule_fault():
  drv = make_driver("NV", 0)
  k, _ = _add(drv)
  k2 = Launcher(drv, add_kernel(), [k.cb.host.view(np.uint64)[i] for i in range(3)], DEPENDENT_QMD0_ENABLE=1, DEPENDENT_QMD0_ACTION=0,
                DEPENDENT_QMD0_POINTER=k.qmd.va >> 8)
  s = compute_stream(drv)
  s.entry(k2.words())
  assert "DEPENDENT_QMD0_ACTION 0 is not emulated" in _fault(drv).what
