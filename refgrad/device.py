"""Devices, allocators, buffers and the device registry.

A device is a `Compiled`: an allocator (raw memory), a renderer (linear program -> source), a
compiler (source -> bytes, cached) and a runtime (bytes -> a callable program). `Device["CPU"]`
is the real backend, `Device["PYTHON"]` the reference, `Device["NV"]` / `Device["AMD"]` the HCQ runtimes
(`NV:1`, `AMD:1`: further GPUs; `X:0` is `X`), which need a driver (`MOCKGPU=1`: the mock GPUs); the
default comes from the `DEV` environment variable (CPU when unset).
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from refgrad import knobs
from refgrad.dtype import DType, dtypes
from refgrad.target import CPU, Target, emulated


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
  binary, and parallel writers publish with an atomic rename.

  An entry is one file: a JSON header line (format, key, sha256 of the source and of the binary, its size)
  and the binary's raw bytes. Nothing read back is trusted: a truncated, garbage or swapped entry fails the
  check, is reported in one line and recompiled. DISABLE_COMPILER_CACHE=1 never touches the disk."""
  cachekey: str = ""
  batches = False   # compile_batch makes fewer compiler calls than compile_cached one by one (worth calling ahead of time)
  def compile(self, src: str) -> bytes: raise NotImplementedError
  def compile_cached(self, src: str) -> bytes:
    if (lib := self.cached(src)) is not None: return lib
    lib = self.compile(src)
    self.store(src, lib)
    return lib

  def compile_batch(self, kernels: Sequence[tuple[str, tuple[list[str], list[str]]]]) -> list[bytes | CompileError]:
    """Kernels given as (name, (declarations, function lines)) -- a renderer's `render_parts`, whose `render` is the
    declarations then the lines -- each compiled and cached as `compile_cached(its source)` would be, so a Runner of it
    later finds it in the cache. One entry per kernel: its binary, or the CompileError that kernel alone gets. A compiler
    that can compile many kernels in one call (`batches`) overrides this; here each is compiled on its own."""
    out: list[bytes | CompileError] = []
    for _, parts in kernels:
      try: out.append(self.compile_cached(source_of(parts)))
      except CompileError as e: out.append(e)
    return out

  def _key(self, src: str) -> str:
    # the entry format is part of the key: a refgrad that stored bare binaries never reads one of these, nor this one its
    return hashlib.sha256(f"{COMPILED_FORMAT}\0{self.cachekey}\0{src}".encode()).hexdigest()
  def _caching(self) -> bool: return bool(self.cachekey) and not knobs.get("DISABLE_COMPILER_CACHE")

  def cached(self, src: str) -> bytes | None:
    """The cached binary of `src`, or None (not cached, caching off, or a damaged entry: reported in one line)."""
    if not self._caching(): return None
    key, src_sha = self._key(src), hashlib.sha256(src.encode()).hexdigest()
    path = cache_dir(writable=False) / "compiled" / key[:2] / key
    try: return _read_entry(path.read_bytes(), key, src_sha)
    except (FileNotFoundError, NotADirectoryError): return None
    except OSError as e: warn(f"cannot read compile cache entry {path} ({e.strerror or e}); recompiling")
    except ValueError as e: warn(f"compile cache entry {path} is damaged ({e}); recompiling")
    return None

  def store(self, src: str, lib: bytes) -> None:
    """Cache `lib` as the binary of `src` (nothing when caching is off)."""
    if not self._caching(): return
    key = self._key(src)
    head = {"format": COMPILED_FORMAT, "key": key, "src_sha256": hashlib.sha256(src.encode()).hexdigest(),
            "bin_sha256": hashlib.sha256(lib).hexdigest(), "bin_size": len(lib)}
    cache_write(Path("compiled") / key[:2] / key, json.dumps(head).encode() + b"\n" + lib)

def source_of(parts: tuple[list[str], list[str]]) -> str:
  """A kernel's source from its `render_parts` (what `render` returns)."""
  return "\n".join([*parts[0], *parts[1]]) + "\n"

COMPILED_FORMAT = "refgrad.compiled/1"

def _read_entry(data: bytes, key: str, src_sha: str) -> bytes:
  """The binary of a compile-cache entry after checking its header against what is expected; ValueError says what is wrong."""
  nl = data.find(b"\n")
  if nl < 0: raise ValueError("no header line")
  try: head = json.loads(data[:nl])
  except ValueError: raise ValueError("the header is not JSON") from None
  if not isinstance(head, dict) or head.get("format") != COMPILED_FORMAT: raise ValueError(f"the header is not a {COMPILED_FORMAT} header")
  if head.get("key") != key or head.get("src_sha256") != src_sha: raise ValueError("it was compiled from another source or compiler")
  lib = data[nl + 1:]
  if head.get("bin_size") != len(lib): raise ValueError(f"the binary has {len(lib)} bytes, the header says {head.get('bin_size')}")
  if head.get("bin_sha256") != hashlib.sha256(lib).hexdigest(): raise ValueError("the binary does not match its digest")
  return lib


