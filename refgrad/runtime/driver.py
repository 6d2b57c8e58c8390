"""The driver interface: the narrow contract between the HCQ runtimes (refgrad/runtime/hcq.py, ops_nv.py) and a GPU.

A driver gives GPU virtual memory (page-aligned VAs, host-visible mappings as numpy byte views), channels (a GP ring,
a control page and a doorbell token), the doorbell itself and the GPU timer. Real kernel-driver bindings are out of
scope: with `MOCKGPU=1`, `open_driver` loads the mock driver of `emulators/` (the only way refgrad reaches it), and the
runtime code above this interface is the code a real GPU would run.

The mock is lazy: a doorbell only marks a channel pending and the GPU runs inside `poll()`, so the runtime's host
wait polls until its signal arrives, reporting a deadlock when nothing can move (README: The NV and AMD runtimes and the mock GPUs).
"""
from __future__ import annotations

import abc
import importlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from refgrad import knobs


class GPUFault(RuntimeError):
  """The GPU stopped a queue: a malformed command, an unmapped address, a bad QMD, undefined behaviour in a kernel.
  Every field is set by keyword; unset ones are None (words: ()). str() is one paragraph with all the set fields."""
  FIELDS = ("device", "engine", "queue", "gp_entry", "dword_offset", "words", "address", "kernel", "uop", "what")

  def __init__(self, *, device: str | None = None, engine: str | None = None, queue: str | None = None, gp_entry: int | None = None,
               dword_offset: int | None = None, words: tuple[int, ...] = (), address: int | None = None, kernel: str | None = None,
               uop: str | None = None, what: str = "GPU fault"):
    self.device, self.engine, self.queue, self.gp_entry, self.dword_offset = device, engine, queue, gp_entry, dword_offset
    self.words, self.address, self.kernel, self.uop, self.what = tuple(words), address, kernel, uop, what
    super().__init__(self._text())

  def _text(self) -> str:
    parts = [f"{self.engine or 'GPU'} fault on {self.device or 'a GPU'}: {self.what}"]
    if self.kernel is not None: parts.append(f"kernel {self.kernel}")
    if self.uop is not None: parts.append(f"at {self.uop}")
    if self.queue is not None: parts.append(f"queue {self.queue}")
    if self.gp_entry is not None: parts.append(f"GP entry {self.gp_entry}")
    if self.dword_offset is not None: parts.append(f"dword {self.dword_offset}")
    if self.address is not None: parts.append(f"address 0x{self.address:x}")
    if self.words: parts.append("words " + " ".join(f"0x{w:08x}" for w in self.words))
    return "; ".join(parts)

  def replace(self, **kw: object) -> GPUFault:
    """The same fault with some fields changed (the runtime adds the kernel queued where it happened)."""
    return GPUFault(**{**{f: getattr(self, f) for f in self.FIELDS}, **kw})  # type: ignore[arg-type]

class GPUDeadlock(RuntimeError):
  """The host waits for a signal no queued work can ever release (every queue idle or blocked)."""

class GPUHazard(RuntimeError):
  """Two operations on different queues touch overlapping memory, one writing, with no semaphore ordering them."""


@dataclass(frozen=True)
class Mapping:
  """One GPU virtual-memory allocation of `size` bytes at `va`; `host` is a 1-D uint8 view of it when host-visible."""
  va: int
  size: int
  host: np.ndarray | None = None
  def __repr__(self) -> str: return f"<Mapping 0x{self.va:x} {self.size} bytes{' host-visible' if self.host is not None else ''}>"


@dataclass(frozen=True)
class QueueHandle:
  """A GPFIFO channel: its GP ring (8-byte entries, host-visible), control page (GPGet at 0x88, GPPut at 0x8C) and doorbell token."""
  name: str
  engine: str          # 'compute' | 'copy'
  ring: Mapping
  userd: Mapping
  token: int
  @property
  def entries(self) -> int: return self.ring.size // 8


