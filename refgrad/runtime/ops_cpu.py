"""The CPU device: C rendered by CRenderer, compiled by the system C compiler into a shared object
(cached by content), loaded with ctypes and called on host memory.

The compiler flags are part of the reference semantics: -fwrapv (integer wrap-around),
-ffp-contract=off (no fused a*b+c), no fast-math (so no FTZ/DAZ start-up code and no reassociation).
$CC picks the compiler (default `cc`); its resolved path and `--version` are in the cache key.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from refgrad import knobs
from refgrad.device import Allocator, Compiled, CompileError, Compiler, cache_dir, cache_write, private_dir, warn, write_atomic
from refgrad.renderer.cstyle import CRenderer


class CPUAllocator(Allocator):
  """Host memory as zero-filled ctypes byte arrays (malloc alignment); a handle is the array itself."""
  def alloc(self, nbytes: int) -> Any:
    if nbytes < 0: raise ValueError(f"cannot allocate {nbytes} bytes")
    return (ctypes.c_uint8 * nbytes)()
  def copyin(self, dest: Any, src: memoryview) -> None:
    if src.nbytes != ctypes.sizeof(dest): raise ValueError(f"copyin of {src.nbytes} bytes into a {ctypes.sizeof(dest)}-byte CPU buffer")
    if src.nbytes: ctypes.memmove(dest, np.frombuffer(src, np.uint8).ctypes.data, src.nbytes)
  def copyout(self, dest: memoryview, src: Any) -> None:
    if dest.nbytes != ctypes.sizeof(src): raise ValueError(f"copyout of a {ctypes.sizeof(src)}-byte CPU buffer into {dest.nbytes} bytes")
    if dest.readonly: raise ValueError("copyout needs a writable destination")
    if dest.nbytes: ctypes.memmove(np.frombuffer(dest, np.uint8).ctypes.data, src, dest.nbytes)


class ClangCompiler(Compiler):
  """C source -> shared object bytes with the system C compiler ($CC, default `cc`)."""
  flags: tuple[str, ...] = ("-O2", "-fwrapv", "-ffp-contract=off", "-fno-fast-math", "-std=gnu11", "-shared", "-fPIC")
  libs: tuple[str, ...] = ("-lm",)

  def __init__(self, cc: str | None = None):
    self.cc = cc or os.environ.get("CC") or "cc"
    found = shutil.which(self.cc)
    if found is None: raise RuntimeError(f"C compiler {self.cc!r} not found: install one or set CC to a C compiler")
    self.path = os.path.realpath(found)
    self.cachekey = "\0".join(["refgrad-cpu-1", self.path, _compiler_version(self.path), platform.machine(), *self.flags, *self.libs])

  def compile(self, src: str) -> bytes:
    # a private directory per call, so parallel workers never share a file
    with tempfile.TemporaryDirectory(prefix="refgrad-cc-") as d:
      out = Path(d) / "program.so"
      cmd = [self.path, *self.flags, "-x", "c", "-", "-o", str(out), *self.libs]
      r = subprocess.run(cmd, input=src.encode(), capture_output=True, check=False)
      if r.returncode != 0 or not out.exists():
        numbered = "\n".join(f"{i + 1:4d} | {ln}" for i, ln in enumerate(src.splitlines()))
        raise CompileError(f"{self.cc} failed (exit code {r.returncode}) on this source:\n{numbered}\n"
                           f"--- compiler output ---\n{r.stderr.decode(errors='replace').strip()}")
      return out.read_bytes()


@functools.cache
def _private_lib_dir() -> Path: return private_dir("refgrad-lib-")


@functools.cache
def _compiler_version(path: str) -> str:
  r = subprocess.run([path, "--version"], capture_output=True, check=False)
  return r.stdout.decode(errors="replace").strip() + r.stderr.decode(errors="replace").strip()


def _load(path: Path, rel: Path, lib: bytes) -> ctypes.CDLL:
  """dlopen the library at path. When that fails (the file or the whole cache directory was deleted under the running
  process since it was checked), write it again and load that, at last from this process's private directory."""
  for attempt in range(3):
    try: return ctypes.CDLL(str(path))
    except OSError as e:
      if attempt == 2: raise OSError(f"cannot load the compiled library {path} ({e}), even after writing it again") from None
      warn(f"cannot load {path} ({e}); writing it again")
      if attempt == 0: path = cache_write(Path("cpu_lib") / rel, lib)
      else: write_atomic(path := _private_lib_dir() / rel, lib)
  raise AssertionError("unreachable")


class CPUProgram:
  """A compiled kernel loaded with ctypes. The shared object is kept under the cache directory by the
  hash of its bytes (a temp dir may be mounted noexec), published atomically; a file already there is loaded
  only when its bytes are the ones expected (a truncated one would kill the process with SIGBUS).
  With DISABLE_COMPILER_CACHE=1 it goes to a private temporary directory of the process instead."""
  def __init__(self, name: str, lib: bytes):
    self.name = name
    rel = Path(f"{hashlib.sha256(lib).hexdigest()}.so")
    if knobs.get("DISABLE_COMPILER_CACHE"): write_atomic(path := _private_lib_dir() / rel, lib)
    else:
      path = cache_dir() / "cpu_lib" / rel
      try: ok = path.read_bytes() == lib
      except (FileNotFoundError, NotADirectoryError): ok = False
      except OSError as e:
        warn(f"cannot read {path} ({e.strerror or e}); writing it again")
        ok = False
      if not ok:
        if path.exists(): warn(f"loadable library {path} is damaged (its bytes do not match its name); writing it again")
        path = cache_write(Path("cpu_lib") / rel, lib)
    self.lib = _load(path, rel, lib)
    try: self.fxn = getattr(self.lib, name)
    except AttributeError: raise ValueError(f"the compiled program has no function {name!r}") from None
    self.fxn.restype = None

  def __call__(self, *bufs: Any, global_size: tuple[int, int, int] = (1, 1, 1), local_size: tuple[int, int, int] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    # The launch geometry is compiled into the loops; variables go as 64-bit integers: the callee reads the
    # low bits of its narrower parameter (SysV x86-64 and AArch64 both pass ints in full registers/slots).
    args = [*bufs, *(ctypes.c_uint64(v) if v >= 2 ** 63 else ctypes.c_int64(v) for v in vals)]
    st = time.perf_counter()
    self.fxn(*args)
    return time.perf_counter() - st if wait else None


def make_device(name: str) -> Compiled:
  return Compiled(name, CPUAllocator(), CRenderer(), ClangCompiler(), CPUProgram)
