"""Edge semantics of issue 23 that PyTorch cannot record (it raises, wraps, or has no such argument): refgrad's stated
choices (README "Decisions worth knowing"). The rest of the issue's list is in tests/golden/semantics.json."""
from __future__ import annotations

import numpy as np

from refgrad import Tensor, dtypes


def test_uint8_clip_past_range_is_the_range_end() -> None:
  x = Tensor([0, 100, 255], dtype=dtypes.uint8)
  assert x.clip(0, 300).dtype == dtypes.uint8 and x.clip(0, 300).tolist() == [0, 100, 255]
  assert x.clip(-5, 100).tolist() == [0, 100, 100]
  assert x.clip(300, 400).tolist() == [255, 255, 255]
  assert Tensor([-200, 0, 200], dtype=dtypes.int32).clip(-2**40, 2**40).tolist() == [-200, 0, 200]


def test_masked_select_size() -> None:
  x = Tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])
  assert x.masked_select(x > 0, size=5).tolist() == [1.0, 3.0, 5.0, 0.0, 0.0]
  assert x.masked_select(x > 0, size=2, fill_value=9.0).tolist() == [1.0, 3.0]
  assert x.masked_select(x > 0, size=4, fill_value=9.0).tolist() == [1.0, 3.0, 5.0, 9.0]


def test_nonzero_size_fill() -> None:
  x = Tensor([0.0, 2.0, 0.0, 3.0])
  assert x.nonzero(size=4, fill_value=7).tolist() == [[1], [3], [7], [7]]
  assert x.nonzero(size=0).shape == (0, 1)


def test_small_int_sums_accumulate_in_32_bits() -> None:
  u = Tensor([200, 100], dtype=dtypes.uint8)
  assert u.sum().dtype == dtypes.uint32 and u.sum().item() == 300
  assert Tensor([-100, -100], dtype=dtypes.int8).sum().item() == -200


def test_interpolate_defaults_to_linear() -> None:
  x = Tensor(np.arange(4, dtype=np.float32).reshape(1, 1, 4))
  np.testing.assert_array_equal(x.interpolate((8,)).numpy(), x.interpolate((8,), mode="linear").numpy())


def test_int_interpolate_keeps_dtype() -> None:
  x = Tensor(np.array([[[0, 10, 21, 40]]], dtype=np.int32))
  y = x.interpolate((7,))
  assert y.dtype == dtypes.int32
  ref = np.interp((np.arange(7) + 0.5) * 4 / 7 - 0.5, np.arange(4), [0, 10, 21, 40])
  np.testing.assert_array_equal(y.numpy()[0, 0], np.round(ref).astype(np.int32))


def test_einsum_ellipsis_with_uppercase_letters() -> None:
  """'...' axes get letters of their own: a formula's uppercase letters never collide with them."""
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((3, 2, 4)).astype(np.float32), rng.standard_normal((3, 2, 4)).astype(np.float32)
  got = Tensor.einsum("A...B,A...B->...", Tensor(a), Tensor(b)).numpy()
  np.testing.assert_allclose(got, np.einsum("A...B,A...B->...", a, b), rtol=1e-6, atol=1e-6)   # float32 sums in another order
