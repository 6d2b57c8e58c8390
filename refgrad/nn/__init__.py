"""Neural-network layers, with tinygrad's names, arguments and initialization.

A layer is a plain object whose Tensor attributes are its state (see nn.state.get_state_dict); calling it applies
it. Parameters start with requires_grad=None, as in tinygrad: an optimizer given them turns gradients on.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.nn import optim, state
from refgrad.tensor import ShapeError, Tensor

__all__ = ["BatchNorm", "BatchNorm2d", "Conv2d", "Embedding", "LayerNorm", "Linear", "optim", "state"]


def _filled(shape: tuple[int, ...], value: float, dtype: DType = dtypes.float32) -> Tensor:
  # from host memory, so each parameter has a buffer node of its own: two equal constant graphs (Tensor.ones(4) twice)
  # are one node, which autograd would see as one tensor
  return Tensor(np.full(shape, value, dtype.np), dtype=dtype)

def _tuple(x: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
  t = (x,) * n if isinstance(x, int) else tuple(x)
  if len(t) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in t): raise ValueError(f"{what} must be an int or {n} ints, got {x!r}")
  return t

def _positive(what: str, *vals: int) -> None:
  for v in vals:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1: raise ValueError(f"{what} must be a positive int, got {v!r}")


class Linear:
  """y = x @ weight.T + bias, weight of shape (out_features, in_features); weight and bias ~ U(-1/sqrt(in), 1/sqrt(in))
  (kaiming_uniform with a=sqrt(5), as in PyTorch and tinygrad)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    _positive("Linear: in_features and out_features", in_features, out_features)
    self.in_features, self.out_features = in_features, out_features
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    if not x.shape or x.shape[-1] != self.in_features:
      raise ShapeError(f"Linear({self.in_features}, {self.out_features}): input of shape {x.shape} needs a last axis of {self.in_features}")
    y = x @ self.weight.permute(1, 0)
    return y if self.bias is None else y + self.bias


class Conv2d:
  """2-D convolution (cross-correlation) over (N, C, H, W); weight (out_channels, in_channels // groups, kh, kw).
  padding: an int, (ph, pw), or 'valid' / 'same' (stride 1 only). Init U(-b, b), b = 1/sqrt(fan_in),
  fan_in = in_channels // groups * kh * kw (PyTorch's)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True):
    _positive("Conv2d: in_channels, out_channels and groups", in_channels, out_channels, groups)
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"Conv2d: in_channels ({in_channels}) and out_channels ({out_channels}) must both be divisible by groups ({groups})")
    self.kernel_size = _tuple(kernel_size, 2, "Conv2d: kernel_size")
    self.stride, self.dilation = _tuple(stride, 2, "Conv2d: stride"), _tuple(dilation, 2, "Conv2d: dilation")
    _positive("Conv2d: kernel_size, stride and dilation", *self.kernel_size, *self.stride, *self.dilation)
    if isinstance(padding, str):
      if padding == "valid": pad: tuple[int, ...] = (0, 0, 0, 0)
      elif padding == "same":
        if self.stride != (1, 1): raise ValueError(f"Conv2d: padding='same' needs stride 1, got {self.stride}")
        # total padding d*(k-1) per axis, the odd element after (PyTorch); flat order (w_left, w_right, h_top, h_bottom)
        tot = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
        pad = (tot[1] // 2, tot[1] - tot[1] // 2, tot[0] // 2, tot[0] - tot[0] // 2)
      else: raise ValueError(f"Conv2d: padding must be an int, a pair of ints, 'valid' or 'same', got {padding!r}")
    else:
      ph, pw = _tuple(padding, 2, "Conv2d: padding")
      if ph < 0 or pw < 0: raise ValueError(f"Conv2d: padding must not be negative, got {padding!r}")
      pad = (pw, pw, ph, ph)
    self.padding, self.groups = pad, groups
    self.in_channels, self.out_channels = in_channels, out_channels
    bound = 1 / math.sqrt(in_channels // groups * math.prod(self.kernel_size))
    self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim != 4 or x.shape[1] != self.in_channels:
      raise ShapeError(f"Conv2d({self.in_channels}, {self.out_channels}): input of shape {x.shape} must be (N, {self.in_channels}, H, W)")
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding)


class BatchNorm:
  """Batch normalization over axis 1 of (N, C, ...). Training (Tensor.training) or track_running_stats=False: normalize
  with the batch's mean and biased variance; while training with tracked stats, also update
  running = (1 - momentum) * running + momentum * batch (the variance unbiased, n/(n-1)). Otherwise: use the running stats.
  The running stats are assigned lazily: an optimizer given them (get_parameters(model)) realizes them with each step."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    _positive("BatchNorm: sz", sz)
    self.sz, self.eps, self.affine, self.track_running_stats, self.momentum = sz, eps, affine, track_running_stats, momentum
    self.weight: Tensor | None = _filled((sz,), 1.0) if affine else None
    self.bias: Tensor | None = _filled((sz,), 0.0) if affine else None
    if track_running_stats:
      self.running_mean, self.running_var = _filled((sz,), 0.0).requires_grad_(False), _filled((sz,), 1.0).requires_grad_(False)
      self.num_batches_tracked = _filled((1,), 0, dtypes.int64).requires_grad_(False)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.sz: raise ShapeError(f"BatchNorm({self.sz}): input of shape {x.shape} must be (N, {self.sz}, ...)")
    bshape = (1, self.sz) + (1,) * (x.ndim - 2)
    if self.track_running_stats and not Tensor.training:
      mean, var = self.running_mean, self.running_var
    else:
      axes = tuple(i for i in range(x.ndim) if i != 1)
      n = x.numel() // self.sz
      if n == 0: raise ValueError(f"BatchNorm({self.sz}): empty input of shape {x.shape}")
      mean = x.mean(axis=axes)
      # the mean is detached here: d(var)/d(mean) is 0 (deviations sum to 0), so this only drops a rounding-noise term
      d = x - mean.detach().reshape(bshape)
      var = (d * d).mean(axis=axes)
      if self.track_running_stats and Tensor.training:
        if n < 2: raise ValueError(f"BatchNorm({self.sz}): training needs more than one value per channel, input has shape {x.shape}")
        m = self.momentum
        self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
        self.running_var.assign((1 - m) * self.running_var + (m * n / (n - 1)) * var.detach())
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    y = (x - mean.reshape(bshape)) * (var + self.eps).rsqrt().reshape(bshape)
    if self.weight is not None: y = y * self.weight.reshape(bshape)
    if self.bias is not None: y = y + self.bias.reshape(bshape)
    return y

