"""A compiled kernel's description (`ProgramSpec`) and running it on a device (`Runner`)."""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from refgrad import knobs
from refgrad.codegen import to_linear
from refgrad.device import Buffer, Device
from refgrad.dtype import PtrDType
from refgrad.target import launch_sizes
from refgrad.uop.ops import Ops, UOp

DEBUG = knobs.get("DEBUG")  # 2: print each launch and its time; 4: also each kernel's source


@dataclass(frozen=True)
class ProgramSpec:
  """Everything a runtime needs besides the binary: the rendered source, the linear program, the
  launch geometry and the kernel's parameters (buffers by DEFINE_GLOBAL index, then variables in
  program order)."""
  name: str
  src: str
  device: str
  uops: tuple[UOp, ...]
  global_size: tuple[int, int, int] = (1, 1, 1)   # workgroups per dimension
  local_size: tuple[int, int, int] = (1, 1, 1)    # work-items per workgroup
  globals: tuple[tuple[int, PtrDType], ...] = field(default=())  # (index, dtype) of each DEFINE_GLOBAL, sorted
  vars: tuple[UOp, ...] = field(default=())         # DEFINE_VARs in kernel-parameter order

  @staticmethod
  def from_uops(name: str, uops: list[UOp], device: str, src: str = "") -> ProgramSpec:
    gsz, lsz = launch_sizes(uops)
    glb = sorted((u.arg, u.dtype) for u in uops if u.op is Ops.DEFINE_GLOBAL)
    return ProgramSpec(name, src, device, tuple(uops), gsz, lsz, tuple(glb),
                       tuple(u for u in uops if u.op is Ops.DEFINE_VAR))
  @property
  def threads(self) -> int: return math.prod(self.global_size) * math.prod(self.local_size)


def precompile(device: str, programs: Sequence[tuple[str, list[UOp]]]) -> None:
  """Compile programs ahead of their Runners, in as few compiler calls as the device's compiler can (`Compiler.batches`,
  through `compile_batch`): each binary is then in the compile cache when its Runner is made. Nothing happens for a
  compiler that compiles one program per call anyway, or a renderer without `render_parts`. A program that fails to render
  or compile is left to its Runner, which reports it the usual way."""
  dev = Device[Device.canonicalize(device)]
  if not getattr(dev.compiler, "batches", False) or not callable(getattr(dev.renderer, "render_parts", None)): return
  kernels = []
  for name, uops in programs:
    try: kernels.append((name, dev.renderer.render_parts(name, uops)))
    except Exception: continue   # rendering again in its Runner raises the same error, where it is reported
  if kernels: dev.compiler.compile_batch(kernels)


class Runner:
  """Renders, compiles (cached) and loads a linear program on a device; call it with buffers. `opts`: the Opts the kernel
  was optimized with, as declared by whoever lowered it (refgrad.schedule does; () when unknown or none)."""
  def __init__(self, name: str, uops: list[UOp], device: str, opts: tuple[Any, ...] = ()):
    self.device = Device.canonicalize(device)
    self.opts: tuple[Any, ...] = tuple(opts)
    dev = Device[self.device]
    self.spec = ProgramSpec.from_uops(name, uops, self.device, dev.renderer.render(name, uops))
    if DEBUG >= 4: print(f"--- {name} on {self.device} ---\n{self.spec.src}")
    self.lib = dev.compiler.compile_cached(self.spec.src)
    self.prg = dev.runtime(name, self.lib)

  @staticmethod
  def from_sink(name: str, sink: UOp, device: str, opts: tuple[Any, ...] = ()) -> Runner:
    """Compile a kernel graph (a SINK of STOREs) for a device through refgrad.codegen.to_linear."""
    return Runner(name, to_linear(sink, Device[device].renderer), device, opts)

  def __call__(self, *bufs: Buffer, var_vals: dict[str, int] | None = None, wait: bool = True) -> float | None:
    """Launch once. `wait`: wait for the kernel and return the seconds it took (on an HCQ device, from the GPU timestamps
    around it); otherwise the launch may only be queued (HCQ devices) and None is returned."""
    if len(bufs) != len(self.spec.globals):
      raise ValueError(f"{self.spec.name} takes {len(self.spec.globals)} buffers, got {len(bufs)}")
    for b, (i, dt) in zip(bufs, self.spec.globals):
      if b.device != self.device: raise ValueError(f"buffer {i} is on {b.device}, kernel runs on {self.device}")
      if b.dtype != dt.base: raise TypeError(f"buffer {i} holds {b.dtype}, kernel expects {dt.base}")
      if 0 <= dt.size != b.size: raise ValueError(f"buffer {i} has {b.size} elements, kernel expects {dt.size}")
    vv = var_vals or {}
    vals = []
    for v in self.spec.vars:
      name, lo, hi = v.arg
      if name not in vv: raise ValueError(f"{self.spec.name} needs a value for variable {name!r}")
      if not lo <= vv[name] <= hi: raise ValueError(f"variable {name}={vv[name]} outside its range [{lo}, {hi}]")
      vals.append(vv[name])
    st = time.perf_counter()
    et = self.prg(*[b.handle for b in bufs], global_size=self.spec.global_size, local_size=self.spec.local_size,
                  vals=tuple(vals), wait=wait)
    if not wait: return None
    et = et if et is not None else time.perf_counter() - st
    if DEBUG >= 2: print(f"{self.device:7s} {self.spec.name:30s} {self.spec.threads:9d} lanes {et * 1e3:9.3f} ms")
    return et
