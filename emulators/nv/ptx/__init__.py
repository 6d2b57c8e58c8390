"""PTX on the mock NV GPU: the parser (parse.py), the lane state (execute.py), the instruction table (ops.py), the
scheduler (run.py), and `PTXKernel`, the executor-table row for PTX program images (emulators/executors.py)."""
from __future__ import annotations

from typing import Any

from emulators.fault import Fault
from emulators.heap import keep_freed_memory
from emulators.nv.ptx.access import param_access
from emulators.nv.ptx.execute import PTXFault
from emulators.nv.ptx.parse import Entry, PTXError, parse
from emulators.nv.ptx.run import check_supported, run
from refgrad.hw import image as container
from refgrad.hw.nv import PARAM_BASE
from refgrad.runtime.simt import checked_default

PTX_MAGIC = container.PTX


def make_ptx_image(src: str, entry: str) -> bytes:
  """A PTX program image (refgrad/hw/image.py): b"PTX1" around JSON {"entry", "ptx"}."""
  return container.pack(PTX_MAGIC, container.ptx_payload(src, entry))


def load_entry(src: str, entry: str) -> Entry:
  m = parse(src)
  if entry not in m.entries or not m.entries[entry].is_entry:
    raise ValueError(f"the PTX module has no .entry {entry!r} (entries: {', '.join(k for k, v in m.entries.items() if v.is_entry) or 'none'})")
  e = m.entries[entry]
  if e.error is not None: raise e.error   # something this entry (or a function it calls) uses is not supported
  check_supported(e)
  return e


class PTXKernel:
  """The executor-table row for b"PTX1" images: the parsed entry; `run_raw` runs a launch on the VM."""
  format = "PTX program (PTX1)"
  nglobals = nvars = 0
  params: list = []

  def __init__(self, payload: bytes):
    keep_freed_memory()   # the executor's arrays reuse freed heap instead of fresh pages (emulators/heap.py)
    try:
      self.src, self.name = container.read_ptx_payload(payload)
      self.entry = load_entry(self.src, self.name)
    except PTXError as e: raise Fault(f"the program image is not a valid {self.format}: {e}", "compute") from None
    except (ValueError, KeyError, TypeError) as e: raise Fault(f"the program image is not a valid {self.format}: {e}", "compute") from None
    self.shared_bytes = self.entry.shared_bytes
    self.arg_bytes = PARAM_BASE + self.entry.param_bytes
    # (byte offset in constant buffer 0, reads, writes) of each pointer parameter global memory is accessed through
    acc = param_access(self.entry)
    self.pointer_params = [(PARAM_BASE + p.offset, *acc[p.name]) for p in self.entry.params if p.name in acc]

  def run_raw(self, vm: Any, cb0: bytes, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int) -> None:
    try: run(self.entry, grid, block, bytes(cb0[PARAM_BASE:]), vm, max(shared, self.shared_bytes), checked_default())
    except PTXFault as f:
      line = f"PTX line {f.ins.line}: {f.ins.text.strip()}" if f.ins is not None else None
      raise Fault(f"kernel {self.name}: {f}", f.kind, f.address if f.kind == "mmu" else None, self.name, line) from None
