"""CPUO3: refgrad's CPU device built with its own compiler flags (-O3 -funroll-loops), and one op rendered through the
public hook (bool XOR as `a != b`). It keeps the flags the reference semantics need (-fwrapv, -ffp-contract=off,
no fast-math), so it must pass `python -m conformance --device CPUO3` bit for bit. Its allocator is the CPU's and its
renderer a CRenderer, so the fuzzer compiles its programs in batches, as it does the CPU's (docs/backends.md)."""
from __future__ import annotations

from refgrad.device import Compiled
from refgrad.dtype import DType, dtypes
from refgrad.renderer.cstyle import CRenderer
from refgrad.runtime.ops_cpu import ClangCompiler, CPUAllocator, CPUProgram
from refgrad.uop.ops import Ops


class O3Compiler(ClangCompiler):
  flags = ("-O3", "-funroll-loops", *(f for f in ClangCompiler.flags if not f.startswith("-O")))
  def __init__(self) -> None:
    super().__init__()
    self.cachekey += "\0refgrad-example-plugin-O3"   # the cache must never serve the CPU's binaries for these flags


def _xor(dtype: DType, operands: list[str]) -> str | None:
  """One lane of XOR: for bools `a != b`; None keeps the default rendering of every other dtype."""
  return f"({operands[0]} != {operands[1]})" if dtype == dtypes.bool else None


def make_device(name: str) -> Compiled:
  return Compiled(name, CPUAllocator(), CRenderer(op_overrides={Ops.XOR: _xor}), O3Compiler(), CPUProgram)
