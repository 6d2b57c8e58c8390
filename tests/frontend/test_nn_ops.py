"""matmul / conv2d / pooling (refgrad/tensor/nnops.py) against numpy. Floats: rtol=atol=1e-5 for float32
(sums of at most a few dozen terms, added in another order than numpy's BLAS/einsum in float64); ints exact."""
from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from refgrad import Device, Tensor
from refgrad.schedule import create_schedule

TOL = {"rtol": 1e-5, "atol": 1e-5}


def rnd(*shape: int, seed: int = 0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def n_kernels(t: Tensor) -> int: return len(create_schedule([t.uop], Device.DEFAULT)[0])


# ---- matmul -------------------------------------------------------------------------------------------

SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)),
          ((2, 1, 2, 3), (3, 3, 4)), ((3,), (2, 3, 4)), ((2, 2, 3), (3,)), ((1, 7), (7, 1))]

@pytest.mark.parametrize("sa,sb", SHAPES, ids=str)
def test_matmul_shapes(sa, sb):
  a, b = rnd(*sa), rnd(*sb, seed=1)
  out = Tensor(a) @ Tensor(b)
  exp = a.astype(np.float64) @ b.astype(np.float64)
  assert out.shape == exp.shape
  np.testing.assert_allclose(out.numpy(), exp, **TOL)

def test_matmul_ints_exact_and_forms():
  a = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
  b = np.arange(8, dtype=np.int32).reshape(4, 2) * 3 - 4
  np.testing.assert_array_equal((Tensor(a) @ Tensor(b)).numpy(), a @ b)
  np.testing.assert_array_equal(Tensor(a).dot(Tensor(b)).numpy(), a @ b)
  np.testing.assert_array_equal(Tensor(a).matmul(Tensor(b)).numpy(), a @ b)
  np.testing.assert_array_equal(Tensor(b).matmul(Tensor(a), reverse=True).numpy(), a @ b)
  np.testing.assert_array_equal((a.tolist() @ Tensor(b)).numpy(), a @ b)                # __rmatmul__
  i8 = np.full((2, 40), 100, np.int8)
  np.testing.assert_array_equal((Tensor(i8) @ Tensor(i8.T.copy())).numpy(), np.full((2, 2), 400000, np.int32))  # int8: products and sum in int32

def test_linear():
  x, w, b = rnd(4, 3), rnd(3, 5, seed=1), rnd(5, seed=2)
  np.testing.assert_allclose(Tensor(x).linear(Tensor(w), Tensor(b)).numpy(), x @ w + b, **TOL)
  np.testing.assert_allclose(Tensor(x).linear(Tensor(w[:, 0])).numpy(), x * w[:, 0], **TOL)

def test_matmul_is_one_kernel():
  out = Tensor(rnd(8, 16)) @ Tensor(rnd(16, 4, seed=1))
  items = create_schedule([out.uop], Device.DEFAULT)[0]
  assert len(items) == 1 and items[0].name == "r_8_4__16"
  assert n_kernels(Tensor(rnd(3, 1, 2, 8)) @ Tensor(rnd(2, 8, 4, seed=1)) + 1) == 1

def test_matmul_errors():
  with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(4, 5\) do not match: 3 .* != 4"): Tensor(rnd(2, 3)) @ Tensor(rnd(4, 5))
  with pytest.raises(ValueError, match=r"shapes \(3,\) and \(2,\)"): Tensor(rnd(3)) @ Tensor(rnd(2))
  with pytest.raises(ValueError, match=r"at least one axis, got shapes \(\) and \(3,\)"): Tensor(2.0) @ Tensor(rnd(3))
  with pytest.raises(ValueError, match=r"batch axes of shapes \(2, 2, 3\) and \(3, 3, 4\)"): Tensor(rnd(2, 2, 3)) @ Tensor(rnd(3, 3, 4))


# ---- conv2d ------------------------------------------------------------------------------------------

def np_pads(padding, n=2):
  if isinstance(padding, int): return ((padding, padding),) * n
  if len(padding) == n: return tuple((p, p) for p in padding)
  return ((padding[2], padding[3]), (padding[0], padding[1]))

