"""Compute class C6C0 / C7C0 (NV.md §5): inline upload, QMD launch (SEND_PCAS_A + SEND_SIGNALING_PCAS2_B, or the inline
QMD path), QMD release semaphores and dependent QMDs; other state methods are latched."""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators import dispatch
from emulators.fault import Fault
from emulators.nv import qmd as Q
from emulators.nv import semaphore
from emulators.nv.methods import DONE, Method, field, table

LINE_LENGTH_IN, LINE_COUNT, OFFSET_OUT_UPPER, OFFSET_OUT = 0x180, 0x184, 0x188, 0x18C
SEND_PCAS_A, SET_INLINE_QMD_ADDRESS_A, SET_INLINE_QMD_ADDRESS_B, LOAD_INLINE_QMD_DATA = 0x2B4, 0x318, 0x31C, 0x320
SET_REPORT_SEMAPHORE_A, SET_REPORT_SEMAPHORE_B, SET_REPORT_SEMAPHORE_C = 0x1B00, 0x1B04, 0x1B08
# SEND_SIGNALING_PCAS2_B PCAS_ACTION -> (name, launches the QMD)
PCAS_ACTIONS = {0: ("NOP", False), 1: ("INVALIDATE", False), 2: ("SCHEDULE", True), 3: ("INVALIDATE_COPY_SCHEDULE", True),
                6: ("INCREMENT_PUT", None), 7: ("DECREMENT_DEPENDENCE", None), 8: ("PREFETCH", False), 9: ("PREFETCH_SCHEDULE", True),
                0xA: ("INVALIDATE_PREFETCH_COPY_SCHEDULE", True), 0xB: ("INVALIDATE_PREFETCH_COPY_FORCE_REQUIRE_SCHEDULING", True)}
# QMD RELEASEn_REDUCTION_OP -> the semaphore reduction
QMD_REDUCTIONS = ("IADD", "IMIN", "IMAX", "INC", "DEC", "IAND", "IOR", "IXOR")
MAX_DEPENDENT = 64


class ComputeEngine:
  engine = "compute"

  def __init__(self, ch: Any, cls: int):
    self.ch, self.cls = ch, cls
    self.label = f"{cls:04X} ({'AMPERE_COMPUTE_A' if cls == 0xC6C0 else 'AMPERE_COMPUTE_B'})"
    self.regs: dict[int, int] = {}
    self.table = TABLE
    self.upload: list[Any] | None = None          # [dst VA, bytes, uint32 buffer, dwords received]
    self.inline_qmd = [0] * 64

  def reset(self) -> None: self.upload = None


