"""Kernel bodies: the program image in GPU memory names its format by a 4-byte magic, and `EXECUTORS` maps the
magic to a loader. Today: b"RGL1" = the serialized linear program run by the SIMT executor the PYTHON device uses
(same checked mode, same reports); b"PTX1" = a PTX module and entry name run by the PTX executor (emulators/nv/ptx/).

Image layout: the container of refgrad/hw/image.py (magic, u32 little-endian payload length, payload).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from emulators.fault import Fault
from emulators.nv.ptx import PTXKernel
from refgrad.dtype import PtrDType
from refgrad.hw import image as container
from refgrad.renderer.serialize import SerializeError, parse_program
from refgrad.runtime.simt import ExecutionError, Memory, OutOfBoundsError, Program, UndefinedBehaviourError
from refgrad.target import local_bytes
from refgrad.uop.ops import Ops
from refgrad.uop.spec import SpecError

IMAGE_HEADER = container.HEADER_BYTES


class LinearKernel:
  """A serialized linear program, parsed and prepared once; what the launcher needs to know about its parameters."""
  format = "serialized linear program (RGL1)"

  def __init__(self, payload: bytes):
    try:
      name, uops = parse_program(payload)
      self.program = Program(name, uops)
    except (SerializeError, SpecError, ExecutionError) as e: raise Fault(f"the program image is not a valid {self.format}: {e}", "compute") from None
    except (ValueError, TypeError, KeyError, IndexError) as e:   # a payload that parses but is no program the executor can prepare
      raise Fault(f"the program image is not a valid {self.format}: {type(e).__name__}: {e}", "compute") from None
    p = self.program
    self.name = name
    self.nglobals = len(p.globals)
    self.nvars = len(p.vars)
    self.arg_bytes = 8 * self.nglobals + 4 * self.nvars          # constant buffer 0: u64 VA per buffer, then i32 per variable
    self.shared_bytes = local_bytes(d for _, d in sorted(p.locals.items()))   # refgrad.target's layout rule
    loads = {u.src[0].arg for u in p.uops if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL}
    # per buffer: (declared bytes or None, reads, writes)
    self.params: list[tuple[int | None, bool, bool]] = []
    for i in range(self.nglobals):
      pdt: PtrDType = p.globals[i][1]
      self.params.append((pdt.size * pdt.base.itemsize if pdt.size >= 0 else None, i in loads, i in p.stored_args))

  def run(self, bufs: Sequence[Memory], gsz: tuple[int, int, int], lsz: tuple[int, int, int], vals: Sequence[int], vas: Sequence[int]) -> None:
    """Run one launch; simt's reports become faults keeping its message (kernel, uop, thread)."""
    try: self.program(bufs, gsz, lsz, vals)
    except OutOfBoundsError as e: raise Fault(str(e), "mmu", self._address(str(e), vas), self.name, self._uop(str(e))) from None
    except UndefinedBehaviourError as e: raise Fault(f"undefined behaviour: {e}", "compute", None, self.name, self._uop(str(e))) from None
    except ExecutionError as e: raise Fault(f"the kernel cannot run as launched: {e}", "compute", None, self.name, self._uop(str(e))) from None

  def _uop(self, msg: str) -> str | None:
    m = re.search(r"\buop (\d+) \(", msg)
    return self.program.describe(int(m.group(1))) if m and int(m.group(1)) < len(self.program.uops) else None

  def _address(self, msg: str, vas: Sequence[int]) -> int | None:
    """The faulting GPU address of an out-of-bounds global access (buffer VA + index * element size)."""
    m = re.search(r"accesses index (-?\d+) of buffer (\d+)", msg)
    if m is None or int(m.group(2)) >= len(vas): return None
    return vas[int(m.group(2))] + int(m.group(1)) * self.program.globals[int(m.group(2))][1].base.itemsize


# magic -> loader (payload bytes -> kernel with .name, .nglobals, .nvars, .arg_bytes, .shared_bytes, .params, .run)
EXECUTORS: dict[bytes, Callable[[bytes], Any]] = {container.LINEAR: LinearKernel, container.PTX: PTXKernel}

_CACHE: dict[bytes, Any] = {}   # by the whole image (magic + payload): parsing is the costly part
_CACHE_MAX = 1024


def load(image: bytes) -> Any:
  """The kernel of an image's bytes (header included), parsed once per distinct image."""
  if (k := _CACHE.get(image)) is not None: return k
  magic = image[:4]
  if (loader := EXECUTORS.get(magic)) is None:
    raise Fault(f"the program image starts with {magic!r}, which is no known format (known: {', '.join(repr(m) for m in EXECUTORS)})", "compute")
  k = loader(image[IMAGE_HEADER:])
  if len(_CACHE) >= _CACHE_MAX: _CACHE.pop(next(iter(_CACHE)))
  _CACHE[image] = k
  return k
