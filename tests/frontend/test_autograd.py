"""Autograd: gradients of Tensor ops against central differences in float64, and the backward() contract.

Numerical check: for f(*inputs) -> out, the loss is sum(out * w) with fixed random weights w (so every output
element counts, with a different weight). Its derivative along a direction (each element of a small input alone;
a few random directions over the larger inputs, to keep conv/pool tests fast) is compared with the analytic
gradient's projection; all perturbed losses of a test are realized in one schedule. Inputs are tiny and kept away
from kinks (ties, 0 for relu/abs).
Tolerance: |analytic - numeric| <= ATOL + RTOL * |numeric| (central differences in float64 with H = 1e-6 are
good to ~1e-9 here: truncation ~H**2, roundoff ~1e-16 * |loss| / H).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from refgrad import Tensor, dtypes
from refgrad.gradient import compute_gradient
from refgrad.lazy import expand, new_buffer, reshape
from refgrad.uop.ops import Ops, UOp

F64 = dtypes.float64
H, ATOL, RTOL = 1e-6, 1e-6, 1e-6
SMALL, NDIR = 8, 4


def _t(a: np.ndarray, requires_grad: bool | None = None) -> Tensor: return Tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)

def _loss(out: Tensor, w: np.ndarray) -> Tensor: return (out * _t(w)).sum()

def _directions(arrays: list[np.ndarray], seed: int) -> list[list[np.ndarray]]:
  """Perturbation directions: each element of a small input alone; for inputs of more than SMALL elements, NDIR random
  directions over all of them at once (a wrong gradient changes a random projection with probability 1)."""
  out: list[list[np.ndarray]] = []
  big = [a.size > SMALL for a in arrays]
  for i, a in enumerate(arrays):
    if big[i]: continue
    for j in np.ndindex(a.shape):
      d = [np.zeros_like(x) for x in arrays]
      d[i][j] = 1.0
      out.append(d)
  rng = np.random.default_rng(seed + 2)
  if any(big): out += [[rng.standard_normal(x.shape) if b else np.zeros_like(x) for x, b in zip(arrays, big)] for _ in range(NDIR)]
  return out

def numeric_derivatives(f: Callable[..., Tensor], arrays: list[np.ndarray], w: np.ndarray, dirs: list[list[np.ndarray]]) -> np.ndarray:
  """Central differences of sum(f(*arrays) * w) along each direction; all 2*len(dirs) losses are realized in one schedule."""
  losses = [_loss(f(*[_t(a + sign * H * da) for a, da in zip(arrays, d)]), w) for d in dirs for sign in (1, -1)]
  Tensor.realize_all(*losses)
  vals = np.array([x.item() for x in losses]).reshape(len(dirs), 2)
  return (vals[:, 0] - vals[:, 1]) / (2 * H)

def check_grad(f: Callable[..., Tensor], *arrays: np.ndarray, seed: int = 0) -> list[np.ndarray]:
  """Backward of sum(f(*arrays) * w) against central differences; returns the analytic gradients."""
  arrays_ = [np.asarray(a, dtype=np.float64) for a in arrays]
  xs = [_t(a, requires_grad=True) for a in arrays_]
  out = f(*xs)
  w = np.random.default_rng(seed + 1).uniform(0.5, 1.5, out.shape)
  _loss(out, w).backward()
  got = []
  for x, a in zip(xs, arrays_):
    assert x.grad is not None, "input got no gradient"
    assert x.grad.shape == a.shape and x.grad.dtype == F64
    got.append(x.grad.numpy())
  dirs = _directions(arrays_, seed)
  analytic = np.array([sum(float((g * da).sum()) for g, da in zip(got, d)) for d in dirs])
  np.testing.assert_allclose(analytic, numeric_derivatives(f, arrays_, w, dirs), atol=ATOL, rtol=RTOL)
  return got

def rand(*shape: int, lo: float = -2.0, hi: float = 2.0, seed: int = 0, gap: float = 0.0) -> np.ndarray:
  """Uniform values; with gap > 0, distinct values at least `gap` apart and away from 0 (no kinks, no ties)."""
  rng = np.random.default_rng(seed)
  n = math.prod(shape)
  if gap <= 0: return rng.uniform(lo, hi, shape)
  vals = lo + gap / 2 + gap * rng.permutation(int((hi - lo) / gap))[:n] + rng.uniform(0, gap / 4, n)
  vals = np.where(np.abs(vals) < gap / 2, vals + gap, vals)
  return vals.reshape(shape)


# ---- core Tensor ops (refgrad/tensor/core.py) ------------------------------------------------------------

CORE_CASES: dict[str, tuple[Callable[..., Tensor], list[tuple[int, ...]]]] = {
  "add": (lambda x, y: x + y, [(2, 3), (2, 3)]),
  "add_broadcast": (lambda x, y: x + y, [(2, 3), (3,)]),
  "add_scalar": (lambda x: 3.5 + x, [(2, 2)]),
  "mul": (lambda x, y: x * y, [(2, 3), (2, 3)]),
  "mul_broadcast": (lambda x, y: x * y, [(2, 1, 3), (4, 1)]),
  "sub": (lambda x, y: x - y, [(3,), (2, 3)]),
  "rsub": (lambda x: 1.5 - x, [(3,)]),
  "neg": (lambda x: -x, [(2, 2)]),
  "square_used_twice": (lambda x: x * x + x, [(2, 3)]),
  "where": (lambda x, y: Tensor(np.array([[True, False, True]])).where(x, y), [(2, 3), (1, 3)]),
  "where_scalar": (lambda x: Tensor(np.array([True, False, True, False])).where(x, 2.0), [(4,)]),
  "sum_all": (lambda x: x.sum(), [(2, 3)]),
  "sum_axis": (lambda x: x.sum(axis=1), [(2, 3, 2)]),
  "sum_axes_keepdim": (lambda x: x.sum(axis=(0, 2), keepdim=True), [(2, 3, 2)]),
  "sum_neg_axis": (lambda x: x.sum(axis=-1), [(3, 2)]),
  "max_all": (lambda x: x.max(), [(2, 3)]),
  "max_axis": (lambda x: x.max(axis=0), [(3, 2)]),
  "max_keepdim": (lambda x: x.max(axis=1, keepdim=True) * x, [(2, 3)]),
  "reshape": (lambda x: x.reshape(3, 2) * _t(np.arange(6.0).reshape(3, 2)), [(2, 3)]),
  "reshape_flat": (lambda x: x.reshape(-1) * _t(np.arange(6.0)), [(2, 3)]),
  "reshape_twice": (lambda x: x.reshape(6).reshape(1, 6, 1) * x.reshape(1, 6, 1), [(2, 3)]),
  "permute": (lambda x: x.permute(2, 0, 1), [(2, 3, 2)]),
  "permute_chain": (lambda x: x.permute(1, 2, 0).permute(2, 0, 1) * x, [(2, 1, 3)]),
  "expand": (lambda x: x.expand(2, 3, 2), [(3, 1)]),
  "expand_new_axes": (lambda x: x.expand(4, 2, 3), [(2, 3)]),
  "pad": (lambda x: x.pad(((1, 2), (0, 1))), [(2, 2)]),
  "pad_value": (lambda x: x.pad(((1, 0), (2, 1)), value=-1.5), [(2, 2)]),
  "pad_negative": (lambda x: x.pad(((-1, 1), (1, -1))), [(3, 3)]),
  "shrink": (lambda x: x.shrink(((1, 3), (0, 2))), [(3, 3)]),
  "shrink_none": (lambda x: x.shrink((None, (1, 2))), [(2, 3)]),
  "flip": (lambda x: x.flip(0), [(3, 2)]),
  "flip_axes": (lambda x: x.flip((0, -1)) * x, [(2, 3)]),
  "cast_f32_roundtrip_times": (lambda x: x * x.cast(dtypes.float64), [(2,)]),
  "contiguous": (lambda x: (x * 2).contiguous() * x, [(2, 3)]),
  "chain": (lambda x, y: ((x + y) * (x - y)).sum(axis=0) * y.max(axis=0), [(3, 2), (3, 2)]),
}

@pytest.mark.parametrize("name", sorted(CORE_CASES))
def test_core_op_grad(name: str):
  f, shapes = CORE_CASES[name]
  check_grad(f, *(rand(*s, seed=i, gap=0.1) for i, s in enumerate(shapes)))


# ---- elementwise math and reductions (refgrad/tensor/mathops.py) ------------------------------------------------
# name -> (f, input shapes, low, high); inputs are distinct values 0.05 apart, away from 0, in [low, high)

MATH_CASES: dict[str, tuple[Callable[..., Tensor], list[tuple[int, ...]], float, float]] = {
  "div": (lambda x, y: x / y, [(2, 3), (3,)], 0.5, 2.0),
  "rdiv": (lambda x: 2.0 / x, [(2, 3)], 0.5, 2.0),
  "div_neg": (lambda x, y: x / y, [(4,), (4,)], -2.0, -0.5),
  "pow": (lambda x, y: x ** y, [(2, 3), (2, 3)], 0.5, 2.0),
  "pow_int": (lambda x: x ** 3 + x ** -2, [(2, 3)], -2.0, 2.0),
  "pow_half": (lambda x: x ** 0.5, [(2, 3)], 0.3, 2.0),
  "rpow": (lambda x: 2.0 ** x, [(2, 3)], -2.0, 2.0),
  "abs": (lambda x: x.abs(), [(2, 3)], -2.0, 2.0),
  "square": (lambda x: x.square(), [(2, 3)], -2.0, 2.0),
  "reciprocal": (lambda x: x.reciprocal(), [(2, 3)], 0.3, 2.0),
  "sqrt": (lambda x: x.sqrt(), [(2, 3)], 0.3, 2.0),
  "rsqrt": (lambda x: x.rsqrt(), [(2, 3)], 0.3, 2.0),
  "exp": (lambda x: x.exp(), [(2, 3)], -2.0, 2.0),
  "exp2": (lambda x: x.exp2(), [(2, 3)], -2.0, 2.0),
  "log": (lambda x: x.log(), [(2, 3)], 0.3, 3.0),
  "log2": (lambda x: x.log2(), [(2, 3)], 0.3, 3.0),
  "sin": (lambda x: x.sin(), [(2, 3)], -3.0, 3.0),
  "cos": (lambda x: x.cos(), [(2, 3)], -3.0, 3.0),
  "tan": (lambda x: x.tan(), [(2, 3)], -1.2, 1.2),
  "sinh": (lambda x: x.sinh(), [(2, 3)], -2.0, 2.0),
  "cosh": (lambda x: x.cosh(), [(2, 3)], -2.0, 2.0),
  "asinh": (lambda x: x.asinh(), [(2, 3)], -2.0, 2.0),
  "acosh": (lambda x: x.acosh(), [(2, 3)], 1.2, 3.0),
  "atanh": (lambda x: x.atanh(), [(2, 3)], -0.8, 0.8),
  "erf": (lambda x: x.erf(), [(2, 3)], -2.0, 2.0),
  "relu": (lambda x: x.relu(), [(2, 3)], -2.0, 2.0),
  "relu6": (lambda x: x.relu6(), [(2, 4)], -2.0, 8.0),
  "sigmoid": (lambda x: x.sigmoid(), [(2, 3)], -3.0, 3.0),
  "tanh": (lambda x: x.tanh(), [(2, 3)], -2.0, 2.0),
  "hardsigmoid": (lambda x: x.hardsigmoid(), [(2, 4)], -5.0, 5.0),
  "hardswish": (lambda x: x.hardswish(), [(2, 4)], -5.0, 5.0),
  "hardtanh": (lambda x: x.hardtanh(), [(2, 3)], -2.0, 2.0),
  "gelu": (lambda x: x.gelu(), [(2, 3)], -2.0, 2.0),
  "quick_gelu": (lambda x: x.quick_gelu(), [(2, 3)], -2.0, 2.0),
  "silu": (lambda x: x.silu(), [(2, 3)], -2.0, 2.0),
  "softplus": (lambda x: x.softplus(), [(2, 3)], -2.0, 2.0),
  "softplus_beta": (lambda x: x.softplus(beta=2.0), [(2, 3)], -2.0, 2.0),
  "logsigmoid": (lambda x: x.logsigmoid(), [(2, 3)], -2.0, 2.0),
  "mish": (lambda x: x.mish(), [(2, 3)], -2.0, 2.0),
  "softsign": (lambda x: x.softsign(), [(2, 3)], -2.0, 2.0),
  "elu": (lambda x: x.elu(), [(2, 3)], -2.0, 2.0),
  "celu": (lambda x: x.celu(alpha=0.5), [(2, 3)], -2.0, 2.0),
  "selu": (lambda x: x.selu(), [(2, 3)], -2.0, 2.0),
  "leaky_relu": (lambda x: x.leaky_relu(0.1), [(2, 3)], -2.0, 2.0),
  "maximum": (lambda x, y: x.maximum(y), [(2, 3), (3,)], -2.0, 2.0),
  "minimum": (lambda x, y: x.minimum(y), [(2, 3), (2, 1)], -2.0, 2.0),
  "maximum_scalar": (lambda x: x.maximum(0.5), [(2, 3)], -2.0, 2.0),
  "clip": (lambda x: x.clip(-0.5, 0.7), [(2, 4)], -2.0, 2.0),
  "lerp": (lambda x, y, w: x.lerp(y, w), [(2, 3), (2, 3), (3,)], -2.0, 2.0),
  "min": (lambda x: x.min(axis=1), [(2, 3)], -2.0, 2.0),
  "min_all": (lambda x: x.min(), [(2, 3)], -2.0, 2.0),
  "mean": (lambda x: x.mean(axis=0), [(3, 2)], -2.0, 2.0),
  "mean_all": (lambda x: x.mean(), [(2, 3)], -2.0, 2.0),
  "var": (lambda x: x.var(axis=1), [(2, 4)], -2.0, 2.0),
  "var_nocorrection": (lambda x: x.var(correction=0), [(2, 3)], -2.0, 2.0),
  "std": (lambda x: x.std(axis=0, keepdim=True), [(3, 2)], -2.0, 2.0),
  "var_mean": (lambda x: (lambda v, m: v * m)(*x.var_mean(axis=1)), [(2, 3)], -2.0, 2.0),
  "std_mean": (lambda x: (lambda v, m: v + m * m)(*x.std_mean()), [(2, 3)], -2.0, 2.0),
  "prod": (lambda x: x.prod(axis=1), [(2, 3)], -2.0, 2.0),
  "prod_all": (lambda x: x.prod(), [(2, 3)], -2.0, 2.0),
  "softmax": (lambda x: x.softmax(), [(2, 3)], -2.0, 2.0),
  "softmax_axis0": (lambda x: x.softmax(0), [(3, 2)], -2.0, 2.0),
  "log_softmax": (lambda x: x.log_softmax(), [(2, 3)], -2.0, 2.0),
  "logsumexp": (lambda x: x.logsumexp(axis=1), [(2, 3)], -2.0, 2.0),
  "logsumexp_all": (lambda x: x.logsumexp(), [(2, 3)], -2.0, 2.0),
  "cumsum": (lambda x: x.cumsum(axis=1), [(2, 3)], -2.0, 2.0),
  "cumprod": (lambda x: x.cumprod(), [(4,)], -2.0, 2.0),
  "cummax": (lambda x: x.cummax(axis=0)[0], [(3, 2)], -2.0, 2.0),
  # piecewise constant: no gradient through them (the "+ x" gives x a gradient to compare)
  "sign": (lambda x: x.sign() + x, [(2, 3)], -2.0, 2.0),
  "round": (lambda x: x.round() + x, [(2, 3)], -3.0, 3.0),
  "trunc": (lambda x: x.trunc() + x, [(2, 3)], -3.0, 3.0),
  "floor": (lambda x: x.floor() + x, [(2, 3)], -3.0, 3.0),
  "ceil": (lambda x: x.ceil() + x, [(2, 3)], -3.0, 3.0),
}

@pytest.mark.parametrize("name", sorted(MATH_CASES))
def test_math_op_grad(name: str):
  f, shapes, lo, hi = MATH_CASES[name]
  check_grad(f, *(rand(*s, lo=lo, hi=hi, seed=i, gap=0.05) for i, s in enumerate(shapes)))


# ---- movement and indexing (refgrad/tensor/movement.py) ------------------------------------------------

def _idx(*v: int) -> Tensor: return Tensor(np.array(v, dtype=np.int32))

MOVEMENT_CASES: dict[str, tuple[Callable[..., Tensor], list[tuple[int, ...]]]] = {
  "transpose": (lambda x: x.transpose(0, 2), [(2, 1, 3)]),
  "T": (lambda x: x.T * _t(np.arange(6.0).reshape(3, 2)), [(2, 3)]),
  "flatten": (lambda x: x.flatten(1) * _t(np.arange(6.0).reshape(1, 6)), [(1, 2, 3)]),
  "unflatten": (lambda x: x.unflatten(1, (2, 2)), [(2, 4)]),
  "squeeze_unsqueeze": (lambda x: x.squeeze(1).unsqueeze(0).unsqueeze(-1), [(2, 1, 3)]),
  "cat": (lambda x, y: x.cat(y, x, dim=1), [(2, 2), (2, 1)]),
  "stack": (lambda x, y: x.stack(y, dim=-1), [(2, 3), (2, 3)]),
  "split": (lambda x: (lambda a, b: a * b.flip(1))(*x.split([2, 2], dim=1)), [(2, 4)]),
  "chunk": (lambda x: (lambda a, b, c: a * b + c)(*x.chunk(3, dim=0)), [(3, 2)]),
  "repeat": (lambda x: x.repeat(2, 1, 2), [(2, 2)]),
  "getitem_int_slice": (lambda x: x[1, ::-2], [(2, 5)]),
  "getitem_step_none_ellipsis": (lambda x: x[None, ..., 1::2], [(2, 2, 4)]),
  "getitem_tensor": (lambda x: x[_idx(2, 0, 2, -1)], [(3, 2)]),
  "getitem_two_tensors": (lambda x: x[_idx(0, 1, 1), :, _idx(2, 0, 1)], [(2, 2, 3)]),
  "getitem_list": (lambda x: x[:, [1, 0, 1]], [(2, 2)]),
  "gather": (lambda x: x.gather(1, Tensor(np.array([[0, 2], [1, 1]], dtype=np.int32))), [(2, 3)]),
}

@pytest.mark.parametrize("name", sorted(MOVEMENT_CASES))
def test_movement_op_grad(name: str):
  f, shapes = MOVEMENT_CASES[name]
  check_grad(f, *(rand(*s, seed=i) for i, s in enumerate(shapes)))


# ---- matmul, conv, pooling (refgrad/tensor/nnops.py) ------------------------------------------------------------

NN_CASES: dict[str, tuple[Callable[..., Tensor], list[tuple[int, ...]]]] = {
  "matmul": (lambda x, w: x @ w, [(2, 3), (3, 2)]),
  "matmul_batched_broadcast": (lambda x, w: x.matmul(w), [(2, 1, 2, 3), (2, 3, 2)]),
  "dot_vec": (lambda x, w: x.dot(w), [(3,), (3, 2)]),
  "rmatmul": (lambda w: np.arange(6.0).reshape(2, 3).tolist() @ w, [(3, 2)]),
  "linear": (lambda x, w, b: x.linear(w, b), [(2, 3), (3, 2), (2,)]),
  "conv2d": (lambda x, w, b: x.conv2d(w, b), [(1, 2, 3, 3), (2, 2, 2, 2), (2,)]),
  "conv2d_stride_pad": (lambda x, w: x.conv2d(w, stride=2, padding=1), [(1, 1, 4, 3), (2, 1, 2, 2)]),
  "conv2d_dilation_groups": (lambda x, w: x.conv2d(w, groups=2, dilation=(2, 1), padding=(0, 1, 1, 0)), [(2, 2, 3, 2), (2, 1, 2, 2)]),
  "avg_pool2d": (lambda x: x.avg_pool2d(2), [(1, 2, 4, 4)]),
  "avg_pool2d_pad_no_count": (lambda x: x.avg_pool2d(2, stride=1, padding=1, count_include_pad=False), [(1, 1, 3, 3)]),
  "max_pool2d": (lambda x: x.max_pool2d(2), [(1, 2, 4, 4)]),
  "max_pool2d_overlap_pad": (lambda x: x.max_pool2d(3, stride=2, padding=1), [(1, 1, 4, 4)]),
}

@pytest.mark.parametrize("name", sorted(NN_CASES))
def test_nn_op_grad(name: str):
  f, shapes = NN_CASES[name]
  check_grad(f, *(rand(*s, seed=i, gap=0.05) for i, s in enumerate(shapes)))

def test_max_pool2d_ties_share_gradient():
  x = _t(np.array([[[[1.0, 1.0], [0.0, 1.0]]]]), True)
  x.max_pool2d(2).sum().backward()
  assert x.grad is not None
  np.testing.assert_allclose(x.grad.numpy(), [[[[1 / 3, 1 / 3], [0.0, 1 / 3]]]], rtol=1e-15)


# ---- ALU rules, through the core primitive _alu (math helpers in refgrad/tensor/mathops.py build on these) ------

ALU_CASES: dict[str, tuple[Callable[..., Tensor], float, float]] = {
  "recip": (lambda x: x._alu(Ops.RECIP), 0.5, 2.0),
  "sqrt": (lambda x: x._alu(Ops.SQRT), 0.3, 3.0),
  "exp2": (lambda x: x._alu(Ops.EXP2), -2.0, 2.0),
  "log2": (lambda x: x._alu(Ops.LOG2), 0.3, 3.0),
  "sin": (lambda x: x._alu(Ops.SIN), -3.0, 3.0),
  "max": (lambda x: x._alu(Ops.MAX, x.flip(0)), -2.0, 2.0),
}

@pytest.mark.parametrize("name", sorted(ALU_CASES))
def test_alu_grad(name: str):
  f, lo, hi = ALU_CASES[name]
  check_grad(f, rand(4, lo=lo, hi=hi, gap=0.05 if name == "max" else 0.0))


def test_elementwise_max_tie_splits_gradient():
  x, y = _t(np.array([1.0, 2.0, 3.0]), True), _t(np.array([1.0, 5.0, -3.0]), True)
  x._alu(Ops.MAX, y).sum().backward()
  assert x.grad is not None and y.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), [0.5, 0.0, 1.0])
  np.testing.assert_array_equal(y.grad.numpy(), [0.5, 1.0, 0.0])

def test_reduce_max_ties_share_gradient():
  x = _t(np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]]), True)
  (x.max(axis=1) * _t(np.array([6.0, 8.0]))).sum().backward()
  assert x.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), [[0, 3, 3, 0], [2, 2, 2, 2]])

def test_comparisons_and_int_paths_give_no_gradient():
  x = _t(np.array([1.5, -2.5, 3.25]), True)
  y = x._alu(Ops.CMPLT, x.flip(0)).where(x, x * 0) + x.cast(dtypes.int32).cast(F64)
  y.sum().backward()
  assert x.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 0.0])

def test_only_nondifferentiable_path_gives_zero_gradient():
  x = _t(np.array([1.5, -2.5]), True)
  x.cast(dtypes.int32).cast(F64).sum().backward()
  assert x.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])


# ---- the backward() contract ------------------------------------------------------------------------

def test_used_twice_accumulates():
  x = _t(np.array([1.0, -2.0, 3.0]), True)
  (x * x * x + x).sum().backward()
  assert x.grad is not None
  np.testing.assert_allclose(x.grad.numpy(), 3 * np.array([1.0, 4.0, 9.0]) + 1, rtol=1e-15)

def test_two_backward_calls_accumulate():
  x = _t(np.array([1.0, 2.0]), True)
  (x * 3).sum().backward()
  (x * x).sum().backward()
  assert x.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), [3 + 2, 3 + 4])

def test_broadcast_reduces_grad_to_input_shape():
  # c's gradient is a sum over a broadcast constant (the incoming gradient of sum() is all ones)
  b = _t(np.array([1.0, 2.0, 3.0]), True)
  c = _t(np.ones((2, 1)), True)
  x = _t(np.arange(24.0).reshape(4, 2, 3))
  (x * b + c).sum().backward()
  assert b.grad is not None and c.grad is not None
  assert b.grad.shape == (3,) and c.grad.shape == (2, 1)
  np.testing.assert_array_equal(b.grad.numpy(), np.arange(24.0).reshape(4, 2, 3).sum(axis=(0, 1)))
  np.testing.assert_array_equal(c.grad.numpy(), [[12.0], [12.0]])

def test_leaf_with_shape_gets_grad_through_folded_reshape():
  # x is RESHAPE(BUFFER); x.reshape(6) folds to the BUFFER itself, x.expand reshapes to (1, 2, 3) first
  x = _t(np.arange(6.0).reshape(2, 3), True)
  (x.reshape(6) * 2).sum().backward()
  (x.expand(4, 2, 3) * _t(np.arange(24.0).reshape(4, 2, 3))).sum().backward()
  assert x.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), 2 + np.arange(24.0).reshape(4, 2, 3).sum(axis=0))

def test_requires_grad_propagation():
  x, y, z = _t(np.ones(2), True), _t(np.ones(2)), _t(np.ones(2), False)
  assert x.requires_grad is True and y.requires_grad is None and z.requires_grad is False
  assert (x + y).requires_grad is True
  assert (y * z).requires_grad is not True
  assert (x.sum() * 2).requires_grad is True
  assert x.reshape(2, 1).expand(2, 2).requires_grad is True
  assert x.detach().requires_grad is not True

def test_no_grad_for_tensors_not_requiring_it():
  x, y, z = _t(np.array([1.0, 2.0]), True), _t(np.array([3.0, 4.0])), _t(np.array([5.0, 6.0]), False)
  (x * y * z).sum().backward()
  assert x.grad is not None and y.grad is None and z.grad is None
  np.testing.assert_array_equal(x.grad.numpy(), [15.0, 24.0])

def test_unused_tensor_gets_no_grad():
  x, u = _t(np.array([1.0]), True), _t(np.array([2.0]), True)
  (x * 2).sum().backward()
  assert u.grad is None

def test_backward_non_scalar_needs_gradient():
  x = _t(np.ones((2, 2)), True)
  with pytest.raises(RuntimeError, match="gradient"):
    (x * 2).backward()

def test_backward_explicit_gradient():
  x = _t(np.array([[1.0, 2.0], [3.0, 4.0]]), True)
  (x * x).backward(_t(np.array([[1.0, 0.5], [-1.0, 2.0]])))
  assert x.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 2.0], [-6.0, 16.0]])

def test_backward_explicit_gradient_wrong_shape():
  x = _t(np.ones((2, 2)), True)
  with pytest.raises(ValueError, match="shape"):
    (x * 2).backward(_t(np.ones(3)))

def test_scalar_backward_on_one_element_tensor():
  x = _t(np.array([2.0]), True)
  (x * x).backward()
  assert x.grad is not None
  np.testing.assert_array_equal(x.grad.numpy(), [4.0])

def test_float16_graph_gets_float16_grads():
  x = Tensor(np.array([0.5, -1.25, 2.0], dtype=np.float16), requires_grad=True)
  w = Tensor(np.array([1.0, 2.0, 3.0], dtype=np.float16))
  (x * x * w).sum().backward()
  assert x.grad is not None and x.grad.dtype == dtypes.float16
  np.testing.assert_array_equal(x.grad.numpy(), np.array([1.0, -5.0, 12.0], dtype=np.float16))

def test_bfloat16_graph_gets_bfloat16_grads():
  x = Tensor(np.array([0.5, -1.25, 3.0], dtype=np.float32), dtype=dtypes.bfloat16, requires_grad=True)
  ((x * x).sum() + x.max() * 3).backward()
  assert x.grad is not None and x.grad.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(x.grad.numpy(), np.array([1.0, -2.5, 6.0 + 3.0], dtype=np.float32))

def test_mixed_precision_cast_back():
  x = Tensor(np.array([0.5, 3.0], dtype=np.float32), requires_grad=True)
  (x.cast(dtypes.float16) * x.cast(dtypes.float16)).cast(F64).sum().backward()
  assert x.grad is not None and x.grad.dtype == dtypes.float32
  np.testing.assert_array_equal(x.grad.numpy(), np.array([1.0, 6.0], dtype=np.float32))

def test_intermediate_requiring_grad():
  x = _t(np.array([1.0, 2.0]), True)
  h = x * 3
  (h * h).sum().backward()
  assert h.grad is not None and x.grad is not None
  np.testing.assert_array_equal(h.grad.numpy(), [6.0, 12.0])
  np.testing.assert_array_equal(x.grad.numpy(), [18.0, 36.0])

def test_copy_between_devices():
  x = Tensor(np.array([1.0, 2.0, 3.0]), device="CPU", dtype=F64, requires_grad=True)
  y = x.to("PYTHON")
  (y * y).sum().backward()
  assert x.grad is not None and x.grad.device == "CPU"
  np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])


# ---- compute_gradient directly ------------------------------------------------------------------------

def _leaf(*shape: int) -> UOp: return reshape(new_buffer("CPU", math.prod(shape), F64), shape)

def test_compute_gradient_shapes_and_reachability():
  a, b, c = _leaf(2, 3), _leaf(3), _leaf(2, 3)
  root = UOp(Ops.MUL, F64, (a, UOp(Ops.EXPAND, F64, (reshape(b, (1, 3)),), (2, 3))))
  grads = compute_gradient(root, expand(reshape(UOp.const(F64, 1.0), (1, 1)), (2, 3)), {a, b, c})
  assert set(grads) == {a, b}
  assert grads[a].shape == (2, 3) and grads[b].shape == (3,) and grads[a].dtype == grads[b].dtype == F64

def test_compute_gradient_skips_nodes_off_the_path():
  # MULACC has no gradient rule: the walk must not visit it, since no target lies below it
  x, p = _leaf(2), _leaf(2)
  off = UOp(Ops.MULACC, F64, (p, p, p))
  root = UOp(Ops.ADD, F64, (off, UOp(Ops.MUL, F64, (x, x))))
  assert set(compute_gradient(root, _leaf(2), {x})) == {x}
  with pytest.raises(NotImplementedError, match="MULACC"):
    compute_gradient(root, _leaf(2), {p})

def test_compute_gradient_root_grad_shape_mismatch():
  x = _leaf(2)
  with pytest.raises(ValueError, match="shape"):
    compute_gradient(UOp(Ops.NEG, F64, (x,)), _leaf(3), {x})

def test_deep_graph_no_recursion_limit():
  x = _t(np.array([1.0, 2.0]), True)
  y = x
  for _ in range(3000): y = y * 1.0 + 0.0
  grads = compute_gradient(y.sum().uop, UOp.const(F64, 1.0), {x.uop})
  assert grads[x.uop].shape == (2,) and grads[x.uop].dtype == F64
  assert len(grads[x.uop].toposort) > 3000


@pytest.mark.parametrize("realize_each_step", [False, True])
def test_unrolled_gradient_descent(realize_each_step: bool):
  # without realize, every step's graph holds all earlier steps (forward, backward and update)
  rng = np.random.default_rng(3)
  xn, yn, wn = rng.standard_normal((4, 3)), rng.standard_normal((4, 2)), rng.standard_normal((3, 2))
  x, y, w = _t(xn), _t(yn), _t(wn, True)
  for _ in range(6):
    loss = ((x @ w - y) * (x @ w - y)).mean()
    loss.backward()
    assert w.grad is not None
    w.assign(w - w.grad * 0.1)
    w.grad = None
    if realize_each_step: w.realize()
    wn = wn - 0.1 * (2 / yn.size) * xn.T @ (xn @ wn - yn)
  np.testing.assert_allclose(w.numpy(), wn, rtol=1e-12, atol=1e-12)


# ---- cross-device: CPU and PYTHON give byte-identical gradients ------------------------------------------

def _mlp_grads(device: str) -> list[np.ndarray]:
  rng = np.random.default_rng(7)
  x = Tensor(rng.standard_normal((4, 3)).astype(np.float32), device=device)
  w1 = Tensor(rng.standard_normal((3, 5)).astype(np.float32), device=device, requires_grad=True)
  b1 = Tensor(rng.standard_normal(5).astype(np.float32), device=device, requires_grad=True)
  w2 = Tensor(rng.standard_normal((5, 2)).astype(np.float32), device=device, requires_grad=True)
  h = x.linear(w1, b1)
  h = h.relu() + h.sigmoid().sin() * h.abs().sqrt()
  out = h @ w2
  loss = -out.log_softmax().mean() + (out * out).sum() * 0.25 + out.max()
  loss.backward()
  return [t.grad.numpy() for t in (w1, b1, w2) if t.grad is not None]

def test_cpu_python_identical_grads():
  cpu, py = _mlp_grads("CPU"), _mlp_grads("PYTHON")
  assert len(cpu) == len(py) == 3
  for a, b in zip(cpu, py):
    assert a.dtype == np.float32 and np.all(np.isfinite(a))
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_detach_blocks_the_gradient():
  x = Tensor([1.5, -2.0, 3.0], requires_grad=True)
  (x * x.detach()).sum().backward()      # d/dx of x*c with c = x held constant is c, not 2x
  np.testing.assert_array_equal(x.grad.numpy(), [1.5, -2.0, 3.0])
  assert x.detach().requires_grad is None
