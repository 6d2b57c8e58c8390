"""What every architecture's kernel dispatch shares once its packet/descriptor is decoded: fetch the program image,
read the kernel arguments, resolve each buffer VA to memory (unmapped = MMU fault), record the accesses for the hazard
checker, and run the kernel.

Kernel-argument layout (constant buffer 0 on NV, the kernarg segment elsewhere): one little-endian u64 VA per
DEFINE_GLOBAL in index order, then one int32 per DEFINE_VAR in program order. A VA inside a mapping (not at its start)
is a buffer running to the mapping's end.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators import executors
from emulators.fault import Fault


def load_program(vm: Any, prg_va: int, engine: str, what: str) -> executors.LinearKernel:
  """The kernel whose image (magic + u32 length + payload) starts at `prg_va`; `what` names the pointer (for reports)."""
  head = vm.bytes(prg_va, executors.IMAGE_HEADER, engine, f"program image header ({what})")
  n = int(head[4:8].view(np.uint32)[0])
  image = vm.bytes(prg_va, executors.IMAGE_HEADER + n, engine, f"program image of {n} bytes ({what})").tobytes()
  try: return executors.load(image)
  except Fault as f: raise Fault(f"program at 0x{prg_va:x} ({what}): {f.what}", f.engine, prg_va) from None


def run(dev: Any, pid: int, label: str, k: executors.LinearKernel, args_va: int, args_what: str, engine: str,
        grid: tuple[int, int, int], block: tuple[int, int, int], shared: int = 0) -> None:
  """Read the arguments at `args_va`, resolve the buffers, record their accesses as `label` on participant `pid`, run.
  A kernel with `run_raw` (PTX) takes the raw argument bytes and the VM: its own loads and stores resolve addresses."""
  vm, hz = dev.vm, dev.hz
  args = vm.bytes(args_va, k.arg_bytes, engine, f"{args_what} of kernel {k.name}")
  if hasattr(k, "run_raw"): return k.run_raw(vm, args.tobytes(), grid, block, shared)
  vas = args[:8 * k.nglobals].view(np.uint64).tolist()
  vals = args[8 * k.nglobals:].view(np.int32).tolist()
  bufs, views = [], []
  for i, (va, (declared, reads, writes)) in enumerate(zip(vas, k.params)):
    try: r, off = vm.resolve(va, declared if declared else 1, engine, f"buffer {i} of kernel {k.name} ({args_what} bytes {8 * i}..{8 * i + 8})")
    except Fault as f: raise Fault(f.what, "mmu", va, k.name) from None
    bufs.append(r.view(off))
    views.append((r, off))
    if hz.enabled and (reads or writes):
      hz.access(pid, r.va, [(va, va + declared if declared is not None else r.end, writes)], f"{label}: kernel {k.name}")
  try: k.run(bufs, grid, block, vals, vas)
  finally:
    for (r, off), m in zip(views, bufs): r.merge(off, m)
