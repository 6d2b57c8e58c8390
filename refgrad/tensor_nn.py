"""Neural-network ops on top of the movement ops, elementwise math and reductions: matmul/dot, linear,
conv2d and pooling.

matmul is a broadcast multiply followed by a sum over the shared axis, which the scheduler fuses into
one reduce kernel. Convolution and pooling view the input as sliding windows (`_windows`: movement ops
only, so the view fuses into the kernel that reduces it) and reduce over each window."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from refgrad.dtype import DType, dtypes, least_upper_dtype, sum_acc_dtype

if TYPE_CHECKING:
  from refgrad.tensor import Tensor


def _tuple(x: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
  t = (x,) * n if isinstance(x, int) else tuple(x)
  if len(t) != n or any(not isinstance(v, int) or isinstance(v, bool) for v in t): raise ValueError(f"{what} must be an int or {n} ints, got {x!r}")
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
    from refgrad.tensor import Tensor, _broadcast_shape
    x = self
    if not isinstance(w, Tensor): w = Tensor(w, x.device)
    if x.ndim == 0 or w.ndim == 0: raise ValueError(f"matmul: both arguments need at least one axis, got shapes {x.shape} and {w.shape}")
    kw = -min(w.ndim, 2)   # the axis of w that is summed with x's last one
    if x.shape[-1] != w.shape[kw]:
      raise ValueError(f"matmul: shapes {x.shape} and {w.shape} do not match: {x.shape[-1]} (last axis of the first) != {w.shape[kw]} (axis {kw} of the second)")
    try: _broadcast_shape(x.shape[:-2], w.shape[:-2])
    except ValueError: raise ValueError(f"matmul: batch axes of shapes {x.shape} and {w.shape} do not broadcast") from None
    # multiply in the accumulator dtype (an int8 product would wrap before the int32 sum), then
    # x (..., a, 1, n) * w^T (..., 1, b, n), summed over n
    acc = dtype or sum_acc_dtype(least_upper_dtype(x.dtype, w.dtype))
    x, w = x.cast(acc), w.cast(acc)
    if w.ndim > 1:
      w = w.transpose(-1, -2)
      if x.ndim > 1: x, w = x.unsqueeze(-2), w.unsqueeze(-3)
    return (x * w).sum(-1, acc_dtype=acc)

  def matmul(self: Tensor, x: Tensor, reverse: bool = False, dtype: DType | None = None) -> Tensor:  # type: ignore[misc]
    """self @ x (x @ self if reverse); see `dot`."""
    from refgrad.tensor import Tensor
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
      raise ValueError(f"conv2d: input {x.shape} and weight {w.shape} need shapes (batch, cin, *spatial) and (cout, cin/groups, *kernel)")
    bs, cin, cout, cg = x.shape[0], x.shape[1], w.shape[0], w.shape[1]
    if not isinstance(groups, int) or groups < 1 or cin != cg * groups or cout % groups:
      raise ValueError(f"conv2d: input channels {cin} (input {x.shape}) do not fit weight {w.shape} with groups={groups} "
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
    if bias.shape != (cout,): raise ValueError(f"conv2d: bias of shape {bias.shape} does not match {cout} output channels")
    return out + bias.reshape((1, cout) + (1,) * nsp)

  def _pool_windows(self: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None, dilation: int | Sequence[int],  # type: ignore[misc]
                    padding: int | Sequence[int], value: Any = 0) -> tuple[Tensor, tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Windows of the last two axes padded with `value`: (..., oh, ow, kh, kw)."""
    from refgrad.tensor import Tensor
    k = _tuple(kernel_size, 2, "kernel_size")
    if self.ndim < 2: raise ValueError(f"pool2d: input needs at least 2 axes, got shape {self.shape}")
    st, dl, pads = k if stride is None else _tuple(stride, 2, "stride"), _tuple(dilation, 2, "dilation"), _pads(padding, 2)
    if any(a < 0 or b < 0 for a, b in pads): raise ValueError(f"pool2d: negative padding {padding!r}")
    lead = ((0, 0),) * (self.ndim - 2)
    win = _windows(self.pad(lead + pads), k, st, dl)
    if value != 0 and any(a or b for a, b in pads):
      # pad with `value` after taking windows: a padded-with-value input is computed, and the windows' broadcast
      # would give it a kernel of its own; a padded constant mask is not
      inside = _windows(Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).pad(lead + pads), k, st, dl)
      win = inside.where(win, value)
    return win, k, pads

  def avg_pool2d(self: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,  # type: ignore[misc]
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, count_include_pad: bool = True) -> Tensor:
    """Mean over each kernel_size window of the last two axes (stride defaults to kernel_size). Padding counts
    as zeros in the mean unless count_include_pad=False. As `mean`: ints give the default float, float16/bfloat16
    accumulate in float32, and the sum is multiplied by 1/count."""
    from refgrad.tensor import Tensor
    dt = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
    acc = dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt
    win, k, pads = self._pool_windows(kernel_size, stride, dilation, padding, 0)
    total = win.cast(acc).sum((-2, -1))   # cast after the windows' broadcast: it stays in the pooling kernel
    if count_include_pad or not any(a or b for a, b in pads): return total.div(math.prod(k)).cast(dt)
    inside = Tensor.ones(self.shape[-2:], dtype=acc, device=self.device)._pool_windows(kernel_size, stride, dilation, padding, 0)[0]
    return total.div(inside.sum((-2, -1))).cast(dt)

  def max_pool2d(self: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,  # type: ignore[misc]
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0) -> Tensor:
    """Max over each kernel_size window of the last two axes (stride defaults to kernel_size; padding is -inf,
    or the dtype's minimum for ints)."""
    win, _, _ = self._pool_windows(kernel_size, stride, dilation, padding, dtypes.min(self.dtype))
    return win.max((-2, -1))
