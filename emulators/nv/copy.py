"""Copy engine class C6B5 / C7B5 (docs/hw/NV.md §7): pitch-linear copies (one line, or MULTI_LINE with pitches) and the
semaphore release / reduction of LAUNCH_DMA."""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from emulators.fault import Fault
from emulators.nv import semaphore
from emulators.nv.methods import BLOCKED, DONE, Engine, Method, table
from refgrad.hw import bits
from refgrad.hw import nv as NV
from refgrad.hw.nv import COPY

SET_SEMAPHORE_A, SET_SEMAPHORE_B, SET_SEMAPHORE_PAYLOAD = COPY["SET_SEMAPHORE_A"], COPY["SET_SEMAPHORE_B"], COPY["SET_SEMAPHORE_PAYLOAD"]
OFFSET_IN_UPPER, OFFSET_IN_LOWER, OFFSET_OUT_UPPER, OFFSET_OUT_LOWER = (COPY[k] for k in ("OFFSET_IN_UPPER", "OFFSET_IN_LOWER", "OFFSET_OUT_UPPER",
                                                                                         "OFFSET_OUT_LOWER"))
PITCH_IN, PITCH_OUT, LINE_LENGTH_IN, LINE_COUNT = COPY["PITCH_IN"], COPY["PITCH_OUT"], COPY["LINE_LENGTH_IN"], COPY["LINE_COUNT"]
MAX_BYTES = 1 << 32   # one LAUNCH_DMA moves at most this much (a zero pitch could otherwise ask for 2^64 bytes)
L = NV.CE_LAUNCH_DMA


class CopyEngine(Engine):
  engine = "copy"

  def __init__(self, ch: Any, cls: int):
    super().__init__(ch, cls)
    self.table = TABLE


def _addr(r: dict[int, int], upper: int, lower: int) -> int: return (bits.get(r.get(upper, 0), NV.ADDRESS_UPPER["UPPER"]) << 32) | r.get(lower, 0)

def launch_dma(eng: CopyEngine, v: int) -> int:
  r, ch = eng.regs, eng.ch
  if bits.get(v, L["DATA_TRANSFER_TYPE"]) and not ch.dev.short_copy(_bytes(r, v)): return BLOCKED   # (retried by the worker thread)
  if bits.get(v, L["DATA_TRANSFER_TYPE"]): copy(eng, v)
  sem = bits.get(v, L["SEMAPHORE_TYPE"])
  if sem:
    ch.dev.counters["ce_release"] += 1
    addr = _addr(r, SET_SEMAPHORE_A, SET_SEMAPHORE_B)
    payload = r.get(SET_SEMAPHORE_PAYLOAD, 0)
    # ONE_WORD, FOUR_WORD (payload, 0, ns timer), RELEASE_CONDITIONAL_INTR (a one-word release + interrupt)
    four = sem == NV.CE_SEMAPHORE["RELEASE_FOUR_WORD"]
    what = f"copy-engine LAUNCH_DMA 0x{v:x} {'four' if four else 'one'}-word semaphore"
    semaphore.check_align(addr, 16 if four else 4, "copy", what)
    if bits.get(v, L["SEMAPHORE_REDUCTION_ENABLE"]):
      op = bits.get(v, L["SEMAPHORE_REDUCTION"])
      if op >= len(NV.SEM_REDUCTIONS): raise Fault(f"{what}: SEMAPHORE_REDUCTION {op:#x} is not emulated", "copy", addr)
      semaphore.reduce(ch.dev, ch.pid, addr, NV.SEM_REDUCTIONS[op], payload, 4, not bits.get(v, L["SEMAPHORE_REDUCTION_SIGN"]), "copy", what)
    else: semaphore.release(ch.dev, ch.pid, addr, payload, 4, four, "copy", what)
  return DONE

def _bytes(r: dict[int, int], v: int) -> int:
  n = r.get(LINE_LENGTH_IN, 0)
  return n * (r.get(LINE_COUNT, 0) if bits.get(v, L["MULTI_LINE_ENABLE"]) else 1)


def copy(eng: CopyEngine, v: int) -> None:
  if not (bits.get(v, L["SRC_MEMORY_LAYOUT"]) == bits.get(v, L["DST_MEMORY_LAYOUT"]) == NV.CE_LAYOUT_PITCH):
    raise Fault(f"copy-engine LAUNCH_DMA 0x{v:x}: BLOCKLINEAR layouts are not emulated (set SRC_ and DST_MEMORY_LAYOUT=PITCH)", "copy")
  if bits.get(v, L["SRC_TYPE"]) or bits.get(v, L["DST_TYPE"]):
    raise Fault(f"copy-engine LAUNCH_DMA 0x{v:x}: PHYSICAL addressing is not emulated", "copy")
  r, ch = eng.regs, eng.ch
  vm = ch.dev.vm
  src, dst = _addr(r, OFFSET_IN_UPPER, OFFSET_IN_LOWER), _addr(r, OFFSET_OUT_UPPER, OFFSET_OUT_LOWER)
  n = r.get(LINE_LENGTH_IN, 0)
  lines, pin, pout = (r.get(LINE_COUNT, 0), r.get(PITCH_IN, 0), r.get(PITCH_OUT, 0)) if bits.get(v, L["MULTI_LINE_ENABLE"]) else (1, n, n)
  ch.dev.counters["ce_copy"] += 1
  if n == 0 or lines == 0: return
  if lines * n > MAX_BYTES:
    raise Fault(f"copy-engine LAUNCH_DMA: {lines} lines of {n} bytes is more than the {MAX_BYTES} bytes one launch may move here", "copy")
  # every line lies in one mapping for source and destination: check the first and last lines' ends
  span_in, span_out = (lines - 1) * pin + n, (lines - 1) * pout + n
  sr, so = vm.resolve(src, span_in, "copy", f"copy source ({lines} x {n} bytes)")
  dr, do = vm.resolve(dst, span_out, "copy", f"copy destination ({lines} x {n} bytes)")
  what = f"{ch.where()}: copy of {lines * n} bytes 0x{src:x} -> 0x{dst:x}"
  ch.dev.hz.access(ch.pid, sr.va, [(src, src + span_in, False)], what)
  ch.dev.hz.access(ch.pid, dr.va, [(dst, dst + span_out, True)], what)
  if lines == 1 or (pin == n and pout == n):
    dr.mem.write(sr.mem.data[so:so + span_in], do)
    dr.carry(do, sr, so, span_in)
  else:   # lines x n bytes at the pitches, in one numpy assignment (line order is kept where destination lines overlap)
    src2d = as_strided(sr.mem.data[so:], (lines, n), (pin, 1), writeable=False)
    as_strided(dr.mem.data[do:], (lines, n), (pout, 1))[...] = np.array(src2d) if sr is dr else src2d
    dr.mark_defined((do + np.arange(lines, dtype=np.int64)[:, None] * pout + np.arange(n, dtype=np.int64)).reshape(-1))


TABLE = table("C6B5", [Method(name, off, launch_dma if name == "LAUNCH_DMA" else None) for name, off in COPY.items() if name != "SET_OBJECT"])
