"""The scheduler: which nodes become kernels (fusion), no recomputation through broadcasts, copies
between devices, buffer reuse, the kernel cache, DEBUG output and index arithmetic."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, dtypes, lazy, program, schedule
from refgrad.device import Device
from refgrad.uop.ops import Ops


def kernels(*ts: Tensor) -> list[schedule.ScheduleItem]:
  items, _ = schedule.create_schedule([t.uop for t in ts], Device.DEFAULT)
  return items

def rand(*shape: int, seed: int = 0) -> Tensor:
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_elementwise_chain_is_one_kernel():
  a, b = rand(8, 8), rand(8, 8, seed=1)
  out = ((a + b) * a - b).relu() if hasattr(Tensor, "relu") else ((a + b) * a - b)
  assert len(kernels(out)) == 1

def test_elementwise_into_and_after_reduce_is_one_kernel():
  a, b = rand(16, 8), rand(16, 8, seed=1)
  out = ((a * b).sum(1) + 1) * 2
  items = kernels(out)
  assert len(items) == 1 and items[0].name.startswith("r_")
  np.testing.assert_allclose(out.numpy(), ((a.numpy() * b.numpy()).sum(1) + 1) * 2, rtol=1e-5)

def test_reduce_read_through_expand_is_realized_once():
  # softmax-like: the max and the sum are each broadcast back, so each gets its own kernel
  x = rand(4, 32)
  m = x.max(1, keepdim=True)
  e = (x - m).exp2() if hasattr(Tensor, "exp2") else (x - m)
  out = e * (e.sum(1, keepdim=True) + 1)
  items = kernels(out)
  assert [i.name.split("_")[0] for i in items].count("r") == 2 and len(items) == 3

def test_computed_value_read_through_expand_is_not_recomputed():
  a, b = rand(64), rand(64, seed=1)
  h = a * b + 1                                             # computed
  out = h.reshape(64, 1).expand(64, 64) * h.reshape(1, 64)  # each h read 64 times
  items = kernels(out)
  assert len(items) == 2
  np.testing.assert_array_equal(out.numpy(), np.outer(h.numpy(), h.numpy()))

def test_loaded_values_are_read_through_expand_without_a_kernel():
  a, b = rand(16), rand(16, seed=1)
  assert len(kernels(a.reshape(16, 1).expand(16, 16) * b.reshape(1, 16))) == 1

def test_padded_undefined_op_is_realized_first():
  a = Tensor(np.arange(1, 9, dtype=np.int32))
  q = (a + 100)._alu(Ops.IDIV, Tensor(np.arange(1, 9, dtype=np.int32)))
  out = q.pad(((2, 2),))
  assert len(kernels(out)) == 2
  np.testing.assert_array_equal(out.numpy(), np.pad((np.arange(1, 9) + 100) // np.arange(1, 9), (2, 2)))

def test_nested_reduction_realizes_the_inner_one():
  x = rand(6, 5, 4)
  out = x.sum(2).max(1)
  assert len(kernels(out)) == 2
  np.testing.assert_allclose(out.numpy(), x.numpy().sum(2).max(1), rtol=1e-6)

def test_long_reduction_runs_in_two_stages():
  x = Tensor(np.ones(1 << 16, np.float32))
  assert len(kernels(x.sum())) == 2
  assert x.sum().item() == 1 << 16
  # a length with no divisor between 16 and its square root stays one loop
  assert len(kernels(Tensor(np.ones(65537, np.float32)).sum())) == 1

def test_contiguous_and_realized_inputs():
  a = rand(4, 4)
  c = (a + 1).contiguous()
  assert len(kernels(c * 2)) == 2
  c.realize()
  assert len(kernels(c * 2)) == 1
  assert kernels(a) == [] and kernels(a.reshape(16)) == []

def test_shared_subexpression_of_two_roots_is_kept():
  a = Tensor(np.arange(8, dtype=np.int32))
  h = a * 3
  x, y = h + 1, h + 2
  Tensor.realize_all(x, y)
  assert schedule.is_realized(x.uop) and schedule.is_realized(y.uop)
  np.testing.assert_array_equal(y.numpy() - x.numpy(), np.ones(8, np.int32))


def test_intermediate_buffers_are_reused():
  y = rand(32, 32)
  for _ in range(4): y = (y * 2).contiguous()   # each step's buffer is read only by the next step
  items, out = schedule.create_schedule([y.uop], Device.DEFAULT)
  schedule.run_schedule(items, {out[y.uop]})
  mems = [id(lazy.buffer_of[i.bufs[0]]) for i in items]
  assert len(mems) == 4 and mems[2] == mems[0] and len(set(mems)) == 3

def test_reuse_keeps_results_correct():
  x = rand(16, 16)
  y, ref = x, x.numpy()
  for _ in range(3):
    y = y - y.max(1, keepdim=True) * 0.5
    ref = ref - ref.max(1, keepdims=True) * np.float32(0.5)
  np.testing.assert_array_equal(y.numpy(), ref)


def test_kernel_cache_hits_for_the_same_ast():
  a, b = rand(5, 7), rand(5, 7, seed=1)
  (a * b + a).realize()
  n = len(schedule._runners)
  c, d = rand(5, 7, seed=2), rand(5, 7, seed=3)
  out = (c * d + c).realize()
  assert len(schedule._runners) == n
  np.testing.assert_array_equal(out.numpy(), c.numpy() * d.numpy() + c.numpy())


@pytest.mark.parametrize("src,dst", [("CPU", "PYTHON"), ("PYTHON", "CPU")])
def test_copy_between_devices(src: str, dst: str):
  a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=src)
  b = (a * 2).to(dst)
  assert b.device == dst
  np.testing.assert_array_equal((b + 1).numpy(), np.arange(12, dtype=np.float32).reshape(3, 4) * 2 + 1)

def test_kernel_reading_another_device_is_an_error():
  a, b = Tensor([1.0], device="CPU"), Tensor([1.0], device="PYTHON")
  with pytest.raises(ValueError, match="different devices"): a + b


def test_debug_prints_kernels_and_source(monkeypatch, capsys):
  monkeypatch.setattr(program, "DEBUG", 4)
  a = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
  (a * 7 + 1).sum(1).realize()
  out = capsys.readouterr().out
  assert "r_2__3" in out and "ms" in out and "---" in out


def test_constants_scalars_and_empty():
  assert Tensor(2.5).item() == 2.5
  assert Tensor.full((2, 3), 7, dtype=dtypes.int8).tolist() == [[7] * 3] * 2
  assert (Tensor.zeros(0, 4) + 1).shape == (0, 4)
  np.testing.assert_array_equal(Tensor.zeros(0, 4).sum(0).numpy(), np.zeros(4, np.float32))
  np.testing.assert_array_equal(Tensor.zeros(0, 3).max(1).numpy(), np.zeros(0, np.float32))   # empty result, nothing reduced over nothing


def test_max_min_of_an_empty_axis_raise():
  """max/min have no identity: reducing an empty axis raises ValueError (PyTorch raises too), like argmax; reductions
  with an identity, and ops built on MAX internally, keep working on empty tensors."""
  e = Tensor.zeros(3, 0)
  for f in (lambda: e.max(1), lambda: e.min(1), lambda: e.max(), lambda: e.min(axis=(0, 1)), lambda: e.max(-1, keepdim=True),
            lambda: Tensor.zeros(0, dtype=dtypes.int32).max(), lambda: Tensor.zeros(0, 0).min(0)):
    with pytest.raises(ValueError, match=r"(max|min): .* is empty"): f()
  assert e.max(0).shape == (0,) and e.min(0).shape == (0,)   # the reduced axis (size 3) is not empty
  assert e.any(1).tolist() == [False] * 3 and e.all(1).tolist() == [True] * 3
  assert e.logsumexp(1).tolist() == [-np.inf] * 3 and e.softmax(1).shape == (3, 0)


@pytest.mark.parametrize("shape,perm,new", [((2, 3, 4), (2, 0, 1), (8, 3)), ((6, 4), (1, 0), (2, 2, 6)), ((3, 1, 5), (1, 2, 0), (5, 3)),
                                            ((4, 6), (0, 1), (24,)), ((2, 2, 2, 3), (3, 1, 0, 2), (3, 8))])
def test_movement_index_arithmetic(shape, perm, new):
  x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
  t = Tensor(x).permute(perm).reshape(new).flip(0).pad(((1, 0),) + ((0, 0),) * (len(new) - 1))
  want = np.pad(np.flip(x.transpose(perm).reshape(new), 0), ((1, 0),) + ((0, 0),) * (len(new) - 1))
  np.testing.assert_array_equal(t.numpy(), want)
  np.testing.assert_array_equal(t.shrink(((1, t.shape[0]),) + ((0, None),) * 0 + tuple((0, n) for n in t.shape[1:])).numpy(), want[1:])


def test_backends_identical_on_a_fused_program():
  out = {}
  for dev in ("CPU", "PYTHON"):
    x = Tensor(np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32), device=dev)
    w = Tensor(np.random.default_rng(6).standard_normal((16, 4)).astype(np.float32), device=dev)
    h = (x.reshape(8, 16, 1) * w.reshape(1, 16, 4)).sum(1)
    out[dev] = (h - h.max(1, keepdim=True)).pad(((1, 1), (0, 2))).numpy()
  assert out["CPU"].tobytes() == out["PYTHON"].tobytes()


def test_bad_shapes_are_named():
  a = rand(2, 3)
  with pytest.raises(ValueError, match=r"cannot reshape \(2, 3\)"): a.reshape(4, 2)
  with pytest.raises(ValueError, match="cannot broadcast"): a + rand(3, 2)
  with pytest.raises(IndexError, match="axis 2"): a.sum(2)
  with pytest.raises(ValueError, match="only size-1 axes expand"): a.expand(4, 3)


def test_dtype_the_device_does_not_support(monkeypatch):
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "supported_dtypes", frozenset({dtypes.float32, dtypes.int32, dtypes.bool}))
  with pytest.raises(TypeError, match=rf"device {Device.DEFAULT} does not support dtypes\.half"): Tensor([1.0, 2.0], dtype=dtypes.float16)
  with pytest.raises(TypeError, match=r"does not support dtypes\.double"): (Tensor([1.0]).cast(dtypes.float64) + 1).realize()


def test_reduction_shared_by_two_kernels_is_computed_once():
  x = rand(8, 16)
  s = x.sum(1)
  a, b = s + 1, s * 2
  items, _ = schedule.create_schedule([a.uop, b.uop], Device.DEFAULT)
  assert sorted(i.name.split("_")[0] for i in items) == ["E", "E", "r"]
  Tensor.realize_all(a, b)
  np.testing.assert_array_equal(b.numpy(), s.numpy() * 2)


def test_realizing_keeps_the_graph_for_backward():
  w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  loss = (w * Tensor([1.0, -1.0])).sum()
  assert loss.item() == -2.0          # realized for item() ...
  loss.backward()                     # ... and still differentiable
  np.testing.assert_array_equal(w.grad.numpy(), [[1.0, -1.0], [1.0, -1.0]])
  w.assign(w - w.grad).realize()      # a leaf's update is a buffer again, not a growing graph
  assert schedule.is_realized(w.uop) and w.tolist() == [[0.0, 3.0], [2.0, 5.0]]


def test_loads_removed_by_simplification_are_not_kernel_parameters():
  t, u = Tensor(np.arange(3, dtype=np.int32)), Tensor(np.arange(3, dtype=np.int32) + 10)
  assert Tensor.ones(3, dtype=dtypes.bool).where(u, t).tolist() == [10, 11, 12]
  assert Tensor.zeros(3, dtype=dtypes.bool).where(u, t).tolist() == [0, 1, 2]
  (item,) = kernels(Tensor.ones(3, dtype=dtypes.bool).where(u, t) + t)
  assert len(item.bufs) == 3

def test_sum_of_a_constant_adds_once_per_element():
  assert Tensor.ones(2, 3).sum(1).tolist() == [3.0, 3.0]
  assert Tensor.full((4, 5), 2, dtype=dtypes.int32).sum().item() == 40
