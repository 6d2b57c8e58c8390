"""Argument parsing shared by the Tensor parts: dtypes, nested Python data, shapes, paddings, broadcasting."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.tensor.errors import ShapeError
from refgrad.uop.semantics import from_python


def _to_dtype(d: DType | str | None) -> DType | None:
  return dtypes.from_name(d) if isinstance(d, str) else d

def _infer_dtype(x: Any) -> DType:
  if isinstance(x, bool): return dtypes.bool
  if isinstance(x, int): return dtypes.default_int
  if isinstance(x, float): return dtypes.default_float
  raise TypeError(f"cannot make a tensor from {type(x).__name__}")

def _nested_shape(data: Any) -> tuple[int, ...]:
  if not isinstance(data, (list, tuple)): return ()
  if not data: return (0,)
  shapes = {_nested_shape(d) for d in data}
  if len(shapes) != 1: raise ValueError(f"ragged nested list: rows have shapes {sorted(shapes)}")
  return (len(data), *shapes.pop())

def _flatten(data: Any) -> list[Any]:
  return [y for x in data for y in _flatten(x)] if isinstance(data, (list, tuple)) else [data]

def _check_int(x: Any, dt: DType) -> None:
  """A Python int must fit an int dtype (numpy 2's rule: OverflowError, not wrap-around)."""
  if isinstance(x, int) and not isinstance(x, bool) and dtypes.is_int(dt) and not dtypes.min(dt) <= x <= dtypes.max(dt):
    raise OverflowError(f"Python integer {x} out of bounds for {dt} [{dtypes.min(dt)}, {dtypes.max(dt)}]")

def _np_values(flat: list[Any], dt: DType) -> np.ndarray:
  """Python values as storage of dt, each converted exactly as a constant of dt would be."""
  if dt == dtypes.bfloat16:
    return from_python(flat, dt)
  if dtypes.is_int(dt):
    for x in flat: _check_int(x, dt)
    return np.array([dtypes.as_const(x, dt) for x in flat], dtype=dt.np)
  return np.array(flat, dtype=dt.np)

def _shape_arg(shape: Any, allow_neg: bool = False) -> tuple[int, ...]:
  if isinstance(shape, int): shape = (shape,)
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
  for s in shape:
    if not isinstance(s, int) or isinstance(s, bool) or s < (-1 if allow_neg else 0): raise ValueError(f"invalid shape {tuple(shape)}")
  return tuple(shape)

def _pad_arg(padding: Sequence[Any], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
  """(before, after) per axis from pairs/None per axis or a flat PyTorch tuple (last axis first)."""
  p = tuple(padding)
  if all(isinstance(v, int) and not isinstance(v, bool) for v in p):
    if len(p) % 2 or len(p) // 2 > len(shape): raise ValueError(f"pad: a flat padding needs an even number of ints, at most {2 * len(shape)}, got {p}")
    k = len(p) // 2
    return ((0, 0),) * (len(shape) - k) + tuple((p[2 * i], p[2 * i + 1]) for i in reversed(range(k)))
  if len(p) != len(shape): raise ValueError(f"pad: need one (before, after) per axis of {shape}, got {padding}")
  out = []
  for v in p:
    if v is None: out.append((0, 0))
    elif isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v): out.append((v[0], v[1]))
    else: raise ValueError(f"pad: invalid padding {padding} (each axis takes None or (before, after) ints)")
  return tuple(out)

def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
  n = max(len(a), len(b))
  a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
  out = []
  for i, (x, y) in enumerate(zip(a, b)):
    if x != y and 1 not in (x, y): raise ShapeError(f"cannot broadcast shapes {a} and {b}: axis {i} has sizes {x} and {y}")
    out.append(y if x == 1 else x)
  return tuple(out)