BatchNorm2d = BatchNorm


class LayerNorm:
  """Normalize over the last len(normalized_shape) axes (mean and biased variance), then weight * y + bias."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    _positive("LayerNorm: normalized_shape", *self.normalized_shape)
    self.axis = tuple(range(-len(self.normalized_shape), 0))
    self.eps, self.elementwise_affine = eps, elementwise_affine
    self.weight: Tensor | None = _filled(self.normalized_shape, 1.0) if elementwise_affine else None
    self.bias: Tensor | None = _filled(self.normalized_shape, 0.0) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    k = len(self.normalized_shape)
    if x.ndim < k or x.shape[x.ndim - k:] != self.normalized_shape:
      raise ShapeError(f"LayerNorm({self.normalized_shape}): input of shape {x.shape} must end in {self.normalized_shape}")
    d = x - x.mean(axis=self.axis, keepdim=True)
    y = d * ((d * d).mean(axis=self.axis, keepdim=True) + self.eps).rsqrt()
    if self.weight is not None: y = y * self.weight
    if self.bias is not None: y = y + self.bias
    return y


class Embedding:
  """Rows of weight (vocab_size, embed_size) picked by integer indices: (...,) -> (..., embed_size). Built as a
  one-hot select-and-sum (no gather op), so an index outside [0, vocab_size) gives a row of zeros. Init: glorot_uniform."""
  def __init__(self, vocab_size: int, embed_size: int):
    _positive("Embedding: vocab_size and embed_size", vocab_size, embed_size)
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    bound = math.sqrt(6 / (vocab_size + embed_size))
    self.weight = Tensor.uniform(vocab_size, embed_size, low=-bound, high=bound)

  def __call__(self, idx: Tensor) -> Tensor:
    if not dtypes.is_int(idx.dtype): raise TypeError(f"Embedding: indices must be an integer tensor, not {idx.dtype}")
    big = (*idx.shape, self.vocab_sz, self.embed_sz)
    # not kept as an attribute: it would show up in the state dict
    # compare in a type that holds every index exactly (narrow ints widen to int32 losslessly)
    dt = idx.dtype if idx.dtype.itemsize >= 4 else dtypes.int32
    vocab = Tensor.arange(self.vocab_sz, dtype=dt, device=self.weight.device).reshape(self.vocab_sz, 1).expand(big)
    hit = vocab == idx.cast(dt).reshape(*idx.shape, 1, 1).expand(big)
    # where, not a multiply by the one-hot: 0 * inf would be NaN
    return hit.where(self.weight.expand(big), 0.0).sum(axis=-2)
