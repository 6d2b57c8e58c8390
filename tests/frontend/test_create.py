"""CreationMixin: linspace, eye, *_like, triu/tril, and the counter-based random number generator
(threefry2x32-20), on Device.DEFAULT and byte-identical across CPU and PYTHON."""
from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from refgrad import Tensor, dtypes
from refgrad.dtype import DType
from refgrad.tensor import threefry2x32

# ---- deterministic creation ----------------------------------------------------------------------------

@pytest.mark.parametrize("start,stop,steps", [(0, 1, 5), (-3.5, 7.25, 12), (10, -10, 7), (2, 2, 3), (0, 1, 1), (5, 6, 0)])
def test_linspace(start, stop, steps) -> None:
  t = Tensor.linspace(start, stop, steps)
  want = np.linspace(start, stop, steps)
  assert t.dtype == dtypes.float32 and t.shape == want.shape
  # start + i*step in float32: one rounding of the product and one of the sum (values here < 16): within 2 ulps of 16
  np.testing.assert_allclose(t.numpy(), want, rtol=0, atol=4e-6)
  if steps > 1: assert t.numpy()[-1] == np.float32(stop)   # the last value is stop exactly, as numpy

def test_linspace_dtypes_and_errors() -> None:
  np.testing.assert_array_equal(Tensor.linspace(-5, 5, 4, dtype=dtypes.int32).numpy(), np.linspace(-5, 5, 4, dtype=np.int32))   # rounded down
  np.testing.assert_array_equal(Tensor.linspace(-2.5, 3, 1, dtype=dtypes.int32).numpy(), np.linspace(-2.5, 3, 1, dtype=np.int32))
  np.testing.assert_array_equal(Tensor.linspace(0, 255, 6, dtype="uchar").numpy(), np.linspace(0, 255, 6).astype(np.uint8))
  t = Tensor.linspace(0, 1, 11, dtype=dtypes.float64)
  assert t.dtype == dtypes.float64
  np.testing.assert_allclose(t.numpy(), np.linspace(0, 1, 11), rtol=0, atol=2e-16)   # float64: within an ulp of 1
  with pytest.raises(ValueError, match="steps"): Tensor.linspace(0, 1, -1)
  with pytest.raises(ValueError, match="bool"): Tensor.linspace(0, 1, 3, dtype=dtypes.bool)
  with pytest.raises(ValueError, match="range of"): Tensor.linspace(0, 300, 3, dtype=dtypes.uint8)

@pytest.mark.parametrize("n,m", [(3, None), (2, 5), (4, 1), (0, 2)])
def test_eye(n, m) -> None:
  t = Tensor.eye(n, m)
  assert t.dtype == dtypes.float32
  np.testing.assert_array_equal(t.numpy(), np.eye(n, m, dtype=np.float32))
  np.testing.assert_array_equal(Tensor.eye(n, m, dtype=dtypes.int32).numpy(), np.eye(n, m, dtype=np.int32))
  with pytest.raises(ValueError, match="eye: n"): Tensor.eye(-1)

def test_like_functions() -> None:
  x = Tensor(np.arange(6, dtype=np.int8).reshape(2, 3))
  for t, val, dt in ((x.zeros_like(), 0, dtypes.int8), (x.ones_like(), 1, dtypes.int8), (x.full_like(7), 7, dtypes.int8),
                     (x.full_like(2.5, dtype=dtypes.float16), 2.5, dtypes.float16), (x.ones_like(dtype="float"), 1, dtypes.float32),
                     (Tensor.zeros_like(x, dtype=dtypes.bool), False, dtypes.bool)):
    assert t.shape == (2, 3) and t.dtype == dt and t.device == x.device
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), val, dt.np if dt != dtypes.bfloat16 else np.float32))
  e = x.empty_like(dtype=dtypes.float32)
  assert e.shape == (2, 3) and e.dtype == dtypes.float32
  other = "PYTHON" if x.device == "CPU" else "CPU"
  assert x.ones_like(device=other).device == other
  assert x.full_like(3).assign(x.ones_like()).numpy().sum() == 6

