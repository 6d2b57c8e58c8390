"""The copy queue's SDMA packets (AMD.md §5, SDMA v5.2/v6): one row per (OP, SUB_OP): name, size rule, action.

Every packet starts with a header dword (OP 7:0, SUB_OP 15:8). Sizes in dwords: NOP 1 + COUNT 29:16 (so a zero dword is a
one-dword NOP: the runtime pads the end of the ring with zeros), COPY_LINEAR 7, WRITE linear 5 + COUNT, FENCE 4, TRAP 2,
POLL_REGMEM 6, TIMESTAMP 3, CONSTANT_FILL 5, GCR_REQ 5. CONSTANT_FILL's layout is not in the fact sheet: dw1/dw2
destination, dw3 the 32-bit pattern, dw4 COUNT = bytes - 1, FILLSIZE 31:30 in the header (as Linux's emit_fill_buffer
writes it; 0 and 2 fill with the dword pattern here). Actions return None / DONE / BLOCKED as in `pm4`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from emulators.amd.pm4 import BLOCKED, DONE, bits, poll_memory
from emulators.fault import Fault

MAX_COPY = 1 << 30   # COPY_LINEAR COUNT 29:0 = bytes - 1


class Packet(NamedTuple):
  name: str
  dwords: Callable[[int], int]                           # header -> total dwords
  action: Callable[[Any, list[int]], int | None] | None = None


class CopyEngine:
  engine = "copy"
  def __init__(self, ch: Any):
    self.ch = ch
    self.table = TABLE
  def reset(self) -> None: pass


def _addr(w: list[int], i: int) -> int: return w[i] | (w[i + 1] << 32)

def copy_linear(eng: CopyEngine, w: list[int]) -> int:
  ch = eng.ch
  vm = ch.dev.vm
  for b, nm in ((16, "ENCRYPT"), (18, "TMZ"), (25, "BACKWARDS"), (27, "BROADCAST")):
    if bits(w[0], b, b): raise Fault(f"COPY_LINEAR header 0x{w[0]:08x}: {nm} is not emulated", "copy")
  if bits(w[2], 17, 16) or bits(w[2], 25, 24): raise Fault(f"COPY_LINEAR dword 2 0x{w[2]:08x}: byte swaps are not emulated", "copy")
  n = bits(w[1], 29, 0) + 1
  src, dst = _addr(w, 3), _addr(w, 5)
  sr, so = vm.resolve(src, n, "copy", f"COPY_LINEAR source ({n} bytes)")
  dr, do = vm.resolve(dst, n, "copy", f"COPY_LINEAR destination ({n} bytes)")
  what = f"{ch.where()}: copy of {n} bytes 0x{src:x} -> 0x{dst:x}"
  ch.dev.hz.access(ch.pid, sr.va, [(src, src + n, False)], what)
  ch.dev.hz.access(ch.pid, dr.va, [(dst, dst + n, True)], what)
  data = sr.mem.data[so:so + n]
  dr.mem.write(data.copy() if sr is dr else data, do)
  dr.carry(do, sr, so, n)
  ch.dev.counters["sdma_copy"] += 1
  return DONE

def write_linear(eng: CopyEngine, w: list[int]) -> int:
  ch = eng.ch
  dst = _addr(w, 1)
  data = np.array(w[4:], np.uint32).view(np.uint8)
  r, _ = ch.dev.vm.resolve(dst, data.size, "copy", f"WRITE linear destination ({data.size} bytes)")
  ch.dev.hz.access(ch.pid, r.va, [(dst, dst + data.size, True)], f"{ch.where()}: write of {data.size} bytes to 0x{dst:x}")
  ch.dev.vm.write(dst, data, "copy", "WRITE linear destination")
  return DONE

def fence(eng: CopyEngine, w: list[int]) -> int:
  ch = eng.ch
  addr = _addr(w, 1)
  if addr % 4: raise Fault(f"misaligned semaphore: FENCE at 0x{addr:x} must be 4-byte aligned", "copy", addr)
  ch.dev.vm.write_uint(addr, 4, w[3], "copy", "FENCE")
  ch.dev.hz.release(ch.pid, addr, w[3], 4)
  ch.dev.counters["fence"] += 1
  return DONE

def trap(eng: CopyEngine, w: list[int]) -> int:
  eng.ch.interrupts.append(bits(w[1], 27, 0))
  return DONE

def poll_regmem(eng: CopyEngine, w: list[int]) -> int | None:
  if not bits(w[0], 31, 31): raise Fault("POLL_REGMEM on a register (MEM_POLL 0) is not emulated", "copy")
  r = poll_memory(eng.ch, "copy", _addr(w, 1), 4, bits(w[0], 30, 28), w[3], w[4], "POLL_REGMEM semaphore")
  return r if r is not None else DONE

def timestamp(eng: CopyEngine, w: list[int]) -> int:
  ch = eng.ch
  addr = _addr(w, 1)
  if addr % 8: raise Fault(f"misaligned semaphore: TIMESTAMP at 0x{addr:x} must be 8-byte aligned", "copy", addr)
  ch.dev.vm.write_uint(addr, 8, ch.dev.read_timer(), "copy", "TIMESTAMP")
  return DONE

def timestamp_set(eng: CopyEngine, w: list[int]) -> None:
  raise Fault("TIMESTAMP SET (writing the GPU counter) is not emulated", "copy")

def constant_fill(eng: CopyEngine, w: list[int]) -> int:
  ch = eng.ch
  size = bits(w[0], 31, 30)
  if size not in (0, 2): raise Fault(f"CONSTANT_FILL FILLSIZE {size} is not emulated (0 or 2: the dword pattern)", "copy")
  dst, n = _addr(w, 1), bits(w[4], 29, 0) + 1
  r, off = ch.dev.vm.resolve(dst, n, "copy", f"CONSTANT_FILL destination ({n} bytes)")
  ch.dev.hz.access(ch.pid, r.va, [(dst, dst + n, True)], f"{ch.where()}: fill of {n} bytes at 0x{dst:x}")
  pattern = np.frombuffer(w[3].to_bytes(4, "little") * (-(-n // 4)), np.uint8)[:n]
  r.mem.write(pattern, off)
  ch.dev.counters["sdma_fill"] += 1
  return DONE

def gcr_req(eng: CopyEngine, w: list[int]) -> None: pass   # cache control: memory is coherent
def nop(eng: CopyEngine, w: list[int]) -> None: pass


# (OP, SUB_OP) -> row
TABLE: dict[tuple[int, int], Packet] = {
  (0, 0): Packet("NOP", lambda h: 1 + bits(h, 29, 16), nop),
  (1, 0): Packet("COPY_LINEAR", lambda h: 7, copy_linear),
  (2, 0): Packet("WRITE_LINEAR", lambda h: 0, write_linear),   # size from dword 3: see packet_dwords
  (5, 0): Packet("FENCE", lambda h: 4, fence),
  (6, 0): Packet("TRAP", lambda h: 2, trap),
  (8, 0): Packet("POLL_REGMEM", lambda h: 6, poll_regmem),
  (11, 0): Packet("CONSTANT_FILL", lambda h: 5, constant_fill),
  (13, 0): Packet("TIMESTAMP_SET", lambda h: 3, timestamp_set),
  (13, 1): Packet("TIMESTAMP_GET", lambda h: 3, timestamp),
  (13, 2): Packet("TIMESTAMP_GET_GLOBAL", lambda h: 3, timestamp),
  (17, 0): Packet("GCR_REQ", lambda h: 5, gcr_req),
}


def row(h: int) -> Packet:
  op, sub = bits(h, 7, 0), bits(h, 15, 8)
  if (r := TABLE.get((op, sub))) is None:
    raise Fault(f"unknown SDMA packet OP {op} SUB_OP {sub} in header 0x{h:08x} (known: "
                f"{', '.join(f'{o}/{s} {p.name}' for (o, s), p in TABLE.items())})", "copy")
  return r

def packet_dwords(h: int, peek: Callable[[int], int]) -> int:
  """Total dwords of the packet with header h; `peek(i)` reads its dword i (WRITE linear's size is in dword 3)."""
  r = row(h)
  if r.name == "WRITE_LINEAR": return 5 + bits(peek(3), 19, 0)
  return r.dwords(h)

__all__ = ["BLOCKED", "DONE", "CopyEngine", "packet_dwords", "row"]
