"""API contract beyond the PyTorch comparisons of test_golden.py: dtypes and numerics (float16/bfloat16 accumulation,
OverflowError, arange promotion), zero sizes, long scans, functional gradients, and clear errors for bad arguments."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, dtypes


# ---- numerics and dtypes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_half_reductions_accumulate_in_float32(dt):
  x = Tensor.ones(4096, dtype=dt)
  assert x.sum().dtype == dt and x.sum().item() == 4096.0          # a float16 accumulator stops at 2048
  assert x.mean().item() == 1.0
  mm = Tensor.ones(2, 4096, dtype=dt) @ Tensor.ones(4096, 3, dtype=dt)
  assert mm.dtype == dt and np.all(mm.numpy() == 4096.0)
  assert x.cumsum()[-1].item() == 4096.0

def test_sum_prod_dtype_argument():
  x = Tensor([200, 100], dtype=dtypes.uint8)
  assert x.sum(dtype=dtypes.int64).dtype == dtypes.int64 and x.sum(dtype="int64").item() == 300
  assert Tensor([1.5, 2.0]).prod(dtype=dtypes.float64).dtype == dtypes.float64

@pytest.mark.parametrize("make", [lambda: Tensor([300], dtype=dtypes.int8), lambda: Tensor.full((2,), -1, dtypes.uint8),
                                  lambda: Tensor([1], dtype=dtypes.int8) + 300, lambda: Tensor(2**31, dtype=dtypes.int32),
                                  lambda: Tensor([1, 2], dtype=dtypes.int16) * 40000])
def test_python_int_overflow_raises(make):
  with pytest.raises(OverflowError, match="out of bounds"): make()

def test_int_in_range_still_fine():
  assert Tensor([127, -128], dtype=dtypes.int8).tolist() == [127, -128]
  assert (Tensor([1], dtype=dtypes.uint8) - 1).tolist() == [0]

def test_arange_promotes_to_int64_or_raises():
  t = Tensor.arange(2**31 - 2, 2**31 + 2)
  assert t.dtype == dtypes.int64 and t.tolist() == [2**31 - 2, 2**31 - 1, 2**31, 2**31 + 1]
  assert Tensor.arange(5).dtype == dtypes.int32
  with pytest.raises(OverflowError, match="do not fit"): Tensor.arange(0, 2**32, 2**31, dtype=dtypes.int32)

@pytest.mark.parametrize("dt", [dtypes.bool, dtypes.int8, dtypes.float16, dtypes.float32])
def test_tril_triu_keep_dtype(dt):
  x = Tensor.ones(3, 3, dtype=dt)
  assert x.tril().dtype == dt and x.triu(1).dtype == dt
  np.testing.assert_array_equal(x.tril().numpy().astype(np.float64), np.tril(np.ones((3, 3))))

def test_dtype_min_max():
  assert dtypes.int8.min == -128 and dtypes.int8.max == 127 and dtypes.uint16.max == 65535
  assert dtypes.float32.min == -float("inf") and dtypes.bool.max is True


# ---- zero sizes -------------------------------------------------------------------------------------------------
def test_zero_size_matmul_and_reductions():
  np.testing.assert_array_equal((Tensor.ones(8, 0) @ Tensor.ones(0, 8)).numpy(), np.zeros((8, 8), np.float32))
  assert (Tensor.ones(0, 3) @ Tensor.ones(3, 4)).shape == (0, 4)
  np.testing.assert_array_equal(Tensor.ones(3, 0).sum(1).numpy(), [0, 0, 0])
  np.testing.assert_array_equal(Tensor.ones(3, 0).prod(1).numpy(), [1, 1, 1])
  assert np.isnan(Tensor.ones(0).mean().item())
  assert Tensor(3.0).sum(0).item() == 3.0 and Tensor(3.0).prod(-1).item() == 3.0 and Tensor(3.0).sum(-1).item() == 3.0

def test_zero_size_ops_keep_shapes():
  e = Tensor.ones(2, 0)
  assert e.cumsum(1).shape == (2, 0) and e.softmax(-1).shape == (2, 0) and e.sort(1)[0].shape == (2, 0)
  assert e.pad(((1, 1), (0, 0))).shape == (4, 0) and Tensor.ones(0, 1, 4, 4).conv2d(Tensor.ones(2, 1, 3, 3)).shape == (0, 2, 2, 2)

def test_zero_size_gradient():
  x = Tensor.ones(3, 0, requires_grad=True)
  (x @ Tensor.ones(0, 2)).sum().backward()
  assert x.grad is not None and x.grad.shape == (3, 0)


# ---- scans ------------------------------------------------------------------------------------------------------
def test_long_scans_exact_on_ints():
  n = 1 << 16
  x = Tensor.arange(n) % 7 - 3
  want = np.cumsum(np.arange(n) % 7 - 3)
  np.testing.assert_array_equal(x.cumsum().numpy(), want)
  v, i = x.cummax()
  np.testing.assert_array_equal(v.numpy(), np.maximum.accumulate(np.arange(n) % 7 - 3))
  assert i.numpy()[-1] == n - 1 - ((n - 1) % 7 - 6) % 7 and i.numpy()[6] == 6

def test_long_cumsum_float_close():
  a = np.random.default_rng(0).standard_normal(3000).astype(np.float32)
  np.testing.assert_allclose(Tensor(a).cumsum().numpy(), np.cumsum(a.astype(np.float64)), rtol=1e-5, atol=1e-4)


# ---- functional gradients, clone --------------------------------------------------------------------------------
def test_gradient_function():
  x, y = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0])
  gx, gy = (x * y).sum().gradient(x, y)
  np.testing.assert_array_equal(gx.numpy(), [3, 4])
  np.testing.assert_array_equal(gy.numpy(), [1, 2])
  assert x.grad is None                                         # gradient() leaves .grad alone
  (g,) = (x * y).gradient(x, gradient=Tensor([1.0, -1.0]))
  np.testing.assert_array_equal(g.numpy(), [3, -4])
  with pytest.raises(RuntimeError, match="not used"): (x * 2).sum().gradient(Tensor([1.0]))
  np.testing.assert_array_equal((x * 2).sum().gradient(Tensor([1.0]), materialize_grads=True)[0].numpy(), [0])
  with pytest.raises(RuntimeError, match="needs a gradient"): (x * 2).gradient(x)

def test_clone():
  x = Tensor([1.0, 2.0], requires_grad=True)
  c = x.clone()
  assert c.requires_grad and c.tolist() == [1.0, 2.0]
  (c * c).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [2, 4])


# ---- clear errors -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call,exc,msg", [
  (lambda t: t.flip((0, 0)), ValueError, "names an axis twice"),
  (lambda t: t.flip(0, -2), ValueError, "names an axis twice"),
  (lambda t: t.reshape(None, None, None), ValueError, "None at an axis"),
  (lambda t: t.pad((1, 1), mode="mirror"), ValueError, "mode must be"),
  (lambda t: t.pad((3, 0), mode="reflect"), ValueError, "at most 2"),
  (lambda t: t.pad((1,)), ValueError, "even number"),
  (lambda t: t.unsqueeze(0).unsqueeze(0).conv2d(Tensor.ones(1, 1, 2, 2), stride=0), ValueError, "stride must be positive"),
  (lambda t: t.unsqueeze(0).max_pool2d(2, dilation=0), ValueError, "dilation must be positive"),
  (lambda t: t.topk(4), ValueError, "k must be"),
  (lambda t: t.gelu(approximate="erf"), ValueError, "approximate"),
  (lambda t: t.cross_entropy(Tensor([0, 1, 2])), ValueError, "target shape"),
  (lambda t: t.one_hot(), TypeError, "integer"),
  (lambda t: t.scatter(0, Tensor([[0.5]]), 1.0), TypeError, "integer tensor"),
  (lambda t: t.scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "median"), ValueError, "reduce must be"),
  (lambda t: t.interpolate((4,), mode="cubic"), ValueError, "unknown mode"),
  (lambda t: Tensor.einsum("ij,jk->ik", t), ValueError, "names 2 operands"),
  (lambda t: t.diagonal(0, 1, -1), ValueError, "same axis"),
  (lambda t: t.repeat_interleave(-1), ValueError, "repeats"),
  (lambda t: t.binary_crossentropy(t, reduction="avg"), ValueError, "reduction must be"),
])
def test_invalid_arguments(call, exc, msg):
  t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  with pytest.raises(exc, match=msg): call(t)

def test_allclose_and_isclose():
  a = Tensor([1.0, float("nan"), float("inf")])
  assert a.allclose(Tensor([1.0 + 1e-7, float("nan"), float("inf")]), equal_nan=True)
  assert not a.allclose(Tensor([1.0, float("nan"), float("inf")]))
  assert Tensor([1, 2]).isclose(Tensor([1, 3])).tolist() == [True, False]

def test_data_dependent_shapes():
  x = Tensor([[0.0, 1.5], [-2.0, 0.0]])
  assert x.nonzero().tolist() == [[0, 1], [1, 0]] and x.nonzero().dtype == dtypes.int32
  assert x.masked_select(x < 0).tolist() == [-2.0]
  assert x.masked_select(x > 5).shape == (0,) and Tensor.zeros(2, 2).nonzero().shape == (0, 2)


# ---- long sorts: the bitonic network (forced here on short rows) ------------------------------------------------
@pytest.mark.parametrize("descending", [True])
def test_bitonic_sort_matches_stable_numpy(monkeypatch, descending):
  import refgrad.tensor.movement as tm
  monkeypatch.setattr(tm, "_SORT_DIRECT", 4)
  rng = np.random.default_rng(3)
  a = rng.integers(-4, 4, (2, 7)).astype(np.float32)
  a[0, 2] = np.nan
  x = Tensor(a, requires_grad=True)
  v, i = x.sort(1, descending=descending)
  key = np.where(np.isnan(a), np.inf, a)                          # NaN sorts as the largest
  order = np.argsort(-key if descending else key, axis=1, kind="stable")
  if descending: order = np.stack([np.concatenate([np.nonzero(np.isnan(r))[0], o[~np.isnan(r[o])]]) for r, o in zip(a, order)])
  np.testing.assert_array_equal(i.numpy(), order)
  np.testing.assert_array_equal(v.numpy(), np.take_along_axis(a, order, 1))
  w = rng.standard_normal((2, 7)).astype(np.float32)
  (v * Tensor(w)).sum().backward()
  want = np.zeros_like(w)
  np.put_along_axis(want, order, w, 1)
  np.testing.assert_array_equal(x.grad.numpy(), want)
