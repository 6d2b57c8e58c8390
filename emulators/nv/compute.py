"""Compute class C6C0 / C7C0 (docs/hw/NV.md §5): inline upload, QMD launch (SEND_PCAS_A + SEND_SIGNALING_PCAS2_B, or the inline
QMD path), QMD release semaphores and dependent QMDs; other state methods are latched."""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators import dispatch
from emulators.fault import Fault
from emulators.nv import qmd as Q
from emulators.nv import semaphore
from emulators.nv.methods import BLOCKED, DONE, Engine, Method, table
from refgrad.hw import bits
from refgrad.hw import nv as NV
from refgrad.hw.nv import COMPUTE

LINE_LENGTH_IN, LINE_COUNT, OFFSET_OUT_UPPER, OFFSET_OUT = (COMPUTE[k] for k in ("LINE_LENGTH_IN", "LINE_COUNT", "OFFSET_OUT_UPPER", "OFFSET_OUT"))
SEND_PCAS_A, SET_INLINE_QMD_ADDRESS_A, SET_INLINE_QMD_ADDRESS_B = (COMPUTE[k] for k in ("SEND_PCAS_A", "SET_INLINE_QMD_ADDRESS_A", "SET_INLINE_QMD_ADDRESS_B"))
SET_REPORT_SEMAPHORE_A, SET_REPORT_SEMAPHORE_B, SET_REPORT_SEMAPHORE_C = (COMPUTE[f"SET_REPORT_SEMAPHORE_{c}"] for c in "ABC")
UPPER = NV.ADDRESS_UPPER["UPPER"]
ILD = NV.INLINE_LAUNCH_DMA
MAX_DEPENDENT = 64


class ComputeEngine(Engine):
  engine = "compute"

  def __init__(self, ch: Any, cls: int):
    super().__init__(ch, cls)
    self.table = TABLE
    self.upload: list[Any] | None = None          # [dst VA, bytes, uint32 buffer, dwords received]
    self.inline_qmd = [0] * NV.QMD_DWORDS

  def reset(self) -> None: self.upload = None


# ---- inline upload ----------------------------------------------------------------------------
def launch_dma(eng: ComputeEngine, v: int) -> int | None:
  if bits.get(v, ILD["DST_MEMORY_LAYOUT"]) != NV.CE_LAYOUT_PITCH:
    raise Fault(f"inline-upload LAUNCH_DMA 0x{v:x}: BLOCKLINEAR destinations are not emulated (set DST_MEMORY_LAYOUT=PITCH)", "compute")
  if bits.get(v, ILD["REDUCTION_ENABLE"]): raise Fault(f"inline-upload LAUNCH_DMA 0x{v:x}: REDUCTION_ENABLE is not emulated", "compute")
  if bits.get(v, ILD["COMPLETION_TYPE"]) == NV.INLINE_COMPLETION["RELEASE_SEMAPHORE"]:
    raise Fault(f"inline-upload LAUNCH_DMA 0x{v:x}: COMPLETION_TYPE RELEASE_SEMAPHORE is not emulated", "compute")
  r = eng.regs
  dst = (bits.get(r.get(OFFSET_OUT_UPPER, 0), UPPER) << 32) | r.get(OFFSET_OUT, 0)
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
  action = bits.get(v, NV.SEND_SIGNALING_PCAS2_B["PCAS_ACTION"])
  if (a := NV.PCAS_ACTIONS.get(action)) is None: raise Fault(f"SEND_SIGNALING_PCAS2_B: unknown PCAS_ACTION {action}", "compute")
  if a[1] is None: raise Fault(f"SEND_SIGNALING_PCAS2_B: PCAS_ACTION {a[0]} (queue-mode QMDs) is not emulated", "compute")
  if not a[1]: return None
  return DONE if launch(eng, eng.regs.get(SEND_PCAS_A, 0) << NV.QMD_ADDRESS_SHIFT) else BLOCKED

def send_pcas_b(eng: ComputeEngine, v: int) -> int | None:
  """Pre-Ampere kick: bit 1 SCHEDULE."""
  if not bits.get(v, NV.SEND_SIGNALING_PCAS_B["SCHEDULE"]): return None
  return DONE if launch(eng, eng.regs.get(SEND_PCAS_A, 0) << NV.QMD_ADDRESS_SHIFT) else BLOCKED

def inline_qmd(i: int) -> Method:
  def load(eng: ComputeEngine, v: int) -> int | None:
    eng.inline_qmd[i] = v
    if i < NV.QMD_DWORDS - 1: return None
    r = eng.regs
    va = ((r.get(SET_INLINE_QMD_ADDRESS_A, 0) << 32) | r.get(SET_INLINE_QMD_ADDRESS_B, 0)) << NV.QMD_ADDRESS_SHIFT
    eng.ch.dev.vm.write(va, np.array(eng.inline_qmd, np.uint32).view(np.uint8), "compute", "inline QMD")
    return DONE if launch(eng, va) else BLOCKED
  return Method(f"LOAD_INLINE_QMD_DATA({i})", COMPUTE["LOAD_INLINE_QMD_DATA"] + 4 * i, load)

def report_semaphore_d(eng: ComputeEngine, v: int) -> int | None:
  r, ch = eng.regs, eng.ch
  if bits.get(v, NV.SET_REPORT_SEMAPHORE_D["OPERATION"]) != 0:
    raise Fault(f"SET_REPORT_SEMAPHORE_D 0x{v:x}: only OPERATION RELEASE is emulated", "compute")
  addr = (bits.get(r.get(SET_REPORT_SEMAPHORE_A, 0), NV.SEM_ADDR_HI["ADDRESS_HI"]) << 32) | r.get(SET_REPORT_SEMAPHORE_B, 0)
  four = not bits.get(v, NV.SET_REPORT_SEMAPHORE_D["STRUCTURE_SIZE"])
  semaphore.check_align(addr, 16 if four else 4, "compute", "SET_REPORT_SEMAPHORE release")
  semaphore.release(ch.dev, ch.pid, addr, r.get(SET_REPORT_SEMAPHORE_C, 0), 4, four, "compute", "SET_REPORT_SEMAPHORE release")
  return DONE


