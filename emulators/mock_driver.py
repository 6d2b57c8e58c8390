"""The mock driver: refgrad's `Driver` interface over a mock GPU (loaded by refgrad.runtime.driver under MOCKGPU=1).

Arch-neutral: the address space, the timer, the doorbells, the scheduler (`poll`), the hazard checker and the fault
reports live here; an architecture only supplies its channel type (`ARCHES`). Each `make_driver` call is a separate
device with its own address space.

Execution is lazy: a doorbell snapshots the channel's GPPut and nothing runs until `poll()`, which offers one step
(up to one trigger method) to the queues in round-robin or seeded order (MOCKGPU_ORDER) and returns False when no
queue can move. Faults and hazards are raised by the poll that finds them, each once.

Hazards: the host joins a releaser's clock only when the runtime says it observed a semaphore, through
`host_observed(va)` (call it after a successful host wait); `ring_doorbell` carries the host's clock into the work.
"""
from __future__ import annotations

import importlib
import time
from bisect import bisect_right, insort
from collections import Counter, deque
from collections.abc import Sequence

from emulators.hazards import HOST, Hazards, NoHazards
from emulators.order import Order, hazards_knob, order_knob
from emulators.vm import AddressSpace, Region
from refgrad.runtime.driver import Driver, GPUFault, GPUHazard, Mapping, QueueHandle
from refgrad.runtime.simt import check_host_read

# arch -> module with RING_ENTRY_BYTES, CONTROL_BYTES and make_channel(dev, handle, ring region, control region, hazard participant)
ARCHES: dict[str, str] = {"NV": "emulators.nv.channel", "AMD": "emulators.amd.ring"}
# inline polling (poll_inline): a launch runs on the host's thread when it last took at most this long (the first of
# each kernel and launch shape runs on the worker thread), a copy when it moves at most this many bytes
INLINE_SECONDS = 0.02
INLINE_COPY_BYTES = 16 << 20
ENGINES = ("compute", "copy")


