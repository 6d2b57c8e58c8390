"""Devices, allocators, buffers and the device registry.

A device is a `Compiled`: an allocator (raw memory), a renderer (linear program -> source), a
compiler (source -> bytes, cached) and a runtime (bytes -> a callable program). `Device["CPU"]`
is the real backend, `Device["PYTHON"]` the reference, `Device["NV"]` / `Device["AMD"]` the HCQ runtimes
(`NV:1`, `AMD:1`: further GPUs; `X:0` is `X`), which need a driver (`MOCKGPU=1`: the mock GPUs); the
default comes from the `DEV` environment variable (CPU when unset).
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from refgrad.dtype import DType, dtypes


class Allocator:
  """Raw device memory. Handles are opaque to everything but the device's own runtime."""
  def alloc(self, nbytes: int) -> Any: raise NotImplementedError
  def free(self, handle: Any, nbytes: int) -> None: pass
  def copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError
  def copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError


class CompileError(RuntimeError):
  """A compiler rejected a program; the message holds its output and the numbered source."""


class Compiler:
  """Turns rendered source into a program binary, with a content-addressed on-disk cache: the key
  is a hash of (cachekey, source), so a changed compiler or flag set never serves a stale
  binary, and parallel writers publish with an atomic rename."""
  cachekey: str = ""
  def compile(self, src: str) -> bytes: raise NotImplementedError
  def compile_cached(self, src: str) -> bytes:
    if not self.cachekey or os.environ.get("DISABLE_COMPILER_CACHE"): return self.compile(src)
    key = hashlib.sha256(f"{self.cachekey}\0{src}".encode()).hexdigest()
    path = cache_dir() / "compiled" / key[:2] / key
    try: return path.read_bytes()
    except FileNotFoundError: pass
    lib = self.compile(src)
    write_atomic(path, lib)
    return lib


def cache_dir() -> Path:
  """Where compiled programs are kept: $REFGRAD_CACHE, else ~/.cache/refgrad."""
  return Path(os.environ.get("REFGRAD_CACHE", Path.home() / ".cache" / "refgrad"))

def write_atomic(path: Path, data: bytes) -> None:
  """Write a file so readers see either nothing or all of it (temp file + rename)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
  try:
    with os.fdopen(fd, "wb") as f: f.write(data)
    os.replace(tmp, path)
  except BaseException:
    Path(tmp).unlink(missing_ok=True)
    raise


@dataclass
class Compiled:
  """A device: memory, code generation and execution."""
  name: str
  allocator: Allocator
  renderer: Any                                   # refgrad.renderer.Renderer
  compiler: Compiler
  runtime: Callable[[str, bytes], Callable[..., float | None]]  # (function name, binary) -> program
  def synchronize(self) -> None:
    """Wait for everything queued on the device (devices that run launches synchronously have nothing to wait for)."""


class _DeviceRegistry:
  """`Device["CPU"]` / `Device["PYTHON"]`: devices are built on first use and kept. A third-party
  backend registers a module with a `make_device(name) -> Compiled` function under the entry-point
  group "refgrad.devices" (entry name = device name) and is then used like the built-in ones."""
  _made: dict[str, Compiled] = {}
  _lock = threading.Lock()
  _builtin = {"CPU": "refgrad.runtime.ops_cpu", "PYTHON": "refgrad.runtime.ops_python", "NV": "refgrad.runtime.ops_nv",
              "AMD": "refgrad.runtime.ops_amd"}

  @functools.cached_property
  def _modules(self) -> dict[str, str]:
    from importlib.metadata import entry_points
    return {**self._builtin, **{ep.name.upper(): ep.value for ep in entry_points(group="refgrad.devices")}}
  @property
  def names(self) -> tuple[str, ...]: return tuple(self._modules)
  def canonicalize(self, name: str) -> str:
    base, sep, idx = name.partition(":")
    base = base.upper()
    if base not in self._modules:
      raise KeyError(f"unknown device {name!r}: choose one of {', '.join(self._modules)} (set DEV=... or pass device=)")
    return base if sep and idx == "0" else base + sep + idx   # "NV:0" is "NV", the first GPU
  def __getitem__(self, name: str) -> Compiled:
    name = self.canonicalize(name)   # "NV:0" and "NV" are one device
    if (dev := self._made.get(name)) is None:
      with self._lock:               # threads asking at once get the same device (a GPU must be opened once)
        if (dev := self._made.get(name)) is None:
          dev = self._made[name] = importlib.import_module(self._modules[name.split(":")[0]]).make_device(name)
    return dev
  @property
  def DEFAULT(self) -> str: return self.canonicalize(os.environ.get("DEV", "CPU"))
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: os.environ["DEV"] = self.canonicalize(name)   # DEV stays the one source

Device = _DeviceRegistry()


class Buffer:
  """`size` elements of `dtype` on a device. Memory is allocated on first use."""
  def __init__(self, device: str, size: int, dtype: DType):
    if size < 0: raise ValueError(f"buffer size must be >= 0, got {size}")
    self.device, self.size, self.dtype = Device.canonicalize(device), size, dtype
    if (sup := Device[self.device].renderer.supported_dtypes) is not None and dtype.scalar() not in sup:
      raise TypeError(f"device {self.device} does not support {dtype} (it supports {', '.join(sorted(d.name for d in sup))})")
    self._handle: Any = None
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def handle(self) -> Any:
    if self._handle is None: self._handle = Device[self.device].allocator.alloc(self.nbytes)
    return self._handle
  def __del__(self) -> None:
    if getattr(self, "_handle", None) is not None:
      try: Device[self.device].allocator.free(self._handle, self.nbytes)
      except Exception: pass  # interpreter shutdown: the memory goes with the process
  def __repr__(self) -> str: return f"<Buffer {self.device} {self.size} {self.dtype}>"

  def copyin(self, data: memoryview | bytes | np.ndarray) -> Buffer:
    mv = memoryview(np.ascontiguousarray(data).view(np.uint8).reshape(-1) if isinstance(data, np.ndarray) else data).cast("B")
    if mv.nbytes != self.nbytes: raise ValueError(f"copyin of {mv.nbytes} bytes into {self} ({self.nbytes} bytes)")
    Device[self.device].allocator.copyin(self.handle, mv)
    return self
  def copyout(self, dest: memoryview) -> memoryview:
    dest = dest.cast("B")
    if dest.nbytes != self.nbytes: raise ValueError(f"copyout of {self} ({self.nbytes} bytes) into {dest.nbytes} bytes")
    Device[self.device].allocator.copyout(dest, self.handle)
    return dest
  def numpy(self) -> np.ndarray:
    """The contents as a numpy array (bfloat16 as its uint16 bits; vectors get a trailing axis)."""
    out = np.empty(self.nbytes, np.uint8)
    self.copyout(memoryview(out))
    arr = out.view(self.dtype.np)
    return arr.reshape(self.size, self.dtype.count) if self.dtype.count > 1 else arr
  def copy_to(self, device: str) -> Buffer:
    """A copy of this buffer on another (or the same) device, through host memory."""
    return Buffer(device, self.size, self.dtype).copyin(self.numpy())
  @staticmethod
  def from_numpy(device: str, arr: np.ndarray, dtype: DType | None = None) -> Buffer:
    dt = dtype if dtype is not None else dtypes.from_np(arr.dtype)
    if arr.dtype != dt.np: raise TypeError(f"array of {arr.dtype} does not hold {dt} (expected {dt.np})")
    return Buffer(device, arr.size // dt.count, dt).copyin(arr)
