"""A GPFIFO channel (docs/hw/NV.md §2, §3): GP entries -> pushbuffer segments -> method headers -> the bound classes' methods.

- The doorbell snapshots GPPut from USERD (0x8C); the channel processes entries while GPGet != that snapshot and
  writes GPGet (0x88) after each entry.
- Headers: INC, NON_INC, ONE_INC, IMMD, COUNT 0 (no data), the NOP dword 0, END_PB_SEGMENT; GRP0 subdevice-mask
  ops are no-ops (one GPU). SEC_OP 2 and 6, a count running past the segment, an unknown method or class are faults.
- Methods below 0x100 are host methods; the others go to the class bound to the header's subchannel (SET_OBJECT).
- `step()` runs methods until one trigger (semaphore op, launch, copy, finished inline upload) has run, the queue
  runs dry, or an acquire fails: then it stays at that data dword and retries on a later step.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators.fault import Fault
from emulators.nv.compute import ComputeEngine
from emulators.nv.copy import CopyEngine
from emulators.nv.host import HostEngine
from emulators.nv.methods import BLOCKED, DONE
from emulators.queue import MockQueue
from refgrad.hw import bits
from refgrad.hw import nv as NV
from refgrad.hw.nv import SecOp
from refgrad.runtime.driver import GPUFault

RING_ENTRY_BYTES, CONTROL_BYTES = NV.GP_ENTRY_BYTES, NV.USERD_BYTES   # a GP entry; the USERD page
DEFERS_STEPS = True   # a launch or copy may stay queued (BLOCKED) when the driver polls inline (MockDriver.poll_inline)
GP_GET, GP_PUT = NV.USERD["GP_GET"] // 4, NV.USERD["GP_PUT"] // 4
SEC_OPS = NV.SEC_OP_NAMES
# header fields as (shift, mask) for the decoder's inner loop (the table: refgrad.hw.nv.HEADER)
(_OP_SH, _), (_CNT_SH, _CNT_M), (_SUB_SH, _SUB_M), (_, _ADDR_M), (_TERT_SH, _TERT_M) = (
  bits.shift_mask(NV.HEADER[k]) for k in ("SEC_OP", "COUNT", "SUBCHANNEL", "ADDRESS", "TERT_OP"))
INC, NON_INC, IMMD, ONE_INC, END = int(SecOp.INC), int(SecOp.NON_INC), int(SecOp.IMMD), int(SecOp.ONE_INC), int(SecOp.END_PB_SEGMENT)
# class -> (engine, channel engines that may bind it): a GR (compute) channel has compute and, on subchannel 4, GRCOPY
CLASSES: dict[int, tuple[type, tuple[str, ...]]] = {
  **{c: (ComputeEngine, ("compute",)) for c in NV.COMPUTE_CLASSES}, **{c: (CopyEngine, ("compute", "copy")) for c in NV.COPY_CLASSES}}


class Channel(MockQueue):
  def __init__(self, dev: Any, handle: Any, ring: Any, userd: Any, pid: int):
    super().__init__(dev, handle, pid)
    self.ring32 = ring.mem.data.view(np.uint32)
    self.userd32 = userd.mem.data.view(np.uint32)
    self.entries = ring.size // RING_ENTRY_BYTES
    self.get = self.put = 0
    self.submitted = self.fetched = 0   # GP entries announced by doorbells / fetched (the doorbell marks count entries)
    self.host = HostEngine(self)
    self.sub: list[Any] = [None] * 8
    self.subch = 0
    self.seg: np.ndarray | None = None   # the current pushbuffer segment
    self.lst: list[int] = []
    self.n = self.pos = self.k = 0       # segment dwords, header position, data index within the header
    self.entry = -1
    self.entry_words: tuple[int, int] = (0, 0)
    self.blocked: tuple[int, int, str, int] | None = None    # (address, bytes, condition, payload) of a failed acquire
    self.last_kind: type | None = None   # the class kind (compute / copy) of the last class method: a switch waits for idle

  def where(self) -> str: return f"{self.name} GP entry {self.entry}"

  def has_work(self) -> bool: return self.fault is None and (self.seg is not None or self.get != self.put)

  # ---- doorbell ---------------------------------------------------------------------------------
  def doorbell(self) -> None:
    put = int(self.userd32[GP_PUT])
    if put >= self.entries:
      self._fault(Fault(f"GPPut {put} in USERD is outside the ring of {self.entries} entries", "host"), entry=None)
      return
    new = (put - self.put) % self.entries
    if new:
      self._rang(self.submitted)
      self.submitted += new
    self.put = put

  # ---- running ----------------------------------------------------------------------------------
  def _step(self) -> bool:
    """Run up to one trigger method; True if anything was done."""
    moved = False
    while True:
      if self.seg is None:
        if self.get == self.put: return moved
        self._fetch()
        moved = True
        continue
      before = (self.pos, self.k)
      r = self._run()
      if r == BLOCKED:
        self.flight.complete()   # waiting: the kernels in flight run meanwhile
        return moved or (self.pos, self.k) != before
      moved = True
      if r == DONE: return True
      self._finish_entry()

  def _fetch(self) -> None:
    g = self.get
    w0, w1 = int(self.ring32[2 * g]), int(self.ring32[2 * g + 1])
    self.entry, self.entry_words = g, (w0, w1)
    self._reached(self.fetched)
    self.fetched += 1
    self.dev.counters["gp_entry"] += 1
    e = w0 | (w1 << 32)
    length = bits.get(e, NV.GP_ENTRY["LENGTH"])
    if length == 0:   # a control entry
      op = bits.get(e, NV.GP_ENTRY["OPCODE"])
      if op not in NV.GP_OPCODES or NV.GP_OPCODES[op] == "ILLEGAL":
        raise Fault(f"GP entry {g} is a control entry with opcode {op} ({NV.GP_OPCODES.get(op, 'unknown')})", "host", None, words=(w0, w1))
      self._finish_entry()
      return
    va = bits.get(e, NV.GP_ENTRY["ADDRESS"]) << 2
    try: r, off = self.dev.vm.resolve(va, 4 * length, "host", f"pushbuffer segment of GP entry {g} ({length} dwords)")
    except Fault as f:
      f.words = (w0, w1)
      raise
    self.seg = r.mem.data[off:off + 4 * length].view(np.uint32)
    self.lst, self.n, self.pos, self.k = self.seg.tolist(), length, 0, 0

  def _finish_entry(self) -> None:
    self.flight.complete()   # the kernels of this submission's launches run (the checker still sees them in flight)
    self.seg = None
    self.get = (self.get + 1) % self.entries
    self.userd32[GP_GET] = self.get

  def _run(self) -> int:
    """Walk the segment from (pos, k): DONE after a trigger, BLOCKED at a failed acquire, 0 at the segment's end."""
    lst, n, pos, k = self.lst, self.n, self.pos, self.k
    j = k
    try:
      while pos < n:
        h = lst[pos]
        op = h >> _OP_SH
        if op == INC or op == NON_INC or op == ONE_INC or op == IMMD:
          addr, subch = (h & _ADDR_M) << 2, (h >> _SUB_SH) & _SUB_M
          if op == IMMD: count, ndata = 1, 0
          else:
            count = ndata = (h >> _CNT_SH) & _CNT_M
            if pos + 1 + count > n:
              raise Fault(f"{SEC_OPS[op]} header 0x{h:08x} at dword {pos} announces {count} data dwords but the segment ends after "
                          f"{n - pos - 1}", "host")
          self.subch = subch
          j = k
          while j < count:
            m = addr if op == NON_INC or op == IMMD or (op == ONE_INC and j == 0) else addr + 4 if op == ONE_INC else addr + 4 * j
            eng = self.host if m < NV.HOST_METHODS_END else self.sub[subch]
            if eng is None: raise Fault(f"method 0x{m:x} on subchannel {subch}, which has no class bound (SET_OBJECT first)", "host")
            if eng is not self.host and type(eng) is not self.last_kind:
              if self.last_kind is not None: self.flight.retire()   # compute <-> copy in one channel: wait for idle (docs/hw/NV.md §1)
              self.last_kind = type(eng)
            row = eng.table.get(m)
            if row is None: raise Fault(f"unknown method 0x{m:x} for class {eng.label} on subchannel {subch}", eng.engine)
            if row.bulk:
              if op == NON_INC: data, last = self.seg[pos + 1 + j:pos + 1 + count], count - 1
              else: data, last = np.array([(h >> _CNT_SH) & _CNT_M if op == IMMD else lst[pos + 1 + j]], np.uint32), j
              eng.regs[m] = int(data[-1])
              r = row.action(eng, data)
              j = last
            else:
              v = (h >> _CNT_SH) & _CNT_M if op == IMMD else lst[pos + 1 + j]
              eng.regs[m] = v
              r = row.action(eng, v) if row.action is not None else None
            if r is not None:
              if r == BLOCKED:
                self.pos, self.k = pos, j
                return BLOCKED
              if j + 1 < count: self.pos, self.k = pos, j + 1
              else: self.pos, self.k = pos + 1 + ndata, 0
              return DONE
            j += 1
          pos += 1 + ndata
          k = 0
        elif op == 0:
          if h != 0 and ((h >> _TERT_SH) & _TERT_M) == 0:
            raise Fault(f"GRP0 header 0x{h:08x} at dword {pos} has TERT_OP 0 but is not the NOP dword 0x00000000", "host")
          pos += 1   # NOP; SET/STORE/USE_SUBDEVICE_MASK: one GPU, nothing to mask
        elif op == END:
          pos = n
        else: raise Fault(f"header 0x{h:08x} at dword {pos} has SEC_OP {op} ({SEC_OPS[op]}), which the mock does not execute", "host")
    except Fault:
      self.pos, self.k = pos, j
      raise
    self.pos, self.k = pos, 0
    return 0

  # ---- classes ----------------------------------------------------------------------------------
  def bind(self, subch: int, cls: int) -> None:
    if cls not in CLASSES:
      raise Fault(f"SET_OBJECT on subchannel {subch}: unknown class 0x{cls:04X} (known: {', '.join(f'{c:04X}' for c in CLASSES)})", "host")
    kind, engines = CLASSES[cls]
    if self.handle.engine not in engines:
      raise Fault(f"SET_OBJECT on subchannel {subch}: class 0x{cls:04X} cannot be bound on a {self.handle.engine} channel", "host")
    cur = self.sub[subch]
    if cur is None or cur.cls != cls: self.sub[subch] = kind(self, cls)

  # ---- faults and state (MockQueue) -------------------------------------------------------------------------------
  def _gpu_fault(self, f: Fault, **where: Any) -> GPUFault:
    entry = where.get("entry", self.entry)   # None: a fault of the doorbell, before any entry
    words = f.words
    dword = None
    if entry is not None and self.seg is not None:
      dword = self.pos
      if not words: words = tuple(self.lst[self.pos:self.pos + 1 + min(8, max(0, self.n - self.pos - 1))])
    elif entry is not None and not words: words = self.entry_words
    return GPUFault(device=self.dev.device, engine=f.engine, queue=self.name, gp_entry=entry, dword_offset=dword, words=words,
                    address=f.address, kernel=f.kernel, uop=f.uop, what=f.what)

  def _drop_work(self) -> None:
    """GPGet = GPPut, and no half-done method state."""
    self.seg = None
    put = int(self.userd32[GP_PUT])
    self.get = self.put = put if put < self.entries else 0
    self.userd32[GP_GET] = self.get
    self.fetched = self.submitted

  def _reset_engines(self) -> None:
    for e in self.sub:
      if e is not None: e.reset()

  def _pointers(self) -> str:
    userd_put = int(self.userd32[GP_PUT])
    s = f"{self.name}: GPGet {self.get}, GPPut {self.put}"
    return s + (f" (USERD GPPut is {userd_put}: written but no doorbell rung since)" if userd_put != self.put else "")

  def _position(self) -> str:
    if self.seg is None: return ""
    if self.pos < self.n:
      h = self.lst[self.pos]
      d = self.pos if h >> _OP_SH == IMMD else self.pos + 1 + self.k   # the data dword it stands at (IMMD: the header)
      return f"; at GP entry {self.entry} dword {d} of {self.n} (header 0x{h:08x} at dword {self.pos})"
    return f"; at the end of GP entry {self.entry}"

  def _blocked_text(self, current: str) -> str:
    assert self.blocked is not None
    addr, _, cond, payload = self.blocked
    return f"; blocked: acquire {cond} on the semaphore at 0x{addr:x} waits for 0x{payload:x}, current value {current}"


def make_channel(dev: Any, handle: Any, ring: Any, userd: Any, pid: int) -> Channel: return Channel(dev, handle, ring, userd, pid)
