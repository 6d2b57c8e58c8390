"""Movement API on top of the core primitives (reshape, permute, expand, pad, shrink, flip, where):
transpose, flatten, squeeze, cat, stack, split, repeat, indexing (get and set) and gather.

Everything here is movement ops plus elementwise selects, so it fuses into the kernels that read it.
Selecting with tensor indices is a one-hot mask (index == arange) and a reduction that keeps the bits of
the one selected element exactly (see `_select`)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from refgrad.dtype import DType, dtypes, least_upper_dtype
from refgrad.tensor.args import _broadcast_shape
from refgrad.tensor.errors import ShapeError
from refgrad.tensor.nnops import _windows
from refgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from refgrad.tensor import Tensor

_BITS = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def _ints(args: tuple[Any, ...]) -> tuple[int, ...]:
  """`f(1, 2)` and `f((1, 2))` both mean (1, 2)."""
  if len(args) == 1 and isinstance(args[0], (tuple, list)): args = tuple(args[0])
  for a in args:
    if not isinstance(a, int) or isinstance(a, bool): raise TypeError(f"expected integers, got {args!r}")
  return tuple(args)


def _eq(a: Tensor, b: Tensor) -> Tensor:
  x, y = a._broadcasted(b)
  return x._alu(Ops.CMPNE, y).logical_not()

def _lt(a: Tensor, b: Tensor | int) -> Tensor:
  x, y = a._broadcasted(b)
  return x._alu(Ops.CMPLT, y)


def _select(x: Tensor, mask: Tensor, axes: tuple[int, ...]) -> Tensor:
  """Reduce `where(mask, x, 0)` over `axes` (keeping them as size 1), where the mask selects at most one
  element per output: the selected element comes out bit for bit (-0.0 and NaN payloads included; no
  inf*0 = NaN as with a multiplied one-hot mask), and 0 where nothing is selected. Floats are selected as
  their bits; the gradient (a custom rule, so it does not matter whether x needed one when this was built)
  goes to the selected element."""
  dt = x.dtype
  if dt == dtypes.bool: return mask.where(x, False)._reduce(Ops.MAX, axes, keepdim=True)
  if dtypes.is_float(dt):
    value = mask.detach().where(x.detach().bitcast(_BITS[dt.itemsize]), 0)._reduce(Ops.ADD, axes, keepdim=True).bitcast(dt)
    return x._custom_grad(value, mask, rule=lambda y, g, x, m: (m.where(g._expand_to(x.shape), 0.0), None))
  return mask.where(x, 0)._reduce(Ops.ADD, axes, keepdim=True)


def _index_dtype(dt: DType) -> DType:
  if not dtypes.is_int(dt): raise IndexError(f"a tensor index must have an integer dtype, not {dt}")
  return dtypes.int64 if dt.itemsize == 8 or dt == dtypes.uint32 else dtypes.int32


def _one_hot(idx: Tensor, n: int, shape: tuple[int, ...], axis: int) -> Tensor:
  """Bool mask of `shape`: idx (already broadcastable to shape, size 1 at `axis`) == position along `axis`.
  Negative indices count from the end; out-of-range ones select nothing."""
  idx = idx.cast(_index_dtype(idx.dtype))
  if idx.shape != shape: idx = idx._expand_to(shape)
  idx = _lt(idx, 0).where(idx + n, idx)
  return _eq(idx, _iota(n, shape, axis, idx).cast(idx.dtype))


def _iota(n: int, shape: tuple[int, ...], axis: int, like: Tensor) -> Tensor:
  """0..n-1 along `axis`, broadcast to `shape` (int32), on `like`'s device. A bare IOTA node: the scheduler reads it
  through the broadcast without a kernel of its own (an arange, being computed, would get one)."""
  return type(like)(UOp(Ops.IOTA, dtypes.int32, (), n), like.device).reshape(tuple(n if i == axis else 1 for i in range(len(shape))))._expand_to(shape)


def _seq_args(first: Any, rest: tuple[Any, ...], what: str) -> tuple[Any, tuple[Any, ...]]:
  """(first tensor, the others) from f(a, b, c), f([a, b, c]) or a.f([b, c])."""
  if isinstance(first, (list, tuple)): first, rest = (first[0] if first else None), (*first[1:], *rest)
  if len(rest) == 1 and isinstance(rest[0], (list, tuple)): rest = tuple(rest[0])
  if first is None: raise ValueError(f"{what}: needs at least one tensor")
  return first, rest


@dataclass
class _Item:
  kind: str                 # "int", "slice", "none", "tensor"
  bounds: tuple[int, int]   # shrink of the source axis (0, 0 for a new axis)
  step: int = 1             # stride after the shrink; < 0 flips
  size: int = 1             # length of the resulting axis
  tensor: Any = None


def _parse_index(x: Tensor, index: Any) -> list[_Item]:
  Tensor = type(x)
  items = list(index) if isinstance(index, tuple) else [index]
  # lists, tuples and arrays inside the index are tensor indices ([] is an empty integer one)
  items = [(Tensor(i, x.device) if len(i) else Tensor.zeros(0, dtype=dtypes.int32, device=x.device))
           if isinstance(i, (list, tuple, np.ndarray)) else i for i in items]
  if sum(i is Ellipsis for i in items) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  used = sum(1 for i in items if i is not None and i is not Ellipsis)
  if used > x.ndim: raise IndexError(f"too many indices for a tensor of shape {x.shape}: {used} given")
  at = next((k for k, i in enumerate(items) if i is Ellipsis), len(items))   # not list.index: == on a Tensor is elementwise
  items[at:at + 1] = [slice(None)] * (x.ndim - used)
  out: list[_Item] = []
  dim = 0
  for i in items:
    if i is None:
      out.append(_Item("none", (0, 0)))
      continue
    n = x.shape[dim]
    if isinstance(i, bool): raise IndexError(f"boolean index {i!r} is not supported (axis {dim})")
    if isinstance(i, (int, np.integer)):
      i = int(i)
      if not -n <= i < n: raise IndexError(f"index {i} is out of range for axis {dim} of size {n} (tensor shape {x.shape})")
      i += n if i < 0 else 0
      out.append(_Item("int", (i, i + 1)))
    elif isinstance(i, slice):
      for v in (i.start, i.stop, i.step):
        if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool)): raise TypeError(f"slice {i} on axis {dim}: bounds must be ints or None")
      start, stop, step = i.indices(n)   # ValueError for step 0
      size = len(range(start, stop, step))
      if size <= 1: out.append(_Item("slice", (start, start + size) if size else (0, 0), 1, size))
      # the shrink takes size*|step| elements when the axis has them (no padding needed to split off the stride)
      elif step > 0: out.append(_Item("slice", (start, min(n, start + size * step)), step, size))
      else: out.append(_Item("slice", (max(0, start + size * step + 1), start + 1), step, size))
    elif isinstance(i, Tensor):
      _index_dtype(i.dtype)
      if i.device != x.device: raise ValueError(f"index tensor is on {i.device}, the indexed tensor on {x.device}")
      out.append(_Item("tensor", (0, n), 1, n, i))
    else: raise TypeError(f"cannot index a tensor with {type(i).__name__} (axis {dim})")
    dim += 1
  return out


def _src_shapes(items: list[_Item], shape: tuple[int, ...]) -> list[int]:
  """The size of the source axis each item indexes (1 for a new axis)."""
  it = iter(shape)
  return [1 if i.kind == "none" else next(it) for i in items]


def _basic(x: Tensor, items: list[_Item]) -> Tensor:
  """Apply ints, slices and None (tensor indices keep their axis whole)."""
  src = [i for i in items if i.kind != "none"]
  x = x.shrink(tuple(i.bounds for i in src)).flip(tuple(k for k, i in enumerate(src) if i.step < 0))
  if any(abs(i.step) > 1 for i in src):
    # stride k: pad the axis to size*k, split it into (size, k), keep k's first element
    steps = [abs(i.step) for i in src]
    x = x.pad(tuple((0, i.size * k - n) for i, k, n in zip(src, steps, x.shape)))
    x = x.reshape(tuple(v for i, k in zip(src, steps) for v in (i.size, k)))
    x = x.shrink(tuple(b for i in src for b in ((0, i.size), (0, 1))))
  return x.reshape(tuple(i.size for i in items if i.kind != "int"))


def _place(v: Tensor, items: list[_Item], shape: tuple[int, ...], fill: Any = 0) -> Tensor:
  """The inverse of `_basic`: v (of `_basic`'s result shape) put where it came from in a tensor of `shape`."""
  src = [i for i in items if i.kind != "none"]
  v = v.reshape(tuple(1 if i.kind == "int" else i.size for i in src))
  if any(abs(i.step) > 1 for i in src):
    steps = [abs(i.step) for i in src]
    v = v.reshape(tuple(s for i in src for s in (i.size, 1)))
    v = v.pad(tuple(p for k in steps for p in ((0, 0), (0, k - 1))), value=fill)
    v = v.reshape(tuple(i.size * k for i, k in zip(src, steps))).shrink(tuple((0, b - a) for a, b in (i.bounds for i in src)))
  v = v.flip(tuple(k for k, i in enumerate(src) if i.step < 0))
  return v.pad(tuple((a, n - b) for (a, b), n in zip((i.bounds for i in src), shape)), value=fill)


def _advanced(y: Tensor, items: list[_Item]) -> tuple[list[int], tuple[int, ...], list[Tensor], bool]:
  """Tensor-index axes of y, their broadcast shape, and the index tensors shaped to broadcast over
  y.shape[:d0] + B + y.shape[d0:] (size 1 at every y axis); whether B stays in place (numpy's rule:
  only when the tensor indices are adjacent, counting after int indices are applied)."""
  kept = [i for i in items if i.kind != "int"]
  dims = [k for k, i in enumerate(kept) if i.kind == "tensor"]
  idxs = [kept[k].tensor for k in dims]
  bshape: tuple[int, ...] = ()
  for t in idxs:
    try: bshape = _broadcast_shape(bshape, t.shape)
    except ValueError as e: raise IndexError(f"index tensors of shapes {[t.shape for t in idxs]} do not broadcast together") from e
  d0, nb = dims[0], len(bshape)
  shaped = [t.reshape((1,) * d0 + (1,) * (nb - t.ndim) + t.shape + (1,) * (y.ndim - d0)) for t in idxs]
  return dims, bshape, shaped, dims == list(range(d0, d0 + len(dims)))


_SORT_DIRECT = 2048  # rows up to this length sort by counting ranks (one kernel, O(n^2)); longer ones by a bitonic network


def _before(a: Tensor, b: Tensor, ia: Tensor, ib: Tensor, descending: bool) -> Tensor:
  """Whether (a, ia) sorts strictly before (b, ib): by value (NaN the largest), then by index (stable)."""
  if descending: a, b = b, a
  lt = _lt(a, b)
  if dtypes.is_float(a.dtype):
    lt = lt | (b.isnan() & a.isnan().logical_not())
    eq = _eq(a, b) | (a.isnan() & b.isnan())
  else: eq = _eq(a, b)
  return lt | (eq & _lt(ia, ib))


def _bitonic_sort(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
  """Sort the last axis with a bitonic network on (value, index) pairs: the axis is padded to a power of two with
  values that sort last (their indices are larger than every real one), then log2(N)(log2(N)+1)/2 compare-exchange
  steps of N/2 pairs each (one kernel per step): O(n log^2 n) work. Values move by selects (exact bits, and their
  gradients follow them)."""
  Tensor = type(x)
  n = x.shape[-1]
  big = 1 << (n - 1).bit_length()
  lead = x.shape[:-1]
  keep = tuple((0, 0) for _ in lead)
  fill = (dtypes.min(x.dtype) if descending else dtypes.max(x.dtype)) if not dtypes.is_float(x.dtype) else (-math.inf if descending else math.nan)
  v = x.pad(keep + ((0, big - n),), value=fill) if big != n else x
  idx = _iota(big, (*lead, big), len(lead), x)
  k = 2
  while k <= big:
    j = k // 2
    while j >= 1:
      shape = (*lead, big // (2 * j), 2, j)
      vv, ii = v.reshape(shape), idx.reshape(shape)
      sl = [tuple(None for _ in lead) + (None, (h, h + 1), None) for h in (0, 1)]
      lo_v, hi_v = vv.shrink(sl[0]), vv.shrink(sl[1])
      lo_i, hi_i = ii.shrink(sl[0]), ii.shrink(sl[1])
      # pair block b runs up when (b * 2j) // k is even
      blk = _iota(big // (2 * j), (*lead, big // (2 * j), 1, j), len(lead), x)
      up = _eq(((blk * (2 * j)) // k) % 2, Tensor.full((), 0, dtypes.int32, x.device))
      swap = up.where(_before(hi_v, lo_v, hi_i, lo_i, descending), _before(lo_v, hi_v, lo_i, hi_i, descending))
      v = swap.where(hi_v, lo_v).cat(swap.where(lo_v, hi_v), dim=-2).reshape(*lead, big)
      idx = swap.where(hi_i, lo_i).cat(swap.where(lo_i, hi_i), dim=-2).reshape(*lead, big)
      v, idx = v.contiguous(), idx.contiguous()
      j //= 2
    k *= 2
  bounds = tuple(None for _ in lead) + ((0, n),)
  return v.shrink(bounds), idx.shrink(bounds)


class MovementMixin:
  __slots__ = ()

  # ---- shape ---------------------------------------------------------------------------------------
  def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:  # type: ignore[misc]
    """Swap two axes."""
    order = list(range(self.ndim))
    a, b = self._axis(dim0), self._axis(dim1)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self: Tensor) -> Tensor:  # type: ignore[misc]
    """`transpose()`: axes 0 and 1 swapped (a tensor of fewer than 2 axes is returned as is)."""
    return self if self.ndim < 2 else self.transpose()

  def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:  # type: ignore[misc]
    """Merge axes start_dim..end_dim (inclusive) into one."""
    if self.ndim == 0: return self.reshape(1)
    s, e = self._axis(start_dim), self._axis(end_dim)
    if s > e: raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
    return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:  # type: ignore[misc]
    """Split axis `dim` into `sizes` (one may be -1)."""
    d = self._axis(dim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

  def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:  # type: ignore[misc]
    """Remove size-1 axes: all of them, or those of `dim` that have size 1 (others are kept, as in PyTorch)."""
    if dim is None: return self.reshape(tuple(n for n in self.shape if n != 1))
    if self.ndim == 0:
      for d in (dim,) if isinstance(dim, int) else dim: self._axis(d)
      return self
    axes = {self._axis(d) for d in ((dim,) if isinstance(dim, int) else dim)}
    return self.reshape(tuple(n for i, n in enumerate(self.shape) if i not in axes or n != 1))

  def unsqueeze(self: Tensor, dim: int) -> Tensor:  # type: ignore[misc]
    """Insert a size-1 axis at `dim` (-ndim-1 <= dim <= ndim)."""
    d = self._axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  # ---- joining and splitting ------------------------------------------------------------------------
  def cat(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:  # type: ignore[misc]
    """Concatenate self and args along `dim`; dtypes promote. All other axes must match. `Tensor.cat([a, b])` and
    `a.cat([b, c])` take sequences too."""
    self, args = _seq_args(self, args, "cat")
    ts = [self, *args]
    d = self._axis(dim)
    for k, t in enumerate(args, 1):
      if not isinstance(t, type(self)): raise TypeError(f"cat: argument {k} is a {type(t).__name__}, not a Tensor")
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ShapeError(f"cat along dim {dim}: shapes {self.shape} and {t.shape} (argument {k}) differ outside that dim")
      if t.device != self.device: raise ValueError(f"cat: tensors on different devices: {self.device} and {t.device}")
    if not args: return self
    dt = least_upper_dtype(*(t.dtype for t in ts))
    total = sum(t.shape[d] for t in ts)
    # each piece padded to the full size; a where per piece picks it (not a sum: x + 0 turns -0.0 into +0.0)
    out: Tensor | None = None
    at = 0
    for t in ts:
      pad = tuple((at, total - at - t.shape[d]) if i == d else (0, 0) for i in range(t.ndim))
      piece = t.cast(dt).pad(pad)
      if out is None: out = piece
      elif t.shape[d]: out = type(self).ones(t.shape, dtype=dtypes.bool, device=self.device).pad(pad).where(piece, out)
      at += t.shape[d]
    assert out is not None
    return out

  def stack(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:  # type: ignore[misc]
    """Join self and args along a new axis `dim`; all shapes must be equal (sequences as in `cat`)."""
    self, args = _seq_args(self, args, "stack")
    d = self._axis(dim, self.ndim + 1)
    for k, t in enumerate(args, 1):
      if not isinstance(t, type(self)): raise TypeError(f"stack: argument {k} is a {type(t).__name__}, not a Tensor")
      if t.shape != self.shape: raise ShapeError(f"stack: shapes {self.shape} and {t.shape} (argument {k}) differ")
    return self.unsqueeze(d).cat(*(t.unsqueeze(d) for t in args), dim=d)

  def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:  # type: ignore[misc]
    """Pieces along `dim`: of `sizes` each (an int; the last may be smaller) or of the listed sizes (which must add up)."""
    d = self._axis(dim)
    n = self.shape[d]
    if isinstance(sizes, int):
      if sizes <= 0: raise ValueError(f"split: size must be positive, got {sizes}")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    elif sum(sizes) != n or any(s < 0 for s in sizes): raise ShapeError(f"split: sizes {list(sizes)} do not add up to {n} (dim {dim} of {self.shape})")
    out, at = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((at, at + s) if i == d else None for i in range(self.ndim))))
      at += s
    return tuple(out)

  def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:  # type: ignore[misc]
    """`chunks` pieces along `dim` of ceil(size/chunks) each (fewer when that divides evenly sooner, as in PyTorch)."""
    if not isinstance(chunks, int) or chunks <= 0: raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    n = self.shape[self._axis(dim)]
    return self.split(max(1, -(-n // chunks)), dim)

  def repeat(self: Tensor, *repeats: Any) -> Tensor:  # type: ignore[misc]
    """Tile the tensor `repeats[i]` times along each axis (extra leading repeats add axes)."""
    reps = _ints(repeats)
    if len(reps) < self.ndim: raise ValueError(f"repeat: need at least {self.ndim} repeats for shape {self.shape}, got {reps}")
    if any(r < 0 for r in reps): raise ValueError(f"repeat: negative repeat in {reps}")
    shape = (1,) * (len(reps) - self.ndim) + self.shape
    x = self.reshape(tuple(v for n in shape for v in (1, n)))
    x = x.expand(tuple(v for r, n in zip(reps, shape) for v in (r, n)))
    return x.reshape(tuple(r * n for r, n in zip(reps, shape)))

  def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:  # type: ignore[misc]
    """Shift elements along dims (None: the flattened tensor), wrapping around (PyTorch)."""
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    sh, ds = ((shifts,), (dims,)) if isinstance(shifts, int) and isinstance(dims, int) else (tuple(_ints((shifts,))), tuple(_ints((dims,))))
    if len(sh) != len(ds): raise ValueError(f"roll: {len(sh)} shifts for {len(ds)} dims")
    x = self
    for s_, d_ in zip(sh, ds):
      d = x._axis(d_)
      n = x.shape[d]
      if n == 0 or s_ % n == 0: continue
      k = s_ % n
      a, b = x.split([n - k, k], d)
      x = b.cat(a, dim=d)
    return x

  def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:  # type: ignore[misc]
    """Each element repeated `repeats` times along dim (None: of the flattened tensor)."""
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 0: raise ValueError(f"repeat_interleave: repeats must be an int >= 0, got {repeats!r}")
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else x._axis(dim)
    y = x.unsqueeze(d + 1)
    return y.expand(tuple(repeats if i == d + 1 else n for i, n in enumerate(y.shape))).flatten(d, d + 1)

  def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:  # type: ignore[misc]
    """Every window of `size` elements, `step` apart, along dimension: that axis becomes the window count and a new
    last axis of `size` holds each window (PyTorch's Tensor.unfold)."""
    d = self._axis(dimension)
    if not isinstance(size, int) or size < 0 or size > self.shape[d]: raise ValueError(f"unfold: size {size} must be in [0, {self.shape[d]}] (axis {d} of {self.shape})")
    if not isinstance(step, int) or step <= 0: raise ValueError(f"unfold: step must be a positive int, got {step!r}")
    if size == 0:   # n // step + 1 empty windows (PyTorch)
      x = self.transpose(d, -1).shrink(tuple((0, 0) if i == self.ndim - 1 else None for i in range(self.ndim)))
      w = x.unsqueeze(-2).expand(*x.shape[:-1], self.shape[d] // step + 1, 0)
      return w.transpose(d, -2)
    x = self.transpose(d, -1) if d != self.ndim - 1 else self
    w = _windows(x, (size,), (step,), (1,))                          # (..., nwin, size) with dimension's axis last
    return w.transpose(d, -2) if d != self.ndim - 1 else w

  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # type: ignore[misc]
    """The diagonal of the (dim1, dim2) planes, shifted by offset (> 0 above), as a new last axis (PyTorch)."""
    a, b = self._axis(dim1), self._axis(dim2)
    if a == b: raise ValueError(f"diagonal: dim1 and dim2 are the same axis {a}")
    x = self.permute([i for i in range(self.ndim) if i not in (a, b)] + [a, b])
    r, c = x.shape[-2:]
    lead = x.shape[:-2]
    keep = tuple(None for _ in lead)
    x = x.shrink(keep + (((0, r), (min(offset, c), c)) if offset >= 0 else ((min(-offset, r), r), (0, c))))
    r, c = x.shape[-2:]
    n = min(r, c)
    x = x.shrink(tuple(None for _ in lead) + ((0, n), (0, n)))
    # the diagonal of an n x n block: flatten, pad one, read every (n+1)-th element
    flat = x.reshape(*lead, n * n)
    if n == 0: return flat
    flat = flat.pad(tuple((0, 0) for _ in lead) + ((0, n),))
    return flat.reshape(*lead, n, n + 1).shrink(tuple(None for _ in lead) + (None, (0, 1))).reshape(*lead, n)

  def diag(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
    """1-D: a square matrix with self on the `diagonal`-th diagonal; 2-D: that diagonal (PyTorch)."""
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise ValueError(f"diag: needs a 1-D or 2-D tensor, got shape {self.shape}")
    n, k = self.shape[0], abs(diagonal)
    m = n + k
    # n x n with self on the diagonal: pad each element with n zeros, then fold into rows of n (drop the tail)
    x = self.reshape(n, 1).pad(((0, 0), (0, n))).reshape(n * (n + 1))[:n * n].reshape(n, n) if n else self.reshape(0, 0)
    return x.pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k))) if k else x.reshape(m, m)

  @staticmethod
  def meshgrid(*tensors: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-D tensors ('ij': matrix indexing; 'xy': the first two axes swapped)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)): tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"): raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', not {indexing!r}")
    if any(t.ndim != 1 for t in tensors): raise ValueError(f"meshgrid: tensors must be 1-D, got shapes {[t.shape for t in tensors]}")
    n = len(tensors)
    shape = tuple(t.shape[0] for t in tensors)
    if indexing == "xy" and n >= 2: shape = (shape[1], shape[0], *shape[2:])
    out = []
    for i, t in enumerate(tensors):
      ax = (1 if i == 0 else 0 if i == 1 else i) if indexing == "xy" and n >= 2 else i
      out.append(t.reshape(tuple(-1 if k == ax else 1 for k in range(n))).expand(shape))
    return tuple(out)

  def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:  # type: ignore[misc]
    """value where mask (broadcast) is True, self elsewhere."""
    return mask.where(value, self) if not isinstance(value, type(self)) else mask.where(value.cast(self.dtype), self)

  def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:  # type: ignore[misc]
    """The elements where mask is True, flattened (a data-dependent shape: the mask is realized and read back).
    size= fixes the length: the first size elements, padded with fill_value when fewer are selected."""
    shape = _broadcast_shape(self.shape, mask.shape)
    m = mask.cast(dtypes.bool)._expand_to(shape).numpy().reshape(-1)
    idx = np.nonzero(m)[0].astype(np.int32)
    if size is not None: idx = _fixed_size(idx, size, -1)
    ret = self._expand_to(shape).flatten()[type(self)(np.maximum(idx, 0), device=self.device) if idx.size else []]
    return ret if size is None else type(self)(idx >= 0, device=self.device).where(ret, fill_value)

  def nonzero(self: Tensor, size: int | None = None, fill_value: int = -1) -> Tensor:  # type: ignore[misc]
    """(count, ndim) int32 indices of the nonzero elements in row-major order (data-dependent: realizes self).
    size= fixes count: the first size rows, padded with rows of fill_value (PyTorch's nonzero_static)."""
    nz = np.argwhere(self.numpy() != 0).astype(np.int32).reshape(-1, self.ndim)
    if size is not None: nz = _fixed_size(nz, size, fill_value)
    return type(self)(nz, device=self.device) if nz.size else type(self).zeros(0, self.ndim, dtype=dtypes.int32, device=self.device)

  # ---- scatter ---------------------------------------------------------------------------------------
  def _scatter_parts(self: Tensor, dim: int, index: Tensor, src: Tensor | Any) -> tuple[int, Tensor, Tensor, Tensor, tuple[int, ...]]:
    """(dim, hit mask (..., m, n), src values (..., m, n), m-position iota, index shape): index's dim moved last as m,
    self's size n along dim as a new last axis."""
    d = self._axis(dim)
    if not isinstance(index, type(self)) or not dtypes.is_int(index.dtype): raise TypeError("scatter: index must be an integer tensor")
    if index.ndim != self.ndim: raise ShapeError(f"scatter: index of shape {index.shape} needs {self.ndim} axes like self {self.shape}")
    if any(i > n for k, (i, n) in enumerate(zip(index.shape, self.shape)) if k != d):
      raise ShapeError(f"scatter: index shape {index.shape} is larger than self {self.shape} outside dim {dim}")
    if isinstance(src, type(self)):
      if src.ndim != self.ndim or any(i > n for i, n in zip(index.shape, src.shape)): raise ShapeError(f"scatter: src of shape {src.shape} is smaller than index {index.shape}")
      src = src.shrink(tuple((0, i) for i in index.shape)).cast(self.dtype)
    else: src = type(self).full(index.shape, src, self.dtype, self.device)
    n = self.shape[d]
    idx, sv = index.transpose(d, -1), src.transpose(d, -1)            # (..., m)
    full = (*idx.shape, n)
    hit = _one_hot(idx.unsqueeze(-1), n, full, idx.ndim)
    return d, hit, sv.unsqueeze(-1)._expand_to(full), _iota(idx.shape[-1], full, idx.ndim - 1, self), index.shape

  def _scatter_back(self: Tensor, d: int, out: Tensor, ishape: tuple[int, ...], fill: Any) -> Tensor:
    """(..., n) with dim d's axis last, over index's extent -> self's shape (outside the extent: `fill`)."""
    out = out.transpose(d, -1)
    return out.pad(tuple((0, n - i) if k != d else (0, 0) for k, (i, n) in enumerate(zip(ishape, self.shape))), value=fill)

  def scatter(self: Tensor, dim: int, index: Tensor, src: Tensor | Any, reduce: str | None = None) -> Tensor:  # type: ignore[misc]
    """self with src written at index along dim (out[index[i][j]][j] = src[i][j] for dim=0). reduce: None (the last
    write wins where indices repeat), 'add' or 'multiply' (combined with self)."""
    if reduce not in (None, "add", "multiply"): raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', not {reduce!r}")
    if reduce is not None: return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
    d, hit, sv, order, ishape = self._scatter_parts(dim, index, src)
    winner = hit.where(order, -1)._reduce(Ops.MAX, -2, True)   # no index: -1
    picked = _select(sv, hit & _eq(order, winner._expand_to(hit.shape)), (hit.ndim - 2,)).squeeze(-2)
    any_hit = self._scatter_back(d, _lt(type(self).full((), -1, dtypes.int32, self.device), winner.squeeze(-2)), ishape, False)
    return any_hit.where(self._scatter_back(d, picked, ishape, 0), self)

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:  # type: ignore[misc]
    """self with src combined in at index along dim by reduce: 'sum', 'prod', 'mean', 'amax' or 'amin' (PyTorch);
    include_self=False leaves self's value out where something is scattered."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"): raise ValueError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, not {reduce!r}")
    d, hit, sv, _, ishape = self._scatter_parts(dim, index, src)
    count = self._scatter_back(d, hit.cast(dtypes.int32).sum(-2), ishape, 0)
    ident = {"sum": 0, "mean": 0, "prod": 1, "amax": dtypes.min(self.dtype), "amin": dtypes.max(self.dtype)}[reduce]
    vals = hit.where(sv, ident)
    if reduce in ("sum", "mean"): part = vals.sum(-2, acc_dtype=self.dtype)
    elif reduce == "prod": part = vals.prod(-2, acc_dtype=self.dtype)
    elif reduce == "amax": part = vals._reduce(Ops.MAX, -2)   # no index: the identity
    else: part = vals._min(-2)   # no index: the identity
    part = self._scatter_back(d, part, ishape, ident)
    got = count > 0
    base = self if include_self else got.where(self._like(ident), self)
    if reduce in ("sum", "mean"): out = base + part
    elif reduce == "prod": out = base * part
    elif reduce == "amax": out = base.maximum(part)
    else: out = base.minimum(part)
    if reduce == "mean":
      n = count + (1 if include_self else 0)
      out = got.where(out.div(n.maximum(1)).cast(self.dtype) if dtypes.is_float(self.dtype) else out.floordiv(n.maximum(1).cast(self.dtype)), self)
    return out

  # ---- sorting ---------------------------------------------------------------------------------------
  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """(sorted values, int32 indices) along dim. NaN sorts as the largest value (PyTorch); equal values keep their
    order (stable). Each element's rank is counted by comparing it with every other one: O(n^2) work per row, in
    one kernel; the values are then selected exactly (bits kept) and get the gradient at their new place."""
    ax = self._axis(dim) if self.ndim else 0
    if self.ndim == 0: return self, self._like(0, dtypes.int32)
    x = self.transpose(ax, -1) if ax != self.ndim - 1 else self
    n = x.shape[-1]
    if n > _SORT_DIRECT:
      # the network runs on detached values; the gradient goes back through the permutation (a one-hot scatter: a
      # gradient through the network's selects would be a graph that grows 4x per step)
      values, indices = _bitonic_sort(x.detach(), descending)
      def rule(y: Tensor, g: Tensor, x: Tensor, idx: Tensor) -> tuple[Tensor | None, ...]:
        full = (*x.shape, n)
        hit = _one_hot(idx.unsqueeze(-1), n, full, x.ndim)           # [.., r, i]: sorted position r came from i
        return hit.where(g.unsqueeze(-1)._expand_to(full), 0.0).sum(-2), None
      values = x._custom_grad(values, indices, rule=rule)
      return (values.transpose(ax, -1), indices.transpose(ax, -1)) if ax != self.ndim - 1 else (values, indices)
    xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)                       # element i along axis -2, j along axis -1
    full = (*x.shape, n)
    a, b = (xi, xj) if descending else (xj, xi)   # j sorts before i when a < b (NaN the largest)
    before = _lt(a, b) | (b.isnan() & a.isnan().logical_not()) if dtypes.is_float(x.dtype) else _lt(a, b)
    same = _eq(xj, xi) | (xj.isnan() & xi.isnan())
    i_idx, j_idx = _iota(n, full, x.ndim - 1, x), _iota(n, full, x.ndim, x)
    rank = (before._expand_to(full) | (same._expand_to(full) & _lt(j_idx, i_idx))).cast(dtypes.int32).sum(-1)   # (..., n)
    hit = _eq(rank.unsqueeze(-2)._expand_to(full), _iota(n, full, x.ndim - 1, x))     # [.., r, i]: element i has rank r
    values = _select(xj._expand_to(full), hit, (x.ndim,)).reshape(x.shape)
    indices = _select(j_idx, hit, (x.ndim,)).reshape(x.shape)
    if ax != self.ndim - 1: values, indices = values.transpose(ax, -1), indices.transpose(ax, -1)
    return values, indices

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:  # type: ignore[misc]
    return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """The k largest (smallest) values along dim and their int32 indices, in sorted order."""
    d = self._axis(dim) if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    if not isinstance(k, int) or not 0 <= k <= n: raise ValueError(f"topk: k must be an int in [0, {n}], got {k!r}")
    v, i = self.sort(dim, descending=largest)
    if not self.ndim: return v, i
    bounds = tuple((0, k) if a == d else None for a in range(self.ndim))
    return v.shrink(bounds), i.shrink(bounds)

  # ---- indexing -------------------------------------------------------------------------------------
  def __getitem__(self: Tensor, index: Any) -> Tensor:  # type: ignore[misc]
    """numpy-style indexing: ints (negative count from the end), slices with any step, None, `...`, and integer
    tensors (or lists) as gathers. Several tensor indices broadcast together; their result axes go where the
    first one was if they are adjacent, else first (ints are applied before that rule, as in PyTorch and tinygrad:
    `x[0, :, idx]` has shape (x.shape[1], *idx.shape)). Negative tensor indices wrap once; tensor indices still out of
    range select 0 (they are not checked, which would need the values)."""
    items = _parse_index(self, index)
    y = _basic(self, items)
    if not any(i.kind == "tensor" for i in items): return y
    dims, bshape, idxs, inplace = _advanced(y, items)
    d0, nb = dims[0], len(bshape)
    full = y.shape[:d0] + bshape + y.shape[d0:]
    mask: Tensor | None = None
    for d, t in zip(dims, idxs):
      m = _one_hot(t, y.shape[d], full, d + nb)
      mask = m if mask is None else mask._alu(Ops.AND, m)
    assert mask is not None
    x = y.reshape(y.shape[:d0] + (1,) * nb + y.shape[d0:])._expand_to(full)
    out = _select(x, mask, tuple(d + nb for d in dims))
    out = out.reshape(tuple(n for k, n in enumerate(full) if k - nb not in dims or k < d0 + nb))
    if not inplace and d0: out = out.permute(list(range(d0, d0 + nb)) + list(range(d0)) + list(range(d0 + nb, out.ndim)))
    return out

  def __setitem__(self: Tensor, index: Any, value: Any) -> None:  # type: ignore[misc]
    """`t[index] = value`: t's contents become `value` (a scalar or a tensor broadcastable to `t[index]`'s shape,
    cast to t's dtype) in the selected region and stay the same elsewhere; t is realized. Only `t` changes:
    tensors computed from t's old contents before (including `t[...]` results) keep the old values, unlike
    numpy/PyTorch views. With repeated tensor indices the last one wins, as in numpy."""
    Tensor = type(self)
    items = _parse_index(self, index)
    y = _basic(self, items)
    if isinstance(value, Tensor):
      if value.device != self.device: raise ValueError(f"setitem: value on {value.device}, tensor on {self.device}")
      v = value.cast(self.dtype)
    else: v = Tensor(value, self.device, dtype=self.dtype) if isinstance(value, (list, tuple, np.ndarray)) else Tensor.full((), value, self.dtype, self.device)
    target = y.shape
    if any(i.kind == "tensor" for i in items):
      dims, bshape, idxs, inplace = _advanced(y, items)
      d0, nb = dims[0], len(bshape)
      target = y.shape[:d0] + bshape + tuple(n for k, n in enumerate(y.shape) if k >= d0 and k not in dims)
      if not inplace: target = bshape + y.shape[:d0] + target[d0 + nb:]
    try: ok = _broadcast_shape(v.shape, target) == target
    except ValueError: ok = False
    if not ok: raise ShapeError(f"setitem: value of shape {v.shape} does not broadcast to the indexed shape {target}")
    if not math.prod(target): return
    if v.ndim > len(target): v = v.reshape(v.shape[v.ndim - len(target):])
    v = v._expand_to(target)
    if any(i.kind == "tensor" for i in items): v = _scatter(y, v, dims, bshape, idxs, inplace)
    elif all(i.kind == "none" or (i.kind == "slice" and i.step == 1 and i.bounds == (0, n)) for i, n in zip(items, _src_shapes(items, self.shape))):
      self.assign(v.reshape(self.shape)).realize()   # the whole tensor: no mask needed
      return
    new = _place(type(self).ones(y.shape, dtype=dtypes.bool, device=self.device), items, self.shape, False).where(_place(v, items, self.shape), self)
    self.assign(new).realize()

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:  # type: ignore[misc]
    """out[i][j][k] = self[i][index[i][j][k]][k] for dim=1 (and likewise for other dims); index has self's number
    of axes and is no larger than self outside `dim`. Negative indices wrap; out-of-range ones give 0."""
    d = self._axis(dim)
    if index.ndim != self.ndim: raise ShapeError(f"gather: index of shape {index.shape} needs {self.ndim} axes like the input {self.shape}")
    if any(i > n for k, (i, n) in enumerate(zip(index.shape, self.shape)) if k != d):
      raise ShapeError(f"gather: index shape {index.shape} is larger than input shape {self.shape} outside dim {dim}")
    n = self.shape[d]
    x = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
    x = x.unsqueeze(-1).transpose(-1, d)                    # the gathered axis last, a size-1 axis in its place
    full = index.shape + (n,)
    mask = _one_hot(index.unsqueeze(-1), n, full, index.ndim)
    return _select(x._expand_to(full), mask, (index.ndim,)).reshape(index.shape)


def _scatter(y: Tensor, v: Tensor, dims: list[int], bshape: tuple[int, ...], idxs: list[Tensor], inplace: bool) -> Tensor:
  """y with the values v (of y[tensor indices]'s shape) written at the indexed places; the last of repeated indices wins."""
  d0, nb = dims[0], len(bshape)
  full = y.shape[:d0] + bshape + y.shape[d0:]
  if not inplace and d0: v = v.permute(list(range(nb, nb + d0)) + list(range(nb)) + list(range(nb + d0, v.ndim)))
  v = v.reshape(tuple(1 if k - nb in dims and k >= d0 + nb else n for k, n in enumerate(full)))._expand_to(full)
  mask: Tensor | None = None
  for d, t in zip(dims, idxs):
    m = _one_hot(t, y.shape[d], full, d + nb)
    mask = m if mask is None else mask._alu(Ops.AND, m)
  assert mask is not None
  baxes = tuple(range(d0, d0 + nb))
  T = type(y)
  order = _iota(math.prod(bshape), (1,) * d0 + (math.prod(bshape),) + (1,) * (y.ndim - d0), d0, y).reshape(
    (1,) * d0 + bshape + (1,) * (y.ndim - d0))._expand_to(full)
  winner = mask.where(order, -1)._reduce(Ops.MAX, baxes, keepdim=True)          # last index in B order that hits each place
  picked = _select(v, _eq(order, winner._expand_to(full)), baxes)
  hit = _lt(T.full((), -1, dtypes.int32, y.device), winner)
  return hit.where(picked, y.reshape(y.shape[:d0] + (1,) * nb + y.shape[d0:])).reshape(y.shape)


def _fixed_size(a: np.ndarray, size: int, fill: int) -> np.ndarray:
  """The first size rows of a, padded with rows of fill (the size= of nonzero and masked_select)."""
  if not isinstance(size, int) or isinstance(size, bool) or size < 0: raise ValueError(f"size must be an int >= 0, got {size!r}")
  pad = np.full((max(size - len(a), 0), *a.shape[1:]), fill, dtype=a.dtype)
  return np.concatenate([a[:size], pad])
