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


SHIFT = lambda b, bits: (b.astype(np.int64) & (bits - 1))


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
  "sub_f16": lambda a, b: a - b, "div_f16": lambda a, b: (a.astype(np.float32) / b.astype(np.float32)).astype(np.float16),
  "max_f16": np.fmax, "min_f16": np.fmin, "sqrt_f16": lambda a, b: np.sqrt(a.astype(np.float32)).astype(np.float16),
  "cmp_f16": lambda a, b: np.where(~(a <= b), a, b), "sub_f64": lambda a, b: a - b, "sqrt_f64": lambda a, b: np.sqrt(a),
  "max_f64": np.fmax, "floor_f64": lambda a, b: np.floor(a), "cmp_f64": lambda a, b: np.where(a >= b, a, b),
  "exp2_f32": lambda a, b: np.exp2(a.astype(np.float64)).astype(np.float32),
  "log2_f32": lambda a, b: np.log2(a.astype(np.float64)).astype(np.float32),
  "rint_ceil_f32": lambda a, b: np.rint(a) + np.ceil(b), "copysign_f32": np.copysign,
  "minimum_f32": lambda a, b: np.where((a == 0) & (b == 0), np.where(np.signbit(a), a, b), np.minimum(a, b)),
  "maximum_f32": lambda a, b: np.where((a == 0) & (b == 0), np.where(np.signbit(a), b, a), np.maximum(a, b)),
  "une_f32": lambda a, b: (a != b).astype(np.int32), "uno_f32": lambda a, b: (np.isnan(a) | np.isnan(b)).astype(np.int32),
  "udiv_i32": lambda a, b: (a.view(np.uint32) // b.view(np.uint32)).view(np.int32),
  "srem_i32": lambda a, b: np.fmod(a.astype(np.int64), b.astype(np.int64)).astype(np.int32),
  "umax_smin_i32": lambda a, b: np.maximum(a.view(np.uint32), b.view(np.uint32)).view(np.int32) ^ np.minimum(a, b),
  "abs_i32": lambda a, b: np.abs(a), "uaddsat_i32": lambda a, b: np.minimum(a.view(np.uint32).astype(np.uint64) + b.view(np.uint32), 2**32 - 1).astype(np.uint32).view(np.int32),
  "fshl_i32": lambda a, b: ((((a.view(np.uint32).astype(np.uint64) << 32) | b.view(np.uint32)) << (b.view(np.uint32) & 31).astype(np.uint64)) >> 32).astype(np.uint32).view(np.int32),
  "cmp_u32": lambda a, b: np.where((a.view(np.uint32) <= b.view(np.uint32)) | (a == 5), a, b),
  "sdiv_i64": lambda a, b: np.array([int(x / y) if abs(int(x)) < 2**52 else _idiv(int(x), int(y)) for x, y in zip(a, b)], np.int64),
  "urem_i64": lambda a, b: (a.view(np.uint64) % b.view(np.uint64)).view(np.int64),
  "lshr_i64": lambda a, b: (a.view(np.uint64) >> (b.view(np.uint64) & np.uint64(63))).view(np.int64),
  "ashr_i64": lambda a, b: a >> (b & 63), "cmp_i64": lambda a, b: np.where(a.view(np.uint64) < b.view(np.uint64), a, b),
  "max_i16": np.maximum, "shl_i16": lambda a, b: (a.astype(np.int64) << (b & 15)).astype(np.int16), "cmp_i16": np.minimum,
  "mul_i8": lambda a, b: a * b, "udiv_i8": lambda a, b: (a.view(np.uint8) // b.view(np.uint8)).view(np.int8),
  "cvt_f16_i32": lambda a, b: a.astype(np.float16) + b.view(np.uint32).astype(np.float16),
  "cvt_f32_i64": lambda a, b: np.array([_i2f(int(x)) + _i2f(int(y) % 2**64) for x, y in zip(a, b)], np.float32),
  "cvt_f64_i64": lambda a, b: a.astype(np.float64) + 1.0, "cvt_f16_f64": lambda a, b: _f64_to_f16(a),
  "bool_and": lambda a, b: ((a != 0) & (b != 0)).astype(np.int8),
  "fma_f16": lambda a, b: _round_exact([_fr(x) * _fr(y) + 2 for x, y in zip(a, b)], np.float16),
  "fma_f64": lambda a, b: np.array([float(_fr(x) * _fr(y) + 1) for x, y in zip(a, b)], np.float64),
  "cvt_i32_f32": lambda a, b: np.trunc(a).astype(np.int32) + np.trunc(b).astype(np.uint32).view(np.int32),
  "cvt_i32_f16": lambda a, b: np.trunc(a).astype(np.int32) + np.trunc(b).astype(np.uint32).view(np.int32),
  "cvt_i32_f64": lambda a, b: np.trunc(a).astype(np.int32) + np.trunc(b).astype(np.uint32).view(np.int32),
  "cvt_i64_f32": lambda a, b: np.trunc(a).astype(np.int64) + np.trunc(b).astype(np.uint64).view(np.int64),
  "popc_i32": lambda a, b: np.array([bin(int(x)).count("1") + (32 - int(y).bit_length()) for x, y in zip(a.view(np.uint32), b.view(np.uint32))],
                                    np.int64).astype(np.int32),
}


def _fr(x):
  from fractions import Fraction
  return Fraction(float(x))


def _round_exact(vals: list, t: type) -> np.ndarray:
  """Exact rationals rounded once to t (nearest, ties to even) by checking the neighbours of a first guess."""
  from fractions import Fraction
  out = []
  for v in vals:
    r = t(float(v))
    cands = [np.nextafter(r, t(-np.inf)), r, np.nextafter(r, t(np.inf))]
    raw = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(t).itemsize]
    out.append(min(cands, key=lambda c: (abs(Fraction(float(c)) - v), int(np.array(c, t).view(raw)) & 1)))
  return np.array(out, t)


