"""Exception types of the Tensor API. tinygrad raises RuntimeError where shapes do not fit (reshape, expand, broadcast,
matmul, cat, stack, gather, scatter); refgrad raised ValueError there before, so ShapeError is both: code written for
tinygrad (except RuntimeError) and older refgrad code (except ValueError) both catch it."""
from __future__ import annotations


class ShapeError(RuntimeError, ValueError):
  """Shapes that do not fit the op (the message names the op and both shapes)."""
