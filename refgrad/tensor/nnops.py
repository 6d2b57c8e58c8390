"""Neural-network ops on top of the movement ops, elementwise math and reductions: matmul/dot, linear,
conv2d and pooling.

matmul is a broadcast multiply followed by a sum over the shared axis, which the scheduler fuses into
one reduce kernel. Convolution and pooling view the input as sliding windows (`_windows`: movement ops
only, so the view fuses into the kernel that reduces it) and reduce over each window."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from refgrad.dtype import DType, dtypes, least_upper_dtype, sum_acc_dtype
from refgrad.tensor.args import _broadcast_shape
from refgrad.tensor.errors import ShapeError

if TYPE_CHECKING:
  from refgrad.tensor import Tensor


def _tuple(x: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
  t = (x,) * n if isinstance(x, int) else tuple(x)
  if len(t) != n or any(not isinstance(v, int) or isinstance(v, bool) for v in t): raise ValueError(f"{what} must be an int or {n} ints, got {x!r}")
  if what in ("stride", "dilation", "kernel_size") and any(v <= 0 for v in t): raise ValueError(f"{what} must be positive, got {x!r}")
  if what == "output_padding" and any(v < 0 for v in t): raise ValueError(f"{what} must be >= 0, got {x!r}")
  return t


def _pads(padding: int | Sequence[int], n: int) -> tuple[tuple[int, int], ...]:
  """(before, after) per spatial axis from an int, one int per axis, or 2*n ints given last axis first
  as (left, right, top, bottom) (PyTorch's F.pad order, as in tinygrad)."""
  if isinstance(padding, int): return ((padding, padding),) * n
  p = tuple(padding)
  if len(p) == n: return tuple((v, v) for v in p)
  if len(p) == 2 * n: return tuple((p[2 * k], p[2 * k + 1]) for k in reversed(range(n)))
  raise ValueError(f"padding must be an int, {n} ints or {2 * n} ints, got {padding!r}")


def _window_axis(x: Tensor, axis: int, k: int, s: int, d: int) -> Tensor:
  """Replace axis (size n) by (o, k) with out[.., i, a, ..] = x[.., i*s + a*d, ..]."""
  n = x.shape[axis]
  o = (n - d * (k - 1) - 1) // s + 1
  pre, post = x.shape[:axis], x.shape[axis + 1:]
  keep = tuple((0, 0) for _ in pre), tuple((0, 0) for _ in post)
  # k copies of the axis laid end to end; read as rows of n+d, row a starts at element a*d of the axis
  x = x.reshape(pre + (1, n) + post)._expand_to(pre + (k, n) + post).reshape(pre + (k * n,) + post)
  x = x.pad(keep[0] + ((0, k * d),) + keep[1]).reshape(pre + (k, n + d) + post)
  # every s-th of the first o*s columns: the window starts
  w = o * s
  if w > n + d: x = x.pad(keep[0] + ((0, 0), (0, w - n - d)) + keep[1])
  else: x = x.shrink(tuple(None for _ in pre) + (None, (0, w)) + tuple(None for _ in post))
  x = x.reshape(pre + (k, o, s) + post).shrink(tuple(None for _ in pre) + (None, None, (0, 1)) + tuple(None for _ in post))
  return x.reshape(pre + (k, o) + post).transpose(axis, axis + 1)


def _windows(x: Tensor, k: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
  """(..., *spatial) -> (..., *out_spatial, *k): every window of the last len(k) axes."""
  n = len(k)
  lead = x.ndim - n
  for j in range(n):
    size = x.shape[lead + j]
    if dilation[j] * (k[j] - 1) + 1 > size:
      raise ValueError(f"kernel size {k} (dilation {dilation}) is larger than the (padded) input {x.shape[lead:]}")
  for j in reversed(range(n)): x = _window_axis(x, lead + j, k[j], stride[j], dilation[j])
  # axes are now (..., o0, k0, o1, k1, ...): put the window axes last
  order = list(range(lead)) + [lead + 2 * j for j in range(n)] + [lead + 2 * j + 1 for j in range(n)]
  return x.permute(order)


class NNMixin:
  __slots__ = ()

  def dot(self: Tensor, w: Tensor, dtype: DType | None = None) -> Tensor:  # type: ignore[misc]
    """Matrix product with numpy's rules: 1-D x 1-D is a dot product, a 1-D argument is a row (first) or
    column (second) vector, more axes are batches that broadcast. `dtype` sets the accumulator/result
    dtype (default: the promoted dtype, with small ints widened to 32 bits as in `sum`; products are taken in it too)."""
    Tensor = type(self)
    x = self
    if not isinstance(w, Tensor): w = Tensor(w, x.device)
    if x.ndim == 0 or w.ndim == 0: raise ShapeError(f"matmul: both arguments need at least one axis, got shapes {x.shape} and {w.shape}")
    kw = -min(w.ndim, 2)   # the axis of w that is summed with x's last one
    if x.shape[-1] != w.shape[kw]:
      raise ShapeError(f"matmul: shapes {x.shape} and {w.shape} do not match: {x.shape[-1]} (last axis of the first) != {w.shape[kw]} (axis {kw} of the second)")
    try: _broadcast_shape(x.shape[:-2], w.shape[:-2])
    except ShapeError: raise ShapeError(f"matmul: batch axes of shapes {x.shape} and {w.shape} do not broadcast") from None
    # multiply in the accumulator dtype (an int8 product would wrap before the int32 sum), then
    # x (..., a, 1, n) * w^T (..., 1, b, n), summed over n
    acc = dtype or sum_acc_dtype(least_upper_dtype(x.dtype, w.dtype))
    if dtype is None and acc in (dtypes.float16, dtypes.bfloat16):   # products and sums in float32, rounded once
      return x.cast(dtypes.float32).dot(w.cast(dtypes.float32)).cast(acc)
    x, w = x.cast(acc), w.cast(acc)
    if w.ndim > 1:
      w = w.transpose(-1, -2)
      if x.ndim > 1: x, w = x.unsqueeze(-2), w.unsqueeze(-3)
    return (x * w).sum(-1, acc_dtype=acc)

  def matmul(self: Tensor, x: Tensor, reverse: bool = False, dtype: DType | None = None) -> Tensor:  # type: ignore[misc]
    """self @ x (x @ self if reverse); see `dot`."""
    Tensor = type(self)
    if not isinstance(x, Tensor): x = Tensor(x, self.device)
    return x.dot(self, dtype) if reverse else self.dot(x, dtype)

  def __matmul__(self: Tensor, x: Any) -> Tensor: return self.matmul(x)  # type: ignore[misc]
  def __rmatmul__(self: Tensor, x: Any) -> Tensor: return self.matmul(x, True)  # type: ignore[misc]

  def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # type: ignore[misc]
    """self @ weight + bias with weight of shape (in, out) (a 1-D weight multiplies elementwise), as in tinygrad."""
    x = self * weight if weight.ndim == 1 else self.dot(weight)
    return x if bias is None else x + bias

  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,  # type: ignore[misc]
             dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0) -> Tensor:
    """Cross-correlation of self (batch, cin, *spatial) with weight (cout, cin/groups, *kernel) (2 spatial axes for
    conv2d; others work the same). padding: int, one int per spatial axis, or (left, right, top, bottom)."""
    x, w = self, weight
    nsp = w.ndim - 2
    if nsp < 1 or x.ndim != nsp + 2:
      raise ShapeError(f"conv2d: input {x.shape} and weight {w.shape} need shapes (batch, cin, *spatial) and (cout, cin/groups, *kernel)")
    bs, cin, cout, cg = x.shape[0], x.shape[1], w.shape[0], w.shape[1]
    if not isinstance(groups, int) or groups < 1 or cin != cg * groups or cout % groups:
      raise ShapeError(f"conv2d: input channels {cin} (input {x.shape}) do not fit weight {w.shape} with groups={groups} "
                       f"(need cin == weight.shape[1] * groups and cout divisible by groups)")
    k = w.shape[2:]
    st, dl = _tuple(stride, nsp, "stride"), _tuple(dilation, nsp, "dilation")
    x = x.pad(((0, 0), (0, 0)) + _pads(padding, nsp))
    win = _windows(x, k, st, dl)                                    # (bs, cin, *o, *k)
    o = win.shape[2:2 + nsp]
    rc = cout // groups
    # (bs, groups, 1, *o, cg, *k) * (1, groups, rc, 1.., cg, *k), summed over (cg, *k)
    win = win.reshape((bs, groups, 1, cg) + o + k).permute((0, 1, 2) + tuple(range(4, 4 + nsp)) + (3,) + tuple(range(4 + nsp, 4 + 2 * nsp)))
    wr = w.reshape((1, groups, rc) + (1,) * nsp + (cg,) + k)
    out = (win * wr).sum(tuple(range(-1 - nsp, 0))).reshape((bs, cout) + o)
    if bias is None: return out
    if bias.shape != (cout,): raise ShapeError(f"conv2d: bias of shape {bias.shape} does not match {cout} output channels")
    return out + bias.reshape((1, cout) + (1,) * nsp)

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,  # type: ignore[misc]
                       dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
    """The transpose (gradient) of conv2d: input (batch, cin, *spatial), weight (cin, cout/groups, *kernel), N spatial
    axes as the weight has. Computed as a stride-1 conv2d of the input with stride-1 zeros between its elements,
    padded by dilation*(kernel-1) - padding (+ output_padding after), with the kernel flipped and its channels swapped."""
    x, w = self, weight
    nsp = w.ndim - 2
    if nsp < 1 or x.ndim != nsp + 2: raise ShapeError(f"conv_transpose2d: input {x.shape} and weight {w.shape} need (batch, cin, *spatial) and (cin, cout/groups, *kernel)")
    cin, cg = x.shape[1], w.shape[1]
    if not isinstance(groups, int) or groups < 1 or w.shape[0] != cin or cin % groups:
      raise ShapeError(f"conv_transpose2d: weight {w.shape} does not fit {cin} input channels with groups={groups}")
    k = w.shape[2:]
    st, dl, op = _tuple(stride, nsp, "stride"), _tuple(dilation, nsp, "dilation"), _tuple(output_padding, nsp, "output_padding")
    pads = _pads(padding, nsp)
    if any(o >= max(s_, d_) for o, s_, d_ in zip(op, st, dl)): raise ValueError(f"conv_transpose2d: output_padding {op} must be smaller than stride {st} or dilation {dl}")
    for j, s_ in enumerate(st):   # stride - 1 zeros between the elements of each spatial axis
      if s_ == 1: continue
      ax = 2 + j
      n = x.shape[ax]
      x = x.unsqueeze(ax + 1).pad(tuple((0, s_ - 1) if i == ax + 1 else (0, 0) for i in range(x.ndim + 1)))
      x = x.flatten(ax, ax + 1).shrink(tuple((0, (n - 1) * s_ + 1) if i == ax else None for i in range(x.ndim - 1)))
    x = x.pad(((0, 0), (0, 0)) + tuple((d_ * (kk - 1) - a, d_ * (kk - 1) - b + o) for d_, kk, (a, b), o in zip(dl, k, pads, op)))
    wt = w.reshape(groups, cin // groups, cg, *k).transpose(1, 2).reshape(groups * cg, cin // groups, *k).flip(tuple(range(2, 2 + nsp)))
    return x.conv2d(wt, bias, groups=groups, dilation=dl)

  def _pool_setup(self: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None, dilation: int | Sequence[int],  # type: ignore[misc]
                  padding: int | Sequence[int], ceil_mode: bool) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...]]:
    """(kernel, stride, dilation, (before, after) padding, extra after-padding for ceil_mode) per pooled axis. The
    number of pooled axes is kernel_size's length (an int: 2), as tinygrad: the last that many axes are pooled."""
    n = 2 if isinstance(kernel_size, int) else len(tuple(kernel_size))
    k = _tuple(kernel_size, n, "kernel_size")
    if self.ndim < n: raise ValueError(f"pool: a {n}-D kernel {k} needs an input of at least {n} axes, got shape {self.shape}")
    st, dl, pads = k if stride is None else _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation"), _pads(padding, n)
    if any(a < 0 or b < 0 for a, b in pads): raise ValueError(f"pool: negative padding {padding!r}")
    if any(v <= 0 for v in (*k, *st, *dl)): raise ValueError(f"pool: kernel_size {k}, stride {st} and dilation {dl} must be positive")
    if any(2 * a > kk for (a, _), kk in zip(pads, k)): raise ValueError(f"pool: padding {padding!r} must be at most half the kernel size {k}")
    extra = []
    for size, kk, s_, d_, (pa, pb) in zip(self.shape[-n:], k, st, dl, pads):
      span = size + pa + pb - d_ * (kk - 1) - 1
      if span < 0: raise ValueError(f"pool: kernel size {k} (dilation {dl}) is larger than the padded input {self.shape[-n:]}")
      o = span // s_ + 1
      if ceil_mode:
        o = -(-span // s_) + 1
        if (o - 1) * s_ >= size + pa: o -= 1   # the last window must start inside the input or the left padding
      extra.append(max(0, (o - 1) * s_ + d_ * (kk - 1) + 1 - (size + pa + pb)))
    return k, st, dl, pads, tuple(extra)

  def _pool_windows(self: Tensor, k: tuple[int, ...], st: tuple[int, ...], dl: tuple[int, ...], pads: tuple[tuple[int, int], ...],  # type: ignore[misc]
                    extra: tuple[int, ...], value: Any = 0) -> Tensor:
    """Windows of the last len(k) axes padded with `value`: (..., *out, *k)."""
    Tensor = type(self)
    n = len(k)
    lead = ((0, 0),) * (self.ndim - n)
    full = lead + tuple((a, b + e) for (a, b), e in zip(pads, extra))
    win = _windows(self.pad(full), k, st, dl)
    if value != 0 and any(a or b for a, b in full):
      # pad with `value` after taking windows: a padded-with-value input is computed, and the windows' broadcast
      # would give it a kernel of its own; a padded constant mask is not
      inside = _windows(Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).pad(full), k, st, dl)
      win = inside.where(win, value)
    return win

  def avg_pool2d(self: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,  # type: ignore[misc]
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """Mean over each kernel_size window of the last len(kernel_size) axes (stride defaults to kernel_size). The
    divisor counts the padding (not the extra of ceil_mode) unless count_include_pad=False, as PyTorch. As `mean`:
    ints give the default float, float16/bfloat16 accumulate in float32, and the sum is multiplied by 1/count."""
    Tensor = type(self)
    dt = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
    acc = dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt
    k, st, dl, pads, extra = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode)
    n = len(k)
    total = self._pool_windows(k, st, dl, pads, extra, 0).cast(acc).sum(tuple(range(-n, 0)))   # cast after the windows' broadcast
    if not any(extra) and (count_include_pad or not any(a or b for a, b in pads)): return total.div(math.prod(k)).cast(dt)
    # divisor per window: its positions inside the input, and inside the padding with count_include_pad (never the ceil_mode extra)
    if count_include_pad:
      ones = Tensor.ones(tuple(m + a + b for m, (a, b) in zip(self.shape[-n:], pads)), dtype=acc, device=self.device)
      cnt = ones._pool_windows(k, st, dl, tuple((0, 0) for _ in pads), extra, 0)
    else: cnt = Tensor.ones(self.shape[-n:], dtype=acc, device=self.device)._pool_windows(k, st, dl, pads, extra, 0)
    return total.div(cnt.sum(tuple(range(-n, 0)))).cast(dt)

  def max_pool2d(self: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,  # type: ignore[misc]
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Max over each kernel_size window of the last len(kernel_size) axes (stride defaults to kernel_size; padding
    is -inf, or the dtype's minimum for ints). return_indices: also the int32 index of the (first) maximum within
    the flattened pooled axes of the input, as PyTorch (for max_unpool2d)."""
    Tensor = type(self)
    k, st, dl, pads, extra = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode)
    n = len(k)
    win = self._pool_windows(k, st, dl, pads, extra, dtypes.min(self.dtype))
    out = win.max(tuple(range(-n, 0)))
    if not return_indices: return out
    sp = self.shape[-n:]
    flat = Tensor.arange(math.prod(sp), dtype=dtypes.int32, device=self.device).reshape(sp)
    iwin = flat._pool_windows(k, st, dl, pads, extra, -1)                       # (*out, *k) input positions
    wflat = win.reshape(*win.shape[:-n], -1)
    pos = wflat.argmax(-1)                                                       # first max (NaN counts as the max)
    kk = math.prod(k)
    pick = pos.unsqueeze(-1) == Tensor.arange(kk, dtype=dtypes.int32, device=self.device)
    idx = pick.where(iwin.reshape(*iwin.shape[:-n], kk)._expand_to(pick.shape), 0).sum(-1)
    return out, idx

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,  # type: ignore[misc]
                   dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """The inverse of max_pool2d(return_indices=True): zeros with each value put back at its index (PyTorch). The output
    size defaults to (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + 1 per pooled axis."""
    Tensor = type(self)
    n = 2 if isinstance(kernel_size, int) else len(tuple(kernel_size))
    k = _tuple(kernel_size, n, "kernel_size")
    st, dl, pads = k if stride is None else _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation"), _pads(padding, n)
    if indices.shape != self.shape: raise ShapeError(f"max_unpool2d: indices of shape {indices.shape} do not match input {self.shape}")
    osp = tuple(output_size[-n:]) if output_size is not None else \
      tuple((i - 1) * s_ - a - b + d_ * (kk - 1) + 1 for i, s_, (a, b), d_, kk in zip(self.shape[-n:], st, pads, dl, k))
    lead = self.shape[:-n]
    x, ix = self.reshape(*lead, -1), indices.reshape(*lead, -1)
    base = Tensor.zeros(*lead, math.prod(osp), dtype=self.dtype, device=self.device)
    return base.scatter(-1, ix, x).reshape(*lead, *osp)

  def interpolate(self: Tensor, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:  # type: ignore[misc]
    """Resize the last len(size) axes (PyTorch's F.interpolate with size=): mode "nearest" (floor(i * in/out)),
    "nearest-exact" (floor((i + 0.5) * in/out)), or "linear" (also "bilinear", "trilinear": linear along each axis,
    separably; align_corners maps the corner samples onto each other; int inputs are computed in float and rounded
    back to their dtype). Source positions and weights are computed in
    float64 and rounded to the tensor's dtype; each output is x0 * (1 - w) + x1 * w of its two neighbours."""
    Tensor = type(self)
    size = tuple(size)
    if mode not in ("nearest", "nearest-exact", "linear", "bilinear", "trilinear"): raise ValueError(f"interpolate: unknown mode {mode!r}")
    if len(size) > self.ndim or any(not isinstance(v, int) or v < 0 for v in size): raise ValueError(f"interpolate: invalid size {size} for shape {self.shape}")
    if align_corners and mode.startswith("nearest"): raise ValueError("interpolate: align_corners only applies to the linear modes")
    if self.dtype == dtypes.uint8 and not mode.startswith("nearest"): return _interpolate_uint8(self, size, align_corners)
    x = self if dtypes.is_float(self.dtype) or mode.startswith("nearest") else self.cast(dtypes.default_float)
    for j, out in enumerate(size):
      ax = x.ndim - len(size) + j
      n = x.shape[ax]
      if out == n and not mode.startswith("nearest") and not align_corners: continue
      xt = x.transpose(ax, -1)
      if mode.startswith("nearest"):
        i = np.arange(out, dtype=np.float64) + (0.5 if mode == "nearest-exact" else 0)
        src = np.minimum(np.floor(i * (n / out)), n - 1)
        x = xt[..., Tensor(src.astype(np.int32), device=self.device)].transpose(ax, -1)
        continue
      i0, i1, w = _linear_source(n, out, align_corners)
      x0, x1 = (xt[..., Tensor(k.astype(np.int32), device=self.device)] for k in (i0, i1))
      wt = Tensor(w, device=self.device).cast(x.dtype)
      x = (x0 * (1 - wt) + x1 * wt).transpose(ax, -1)
    if x.dtype != self.dtype:   # an int input: rounded back to its dtype (PyTorch keeps uint8 images uint8)
      x = x.round().clip(dtypes.min(self.dtype), dtypes.max(self.dtype)).cast(self.dtype)
    return x

  @staticmethod
  def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DType | None = None) -> Tensor:
    """Einstein summation ("ij,jk->ik"; "..." for broadcast axes; without "->" the output is the letters used once,
    sorted): every operand is aligned to one axis order, multiplied (broadcast) and summed over the dropped letters.
    A letter repeated within one operand takes its diagonal."""
    ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    f = formula.replace(" ", "")
    lhs, arrow, rhs = f.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(ops): raise ValueError(f"einsum: {formula!r} names {len(ins)} operands, {len(ops)} given")
    # "..." becomes as many fresh (Greek) letters as the operand has extra axes, aligned from the right; formulas use a-zA-Z
    nell = max((t.ndim - len(s.replace("...", "")) for s, t in zip(ins, ops) if "..." in s), default=0)
    ell = "".join(chr(0x3B1 + i) for i in range(nell))
    specs = []
    for s, t in zip(ins, ops):
      if "..." in s: s = s.replace("...", ell[nell - (t.ndim - len(s.replace("...", ""))):])
      if len(s) != t.ndim or not all(c.isalpha() for c in s): raise ShapeError(f"einsum: {s!r} does not fit an operand of shape {t.shape}")
      specs.append(s)
    if arrow: out = rhs.replace("...", ell)
    else: out = ell + "".join(sorted(c for c in set("".join(specs)) if "".join(specs).count(c) == 1 and c not in ell))
    letters = sorted(set("".join(specs)))
    if any(c not in letters for c in out) or len(set(out)) != len(out): raise ValueError(f"einsum: bad output {out!r} in {formula!r}")
    sizes: dict[str, int] = {}
    aligned = []
    for s, t in zip(specs, ops):
      for c in set(s):   # a repeated letter: the diagonal of those axes
        while s.count(c) > 1:
          a, b = s.index(c), s.index(c, s.index(c) + 1)
          t = t.diagonal(0, a, b)
          s = s[:a] + s[a + 1:b] + s[b + 1:] + c
      for c, n in zip(s, t.shape):
        if c in sizes and n != sizes[c] and 1 not in (n, sizes[c]): raise ShapeError(f"einsum: {_einsum_axis(c, ell)} has sizes {sizes[c]} and {n} in {formula!r}")
        sizes[c] = max(sizes.get(c, 1), n) if c in sizes else n
      order = sorted(range(len(s)), key=lambda i: letters.index(s[i]))
      t = t.permute(order) if order else t
      have = [s[i] for i in order]
      aligned.append(t.reshape(tuple(t.shape[have.index(c)] if c in have else 1 for c in letters)))
    prod = aligned[0]
    for t in aligned[1:]: prod = prod * t
    if dtype is not None: prod = prod.cast(dtype)
    summed = tuple(i for i, c in enumerate(letters) if c not in out)
    ret = prod.sum(summed) if summed else prod
    left = [c for c in letters if c in out]
    return ret.permute([left.index(c) for c in out]) if left else ret

  # ---- attention, one-hot, losses (tinygrad's names and arguments) --------------------------------------------
  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,  # type: ignore[misc]
                                   dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """softmax(self @ key^T * scale + mask) @ value, scale = 1/sqrt(head size). attn_mask: bool (False = masked out,
    -inf) or added to the scores; is_causal masks the upper triangle. Dropout runs only while Tensor.training.
    enable_gqa: key and value have fewer heads (axis -3) than the query; each is shared by a group of query heads."""
    Tensor = type(self)
    if is_causal and attn_mask is not None: raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    if self.ndim < 2 or key.ndim < 2 or value.ndim < 2: raise ValueError(f"scaled_dot_product_attention: query {self.shape}, key {key.shape} and value {value.shape} need 2+ axes")
    if enable_gqa and self.ndim >= 3 and key.shape[-3] != self.shape[-3]:
      if self.shape[-3] % key.shape[-3]: raise ValueError(f"scaled_dot_product_attention: {self.shape[-3]} query heads are not a multiple of {key.shape[-3]} key heads")
      rep = self.shape[-3] // key.shape[-3]
      key, value = key.repeat_interleave(rep, -3), value.repeat_interleave(rep, -3)
    qk = self.matmul(key.transpose(-2, -1)) * (scale if scale is not None else 1 / math.sqrt(self.shape[-1]))
    if is_causal: attn_mask = Tensor.ones(qk.shape[-2], qk.shape[-1], dtype=dtypes.bool, device=self.device).tril()
    if attn_mask is not None:
      qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype == dtypes.bool else qk + attn_mask
    att = qk.softmax(-1)
    if dropout_p and Tensor.training: att = att.dropout(dropout_p)
    return att.matmul(value)

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:  # type: ignore[misc]
    """While Tensor.training: zero each element with probability p and scale the rest by 1/(1-p); else self."""
    Tensor = type(self)
    if not 0 <= p <= 1: raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not Tensor.training or p == 0: return self
    if p == 1: return self.zeros_like()
    keep = Tensor.rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0) * (1 / (1 - p))

  def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:  # type: ignore[misc]
    """(..., num_classes) int32 with 1 at each index (num_classes=-1: max + 1, which realizes self)."""
    if not dtypes.is_int(self.dtype): raise TypeError(f"one_hot: needs an integer tensor, got {self.dtype}")
    if num_classes == -1: num_classes = int(self.max().item()) + 1 if self.numel() else 0
    if not isinstance(num_classes, int) or num_classes < 0: raise ValueError(f"one_hot: num_classes must be an int >= 0 or -1, got {num_classes!r}")
    return (self.unsqueeze(-1) == self._iota_along(self.ndim, (*self.shape, num_classes)).cast(self.dtype)).cast(dtypes.int32)

  def _do_reduction(self: Tensor, reduction: str) -> Tensor:  # type: ignore[misc]
    if reduction == "mean": return self.mean()
    if reduction == "sum": return self.sum()
    if reduction == "none": return self
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")

  def _class_mask(self: Tensor, Y: Tensor, dim: int) -> Tensor:  # type: ignore[misc]
    """bool, self's shape: True at the class Y names along `dim` (Y has self's shape without dim)."""
    y = Y.unsqueeze(dim)
    return y._expand_to(self.shape) == self._iota_along(dim).cast(Y.dtype) if y.shape != self.shape else y.cast(dtypes.bool)

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:  # type: ignore[misc]
    """Cross-entropy of logits (classes on axis 1, or 0 for 1-D) against class indices or probabilities Y (PyTorch)."""
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    cdim = 0 if self.ndim == 1 else 1
    n = self.shape[cdim]
    if Y.shape != self.shape:
      if Y.shape != self.shape[:cdim] + self.shape[cdim + 1:]:
        raise ShapeError(f"cross_entropy: target shape {Y.shape} is neither the logits' {self.shape} nor it without the class axis")
      if not dtypes.is_int(Y.dtype): raise TypeError(f"cross_entropy: class-index targets must be ints, got {Y.dtype}")
      Y = self._class_mask(Y, cdim).cast(self.dtype)
    Y = Y * (1 - label_smoothing) + label_smoothing / n
    return -(self.log_softmax(cdim) * Y).sum(cdim)._do_reduction(reduction)

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean") -> Tensor:  # type: ignore[misc]
    """Negative log likelihood of log-probabilities self (N, C, ...) at class indices Y (N, ...); weight per class;
    targets equal to ignore_index count for nothing ('mean' divides by the summed weight of the rest, as PyTorch)."""
    cdim = 0 if self.ndim == 1 else 1
    if Y.shape != self.shape[:cdim] + self.shape[cdim + 1:]: raise ShapeError(f"nll_loss: target shape {Y.shape} does not fit input {self.shape}")
    hit = self._class_mask(Y, cdim)
    w = Y.ones_like(dtype=self.dtype) if weight is None else hit.where(weight.reshape((-1,) + (1,) * (self.ndim - cdim - 1)), 0).sum(cdim)
    if ignore_index is not None: w = (Y != ignore_index).where(w, 0)
    nll = -hit.where(self, 0).sum(cdim) * w
    if reduction == "mean": return nll.sum() / w.sum()
    return nll._do_reduction(reduction)

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,  # type: ignore[misc]
                                      reduction: str = "mean") -> Tensor:
    """Cross-entropy of logits (..., C) against class indices Y (...) (tinygrad): targets equal to ignore_index
    (-1: none) are left out, 'mean' averages over the others."""
    log_p = self.log_softmax(-1)
    keep = (Y != ignore_index) if ignore_index != -1 else Y.ones_like(dtype=dtypes.bool)
    y = self._class_mask(Y, self.ndim - 1) & keep.unsqueeze(-1)
    per = (1 - label_smoothing) * y.where(log_p, 0).sum(-1) + label_smoothing * keep.where(log_p.mean(-1), 0)
    if reduction == "mean": return -per.sum() / keep.sum()
    return -per._do_reduction(reduction)

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:  # type: ignore[misc]
    """-(Y log p + (1 - Y) log(1 - p)) of probabilities self; the logs are clamped at -100 as PyTorch's BCELoss."""
    return (-Y * self.log().maximum(-100) - (1 - Y) * (1 - self).log().maximum(-100))._do_reduction(reduction)

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:  # type: ignore[misc]
    """Binary cross-entropy of logits self: -(pos_weight Y logsigmoid(x) + (1 - Y) logsigmoid(-x))."""
    pw = 1 if pos_weight is None else pos_weight
    return (-(pw * Y * self.logsigmoid() + (1 - Y) * (-self).logsigmoid()))._do_reduction(reduction)


def _linear_source(n: int, out: int, align_corners: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(i0, i1, w) of linear resampling n -> out samples: output k is x[i0] * (1 - w) + x[i1] * w (float64 positions)."""
  i = np.arange(out, dtype=np.float64)
  if align_corners: src = i * ((n - 1) / (out - 1)) if out > 1 else np.zeros(out)
  else: src = np.maximum((i + 0.5) * (n / out) - 0.5, 0)
  i0 = np.floor(src).astype(np.int64)
  return i0, np.minimum(i0 + 1, n - 1), src - i0


def _interpolate_uint8(x: Tensor, size: tuple[int, ...], align_corners: bool) -> Tensor:
  """Linear resampling of uint8 images as PyTorch's CPU kernel does it: one axis at a time, last axis first, each pass in
  fixed point (weights rounded to p fraction bits, the most that keep the largest weight under 2**15) and rounded back
  to uint8 before the next pass."""
  Tensor = type(x)
  y = x.cast(dtypes.int32)
  for j in reversed(range(len(size))):
    ax, out = y.ndim - len(size) + j, size[j]
    n = y.shape[ax]
    if out == n and not align_corners: continue
    i0, i1, w = _linear_source(n, out, align_corners)
    wmax, p = max(float((1 - w).max(initial=0)), float(w.max(initial=0))), 0
    while p < 22 and np.floor(0.5 + wmax * (1 << (p + 1))) < (1 << 15): p += 1
    q0, q1 = (Tensor(np.floor(0.5 + v * (1 << p)).astype(np.int32), device=x.device) for v in (1 - w, w))
    yt = y.transpose(ax, -1)
    x0, x1 = (yt[..., Tensor(i.astype(np.int32), device=x.device)] for i in (i0, i1))
    y = ((x0 * q0 + x1 * q1 + (1 << (p - 1))) >> p).clip(0, 255).transpose(ax, -1)
  return y.cast(dtypes.uint8)


def _einsum_axis(c: str, ell: str) -> str:
  """How an einsum error names an axis: its letter, or its place among the '...' axes."""
  return f"'...' axis {ell.index(c) - len(ell)}" if c in ell else f"letter {c!r}"
