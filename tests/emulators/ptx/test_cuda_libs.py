"""nvcc's PTX (-O3, sm_80, C++17) of CUDA C using the toolkit's libraries and intrinsics (libs.cu) runs on the mock NV
through run_ptx with the results numpy or the libraries' documented definitions give: cub's block reduce / scan / radix
sort and warp reduce (bmsk, redux, shuffles), libcu++ atomic_ref (memory-order qualifiers) and fp8, cuda::barrier and
cuda::pipeline with memcpy_async (mbarrier, cp.async.mbarrier.arrive, %globaltimer), cooperative groups' reduce / scan /
memcpy_async, half intrinsics written as inline asm (registers named without %), packed-half atomics, and every SIMD
intrinsic (lop3, prmt, vabsdiff)."""
from __future__ import annotations

import math
import operator
import shutil
from pathlib import Path

import numpy as np
import pytest

from refgrad.device import Device
from tests.emulators.ptx.ptxkit import nvcc_ptx

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: these tests compile CUDA C to PTX with it")
rng = np.random.default_rng(3)


@pytest.fixture(scope="module")
def ptx(tmp_path_factory) -> str: return nvcc_ptx(tmp_path_factory, HERE / "libs.cu", "-std=c++17")


def run(ptx: str, entry: str, args: list, grid: int = 1, block: int = 128) -> list:
  return Device["NV"].run_ptx(ptx, entry, args, grid=(grid, 1, 1), block=(block, 1, 1))


def test_cub_block_reduce_and_scans(ptx):
  x = rng.integers(-100, 100, 256).astype(np.int32)
  r = run(ptx, "cub_reduce_scan", [x, np.zeros(2, np.int32), np.zeros(256, np.int32), np.zeros(256, np.int32)], grid=2)
  xb = x.reshape(2, 128)
  assert r[1].tolist() == xb.sum(1).tolist()
  assert r[2].reshape(2, 128).tolist() == np.cumsum(xb, 1).tolist()
  ex = np.zeros((2, 128), np.int64)   # exclusive max-scan seeded with 0
  ex[:, 1:] = np.maximum(np.maximum.accumulate(xb, 1)[:, :-1], 0)
  assert r[3].reshape(2, 128).tolist() == ex.tolist()


def test_cub_radix_sort_and_warp_reduce(ptx):
  x = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
  assert run(ptx, "cub_sort", [x, np.zeros(256, np.uint32)], block=64)[1].tolist() == sorted(x.tolist())
  f = rng.standard_normal(128).astype(np.float32)
  assert run(ptx, "cub_warp", [f, np.zeros(4, np.float32)])[1].tolist() == f.reshape(4, 32).max(1).tolist()


def test_atomic_ref_memory_orders(ptx):
  r = run(ptx, "atomref", [np.zeros(1, np.int32), np.zeros(1, np.uint64), np.zeros(1, np.float32)], block=64)
  assert (r[0][0], r[1][0], r[2][0]) == (sum(range(64)), 63 * 3, 16.0)


def _fp8(v: float, mbits: int, bias: int, top: float) -> int:
  """Round to nearest even into an fp8 format, finite values saturating at `top`, NaN 0x7F (cuda_fp8.h's default)."""
  if math.isnan(v): return 0x7F
  s = 0x80 if math.copysign(1, v) < 0 else 0
  a = min(abs(v), top)
  if a == 0: return s
  e = max(math.floor(math.log2(a)), 1 - bias)
  q = a / 2.0 ** (e - mbits)
  m = math.floor(q) + (1 if q - math.floor(q) > 0.5 or (q - math.floor(q) == 0.5 and math.floor(q) % 2) else 0)
  if m >= 2 ** (mbits + 1): e, m = e + 1, m // 2
  if min(m * 2.0 ** (e - mbits), top) == top: e, m = math.floor(math.log2(top)), round(top / 2.0 ** (math.floor(math.log2(top)) - mbits))
  return s | (m if m < 2 ** mbits else ((e + bias) << mbits) | (m - 2 ** mbits))


