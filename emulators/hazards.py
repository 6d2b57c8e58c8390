"""The hazard checker: happens-before from semaphores (vector clocks), and the memory each queue operation touches.

Participants are the host (id 0) and every channel. Each has a vector clock; its own component is its epoch.
- A release snapshots the releaser's clock at that address, then starts a new epoch. A plain release replaces the
  address's clock; a reduction (read-modify-write) joins it, like a C++ release sequence.
- A satisfied acquire joins the clock of the release that wrote the value it read; a value no recorded release wrote
  (the host wrote it) joins the host's clock.
- A doorbell snapshots the host's clock (its writes before the doorbell happen before the work), and the channel
  joins it when it fetches the first GP entry of that submission. The host joins a releaser's clock when the runtime
  reports that it observed a semaphore (`observe`, the driver's `host_observed`).
- Every kernel launch / copy / inline upload records byte ranges read and written, per mapping. Two operations of
  different participants that overlap, one writing, where the earlier one's epoch is not in the later one's clock,
  are a hazard. Semaphore memory is synchronization, never recorded.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

HOST = 0
_PRUNE_AT = 32   # records per mapping before those ordered before everyone are dropped


@dataclass(frozen=True)
class Access:
  pid: int
  epoch: int
  lo: int
  hi: int
  write: bool
  what: str     # "NV:0 copy GP entry 3: copy of 64 bytes"


def _join(into: list[int], other: list[int]) -> None:
  if len(into) < len(other): into.extend([0] * (len(other) - len(into)))
  for i, v in enumerate(other):
    if v > into[i]: into[i] = v


class Hazards:
  """Vector clocks + access records of one device. `report` gets each hazard message once."""
  enabled = True

  def __init__(self, report: Callable[[str], None]):
    self.report = report
    self.clocks: list[list[int]] = [[1]]
    self.names: list[str] = ["host"]
    self.sems: dict[int, tuple[int, int, list[int]]] = {}  # address -> (value written, its bytes, releaser clock)
    self.records: dict[int, list[Access]] = {}             # mapping VA -> accesses
    self.seen: set[tuple[str, str]] = set()

  def participant(self, name: str) -> int:
    """A new channel; it starts knowing what the host knows (the host created it)."""
    pid = len(self.clocks)
    c = list(self.clocks[HOST]) + [0] * (pid + 1 - len(self.clocks[HOST]))
    c[pid] = 1
    self.clocks.append(c)
    self.names.append(name)
    return pid

  # ---- synchronization ----------------------------------------------------------------------
  def doorbell(self) -> list[int]:
    host = self.clocks[HOST]
    snap = list(host)
    host[HOST] += 1
    return snap

  def join(self, pid: int, clock: list[int]) -> None: _join(self.clocks[pid], clock)

  def release(self, pid: int, addr: int, value: int, nbytes: int, rmw: bool = False) -> None:
    c = self.clocks[pid]
    snap = list(c)
    if rmw and (old := self.sems.get(addr)) is not None: _join(snap, old[2])
    self.sems[addr] = (value, nbytes, snap)
    c[pid] += 1

  def settle(self, pid: int) -> None:
    """`pid` was stopped and its remaining work dropped (recover): the host knows all it did, as after a wait on it."""
    c = self.clocks[pid]
    _join(self.clocks[HOST], c)
    c[pid] += 1

  def acquire(self, pid: int, addr: int, value: int, nbytes: int) -> None:
    """`pid` read `value` (`nbytes` wide) at a semaphore and went on."""
    rec = self.sems.get(addr)
    mask = (1 << (8 * min(nbytes, rec[1] if rec else nbytes))) - 1
    self.join(pid, rec[2] if rec is not None and rec[0] & mask == value & mask else self.clocks[HOST])

  def forget(self, lo: int, hi: int) -> None:
    """A mapping was freed: its records and semaphores go (VAs are never reused)."""
    self.records.pop(lo, None)
    for a in [a for a in self.sems if lo <= a < hi]: del self.sems[a]

  # ---- accesses -----------------------------------------------------------------------------
  def access(self, pid: int, base: int, ranges: list[tuple[int, int, bool]], what: str) -> None:
    """Record one operation's accesses in the mapping at `base`: (lo, hi, write) ranges; report conflicts first."""
    clock = self.clocks[pid]
    recs = self.records.setdefault(base, [])
    for a in recs:
      if a.pid == pid or (a.pid < len(clock) and clock[a.pid] >= a.epoch): continue
      for lo, hi, write in ranges:
        if (write or a.write) and lo < a.hi and a.lo < hi:
          self._hazard(a, Access(pid, clock[pid], lo, hi, write, what))
          break
    for lo, hi, write in ranges:
      new = Access(pid, clock[pid], lo, hi, write, what)
      # a later access of the same participant to the same range, writing if the old one did, conflicts with
      # everything the old one would: it replaces it (so one queue reusing a buffer keeps one record)
      for k, a in enumerate(recs):
        if a.pid == pid and a.lo == lo and a.hi == hi and (write or not a.write):
          recs[k] = new
          break
      else: recs.append(new)
    if len(recs) > _PRUNE_AT: self._prune(base, recs)

  def _prune(self, base: int, recs: list[Access]) -> None:
    # a record ordered before every participant's current clock can conflict with nothing that comes later
    def settled(a: Access) -> bool: return all(a.pid < len(c) and c[a.pid] >= a.epoch for i, c in enumerate(self.clocks) if i != a.pid)
    self.records[base] = [a for a in recs if not settled(a)]

  def _hazard(self, a: Access, b: Access) -> None:
    key = (a.what, b.what)
    if key in self.seen: return
    self.seen.add(key)
    def one(x: Access) -> str: return f"{x.what} {'writes' if x.write else 'reads'} 0x{x.lo:x}..0x{x.hi:x}"
    self.report(f"memory hazard: {one(a)}, and {one(b)}, with no semaphore ordering them "
                f"({self.names[a.pid]} ran first here; another interleaving may run them the other way or at once)")


class NoHazards(Hazards):
  """MOCKGPU_HAZARDS=0: the same interface, recording nothing."""
  enabled = False
  def access(self, pid: int, base: int, ranges: list[tuple[int, int, bool]], what: str) -> None: pass
  def release(self, pid: int, addr: int, value: int, nbytes: int, rmw: bool = False) -> None: pass
  def acquire(self, pid: int, addr: int, value: int, nbytes: int) -> None: pass
  def doorbell(self) -> list[int]: return []