def warn(msg: str) -> None:
  """One line on stderr (cache trouble is worth knowing, never worth failing for)."""
  print(f"refgrad: warning: {msg}", file=sys.stderr)


_fallback: Path | None = None     # the private temporary cache of this process, once the configured one failed
_checked_dirs: set[Path] = set()  # configured cache directories known to be writable

def private_dir(prefix: str) -> Path:
  d = Path(tempfile.mkdtemp(prefix=prefix))   # mode 0700: only this user
  atexit.register(shutil.rmtree, d, True)
  return d

def cache_dir(writable: bool = True) -> Path:
  """Where cached files are kept: $REFGRAD_CACHE, else ~/.cache/refgrad. With `writable`, a directory that cannot be
  created or written is replaced (for the rest of the process) by a private temporary one, with a one-line warning."""
  if _fallback is not None: return _fallback
  d = knobs.get("REFGRAD_CACHE") or Path.home() / ".cache" / "refgrad"
  if not writable or d in _checked_dirs: return d
  try:
    d.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=d, prefix=".probe.")
    os.close(fd)
    os.unlink(probe)
  except OSError as e: return _fall_back(d, e)
  _checked_dirs.add(d)
  return d

def _fall_back(d: Path, e: OSError) -> Path:
  global _fallback
  if _fallback is None:
    _fallback = private_dir("refgrad-cache-")
    warn(f"cache directory {d} is not usable ({e.strerror or e}); using the private temporary {_fallback} for this process")
  return _fallback

def cache_write(rel: Path, data: bytes) -> Path:
  """Publish `data` at `rel` under the cache directory, atomically; a failed write (read-only, full disk) moves the
  process to a private temporary cache with a warning and writes there."""
  path = cache_dir() / rel
  try: write_atomic(path, data)
  except OSError as e:
    path = _fall_back(path.parent, e) / rel
    write_atomic(path, data)
  return path

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
  def graph(self, launches: list[GraphLaunch], bufs: list[Buffer]) -> Graph | None:
    """A graph executor for consecutive launches on this device (TinyJit replays through it), built once: calling it with
    a buffer list (the same slots, possibly other buffers) runs every launch in order, with the ordering between
    dependent launches kept. None (the default): the device has none, and the launches run one by one."""
    return None


@dataclass(frozen=True)
class GraphLaunch:
  """One launch of a graph: a loaded program (what `Compiled.runtime` returned), its launch geometry, and the index in
  the graph's buffer list of each of its buffers (the output first)."""
  prg: Any
  name: str
  global_size: tuple[int, int, int]
  local_size: tuple[int, int, int]
  slots: tuple[int, ...]


class Graph:
  """What `Compiled.graph` returns: run the launches on `bufs` (indexed by the launches' slots); len() is the launch count."""
  def __call__(self, bufs: list[Buffer]) -> None: raise NotImplementedError
  def __len__(self) -> int: raise NotImplementedError


# a built-in device named for one code path -> (the device it is a path of, its knob, the path): the runtimes build it on
# that path whatever the knob says (ops_nv.CODE_DEVICES, ops_amd.NAMED_PATHS); under that knob value both run the same
# code, so the default device lists of conformance and the fuzzer test it once (_DeviceRegistry.duplicate)
CODE_PATH_DEVICES: dict[str, tuple[str, str, str]] = {"NV_NVCC": ("NV", "NV_CODE", "nvcc"), "AMD_ISA": ("AMD", "AMD_CODE", "isa")}