def test_fp8_conversions(ptx):
  x = np.concatenate([np.float32([0, -0.0, 1, 448, 449, 500, 1e9, np.inf, -np.inf, np.nan, 2**-9, 2**-10, 0.3, -57344, 60000, 1e-7,
                                  2**-7 * 1.5, 2**-17 * 3]), rng.standard_normal(46).astype(np.float32) * 10])
  r = run(ptx, "fp8", [x, np.zeros(64, np.uint8), np.zeros(64, np.uint8), np.zeros(64, np.float32)], block=64)
  assert r[1].tolist() == [_fp8(float(v), 3, 7, 448.0) for v in x]
  assert r[2].tolist() == [_fp8(float(v), 2, 15, 57344.0) for v in x]


def test_barrier_and_pipeline_memcpy_async(ptx):
  x = rng.standard_normal(512).astype(np.float32)
  assert run(ptx, "bar_async", [x, np.zeros(512, np.float32)], grid=2, block=256)[1].tolist() == (x.reshape(2, 256)[:, ::-1] * 2).reshape(-1).tolist()
  y = rng.integers(0, 100, 512).astype(np.int32)
  t = np.arange(128)
  assert run(ptx, "pipeline_stages", [y, np.zeros(128, np.int32)])[1].tolist() == sum(y.reshape(4, 128)[s][(t * 3) % 128] for s in range(4)).tolist()
  assert run(ptx, "cgasync", [x[:128].copy(), np.zeros(128, np.float32)])[1].tolist() == np.roll(x[:128], -1).tolist()


def test_cooperative_groups_reduce_and_scan(ptx):
  x = rng.integers(-50, 50, 128).astype(np.int32)
  r = run(ptx, "cgred", [x, np.zeros(8 + 128, np.int32), np.zeros(4, np.float32)])
  w = x.reshape(4, 32)
  assert r[1][:8].tolist() == np.stack([w.sum(1), w.max(1)], 1).reshape(-1).tolist()
  assert r[1][8:].tolist() == np.cumsum(x.reshape(32, 4), 1).reshape(-1).tolist()
  assert r[2].tolist() == (w.astype(np.float64) * 0.5).sum(1).tolist()   # halves of small integers: every sum exact