def _idiv(x: int, y: int) -> int:
  q = abs(x) // abs(y)
  return q if (x < 0) == (y < 0) else -q


def _i2f(x: int) -> np.float32:
  """An integer rounded once to f32 (Fraction -> float is exact to f64 first only when it fits; go through exact rounding)."""
  from fractions import Fraction
  f = float(Fraction(x))   # correctly rounded to f64
  r = np.float32(f)
  # double rounding repair: if f64 rounding was inexact, pick the f32 neighbour closest to the exact integer
  cands = [np.nextafter(r, np.float32(-np.inf)), r, np.nextafter(r, np.float32(np.inf))]
  best = min(cands, key=lambda c: (abs(Fraction(float(c)) - x), int(np.float32(c).view(np.uint32)) & 1))
  return np.float32(best)


def _f64_to_f16(a: np.ndarray) -> np.ndarray:
  from fractions import Fraction
  out = []
  for x in a:
    r = np.float16(np.float32(x))
    cands = [np.nextafter(r, np.float16(-np.inf)), r, np.nextafter(r, np.float16(np.inf))]
    out.append(min(cands, key=lambda c: (abs(Fraction(float(c)) - Fraction(float(x))), int(np.float16(c).view(np.uint16)) & 1)))
  return np.array(out, np.float16)


UNTESTED_HERE = {"sin_f32": "v_sin_f32 is approximate on hardware (the expected value is not one number)", "cttz_brev_i32": "see test_bit_ops"}


def test_every_kernel_has_an_expectation_or_a_reason():
  assert set(K.ELEMENTWISE) == set(EXPECT) | set(UNTESTED_HERE)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_elementwise(name):
  t, tin, _ = K.ELEMENTWISE[name]
  rng = np.random.default_rng(sum(map(ord, name)))
  a, b = inputs(NP[tin], rng)
  if name in ("sqrt_f32", "sqrt_f16", "sqrt_f64", "log2_f32"): a = np.abs(a)
  if name in ("exp2_f32",): a = a * np.float32(4)
  if name.startswith("cvt_i"): a, b = np.trunc(a), np.abs(b)   # fptoui of a negative value is poison in LLVM IR
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


