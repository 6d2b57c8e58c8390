"""What every mock GPU queue shares, whatever command format it decodes (NV GPFIFO channels, AMD PM4 / SDMA rings):
its identity and hazard participant, the doorbells rung and not yet reached (each one a host clock the queue joins when
it reaches the work the doorbell announced), the launches in flight, the step loop turning a decoder's `Fault` into
the `GPUFault` the driver reports, `recover` after a fault and the state line of `describe`.

A subclass decodes: `doorbell` (read its control page, `_rang` for new work), `_step` (run until one trigger ran, the
queue ran dry or blocked; True if anything was done), `has_work`, `_gpu_fault` (a `GPUFault` from a `Fault`, with the
queue's position), `_drop_work` (recover: skip to the last submitted work), `_reset_engines`, `_pointers` /
`_position` / `_blocked_text` (describe)."""
from __future__ import annotations

from collections import deque
from typing import Any

from emulators.fault import Fault
from emulators.inflight import InFlight
from refgrad.runtime.driver import GPUFault


class MockQueue:
  def __init__(self, dev: Any, handle: Any, pid: int):
    self.dev, self.handle, self.name, self.pid = dev, handle, handle.name, pid
    self.doorbells: deque[tuple[int, list[int]]] = deque()   # (where the announced work starts, host clock at the doorbell)
    self.blocked: tuple[Any, ...] | None = None   # (address, bytes, ...) of the semaphore a failed wait polls
    self.fault: GPUFault | None = None
    self.interrupts: list[int] = []               # interrupt contexts / handles, in order
    self.flight = InFlight(dev, pid)              # launches started and not yet retired by an ordering command

  # ---- doorbells ----------------------------------------------------------------------------------------------------
  def _rang(self, mark: int) -> None:
    """New work from `mark` on: what the host did before ringing happens before that work (hazard clocks)."""
    self.doorbells.append((mark, self.dev.hz.doorbell()))

  def _reached(self, mark: int | None = None) -> None:
    """The queue reached `mark` (None: all it was given): join the host clocks of the doorbells that announced it."""
    while self.doorbells and (mark is None or self.doorbells[0][0] <= mark): self.dev.hz.join(self.pid, self.doorbells.popleft()[1])

  # ---- running ------------------------------------------------------------------------------------------------------
  def step(self) -> bool:
    """Run until one trigger ran, the queue ran dry or blocked; a decoder fault stops the queue (True: something happened)."""
    try: return self._step()
    except Fault as f:
      self._fault(f)
      return True

  def _fault(self, f: Fault, **where: Any) -> None:
    self.fault = self._gpu_fault(f, **where)
    self.dev.report(self.fault)

  def recover(self) -> None:
    """Drop the remaining work and any half-run state; the queue runs again from what the host submits next."""
    self.fault, self.blocked = None, None
    self.flight.drop()
    self._drop_work()
    self._reached()
    self.dev.hz.settle(self.pid)   # what it did before the fault happens before whatever the host submits next
    self._reset_engines()

  def describe(self) -> str:
    s = self._pointers()
    if self.fault is not None: return s + f"; stopped by a fault: {self.fault}"
    s += self._position()
    if self.blocked is not None:
      addr, nbytes = self.blocked[0], self.blocked[1]
      try: cur = f"0x{self.dev.vm.read_uint(addr, nbytes, 'host', 'semaphore'):x}"
      except Fault: cur = "unreadable (unmapped)"
      return s + self._blocked_text(cur)
    return s + ("; idle" if not self.has_work() else "; ready")

  # ---- what a subclass decodes --------------------------------------------------------------------------------------
  def doorbell(self) -> None: raise NotImplementedError
  def has_work(self) -> bool: raise NotImplementedError
  def _step(self) -> bool: raise NotImplementedError
  def _gpu_fault(self, f: Fault, **where: Any) -> GPUFault: raise NotImplementedError
  def _drop_work(self) -> None: raise NotImplementedError
  def _reset_engines(self) -> None: raise NotImplementedError
  def _pointers(self) -> str: raise NotImplementedError
  def _position(self) -> str: return ""
  def _blocked_text(self, current: str) -> str: raise NotImplementedError
