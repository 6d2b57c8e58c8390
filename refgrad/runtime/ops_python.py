"""The PYTHON device: the reference. Programs are serialized linear programs run by the SIMT executor.

Memory is host memory that remembers which bytes hold defined data (a bitmap, dropped once every byte is written), so
the executor can report uses of uninitialized memory in checked mode (CHECKED=0 turns checks off), and so can copyout
when the host reads undefined bytes back.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from refgrad.device import Allocator, Compiled, Compiler
from refgrad.renderer.serialize import PythonRenderer, SerializeError, parse_program
from refgrad.runtime.simt import Memory, Program, check_host_read


class PythonAllocator(Allocator):
  """Host memory as `simt.Memory`: zero-filled bytes, none of them initialized until written."""
  def alloc(self, nbytes: int) -> Memory:
    if nbytes < 0: raise ValueError(f"cannot allocate {nbytes} bytes")
    return Memory.zeros(nbytes)
  def copyin(self, dest: Memory, src: memoryview) -> None:
    if src.nbytes != dest.nbytes: raise ValueError(f"copyin of {src.nbytes} bytes into a buffer of {dest.nbytes} bytes")
    dest.write(src)
  def copyout(self, dest: memoryview, src: Memory) -> None:
    if dest.nbytes != src.nbytes: raise ValueError(f"copyout of a buffer of {src.nbytes} bytes into {dest.nbytes} bytes")
    check_host_read(src)
    np.frombuffer(dest, np.uint8)[:] = src.data


class PythonCompiler(Compiler):
  """Nothing to compile: the 'binary' is the JSON text itself (checked to parse, so errors show early)."""
  cachekey = ""   # no on-disk cache: compiling is the identity
  def compile(self, src: str) -> bytes:
    try: parse_program(src)
    except SerializeError as e: raise SerializeError(f"PYTHON compile: {e}") from None
    return src.encode()


class PythonProgram:
  """A parsed program, callable like every runtime's program: `(*buffers, global_size, local_size, vals, wait)`."""
  def __init__(self, name: str, lib: bytes):
    pname, uops = parse_program(lib)
    if pname != name: raise ValueError(f"the program is named {pname!r}, not {name!r}")
    self.name, self.program = name, Program(name, uops)

  def __call__(self, *bufs: Memory, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    st = time.perf_counter()
    self.program(list(bufs), global_size, local_size, vals)
    return time.perf_counter() - st if wait else None


def make_device(name: str) -> Compiled:
  return Compiled(name, PythonAllocator(), PythonRenderer(), PythonCompiler(), PythonProgram)