@pytest.mark.parametrize("k", [0, 1, -1, 2, -5, 100, -100])
def test_triu_tril(k: int) -> None:
  a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) + 1
  np.testing.assert_array_equal(Tensor(a).triu(k).numpy(), np.triu(a, k))
  np.testing.assert_array_equal(Tensor(a).tril(k).numpy(), np.tril(a, k))
  with pytest.raises(ValueError, match="2 dimensions"): Tensor([1.0]).triu()


# ---- random numbers -------------------------------------------------------------------------------------

def _np_threefry(k0: int, k1: int, c0: np.ndarray, c1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Reference threefry2x32-20 in numpy (uint32 wrap-around arithmetic)."""
  rot = (13, 15, 26, 6, 17, 29, 16, 24)
  ks = [np.uint32(k0), np.uint32(k1), np.uint32(k0 ^ k1 ^ 0x1BD11BDA)]
  x0, x1 = (c0 + ks[0]).astype(np.uint32), (c1 + ks[1]).astype(np.uint32)
  for i in range(20):
    x0 = x0 + x1
    x1 = (x1 << np.uint32(rot[i % 8])) | (x1 >> np.uint32(32 - rot[i % 8]))
    x1 = x1 ^ x0
    if i % 4 == 3:
      j = (i + 1) // 4
      x0 = x0 + ks[j % 3]
      x1 = x1 + ks[(j + 1) % 3] + np.uint32(j)
  return x0, x1

def _np_rand32(seed: int, offset: int, n: int) -> np.ndarray:
  """The float32 values rand draws for counters offset .. offset+n-1 (key = the seed's two words)."""
  ctr = np.arange(offset, offset + n, dtype=np.uint64)
  x0, _ = _np_threefry(seed & 0xFFFFFFFF, seed >> 32, (ctr & 0xFFFFFFFF).astype(np.uint32), (ctr >> 32).astype(np.uint32))
  return ((x0 >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1)

def test_threefry_known_answers() -> None:
  # Random123 known-answer vectors for threefry2x32 with 20 rounds: (counter, key) -> output
  kat = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
         ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
         ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]
  u = lambda v: Tensor([v], dtype=dtypes.uint32)
  for ctr, key, want in kat:
    x0, x1 = threefry2x32((u(key[0]), u(key[1])), (u(ctr[0]), u(ctr[1])))
    assert (x0.item(), x1.item()) == want
    assert tuple(int(v[0]) for v in _np_threefry(key[0], key[1], np.uint32([ctr[0]]), np.uint32([ctr[1]]))) == want

def test_rand_matches_reference_and_counter_advances() -> None:
  seed = 0x1234_5678_9ABC
  Tensor.manual_seed(seed)
  a = Tensor.rand(3)
  b = Tensor.rand(2, 2)
  np.testing.assert_array_equal(a.numpy(), _np_rand32(seed, 0, 3))
  np.testing.assert_array_equal(b.numpy(), _np_rand32(seed, 3, 4).reshape(2, 2))
  assert Tensor._rng_counter == 7
  # a counter offset near 2**32 carries into the high word inside one call
  Tensor._rng_counter = 2**32 - 2
  np.testing.assert_array_equal(Tensor.rand(4).numpy(), _np_rand32(seed, 2**32 - 2, 4))

def test_manual_seed_reproducible_and_seeds_differ() -> None:
  Tensor.manual_seed(7)
  a = Tensor.rand(5, 4).numpy()
  b = Tensor.rand(5, 4).numpy()
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(Tensor.rand(5, 4).numpy(), a)
  assert not np.array_equal(a, b)                      # the next call continues the stream
  Tensor.manual_seed(8)
  assert not np.array_equal(Tensor.rand(5, 4).numpy(), a)
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(Tensor.rand(40).numpy(), np.concatenate([a.ravel(), b.ravel()]))   # one stream, any split
  with pytest.raises(TypeError, match="seed must be an int"): Tensor.manual_seed(1.5)

@pytest.mark.parametrize("dt,mbits", [(dtypes.float32, 23), (dtypes.float16, 10), (dtypes.bfloat16, 7), (dtypes.float64, 52)], ids=lambda v: str(v))
def test_rand_dtypes_grid(dt: DType, mbits: int) -> None:
  Tensor.manual_seed(3)
  t = Tensor.rand(4000, dtype=dt)
  v = t.numpy().astype(np.float64)
  assert t.dtype == dt and t.shape == (4000,)
  assert (v >= 0).all() and (v < 1).all()
  assert (v * 2.0 ** mbits == np.floor(v * 2.0 ** mbits)).all()   # multiples of 2**-mbits: exact, no rounding to 1.0
  assert len(np.unique(v)) > min(3000, 0.9 * 2 ** mbits)
  assert abs(v.mean() - 0.5) < 0.03 and abs(v.var() - 1 / 12) < 0.01   # 4000 draws: std of the mean ~0.005

def test_rand_like_shapes_and_empty() -> None:
  x = Tensor.zeros(2, 3, dtype=dtypes.float16)
  Tensor.manual_seed(0)
  r = x.rand_like()
  assert r.shape == (2, 3) and r.dtype == dtypes.float16
  assert x.randn_like(dtype=dtypes.float32).dtype == dtypes.float32
  assert Tensor.rand(0, 3).shape == (0, 3) and Tensor.rand((2, 2)).shape == (2, 2) and Tensor.rand().shape == ()

def test_randn_statistics_and_reference() -> None:
  Tensor.manual_seed(11)
  z = Tensor.randn(20000).numpy().astype(np.float64)
  # 20000 normal draws: the mean's std is 0.007, the variance's 0.01
  assert abs(z.mean()) < 0.04 and abs(z.var() - 1) < 0.05
  assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.02 and np.isfinite(z).all()
  Tensor.manual_seed(11)
  u = Tensor.rand(2, 5).numpy().astype(np.float64)
  Tensor.manual_seed(11)
  want = np.cos(2 * math.pi * u[0]) * np.sqrt(-2 * np.log(1 - u[1]))   # Box-Muller on the same two draws
  np.testing.assert_allclose(Tensor.randn(5).numpy(), want, rtol=1e-5, atol=1e-5)   # decomposed cos/log/sqrt in float32
  Tensor.manual_seed(11)
  assert Tensor.randn(3, dtype=dtypes.float64).dtype == dtypes.float64

def test_randint() -> None:
  Tensor.manual_seed(5)
  t = Tensor.randint(3000, low=-3, high=4)
  v = t.numpy()
  assert t.dtype == dtypes.int32 and v.min() == -3 and v.max() == 3 and set(np.unique(v)) == set(range(-3, 4))
  assert (np.abs(np.bincount(v + 3) - 3000 / 7) < 100).all()
  # the reference: floor(x0 * (high - low) / 2**32) + low
  Tensor.manual_seed(5)
  ctr = np.arange(0, 10, dtype=np.uint32)
  x0, _ = _np_threefry(5, 0, ctr, np.zeros(10, np.uint32))
  np.testing.assert_array_equal(Tensor.randint(10, low=-3, high=4).numpy(), ((x0.astype(np.uint64) * 7) >> np.uint64(32)).astype(np.int64) - 3)
  u = Tensor.randint(2, 50, low=250, high=256, dtype=dtypes.uint8).numpy()
  assert u.dtype == np.uint8 and u.min() >= 250
  big = Tensor.randint(100, low=-2**31, high=2**31).numpy()
  assert big.min() < -2**29 and big.max() > 2**29
  with pytest.raises(ValueError, match="low < high"): Tensor.randint(3, low=5, high=5)
  with pytest.raises(ValueError, match="low < high"): Tensor.randint(3, low=0, high=300, dtype=dtypes.uint8)
  with pytest.raises(ValueError, match="2\\*\\*32"): Tensor.randint(3, low=0, high=2**40, dtype=dtypes.int64)
  with pytest.raises(TypeError, match="int dtype"): Tensor.randint(3, dtype=dtypes.float32)
  with pytest.raises(TypeError, match="must be ints"): Tensor.randint(3, low=0.5, high=2)

def test_uniform_normal_and_initializers() -> None:
  Tensor.manual_seed(1)
  u = Tensor.uniform(2000, low=-2.0, high=3.0).numpy()
  assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.15
  n = Tensor.normal(4000, mean=3.0, std=0.5).numpy()
  assert abs(n.mean() - 3) < 0.05 and abs(n.std() - 0.5) < 0.05
  shape = (64, 32)
  b = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.01 ** 2)) / math.sqrt(32)
  k = Tensor.kaiming_uniform(*shape).numpy()
  assert k.shape == shape and np.abs(k).max() <= b and np.abs(k).max() > 0.9 * b
  kn = Tensor.kaiming_normal(*shape, a=0.0).numpy()
  assert abs(kn.std() - math.sqrt(2 / 32)) < 0.03
  g = Tensor.glorot_uniform(*shape).numpy()
  gb = math.sqrt(6 / (64 + 32))
  assert np.abs(g).max() <= gb and np.abs(g).max() > 0.9 * gb
  s = Tensor.scaled_uniform(*shape).numpy()
  assert np.abs(s).max() <= 1 / math.sqrt(64 * 32) and np.abs(s).max() > 0.9 / math.sqrt(64 * 32)
  p = Tensor.kaiming_uniform(4, 3, requires_grad=True)
  assert p.requires_grad and p.dtype == dtypes.float32
  assert Tensor.uniform(3, dtype=dtypes.float16).dtype == dtypes.float16

