"""Copy engine class C6B5 / C7B5 (NV.md §7): pitch-linear copies (one line, or MULTI_LINE with pitches) and the
semaphore release / reduction of LAUNCH_DMA."""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from emulators.fault import Fault
from emulators.nv import semaphore
from emulators.nv.methods import DONE, Method, field, table

SET_SEMAPHORE_A, SET_SEMAPHORE_B, SET_SEMAPHORE_PAYLOAD = 0x240, 0x244, 0x248
OFFSET_IN_UPPER, OFFSET_IN_LOWER, OFFSET_OUT_UPPER, OFFSET_OUT_LOWER = 0x400, 0x404, 0x408, 0x40C
PITCH_IN, PITCH_OUT, LINE_LENGTH_IN, LINE_COUNT = 0x410, 0x414, 0x418, 0x41C
MAX_BYTES = 1 << 32   # one LAUNCH_DMA moves at most this much (a zero pitch could otherwise ask for 2^64 bytes)
CE_REDUCTIONS = {0: "IMIN", 1: "IMAX", 2: "IXOR", 3: "IAND", 4: "IOR", 5: "IADD", 6: "INC", 7: "DEC"}


class CopyEngine:
  engine = "copy"

  def __init__(self, ch: Any, cls: int):
    self.ch, self.cls = ch, cls
    self.label = f"{cls:04X} ({'AMPERE_DMA_COPY_A' if cls == 0xC6B5 else 'AMPERE_DMA_COPY_B'})"
    self.regs: dict[int, int] = {}
    self.table = TABLE

  def reset(self) -> None: pass


def _addr(r: dict[int, int], upper: int, lower: int) -> int: return (field(r.get(upper, 0), 16, 0) << 32) | r.get(lower, 0)

def launch_dma(eng: CopyEngine, v: int) -> int:
  r, ch = eng.regs, eng.ch
  if field(v, 1, 0): copy(eng, v)
  sem = field(v, 4, 3)
  if sem:
    ch.dev.counters["ce_release"] += 1
    addr = _addr(r, SET_SEMAPHORE_A, SET_SEMAPHORE_B)
    payload = r.get(SET_SEMAPHORE_PAYLOAD, 0)
    four = sem == 2   # 1 ONE_WORD, 2 FOUR_WORD (payload, 0, ns timer), 3 RELEASE_CONDITIONAL_INTR (a one-word release + interrupt)
    what = f"copy-engine LAUNCH_DMA 0x{v:x} {'four' if four else 'one'}-word semaphore"
    semaphore.check_align(addr, 16 if four else 4, "copy", what)
    if field(v, 19, 19):
      op = field(v, 17, 14)
      if op not in CE_REDUCTIONS: raise Fault(f"{what}: SEMAPHORE_REDUCTION {op:#x} is not emulated", "copy", addr)
      semaphore.reduce(ch.dev, ch.pid, addr, CE_REDUCTIONS[op], payload, 4, not field(v, 18, 18), "copy", what)
    else: semaphore.release(ch.dev, ch.pid, addr, payload, 4, four, "copy", what)
  return DONE

def copy(eng: CopyEngine, v: int) -> None:
  if not (field(v, 7, 7) and field(v, 8, 8)):
    raise Fault(f"copy-engine LAUNCH_DMA 0x{v:x}: BLOCKLINEAR layouts are not emulated (set SRC_ and DST_MEMORY_LAYOUT=PITCH)", "copy")
  if field(v, 12, 12) or field(v, 13, 13): raise Fault(f"copy-engine LAUNCH_DMA 0x{v:x}: PHYSICAL addressing is not emulated", "copy")
  r, ch = eng.regs, eng.ch
  vm = ch.dev.vm
  src, dst = _addr(r, OFFSET_IN_UPPER, OFFSET_IN_LOWER), _addr(r, OFFSET_OUT_UPPER, OFFSET_OUT_LOWER)
  n = r.get(LINE_LENGTH_IN, 0)
  lines, pin, pout = (r.get(LINE_COUNT, 0), r.get(PITCH_IN, 0), r.get(PITCH_OUT, 0)) if field(v, 9, 9) else (1, n, n)
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


TABLE = table("C6B5", [
  Method("NOP", 0x100),
  Method("SET_SEMAPHORE_A", SET_SEMAPHORE_A), Method("SET_SEMAPHORE_B", SET_SEMAPHORE_B), Method("SET_SEMAPHORE_PAYLOAD", SET_SEMAPHORE_PAYLOAD),
  Method("SET_SRC_PHYS_MODE", 0x260), Method("SET_DST_PHYS_MODE", 0x264),
  Method("LAUNCH_DMA", 0x300, launch_dma),
  Method("OFFSET_IN_UPPER", OFFSET_IN_UPPER), Method("OFFSET_IN_LOWER", OFFSET_IN_LOWER),
  Method("OFFSET_OUT_UPPER", OFFSET_OUT_UPPER), Method("OFFSET_OUT_LOWER", OFFSET_OUT_LOWER),
  Method("PITCH_IN", PITCH_IN), Method("PITCH_OUT", PITCH_OUT), Method("LINE_LENGTH_IN", LINE_LENGTH_IN), Method("LINE_COUNT", LINE_COUNT),
])
