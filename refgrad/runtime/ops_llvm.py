"""The LLVM device: a second CPU backend, independent of the system C compiler. Programs are rendered to LLVM IR
(refgrad/renderer/llvmir.py, target "host"), optimized (-O2 pipeline, no fast-math: the IR has no fast-math flags and
the target machine fuses only llvm.fmuladd, which the renderer never emits) and compiled by llvmlite to a host object
file (cached by content), which MCJIT links into the process; the function is called with ctypes on host memory,
exactly like the CPU device's (same allocator, same calling convention).

The cache key holds llvmlite's and LLVM's versions and the host CPU name and features the code was compiled for.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from refgrad.device import Compiled, CompileError, Compiler
from refgrad.renderer.llvmir import LLVMRenderer
from refgrad.runtime.ops_cpu import CPUAllocator, CPUProgram

_lock = threading.Lock()   # LLVM's global state (target registry, MCJIT) is set up once


@functools.cache
def init_llvm() -> None:
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()


@functools.cache
def host_machine() -> llvm.TargetMachine:
  """The host target machine of the compiler (kept)."""
  with _lock: return new_host_machine()

def new_host_machine() -> llvm.TargetMachine:
  """A host target machine: this CPU's name and features, PIC code for MCJIT (an MCJIT engine owns its own: give it a new one)."""
  init_llvm()
  target = llvm.Target.from_triple(llvm.get_process_triple())
  return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2,
                                       reloc="pic", codemodel="jitdefault")


def numbered(src: str) -> str: return "\n".join(f"{i + 1:4d} | {ln}" for i, ln in enumerate(src.splitlines()))


def optimized_module(src: str, tm: llvm.TargetMachine, what: str) -> llvm.ModuleRef:
  """Parse and verify LLVM IR text, then run the -O2 module pipeline for `tm`; CompileError shows the numbered source."""
  with _lock:
    init_llvm()
    try:
      mod = llvm.parse_assembly(src)
      mod.verify()
    except RuntimeError as e: raise CompileError(f"{what}: LLVM rejected this IR:\n{numbered(src)}\n--- LLVM says ---\n{e}") from None
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_object(src: str, tm: llvm.TargetMachine, what: str) -> bytes:
  """LLVM IR text -> an object file for `tm` (optimized; CompileError shows the numbered source)."""
  mod = optimized_module(src, tm, what)
  with _lock: return tm.emit_object(mod)


class LLVMCompiler(Compiler):
  """LLVM IR -> a host object file (ELF on Linux) with llvmlite."""
  def __init__(self) -> None:
    tm = host_machine()
    self.cachekey = "\0".join(["refgrad-llvm-1", llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)), tm.triple,
                               llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()])

  def compile(self, src: str) -> bytes:
    return compile_object(src, host_machine(), "LLVM device")


class LLVMProgram(CPUProgram):
  """A compiled object linked into the process by MCJIT; called like a CPU program (ctypes, host pointers, 64-bit ints)."""
  def __init__(self, name: str, lib: bytes):   # not super().__init__: that loads shared objects, this an object file
    self.name = name
    with _lock:
      tm = new_host_machine()
      try: obj = llvm.ObjectFileRef.from_data(lib)
      except RuntimeError as e: raise ValueError(f"{name}: the LLVM device's binary is not an object file LLVM can read ({e})") from None
      empty = llvm.parse_assembly("")
      empty.triple = tm.triple
      self.engine = llvm.create_mcjit_compiler(empty, tm)
      self.engine.add_object_file(obj)
      self.engine.finalize_object()
      addr = self.engine.get_function_address(name)
    if not addr: raise ValueError(f"the compiled program has no function {name!r}")
    self.fxn: Any = ctypes.CFUNCTYPE(None)(addr)


def make_device(name: str) -> Compiled:
  return Compiled(name, CPUAllocator(), LLVMRenderer("host"), LLVMCompiler(), LLVMProgram)
