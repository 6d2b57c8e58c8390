"""Hand-coded Opt choice: the default optimization of every kernel (BEAM=n searches instead; NOOPT=1 skips both).

The choice depends on the kernel and its target only (never on the device that runs it), so the CPU and the
PYTHON device run the same optimized program for the same target and agree bit for bit. In order:
  1. tensor cores, when the target has one that takes the kernel's reduction (the first valid choice);
  2. GPU targets, reductions with few outputs (<= 1024) and a long reduce axis: GROUPTOP that axis by 16, so
     a workgroup's work-items share the reduction (through local memory) instead of one lane doing it all;
  3. unroll the innermost reduce axis: entirely when it has <= 8 elements, else by 4 when 4 divides it;
  4. upcast output axes that some input does not depend on (each loaded value is then used several times,
     e.g. both axes of a matmul), by 4 while the upcast/unroll product stays <= 16; otherwise, in a kernel
     without a reduction, the innermost output axis by 4 (vector loads and stores). A reduction gains nothing
     from it: its loads are strided along that axis, and the PYTHON device would interpret 4x the ops per loop
     iteration on 4x fewer lanes. Steps 3 and 4 are skipped for kernels of fewer than MIN_WORK elements;
  5. GPU targets: local axes (work-items) on the remaining output axes, innermost first, up to 16 per axis
     and 256 in all.
Every step is tried with apply_opt and skipped where invalid.
"""
from __future__ import annotations

import math

from refgrad.kernel import Kernel, axis_size
from refgrad.opt import InvalidOptError, Opt, OptOps, apply_opt
from refgrad.uop.ops import Ops

# steps 3 and 4 only for kernels of at least this many (output x reduce) elements: below it a CPU kernel's time is its
# launch, and the PYTHON device, which runs every lane at once, pays for each extra op more than fewer lanes save
MIN_WORK = 1 << 16

def _try(k: Kernel, opt: Opt) -> Kernel:
  try: return apply_opt(k, opt)
  except InvalidOptError: return k

def hand_coded_optimizations(k: Kernel) -> Kernel:
  """k with the heuristic Opts applied (see the module docstring)."""
  tgt, reduces, big = k.target, bool(k.reduce_axes), math.prod(k.full_shape) >= MIN_WORK
  for j in range(len(tgt.tensor_cores)):
    if (t := _try(k, Opt(OptOps.TC, 0, j))) is not k: k = t; break
  out_size = math.prod(axis_size(r) for r in k.global_axes)
  if tgt.gpu and not k.tc and k.reduce_axes and out_size <= 1024:
    for i, r in enumerate(k.reduce_axes):
      if axis_size(r) >= 256 and (t := _try(k, Opt(OptOps.GROUPTOP, i, 16))) is not k: k = t; break
  if not big: return _locals(k)
  if k.reduce_axes and not k.of_kind("group"):
    i, n = len(k.reduce_axes) - 1, axis_size(k.reduce_axes[-1])
    k = _try(k, Opt(OptOps.UNROLL, i, 0 if n <= 8 else 4))
  # output axes some load does not read: upcasting them reuses that load
  loads = [u.src[1] for u in k.ast.toposort if u.op is Ops.LOAD]
  reuse = [i for i, r in enumerate(k.global_axes) if any(r not in idx.toposort for idx in loads)]
  before = k
  for i in reversed(reuse[-2:]):   # from the last: an axis upcast whole leaves the earlier positions as they are
    for amt in (4, 2):
      if k.upcast_size * amt <= 16 and (t := _try(k, Opt(OptOps.UPCAST, i, amt))) is not k: k = t; break
  if k is before and k.global_axes and not reduces: k = _try(k, Opt(OptOps.UPCAST, len(k.global_axes) - 1, 4))
  return _locals(k)

def _locals(k: Kernel) -> Kernel:
  if k.target.gpu and not k.nolocals:
    for i in reversed(range(len(k.global_axes))):
      for amt in (16, 8, 4, 2):
        if k.local_size * amt <= 256 and (t := _try(k, Opt(OptOps.LOCAL, i, amt))) is not k: k = t; break
  return k
