"""Third-party backends with the faults a backend author meets, each registered through a real "refgrad.devices" entry
point by tests/plugins/registry.py: a fast-math CPU variant (its library switches the process to FTZ/DAZ when loaded),
a device whose float MUL programs segfault, one whose float MUL programs hang, one whose construction raises, one
whose make_device returns the wrong type, and (registry only) an entry point that would shadow the CPU."""
from __future__ import annotations

import ctypes
import time
from dataclasses import replace
from typing import Any

from refgrad.device import Compiled, Device
from refgrad.runtime.ops_cpu import ClangCompiler, CPUProgram


class FastMathCompiler(ClangCompiler):
  """The CPU's compiler with -ffast-math: gcc links crtfastmath.o, which sets FTZ/DAZ when the library is loaded."""
  flags = (*(f for f in ClangCompiler.flags if f != "-fno-fast-math"), "-ffast-math")
  def __init__(self) -> None:
    super().__init__()
    self.cachekey += "\0fast-math"

def fast_cpu(name: str) -> Compiled:
  return replace(Device["CPU"], name=name, compiler=FastMathCompiler())


def _faulty(name: str, fault: Any) -> Compiled:
  """A CPU whose programs for float32 MUL (conformance names them conf_alu_mul_float_float) run `fault` instead."""
  def runtime(fname: str, lib: bytes) -> Any:
    prg = CPUProgram(fname, lib)
    return fault if "_mul_float_float" in fname else prg
  return replace(Device["CPU"], name=name, runtime=runtime)

def _segfault(*args: Any, **kw: Any) -> None: ctypes.string_at(0)   # reads address 0: SIGSEGV
def _hang(*args: Any, **kw: Any) -> None: time.sleep(3600)

def segfault_cpu(name: str) -> Compiled: return _faulty(name, _segfault)
def hang_cpu(name: str) -> Compiled: return _faulty(name, _hang)

def raising(name: str) -> Compiled: raise RuntimeError("no such accelerator on this machine")

def wrong_type(name: str) -> Any: return {"name": name}
