"""Movement API (refgrad/tensor/movement.py) against numpy: exact for every dtype (movement copies bits)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refgrad import Device, Tensor, dtypes
from refgrad.schedule import create_schedule

A = np.arange(60, dtype=np.int32).reshape(3, 4, 5)


def same(t: Tensor, expected: np.ndarray) -> None:
  got = t.numpy()
  assert got.shape == expected.shape, (got.shape, expected.shape)
  assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
  np.testing.assert_array_equal(got.view(f"u{got.itemsize}") if got.dtype.kind == "f" else got,
                                expected.view(f"u{expected.itemsize}") if expected.dtype.kind == "f" else expected)


def case_id(v: object) -> str:
  if isinstance(v, tuple): return "(" + ",".join(map(case_id, v)) + ")"
  return f"array{v.ravel()[:4].tolist()}" if isinstance(v, np.ndarray) else repr(v)

def n_kernels(t: Tensor) -> int: return len(create_schedule([t.uop], Device.DEFAULT)[0])


# ---- shape ops ----------------------------------------------------------------------------------------

def test_transpose_and_T():
  t = Tensor(A)
  same(t.transpose(), A.transpose(1, 0, 2))
  same(t.transpose(-1, 0), A.transpose(2, 1, 0))
  same(t[0].T, A[0].T)
  same(Tensor(A[0, 0]).T, A[0, 0])

def test_flatten_unflatten():
  t = Tensor(A)
  same(t.flatten(), A.reshape(-1))
  same(t.flatten(1), A.reshape(3, 20))
  same(t.flatten(0, 1), A.reshape(12, 5))
  same(t.flatten(-2, -1), A.reshape(3, 20))
  same(Tensor(np.array(7, np.int32)).flatten(), np.array([7], np.int32))
  same(t.unflatten(1, (2, 2)), A.reshape(3, 2, 2, 5))
  same(t.unflatten(-1, (-1, 1)), A.reshape(3, 4, 5, 1))

def test_squeeze_unsqueeze():
  a = A.reshape(3, 1, 4, 1, 5)
  t = Tensor(a)
  same(t.squeeze(), A)
  same(t.squeeze(1), A.reshape(3, 4, 1, 5))
  same(t.squeeze(-2), A.reshape(3, 1, 4, 5))
  same(t.squeeze(0), a)                         # size 3: kept, as in PyTorch
  same(t.squeeze((1, 3)), A)
  same(Tensor(A).unsqueeze(0), A[None])
  same(Tensor(A).unsqueeze(-1), A[..., None])
  same(Tensor(A).unsqueeze(2), A[:, :, None])

def test_repeat():
  a = np.arange(6, dtype=np.int16).reshape(2, 3)
  same(Tensor(a).repeat(2, 3), np.tile(a, (2, 3)))
  same(Tensor(a).repeat((2, 1, 2)), np.tile(a, (2, 1, 2)))
  same(Tensor(a).repeat(1, 0), np.tile(a, (1, 0)))


# ---- cat / stack / split / chunk -------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
  xs = [A, A + 100, A - 7] if dim == 0 else [A, A[:, :2], A[:, :1]] if dim == 1 else [A, A[..., :3], A[..., :1]]
  out = Tensor(xs[0]).cat(*(Tensor(x) for x in xs[1:]), dim=dim)
  assert n_kernels(out) == 1
  same(out, np.concatenate(xs, axis=dim))

def test_cat_promotes_and_keeps_bits():
  f = np.array([-0.0, np.nan, -np.inf, 1.5], np.float32)
  same(Tensor(f).cat(Tensor(np.array([1, 2], np.int32))), np.array([-0.0, np.nan, -np.inf, 1.5, 1, 2], np.float32))
  same(Tensor([True, False]).cat(Tensor(np.array([3], np.int8))), np.array([1, 0, 3], np.int8))
  same(Tensor.cat(Tensor([True]), Tensor([False, True])), np.array([True, False, True]))

def test_cat_empty_and_single():
  same(Tensor(A).cat(Tensor(A[:0]), dim=0), A)
  same(Tensor(A).cat(), A)

def test_stack():
  same(Tensor.stack(Tensor(A), Tensor(A + 1)), np.stack([A, A + 1]))
  same(Tensor(A).stack(Tensor(A + 1), Tensor(A + 2), dim=-1), np.stack([A, A + 1, A + 2], axis=-1))
  same(Tensor(A).stack(Tensor(A), dim=2), np.stack([A, A], axis=2))

def test_split_and_chunk():
  t = Tensor(A)
  for got, exp in zip(t.split(2, dim=1), np.split(A, [2], axis=1)): same(got, exp)
  for got, exp in zip(t.split([1, 3, 1], dim=-1), np.split(A, [1, 4], axis=-1)): same(got, exp)
  assert [p.shape for p in t.split(2, dim=2)] == [(3, 4, 2), (3, 4, 2), (3, 4, 1)]
  assert [p.shape for p in t.chunk(3, dim=1)] == [(3, 2, 5), (3, 2, 5)]     # ceil(4/3) = 2 per chunk, as in PyTorch
  for got, exp in zip(t.chunk(3), np.split(A, 3)): same(got, exp)


# ---- getitem -------------------------------------------------------------------------------------------

BASIC = [1, -1, -3, (1, 2), (0, -1, 4), slice(None), slice(None, None, -1), (slice(1, None, 2), None, slice(None, None, -2)),
         (Ellipsis, 0), (None, 1, Ellipsis, None), (slice(3, 0, -2), slice(None), slice(4, None, -3)), (slice(10, 20),),
         (), Ellipsis, (slice(-2, None), slice(None, -1, 3)), (slice(2, 1),), (slice(None, None, 7), slice(None, None, -5)),
         (Ellipsis, None), (None,), (1, slice(None), None, -1)]

@pytest.mark.parametrize("index", BASIC, ids=case_id)
def test_getitem_basic(index):
  same(Tensor(A)[index], A[index])

def test_getitem_0d_and_float():
  same(Tensor(np.array(2.5, np.float32))[None], np.array([2.5], np.float32))
  same(Tensor(np.array(2.5, np.float32))[...], np.array(2.5, np.float32))
  f = np.array([[-0.0, np.nan], [np.inf, 1e-45]], np.float32)
  same(Tensor(f)[::-1, 1], f[::-1, 1])

_slice_part = st.one_of(st.none(), st.integers(-7, 7))
_slices = st.builds(slice, _slice_part, _slice_part, st.one_of(st.none(), st.integers(-4, 4).filter(bool)))
_item = st.one_of(_slices, _slices, st.integers(-3, 2), st.none())

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_item, max_size=4))
def test_getitem_random_basic(items):
  if sum(i is not None for i in items) > 3: items = items[:3]
  index = tuple(items)
  same(Tensor(A)[index], A[index])

IDX = [((np.array([2, 0, -1]),)), (slice(None), np.array([3, -4, 0, 0])), (np.array([2, 0, 1]), np.array([[1], [3]])),
       (np.array([1, 2]), slice(None), np.array([[0], [4]])), (slice(None), np.array([[1, 2]]), np.array([0, 4])),
       (Ellipsis, np.array([[4, 3], [2, 1]])), (None, np.array([1]), slice(1, 3)), (np.array(2), slice(None), np.array([0, 1])),
       (slice(None, None, -1), np.array([1, 1, 0]), np.array([4, 0, 2])), (np.array([], np.int32),)]

@pytest.mark.parametrize("index", IDX, ids=case_id)
def test_getitem_tensor(index):
  tindex = tuple(Tensor(i.astype(np.int32)) if isinstance(i, np.ndarray) else i for i in index)
  same(Tensor(A)[tindex], A[index])

def test_getitem_tensor_forms():
  a = A[0]
  same(Tensor(a)[[2, 0]], a[[2, 0]])                                        # a list is a tensor index
  same(Tensor(a)[Tensor(np.array([3, 1], np.int8)), 2], a[[3, 1], 2])       # any int dtype
  same(Tensor(a)[Tensor(np.array([1, 0], np.uint8))], a[[1, 0]])
  same(Tensor(a)[np.array([[0], [3]])], a[np.array([[0], [3]])])
  # ints are applied first (PyTorch / tinygrad): x[0, :, idx] is x[0][:, idx], where numpy would put idx's axes first
  same(Tensor(A)[0, :, Tensor([1, 3])], A[0][:, [1, 3]])

def test_getitem_tensor_keeps_bits_and_out_of_range_is_zero():
  f = np.array([-0.0, np.inf, np.nan, 1.5, -3e4], np.float32)
  same(Tensor(f)[Tensor([0, 1, 2, 3, 4, -5, 0])], f[[0, 1, 2, 3, 4, -5, 0]])
  same(Tensor(f.astype(np.float16))[Tensor([2, 0])], f.astype(np.float16)[[2, 0]])
  same(Tensor([True, False, True])[Tensor([1, 2])], np.array([False, True]))
  same(Tensor(np.arange(4, dtype=np.int64) - 2)[Tensor([3, 0])], np.array([1, -2], np.int64))
  same(Tensor(A[0, 0])[Tensor([7, -6, 1])], np.array([0, 0, 1], np.int32))   # not checked: out of range gives 0

def test_getitem_tensor_is_one_kernel():
  assert n_kernels(Tensor(A)[Tensor([2, 0]), 1:3]) == 1

def test_gather():
  idx = np.array([[[0, 4], [1, 1], [2, -1], [3, 3]]] * 2, np.int32)
  exp = np.take_along_axis(A[:2], idx % 5, axis=2)
  same(Tensor(A).gather(2, Tensor(idx)), exp)
  idx0 = np.array([[2, 0, 1], [0, 0, 2]], np.int32)
  same(Tensor(A[:, :, 0]).gather(0, Tensor(idx0)), np.take_along_axis(A[:, :3, 0], idx0, axis=0))   # index smaller than the input


# ---- setitem -------------------------------------------------------------------------------------------

SET = [(1, 7), ((slice(None), 2), np.arange(5)), ((slice(None, None, -2), slice(1, None, 2), 0), -3),
       ((Ellipsis, slice(4, 0, -3)), np.array([[9], [8], [7], [6]])), ((None, 0, 1), 100), ((np.array([2, 0, 2]),), np.arange(20).reshape(4, 5)),
       ((slice(None), np.array([1, -1]), np.array([[0], [2]])), 5), ((np.array([0, 2]), 1, np.array([4, 0])), np.array([-1, -2])),
       ((slice(None, None, 2), slice(None, None, 3), slice(None, None, 4)), np.array([1, 2])), ((slice(5, 9),), 1),
       ((slice(None),), 3), ((Ellipsis, None), np.arange(5)[:, None]), ((slice(None, None, -1),), np.arange(20).reshape(4, 5))]

@pytest.mark.parametrize("index,value", SET, ids=case_id)
def test_setitem(index, value):
  a, t = A.copy(), Tensor(A.copy())
  tindex = tuple(Tensor(i.astype(np.int32)) if isinstance(i, np.ndarray) else i for i in index) if isinstance(index, tuple) else index
  a[index] = value
  t[tindex] = Tensor(value.astype(np.int32)) if isinstance(value, np.ndarray) else value
  same(t, a)

def test_setitem_old_tensors_keep_old_values():
  t = Tensor(A.copy())
  before, row = t + 0, t[1]
  t[1, 2:] = Tensor(np.full((2, 5), -1, np.int32))
  a = A.copy()
  a[1, 2:] = -1
  same(t, a)
  same(before, A)
  same(row, A[1])
  row[0] = 5                          # a getitem result is a new tensor, not a view: t is unchanged
  same(t, a)

def test_setitem_casts_and_lazy_target():
  t = Tensor(np.zeros((2, 3), np.float32)) + 1
  t[:, 1] = 7                          # int into float; the target was still lazy
  t[0] = Tensor([True, False, True])   # bool into float
  same(t, np.array([[1, 0, 1], [1, 7, 1]], np.float32))

def test_setitem_repeated_index_last_wins():
  t = Tensor(np.zeros(4, np.int32))
  t[Tensor([1, 3, 1, 1])] = Tensor([10, 20, 30, 40])
  same(t, np.array([0, 40, 0, 20], np.int32))

def test_setitem_float_bits():
  t = Tensor(np.ones((2, 2), np.float32))
  t[Tensor([1]), 0] = Tensor(np.array([-0.0], np.float32))
  t[0, :] = Tensor(np.array([np.nan, -np.inf], np.float32))
  same(t, np.array([[np.nan, -np.inf], [-0.0, 1]], np.float32))


# ---- errors --------------------------------------------------------------------------------------------

def test_index_errors():
  t = Tensor(A)
  with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of size 3"): t[3]
  with pytest.raises(IndexError, match="index -6 is out of range for axis 2"): t[0, 0, -6]
  with pytest.raises(IndexError, match="too many indices"): t[0, 0, 0, 0]
  with pytest.raises(IndexError, match="single ellipsis"): t[..., 0, ...]
  with pytest.raises(IndexError, match="integer dtype"): t[Tensor([0.5])]
  with pytest.raises(IndexError, match="do not broadcast"): t[Tensor([0, 1]), Tensor([0, 1, 2])]
  with pytest.raises(ValueError, match="step cannot be zero"): t[::0]
  with pytest.raises(TypeError, match="cannot index a tensor with str"): t["a"]
  with pytest.raises(ValueError, match=r"value of shape \(2,\) does not broadcast to the indexed shape \(4, 5\)"): t[0] = Tensor([1, 2])

def test_shape_errors():
  t = Tensor(A)
  with pytest.raises(ValueError, match=r"shapes \(3, 4, 5\) and \(3, 3, 5\)"): t.cat(Tensor(A[:, :3]), dim=0)
  with pytest.raises(ValueError, match=r"shapes \(3, 4, 5\) and \(4, 5\)"): t.cat(Tensor(A[0]))
  with pytest.raises(IndexError, match="axis 3 is out of range"): t.cat(t, dim=3)
  with pytest.raises(IndexError, match="axis 5 is out of range"): t.transpose(0, 5)
  with pytest.raises(IndexError, match="axis -5 is out of range"): t.unsqueeze(-5)
  with pytest.raises(ValueError, match=r"cannot reshape \(3, 4, 5\)"): t.reshape(7, 9)
  with pytest.raises(ValueError, match=r"cannot reshape \(3, 4, 5\)"): t.reshape(-1, 7)
  with pytest.raises(ValueError, match=r"sizes \[1, 2\] do not add up to 4"): t.split([1, 2], dim=1)
  with pytest.raises(ValueError, match=r"stack: shapes \(3, 4, 5\) and \(3, 4, 4\)"): t.stack(Tensor(A[..., :4]))
  with pytest.raises(ValueError, match="need at least 3 repeats"): t.repeat(2, 2)
  with pytest.raises(ValueError, match="start_dim 2 comes after end_dim 1"): t.flatten(2, 1)
  with pytest.raises(TypeError, match="argument 1 is a int"): t.cat(3)


# ---- the same program on both devices -----------------------------------------------------------------

def test_cpu_and_python_are_byte_identical():
  rng = np.random.default_rng(1)
  a = rng.standard_normal((4, 6, 5)).astype(np.float32)
  a[0, 0, 0], a[1, 2, 3] = -0.0, np.nan
  outs = []
  for dev in ("CPU", "PYTHON"):
    t = Tensor(a, device=dev)
    x = t[1:, ::-2, Tensor([4, 0, -1], device=dev)].cat(t[:3, :3, None, 2].expand(3, 3, 3), dim=1)
    y = Tensor.stack(*t.split([2, 2], dim=0), dim=-1).repeat(1, 2, 1, 1)[::3, 1]
    z = Tensor(a.copy(), device=dev)
    z[Tensor([0, 2], device=dev), 1:4] = x[:2, 1:4, 0].unsqueeze(-1)
    outs.append([o.numpy() for o in (x, y, z, t.gather(1, Tensor(np.zeros((4, 2, 5), np.int32), device=dev)))])
  for c, p in zip(*outs):
    assert c.shape == p.shape
    assert c.tobytes() == p.tobytes()


def test_dtypes_roundtrip_through_getitem():
  for dt in (dtypes.int8, dtypes.uint16, dtypes.int64, dtypes.float16, dtypes.float64, dtypes.bool):
    a = (np.arange(12) % 5).astype(dt.np).reshape(3, 4)
    same(Tensor(a)[Tensor([2, 0]), ::-1], a[[2, 0], ::-1])
