"""Tensor, the user-facing array, as a package of parts that never import this package at call time:

  core.py      the Tensor class: data, realization, primitives (ALU, cast, reduce), autograd entry
  create.py    CreationMixin: linspace, eye, *_like, triangular masks, the random number generator
  mathops.py   MathMixin: elementwise math, comparisons, reductions, scans
  movement.py  MovementMixin: reshape/permute/pad/shrink, indexing, gather/scatter, sort
  nnops.py     NNMixin: matmul, convolution, pooling, attention, interpolation, losses
  args.py      argument parsing the parts share (shapes, paddings, broadcasting, nested data)
  errors.py    ShapeError

A part that builds a new tensor gets the class from a tensor it has (`type(self)`, `cls`), so the parts sit below
core.py in the import graph and core.py composes them.
"""
from refgrad.tensor.core import Tensor, live_tensors
from refgrad.tensor.create import threefry2x32
from refgrad.tensor.errors import ShapeError

__all__ = ["ShapeError", "Tensor", "live_tensors", "threefry2x32"]
