"""The tensor graph: what a Tensor holds before it is realized.

Nodes are ordinary UOps (one IR), using the tensor-level ops:

  BUFFER       arg=(uid, device, size); dtype=element dtype; shape (size,). Memory in `buffer_of`
  CONST        arg=value; shape () (expanded by movement ops)
  IOTA         arg=n; int32; shape (n,): 0..n-1
  ALU/CAST/BITCAST  operands of one shape (Tensor broadcasts first)
  RESHAPE arg=shape · PERMUTE arg=order · EXPAND arg=shape (1 -> n) · PAD arg=((before, after), ...)
  SHRINK arg=((start, end), ...) · FLIP arg=(bool per axis)
  REDUCE_AXIS  arg=(Ops.ADD | Ops.MAX, axes); reduced axes keep size 1
  COPY         arg=device; src=(x,): x moved to another device
  CONTIGUOUS   src=(x,): x realized into its own buffer
  DETACH       src=(x,): x's value, through which no gradient flows

Shapes and devices are inferred by the IR (`refgrad.uop.ops.shape_of`, `device_of`) and checked when a node is built, so a bad reshape or axis fails at the Tensor
call that made it, not at realize time.
"""
from __future__ import annotations

import itertools
import math
import weakref
from typing import Any

from refgrad.device import Buffer, Device
from refgrad.dtype import DType
from refgrad.uop.ops import MAX_ELEMENTS, Ops, UOp, device_of, shape_of  # noqa: F401  (shape and device inference are the IR's; named here too)
from refgrad.uop.ops import too_big as _too_big

Shape = tuple[int, ...]

_uid = itertools.count()
# the memory behind each live BUFFER node; freed when the node is gone
buffer_of: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


def new_buffer(device: str, size: int, dtype: DType, buf: Buffer | None = None, backed: bool = True) -> UOp:
  """A fresh BUFFER node (a unique id keeps two buffers of one shape apart) backed by `buf`, new memory, or
  (backed=False) nothing yet: the scheduler assigns memory when it runs, so intermediates can share."""
  device = Device.canonicalize(device)
  if size > MAX_ELEMENTS: raise _too_big(f"a buffer of {dtype!r}", size)
  u = UOp(Ops.BUFFER, dtype, (), (next(_uid), device, size))
  if backed: buffer_of[u] = buf if buf is not None else Buffer(device, size, dtype)
  return u


# ---- checked constructors ----------------------------------------------------------------------

def _axes_error(what: str, shape: Shape, arg: Any) -> ValueError: return ValueError(f"{what}: invalid argument {arg!r} for shape {shape}")

def reshape(x: UOp, shape: Shape) -> UOp:
  if any(not isinstance(n, int) or n < 0 for n in shape): raise ValueError(f"reshape: invalid shape {shape}")
  if math.prod(shape) != math.prod(x.shape): raise ValueError(f"reshape: cannot reshape {x.shape} ({math.prod(x.shape)} elements) to {shape}")
  if math.prod(shape) > MAX_ELEMENTS and (n := _largest_block(x.shape, tuple(shape))) > MAX_ELEMENTS:
    raise _too_big(f"reshape {x.shape} -> {tuple(shape)}: a run of merged axes", n)
  return x if shape == x.shape else _sized(UOp(Ops.RESHAPE, x.dtype, (x,), tuple(shape)))

def _largest_block(old: Shape, new: Shape) -> int:
  """The most elements in one run of axes a reshape from old to new maps onto each other (its index is computed flat)."""
  a, b = [n for n in new if n != 1], [n for n in old if n != 1]
  i = j = 0
  best = 1
  while i < len(a) and j < len(b):
    pa, pb, i, j = a[i], b[j], i + 1, j + 1
    while pa != pb:
      if pa < pb: pa, i = pa * a[i], i + 1
      else: pb, j = pb * b[j], j + 1
    best = max(best, pa)
  return best

def _sized(u: UOp) -> UOp:
  _ = u.shape   # computed now: an axis too large for int32 raises here, at the op that makes it
  return u

def permute(x: UOp, order: Shape) -> UOp:
  if sorted(order) != list(range(len(x.shape))): raise _axes_error("permute", x.shape, order)
  return x if tuple(order) == tuple(range(len(order))) else UOp(Ops.PERMUTE, x.dtype, (x,), tuple(order))

def expand(x: UOp, shape: Shape) -> UOp:
  if len(shape) != len(x.shape) or any(s != n and s != 1 for s, n in zip(x.shape, shape)):
    raise ValueError(f"expand: cannot expand {x.shape} to {shape} (only size-1 axes expand)")
  return x if tuple(shape) == x.shape else _sized(UOp(Ops.EXPAND, x.dtype, (x,), tuple(shape)))

def pad(x: UOp, padding: tuple[tuple[int, int], ...]) -> UOp:
  if len(padding) != len(x.shape) or any(b < 0 or e < 0 for b, e in padding): raise _axes_error("pad", x.shape, padding)
  return x if all(b == e == 0 for b, e in padding) else _sized(UOp(Ops.PAD, x.dtype, (x,), tuple(padding)))

def shrink(x: UOp, bounds: tuple[tuple[int, int], ...]) -> UOp:
  if len(bounds) != len(x.shape) or any(not 0 <= b <= e <= n for (b, e), n in zip(bounds, x.shape)): raise _axes_error("shrink", x.shape, bounds)
  return x if all(b == 0 and e == n for (b, e), n in zip(bounds, x.shape)) else UOp(Ops.SHRINK, x.dtype, (x,), tuple(bounds))

def flip(x: UOp, axes: tuple[bool, ...]) -> UOp:
  if len(axes) != len(x.shape): raise _axes_error("flip", x.shape, axes)
  return x if not any(axes) else UOp(Ops.FLIP, x.dtype, (x,), tuple(axes))

SPLIT_REDUCE = 1 << 14   # reductions over at least this many elements run in two stages

def reduce(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
  """Reduce `axes` (kept as size 1). A long reduction is split into two stages (k partial results of n/k
  elements, then one of k) so that neither stage is one long serial loop; this fixes the order of float
  additions, identically on every device."""
  if any(not 0 <= a < len(x.shape) for a in axes): raise _axes_error("reduce", x.shape, axes)
  axes = tuple(sorted(set(a for a in axes if x.shape[a] != 1)))
  if not axes: return x
  n = math.prod(x.shape[a] for a in axes)
  if n > MAX_ELEMENTS: raise _too_big(f"a reduction over axes {axes} of shape {x.shape}", n)
  if n >= SPLIT_REDUCE and (k := _split_factor(n)):
    keep = [a for a in range(len(x.shape)) if a not in axes]
    kshape = tuple(x.shape[a] for a in keep)
    y = reshape(permute(x, (*keep, *axes)), (*kshape, k, n // k))
    y = UOp(Ops.REDUCE_AXIS, x.dtype, (y,), (op, (len(keep) + 1,)))
    y = UOp(Ops.REDUCE_AXIS, x.dtype, (y,), (op, (len(keep),)))
    return reshape(y, tuple(1 if a in axes else d for a, d in enumerate(x.shape)))
  return UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (op, axes))

def _split_factor(n: int) -> int | None:
  """The divisor of n nearest to sqrt(n) from below, if it is at least 16."""
  for k in range(math.isqrt(n), 15, -1):
    if n % k == 0: return k
  return None
