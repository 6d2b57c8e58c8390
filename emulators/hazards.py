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
- In-flight launches (the queue ordering model, README "Ordering inside a queue"): a kernel launch starts a new epoch of
  its queue and stays in flight until an ordering command of that queue retires it (`retire`). Each in-flight launch
  is its own participant: two launches of one queue conflict unless an ordering command ran between them, and a
  release that does not retire (no WFI / not end-of-pipe) orders only what came before the oldest launch in flight.
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
  seq: int = -1  # the queue's launch number (-1: not a launch, in order with its queue's other work)


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
    self.launches: list[int] = [0]            # per participant: launches started
    self.fence: list[int] = [0]               # per participant: launches numbered below this are retired
    self.inflight: list[list[int]] = [[]]     # per participant: epochs of the launches in flight, oldest first

  def participant(self, name: str) -> int:
    """A new channel; it starts knowing what the host knows (the host created it)."""
    pid = len(self.clocks)
    c = list(self.clocks[HOST]) + [0] * (pid + 1 - len(self.clocks[HOST]))
    c[pid] = 1
    self.clocks.append(c)
    self.names.append(name)
    self.launches.append(0)
    self.fence.append(0)
    self.inflight.append([])
    return pid

  # ---- the queue ordering model -------------------------------------------------------------
  def launch(self, pid: int) -> int:
    """A kernel launch of `pid` starts (its own epoch); its number within the queue."""
    self.clocks[pid][pid] += 1
    self.inflight[pid].append(self.clocks[pid][pid])
    n = self.launches[pid]
    self.launches[pid] = n + 1
    return n

  def retire(self, pid: int) -> None:
    """An ordering command of `pid` ran: every launch started before it has finished."""
    self.fence[pid] = self.launches[pid]
    self.inflight[pid].clear()

  # ---- synchronization ----------------------------------------------------------------------
  def doorbell(self) -> list[int]:
    host = self.clocks[HOST]
    snap = list(host)
    host[HOST] += 1
    return snap

  def join(self, pid: int, clock: list[int]) -> None: _join(self.clocks[pid], clock)

  def release(self, pid: int, addr: int, value: int, nbytes: int, rmw: bool = False, done: int | None = None) -> None:
    """A release; one that retires (WFI, end-of-pipe) calls `retire` first, else the launches in flight stay unordered,
    except `done`, the epoch of the launch whose own release this is (a QMD release follows its grid)."""
    c = self.clocks[pid]
    snap = list(c)
    if (fl := [e for e in self.inflight[pid] if e != done]): snap[pid] = fl[0] - 1
    if rmw and (old := self.sems.get(addr)) is not None: _join(snap, old[2])
    self.sems[addr] = (value, nbytes, snap)
    c[pid] += 1

  def settle(self, pid: int) -> None:
    """`pid` was stopped and its remaining work dropped (recover): the host knows all it did, as after a wait on it."""
    self.retire(pid)
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
  def access(self, pid: int, base: int, ranges: list[tuple[int, int, bool]], what: str, seq: int = -1) -> None:
    """Record one operation's accesses in the mapping at `base`: (lo, hi, write) ranges; report conflicts first.
    `seq`: the launch number (from `launch`) when the operation is a kernel launch."""
    clock = self.clocks[pid]
    fence = self.fence[pid]
    recs = self.records.setdefault(base, [])
    for a in recs:
      if a.pid == pid:   # same queue: ordered unless both are launches in flight together
        if a.seq < 0 or seq < 0 or a.seq == seq or a.seq < fence: continue
      elif a.pid < len(clock) and clock[a.pid] >= a.epoch: continue
      for lo, hi, write in ranges:
        if (write or a.write) and lo < a.hi and a.lo < hi:
          self._hazard(a, Access(pid, clock[pid], lo, hi, write, what, seq), base)
          break
    for lo, hi, write in ranges:
      new = Access(pid, clock[pid], lo, hi, write, what, seq)
      # a later access of the same participant to the same range, writing if the old one did, conflicts with
      # everything the old one would: it replaces it (so one queue reusing a buffer keeps one record), unless the old
      # one is a launch still in flight
      for k, a in enumerate(recs):
        if a.pid == pid and a.lo == lo and a.hi == hi and (write or not a.write) and (a.seq < fence or a.seq == seq):
          recs[k] = new
          break
      else: recs.append(new)
    if len(recs) > _PRUNE_AT: self._prune(base, recs)

  def _prune(self, base: int, recs: list[Access]) -> None:
    # a record ordered before every participant's current clock can conflict with nothing that comes later
    def settled(a: Access) -> bool:
      return a.seq < self.fence[a.pid] and all(a.pid < len(c) and c[a.pid] >= a.epoch for i, c in enumerate(self.clocks) if i != a.pid)
    self.records[base] = [a for a in recs if not settled(a)]

  def _hazard(self, a: Access, b: Access, base: int) -> None:
    key = (a.what, b.what)
    if key in self.seen: return
    self.seen.add(key)
    def one(x: Access) -> str: return f"{x.what} {'writes' if x.write else 'reads'} 0x{x.lo:x}..0x{x.hi:x}"
    if a.pid == b.pid:
      self.report(f"memory hazard in the buffer at 0x{base:x}: {one(a)}, and {one(b)}, both in flight on {self.names[a.pid]} "
                  f"(its launches {a.seq} and {b.seq}) with no ordering command between them (launches of one queue may overlap until a wait-for-idle, "
                  f"a WFI release, a partial flush or an end-of-pipe release retires them)")
      return
    self.report(f"memory hazard in the buffer at 0x{base:x}: {one(a)}, and {one(b)}, with no semaphore ordering them "
                f"({self.names[a.pid]} ran first here; another interleaving may run them the other way or at once)")


class NoHazards(Hazards):
  """MOCKGPU_HAZARDS=0: the same interface, recording nothing."""
  enabled = False
  def access(self, pid: int, base: int, ranges: list[tuple[int, int, bool]], what: str, seq: int = -1) -> None: pass
  def release(self, pid: int, addr: int, value: int, nbytes: int, rmw: bool = False, done: int | None = None) -> None: pass
  def acquire(self, pid: int, addr: int, value: int, nbytes: int) -> None: pass
  def doorbell(self) -> list[int]: return []
  def launch(self, pid: int) -> int: return 0
  def retire(self, pid: int) -> None: pass