def np_windows(x, k, stride, dilation):
  """(..., H, W) -> (..., oh, ow, kh, kw)."""
  win = sliding_window_view(x, tuple(d * (kk - 1) + 1 for kk, d in zip(k, dilation)), axis=(-2, -1))
  return win[..., ::stride[0], ::stride[1], :, :][..., ::dilation[0], ::dilation[1]]

def pair(v): return (v, v) if isinstance(v, int) else tuple(v)

def np_conv2d(x, w, b, groups, stride, dilation, padding):
  x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), *np_pads(padding)))
  win = np_windows(x, w.shape[2:], pair(stride), pair(dilation))          # (bs, cin, oh, ow, kh, kw)
  bs, _, oh, ow = win.shape[:4]
  cg, rc = w.shape[1], w.shape[0] // groups
  win = win.reshape(bs, groups, cg, oh, ow, *w.shape[2:])
  out = np.einsum("bgcyxhw,gochw->bgoyx", win, w.reshape(groups, rc, cg, *w.shape[2:]).astype(np.float64)).reshape(bs, groups * rc, oh, ow)
  return out if b is None else out + b.reshape(1, -1, 1, 1)

CONVS = [  # bs, cin, H, W, cout, groups, kernel, stride, dilation, padding, bias
  (2, 3, 7, 6, 4, 1, (3, 3), 1, 1, 0, True), (1, 4, 9, 8, 6, 2, (3, 2), (2, 1), (1, 2), 1, False),
  (2, 2, 5, 5, 2, 2, (1, 1), 2, 1, (1, 0), True), (1, 3, 8, 9, 3, 3, (2, 3), 3, 2, (1, 2, 0, 1), True),
  (1, 1, 4, 4, 1, 1, (4, 4), 1, 1, 0, False), (3, 2, 6, 5, 4, 1, (2, 2), 2, 1, 2, False)]

@pytest.mark.parametrize("cfg", CONVS, ids=str)
def test_conv2d(cfg):
  bs, cin, H, W, cout, groups, k, stride, dilation, padding, has_bias = cfg
  x, w, b = rnd(bs, cin, H, W), rnd(cout, cin // groups, *k, seed=1), rnd(cout, seed=2) if has_bias else None
  out = Tensor(x).conv2d(Tensor(w), Tensor(b) if has_bias else None, groups=groups, stride=stride, dilation=dilation, padding=padding)
  assert n_kernels(out) == 1
  exp = np_conv2d(x, w, b, groups, stride, dilation, padding)
  assert out.shape == exp.shape
  np.testing.assert_allclose(out.numpy(), exp, **TOL)

def test_conv2d_ints_exact():
  x = np.arange(2 * 2 * 5 * 5, dtype=np.int32).reshape(2, 2, 5, 5) % 7 - 3
  w = np.arange(3 * 2 * 3 * 3, dtype=np.int32).reshape(3, 2, 3, 3) % 5 - 2
  out = Tensor(x).conv2d(Tensor(w), padding=1).numpy()
  assert out.dtype == np.int32
  np.testing.assert_array_equal(out, np_conv2d(x, w, None, 1, 1, 1, 1).astype(np.int32))

def test_conv2d_errors():
  x = Tensor(rnd(1, 3, 5, 5))
  with pytest.raises(ValueError, match=r"input channels 3 .* do not fit weight \(4, 2, 3, 3\) with groups=1"): x.conv2d(Tensor(rnd(4, 2, 3, 3)))
  with pytest.raises(ValueError, match="groups=2"): x.conv2d(Tensor(rnd(4, 1, 3, 3)), groups=2)
  with pytest.raises(ValueError, match="larger than the"): x.conv2d(Tensor(rnd(4, 3, 6, 6)))
  with pytest.raises(ValueError, match=r"bias of shape \(3,\) does not match 4"): x.conv2d(Tensor(rnd(4, 3, 3, 3)), Tensor(rnd(3)))
  with pytest.raises(ValueError, match="padding must be"): x.conv2d(Tensor(rnd(4, 3, 3, 3)), padding=(1, 2, 3))
  with pytest.raises(ValueError, match=r"need shapes \(batch, cin, \*spatial\)"): Tensor(rnd(3, 5, 5)).conv2d(Tensor(rnd(4, 3, 3, 3)))


# ---- pooling -------------------------------------------------------------------------------------------

POOLS = [((2, 2), None, 1, 0), (3, 2, 1, 1), ((2, 3), (1, 2), (2, 1), (1, 0)), (3, 1, 2, (0, 1, 1, 0)), (1, 3, 1, 0)]

@pytest.mark.parametrize("k,stride,dilation,padding", POOLS, ids=str)
def test_max_pool2d(k, stride, dilation, padding):
  x = rnd(2, 3, 7, 8)
  out = Tensor(x).max_pool2d(k, stride, dilation, padding)
  assert n_kernels(out) == 1
  xp = np.pad(x, ((0, 0), (0, 0), *np_pads(padding)), constant_values=-np.inf)
  exp = np_windows(xp, pair(k), pair(k if stride is None else stride), pair(dilation)).max((-2, -1))
  np.testing.assert_array_equal(out.numpy(), exp)          # max is exact

@pytest.mark.parametrize("k,stride,dilation,padding", POOLS, ids=str)
def test_avg_pool2d(k, stride, dilation, padding):
  x = rnd(2, 3, 7, 8)
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), *np_pads(padding)))
  st = pair(k if stride is None else stride)
  win = np_windows(xp, pair(k), st, pair(dilation))
  np.testing.assert_allclose(Tensor(x).avg_pool2d(k, stride, dilation, padding).numpy(), win.mean((-2, -1)), **TOL)
  inside = np_windows(np.pad(np.ones((7, 8)), np_pads(padding)), pair(k), st, pair(dilation)).sum((-2, -1))
  np.testing.assert_allclose(Tensor(x).avg_pool2d(k, stride, dilation, padding, count_include_pad=False).numpy(), win.sum((-2, -1)) / inside, **TOL)