def launch(eng: ComputeEngine, qmd_va: int, depth: int = 0, chain: int | None = None) -> bool:
  """Decode and check the QMD, run the kernel over its grid, then its releases and dependent QMD (which starts when the
  grid finishes: one in-flight unit with it, `chain`). False (nothing done) where the driver polls inline and the
  launch is not known to be short (MockDriver.short): the method is retried on a later poll."""
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
  cb_va = Q.address(q, "CONSTANT_BUFFER_ADDR_LOWER(0)", "CONSTANT_BUFFER_ADDR_UPPER(0)")
  if q["CONSTANT_BUFFER_SIZE_SHIFTED4(0)"] * 16 < k.arg_bytes:
    raise Fault(f"{where}: constant buffer 0 holds {q['CONSTANT_BUFFER_SIZE_SHIFTED4(0)'] * 16} bytes (SIZE_SHIFTED4 = "
                f"{q['CONSTANT_BUFFER_SIZE_SHIFTED4(0)']}) but the kernel's {k.nglobals} buffers and {k.nvars} variables need {k.arg_bytes}",
                "compute", cb_va, k.name)
  chained = bool(q["DEPENDENT_QMD0_ENABLE"])
  key = (k, grid, block, chained)   # (a chain's cost is never recorded: a chain is never known to be short)
  if depth == 0 and not dev.short(key): return False
  dev.counters["qmd_launch"] += 1
  # in flight until an ordering command; its own releases and dependent QMD follow its grid, so it runs now then
  own = any(q[f"RELEASE{i}_ENABLE"] for i in range(3)) or chained
  seq = dispatch.run(dev, ch.pid, ch.where(), k, cb_va, "constant buffer 0", "compute", grid, block, ch.flight, own, chain,
                     shared=q["SHARED_MEMORY_SIZE"], cost=None if chained else key)
  epoch = dev.hz.clocks[ch.pid][ch.pid]
  for i in range(3):
    if q[f"RELEASE{i}_ENABLE"]: release(ch, Q.decode(words, Q.RELEASE_FIELDS[i]), i, epoch)
  if q["DEPENDENT_QMD0_ENABLE"]:
    act = q["DEPENDENT_QMD0_ACTION"]
    if act not in (1, 3): raise Fault(f"{where}: DEPENDENT_QMD0_ACTION {act} is not emulated (only SCHEDULE)", "compute", qmd_va)
    if depth >= MAX_DEPENDENT: raise Fault(f"{where}: more than {MAX_DEPENDENT} dependent QMDs in a chain (a cycle?)", "compute", qmd_va)
    launch(eng, q["DEPENDENT_QMD0_POINTER"] << NV.QMD_ADDRESS_SHIFT, depth + 1, seq)
  return True

def release(ch: Any, q: dict[str, int], i: int, done: int | None = None) -> None:
  """QMD release i, written when the grid (epoch `done` for the hazard checker) finishes; it does not wait for others."""
  p = f"RELEASE{i}_"
  if not q[p + "ENABLE"]: return
  addr = Q.address(q, p + "ADDRESS_LOWER", p + "ADDRESS_UPPER")
  size = q[p + "STRUCTURE_SIZE"]
  if size not in NV.QMD_STRUCTURE_SIZES:
    raise Fault(f"QMD {p}STRUCTURE_SIZE 3 is not a structure size (0 FOUR_WORDS, 1 ONE_WORD, 2 TWO_WORDS)", "compute", addr)
  is64 = bool(q[p + "PAYLOAD64B"]) and size != 1
  nbytes = 8 if is64 else 4
  payload = q[p + "PAYLOAD_LOWER"] | ((q[p + "PAYLOAD_UPPER"] << 32) if is64 else 0)
  what = f"QMD {p[:-1]} semaphore"
  semaphore.check_align(addr, 16 if size == 0 else nbytes, "compute", what)
  if q[p + "REDUCTION_ENABLE"]:
    red = NV.QMD_REDUCTIONS[q[p + "REDUCTION_OP"]]
    semaphore.reduce(ch.dev, ch.pid, addr, red, payload, nbytes, q[p + "REDUCTION_FORMAT"] == 1, "compute", what, done)
  else: semaphore.release(ch.dev, ch.pid, addr, payload, nbytes, size == 0, "compute", what, done)


ACTIONS: dict[str, tuple[Any, bool]] = {   # method -> (action, takes all data dwords of a NON_INC header at once)
  "LAUNCH_DMA": (launch_dma, False), "LOAD_INLINE_DATA": (load_inline_data, True), "SEND_SIGNALING_PCAS_B": (send_pcas_b, False),
  "SEND_SIGNALING_PCAS2_B": (send_pcas2_b, False), "SET_REPORT_SEMAPHORE_D": (report_semaphore_d, False)}
TABLE = table("C6C0", [*(Method(name, off, *ACTIONS.get(name, (None, False))) for name, off in COMPUTE.items()
                         if name not in ("SET_OBJECT", "LOAD_INLINE_QMD_DATA")),   # SET_OBJECT is a host method (below 0x100)
                       *(inline_qmd(i) for i in range(NV.QMD_DWORDS))])
