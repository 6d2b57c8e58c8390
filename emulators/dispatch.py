"""What every architecture's kernel dispatch shares once its packet/descriptor is decoded: fetch the program image,
read the kernel arguments, resolve each buffer VA to memory (unmapped = MMU fault), record the accesses for the hazard
checker, and run the kernel.

Kernel-argument layout (constant buffer 0 on NV, the kernarg segment elsewhere): one little-endian u64 VA per
DEFINE_GLOBAL in index order, then one int32 per DEFINE_VAR in program order. A VA inside a mapping (not at its start)
is a buffer running to the mapping's end.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from emulators import executors
from emulators.fault import Fault
from emulators.inflight import InFlight
from refgrad.hw import image as container


def load_program(vm: Any, prg_va: int, engine: str, what: str) -> executors.LinearKernel:
  """The kernel whose image (refgrad/hw/image.py: magic + u32 length + payload) starts at `prg_va`; `what` names the pointer (for reports)."""
  head = vm.bytes(prg_va, executors.IMAGE_HEADER, engine, f"program image header ({what})")
  n = container.payload_bytes(head.tobytes())
  image = vm.bytes(prg_va, executors.IMAGE_HEADER + n, engine, f"program image of {n} bytes ({what})").tobytes()
  try: return executors.load(image)
  except Fault as f: raise Fault(f"program at 0x{prg_va:x} ({what}): {f.what}", f.engine, prg_va) from None


def run(dev: Any, pid: int, label: str, k: executors.LinearKernel, args_va: int, args_what: str, engine: str,
        grid: tuple[int, int, int], block: tuple[int, int, int], flight: InFlight | None = None, now: bool = False,
        chain: int | None = None, shared: int = 0, cost: tuple | None = None) -> int:
  """Read the arguments at `args_va`, resolve the buffers, record their accesses as `label` on participant `pid`, run.
  With `flight` (the queue's launches in flight) the launch starts in flight and its kernel runs when `flight` says;
  `chain`: the launch number of the launch this one follows as part of one unit (a dependent QMD). The launch number.
  A kernel with `run_raw` (PTX) takes the raw argument bytes, the VM and `shared` (the CTA's shared-memory bytes): its
  own loads and stores resolve addresses; the buffers of its pointer parameters (`pointer_params`, found by a static
  analysis of the PTX, emulators/nv/ptx/access.py) are recorded for the hazard checker."""
  vm, hz = dev.vm, dev.hz
  args = vm.bytes(args_va, k.arg_bytes, engine, f"{args_what} of kernel {k.name}")
  seq = chain if chain is not None else flight.start() if flight is not None else -1
  if hasattr(k, "run_raw"):
    raw = args.tobytes()
    if hz.enabled:   # each pointer parameter's buffer, to its mapping's end (an unmapped one faults when the kernel uses it)
      for off, reads, writes in getattr(k, "pointer_params", ()):
        va = int.from_bytes(raw[off:off + 8], "little")
        if (r := vm.find(va)) is not None and (reads or writes):
          hz.access(pid, r.va, [(va, r.end, writes)], f"{label}: kernel {k.name}", seq)
    _start(lambda: k.run_raw(vm, raw, grid, block, shared), flight, now, dev, cost)
    return seq
  vas = args[:8 * k.nglobals].view(np.uint64).tolist()
  vals = args[8 * k.nglobals:].view(np.int32).tolist()
  what = f"{label}: kernel {k.name}"
  views = []
  for i, (va, (declared, reads, writes)) in enumerate(zip(vas, k.params)):
    try: r, off = vm.resolve(va, declared if declared else 1, engine, f"buffer {i} of kernel {k.name} ({args_what} bytes {8 * i}..{8 * i + 8})")
    except Fault as f: raise Fault(f.what, "mmu", va, k.name) from None
    views.append((r, off))
    if hz.enabled and (reads or writes):
      hz.access(pid, r.va, [(va, va + declared if declared is not None else r.end, writes)], what, seq)
  def body() -> None:
    bufs = [r.view(off) for r, off in views]   # taken when the kernel runs: what earlier kernels left defined
    try: k.run(bufs, grid, block, vals, vas)
    finally:
      for (r, off), m in zip(views, bufs): r.merge(off, m)
  _start(body, flight, now, dev, cost)
  return seq


def start(body: Any, flight: InFlight | None, dev: Any = None, cost: tuple | None = None) -> int:
  """Start a launch whose kernel resolves its own memory accesses (RDNA3 machine code): in flight like `run`'s;
  `body(seq)` gets the launch number (to record its accesses under). Its number."""
  seq = flight.start() if flight is not None else -1
  _start(lambda: body(seq), flight, False, dev, cost)
  return seq


def _start(body: Any, flight: InFlight | None, now: bool, dev: Any = None, cost: tuple | None = None) -> None:
  """Run (or, under a seeded order, defer) the kernel; with `cost`, the time it took is recorded under that key for the
  driver's inline polling (MockDriver.short: whether its next launch is a short step)."""
  t0 = time.perf_counter()
  if flight is None: body()
  else: flight.run(body, now)
  if cost is not None: dev.ran(cost, time.perf_counter() - t0)
