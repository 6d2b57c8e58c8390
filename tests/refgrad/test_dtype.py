import pytest

from refgrad.dtype import dtypes, least_upper_dtype, sum_acc_dtype


def test_vec_and_ptr():
  f4 = dtypes.float32.vec(4)
  assert f4.count == 4 and f4.itemsize == 16 and f4.scalar() is dtypes.float32
  assert dtypes.float32.vec(1) is dtypes.float32
  p = dtypes.float32.ptr(16, local=True)
  assert p.base == dtypes.float32 and p.local and p.size == 16 and p != dtypes.float32.ptr(16)
  with pytest.raises(ValueError): f4.vec(2)
  with pytest.raises(ValueError): p.ptr()

def test_limits():
  assert dtypes.min(dtypes.int8) == -128 and dtypes.max(dtypes.int8) == 127
  assert dtypes.max(dtypes.uint64) == 2**64 - 1 and dtypes.min(dtypes.uint64) == 0
  assert dtypes.max_finite(dtypes.float16) == 65504.0
  assert dtypes.max_finite(dtypes.bfloat16) == 3.3895313892515355e38
  assert dtypes.eps(dtypes.float32) == 2.0**-23 and dtypes.eps(dtypes.bfloat16) == 2.0**-7

def test_promotion_lattice():
  assert least_upper_dtype(dtypes.int8, dtypes.uint8) == dtypes.int16
  assert least_upper_dtype(dtypes.bool, dtypes.float16) == dtypes.float16
  assert least_upper_dtype(dtypes.int32, dtypes.float32) == dtypes.float32
  assert least_upper_dtype(dtypes.float16, dtypes.bfloat16) == dtypes.float32
  assert least_upper_dtype(dtypes.uint32, dtypes.int32) == dtypes.int64
  assert least_upper_dtype(dtypes.int64, dtypes.uint64) == dtypes.float16
  for a in dtypes.all:
    for b in dtypes.all:
      assert least_upper_dtype(a, b) == least_upper_dtype(b, a)
      assert least_upper_dtype(a, least_upper_dtype(a, b)) == least_upper_dtype(a, b)
  assert sum_acc_dtype(dtypes.int8) == dtypes.int32 and sum_acc_dtype(dtypes.uint8) == dtypes.uint32
  assert sum_acc_dtype(dtypes.float16) == dtypes.float16

def test_names():
  assert dtypes.from_name("half") is dtypes.float16
  with pytest.raises(ValueError, match="unknown dtype"): dtypes.from_name("float128")