class Driver(abc.ABC):
  """What a runtime may ask of a GPU. `device` names it ("NV:0")."""
  device: str

  @abc.abstractmethod
  def alloc(self, size: int, host_visible: bool = False) -> Mapping:
    """`size` bytes of GPU memory at a page-aligned VA (guard gap after it); host_visible: also mapped for the CPU."""
  @abc.abstractmethod
  def free(self, m: Mapping) -> None: ...
  @abc.abstractmethod
  def create_queue(self, engine: str, entries: int = 1024) -> QueueHandle: ...
  @abc.abstractmethod
  def ring_doorbell(self, token: int) -> None:
    """Tell the GPU a channel has new GP entries (the usermode NOTIFY_CHANNEL_PENDING write)."""
  @abc.abstractmethod
  def read_timer(self) -> int:
    """The GPU's nanosecond timer."""
  @abc.abstractmethod
  def poll(self) -> bool:
    """Let the GPU run a bounded step: True if some queue progressed, False if nothing can move. Raises a GPUFault or
    GPUHazard found since the last poll (each once)."""
  def poll_inline(self) -> bool | None:
    """poll() on the caller's thread, where the step is known to be short (a mock GPU that runs kernels in software:
    the host then waits without a thread hand-off); None where it may be long or the driver cannot tell: the caller
    polls on a thread of its own then, so that its wait can give up while the step runs."""
    return None
  @abc.abstractmethod
  def describe(self) -> str:
    """Each queue's state: GPGet/GPPut, current GP entry and dword, what it waits on."""
  @abc.abstractmethod
  def recover(self, queue: QueueHandle) -> None:
    """After a fault: drop the faulted queue's remaining work (GPGet = GPPut) so the device stays usable."""
  def check_host_read(self, m: Mapping, nbytes: int) -> None:
    """Before the host reads the first nbytes of host-visible m: a checking GPU (the mock) raises UndefinedBehaviourError
    in checked mode when some were copied from memory nothing wrote; real hardware knows nothing of it."""
    return None
  def code_object_loaded(self, va: int, size: int, symbols: Sequence[tuple[str, int, int]]) -> None:
    """The loader placed a code object of `size` bytes at `va` whose symbols are (name, GPU address, size): the notice
    ROCr's debugger interface gives (its list of loaded code objects, whose symbol tables ROCgdb reads) so that a tool
    can name the kernel a PC is in. The registration lasts until the mapping holding `va` is freed. A checking GPU (the
    mock) names faults and hazards of machine code with it; real hardware needs nothing."""
    return None
  def host_observed(self, va: int) -> None:
    """The host has just seen the signal at `va` reach the value it waited for: what it submits next is ordered after the
    work before that release. A checking GPU (the mock's hazard checker) learns the ordering here; real hardware needs nothing."""
    return None


# the driver module for each architecture under MOCKGPU=1 (refgrad imports emulators only here, lazily)
MOCK_DRIVERS: dict[str, str] = {"NV": "emulators.mock_driver", "AMD": "emulators.mock_driver"}

def open_driver(arch: str, index: int) -> Driver:
  """The driver of GPU `index` of architecture `arch` ("NV"): the mock GPU of emulators/ under MOCKGPU=1."""
  if not knobs.get("MOCKGPU"):
    raise RuntimeError(f"DEV={arch} needs a GPU driver: set MOCKGPU=1 to use the mock {arch} GPU of emulators/ "
                       f"(refgrad has no bindings to a real {arch} kernel driver)")
  if arch not in MOCK_DRIVERS: raise ValueError(f"no mock driver for architecture {arch!r} (known: {', '.join(MOCK_DRIVERS)})")
  try: mod = importlib.import_module(MOCK_DRIVERS[arch])
  except ModuleNotFoundError as e:
    raise RuntimeError(f"MOCKGPU=1 but the mock driver {MOCK_DRIVERS[arch]} cannot be imported ({e}): run from the repository root "
                       "or install the package with its emulators/") from None
  drv = mod.make_driver(arch, index)
  if not isinstance(drv, Driver): raise TypeError(f"{MOCK_DRIVERS[arch]}.make_driver returned a {type(drv).__name__}, not a Driver")
  return drv
