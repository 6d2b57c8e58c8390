"""Tensor: the user-facing array. Operations build a lazy graph (refgrad/lazy.py); `realize()` schedules
it into kernels (refgrad/schedule.py) and runs them on the tensor's device."""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from refgrad import lazy
from refgrad.device import Buffer, Device
from refgrad.dtype import DType, dtypes, least_upper_dtype, sum_acc_dtype
from refgrad.gradient import compute_gradient, set_custom_rule
from refgrad.schedule import buffer_node, is_realized, realize, realized
from refgrad.tensor.args import _broadcast_shape, _check_int, _flatten, _infer_dtype, _nested_shape, _np_values, _pad_arg, _shape_arg, _to_dtype
from refgrad.tensor.create import CreationMixin
from refgrad.tensor.errors import ShapeError
from refgrad.tensor.mathops import MathMixin
from refgrad.tensor.movement import MovementMixin
from refgrad.tensor.nnops import NNMixin
from refgrad.uop.ops import Ops, UOp, alu_dtype
from refgrad.uop.spec import value_op_error

_all_tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()

def live_tensors() -> list[Tensor]:
  """Every Tensor object still alive (the JIT looks for the ones a captured call changed)."""
  return list(_all_tensors)


class Tensor(MathMixin, MovementMixin, CreationMixin, NNMixin):
  """An n-dimensional array on a device, with lazy evaluation and reverse-mode autograd. The core (data,
  realization, primitives, autograd entry) is here; the API built on it is in the mixins of refgrad/tensor/ (create, mathops, movement, nnops)."""
  __slots__ = ("__weakref__", "_device", "_from_op", "grad", "requires_grad", "uop")
  training: bool = False   # layers such as BatchNorm behave differently while training (see Tensor.train)

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None, requires_grad: bool | None = None):
    dtype = _to_dtype(dtype)
    device = Device.canonicalize(device) if device is not None else None
    if isinstance(data, np.generic): data = np.asarray(data)   # a numpy scalar is a 0-d array
    if isinstance(data, UOp): uop = data
    elif isinstance(data, Tensor): uop, device = data.uop, device or data.device
    elif isinstance(data, (bool, int, float)):
      _check_int(data, dtype or _infer_dtype(data))
      uop = UOp.const(dtype or _infer_dtype(data), data)
    else:
      arr = data if isinstance(data, np.ndarray) else None
      if arr is None:
        if not isinstance(data, (list, tuple)): raise TypeError(f"cannot make a tensor from {type(data).__name__}")
        shape = _nested_shape(data)
        flat = _flatten(data)
        dt = dtype or (least_upper_dtype(*(_infer_dtype(x) for x in flat)) if flat else dtypes.default_float)
        arr = _np_values(flat, dt).reshape(shape)
      dt = dtype or dtypes.from_np(arr.dtype)
      if arr.dtype != dt.np: arr = _np_values(arr.reshape(-1).tolist(), dt).reshape(arr.shape) if dt == dtypes.bfloat16 else arr.astype(dt.np)
      dev = device or Device.DEFAULT
      uop = lazy.reshape(lazy.new_buffer(dev, arr.size, dt, Buffer(dev, arr.size, dt).copyin(np.ascontiguousarray(arr))), arr.shape)
    if dtype is not None and uop.dtype != dtype: uop = UOp(Ops.CAST, dtype, (uop,))
    self.uop: UOp = uop
    self._device: str = uop.device or device or Device.DEFAULT
    self.grad: Tensor | None = None
    self.requires_grad: bool | None = None
    self._from_op = False   # computed from tensors that need gradients: realizing it keeps the graph for backward()
    _all_tensors.add(self)   # before requires_grad_: realizing a constant leaf looks for it among the live tensors
    if requires_grad is not None: self.requires_grad_(requires_grad)

  # ---- properties ------------------------------------------------------------------------------
  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str: return self._device
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return math.prod(self.shape)
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str: return f"<Tensor {self.shape} {self.dtype} on {self.device}{' grad' if self.requires_grad else ''}>"
  def __hash__(self) -> int: return id(self)
  def __bool__(self) -> bool: raise TypeError("a Tensor has no truth value; use .item() or .numpy()")

  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    if requires_grad and not dtypes.is_float(self.dtype): raise TypeError(f"only float tensors can require gradients, not {self.dtype}")
    # a leaf made of constants only would be indistinguishable from any equal constant: give it its own buffer
    if requires_grad and not any(u.op is Ops.BUFFER for u in self.uop.toposort):
      raw = self._buffer().numpy()   # equal constant graphs realize to one buffer: copy into a buffer of its own
      self.uop = lazy.reshape(lazy.new_buffer(self.device, raw.size, self.dtype, Buffer(self.device, raw.size, self.dtype).copyin(raw)), self.shape)
    self.requires_grad, self._from_op = requires_grad, False
    return self

  # ---- realization -------------------------------------------------------------------------------
  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor (and `others`) now; their graphs are replaced by buffers."""
    Tensor.realize_all(self, *others)
    return self

  @staticmethod
  def realize_all(*tensors: Tensor) -> None:
    by_device: dict[str, list[UOp]] = {}
    for t in tensors:
      if not is_realized(t.uop): by_device.setdefault(t.device, []).append(t.uop)
    live = list(_all_tensors)
    for dev, roots in by_device.items():
      # any live tensor whose node this schedule computes keeps the result instead of recomputing it later
      done = realize(list(dict.fromkeys(roots)), dev, {t.uop for t in live if t.device == dev})
      for t in live:  # computed nodes are replaced by their buffers (the graph behind them can go)
        if t.device == dev and t.uop in done and not t._from_op: t.uop = lazy.reshape(done[t.uop], t.shape)
    for t in live:
      if t.uop in realized and not t._from_op: t.uop = lazy.reshape(realized[t.uop], t.shape)

  def _buffer(self) -> Buffer:
    self.realize()
    return lazy.buffer_of[buffer_node(self.uop)]

  def numpy(self) -> np.ndarray:
    """The values as a numpy array of this shape (bfloat16 comes back as float32, which holds it exactly)."""
    arr = self._buffer().numpy()
    if self.dtype == dtypes.bfloat16: arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.reshape(self.shape).copy()
  def tolist(self) -> Any: return self.numpy().tolist()
  def item(self) -> Any:
    if self.numel() != 1: raise ValueError(f"item() needs a tensor of one element, this one has shape {self.shape}")
    return self.numpy().reshape(()).item()
  def data(self) -> memoryview: return memoryview(self._buffer().numpy())

  def to(self, device: str) -> Tensor:
    device = Device.canonicalize(device)
    if device == self.device: return self
    src = self if self.uop.device is not None else self.contiguous()
    return src._new(UOp(Ops.COPY, self.dtype, (src.uop,), device))
  def assign(self, x: Tensor | Any) -> Tensor:
    """Give this tensor (the same Python object, e.g. a parameter) new contents of the same shape, dtype and device."""
    if not isinstance(x, Tensor): x = Tensor.full(self.shape, x, self.dtype, self.device)
    if x.shape != self.shape: raise ShapeError(f"assign: shape {x.shape} does not match {self.shape}")
    if x.dtype != self.dtype: raise TypeError(f"assign: dtype {x.dtype} does not match {self.dtype}")
    if x.device != self.device: raise ValueError(f"assign: tensor on {x.device}, target on {self.device}")
    self.uop, self._from_op = x.uop, False
    return self
  def rebind(self, uop: UOp) -> Tensor:
    """Make this tensor (the same Python object) hold `uop` (of its shape, dtype and device) as a value with no gradient
    history: e.g. the buffer a computation wrote (TinyJit rebinds the tensors a replay updates)."""
    if uop.shape != self.shape or uop.dtype != self.dtype: raise ShapeError(f"rebind: {uop.shape} {uop.dtype} does not match {self.shape} {self.dtype}")
    self.uop, self._from_op = uop, False
    return self
  def contiguous(self) -> Tensor: return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def clone(self) -> Tensor:
    """The same values as a new tensor (gradients flow through it; requires_grad is kept). Tensors are never
    changed in place (`assign` and `t[...] = v` give t a new graph), so the copy may share memory until then."""
    ret = self.contiguous()
    ret.requires_grad = self.requires_grad
    return ret
  def detach(self) -> Tensor:
    """The same values, cut off from the gradient graph."""
    return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), self.device)
  # dtype shorthands
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)

  def _new(self, uop: UOp, *others: Tensor) -> Tensor:
    """A tensor on self's device computed from self (and others); it needs a gradient if any source does."""
    ret = Tensor(uop, self.device)
    if any(t.requires_grad for t in (self, *others)): ret.requires_grad = ret._from_op = True
    return ret

  def _custom_grad(self, value: Tensor, *others: Tensor, rule: Callable[..., tuple[Tensor | None, ...]]) -> Tensor:
    """`value` (computed from self and others, possibly through detach()) as a tensor whose gradient is given by
    rule(ret, g, self, *others) -> one gradient (or None) per input, instead of by value's own graph (see
    refgrad/gradient.py). value must depend on every input (a rule on a constant would apply to every equal constant)."""
    ins = (self, *others)
    if any(value.uop is t.uop for t in ins): return value
    dev = self.device
    def uop_rule(ret: UOp, g: UOp, *srcs: UOp) -> tuple[UOp | None, ...]:
      gs = rule(Tensor(ret, dev), Tensor(g, dev), *(Tensor(s, dev) for s in srcs))
      return tuple(None if x is None else x.cast(s.dtype)._expand_to(s.shape).uop for x, s in zip(gs, srcs))
    set_custom_rule(value.uop, tuple(t.uop for t in ins), uop_rule)
    return self._new(value.uop, *others)

  class train:
    """`with Tensor.train():` sets Tensor.training for the block (restored afterwards)."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self) -> None: self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc: object) -> None: Tensor.training = self.prev

  # ---- creation ----------------------------------------------------------------------------------
  @staticmethod
  def full(shape: int | Sequence[int], fill_value: Any, dtype: DType | str | None = None, device: str | None = None,
           requires_grad: bool | None = None) -> Tensor:
    shape = _shape_arg(shape)
    dt = _to_dtype(dtype) or _infer_dtype(fill_value)
    _check_int(fill_value, dt)
    c = UOp.const(dt, fill_value)
    return Tensor(lazy.expand(lazy.reshape(c, (1,) * len(shape)), shape), device, requires_grad=requires_grad)
  @staticmethod
  def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    return Tensor.full(_shape_arg(shape), 0, _to_dtype(dtype) or dtypes.default_float, device, requires_grad)
  @staticmethod
  def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    return Tensor.full(_shape_arg(shape), 1, _to_dtype(dtype) or dtypes.default_float, device, requires_grad)
  @staticmethod
  def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uninitialized memory (the PYTHON device reports reads of it)."""
    shape = _shape_arg(shape)
    dt, dev = _to_dtype(dtype) or dtypes.default_float, Device.canonicalize(device or Device.DEFAULT)
    return Tensor(lazy.reshape(lazy.new_buffer(dev, math.prod(shape), dt), shape), dev, requires_grad=requires_grad)
  @staticmethod
  def arange(start: int | float, stop: int | float | None = None, step: int | float = 1, dtype: DType | str | None = None,
             device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """start, start + step, ... below stop (above it for a negative step). Ints whose values do not fit int32
    give int64 (as PyTorch's int64 default would hold them); an explicit int dtype they do not fit raises OverflowError."""
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange: step must not be 0")
    n = max(0, math.ceil((stop - start) / step))
    dt = _to_dtype(dtype) or (dtypes.default_float if any(isinstance(x, float) for x in (start, stop, step)) else dtypes.default_int)
    if dtypes.is_int(dt) and n:
      last = start + (n - 1) * step
      fits = all(dtypes.min(dt) <= v <= dtypes.max(dt) for v in (start, last, step))
      if not fits and dtype is None and all(dtypes.min(dtypes.int64) <= v <= dtypes.max(dtypes.int64) for v in (start, last, step)): dt = dtypes.int64
      elif not fits: raise OverflowError(f"arange({start}, {stop}, {step}): values up to {last} do not fit {dt}")
    idx = Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), device)
    ret = (idx.cast(dt) * Tensor.full((), step, dt, device) + Tensor.full((), start, dt, device)) if n else Tensor.zeros(0, dtype=dt, device=device)
    return ret if requires_grad is None else ret.requires_grad_(requires_grad)

  # ---- primitives: everything else is built from these -------------------------------------------
  def _broadcasted(self, y: Tensor | Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    x = self
    if not isinstance(y, Tensor):
      if isinstance(y, (list, tuple, np.ndarray)): y = Tensor(y, self.device)
      else:
        # a Python scalar takes the tensor's dtype unless it needs a wider kind (float into int, int into bool)
        dt = self.dtype if not (isinstance(y, float) and not dtypes.is_float(self.dtype)) and not (
          isinstance(y, int) and not isinstance(y, bool) and self.dtype == dtypes.bool) else _infer_dtype(y)
        y = Tensor.full((), y, dt, self.device)
    if x.device != y.device: raise ValueError(f"tensors on different devices: {x.device} and {y.device} (use .to())")
    if reverse: x, y = y, x
    out = _broadcast_shape(x.shape, y.shape)
    dt = least_upper_dtype(x.dtype, y.dtype)
    return x.cast(dt)._expand_to(out), y.cast(dt)._expand_to(out)

  def _expand_to(self, shape: tuple[int, ...]) -> Tensor:
    if self.shape == shape: return self
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape)
    return x.expand(shape)

  def _alu(self, op: Ops, *srcs: Tensor) -> Tensor:
    dts = [self.dtype, *(s.dtype for s in srcs)]
    dt = alu_dtype(op, *dts)
    if (msg := value_op_error(op, dt, dts)) is not None: raise TypeError(f"{op.name} on {', '.join(map(repr, dts))}: {msg}")
    return self._new(UOp(op, dt, (self.uop, *(s.uop for s in srcs))), *srcs)

  def cast(self, dtype: DType | str) -> Tensor:
    dt = _to_dtype(dtype)
    assert dt is not None
    return self if dt == self.dtype else self._new(UOp(Ops.CAST, dt, (self.uop,)))
  def bitcast(self, dtype: DType | str) -> Tensor:
    dt = _to_dtype(dtype)
    assert dt is not None
    if dt.itemsize != self.dtype.itemsize: raise ValueError(f"bitcast from {self.dtype} to {dt}: itemsizes differ ({self.dtype.itemsize} vs {dt.itemsize})")
    if self.requires_grad: raise RuntimeError("bitcast is not differentiable")
    return self if dt == self.dtype else self._new(UOp(Ops.BITCAST, dt, (self.uop,)))

  def _resolve_shape(self, shape: tuple[Any, ...]) -> tuple[int, ...]:
    shape = _shape_arg(shape, allow_neg=True)
    if (n := sum(1 for s in shape if s == -1)) > 1: raise ShapeError(f"reshape: only one -1 allowed in {shape}")
    if n:
      known = math.prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known: raise ShapeError(f"reshape: cannot reshape {self.shape} to {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
    if math.prod(shape) != self.numel(): raise ShapeError(f"reshape: cannot reshape {self.shape} ({self.numel()} elements) to {shape}")
    return shape
  def reshape(self, *shape: Any) -> Tensor:
    """A new shape with the same elements; -1 is inferred, None keeps the size of that axis (tinygrad)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if any(s is None for s in shape):
      if any(s is None and i >= self.ndim for i, s in enumerate(shape)): raise ValueError(f"reshape: None at an axis that {self.shape} does not have in {shape}")
      shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
    return self._new(lazy.reshape(self.uop, self._resolve_shape(shape)))
  def view(self, *shape: Any) -> Tensor: return self.reshape(*shape)
  def permute(self, *order: Any) -> Tensor:
    order = tuple(self._axis(a) for a in _shape_arg(order, allow_neg=True))
    if sorted(order) != list(range(self.ndim)): raise ShapeError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
    return self._new(lazy.permute(self.uop, order))
  def expand(self, *shape: Any) -> Tensor:
    shape = _shape_arg(shape, allow_neg=True)
    if len(shape) < self.ndim: raise ShapeError(f"expand: cannot expand {self.shape} to {shape}")
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if len(shape) > self.ndim else self
    shape = tuple(n if s == -1 else s for s, n in zip(shape, x.shape))
    if any(s != n and n != 1 for s, n in zip(shape, x.shape)):
      raise ShapeError(f"expand: cannot expand {self.shape} to {shape} (only size-1 axes expand)")
    return x._new(lazy.expand(x.uop, shape))
  def pad(self, padding: Sequence[Any], mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad axes by (before, after): one pair (or None) per axis, or PyTorch's flat tuple (left, right, top, bottom, ...:
    the last axis first, as many axes as it names). Negative amounts crop. mode: "constant" (value), "reflect"
    (mirror without the edge), "replicate" (repeat the edge), "circular" (wrap around)."""
    if not isinstance(mode, str) or mode not in ("constant", "reflect", "replicate", "circular"):
      raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', not {mode!r}")
    if mode != "constant" and value != 0: raise ValueError(f"pad: value={value} is only for mode='constant'")
    arg = _pad_arg(padding, self.shape)
    if mode != "constant":   # negative amounts crop the result (PyTorch: output index i reads input index i - before)
      # (circular crops first and wraps what is left, as PyTorch does)
      crop = lambda t: t.shrink(tuple((-min(b, 0), n + min(e, 0)) for (b, e), n in zip(arg, t.shape)))
      pos = tuple((max(b, 0), max(e, 0)) for b, e in arg)
      if all(b >= 0 and e >= 0 for b, e in arg): return self._pad_mode(pos, mode)
      return crop(self)._pad_mode(pos, mode) if mode == "circular" else crop(self._pad_mode(pos, mode))
    if any(b < 0 or e < 0 for b, e in arg):  # negative padding crops
      self = self.shrink(tuple((-min(b, 0), n + min(e, 0)) for (b, e), n in zip(arg, self.shape)))
      arg = tuple((max(b, 0), max(e, 0)) for b, e in arg)
    ret = self._new(lazy.pad(self.uop, arg))
    if value == 0 and not (dtypes.is_float(self.dtype) and math.copysign(1.0, value) < 0): return ret   # -0.0 pads floats with -0.0 (PyTorch)
    mask = Tensor(lazy.pad(Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).uop, arg), self.device)
    return mask.where(ret, value)
  def _pad_mode(self, arg: tuple[tuple[int, int], ...], mode: str) -> Tensor:
    """reflect / replicate / circular padding, one axis at a time, from slices of self joined with cat."""
    x = self
    for ax, (b, e) in enumerate(arg):
      n = x.shape[ax]
      if not b and not e: continue
      lim = n - 1 if mode == "reflect" else n
      if mode != "replicate" and (b > lim or e > lim):
        raise ValueError(f"pad: {mode} padding {(b, e)} of axis {ax} must be at most {lim} (the axis has size {n})")
      if n == 0: raise ValueError(f"pad: {mode} padding of the empty axis {ax}")
      def sl(lo: int, hi: int, x: Tensor = x, ax: int = ax) -> Tensor: return x.shrink(tuple((lo, hi) if i == ax else None for i in range(x.ndim)))
      if mode == "reflect": parts = [sl(1, b + 1).flip(ax), x, sl(n - 1 - e, n - 1).flip(ax)]
      elif mode == "circular": parts = [sl(n - b, n), x, sl(0, e)]
      else: parts = [sl(0, 1).expand(tuple(b if i == ax else s for i, s in enumerate(x.shape))), x,
                     sl(n - 1, n).expand(tuple(e if i == ax else s for i, s in enumerate(x.shape)))]
      x = parts[0].cat(*parts[1:], dim=ax)
    return x
  def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
    if len(bounds) != self.ndim: raise ValueError(f"shrink: need one (start, end) per axis of {self.shape}, got {bounds}")
    arg = tuple((0, n) if b is None else (int(b[0]), int(b[1])) for b, n in zip(bounds, self.shape))
    return self._new(lazy.shrink(self.uop, arg))
  def flip(self, axis: int | Sequence[int], *args: int) -> Tensor:
    """Reverse the given axes (`flip(0, 1)`, `flip((0, 1))`, `flip(axis=0)`; each at most once)."""
    axis = (*((axis,) if isinstance(axis, int) else tuple(axis)), *args)
    given = [self._axis(a) for a in axis]
    if len(set(given)) != len(given): raise ValueError(f"flip: axis {axis} names an axis twice (shape {self.shape})")
    axes = set(given)
    return self._new(lazy.flip(self.uop, tuple(i in axes for i in range(self.ndim))))

  def _axis(self, a: int, ndim: int | None = None) -> int:
    n = self.ndim if ndim is None else ndim
    if not isinstance(a, int) or not -max(n, 1) <= a < max(n, 1): raise IndexError(f"axis {a} is out of range for a tensor of {n} dimensions")
    return a + n if a < 0 else a

  def _reduce(self, op: Ops, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    axes = tuple(range(self.ndim)) if axis is None else tuple(self._axis(a) for a in ((axis,) if isinstance(axis, int) else axis))
    if self.numel() == 0 and any(self.shape[a] == 0 for a in axes):
      # an empty reduction is its identity: the empty axes padded to one element of it (which keeps self in the graph)
      ident = 0 if op is Ops.ADD else dtypes.min(self.dtype)
      x = self.pad(tuple((0, 1) if i in axes and n == 0 else (0, 0) for i, n in enumerate(self.shape)), value=ident)
      return x._reduce(op, axis, keepdim)
    ret = self._new(lazy.reduce(self.uop, op, axes)) if self.ndim else self
    return ret if keepdim else ret.reshape(tuple(n for i, n in enumerate(self.shape) if i not in axes))

  # ---- basic arithmetic (the rest of the API lives in the methods below and is built on these) ----------
  def add(self, y: Tensor | Any, reverse: bool = False) -> Tensor: return _binop(self, y, Ops.ADD, reverse)
  def mul(self, y: Tensor | Any, reverse: bool = False) -> Tensor: return _binop(self, y, Ops.MUL, reverse)
  def neg(self) -> Tensor: return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.NEG)
  def sub(self, y: Tensor | Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a + (-b)
  def where(self, x: Tensor | Any, y: Tensor | Any) -> Tensor:
    cond = self if self.dtype == dtypes.bool else self.cast(dtypes.bool)
    if isinstance(x, Tensor): x, y = x._broadcasted(y)
    elif isinstance(y, Tensor): y, x = y._broadcasted(x)
    else: x, y = Tensor.full((), x, device=self.device)._broadcasted(y)
    shape = _broadcast_shape(cond.shape, x.shape)
    return cond._expand_to(shape)._alu(Ops.WHERE, x._expand_to(shape), y._expand_to(shape))
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor.full(self.shape, True, dtypes.bool, self.device))
  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, acc_dtype: DType | None = None,
          dtype: DType | str | None = None) -> Tensor:
    """Sum over axis (None: all). `dtype`: the input is cast to it first and the result has it (PyTorch, tinygrad).
    Small ints accumulate in int32/uint32; float16/bfloat16 accumulate in float32 and are rounded once at the end."""
    x = self.cast(dt) if (dt := _to_dtype(dtype)) is not None else self
    if acc_dtype is None and x.dtype in (dtypes.float16, dtypes.bfloat16):
      return x.cast(dtypes.float32)._reduce(Ops.ADD, axis, keepdim).cast(x.dtype)
    return x.cast(acc_dtype or sum_acc_dtype(x.dtype))._reduce(Ops.ADD, axis, keepdim)
  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Largest value over axis (None: all; NaN if any is NaN). An empty reduced axis raises ValueError (no identity: PyTorch raises too)."""
    return self._nonempty("max", axis)._reduce(Ops.MAX, axis, keepdim)
  def _nonempty(self, name: str, axis: int | Sequence[int] | None) -> Tensor:
    axes = range(self.ndim) if axis is None else [self._axis(a) for a in ((axis,) if isinstance(axis, int) else axis)]
    if self.ndim and any(self.shape[a] == 0 for a in axes):
      raise ValueError(f"{name}: {'axis ' + str(axis) if axis is not None else 'the tensor'} of shape {self.shape} is empty (a {name} has no identity)")
    return self

  def __neg__(self) -> Tensor: return self.neg()
  def __add__(self, y: Any) -> Tensor: return self.add(y)
  def __radd__(self, y: Any) -> Tensor: return self.add(y, True)
  def __sub__(self, y: Any) -> Tensor: return self.sub(y)
  def __rsub__(self, y: Any) -> Tensor: return self.sub(y, True)
  def __mul__(self, y: Any) -> Tensor: return self.mul(y)
  def __rmul__(self, y: Any) -> Tensor: return self.mul(y, True)

  # ---- autograd ----------------------------------------------------------------------------------
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = False) -> list[Tensor]:
    """d(self)/d(t) for each target, weighted by `gradient` (implicitly 1 for a one-element self), without touching
    .grad (tinygrad's functional autograd). A target self does not depend on raises, unless materialize_grads
    (then its gradient is zeros)."""
    if gradient is None:
      if self.numel() != 1: raise RuntimeError(f"gradient() of a tensor of shape {self.shape} needs a gradient argument (only one-element tensors get an implicit one)")
      gradient = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
    if gradient.shape != self.shape: raise ShapeError(f"gradient: gradient shape {gradient.shape} does not match tensor shape {self.shape}")
    for k, t in enumerate(targets):
      if not isinstance(t, Tensor): raise TypeError(f"gradient: target {k} is a {type(t).__name__}, not a Tensor")
    grads = compute_gradient(self.uop, gradient.uop, {t.uop for t in targets})
    out = []
    for k, t in enumerate(targets):
      if (g := grads.get(t.uop)) is None:
        if not materialize_grads: raise RuntimeError(f"gradient: target {k} (shape {t.shape}) is not used to compute this tensor")
        out.append(t.zeros_like())
      else: out.append(Tensor(g, t.device))
    return out


  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d(self)/d(t) into t.grad for every tensor t with requires_grad that self depends on."""
    if gradient is None:
      if self.numel() != 1: raise RuntimeError(f"backward() on a tensor of shape {self.shape} needs a gradient argument (only scalars get an implicit one)")
      gradient = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
    if gradient.shape != self.shape: raise ShapeError(f"backward: gradient shape {gradient.shape} does not match tensor shape {self.shape}")
    # compute_gradient leaves out the targets self does not depend on
    targets = [t for t in list(_all_tensors) if t.requires_grad]
    grads = compute_gradient(self.uop, gradient.uop, {t.uop for t in targets})
    for t in targets:
      if (g := grads.get(t.uop)) is None: continue
      gt = Tensor(g, t.device)
      t.grad = gt if t.grad is None else (t.grad + gt)
    return self


def _binop(x: Tensor, y: Any, op: Ops, reverse: bool) -> Tensor:
  a, b = x._broadcasted(y, reverse)
  return a._alu(op, b)


