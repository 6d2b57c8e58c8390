"""RDNA3 execution of llvmlite-compiled kernels against numpy: every element bit-exact."""
from __future__ import annotations

import numpy as np
import pytest

from tests.emulators.rdna3 import kernels as K
from tests.emulators.rdna3.llvm_util import compile_ir, read_elf, run_direct

N = 128   # two workgroups of 64 (two waves each)
_MODS: dict[str, dict] = {}


def kernels_of(which: str) -> dict:
  if which not in _MODS:
    ir = {"elementwise": K.elementwise_module, "control": K.control_module}[which]()
    _MODS[which] = read_elf(compile_ir(ir)[0])
  return _MODS[which]


NP = {"float": np.float32, "double": np.float64, "half": np.float16, "i32": np.int32, "i64": np.int64, "i16": np.int16, "i8": np.int8}


def inputs(t: type, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  if np.dtype(t).kind == "f":
    a = rng.standard_normal(N).astype(t) * t(8)
    b = rng.standard_normal(N).astype(t) * t(8)
    a[:4] = [0, -0.0, 1, 3]
    b[:4] = [0.5, 2, -0.0, 3]
    return a, b
  info = np.iinfo(t)
  a = rng.integers(info.min, info.max, N, dtype=t, endpoint=True)
  b = rng.integers(info.min, info.max, N, dtype=t, endpoint=True)
  b[b == 0] = 1
  return a, b


with np.errstate(all="ignore"):
  pass

SHIFT = lambda b, bits: (b.astype(np.int64) & (bits - 1))  # noqa: E731


def _fma32(a, b, c):
  from fractions import Fraction
  return np.array([np.float32(float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(c)))) for x, y in zip(a, b)], np.float32)


EXPECT = {
  "add_f32": lambda a, b: a + b, "sub_f32": lambda a, b: a - b, "mul_f32": lambda a, b: a * b, "div_f32": lambda a, b: a / b,
  "fma_f32": lambda a, b: _fma32(a, b, 3.0), "max_f32": np.fmax, "min_f32": np.fmin, "sqrt_f32": lambda a, b: np.sqrt(a),
  "trunc_f32": lambda a, b: np.trunc(a), "floor_f32": lambda a, b: np.floor(a), "cmp_f32": lambda a, b: np.where(a < b, a, np.float32(0.5)),
  "neg_abs_f32": lambda a, b: np.abs(a) * -b, "add_f64": lambda a, b: a + b, "mul_f64": lambda a, b: a * b, "div_f64": lambda a, b: a / b,
  "add_f16": lambda a, b: a + b, "mul_f16": lambda a, b: a * b,
  "add_i32": lambda a, b: a + b, "sub_i32": lambda a, b: a - b, "mul_i32": lambda a, b: a * b,
  "sdiv_i32": lambda a, b: np.where((a == np.iinfo(np.int32).min) & (b == -1), a, np.trunc(a.astype(np.float64) / b).astype(np.int64)).astype(np.int32),
  "urem_i32": lambda a, b: (a.view(np.uint32) % b.view(np.uint32)).view(np.int32),
  "shl_i32": lambda a, b: (a.astype(np.int64) << SHIFT(b, 32)).astype(np.int32), "ashr_i32": lambda a, b: a >> SHIFT(b, 32).astype(np.int32),
  "lshr_i32": lambda a, b: (a.view(np.uint32) >> SHIFT(b, 32).astype(np.uint32)).view(np.int32),
  "bits_i32": lambda a, b: ((a ^ b) | 255) & b, "max_i32": np.maximum, "umin_i32": lambda a, b: np.minimum(a.view(np.uint32), b.view(np.uint32)).view(np.int32),
  "cmp_i32": lambda a, b: np.where(a < b, a, 7).astype(np.int32),
  "add_i64": lambda a, b: a + b, "mul_i64": lambda a, b: a * b, "shl_i64": lambda a, b: a << SHIFT(b, 64),
  "add_i16": lambda a, b: a + b, "mul_i16": lambda a, b: a * b, "add_i8": lambda a, b: a + b,
  "sext_i8": lambda a, b: a.astype(np.int32) + b.view(np.uint8).astype(np.int32),
  "cvt_f32_i32": lambda a, b: a.astype(np.float32) + b.view(np.uint32).astype(np.float32),
  "cvt_f16_f32": lambda a, b: a.astype(np.float16) + b.astype(np.float16), "cvt_f32_f16": lambda a, b: a.astype(np.float32) + b.astype(np.float32),
  "cvt_f64_f32": lambda a, b: a.astype(np.float64) + b.astype(np.float64), "cvt_f32_f64": lambda a, b: a.astype(np.float32) + b.astype(np.float32),
  "cvt_f64_i32": lambda a, b: a.astype(np.float64) + b.view(np.uint32).astype(np.float64),
  "bitcast_u8": lambda a, b: a.view(np.uint8).astype(np.float32) - b.astype(np.float32),
}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_elementwise(name):
  t, tin, _ = K.ELEMENTWISE[name]
  rng = np.random.default_rng(abs(hash(name)) % 2**32)
  a, b = inputs(NP[tin], rng)
  if name == "sqrt_f32": a = np.abs(a)
  out = np.zeros(N, NP[t])
  got = run_direct(kernels_of("elementwise")[name], [out, a, b], (N // 64, 1, 1), (64, 1, 1))[0]
  with np.errstate(all="ignore"): want = np.asarray(EXPECT[name](a, b)).astype(NP[t])
  np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"), err_msg=name)


def test_lds_reverse_with_barrier():
  a = np.arange(N, dtype=np.float32)
  got = run_direct(kernels_of("control")["lds_reverse"], [np.zeros(N, np.float32), a], (2, 1, 1), (64, 1, 1))[0]
  np.testing.assert_array_equal(got, np.concatenate([a[:64][::-1], a[64:][::-1]]))


def test_loop_divergent_trip_counts():
  a = np.random.default_rng(1).standard_normal(N + 16).astype(np.float32)
  got = run_direct(kernels_of("control")["loop_sum"], [np.zeros(N, np.float32), a], (2, 1, 1), (64, 1, 1), (3,))[0]
  want = np.zeros(N, np.float32)
  for i in range(N):
    acc = np.float32(0)
    for k in range((i % 64 & 7) + 3): acc = np.float32(acc + a[i + k])
    want[i] = acc
  np.testing.assert_array_equal(got, want)


def test_branch_exec_mask():
  a = np.random.default_rng(2).integers(-50, 50, N).astype(np.int32)
  got = run_direct(kernels_of("control")["branch"], [np.zeros(N, np.int32), a], (2, 1, 1), (64, 1, 1))[0]
  np.testing.assert_array_equal(got, np.where(a > 10, a * 3, 100 - a))


def test_guarded_partial():
  a = np.arange(N, dtype=np.float32)
  out = np.full(N, -1, np.float32)
  got = run_direct(kernels_of("control")["guarded"], [out, a], (2, 1, 1), (64, 1, 1), (100,))[0]
  np.testing.assert_array_equal(got, np.where(np.arange(N) < 100, a * 2, -1))
