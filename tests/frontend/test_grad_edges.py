"""requires_grad in every constructor, requires_grad switched on after the graph was built, and gradients through
ops whose value graph is not their derivative (custom rules: pow, sigmoid, tanh, softplus, clip, rounding,
exact selects). Values at the edges are compared with PyTorch in test_golden.py; these check the contract."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, dtypes

CTORS = {
  "scalar": lambda: Tensor(2.0, requires_grad=True),
  "list": lambda: Tensor([1.0, -2.0], requires_grad=True),
  "numpy": lambda: Tensor(np.array([[1.0, 2.0]], dtype=np.float32), requires_grad=True),
  "full": lambda: Tensor.full((2, 2), 3.0, requires_grad=True),
  "zeros": lambda: Tensor.zeros(2, 2, requires_grad=True),
  "ones": lambda: Tensor.ones(2, 2, requires_grad=True),
  "arange": lambda: Tensor.arange(4, dtype=dtypes.float32, requires_grad=True),
  "linspace": lambda: Tensor.linspace(0, 1, 5, requires_grad=True),
  "eye": lambda: Tensor.eye(3, requires_grad=True),
  "full_like": lambda: Tensor.ones(3).full_like(2.5, requires_grad=True),
  "zeros_like": lambda: Tensor.ones(3).zeros_like(requires_grad=True),
  "ones_like": lambda: Tensor.ones(3).ones_like(requires_grad=True),
  "rand": lambda: Tensor.rand(3, requires_grad=True),
  "randn": lambda: Tensor.randn(3, requires_grad=True),
  "uniform": lambda: Tensor.uniform(3, requires_grad=True),
  "normal": lambda: Tensor.normal(3, requires_grad=True),
  "scaled_uniform": lambda: Tensor.scaled_uniform(3, 2, requires_grad=True),
  "glorot_uniform": lambda: Tensor.glorot_uniform(3, 2, requires_grad=True),
  "kaiming_uniform": lambda: Tensor.kaiming_uniform(3, 2, requires_grad=True),
  "kaiming_normal": lambda: Tensor.kaiming_normal(3, 2, requires_grad=True),
  "rand_like": lambda: Tensor.ones(3).rand_like(requires_grad=True),
  "randn_like": lambda: Tensor.ones(3).randn_like(requires_grad=True),
}


@pytest.mark.parametrize("name", list(CTORS))
def test_constructor_requires_grad(name: str):
  Tensor.manual_seed(1)
  t = CTORS[name]()
  assert t.requires_grad is True
  (t * t).sum().backward()
  assert t.grad is not None and t.grad.shape == t.shape
  np.testing.assert_array_equal(t.grad.numpy(), 2 * t.numpy())

def test_constructor_requires_grad_int_raises():
  with pytest.raises(TypeError, match="float"): Tensor([1, 2], requires_grad=True)


# requires_grad switched on after the graph was built: the gradient is the same as when it was on from the start
LATE = {
  "gather": lambda x: x.gather(1, Tensor([[2, 0], [1, 1]])),
  "index_tensor": lambda x: x[Tensor([1, 0, 1])],
  "index_slice": lambda x: x[:, ::2],
  "floor": lambda x: x.floor() + x,
  "round": lambda x: x.round() * x,
  "setitem_read": lambda x: x[Tensor([0]), Tensor([2])] * 3,
  "pow": lambda x: x ** 0.3 + 0.7 ** x,
}

@pytest.mark.parametrize("name", list(LATE))
def test_requires_grad_after_building(name: str):
  vals = np.array([[0.5, 1.5, 2.5], [1.0, 3.0, 0.25]], dtype=np.float32)
  early = Tensor(vals, requires_grad=True)
  LATE[name](early).sum().backward()
  late = Tensor(vals)
  out = LATE[name](late)
  late.requires_grad_(True)
  out.sum().backward()
  assert late.grad is not None
  np.testing.assert_array_equal(late.grad.numpy(), early.grad.numpy())
  assert np.any(early.grad.numpy() != 0)


def test_gather_gradient_values():
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
  x.gather(1, Tensor([[2, 2], [0, 1]])).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 2], [1, 1, 0]])

def test_rounding_gradient_is_zero():
  x = Tensor([0.5, 1.25, -2.5], requires_grad=True)
  (x.floor() + x.ceil() + x.round() + x.trunc()).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0])

def test_pow_zero_exponent_gradient_zero():
  x = Tensor([0.0, 2.0, float("inf")], requires_grad=True)
  y = x ** 0
  np.testing.assert_array_equal(y.numpy(), [1, 1, 1])
  y.sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0])

@pytest.mark.parametrize("op", ["sigmoid", "tanh", "quick_gelu", "softplus", "logsigmoid", "silu", "gelu", "mish"])
def test_activation_gradients_finite_far_out(op: str):
  x = Tensor([-500.0, -300.0, -100.0, 100.0, 300.0, 500.0], requires_grad=True)
  getattr(x, op)().sum().backward()
  g = x.grad.numpy()
  assert np.all(np.isfinite(g)), g
  lo, hi = {"sigmoid": (0, 0), "tanh": (0, 0), "logsigmoid": (1, 0)}.get(op, (0, 1))   # the limits of the derivative
  assert np.all(np.abs(g[:3] - lo) < 1e-6) and np.all(np.abs(g[3:] - hi) < 1e-6), g

def test_clip_gradient_at_bounds():
  x = Tensor([-1.0, 1.0, 0.0, -1.5, 1.5], requires_grad=True)
  x.clip(-1, 1).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 1, 0, 0])
