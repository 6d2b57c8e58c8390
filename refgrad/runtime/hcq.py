"""HCQ: what the hardware-command-queue runtimes share (NV now; AMD adds only its formats).

- `Signal`: 16 bytes of host-visible GPU memory, u64 value at +0 and u64 ns timestamp at +8, timeline semantics.
- `HWQueue`: a command builder. `wait`, `signal`, `timestamp`, `exec`, `copy`, `memory_barrier` append commands in the
  architecture's real format (the subclass encodes them) and return the queue; `submit(dev)` writes it to the device's
  channel and rings the doorbell. A built queue can be submitted again: every command's patchable dwords are recorded
  (`update_wait`, `update_signal`: signal address and value) and an `exec`'s kernel arguments live in a `KernArgs` area
  whose buffer addresses and variable values can be rewritten (`KernArgs.set_buffer` / `set_var`).
- `HCQDevice`: a driver, a compute and a copy channel, a timeline signal (`synchronize()` waits for everything
  submitted), host waits that poll the driver (a deadlock is reported at once, a fault is raised naming the kernel queued
  where it happened and the device recovers; the GPU is driven from a worker thread, so a wait gives up within
  $HCQ_TIMEOUT even while one long step runs: the step finishes in the background and later calls wait for it),
  scratch memory for QMDs/kernel arguments, memory freed only once the GPU is
  past its last use.
- `HCQAllocator`: GPU memory with virtual addresses; copyin/copyout through host-visible staging memory and the copy
  engine, ordered with the timeline (never a host memcpy into device memory).
- `HCQProgram`: a program image uploaded to GPU memory, its kernel-argument layout (one u64 VA per DEFINE_GLOBAL in
  index order, then one int32 per DEFINE_VAR), launches that enqueue and return.

Ordering: every operation the runtime submits waits for the timeline value before it and signals the next one, so work
on the two channels is totally ordered (no hazard between them) and the host never waits until it reads a result.
"""
from __future__ import annotations

import concurrent.futures
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from refgrad import interrupts, knobs
from refgrad.device import Allocator, Buffer, Compiled, Graph, GraphLaunch
from refgrad.runtime.driver import Driver, GPUDeadlock, GPUFault, Mapping, QueueHandle

PAGE = 4096
INLINE_MIN_LIMIT = 1.0   # seconds: a host wait allowed less runs every step on the worker thread (_drive)


def wait_timeout() -> float:
  """Seconds a host wait may last before it is an error ($HCQ_TIMEOUT; a backstop: deadlocks are found at once)."""
  return knobs.get("HCQ_TIMEOUT")


class Signal:
  """A timeline signal: u64 value at +0, u64 ns timestamp at +8 of host-visible GPU memory."""
  __slots__ = ("dev", "va", "words")
  def __init__(self, dev: HCQDevice, va: int, host: np.ndarray):
    self.dev, self.va, self.words = dev, va, host.view(np.uint64)
  @property
  def value(self) -> int: return int(self.words[0])
  @value.setter
  def value(self, v: int) -> None: self.words[0] = v
  @property
  def timestamp(self) -> int:
    """The GPU timer (ns) written by the last release with a timestamp."""
    return int(self.words[1])
  def wait(self, value: int, timeout: float | None = None) -> None: self.dev.wait_signal(self, value, timeout)
  def __repr__(self) -> str: return f"<Signal {self.dev.name} 0x{self.va:x} = {self.value}>"


class KernArgs:
  """A kernel's argument area (constant buffer 0 on NV): one little-endian u64 VA per buffer, then one int32 per variable.
  Rewriting it before a resubmission patches the launch."""
  __slots__ = ("host", "nbufs", "nvars", "va")
  def __init__(self, va: int, host: np.ndarray, nbufs: int, nvars: int):
    self.va, self.host, self.nbufs, self.nvars = va, host, nbufs, nvars
  @staticmethod
  def size(nbufs: int, nvars: int) -> int: return 8 * nbufs + 4 * nvars
  @property
  def nbytes(self) -> int: return self.size(self.nbufs, self.nvars)
  def fill(self, bufs: Sequence[int], vals: Sequence[int]) -> KernArgs:
    if len(bufs) != self.nbufs or len(vals) != self.nvars:
      raise ValueError(f"kernel arguments take {self.nbufs} buffers and {self.nvars} variables, got {len(bufs)} and {len(vals)}")
    self.host[:self.nbytes] = np.frombuffer(struct.pack(f"<{self.nbufs}Q{self.nvars}i", *bufs, *vals), np.uint8)
    return self
  def set_buffer(self, i: int, va: int) -> None:
    if not 0 <= i < self.nbufs: raise IndexError(f"buffer {i} of a kernel with {self.nbufs} buffers")
    self.host[8 * i:8 * i + 8] = np.frombuffer(struct.pack("<Q", va), np.uint8)
  def set_var(self, j: int, value: int) -> None:
    if not 0 <= j < self.nvars: raise IndexError(f"variable {j} of a kernel with {self.nvars} variables")
    o = 8 * self.nbufs + 4 * j
    self.host[o:o + 4] = np.frombuffer(struct.pack("<i", value), np.uint8)
  def buffers(self) -> tuple[int, ...]: return struct.unpack_from(f"<{self.nbufs}Q", self.host.tobytes())