def test_half_intrinsics_as_inline_asm_and_packed_atomics(ptx):
  n = 64
  a, b = rng.standard_normal((2, 2 * n)).astype(np.float16)
  f = rng.standard_normal(n).astype(np.float32) * 100
  r = run(ptx, "halfs", [a, b, np.zeros(4 * n, np.float16), f, np.zeros(n, np.uint16), np.zeros(n, np.float16), np.int32(n)], block=n)
  af, bf = a.astype(np.float64), b.astype(np.float64)
  assert r[2][:2 * n].tobytes() == (af * bf + (af * af).astype(np.float16)).astype(np.float16).tobytes()   # hfma2: one rounding
  assert r[2][2 * n:].tobytes() == np.maximum(a, b).tobytes()
  f3 = (f * np.float32(3)).view(np.uint32).astype(np.uint64)
  assert r[4].tolist() == ((f3 + 0x7FFF + ((f3 >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)).astype(np.uint16).tolist()   # RNE to bf16
  rz = np.array([np.float16(v) if abs(np.float16(v)) <= abs(v) else np.nextafter(np.float16(v), np.float16(0)) for v in f], np.float16)
  lowhigh = (a[0::2].astype(np.float32) + b[1::2].astype(np.float32)).astype(np.float16)   # __low2half(a) + __high2half(b)
  assert r[5].tobytes() == (rz.astype(np.float32) + lowhigh.astype(np.float32)).astype(np.float16).tobytes()
  x = rng.integers(-4, 4, 2 * 50).astype(np.float16)   # small integers: every partial sum exact in f16
  assert run(ptx, "h2atom", [np.zeros(2, np.float16), x, np.int32(50)], block=64)[0].tolist() == [x[0::2].astype(np.float64).sum(), x[1::2].astype(np.float64).sum()]


def _lanes(v: int, k: int, signed: bool) -> list[int]:
  w = 32 // k
  x = [(v >> (w * i)) & ((1 << w) - 1) for i in range(k)]
  return [e - (1 << w) if signed and e >> (w - 1) else e for e in x]


def _pack(xs: list[int], k: int) -> int: return sum((x & ((1 << (32 // k)) - 1)) << (32 // k * i) for i, x in enumerate(xs))


def _simd(name: str, x: int, y: int) -> int:
  """The CUDA Math API's definition of a SIMD intrinsic: per half-word (2) or byte (4) lane, signed (s) or unsigned (u)."""
  k = int(name[-1])
  base, w = name[3:-1], 32 // k
  smin, smax, umax = -(1 << (w - 1)), (1 << (w - 1)) - 1, (1 << w) - 1
  S, U = _lanes(x, k, True), _lanes(x, k, False)
  Sy, Uy = _lanes(y, k, True), _lanes(y, k, False)
  def cl(v: int, lo: int, hi: int) -> int: return max(lo, min(hi, v))
  def each(f, p: list[int], q: list[int]) -> int: return _pack([f(a, b) for a, b in zip(p, q)], k)
  ops = {
    "abs": lambda: _pack([abs(a) for a in S], k), "absss": lambda: _pack([cl(abs(a), smin, smax) for a in S], k),
    "neg": lambda: _pack([-a for a in S], k), "negss": lambda: _pack([cl(-a, smin, smax) for a in S], k),
    "absdiffs": lambda: each(lambda a, b: abs(a - b), S, Sy), "absdiffu": lambda: each(lambda a, b: abs(a - b), U, Uy),
    "add": lambda: each(operator.add, U, Uy), "addss": lambda: each(lambda a, b: cl(a + b, smin, smax), S, Sy),
    "addus": lambda: each(lambda a, b: cl(a + b, 0, umax), U, Uy), "sub": lambda: each(operator.sub, U, Uy),
    "subss": lambda: each(lambda a, b: cl(a - b, smin, smax), S, Sy), "subus": lambda: each(lambda a, b: cl(a - b, 0, umax), U, Uy),
    "avgs": lambda: each(lambda a, b: (a + b + 1) >> 1 if a + b >= 0 else (a + b) >> 1, S, Sy),
    "avgu": lambda: each(lambda a, b: (a + b + 1) >> 1, U, Uy), "haddu": lambda: each(lambda a, b: (a + b) >> 1, U, Uy),
    "maxs": lambda: each(max, S, Sy), "maxu": lambda: each(max, U, Uy), "mins": lambda: each(min, S, Sy), "minu": lambda: each(min, U, Uy),
    "sads": lambda: sum(abs(a - b) for a, b in zip(S, Sy)), "sadu": lambda: sum(abs(a - b) for a, b in zip(U, Uy)),
  }
  for c, f in {"eq": operator.eq, "ne": operator.ne, "ges": operator.ge, "geu": operator.ge, "gts": operator.gt, "gtu": operator.gt,
               "les": operator.le, "leu": operator.le, "lts": operator.lt, "ltu": operator.lt}.items():
    p, q = (S, Sy) if c.endswith("s") else (U, Uy)
    ops["cmp" + c] = lambda f=f, p=p, q=q: each(lambda a, b: umax if f(a, b) else 0, p, q)
    ops["set" + c] = lambda f=f, p=p, q=q: each(lambda a, b: int(f(a, b)), p, q)
  return ops[base]() & 0xFFFFFFFF


def test_every_simd_intrinsic(ptx):
  names = (HERE / "libs.cu").read_text().split("#define SIMD_ALL(X1, X2) ")[1].split("\n")[0].replace("X1(", "").replace("X2(", "").replace(")", "").split()
  a = np.concatenate([np.uint32([0, 0x80008000, 0x7FFF7FFF, 0xFFFFFFFF, 0x80808080, 0x7F7F7F7F, 0x01010101, 0xFEFEFEFE]),
                      rng.integers(0, 2**32, 120, dtype=np.uint64).astype(np.uint32)])
  b = np.concatenate([a[:8][::-1], rng.integers(0, 2**32, 120, dtype=np.uint64).astype(np.uint32)])
  r = run(ptx, "simd", [a, b, np.zeros(128 * len(names), np.uint32)])[2].reshape(128, len(names))
  for j, name in enumerate(names):
    assert r[:, j].tolist() == [_simd(name, int(x), int(y)) for x, y in zip(a, b)], name
