"""Issue 13 class 4: thousands of unrealized chained ops schedule, lower, differentiate and rewrite without RecursionError
(every walk over the graph is iterative: toposort, graph_rewrite, the kernel lowering, shapes and integer bounds)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from refgrad import Tensor, dtypes
from refgrad.uop.ops import UOp
from refgrad.uop.symbolic import simplify

DEPTH = 5000
assert DEPTH > 4 * sys.getrecursionlimit()   # a walk recursing once per level would fail


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_chained_adds_realize_and_backpropagate(device):
  x = Tensor([1.0, 2.0], requires_grad=True, device=device)
  y = x
  for _ in range(DEPTH): y = y + 1.0
  assert y.tolist() == [1.0 + DEPTH, 2.0 + DEPTH]
  z = x
  for _ in range(DEPTH): z = z * 1.0
  (z + y).sum().backward()
  assert x.grad.tolist() == [2.0, 2.0]

def test_chained_integer_ops_keep_bounds_iterative():
  # integer nodes carry bounds (vmin/vmax) defined from their sources': computed on a deep chain without recursion
  y = Tensor([1, 2, 3], dtype=dtypes.int32)
  for i in range(DEPTH): y = y + 1 if i % 2 else y * 1
  assert y.tolist() == [1 + DEPTH // 2, 2 + DEPTH // 2, 3 + DEPTH // 2]
  u = UOp.variable("n", 0, 10)
  for _ in range(DEPTH): u = u + 1
  assert (u.vmin, u.vmax) == (DEPTH, DEPTH + 10) and simplify(u).vmax == DEPTH + 10

def test_chained_movement_ops():
  y = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4))
  for i in range(2000): y = y.T.reshape(4, 4) + 1 if i % 2 else y.flip(0) * 1
  want = np.arange(16, dtype=np.float32).reshape(4, 4)
  for i in range(2000): want = want.T + 1 if i % 2 else want[::-1]
  assert y.numpy().tolist() == want.tolist()
