"""The copy queue's SDMA packets (docs/hw/AMD.md §5, SDMA v5.2/v6): one row per (OP, SUB_OP): name, size rule, action.

Every packet starts with a header dword (OP 7:0, SUB_OP 15:8). Sizes in dwords: NOP 1 + COUNT 29:16 (so a zero dword is a
one-dword NOP: the runtime pads the end of the ring with zeros), COPY_LINEAR 7, WRITE linear 5 + COUNT, FENCE 4, TRAP 2,
POLL_REGMEM 6, TIMESTAMP 3, CONSTANT_FILL 5, GCR_REQ 5. CONSTANT_FILL's layout is not in docs/hw/AMD.md: dw1/dw2
destination, dw3 the 32-bit pattern, dw4 COUNT = bytes - 1, FILLSIZE 31:30 in the header (as Linux's emit_fill_buffer
writes it; 0 and 2 fill with the dword pattern here). Actions return None / DONE / BLOCKED as in `pm4`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from emulators.amd.pm4 import BLOCKED, DONE, poll_memory
from emulators.fault import Fault
from refgrad.hw import amd as A
from refgrad.hw import bits as B
from refgrad.hw.amd import SDMA


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
  for nm, f in A.SDMA_COPY_LINEAR_DW0.items():
    if B.get(w[0], f): raise Fault(f"COPY_LINEAR header 0x{w[0]:08x}: {nm} is not emulated", "copy")
  if any(B.get(w[2], f) for f in A.SDMA_COPY_LINEAR_DW2.values()):
    raise Fault(f"COPY_LINEAR dword 2 0x{w[2]:08x}: byte swaps are not emulated", "copy")
  n = B.get(w[1], A.SDMA_COPY_LINEAR_DW1["COUNT"]) + 1
  if not ch.dev.short_copy(n): return BLOCKED   # (polled inline, a long copy: the worker thread's)
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
  eng.ch.interrupts.append(B.get(w[1], A.SDMA_TRAP_DW1["INT_CONTEXT"]))
  return DONE

def poll_regmem(eng: CopyEngine, w: list[int]) -> int | None:
  if not B.get(w[0], A.SDMA_POLL_REGMEM_DW0["MEM_POLL"]): raise Fault("POLL_REGMEM on a register (MEM_POLL 0) is not emulated", "copy")
  r = poll_memory(eng.ch, "copy", _addr(w, 1), 4, B.get(w[0], A.SDMA_POLL_REGMEM_DW0["FUNC"]), w[3], w[4], "POLL_REGMEM semaphore")
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
  size = B.get(w[0], A.SDMA_CONSTANT_FILL_DW0["FILLSIZE"])
  if size not in (0, 2): raise Fault(f"CONSTANT_FILL FILLSIZE {size} is not emulated (0 or 2: the dword pattern)", "copy")
  dst, n = _addr(w, 1), B.get(w[4], A.SDMA_CONSTANT_FILL_DW4["COUNT"]) + 1
  r, off = ch.dev.vm.resolve(dst, n, "copy", f"CONSTANT_FILL destination ({n} bytes)")
  ch.dev.hz.access(ch.pid, r.va, [(dst, dst + n, True)], f"{ch.where()}: fill of {n} bytes at 0x{dst:x}")
  pattern = np.frombuffer(w[3].to_bytes(4, "little") * (-(-n // 4)), np.uint8)[:n]
  r.mem.write(pattern, off)
  ch.dev.counters["sdma_fill"] += 1
  return DONE

def gcr_req(eng: CopyEngine, w: list[int]) -> None: pass   # cache control: memory is coherent
def nop(eng: CopyEngine, w: list[int]) -> None: pass


# (OP, SUB_OP) -> row
TABLE: dict[tuple[int, int], Packet] = {SDMA[r.name]: r for r in (
  Packet("NOP", lambda h: 1 + B.get(h, A.SDMA_NOP_DW0["COUNT"]), nop),
  Packet("COPY_LINEAR", lambda h: 7, copy_linear),
  Packet("WRITE_LINEAR", lambda h: 0, write_linear),   # size from dword 3: see packet_dwords
  Packet("FENCE", lambda h: 4, fence),
  Packet("TRAP", lambda h: 2, trap),
  Packet("POLL_REGMEM", lambda h: 6, poll_regmem),
  Packet("CONSTANT_FILL", lambda h: 5, constant_fill),
  Packet("TIMESTAMP_SET", lambda h: 3, timestamp_set),
  Packet("TIMESTAMP_GET", lambda h: 3, timestamp),
  Packet("TIMESTAMP_GET_GLOBAL", lambda h: 3, timestamp),
  Packet("GCR_REQ", lambda h: 5, gcr_req),
)}


(_OP_SH, _OP_M), (_SUB_SH, _SUB_M) = B.shift_mask(A.SDMA_HEADER["OP"]), B.shift_mask(A.SDMA_HEADER["SUB_OP"])

def row(h: int) -> Packet:
  op, sub = (h >> _OP_SH) & _OP_M, (h >> _SUB_SH) & _SUB_M
  if (r := TABLE.get((op, sub))) is None:
    raise Fault(f"unknown SDMA packet OP {op} SUB_OP {sub} in header 0x{h:08x} (known: "
                f"{', '.join(f'{o}/{s} {p.name}' for (o, s), p in TABLE.items())})", "copy")
  return r

def packet_dwords(h: int, peek: Callable[[int], int]) -> int:
  """Total dwords of the packet with header h; `peek(i)` reads its dword i (WRITE linear's size is in dword 3)."""
  r = row(h)
  if r.name == "WRITE_LINEAR": return 5 + B.get(peek(3), A.SDMA_WRITE_LINEAR_DW3["COUNT"])
  return r.dwords(h)

__all__ = ["BLOCKED", "DONE", "CopyEngine", "packet_dwords", "row"]
