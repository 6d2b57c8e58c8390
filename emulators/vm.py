"""A GPU virtual address space over host memory.

- Mappings are page-granular (4 KiB): each starts on a page, and at least one unmapped guard page
  follows it. VAs are handed out by a bump pointer and never reused, so a stale address (a use after
  free) faults instead of reaching a newer allocation.
- A mapping's usable bytes are exactly the size asked for: an access past it faults even inside the
  mapping's last page.
- Each mapping is backed by a `simt.Memory`: device memory tracks which bytes were written (as on the
  PYTHON device), host-visible memory counts as written.
- Lookup VA -> (region, offset) is a bisect over the sorted starts.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Any

import numpy as np

from emulators.fault import Fault
from refgrad.runtime.simt import Memory

PAGE = 4096
VA_BASE = 1 << 32     # nothing below 4 GiB is mapped, so small integers (and 0) used as addresses fault
VA_LIMIT = 1 << 40    # 40-bit GPU virtual addresses (GP entries and semaphores carry 40 bits)


class Region:
  """One mapping: [va, va + size) backed by `mem` (bytes + which of them are defined)."""
  __slots__ = ("end", "host_visible", "mapping", "mem", "size", "va")

  def __init__(self, va: int, size: int, host_visible: bool, data: np.ndarray | None = None):
    self.va, self.size, self.end, self.host_visible = va, size, va + size, host_visible
    # device memory starts undefined (tracked like the PYTHON device's); host-visible memory is untracked
    self.mem = Memory(data if data is not None else np.zeros(size, np.uint8))
    if not host_visible and size: self.mem.bits = np.zeros((size + 7) // 8, np.uint8)
    self.mapping: Any = None   # the driver's Mapping record

  @property
  def init(self) -> np.ndarray | None:
    """Which bytes are defined (None: all of them)."""
    return self.mem.init

  def view(self, off: int) -> Memory:
    """The memory from `off` to the mapping's end (the whole Memory when off is 0). A view at an offset shares the bytes
    but carries a copy of their definedness: hand it back to `merge` after the kernel ran."""
    if off == 0: return self.mem
    init = self.mem.init
    return Memory(self.mem.data[off:], None if init is None else init[off:])

  def merge(self, off: int, view: Memory) -> None:
    """Take back the definedness of a `view(off)` a kernel ran on."""
    if view is self.mem: return
    self.mem.mark_range(off, self.size, True)
    if (init := view.init) is not None: self.mem.mark_elems(np.flatnonzero(~init) + off, 1, False)
    self.mem.settle()

  def carry(self, off: int, src: Region, src_off: int, n: int) -> None:
    """After a copy engine wrote [off, off + n) from src's [src_off, src_off + n): the bytes undefined there are
    undefined here too (a copy moves definedness along, as a kernel's loads and stores do), host-visible memory included."""
    if src.mem.bits is None or not (bad := src.mem.undefined_bytes(src_off, src_off + n)).size: return
    self.mem.mark_elems(bad + off, 1, False)
    self.mem.origin = self.mem.origin or src.mem.origin

  def mark_defined(self, byte_idx: np.ndarray) -> None:
    """Bytes written by an engine (e.g. a multi-line copy) become defined."""
    if self.mem.bits is not None:
      self.mem.mark_elems(byte_idx, 1, True)
      self.mem.settle()

  def __repr__(self) -> str: return f"<Region 0x{self.va:x}+0x{self.size:x}>"


POOL_MIN, POOL_MAX = 1 << 16, 1 << 28   # recycle the backing arrays of freed mappings of >= 64 KiB, up to 256 MiB in all


class AddressSpace:
  """The mappings of one device; every GPU-side access goes through `resolve`.

  The host arrays behind freed large mappings are kept by size and handed, zeroed, to the next mapping of that size
  (a new VA all the same): zeroing memory already touched is much cheaper than page-faulting fresh memory, and the
  runtime allocates staging buffers of the same sizes over and over."""

  def __init__(self, device: str):
    self.device = device
    self.starts: list[int] = []
    self.regions: list[Region] = []
    self.next_va = VA_BASE
    self.pool: dict[tuple[int, bool], list[np.ndarray]] = {}
    self.pooled = 0

  def alloc(self, size: int, host_visible: bool) -> Region:
    if not isinstance(size, int) or size < 0: raise ValueError(f"{self.device}: cannot map {size!r} bytes")
    pages = max(1, -(-size // PAGE))
    va = self.next_va
    if va + pages * PAGE > VA_LIMIT: raise MemoryError(f"{self.device}: the 40-bit GPU virtual address space is exhausted")
    self.next_va = va + (pages + 1) * PAGE   # + one guard page
    if (kept := self.pool.get((size, host_visible))):
      data = kept.pop()
      self.pooled -= size
      data.fill(0)
      r = Region(va, size, host_visible, data)
    else: r = Region(va, size, host_visible)
    self.starts.append(va)   # bump allocation keeps the lists sorted
    self.regions.append(r)
    return r

  def free(self, va: int) -> Region:
    i = bisect_right(self.starts, va) - 1
    if i < 0 or self.starts[i] != va: raise ValueError(f"{self.device}: free of 0x{va:x}, which is not the start of a mapping (double free?)")
    del self.starts[i]
    r = self.regions.pop(i)
    if POOL_MIN <= r.size and self.pooled + r.size <= POOL_MAX:
      self.pool.setdefault((r.size, r.host_visible), []).append(r.mem.data)
      self.pooled += r.size
    return r

  def find(self, va: int) -> Region | None:
    i = bisect_right(self.starts, va) - 1
    if i >= 0:
      r = self.regions[i]
      if va < r.end: return r
    return None

  def resolve(self, va: int, nbytes: int, engine: str, what: str) -> tuple[Region, int]:
    """(region, offset) of [va, va + nbytes); an MMU fault naming `what` (who accesses, and why) otherwise."""
    r = self.find(va)
    if r is None or va + nbytes > r.end:
      if r is None: why = "is not mapped"
      else: why = f"runs past the end of the mapping 0x{r.va:x}..0x{r.end:x} ({r.size} bytes)"
      raise Fault(f"MMU fault: {what} at 0x{va:x}..0x{va + nbytes:x} ({nbytes} bytes) {why} (access by the {engine} engine)", "mmu", va)
    return r, va - r.va

  def bytes(self, va: int, nbytes: int, engine: str, what: str) -> np.ndarray:
    """A uint8 view of mapped bytes."""
    r, off = self.resolve(va, nbytes, engine, what)
    return r.mem.data[off:off + nbytes]

  def read_uint(self, va: int, nbytes: int, engine: str, what: str) -> int:
    return int.from_bytes(self.bytes(va, nbytes, engine, what).tobytes(), "little")

  def write(self, va: int, data: bytes | np.ndarray, engine: str, what: str) -> None:
    """Store bytes (they count as initialized)."""
    n = len(data) if isinstance(data, bytes) else data.nbytes
    r, off = self.resolve(va, n, engine, what)
    r.mem.write(data, off)

  def write_uint(self, va: int, nbytes: int, value: int, engine: str, what: str) -> None:
    self.write(va, (value & ((1 << (8 * nbytes)) - 1)).to_bytes(nbytes, "little"), engine, what)