# ---- inline upload ----------------------------------------------------------------------------
def launch_dma(eng: ComputeEngine, v: int) -> int | None:
  if not field(v, 0, 0): raise Fault(f"inline-upload LAUNCH_DMA 0x{v:x}: BLOCKLINEAR destinations are not emulated (set DST_MEMORY_LAYOUT=PITCH)", "compute")
  if field(v, 1, 1): raise Fault(f"inline-upload LAUNCH_DMA 0x{v:x}: REDUCTION_ENABLE is not emulated", "compute")
  if field(v, 5, 4) == 2: raise Fault(f"inline-upload LAUNCH_DMA 0x{v:x}: COMPLETION_TYPE RELEASE_SEMAPHORE is not emulated", "compute")
  r = eng.regs
  dst = (field(r.get(OFFSET_OUT_UPPER, 0), 16, 0) << 32) | r.get(OFFSET_OUT, 0)
  nbytes = r.get(LINE_LENGTH_IN, 0) * r.get(LINE_COUNT, 1)
  eng.ch.dev.vm.resolve(dst, nbytes, "compute", "inline-upload destination")
  if nbytes == 0: return DONE
  eng.upload = [dst, nbytes, np.empty(-(-nbytes // 4), np.uint32), 0]
  return None

def load_inline_data(eng: ComputeEngine, data: np.ndarray) -> int | None:
  if eng.upload is None: raise Fault("LOAD_INLINE_DATA with no inline upload in progress (LINE_LENGTH_IN, LINE_COUNT, OFFSET_OUT and LAUNCH_DMA first)",
                                     "compute")
  dst, nbytes, buf, got = eng.upload
  if got + data.size > buf.size:
    raise Fault(f"LOAD_INLINE_DATA sends {got + data.size} dwords, more than the {buf.size} the inline upload of {nbytes} bytes needs", "compute")
  buf[got:got + data.size] = data
  eng.upload[3] = got + data.size
  if got + data.size < buf.size: return None
  eng.upload = None
  ch = eng.ch
  ch.dev.counters["inline_upload"] += 1
  ch.dev.vm.write(dst, buf.view(np.uint8)[:nbytes], "compute", "inline-upload destination")
  r = ch.dev.vm.find(dst)
  ch.dev.hz.access(ch.pid, r.va, [(dst, dst + nbytes, True)], f"{ch.where()}: inline upload of {nbytes} bytes")
  return DONE


# ---- launches ---------------------------------------------------------------------------------
def send_pcas2_b(eng: ComputeEngine, v: int) -> int | None:
  action = field(v, 3, 0)
  if (a := PCAS_ACTIONS.get(action)) is None: raise Fault(f"SEND_SIGNALING_PCAS2_B: unknown PCAS_ACTION {action}", "compute")
  if a[1] is None: raise Fault(f"SEND_SIGNALING_PCAS2_B: PCAS_ACTION {a[0]} (queue-mode QMDs) is not emulated", "compute")
  if not a[1]: return None
  launch(eng, eng.regs.get(SEND_PCAS_A, 0) << 8)
  return DONE

def send_pcas_b(eng: ComputeEngine, v: int) -> int | None:
  """Pre-Ampere kick: bit 1 SCHEDULE."""
  if not field(v, 1, 1): return None
  launch(eng, eng.regs.get(SEND_PCAS_A, 0) << 8)
  return DONE

def inline_qmd(i: int) -> Method:
  def load(eng: ComputeEngine, v: int) -> int | None:
    eng.inline_qmd[i] = v
    if i < 63: return None
    r = eng.regs
    va = ((r.get(SET_INLINE_QMD_ADDRESS_A, 0) << 32) | r.get(SET_INLINE_QMD_ADDRESS_B, 0)) << 8
    eng.ch.dev.vm.write(va, np.array(eng.inline_qmd, np.uint32).view(np.uint8), "compute", "inline QMD")
    launch(eng, va)
    return DONE
  return Method(f"LOAD_INLINE_QMD_DATA({i})", LOAD_INLINE_QMD_DATA + 4 * i, load)

def report_semaphore_d(eng: ComputeEngine, v: int) -> int | None:
  r, ch = eng.regs, eng.ch
  if field(v, 1, 0) != 0: raise Fault(f"SET_REPORT_SEMAPHORE_D 0x{v:x}: only OPERATION RELEASE is emulated", "compute")
  addr = (field(r.get(SET_REPORT_SEMAPHORE_A, 0), 7, 0) << 32) | r.get(SET_REPORT_SEMAPHORE_B, 0)
  four = not field(v, 28, 28)
  semaphore.check_align(addr, 16 if four else 4, "compute", "SET_REPORT_SEMAPHORE release")
  semaphore.release(ch.dev, ch.pid, addr, r.get(SET_REPORT_SEMAPHORE_C, 0), 4, four, "compute", "SET_REPORT_SEMAPHORE release")
  return DONE


def launch(eng: ComputeEngine, qmd_va: int, depth: int = 0, chain: int | None = None) -> None:
  """Decode and check the QMD, run the kernel over its grid, then its releases and dependent QMD (which starts when the
  grid finishes: one in-flight unit with it, `chain`)."""
  ch = eng.ch
  dev, vm = ch.dev, ch.dev.vm
  words = vm.bytes(qmd_va, Q.QMD_BYTES, "compute", "QMD").view(np.uint32).tolist()
  q = Q.decode(words, Q.LAUNCH_FIELDS)
  grid, block = Q.check(q, qmd_va)
  prg_va = Q.address(q, "PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER")
  k = dispatch.load_program(vm, prg_va, "compute", f"PROGRAM_ADDRESS of the QMD at 0x{qmd_va:x}")
  where = f"QMD at 0x{qmd_va:x} launching kernel {k.name}"
  if q["SHARED_MEMORY_SIZE"] < k.shared_bytes:
    raise Fault(f"{where}: SHARED_MEMORY_SIZE is {q['SHARED_MEMORY_SIZE']} bytes but the kernel's DEFINE_LOCALs need {k.shared_bytes}",
                "compute", qmd_va, k.name)
  cb_va = Q.address(q, "CONSTANT_BUFFER_ADDR_LOWER0", "CONSTANT_BUFFER_ADDR_UPPER0")
  if q["CONSTANT_BUFFER_SIZE_SHIFTED4_0"] * 16 < k.arg_bytes:
    raise Fault(f"{where}: constant buffer 0 holds {q['CONSTANT_BUFFER_SIZE_SHIFTED4_0'] * 16} bytes (SIZE_SHIFTED4 = "
                f"{q['CONSTANT_BUFFER_SIZE_SHIFTED4_0']}) but the kernel's {k.nglobals} buffers and {k.nvars} variables need {k.arg_bytes}",
                "compute", cb_va, k.name)
  dev.counters["qmd_launch"] += 1
  # in flight until an ordering command; its own releases and dependent QMD follow its grid, so it runs now then
  own = any(q[f"RELEASE{i}_ENABLE"] for i in range(3)) or bool(q["DEPENDENT_QMD0_ENABLE"])
  seq = dispatch.run(dev, ch.pid, ch.where(), k, cb_va, "constant buffer 0", "compute", grid, block, ch.flight, own, chain,
                     shared=q["SHARED_MEMORY_SIZE"])
  epoch = dev.hz.clocks[ch.pid][ch.pid]
  for i in range(3):
    if q[f"RELEASE{i}_ENABLE"]: release(ch, Q.decode(words, Q.RELEASE_FIELDS[i]), i, epoch)
  if q["DEPENDENT_QMD0_ENABLE"]:
    act = q["DEPENDENT_QMD0_ACTION"]
    if act not in (1, 3): raise Fault(f"{where}: DEPENDENT_QMD0_ACTION {act} is not emulated (only SCHEDULE)", "compute", qmd_va)
    if depth >= MAX_DEPENDENT: raise Fault(f"{where}: more than {MAX_DEPENDENT} dependent QMDs in a chain (a cycle?)", "compute", qmd_va)
    launch(eng, q["DEPENDENT_QMD0_POINTER"] << 8, depth + 1, seq)

def release(ch: Any, q: dict[str, int], i: int, done: int | None = None) -> None:
  """QMD release i, written when the grid (epoch `done` for the hazard checker) finishes; it does not wait for others."""
  p = f"RELEASE{i}_"
  if not q[p + "ENABLE"]: return
  addr = Q.address(q, p + "ADDRESS_LOWER", p + "ADDRESS_UPPER")
  size = q[p + "STRUCTURE_SIZE"]
  if size == 3: raise Fault(f"QMD {p}STRUCTURE_SIZE 3 is not a structure size (0 FOUR_WORDS, 1 ONE_WORD, 2 TWO_WORDS)", "compute", addr)
  is64 = bool(q[p + "PAYLOAD64B"]) and size != 1
  nbytes = 8 if is64 else 4
  payload = q[p + "PAYLOAD_LOWER"] | ((q[p + "PAYLOAD_UPPER"] << 32) if is64 else 0)
  what = f"QMD {p[:-1]} semaphore"
  semaphore.check_align(addr, 16 if size == 0 else nbytes, "compute", what)
  if q[p + "REDUCTION_ENABLE"]:
    semaphore.reduce(ch.dev, ch.pid, addr, QMD_REDUCTIONS[q[p + "REDUCTION_OP"]], payload, nbytes, q[p + "REDUCTION_FORMAT"] == 1, "compute", what, done)
  else: semaphore.release(ch.dev, ch.pid, addr, payload, nbytes, size == 0, "compute", what, done)


TABLE = table("C6C0", [
  Method("NO_OPERATION", 0x100), Method("WAIT_FOR_IDLE", 0x110), Method("PM_TRIGGER", 0x140),
  Method("LINE_LENGTH_IN", LINE_LENGTH_IN), Method("LINE_COUNT", LINE_COUNT),
  Method("OFFSET_OUT_UPPER", OFFSET_OUT_UPPER), Method("OFFSET_OUT", OFFSET_OUT),
  Method("LAUNCH_DMA", 0x1B0, launch_dma), Method("LOAD_INLINE_DATA", 0x1B4, load_inline_data, bulk=True),
  Method("INVALIDATE_SHADER_CACHES", 0x21C), Method("SET_QMD_VERSION", 0x288), Method("INVALIDATE_SKED_CACHES", 0x298),
  Method("SET_SHADER_SHARED_MEMORY_WINDOW_A", 0x2A0), Method("SET_SHADER_SHARED_MEMORY_WINDOW_B", 0x2A4),
  Method("SEND_PCAS_A", SEND_PCAS_A), Method("SEND_PCAS_B", 0x2B8),
  Method("SEND_SIGNALING_PCAS_B", 0x2BC, send_pcas_b), Method("SEND_SIGNALING_PCAS2_B", 0x2C0, send_pcas2_b),
  Method("SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A", 0x2E4), Method("SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B", 0x2E8),
  Method("SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C", 0x2EC), Method("SET_SPA_VERSION", 0x310),
  Method("SET_INLINE_QMD_ADDRESS_A", SET_INLINE_QMD_ADDRESS_A), Method("SET_INLINE_QMD_ADDRESS_B", SET_INLINE_QMD_ADDRESS_B),
  *(inline_qmd(i) for i in range(64)),
  Method("SET_SHADER_LOCAL_MEMORY_A", 0x790), Method("SET_SHADER_LOCAL_MEMORY_B", 0x794),
  Method("SET_SHADER_LOCAL_MEMORY_WINDOW_A", 0x7B0), Method("SET_SHADER_LOCAL_MEMORY_WINDOW_B", 0x7B4),
  Method("INVALIDATE_SHADER_CACHES_NO_WFI", 0x1698),
  Method("SET_REPORT_SEMAPHORE_A", SET_REPORT_SEMAPHORE_A), Method("SET_REPORT_SEMAPHORE_B", SET_REPORT_SEMAPHORE_B),
  Method("SET_REPORT_SEMAPHORE_C", SET_REPORT_SEMAPHORE_C), Method("SET_REPORT_SEMAPHORE_D", 0x1B0C, report_semaphore_d),
])