def test_pools_on_ints():
  x = (np.arange(2 * 6 * 6, dtype=np.int32).reshape(2, 6, 6) * 7919) % 101 - 200
  out = Tensor(x).max_pool2d(3, 2, padding=1)
  xp = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=np.iinfo(np.int32).min)
  np.testing.assert_array_equal(out.numpy(), np_windows(xp, (3, 3), (2, 2), (1, 1)).max((-2, -1)))
  avg = Tensor(x).avg_pool2d()
  assert avg.dtype == Tensor.zeros(1).dtype
  np.testing.assert_allclose(avg.numpy(), np_windows(x.astype(np.float64), (2, 2), (2, 2), (1, 1)).mean((-2, -1)), **TOL)

def test_avg_pool2d_is_mean_of_blocks_bit_for_bit():
  x = rnd(2, 4, 6).astype(np.float16)
  blocks = Tensor(x).reshape(2, 2, 2, 3, 2).permute(0, 1, 3, 2, 4).mean((-2, -1))
  out = Tensor(x).avg_pool2d()
  assert out.dtype == blocks.dtype and out.numpy().tobytes() == blocks.numpy().tobytes()

def test_pool_errors():
  with pytest.raises(ValueError, match="kernel size"): Tensor(rnd(1, 4, 4)).max_pool2d((2, 2, 2))
  with pytest.raises(ValueError, match="larger than the"): Tensor(rnd(1, 4, 4)).avg_pool2d(5)
  with pytest.raises(ValueError, match="at least 2 axes"): Tensor(rnd(4)).max_pool2d()


# ---- the same program on both devices -----------------------------------------------------------------

def test_cpu_and_python_are_byte_identical():
  x, w, b, fc = rnd(2, 3, 8, 8), rnd(4, 3, 3, 3, seed=1), rnd(4, seed=2), rnd(16, 5, seed=3)
  outs = []
  for dev in ("CPU", "PYTHON"):
    h = Tensor(x, device=dev).conv2d(Tensor(w, device=dev), Tensor(b, device=dev), padding=1, stride=(1, 2))
    p = h.max_pool2d(2)                                           # (2, 4, 4, 2)
    a = h.avg_pool2d(3, stride=1, padding=1, count_include_pad=False)
    y = p.reshape(2, 4, 8)[:, :, :2].reshape(2, 8).cat(a.reshape(2, -1)[:, :8], dim=1) @ Tensor(fc, device=dev)
    outs.append([t.numpy() for t in (h, p, a, y)])
  for c, p in zip(*outs):
    assert c.shape == p.shape and c.tobytes() == p.tobytes()