class _DeviceRegistry:
  """`Device["CPU"]` / `Device["PYTHON"]`: devices are built on first use and kept. A third-party backend registers
  `module:function` (or a module with a `make_device` function) under the entry-point group "refgrad.devices" (entry
  name = device name); `function(name)` must return a `Compiled` (docs/backends.md). An entry point that would shadow
  a built-in device is refused: `refused` says why, and the built-in stays."""
  _made: dict[str, Compiled] = {}
  # reentrant: a backend's make_device may ask for another device (e.g. build on PYTHON); one lock for all names, so two
  # threads building devices that need each other cannot deadlock
  _lock = threading.RLock()
  _building: list[str] = []   # names whose make_device is running (under _lock: one thread)
  _builtin = {"CPU": "refgrad.runtime.ops_cpu", "PYTHON": "refgrad.runtime.ops_python", "NV": "refgrad.runtime.ops_nv",
              "NV_NVCC": "refgrad.runtime.ops_nv", "AMD": "refgrad.runtime.ops_amd", "LLVM": "refgrad.runtime.ops_llvm",
              "AMD_ISA": "refgrad.runtime.ops_amd"}   # AMD_ISA: the AMD mock GPU on AMD_CODE=isa (gfx1100 machine code), whatever AMD_CODE says

  @functools.cached_property
  def _modules(self) -> dict[str, str]:
    from importlib.metadata import entry_points
    out = dict(self._builtin)
    for ep in entry_points(group="refgrad.devices"):
      name = ep.name.upper()
      if name in self._builtin or name in out:
        self.refused[name] = (f"entry point {ep.name!r} = {ep.value!r} (refgrad.devices) is refused: it would shadow the "
                              f"{'built-in' if name in self._builtin else 'already registered'} device {name}; rename it")
      else: out[name] = ep.value
    return out
  @functools.cached_property
  def refused(self) -> dict[str, str]: return {}   # entry-point device name -> why it was not registered
  _needs = {"NV_NVCC": "nvcc"}   # built-in devices that need a program on PATH (and cannot be constructed without it)
  def unavailable(self, name: str) -> str | None:
    """Why a registered device cannot run on this machine, found without building it (a program it needs is missing
    from PATH), or None. The default device lists of conformance and the fuzzer leave such a device out with a note."""
    tool = self._needs.get(name.partition(":")[0].upper())
    return f"{tool} is not on PATH" if tool is not None and shutil.which(tool) is None else None
  def duplicate(self, name: str) -> str | None:
    """Why a registered device runs the very code another default device runs under the knobs as set (AMD_ISA while
    AMD_CODE=isa), or None. The default device lists leave such a device out with a note; naming it still runs it."""
    base, sep, idx = name.partition(":")
    if (p := CODE_PATH_DEVICES.get(base.upper())) is None or knobs.get(p[1]) != p[2]: return None
    return f"it runs the same code as {p[0] + sep + idx} ({p[1]}={p[2]})"
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
          if name in self._building:
            raise RuntimeError(f"device {name}: its make_device asks for {name} itself ({' -> '.join(self._building + [name])})")
          self._building.append(name)
          try: dev = make_device_of(self._modules[name.split(":")[0]], name)
          finally: self._building.pop()
          self._made[name] = dev
    return dev
  @property
  def DEFAULT(self) -> str:
    try: return self.canonicalize(knobs.get("DEV"))
    except KeyError as e: raise knobs.KnobError("DEV", f"DEV={os.environ.get('DEV')!r} is not allowed: {e.args[0]}") from None
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: os.environ["DEV"] = self.canonicalize(name)   # DEV stays the one source

Device = _DeviceRegistry()


def target_for(device: str) -> Target:
  """The target kernels for `device` are optimized for: $EMULATE's, else the device renderer's own (CPU by default)."""
  if (t := emulated()) is not None: return t
  return getattr(Device[device].renderer, "target", CPU)


class DeviceError(RuntimeError):
  """A device's make_device failed or returned something that is not a device; the message names the device and the
  entry point."""

def make_device_of(target: str, name: str) -> Compiled:
  """Call `target` ("module:function", or "module" with a `make_device`) for device `name` and check what it returns."""
  mod, _, fn = target.partition(":")
  where = f"device {name} ({target})"
  try: make = getattr(importlib.import_module(mod), fn or "make_device")
  except (ImportError, AttributeError) as e: raise DeviceError(f"{where}: cannot load its make_device: {type(e).__name__}: {e}") from e
  dev = make(name)
  if not isinstance(dev, Compiled):
    raise DeviceError(f"{where}: make_device returned {type(dev).__name__}, not a refgrad.device.Compiled (docs/backends.md)")
  missing = [f for f in ("allocator", "renderer", "compiler") if getattr(dev, f, None) is None] + ([] if callable(dev.runtime) else ["runtime"])
  if missing: raise DeviceError(f"{where}: the Compiled it returned has no {', '.join(missing)}")
  return dev


class Buffer:
  """`size` elements of `dtype` on a device. Memory is allocated on first use."""
  def __init__(self, device: str, size: int, dtype: DType):
    if size < 0: raise ValueError(f"buffer size must be >= 0, got {size}")
    if size > 2**31 - 1: raise ValueError(f"a buffer of {size} elements of {dtype!r}: more than 2**31-1, which refgrad's int32 indices cannot address")
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