def test_rand_errors() -> None:
  with pytest.raises(TypeError, match="float"): Tensor.rand(3, dtype=dtypes.int32)
  with pytest.raises(TypeError, match="float"): Tensor.randn(3, dtype=dtypes.uint8)
  with pytest.raises(ValueError, match="invalid shape"): Tensor.rand(-1)


# ---- same seed, same calls: the same bytes on CPU and PYTHON -------------------------------------------------

def _draws(dev: str) -> list[np.ndarray]:
  Tensor.manual_seed(2024)
  outs = [Tensor.rand(3, 5, device=dev), Tensor.randn(7, device=dev), Tensor.randint(9, low=-50, high=50, device=dev),
          Tensor.rand(6, dtype=dtypes.float16, device=dev), Tensor.rand(4, dtype=dtypes.float64, device=dev),
          Tensor.randn(5, dtype=dtypes.bfloat16, device=dev), Tensor.kaiming_uniform(4, 3, device=dev), Tensor.normal(4, mean=1, std=2, device=dev),
          Tensor.linspace(-1, 1, 7, device=dev), Tensor.eye(3, device=dev)]
  assert all(o._buffer().device == dev for o in outs)
  return [o.numpy() for o in outs]

def test_random_bytes_identical_on_cpu_and_python() -> None:
  cpu = _draws("CPU")
  # linspace/eye graphs hold no buffer, so they are one node on every device: collect the CPU ones (kept alive by
  # reference cycles) before the same graphs are built for PYTHON, so that PYTHON computes its own
  gc.collect()
  for k, (a, b) in enumerate(zip(cpu, _draws("PYTHON"))):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), f"draw {k} differs between CPU and PYTHON"

def test_stream_is_device_independent() -> None:
  Tensor.manual_seed(99)
  a = Tensor.rand(3, device="CPU").numpy()
  b = Tensor.rand(4, device="PYTHON").numpy()
  Tensor.manual_seed(99)
  np.testing.assert_array_equal(Tensor.rand(7).numpy(), np.concatenate([a, b]))
