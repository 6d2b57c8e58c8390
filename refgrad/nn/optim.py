"""Optimizers: SGD, Adam, AdamW (tinygrad's names and defaults, PyTorch's update rules).

step() gives each parameter its new value with `assign` (the same Tensor objects stay the model's parameters) and
realizes parameters, optimizer state and the given non-trainable tensors (e.g. BatchNorm's running stats) in one
schedule. Values that change between steps (the learning rate, Adam's beta powers) live in tensors, not in constants,
so every step runs the same kernels (no recompilation on compiled devices).

A parameter without a gradient at step() is an error (PyTorch skips it silently; here a forgotten backward() or a
parameter the loss does not use is reported): give the optimizer only the parameters the loss depends on.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from refgrad.dtype import DType, dtypes, least_upper_dtype
from refgrad.tensor import Tensor

__all__ = ["SGD", "Adam", "AdamW", "Optimizer"]


def _dedup(ts: Iterable[Tensor]) -> list[Tensor]: return list({id(t): t for t in ts}.values())

def _zeros_like(t: Tensor) -> Tensor:
  # from host memory: a fresh buffer node per state tensor (equal constant graphs would be one node)
  return Tensor(np.zeros(t.shape, t.dtype.np), device=t.device, dtype=t.dtype)


class Optimizer:
  """Holds the parameters (tensors that require gradients) and the buffers (the other tensors it was given, realized
  with each step). A parameter whose requires_grad is None (a fresh layer's) is switched to True, as in tinygrad."""
  def __init__(self, params: Iterable[Tensor], lr: float | Tensor):
    params = list(params)
    for i, t in enumerate(params):
      if not isinstance(t, Tensor): raise TypeError(f"{type(self).__name__}: params[{i}] is a {type(t).__name__}, not a Tensor")
      if t.requires_grad is None and dtypes.is_float(t.dtype): t.requires_grad_(True)
    self.params = _dedup(t for t in params if t.requires_grad)
    self.buffers = _dedup(t for t in params if not t.requires_grad)
    if not self.params: raise ValueError(f"{type(self).__name__}: none of the {len(params)} tensors given requires a gradient")
    devices = {t.device for t in self.params}
    if len(devices) > 1: raise ValueError(f"{type(self).__name__}: parameters on several devices {sorted(devices)}; use one optimizer per device")
    self.device: str = self.params[0].device
    # the dtype the step's scalars are kept in: wide enough for every parameter
    self.dtype: DType = least_upper_dtype(*(t.dtype for t in self.params))
    self.lr = lr

  def _scalar(self, v: float) -> Tensor:
    """A 0-d tensor in memory of its own: a value that can change without changing any kernel."""
    return Tensor(np.array(v, dtype=self.dtype.np), device=self.device, dtype=self.dtype).realize()

  @property
  def lr(self) -> Tensor:
    """The learning rate, a 0-d tensor. Setting a number (opt.lr = 0.01) changes the value without recompiling."""
    return self._lr
  @lr.setter
  def lr(self, v: float | Tensor) -> None:
    if isinstance(v, Tensor):
      if v.shape != (): raise ValueError(f"{type(self).__name__}: lr must be a number or a 0-d tensor, got shape {v.shape}")
      self._lr = v.to(self.device).cast(self.dtype)
    else: self._lr = self._scalar(float(v))

  def zero_grad(self) -> None:
    """Forget the gradients (backward() adds to an existing .grad)."""
    for t in self.params: t.grad = None

  def step(self) -> None:
    """Update every parameter from its .grad and realize parameters, state and buffers together."""
    Tensor.realize_all(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Assign the new values lazily; returns the tensors to realize (step() realizes them)."""
    for i, t in enumerate(self.params):
      if t.grad is None:
        raise RuntimeError(f"{type(self).__name__}.step(): parameter {i} (shape {t.shape}) has no gradient: call backward() on a loss "
                           "that uses it first, or leave it out of the optimizer")
      if t.grad.shape != t.shape: raise RuntimeError(f"{type(self).__name__}.step(): parameter {i} has shape {t.shape} but its grad {t.grad.shape}")
    return [*self._step(), *self.params, *self.buffers]

  def _step(self) -> list[Tensor]: raise NotImplementedError

  def _grad(self, t: Tensor) -> Tensor:
    assert t.grad is not None
    return t.grad.detach().cast(t.dtype)


class SGD(Optimizer):
  """PyTorch's SGD: g = grad + weight_decay * p; with momentum b = momentum * b + g (b starts at 0) and
  g = g + momentum * b (nesterov) or g = b; then p = p - lr * g."""
  def __init__(self, params: Iterable[Tensor], lr: float | Tensor = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False):
    super().__init__(params, lr)
    if momentum < 0 or weight_decay < 0: raise ValueError(f"SGD: momentum ({momentum}) and weight_decay ({weight_decay}) must not be negative")
    if nesterov and momentum == 0: raise ValueError("SGD: nesterov needs a momentum > 0")
    self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
    self.b = [_zeros_like(t) for t in self.params] if momentum else []

  def _step(self) -> list[Tensor]:
    for i, t in enumerate(self.params):
      g = self._grad(t)
      if self.wd: g = g + self.wd * t.detach()
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      t.assign(t.detach() - self.lr.cast(t.dtype) * g)
    return self.b


class AdamW(Optimizer):
  """Adam with decoupled weight decay. With bias corrections c1 = 1 - b1^t, c2 = 1 - b2^t (b^t kept as running
  products in tensors): m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; up = (m/c1) / (sqrt(v/c2) + eps) + weight_decay * p;
  p = p - lr * up (tinygrad's form of the decoupled decay; PyTorch's p*(1 - lr*wd) - lr*adam is the same in exact math)."""
  def __init__(self, params: Iterable[Tensor], lr: float | Tensor = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.01):
    super().__init__(params, lr)
    if not (0 <= b1 < 1 and 0 <= b2 < 1): raise ValueError(f"{type(self).__name__}: b1 ({b1}) and b2 ({b2}) must be in [0, 1)")
    if eps < 0 or weight_decay < 0: raise ValueError(f"{type(self).__name__}: eps ({eps}) and weight_decay ({weight_decay}) must not be negative")
    self.b1, self.b2, self.eps, self.wd = b1, b2, eps, weight_decay
    self.b1_t, self.b2_t = self._scalar(1.0), self._scalar(1.0)
    self.m = [_zeros_like(t) for t in self.params]
    self.v = [_zeros_like(t) for t in self.params]

  def _step(self) -> list[Tensor]:
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    for i, t in enumerate(self.params):
      g = self._grad(t)
      self.m[i].assign(self.b1 * self.m[i] + (1 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1 - self.b2) * (g * g))
      c1, c2 = (1 - self.b1_t).cast(t.dtype), (1 - self.b2_t).cast(t.dtype)
      up = (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + self.eps)
      if self.wd: up = up + self.wd * t.detach()
      t.assign(t.detach() - self.lr.cast(t.dtype) * up)
    return [self.b1_t, self.b2_t, *self.m, *self.v]


class Adam(AdamW):
  """AdamW without weight decay (tinygrad's Adam has none)."""
  def __init__(self, params: Iterable[Tensor], lr: float | Tensor = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    super().__init__(params, lr, b1, b2, eps, weight_decay=0.0)
