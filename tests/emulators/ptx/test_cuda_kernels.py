"""nvcc's PTX (-O3, sm_80) of ordinary CUDA C kernels (kernels.cu) runs on the mock NV through run_ptx with numpy's results."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from refgrad.device import Device
from refgrad.runtime.driver import GPUFault

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: these tests compile CUDA C to PTX with it")


@pytest.fixture(scope="module")
def ptx(tmp_path_factory) -> str:
  out = tmp_path_factory.mktemp("ptx") / "kernels.ptx"
  subprocess.run(["nvcc", "--ptx", "-arch=sm_80", "-O3", str(HERE / "kernels.cu"), "-o", str(out)], check=True, capture_output=True)
  return out.read_text()


@pytest.fixture(scope="module")
def nv():
  return Device["NV"]


def test_saxpy(ptx, nv):
  x, y = np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32)
  r = nv.run_ptx(ptx, "saxpy", [np.float32(1.5), x, y, np.int32(1000)], grid=(4, 1, 1), block=(256, 1, 1))
  ref = (x.astype(np.float64) * 1.5 + y).astype(np.float32)   # fma: one rounding
  assert r[2].tobytes() == ref.tobytes() and r[1].tobytes() == x.tobytes() and r[0] == np.float32(1.5)


def test_shared_reduction(ptx, nv):
  x = np.arange(1000, dtype=np.float32)
  r = nv.run_ptx(ptx, "reduce_sum", [x, np.zeros(4, np.float32), np.int32(1000)], grid=(4, 1, 1), block=(256, 1, 1))
  assert r[1].tolist() == [x[i * 256:(i + 1) * 256].sum() for i in range(4)]


def test_warp_shuffle_atomic(ptx, nv):
  x = np.arange(512, dtype=np.int32)
  r = nv.run_ptx(ptx, "warp_sum", [x, np.zeros(1, np.int32)], grid=(2, 1, 1), block=(256, 1, 1))
  assert r[1][0] == x.sum()


def test_shared_atomics(ptx, nv):
  x = np.random.default_rng(1).integers(0, 1000, 700).astype(np.uint32)
  r = nv.run_ptx(ptx, "histo", [x, np.zeros(16, np.uint32), np.int32(700)], grid=(3, 1, 1), block=(256, 1, 1))
  assert r[1].tolist() == np.bincount(x % 16, minlength=16).tolist()


def test_divergent_loop(ptx, nv):
  x = np.arange(1, 200, dtype=np.int32)
  def steps(v: int) -> int:
    c = 0
    while v > 1: v, c = (3 * v + 1 if v % 2 else v // 2), c + 1
    return c
  r = nv.run_ptx(ptx, "collatz", [x, np.zeros_like(x), np.int32(x.size)], grid=(2, 1, 1), block=(128, 1, 1))
  assert r[1].tolist() == [steps(int(v)) for v in x]


def test_integer_division(ptx, nv):
  rng = np.random.default_rng(2)
  a = rng.integers(-2**31, 2**31, 300).astype(np.int32)
  b = rng.integers(-100, 100, 300).astype(np.int32)
  b[b == 0] = 7
  a[0], b[0] = -2**31, 3
  r = nv.run_ptx(ptx, "idiv", [a, b, np.zeros_like(a), np.zeros_like(a), np.zeros(300, np.uint32), np.zeros(300, np.int64), np.int32(300)],
                 grid=(3, 1, 1), block=(128, 1, 1))
  def cdiv(n: int, d: int) -> int: return abs(n) // abs(d) * (1 if (n >= 0) == (d >= 0) else -1)   # C: toward zero
  q = [cdiv(x, y) for x, y in zip(a.tolist(), b.tolist())]
  assert r[2].tolist() == q
  assert r[3].tolist() == [x - qq * y for x, y, qq in zip(a.tolist(), b.tolist(), q)]
  assert r[4].tolist() == [(x % 2**32) // (y % 2**32) for x, y in zip(a.tolist(), b.tolist())]
  assert r[5].tolist() == [cdiv(x * y, 7) for x, y in zip(a.tolist(), b.tolist())]


def test_casts(ptx, nv):
  x = np.array([0.5, -1.5, 2.7, 255.9, 300.0, -0.0, 65519.0, 70000.0, 1e-8, 3.4e38, -2.5e9, 1.0], np.float32)
  n = x.size
  r = nv.run_ptx(ptx, "casts", [x, np.zeros(n, np.int32), np.zeros(n, np.uint8), np.zeros(n, np.float64), np.zeros(n, np.float16),
                                np.zeros(n, np.float32), np.int32(n)], grid=(1, 1, 1), block=(32, 1, 1))
  sat32 = np.clip(np.trunc(x.astype(np.float64)), -2**31, 2**31 - 1).astype(np.int32)
  assert r[1].tolist() == sat32.tolist()
  assert r[3].tolist() == (x.astype(np.float64) * 3.0).tolist()
  with np.errstate(over="ignore"): assert r[4].tobytes() == x.astype(np.float16).tobytes()   # RN, overflow to inf


def test_half(ptx, nv):
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((2, 100)).astype(np.float16)
  r = nv.run_ptx(ptx, "halfmath", [a, b, np.zeros(100, np.float16), np.int32(100)], grid=(1, 1, 1), block=(128, 1, 1))
  assert r[2].tobytes() == ((a * b) + a).tobytes()


def test_tiled_matmul(ptx, nv):
  N = 40
  rng = np.random.default_rng(4)
  A, B = rng.integers(-8, 8, (2, N, N)).astype(np.float32)
  r = nv.run_ptx(ptx, "matmul", [A, B, np.zeros((N, N), np.float32), np.int32(N)], grid=(3, 3, 1), block=(16, 16, 1))
  assert r[2].tolist() == (A @ B).tolist()   # small integers: exact in any order


def test_out_of_bounds_faults(ptx, nv):
  x = np.zeros(10, np.float32)
  with pytest.raises(GPUFault, match=r"saxpy.*PTX line \d+|PTX line \d+.*saxpy"):
    nv.run_ptx(ptx, "saxpy", [np.float32(1), x, x.copy(), np.int32(1000)], grid=(4, 1, 1), block=(256, 1, 1))


def test_argument_mismatch(ptx, nv):
  with pytest.raises(ValueError, match="takes 4 parameters"):
    nv.run_ptx(ptx, "saxpy", [np.float32(1)], grid=(1, 1, 1), block=(1, 1, 1))
  with pytest.raises(ValueError, match="parameter saxpy_param_3"):
    nv.run_ptx(ptx, "saxpy", [np.float32(1), np.zeros(1, np.float32), np.zeros(1, np.float32), np.float32(1)])


@pytest.mark.parametrize("kw, err, match", [
  ({"grid": (1.5, 1, 1)}, ValueError, r"grid \(1.5, 1, 1\) must be 3 integers"),
  ({"block": (32, 1)}, ValueError, r"block \(32, 1\) must be 3 integers"),
  ({"shared": -4}, ValueError, "dynamic shared memory must be a number of bytes >= 0"),
  ({"shared": 1 << 30}, ValueError, r"1073741824 bytes of shared memory per block .* more than the 166912"),
])
def test_bad_launch_arguments_are_named(ptx, nv, kw, err, match):
  x = np.zeros(4, np.float32)
  with pytest.raises(err, match=match):
    nv.run_ptx(ptx, "saxpy", [np.float32(1), x, x.copy(), np.int32(4)], **kw)
  with pytest.raises(TypeError, match="src must be the PTX module's text"):
    nv.run_ptx(ptx.encode(), "saxpy", [])


@pytest.fixture(scope="module")
def more_ptx(tmp_path_factory) -> str:
  out = tmp_path_factory.mktemp("ptx") / "more.ptx"
  subprocess.run(["nvcc", "--ptx", "-arch=sm_80", "-O3", str(HERE / "more.cu"), "-o", str(out)], check=True, capture_output=True)
  return out.read_text()


def test_libdevice_math(more_ptx, nv):
  """CUDA's math library (range reduction tables in initialized .global arrays, ex2/rsqrt .approx, fma.rm ...). CUDA
  documents these functions to within a few ulp, not correctly rounded, so this compares with a relative bound."""
  import math
  x = np.linspace(-5, 5, 100).astype(np.float32)
  r = nv.run_ptx(more_ptx, "mathk", [x, np.zeros(100, np.float32), np.zeros(100, np.float64), np.int32(100)], grid=(1, 1, 1), block=(128, 1, 1))
  xd, ax = x.astype(np.float64), np.abs(x.astype(np.float64))
  ref = (np.exp(xd) + np.log(ax + 1) + np.sin(xd) * np.cos(xd) + np.sqrt(ax) + np.tanh(xd) + ax**1.5 + np.array([math.erf(v) for v in xd])
         + np.minimum(xd, 0.5) + np.exp(xd) + 1 / np.sqrt(ax + 1) + np.floor(xd) + np.round(xd))
  assert np.max(np.abs(r[1] - ref) / np.maximum(1, np.abs(ref))) < 1e-5
  assert np.max(np.abs(r[2] - (np.exp(xd) + ax + xd / 3.0)) / np.maximum(1, np.abs(r[2]))) < 1e-15


def test_intrinsics_and_64bit_atomics(more_ptx, nv):
  from refgrad.uop.semantics import f32_to_bf16
  xi = np.arange(-64, 64, dtype=np.int32)
  r = nv.run_ptx(more_ptx, "misc", [xi, np.zeros(128, np.int32), np.zeros(128, np.uint16), np.zeros(128, np.int64), np.zeros(128, np.uint64),
                                    np.int32(128)], grid=(1, 1, 1), block=(128, 1, 1))
  assert r[3].tolist() == [int(v) * int(v) % 1000003 for v in xi]
  assert sorted(r[4].tolist()[1:]) == sorted(set(range(128)) - {int(r[4][0])}) and r[4][0] in range(128)   # atomicAdd's old values
  assert r[2].tolist() == f32_to_bf16(xi.astype(np.float32) * np.float32(0.1)).view(np.uint16).tolist()


def test_int128_division(ptx, nv):
  # nvcc's inline-asm 128-bit division: multiword products, sub.cc/subc chains whose carry says "no borrow", corrections
  rng = np.random.default_rng(11)
  big = [int(v) for v in rng.integers(-2**62, 2**62, 40)]
  pairs = [(100, 7), (-7, 3), (5 << 64, 1 << 64), (2**127 - 1, 3), (-(2**127), 7), (12345678901234567890123, -98765432109)]
  pairs += [(big[i] << 64 | (big[i + 1] & (2**64 - 1)), (big[i + 2] >> (i % 60)) or 1) for i in range(0, 36, 3)]
  def words(v: int) -> list[int]: return [(v >> 64) & (2**64 - 1), v & (2**64 - 1)]   # two's complement halves
  a = np.array([w for x, z in pairs for w in (*words(x), *words(z))], np.uint64).view(np.int64)
  r = nv.run_ptx(ptx, "i128", [a, np.zeros(6 * len(pairs), np.int64), np.int32(len(pairs))], grid=(1, 1, 1), block=(64, 1, 1))[1]
  def from_words(hi: int, lo: int, signed: bool) -> int:
    v = ((hi & (2**64 - 1)) << 64) | (lo & (2**64 - 1))
    return v - (1 << 128) if signed and v >> 127 else v
  for i, (x, z) in enumerate(pairs):
    o = r[6 * i:6 * i + 6].tolist()
    q = abs(x) // abs(z) * (1 if (x < 0) == (z < 0) else -1)   # C: truncation toward zero
    assert from_words(o[0], o[1], True) == q and from_words(o[2], o[3], True) == x - q * z, (x, z)
    assert from_words(o[4], o[5], False) == (x % 2**128) // (z % 2**128), (x, z)