def test_bit_ops():
  a = np.array([0, 1, 8, -1, -2**31] * 26, np.int32)[:N]
  b = np.arange(N, dtype=np.int32) * 7919
  got = run_direct(kernels_of("elementwise")["cttz_brev_i32"], [np.zeros(N, np.int32), a, b], (2, 1, 1), (64, 1, 1))[0]
  ctz = np.array([32 if x == 0 else (int(x) & -int(x)).bit_length() - 1 for x in a.view(np.uint32)], np.int64)
  brev = np.array([int(f"{int(x):032b}"[::-1], 2) for x in b.view(np.uint32)], np.int64)
  np.testing.assert_array_equal(got, (ctz + brev).astype(np.uint32).view(np.int32))


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_wmma_fragments(dt):
  """Per lane: A row l%16 (K 0..15), B column l%16, C/D element (2e + l//16, l%16); D = semantics.wmma."""
  from refgrad.dtype import dtypes
  from refgrad.uop.semantics import wmma
  rng = np.random.default_rng(5)
  A, B = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32)
  C = rng.standard_normal((16, 16)).astype(np.float32)
  if dt == "f16": As, Bs, din = A.astype(np.float16), B.astype(np.float16), dtypes.float16
  else: As, Bs, din = (A.view(np.uint32) >> 16).astype(np.uint16), (B.view(np.uint32) >> 16).astype(np.uint16), dtypes.bfloat16
  lane = np.arange(32)
  a = As[lane % 16, :].copy()              # [32 lanes, 16]
  b = Bs[:, lane % 16].T.copy()            # lane l holds column l%16
  c = np.stack([C[2 * e + lane // 16, lane % 16] for e in range(8)], axis=1).astype(np.float32)
  d = run_direct(kernels_of("control")[f"wmma_{dt}"], [np.zeros((32, 8), np.float32), a, b, c], (1, 1, 1), (32, 1, 1))[0]
  want = wmma(As, Bs, C, din)
  got = np.zeros((16, 16), np.float32)
  for e in range(8): got[2 * e + lane // 16, lane % 16] = d[:, e]
  np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_long_loop_body():
  a = (np.random.default_rng(4).standard_normal(64 + 4) * 0.5).astype(np.float32)
  got = run_direct(kernels_of("control")["loop_big"], [np.zeros(64, np.float32), a], (1, 1, 1), (64, 1, 1), (4,))[0]
  want = np.zeros(64, np.float32)
  for lane in range(64):
    x, y = np.float32(1), np.float32(0)
    for k in range(4):
      v = a[lane + k]
      for _ in range(16):
        x = np.float32(x * v)
        y = np.float32(y + x)
    want[lane] = y
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("form", ["ss", "su", "uu"])
def test_dot4(form):
  rng = np.random.default_rng(9)
  a, b = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32), rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
  got = run_direct(kernels_of("control")[f"dot4_{form}"], [np.zeros(32, np.int32), a.view(np.int32), b.view(np.int32)], (1, 1, 1), (32, 1, 1))[0]
  ab = a.view(np.uint8).reshape(32, 4).astype(np.int64)
  bb = b.view(np.uint8).reshape(32, 4).astype(np.int64)
  if form[0] == "s": ab = a.view(np.int8).reshape(32, 4).astype(np.int64)
  if form[1] == "s": bb = b.view(np.int8).reshape(32, 4).astype(np.int64)
  want = ((ab * bb).sum(axis=1) + np.arange(32)) & 0xFFFFFFFF
  np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.uint32))


def test_3d_ids_partial_waves():
  """Work-items 5x3x2 (30: one partial wave) in 2x2x2 workgroups: v0 packs x | y << 10 | z << 20, the workgroup ids
  follow the user SGPRs in X, Y, Z order."""
  got = run_direct(kernels_of("control")["ids3d"], [np.zeros(240, np.int32)], (2, 2, 2), (5, 3, 2))[0]
  want = np.zeros(240, np.int64)
  for gz in range(2):
    for gy in range(2):
      for gx in range(2):
        for lz in range(2):
          for ly in range(3):
            for lx in range(5):
              want[((gz * 2 + gy) * 2 + gx) * 30 + (lz * 3 + ly) * 5 + lx] = gx << 24 | gy << 20 | gz << 16 | lz << 8 | ly << 4 | lx
  np.testing.assert_array_equal(got, want.astype(np.int32))