class Scratch:
  """Host-visible GPU memory handed out in aligned pieces (QMDs, kernel arguments). A ring waits for the device to be
  idle before it reuses memory; a persistent scratch (a queue submitted more than once) keeps every piece while it lives."""
  def __init__(self, dev: HCQDevice, size: int, ring: bool):
    self.dev, self.size, self.ring = dev, size, ring
    self.maps: list[Mapping] = []
    self._new()
  def _new(self) -> None:
    self.maps.append(self.dev.drv.alloc(self.size, host_visible=True))
    self.pos = 0
  def take(self, nbytes: int, align: int = 16) -> tuple[int, np.ndarray]:
    """(VA, host view) of `nbytes` fresh bytes."""
    if nbytes > self.size: raise ValueError(f"a scratch piece of {nbytes} bytes exceeds the {self.size}-byte area")
    pos = -(-self.pos // align) * align
    if pos + nbytes > self.size:
      if self.ring: self.dev.synchronize()   # everything that read the ring has run
      else: self._new()
      pos = 0
    self.pos = pos + nbytes
    m = self.maps[-1]
    assert m.host is not None
    return m.va + pos, m.host[pos:pos + nbytes]
  def release(self) -> None:
    for m in self.maps: self.dev.free_later(m)
    self.maps = []


class HWQueue:
  """A list of commands in the architecture's format. Subclasses implement `_wait`, `_signal`, `_timestamp`, `_exec`,
  `_copy`, `_memory_barrier`, each returning (dwords, {slot: (dword offset in the command, kind)}); kinds: 'lohi' (u64 as two
  dwords, low first), 'hilo' (high first), 'u32'. Command i of the queue is the i-th builder call."""
  engine = "compute"

  def __init__(self, persistent: bool = False):
    self.words: list[int] = []
    self.cmds: list[tuple[str, int, dict[str, tuple[int, str]]]] = []   # (kind, first dword, patch slots)
    self.kernels: list[str] = []       # names of the kernels launched (fault reports)
    self.args: list[KernArgs] = []     # kernel-argument areas of the launches, in order
    self.persistent = persistent
    self._scratch: Scratch | None = None

  def _add(self, kind: str, words: list[int], slots: dict[str, tuple[int, str]] | None = None) -> HWQueue:
    self.cmds.append((kind, len(self.words), slots or {}))
    self.words.extend(words)
    return self

  def wait(self, signal: Signal, value: int) -> HWQueue:
    """Stall this queue until signal >= value (wrap-aware)."""
    return self._add("wait", *self._wait(signal.va, value))
  def signal(self, signal: Signal, value: int) -> HWQueue:
    """Once everything before has finished, write value (and the GPU time) to the signal."""
    return self._add("signal", *self._signal(signal.va, value))
  def timestamp(self, signal: Signal) -> HWQueue:
    """Once everything before has finished, write the GPU time to signal.timestamp."""
    return self._add("timestamp", *self._timestamp(signal.va))
  def exec(self, prg: HCQProgram, args: KernArgs, global_size: Sequence[int], local_size: Sequence[int]) -> HWQueue:
    """Launch prg with the arguments in `args` on a grid of global_size workgroups of local_size work-items."""
    gs, ls = tuple(int(x) for x in global_size), tuple(int(x) for x in local_size)
    if len(gs) != 3 or len(ls) != 3 or min(gs + ls) < 1: raise ValueError(f"{prg.name}: bad launch dims global {gs} local {ls}")
    self.kernels.append(prg.name)
    self.args.append(args)
    return self._add("exec", *self._exec(prg, args, gs, ls))
  def copy(self, dest: int, src: int, nbytes: int) -> HWQueue:
    """Copy nbytes from VA src to VA dest on the copy engine."""
    if nbytes < 0: raise ValueError(f"copy of {nbytes} bytes")
    return self._add("copy", *self._copy(dest, src, nbytes))
  def memory_barrier(self) -> HWQueue:
    """Make earlier writes visible to later work (wait for idle, invalidate caches)."""
    return self._add("memory_barrier", *self._memory_barrier())

  def update_wait(self, cmd: int, signal: Signal | None = None, value: int | None = None) -> HWQueue:
    return self._update(cmd, "wait", signal, value)
  def update_signal(self, cmd: int, signal: Signal | None = None, value: int | None = None) -> HWQueue:
    return self._update(cmd, "signal", signal, value)
  def _update(self, cmd: int, kind: str, signal: Signal | None, value: int | None) -> HWQueue:
    k, start, slots = self.cmds[cmd]
    if k != kind: raise ValueError(f"command {cmd} of the queue is a {k}, not a {kind}")
    if signal is not None: self._patch(start, slots["addr"], signal.va)
    if value is not None: self._patch(start, slots["value"], value)
    return self

  def _patch(self, start: int, slot: tuple[int, str], v: int) -> None:
    off, kind = slot
    p = start + off
    if kind == "u32":
      if not 0 <= v < 2**32: raise ValueError(f"value {v} does not fit the 32-bit field of this command")
      self.words[p] = v
    else:
      lo, hi = v & 0xFFFFFFFF, v >> 32
      if kind == "lohi": self.words[p], self.words[p + 1] = lo, hi
      else: self.words[p], self.words[p + 1] = hi, lo

  def scratch(self, dev: HCQDevice, nbytes: int, align: int = 16) -> tuple[int, np.ndarray]:
    """Memory for a QMD/kernel arguments: the device's ring, or the queue's own when it is persistent."""
    if not self.persistent: return dev.scratch.take(nbytes, align)
    if self._scratch is None: self._scratch = Scratch(dev, 64 * 1024, ring=False)
    return self._scratch.take(nbytes, align)

  def submit(self, dev: HCQDevice) -> HWQueue:
    """Write the commands to the device's channel for this engine and ring its doorbell (one GP entry)."""
    dev.submit(self)
    return self

  def __del__(self) -> None:
    if self._scratch is not None:
      try: self._scratch.release()
      except Exception: pass   # interpreter shutdown

  # architecture encodings
  def _wait(self, addr: int, value: int) -> tuple[list[int], dict[str, tuple[int, str]]]: raise NotImplementedError
  def _signal(self, addr: int, value: int) -> tuple[list[int], dict[str, tuple[int, str]]]: raise NotImplementedError
  def _timestamp(self, addr: int) -> tuple[list[int], dict[str, tuple[int, str]]]: raise NotImplementedError
  def _exec(self, prg: HCQProgram, args: KernArgs, gs: tuple[int, ...], ls: tuple[int, ...]) -> tuple[list[int], dict[str, tuple[int, str]]]:
    raise NotImplementedError(f"{type(self).__name__} cannot launch kernels")
  def _copy(self, dest: int, src: int, nbytes: int) -> tuple[list[int], dict[str, tuple[int, str]]]:
    raise NotImplementedError(f"{type(self).__name__} cannot copy")
  def _memory_barrier(self) -> tuple[list[int], dict[str, tuple[int, str]]]: raise NotImplementedError


class Channel:
  """One hardware queue of a device (the architecture writes its ring format): `submit` returns the ring position used."""
  def __init__(self, dev: HCQDevice, handle: QueueHandle):
    self.dev, self.handle = dev, handle
    self.tags: dict[int, tuple[str, ...]] = {}    # ring position -> kernels launched there (fault reports)
  def submit(self, words: Sequence[int], kernels: tuple[str, ...]) -> int: raise NotImplementedError
  def _rung(self, pos: int, kernels: tuple[str, ...]) -> int:
    """The end of every `submit`, once the ring and its write pointer hold the work: note what runs at `pos`, ring the doorbell."""
    self.tags[pos] = kernels
    self.dev.drv.ring_doorbell(self.handle.token)
    return pos
  def idle(self) -> bool: raise NotImplementedError
  def position(self) -> int: raise NotImplementedError


class HCQDevice:
  """A GPU behind a Driver: channels, timeline, scratch memory, host waits. Subclasses set the queue and channel types."""
  compute_queue_t: type[HWQueue]
  copy_queue_t: type[HWQueue]
  channel_t: type[Channel]
  SCRATCH_BYTES = 4 << 20   # the ring of QMDs / kernel arguments (wrapping waits for the GPU)
  RING_ENTRIES = 1024       # entries of each channel's ring (a full ring waits for the GPU)

  def __init__(self, name: str, drv: Driver):
    self.name, self.drv = name, drv
    self.lock = threading.RLock()   # one thread at a time builds, submits and waits (the ordering and the mock assume it)
    self._sig_free: list[Signal] = []
    self._sig_maps: list[Mapping] = []
    self._pending_free: list[tuple[int, Mapping]] = []
    self._inflight: list[tuple[int, str, tuple[int, ...], tuple[int, ...], str]] = []   # (value, engine, reads, writes, what)
    self._owners: list[tuple[int, str]] = []   # (timeline value, engine signalling it) of the work not known finished
    self.poisoned: dict[int, str] = {}   # buffer VA -> why its contents are invalid (the work writing it was dropped by a fault)
    # host waits drive the GPU (drv.poll) from this thread, so a wait can give up in time while one long step runs
    self._gpu: concurrent.futures.ThreadPoolExecutor | None = None   # made on first use, again in a forked child
    self._gpu_pid = 0
    self._stray: concurrent.futures.Future[bool] | None = None   # a step still running after a wait gave up
    self._freed: deque[tuple[int, Mapping]] = deque()   # free_later calls made while another thread held the lock
    self.compute = self.channel_t(self, drv.create_queue("compute", self.RING_ENTRIES))
    self.copy = self.channel_t(self, drv.create_queue("copy", self.RING_ENTRIES))
    self.timeline = self.new_signal(0)
    self.timeline_value = 1                  # the value the next submitted operation signals
    self.scratch = Scratch(self, self.SCRATCH_BYTES, ring=True)
    self.setup()

  def setup(self) -> None:
    """Bind classes/state on the channels (architecture)."""

  # ---- signals ----
  def new_signal(self, value: int = 0) -> Signal:
    with self.lock: return self._new_signal(value)
  def _new_signal(self, value: int) -> Signal:
    if not self._sig_free:
      self._join_stray()
      m = self.drv.alloc(PAGE, host_visible=True)
      assert m.host is not None
      self._sig_maps.append(m)
      self._sig_free = [Signal(self, m.va + o, m.host[o:o + 16]) for o in range(PAGE - 16, -1, -16)]
    s = self._sig_free.pop()
    s.words[:] = (value, 0)
    return s
  def free_signal(self, s: Signal) -> None: self._sig_free.append(s)

  def next_value(self) -> int:
    v = self.timeline_value
    self.timeline_value += 1
    return v

  # ---- submission ----
  def submit(self, q: HWQueue) -> None:
    ch = self.compute if q.engine == "compute" else self.copy
    with self.lock:
      self._join_stray()
      ch.submit(q.words, tuple(q.kernels))
      self._reclaim()

  def queue(self, engine: str = "compute", persistent: bool = False) -> HWQueue:
    """A new queue for this device's compute or copy channel."""
    return (self.compute_queue_t if engine == "compute" else self.copy_queue_t)(persistent)

  def ordered(self, engine: str) -> HWQueue:
    """A queue that first waits for everything submitted so far (finish it with `finish`)."""
    return self.queue(engine).wait(self.timeline, self.timeline_value - 1)
  def finish(self, q: HWQueue) -> int:
    """Signal the next timeline value last and submit; returns the value. The value is taken only now, so building the
    queue may wait for the GPU (a scratch ring wrapping) without waiting for itself."""
    with self.lock:
      v = self.next_value()
      q.signal(self.timeline, v)
      self.owns(v, q.engine)
      q.submit(self)
    return v
  def owns(self, v: int, engine: str) -> None:
    """Note that the queue about to be submitted to `engine` signals timeline value v (a fault there must signal it)."""
    self._owners.append((v, engine))

  def track(self, v: int, engine: str, reads: Sequence[int], writes: Sequence[int], what: str) -> None:
    """Remember which buffers the operation signalling v reads and writes, so a fault can tell which results are invalid.
    A result computed from invalid data is invalid; a write from valid data makes a buffer valid again."""
    with self.lock:
      self._mark(reads, writes, what, None)
      self._inflight.append((v, engine, tuple(reads), tuple(writes), what))
  def _mark(self, reads: Sequence[int], writes: Sequence[int], what: str, fault: str | None) -> None:
    bad = fault or next((self.poisoned[r] for r in reads if r in self.poisoned), None)
    for w in writes:
      if bad is None: self.poisoned.pop(w, None)
      else: self.poisoned[w] = bad if fault is None else f"{self.name}: the contents of this buffer are invalid: {what}, which writes it, {fault}"

  # ---- waiting ----
  def synchronize(self) -> None:
    """Wait until the GPU has finished everything submitted."""
    self.wait_signal(self.timeline, self.timeline_value - 1)

  def wait_signal(self, sig: Signal, value: int, timeout: float | None = None) -> None:
    """Poll the GPU until sig >= value. Raises GPUDeadlock when no queue can move, the GPU's fault naming the kernel
    queued where it happened (after recovering the queue), or TimeoutError after `timeout` seconds."""
    with self.lock: self._wait_signal(sig, value, wait_timeout() if timeout is None else timeout)

  def _drive(self, done: Callable[[], bool], limit: float) -> bool | None:
    """Poll the GPU until done(): True; False when no queue can move; None when `limit` seconds passed first (the step
    running then finishes in the background: `_join_stray` waits for it). Raises its GPUFault. Steps the driver knows to
    be short run on this thread (`poll_inline`: no hand-off to another thread and back, whose wake-ups cost more than
    a short step); from the first it cannot vouch for, the worker thread polls, and this one waits with the limit."""
    self._join_stray()
    if done(): return True
    deadline = time.perf_counter() + limit
    if limit >= INLINE_MIN_LIMIT:   # (a short limit is a wait meant to give up: every step then runs on the worker)
      try: moved = self._poll_inline(done, deadline)
      except GPUFault as f: raise self._fault(f) from None
      if moved is not None: return moved
      limit = max(deadline - time.perf_counter(), 0.0)
    cancel = threading.Event()
    if self._gpu is None or self._gpu_pid != os.getpid():   # a forked child has no copy of the parent's thread
      self._gpu, self._gpu_pid = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-gpu"), os.getpid()
    fut = self._gpu.submit(self._poll_until, done, cancel)
    try: return fut.result(timeout=limit)
    except concurrent.futures.TimeoutError: pass
    except GPUFault as f: raise self._fault(f) from None
    finally:
      if not fut.done():
        cancel.set()
        concurrent.futures.wait([fut], 0.05)   # a short step ends at once: the queues can be described
        if not fut.done() or fut.exception() is not None: self._stray = fut   # joined (its fault raised) by the next call
    return None
  def _poll_inline(self, done: Callable[[], bool], deadline: float) -> bool | None:
    """Short steps on this thread until done() (True) or no queue can move (False); None at a step the driver cannot
    vouch for (or at the deadline). A Ctrl-C meanwhile is raised between steps, never inside one."""
    with interrupts.deferred() as pending:
      moved: bool | None = None
      while not done():
        if pending or time.perf_counter() > deadline: moved = None; break
        moved = self.drv.poll_inline()
        if moved is None: break
        if not moved and not done(): break
    if pending: raise KeyboardInterrupt   # (also when the step it came in finished the wait)
    return True if done() else moved   # (done, or None: the worker takes over, or False: no queue can move)
  def _poll_until(self, done: Callable[[], bool], cancel: threading.Event) -> bool:
    while not done():
      if cancel.is_set(): return True
      if not self.drv.poll() and not done(): return False
    return True
  def _join_stray(self) -> None:
    """Wait for the step a timed-out wait left running (a fault it found is raised now)."""
    if (fut := self._stray) is None: return
    self._stray = None
    try: fut.result()
    except GPUFault as f: raise self._fault(f) from None
  def _describe(self) -> str:
    if self._stray is not None: return "(the GPU is still running its current step)"
    return self.drv.describe()

  def _wait_signal(self, sig: Signal, value: int, limit: float) -> None:
    moved = self._drive(lambda: sig.value >= value, limit)
    if moved is False:
      raise GPUDeadlock(f"{self.name}: deadlock: the host waits for signal 0x{sig.va:x} to reach {value} (it is {sig.value}), "
                        f"and no queue can move:\n{self.drv.describe()}")
    if moved is None:
      raise TimeoutError(f"{self.name}: signal 0x{sig.va:x} did not reach {value} in {limit:g} s (HCQ_TIMEOUT; it is {sig.value}):\n{self._describe()}")
    # the host has seen the signal: what it submits next is ordered after the work before that release (the mock's hazard
    # checker learns this here; a real GPU needs nothing)
    self.drv.host_observed(sig.va)
    self._reclaim()

  def wait_idle(self, ch: Channel) -> None:
    """Poll until a channel has consumed every entry (before its ring memory is reused)."""
    moved = self._drive(ch.idle, limit := wait_timeout())
    if moved is False:
      raise GPUDeadlock(f"{self.name}: deadlock: {ch.handle.name} cannot drain its ring and no queue can move:\n{self.drv.describe()}")
    if moved is None: raise TimeoutError(f"{self.name}: {ch.handle.name} did not drain in {limit:g} s (HCQ_TIMEOUT):\n{self._describe()}")

  def _fault(self, f: GPUFault) -> GPUFault:
    """Name the kernel queued where the fault happened, drop the faulted queue's work and release the timeline to what
    was submitted, so the device stays usable."""
    ch = next((c for c in (self.compute, self.copy) if c.handle.name == f.queue), None)
    kernel = f.kernel
    # work not finished at the fault: on the faulted queue it is dropped, on the other it runs on what it finds
    done = self.timeline.value
    for v, engine, reads, writes, what in sorted(self._inflight):
      if v > done: self._mark(reads, writes, what, f"was dropped by the GPU fault \"{f.what}\" on {f.queue}" if ch is None or engine == ch.handle.engine else None)
    if ch is not None:
      pos = f.gp_entry if f.gp_entry is not None else ch.position()
      if kernel is None and (names := ch.tags.get(pos)): kernel = ", ".join(dict.fromkeys(names))
      self.drv.recover(ch.handle)
      # the dropped work's timeline values are still signalled, each in its turn (after the value before it), so the work
      # queued behind the fault on the other queue runs when its turn comes, and memory it uses (staging of queued copies)
      # is freed only after it ran
      if dropped := [v for v, e in self._owners if v > done and e == ch.handle.engine]:
        q = self.queue(ch.handle.engine)
        for v in dropped: q.wait(self.timeline, v - 1).signal(self.timeline, v)
        ch.submit(q.words, ())
    else: self.timeline.value = max(self.timeline.value, self.timeline_value - 1)   # no queue named: release everything
    what = f.what + ("" if ch is None else "; the queue's remaining work was dropped and the device recovered")
    return f.replace(kernel=kernel, what=what, device=f.device or self.name)

  # ---- memory ----
  def free_later(self, m: Mapping) -> None:
    """Free m once the GPU has run everything submitted so far (it may still be read or written)."""
    # a Buffer's __del__ runs wherever garbage collection does, the GPU worker thread included, while the host thread
    # holds the lock and waits for that worker: never block here, hand it over (deque appends are atomic)
    if not self.lock.acquire(blocking=False):
      self._freed.append((self.timeline_value - 1, m))
      return
    try:
      self._pending_free.append((self.timeline_value - 1, m))
      self.poisoned.pop(m.va, None)
    finally: self.lock.release()
  def _reclaim(self) -> None:
    while self._freed:
      v, m = self._freed.popleft()
      self._pending_free.append((v, m))
      self.poisoned.pop(m.va, None)
    if self._inflight and self._inflight[0][0] <= self.timeline.value:
      self._inflight = [t for t in self._inflight if t[0] > self.timeline.value]
    if self._owners and self._owners[0][0] <= self.timeline.value:
      self._owners = [t for t in self._owners if t[0] > self.timeline.value]
    if not self._pending_free: return
    self._join_stray()
    done, pending, self._pending_free = self.timeline.value, self._pending_free, []
    for v, m in pending:
      if v <= done: self.drv.free(m)
      else: self._pending_free.append((v, m))


class HCQAllocator(Allocator):
  """GPU memory (handles are driver Mappings); copies go through host-visible staging memory and the copy engine."""
  def __init__(self, dev: HCQDevice): self.dev = dev
  def alloc(self, nbytes: int) -> Mapping:
    if nbytes < 0: raise ValueError(f"cannot allocate {nbytes} bytes")
    with self.dev.lock:
      self.dev._join_stray()
      return self.dev.drv.alloc(max(nbytes, 1))
  def free(self, handle: Mapping, nbytes: int) -> None: self.dev.free_later(handle)
  def _staging(self, nbytes: int) -> Mapping:
    self.dev._join_stray()
    m = self.dev.drv.alloc(max(nbytes, 1), host_visible=True)
    assert m.host is not None
    return m
  def copyin(self, dest: Mapping, src: memoryview) -> None:
    """Host bytes -> staging -> copy engine -> dest, after everything submitted before; returns without waiting."""
    if src.nbytes > dest.size: raise ValueError(f"copyin of {src.nbytes} bytes into a {dest.size}-byte {self.dev.name} buffer")
    if not src.nbytes: return
    with self.dev.lock: self._copyin(dest, src)
  def _copyin(self, dest: Mapping, src: memoryview) -> None:
    st = self._staging(src.nbytes)
    st.host[:src.nbytes] = np.frombuffer(src, np.uint8)   # type: ignore[index]
    v = self.dev.finish(self.dev.ordered("copy").copy(dest.va, st.va, src.nbytes))
    self.dev.track(v, "copy", [], [dest.va], "copyin")
    self.dev.free_later(st)
  def copyout(self, dest: memoryview, src: Mapping) -> None:
    """src -> copy engine -> staging, wait for it (the result is read now), staging -> host bytes."""
    if dest.nbytes > src.size: raise ValueError(f"copyout of {dest.nbytes} bytes from a {src.size}-byte {self.dev.name} buffer")
    if dest.readonly: raise ValueError("copyout needs a writable destination")
    if not dest.nbytes: return
    with self.dev.lock: self._copyout(dest, src)
  def _copyout(self, dest: memoryview, src: Mapping) -> None:
    if (why := self.dev.poisoned.get(src.va)) is not None: raise RuntimeError(why)
    st = self._staging(dest.nbytes)
    v = self.dev.finish(self.dev.ordered("copy").copy(st.va, src.va, dest.nbytes))
    self.dev.wait_signal(self.dev.timeline, v)
    try:
      self.dev.drv.check_host_read(st, dest.nbytes)   # undefined bytes read back (a checking GPU says; PYTHON's report)
      np.frombuffer(dest, np.uint8)[:] = st.host[:dest.nbytes]   # type: ignore[index]
    finally: self.dev.drv.free(st)


class HCQProgram:
  """A program image in GPU memory plus its argument layout; calling it enqueues one launch and returns (wait=True:
  waits and returns the kernel's GPU time from the timestamps the queue wrote)."""
  def __init__(self, dev: HCQDevice, name: str, image: bytes, nbufs: int, nvars: int, stored: frozenset[int] | None = None,
               loaded: frozenset[int] | None = None):
    self.dev, self.name, self.nbufs, self.nvars = dev, name, nbufs, nvars
    # the buffers a launch may write / read (None: any of them), to tell which results a fault made invalid
    self.stored = frozenset(range(nbufs)) if stored is None else stored
    self.loaded = frozenset(range(nbufs)) if loaded is None else loaded
    self._bytes = image
    with dev.lock:
      dev._join_stray()
      self.image = dev.drv.alloc(len(image))
      HCQAllocator(dev).copyin(self.image, memoryview(image))

  def args(self, bufs: Sequence[int], vals: Sequence[int] = (), q: HWQueue | None = None) -> KernArgs:
    """A filled kernel-argument area: from the device's scratch ring, or the persistent queue q's own memory."""
    n = KernArgs.size(self.nbufs, self.nvars)
    va, host = q.scratch(self.dev, max(n, 16), 256) if q is not None else self.dev.scratch.take(max(n, 16), 256)
    return KernArgs(va, host, self.nbufs, self.nvars).fill(bufs, vals)

  def __call__(self, *bufs: Mapping, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    with self.dev.lock: return self._launch(bufs, global_size, local_size, vals, wait)

  def _launch(self, bufs: Sequence[Mapping], global_size: Sequence[int], local_size: Sequence[int], vals: Sequence[int], wait: bool) -> float | None:
    dev = self.dev
    # a GPU fault dropped the upload of the image (queued behind it): upload it again
    if self.image.va in dev.poisoned: HCQAllocator(dev)._copyin(self.image, memoryview(self._bytes))
    q = dev.ordered("compute")
    args = self.args([b.va for b in bufs], vals, q)
    if wait:
      t0, t1 = dev.new_signal(), dev.new_signal()
      q.timestamp(t0).exec(self, args, global_size, local_size).timestamp(t1)
    else: q.exec(self, args, global_size, local_size)
    v = dev.finish(q)
    dev.track(v, "compute", [bufs[i].va for i in self.loaded if i < len(bufs)], [bufs[i].va for i in self.stored if i < len(bufs)], self.name)
    if not wait: return None
    dev.wait_signal(dev.timeline, v)
    et = (t1.timestamp - t0.timestamp) * 1e-9
    dev.free_signal(t0)
    dev.free_signal(t1)
    return et

  def __del__(self) -> None:
    try: self.dev.free_later(self.image)
    except Exception: pass   # interpreter shutdown


def device_index(name: str) -> int:
  """The GPU number of a device name: "NV" -> 0, "NV:1" -> 1."""
  _, _, idx = name.partition(":")
  try: return int(idx or 0)
  except ValueError: raise ValueError(f"bad device name {name!r}: expected NAME or NAME:<number>") from None



@dataclass
class HCQCompiled(Compiled):
  """A device whose runtime is an HCQDevice (`hcq`): synchronize() waits for all its queued work; its graph executor is
  an HCQGraph (one prebuilt command buffer)."""
  hcq: HCQDevice | None = None
  def synchronize(self) -> None:
    assert self.hcq is not None
    self.hcq.synchronize()
  def graph(self, launches: list[GraphLaunch], bufs: list[Buffer]) -> HCQGraph:
    assert self.hcq is not None
    return HCQGraph(self.hcq, launches, bufs)


class HCQGraph(Graph):
  """Consecutive launches on one HCQ device as one persistent compute queue: wait for the timeline, the launches (a
  memory barrier before one that reads or writes what a launch since the last barrier wrote, or writes what it read),
  signal the timeline. A call patches the wait/signal values and the kernel-argument buffer addresses that changed
  (after the GPU has finished the previous call, which read them), then submits it: one GP entry, one doorbell."""
  def __init__(self, dev: HCQDevice, launches: list[GraphLaunch], bufs: list[Buffer]):
    for ln in launches:
      if not isinstance(ln.prg, HCQProgram) or ln.prg.dev is not dev: raise ValueError(f"HCQGraph of {dev.name}: launch {ln.name} is not a program of this device")
    self.dev = dev
    self.names = tuple(ln.name for ln in launches)
    with dev.lock:
      q = dev.queue("compute", persistent=True).wait(dev.timeline, 0)
      self.args: list[tuple[KernArgs, tuple[int, ...], list[int]]] = []   # (KernArgs, slots, addresses written there)
      self.barriers = 0
      reads: set[int] = set()
      writes: set[int] = set()   # slots read/written since the last barrier (distinct slots are distinct memory in every call)
      for ln in launches:
        w, r = {ln.slots[0]}, set(ln.slots[1:])
        if (r | w) & writes or w & reads:   # a launch that depends on one since the last barrier waits for it
          q.memory_barrier()
          self.barriers += 1
          reads, writes = set(), set()
        reads |= r
        writes |= w
        vas = [bufs[s].handle.va for s in ln.slots]
        a = ln.prg.args(vas, (), q)
        q.exec(ln.prg, a, ln.global_size, ln.local_size)
        self.args.append((a, ln.slots, vas))
      self.signal_cmd = len(q.cmds)
      self.q = q.signal(dev.timeline, 0)
    self.last = 0    # timeline value the last submission signals

  def __len__(self) -> int: return len(self.args)

  def __call__(self, bufs: list[Buffer]) -> None:
    dev = self.dev
    with dev.lock:
      patches = [(a, vas, i, va) for a, slots, vas in self.args for i, s in enumerate(slots) if (va := bufs[s].handle.va) != vas[i]]
      if patches:
        if self.last: dev.wait_signal(dev.timeline, self.last)   # the previous call has read its arguments
        for a, vas, i, va in patches:
          a.set_buffer(i, va)
          vas[i] = va
      v = dev.next_value()
      dev.owns(v, "compute")
      self.q.update_wait(0, value=v - 1).update_signal(self.signal_cmd, value=v).submit(dev)
      self.last = v
