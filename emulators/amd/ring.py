"""An AMD user-mode queue (docs/hw/AMD.md §6): a ring buffer, read/write pointers and a doorbell, in the units of the queue kind,
feeding the PM4 (compute) or SDMA (copy) decoder.

- Ring: `entries` dwords of host-visible memory (RING_ENTRY_BYTES = 4). Pointers are 64-bit counts that only grow;
  the ring is indexed modulo its size, so a packet may cross the end of the ring (the wrap).
- Units: PM4 pointers count dwords, SDMA pointers count bytes (SDMA packets stay dword-aligned).
- Control page (host-visible, CONTROL_BYTES): u64 read pointer at +0x0 (the GPU writes it after each packet), u64 write
  pointer at +0x8 (the host writes it), u64 doorbell register at +0x10: the host writes the new write pointer there and
  rings the doorbell (`ring_doorbell(token)` is the strobe); the queue then runs while rptr < that value.
- A packet that runs past the write pointer, a doorbell that goes backwards or announces more than the ring holds,
  and every decoder fault stop the queue with a GPUFault naming the queue, the ring offset, the raw dwords and address.
- INDIRECT_BUFFER (PM4): the queue runs the buffer's packets, then returns to the ring; the read pointer passes the
  INDIRECT_BUFFER packet only when the buffer is done (so a fault inside names the ring offset of the packet that called it).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators.amd import pm4, sdma
from emulators.amd.pm4 import BLOCKED, DONE
from emulators.fault import Fault
from emulators.queue import MockQueue
from refgrad.hw import amd as A
from refgrad.hw import bits
from refgrad.runtime.driver import GPUFault

RING_ENTRY_BYTES, CONTROL_BYTES = 4, 64
DEFERS_STEPS = True   # a dispatch or copy may stay queued (BLOCKED) when the driver polls inline (MockDriver.poll_inline)
RPTR, WPTR, DOORBELL = A.CONTROL["RPTR"], A.CONTROL["WPTR"], A.CONTROL["DOORBELL"]   # u64 slots of the control page
_OP_SH, _OP_M = bits.shift_mask(A.PM4_HEADER["IT_OPCODE"])


class Queue(MockQueue):
  def __init__(self, dev: Any, handle: Any, ring: Any, ctl: Any, pid: int):
    super().__init__(dev, handle, pid)
    self.pm4 = handle.engine == "compute"
    self.unit = A.POINTER_UNIT[handle.engine]   # bytes per pointer unit
    self.engine = pm4.ComputeEngine(self) if self.pm4 else sdma.CopyEngine(self)
    self.ring32 = ring.mem.data.view(np.uint32)
    self.n = len(self.ring32)
    self.ctl64 = ctl.mem.data.view(np.uint64)
    self.rptr = self.wptr = 0   # the doorbell marks are write pointers
    self.ib: list[Any] | None = None    # [va, words, position, dwords of the INDIRECT_BUFFER packet in the ring]
    self.cur: list[int] = []            # the dwords of the packet being run (fault reports)
    self.blocked: tuple[int, int, str] | None = None   # (address, bytes, condition) of a failed wait

  # ---- where we are ---------------------------------------------------------------------------------------------------
  def _ring_off(self) -> int: return (self.rptr * self.unit // 4) % self.n
  def _at(self) -> str:
    s = f"ring {'dword' if self.pm4 else 'byte'} {(self.rptr * self.unit) % (4 * self.n) // self.unit}"
    if self.ib is not None: s += f", indirect buffer 0x{self.ib[0]:x} dword {self.ib[2]} of {len(self.ib[1])}"
    return s
  def where(self) -> str: return f"{self.name} {self._at()}"

  def has_work(self) -> bool: return self.fault is None and (self.ib is not None or self.rptr < self.wptr or bool(self.flight.pending))

  # ---- doorbell -------------------------------------------------------------------------------------------------------
  def doorbell(self) -> None:
    v = int(self.ctl64[DOORBELL])
    u = "dwords" if self.pm4 else "bytes"
    bad = None
    if v < self.wptr: bad = f"the doorbell value {v} is below the previous write pointer {self.wptr} ({u}): pointers only grow"
    elif not self.pm4 and v % 4: bad = f"the doorbell value {v} (bytes) is not a whole number of dwords"
    elif (v - self.rptr) * self.unit > 4 * self.n:
      bad = f"the doorbell value {v} puts {v - self.rptr} {u} in flight, more than the ring holds ({4 * self.n // self.unit} {u})"
    if bad is not None:
      self._fault(Fault(bad, "host"))
      return
    if v > self.wptr:
      self._rang(self.wptr)
      self.wptr = v

  # ---- running --------------------------------------------------------------------------------------------------------
  def _step(self) -> bool:
    """Run packets until one trigger (dispatch, signal, copy, satisfied wait) has run, the queue runs dry or blocks."""
    moved = False
    while True:
      if self.ib is None:
        if self.rptr >= self.wptr:
          if not self.flight.pending: return moved
          self.flight.complete()   # ran dry: the kernels in flight run (the checker still sees them in flight)
          return True
        r = self._ring_packet()
      else: r = self._ib_packet()
      if r == BLOCKED:
        self.flight.complete()   # waiting: the kernels in flight run meanwhile
        return moved
      moved = True
      if r == DONE: return True

  def _decode(self, get: Any, avail: int, origin: str) -> tuple[Any, int]:
    """(row, dwords) of the packet whose dword i is get(i); `avail` dwords may be read."""
    h = get(0)
    try:
      if self.pm4:
        size = pm4.packet_dwords(h)
        row = pm4.TABLE[(h >> _OP_SH) & _OP_M]
      else:
        row = sdma.row(h)
        size = 5 if row.name == "WRITE_LINEAR" and avail < 4 else sdma.packet_dwords(h, get)
      if size > avail:
        raise Fault(f"the {row.name} packet (header 0x{h:08x}) is {size} dwords but only {avail} dwords remain before the {origin}",
                    self.engine.engine)
    except Fault:
      self.cur = [get(i) for i in range(min(avail, 12))]   # what the report shows: the header and what follows it
      raise
    return row, size

  def _ring_packet(self) -> int | None:
    self._reached(self.rptr)
    d = self._ring_off()
    ring, n = self.ring32, self.n
    avail = (self.wptr - self.rptr) * self.unit // 4
    row, size = self._decode(lambda i: int(ring[(d + i) % n]), avail, "write pointer")
    self.cur = ring[d:d + size].tolist() if d + size <= n else [int(ring[(d + i) % n]) for i in range(size)]
    r = row.action(self.engine, self.cur)
    if r == BLOCKED: return r
    if self.ib is not None: self.ib[3] = size   # INDIRECT_BUFFER: the read pointer passes it when the buffer is done
    else: self._advance(size)
    return r

  def _ib_packet(self) -> int | None:
    assert self.ib is not None
    _, words, pos, _ = self.ib
    if pos >= len(words):   # an empty indirect buffer
      self._leave_ib()
      return None
    row, size = self._decode(lambda i: words[pos + i], len(words) - pos, "end of the indirect buffer")
    self.cur = words[pos:pos + size]
    r = row.action(self.engine, self.cur)
    if r != BLOCKED and self.ib is not None:
      self.ib[2] = pos + size
      if pos + size == len(words): self._leave_ib()   # the read pointer passes the INDIRECT_BUFFER packet once its last packet ran
    return r

  def _leave_ib(self) -> None:
    assert self.ib is not None
    self.flight.complete()   # the submission's kernels run (the checker still sees them in flight)
    size = self.ib[3]
    self.ib = None
    self._advance(size)

  def _advance(self, dwords: int) -> None:
    self.rptr += dwords * 4 // self.unit
    self.ctl64[RPTR] = self.rptr
    self.dev.counters["pm4_packet" if self.pm4 else "sdma_packet"] += 1

  def enter_ib(self, va: int, n: int) -> None:
    """Run the n-dword indirect buffer at va next (called by the INDIRECT_BUFFER row)."""
    if self.ib is not None: raise Fault(f"INDIRECT_BUFFER at 0x{va:x} inside an indirect buffer: nested indirect buffers are not emulated", "compute", va)
    try: words = self.dev.vm.bytes(va, 4 * n, "compute", f"indirect buffer of {n} dwords").view(np.uint32).tolist()
    except Fault as f: raise Fault(f.what, "mmu", va) from None
    self.dev.counters["indirect_buffer"] += 1
    self.ib = [va, words, 0, 0]

  # ---- faults and state (MockQueue) -------------------------------------------------------------------------------
  def _gpu_fault(self, f: Fault, **where: Any) -> GPUFault:
    words = f.words or tuple(self.cur[:12])
    off = None if not self.has_work() and f.engine == "host" else self._ring_off()
    return GPUFault(device=self.dev.device, engine=f.engine, queue=self.name, gp_entry=None, dword_offset=off, words=words,
                    address=f.address, kernel=f.kernel, uop=f.uop, what=f"{f.what} (at {self._at()})")

  def _drop_work(self) -> None:
    """rptr = wptr = the last doorbell value, and no half-run indirect buffer."""
    self.ib = None
    self.wptr = self.rptr = max(self.wptr, int(self.ctl64[DOORBELL]))
    self.ctl64[RPTR] = self.rptr

  def _reset_engines(self) -> None: self.engine.reset()

  def _pointers(self) -> str:
    s = f"{self.name}: rptr {self.rptr}, wptr {self.wptr} ({'dwords' if self.pm4 else 'bytes'})"
    return s + (f" (doorbell register holds {db})" if (db := int(self.ctl64[DOORBELL])) != self.wptr else "")

  def _position(self) -> str:
    return f"; in the indirect buffer at 0x{self.ib[0]:x}, dword {self.ib[2]} of {len(self.ib[1])}" if self.ib is not None else ""

  def _blocked_text(self, current: str) -> str:
    assert self.blocked is not None
    addr, _, cond = self.blocked
    return f"; blocked at {self._at()}: {cond} at 0x{addr:x}, current value {current}"


def make_channel(dev: Any, handle: Any, ring: Any, ctl: Any, pid: int) -> Queue: return Queue(dev, handle, ring, ctl, pid)