class MockDriver(Driver):
  def __init__(self, arch: str, index: int):
    if arch not in ARCHES: raise ValueError(f"no mock GPU for architecture {arch!r} (known: {', '.join(ARCHES)})")
    if not isinstance(index, int) or index < 0: raise ValueError(f"mock {arch} GPU index must be an integer >= 0, got {index!r}")
    self.arch, self.index, self.device = arch, index, f"{arch}:{index}"
    self.order = Order(order_knob(), index)
    self.hz: Hazards = (Hazards if hazards_knob() else NoHazards)(self._hazard)
    self.vm = AddressSpace(self.device)
    self._arch = importlib.import_module(ARCHES[arch])
    self.channels: list = []
    self.by_token: dict[int, object] = {}
    self.reports: deque[Exception] = deque()
    # events by kind: qmd_launch, ce_copy, ce_release, inline_upload, sem_release, sem_acquire, doorbell, gp_entry
    self.counters: Counter[str] = Counter()
    self.t0 = time.perf_counter_ns()
    # code objects the loader registered (code_object_loaded): load VA -> (end, [(name, start, end)]), dropped when freed;
    # their VAs sorted, for a dispatch's look-up
    self.code_objects: dict[int, tuple[int, list[tuple[str, int, int]]]] = {}
    self._code_vas: list[int] = []
    # inline polling (poll_inline): steps run on the caller's thread while `inline`; a launch not known to be short
    # sets `deferred` and stays queued. `costs`: (kernel, grid, block) -> seconds its last run took
    self.inline = self.deferred = False
    self.costs: dict[tuple, float] = {}

  # ---- memory ---------------------------------------------------------------------------------
  def alloc(self, size: int, host_visible: bool = False) -> Mapping:
    r = self.vm.alloc(size, host_visible)
    r.mapping = Mapping(va=r.va, size=size, host=r.mem.data if host_visible else None)
    return r.mapping

  def free(self, m: Mapping) -> None:
    r = self.vm.free(m.va)
    self.hz.forget(r.va, r.end)
    if self.code_objects:
      for va in [va for va in self._code_vas if r.va <= va < r.end]:
        del self.code_objects[va]
        self._code_vas.remove(va)

  # ---- code objects: the loader's registration, so faults name the kernel a PC is in ------------------------------
  def code_object_loaded(self, va: int, size: int, symbols: Sequence[tuple[str, int, int]]) -> None:
    r = self.vm.find(va)
    if r is None or va + size > r.end:
      raise ValueError(f"{self.device}: code object of {size} bytes registered at 0x{va:x}, which is not inside one mapping")
    syms = []
    for name, start, n in symbols:
      if not (isinstance(name, str) and name and va <= start and start + n <= va + size and n > 0):
        raise ValueError(f"{self.device}: symbol {name!r} at 0x{start:x} ({n} bytes) is not inside the code object at 0x{va:x}..0x{va + size:x}")
      syms.append((name, start, start + n))
    if va not in self.code_objects: insort(self._code_vas, va)
    self.code_objects[va] = (va + size, syms)

  def symbol_at(self, pc: int) -> str | None:
    """The name of the registered symbol whose bytes hold `pc`, or None (code no loader registered)."""
    if (i := bisect_right(self._code_vas, pc) - 1) < 0: return None
    end, syms = self.code_objects[self._code_vas[i]]
    if pc >= end: return None
    return next((name for name, start, stop in syms if start <= pc < stop), None)

  def check_host_read(self, m: Mapping, nbytes: int) -> None:
    if (r := self.vm.find(m.va)) is not None: check_host_read(r.mem, nbytes)

  def region(self, va: int) -> Region | None:
    """The mapping holding `va` (for tools and tests)."""
    return self.vm.find(va)

  # ---- queues ---------------------------------------------------------------------------------
  def create_queue(self, engine: str, entries: int = 1024) -> QueueHandle:
    if engine not in ENGINES: raise ValueError(f"{self.device}: queue engine must be one of {ENGINES}, got {engine!r}")
    if not isinstance(entries, int) or entries < 2 or entries & (entries - 1):
      raise ValueError(f"{self.device}: a GP ring needs a power-of-two number of entries >= 2, got {entries!r}")
    ring, userd = self.alloc(entries * self._arch.RING_ENTRY_BYTES, True), self.alloc(self._arch.CONTROL_BYTES, True)
    same = sum(1 for c in self.channels if c.handle.engine == engine)
    name = f"{self.device} {engine}" + (f" {same}" if same else "")
    token = 0x100 + len(self.channels)   # opaque on real hardware; here just unique per device
    h = QueueHandle(name=name, engine=engine, ring=ring, userd=userd, token=token)
    ch = self._arch.make_channel(self, h, self.vm.find(ring.va), self.vm.find(userd.va), self.hz.participant(name))
    self.channels.append(ch)
    self.by_token[token] = ch
    return h

  def ring_doorbell(self, token: int) -> None:
    if (ch := self.by_token.get(token)) is None:
      raise ValueError(f"{self.device}: doorbell written with token {token!r}, which belongs to no channel "
                       f"(tokens: {', '.join(hex(t) for t in self.by_token) or 'none'})")
    self.counters["doorbell"] += 1
    ch.doorbell()

  def read_timer(self) -> int: return time.perf_counter_ns() - self.t0

  # ---- running --------------------------------------------------------------------------------
  def poll(self) -> bool:
    if self.reports: raise self.reports.popleft()
    chans = self.channels
    moved = False
    for i in self.order.arrange(len(chans)):
      ch = chans[i]
      if ch.has_work() and ch.step():
        self.order.ran(i)
        moved = True
        break
    if self.reports: raise self.reports.popleft()
    return moved

  def poll_inline(self) -> bool | None:
    """poll() where every step it takes is short: launches of kernels that ran in at most INLINE_SECONDS with the same
    grid and block the last time, copies of at most INLINE_COPY_BYTES, semaphores. None when a queue's next step is not
    (it stays queued for poll()), and always for architectures that cannot defer a step or under a seeded order (whose
    kernels run when a queue completes them, not when launched)."""
    if not getattr(self._arch, "DEFERS_STEPS", False) or self.order.rng is not None: return None
    self.inline, self.deferred = True, False
    try: moved = self.poll()
    finally: self.inline = False
    return None if self.deferred and not moved else moved

  def short(self, key: tuple) -> bool:
    """In inline polling: whether the kernel launch `key` (kernel, grid, block, ...) is known to be short; if not, the
    step is deferred (`deferred` set: the caller returns BLOCKED and the queue stays at that method)."""
    return self._vouch(self.costs.get(key, INLINE_SECONDS + 1) <= INLINE_SECONDS)

  def short_copy(self, nbytes: int) -> bool:
    """short() for a copy of nbytes."""
    return self._vouch(nbytes <= INLINE_COPY_BYTES)

  def _vouch(self, short: bool) -> bool:
    if short or not self.inline: return True
    self.deferred = True
    return False

  def ran(self, key: tuple, seconds: float) -> None:
    if len(self.costs) >= 4096: self.costs.pop(next(iter(self.costs)))
    self.costs[key] = seconds

  def run_until_idle(self, max_steps: int = 1_000_000) -> bool:
    """Poll until nothing moves (tests and tools); True if every queue ran dry, False if some are blocked."""
    for _ in range(max_steps):
      if not self.poll(): break
    return not any(c.has_work() for c in self.channels)

  def report(self, e: Exception) -> None: self.reports.append(e)

  def _hazard(self, msg: str) -> None: self.reports.append(GPUHazard(f"{self.device}: {msg}"))

  def host_observed(self, va: int) -> None:
    """The host saw the semaphore at `va` (a wait returned): what its releaser did happens before the host's later work."""
    rec = self.hz.sems.get(va)
    nbytes = rec[1] if rec else 8
    self.hz.acquire(HOST, va, self.vm.read_uint(va, nbytes, "host", "observed semaphore"), nbytes)

  def describe(self) -> str:
    if not self.channels: return f"{self.device}: no queues"
    return "\n".join(c.describe() for c in self.channels)

  def _channel(self, queue: QueueHandle):
    for c in self.channels:
      if c.handle == queue: return c
    raise ValueError(f"{self.device}: {queue!r} is not a queue of this device")

  def recover(self, queue: QueueHandle) -> None:
    self._channel(queue).recover()
    # reports of that queue not raised yet are moot now
    self.reports = deque(r for r in self.reports if not (isinstance(r, GPUFault) and r.queue == queue.name))

  def fault_of(self, queue: QueueHandle) -> GPUFault | None:
    """The fault that stopped `queue`, if any."""
    return self._channel(queue).fault


def make_driver(arch: str, index: int) -> MockDriver:
  """A new mock GPU (its own address space, queues and timer); MOCKGPU_ORDER / MOCKGPU_HAZARDS are read here."""
  return MockDriver(arch, index)
