"""The reference semantics checked against independent exact computations: Python ints for integer
ops, fractions.Fraction (decoded from raw bits, rounded with integer arithmetic) for float ops,
MULACC and casts."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refgrad.dtype import DType, dtypes
from refgrad.uop import semantics as S
from refgrad.uop.ops import GroupOp, Ops

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")   # numpy must never warn inside evaluate

FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
INTS = dtypes.ints
ALL = (dtypes.bool, *INTS, *FLOATS)
FMT = {dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52)}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
HYP = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------
# an independent exact model of the float formats: bits <-> (sign, Fraction | 'inf' | 'nan')

def to_bits(x: np.ndarray, d: DType) -> list[int]: return np.asarray(x).view(UINT[d.itemsize]).reshape(-1).tolist()
def from_bits(bits: list[int], d: DType) -> np.ndarray: return np.array(bits, UINT[d.itemsize]).view(d.np)

def decode(b: int, d: DType) -> tuple[int, Fraction | str]:
  E, M = FMT[d]
  sign, e, m = b >> (E + M), (b >> M) & ((1 << E) - 1), b & ((1 << M) - 1)
  if e == (1 << E) - 1: return sign, ("nan" if m else "inf")
  bias = (1 << (E - 1)) - 1
  v = Fraction(m, 1 << M) * Fraction(2) ** (1 - bias) if e == 0 else Fraction((1 << M) + m, 1 << M) * Fraction(2) ** (e - bias)
  return sign, v

def value(b: int, d: DType) -> Fraction | float:
  """A finite value as a Fraction (sign applied), or a float nan/inf."""
  sign, v = decode(b, d)
  if v == "nan": return math.nan
  if v == "inf": return -math.inf if sign else math.inf
  return -v if sign else v

def encode(q: Fraction | float, d: DType, zero_sign: int = 0) -> int:
  """Round an exact value to the bits of d, to nearest with ties to even; zero_sign for an exact 0."""
  E, M = FMT[d]
  inf = ((1 << E) - 1) << M
  if isinstance(q, float):
    if math.isnan(q): return inf | (1 << (M - 1))
    if math.isinf(q): return inf | ((q < 0) << (E + M))
    q = Fraction(q)
  sign = int(q < 0) if q != 0 else zero_sign
  q = abs(q)
  bias = (1 << (E - 1)) - 1
  emin = 1 - bias
  e = emin
  if q != 0:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q: e -= 1
    e = max(e, emin)
  n = round(q / Fraction(2) ** (e - M))   # Fraction rounds half to even
  if n == 1 << (M + 1): n, e = 1 << M, e + 1
  bits = n if n < (1 << M) else ((e + bias) << M) | (n - (1 << M))
  return min(bits, inf) | (sign << (E + M))

def is_nan_bits(b: int, d: DType) -> bool: return decode(b, d)[1] == "nan"

def assert_float_matches(got: np.ndarray, want_bits: list[int], d: DType, what: str) -> None:
  gb = to_bits(got, d)
  for i, (g, w) in enumerate(zip(gb, want_bits)):
    ok = (is_nan_bits(g, d) and is_nan_bits(w, d)) or g == w
    assert ok, f"{what} lane {i}: got {g:#x} ({value(g, d)}), want {w:#x} ({value(w, d)})"

def special_bits(d: DType) -> list[int]:
  E, M = FMT[d]
  s, inf = 1 << (E + M), ((1 << E) - 1) << M
  one = ((1 << (E - 1)) - 1) << M
  pos = [0, 1, (1 << M) - 1, 1 << M, one, one + 1, one - 1, inf - 1, inf, inf | (1 << (M - 1)), inf | 1, inf | (1 << (M - 1)) | 5]
  return pos + [p | s for p in pos]

def random_bits(d: DType, n: int, rng: np.random.Generator) -> list[int]:
  """Random bit patterns (every exponent equally likely: subnormals, huge, tiny, inf, NaN) plus the specials."""
  return special_bits(d) + rng.integers(0, 1 << (8 * d.itemsize), n, dtype=np.uint64, endpoint=False).tolist()

def ev(op: Ops, d: DType, *xs: np.ndarray, sd: DType | None = None) -> np.ndarray:
  sdt = sd if sd is not None else d
  sdts = [dtypes.bool.vec(sdt.count), sdt, sdt] if op is Ops.WHERE else [sdt] * len(xs)
  return S.evaluate(op, d, list(xs), sdts)


# ---------------------------------------------------------------------------------------------
# integers against Python ints

def int_values(d: DType, n: int, rng: np.random.Generator) -> list[int]:
  lo, hi = int(dtypes.min(d)), int(dtypes.max(d))
  edge = [lo, lo + 1, hi, hi - 1, 0, 1, 2, 3, 7, d.bits - 1, d.bits, d.bits + 1] + ([] if lo == 0 else [-1, -2, -3, -7])
  return edge + [int(v) for v in rng.integers(lo, hi, n, dtype=np.int64 if lo < 0 else np.uint64, endpoint=True)]

def wrap(v: int, d: DType) -> int:
  v &= (1 << d.bits) - 1
  return v - (1 << d.bits) if not dtypes.is_unsigned(d) and v >> (d.bits - 1) else v

def int_ref(op: Ops, a: int, b: int, d: DType) -> int | bool | None:
  """The exact result, or None where the op is undefined."""
  if op is Ops.ADD: return wrap(a + b, d)
  if op is Ops.MUL: return wrap(a * b, d)
  if op is Ops.MAX: return max(a, b)
  if op is Ops.CMPLT: return a < b
  if op is Ops.CMPNE: return a != b
  if op is Ops.XOR: return a ^ b if a >= 0 and b >= 0 else wrap(a ^ b, d)
  if op is Ops.OR: return wrap(a | b, d)
  if op is Ops.AND: return wrap(a & b, d)
  if op in (Ops.IDIV, Ops.MOD):
    if b == 0 or (a == dtypes.min(d) and b == -1 and not dtypes.is_unsigned(d)): return None
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q if op is Ops.IDIV else a - q * b
  if not 0 <= b < d.bits: return None
  if op is Ops.SHL: return wrap(a << b, d)
  return a >> b   # Python's >> on ints is arithmetic; unsigned values are non-negative, so logical

@pytest.mark.parametrize("d", INTS, ids=str)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.XOR, Ops.OR, Ops.AND, Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR],
                         ids=lambda o: o.name)
def test_int_binary(op: Ops, d: DType) -> None:
  rng = np.random.default_rng(op.value * 31 + d.priority)
  vals = int_values(d, 30, rng)
  pairs = [(a, b) for a in vals for b in vals]
  if op in (Ops.SHL, Ops.SHR): pairs += [(a, int(s)) for a in vals for s in range(d.bits)]
  a, b = (np.array([p[i] for p in pairs], d.np) for i in (0, 1))
  got = ev(op, dtypes.bool if op in GroupOp.Comparison else d, a, b, sd=d).tolist()
  for (x, y), g in zip(pairs, got):
    want = int_ref(op, x, y, d)
    if want is not None: assert g == want, f"{op.name} {d}: {x}, {y} gave {g}, want {want}"

@pytest.mark.parametrize("d", INTS, ids=str)
def test_int_neg_wraps(d: DType) -> None:
  vals = int_values(d, 100, np.random.default_rng(d.priority))
  got = ev(Ops.NEG, d, np.array(vals, d.np)).tolist()
  assert got == [wrap(-v, d) for v in vals]

def test_shl_of_negative_is_defined_and_shr_is_arithmetic() -> None:
  x = np.array([-1, -128, -3, 64], np.int8)
  assert ev(Ops.SHL, dtypes.int8, x, np.array([1, 1, 7, 1], np.int8)).tolist() == [-2, 0, -128, -128]
  assert ev(Ops.SHR, dtypes.int8, x, np.array([7, 3, 1, 6], np.int8)).tolist() == [-1, -16, -2, 1]
  assert ev(Ops.SHR, dtypes.uint8, np.array([255, 128], np.uint8), np.array([7, 3], np.uint8)).tolist() == [1, 16]

def test_bool_ops() -> None:
  a, b = np.array([False, False, True, True]), np.array([False, True, False, True])
  want = {Ops.XOR: [0, 1, 1, 0], Ops.OR: [0, 1, 1, 1], Ops.AND: [0, 0, 0, 1], Ops.MAX: [0, 1, 1, 1], Ops.CMPLT: [0, 1, 0, 0], Ops.CMPNE: [0, 1, 1, 0]}
  for op, w in want.items():
    got = ev(op, dtypes.bool, a, b)
    assert got.dtype == np.bool_ and got.tolist() == [bool(v) for v in w], op
  assert ev(Ops.WHERE, dtypes.bool, a, b, ~b).tolist() == [True, False, False, True]


# ---------------------------------------------------------------------------------------------
# float arithmetic against exact rationals

def sqrt_ref(q: Fraction, d: DType) -> int:
  """Correctly rounded sqrt: floor(sqrt) at 2**-1200 resolution, nudged by a half when inexact."""
  k = 1200
  n = q.numerator * 4 ** k // q.denominator
  r = math.isqrt(n)
  exact = r * r == n and q.numerator * 4 ** k % q.denominator == 0
  return encode(Fraction(2 * r + (0 if exact else 1), 2 ** (k + 1)), d)

def float_ref(op: Ops, d: DType, xb: list[int]) -> int:
  vals = [value(b, d) for b in xb]
  signs = [decode(b, d)[0] for b in xb]
  if any(isinstance(v, float) for v in vals):   # inf/nan operands: IEEE through float64 is exact for these
    f = [float(v) for v in vals]
    with np.errstate(all="ignore"):
      r = {Ops.ADD: lambda: np.float64(f[0]) + f[1], Ops.MUL: lambda: np.float64(f[0]) * f[1], Ops.RECIP: lambda: 1 / np.float64(f[0]),
           Ops.SQRT: lambda: np.sqrt(np.float64(f[0]))}[op]()
    return encode(float(r), d, int(np.signbit(r)))
  a = vals[0]
  if op is Ops.ADD: return encode(a + vals[1], d, signs[0] & signs[1])
  if op is Ops.MUL: return encode(a * vals[1], d, signs[0] ^ signs[1])
  if op is Ops.RECIP: return encode(math.copysign(math.inf, -1.0 if signs[0] else 1.0), d) if a == 0 else encode(1 / a, d)
  if a == 0: return encode(Fraction(0), d, signs[0])
  return encode(math.nan, d) if a < 0 else sqrt_ref(a, d)

@pytest.mark.parametrize("d", FLOATS, ids=str)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.RECIP, Ops.SQRT], ids=lambda o: o.name)
def test_float_ops_correctly_rounded(op: Ops, d: DType) -> None:
  """Includes the claim that float16/bfloat16 computed in float32 and rounded once are correctly rounded."""
  rng = np.random.default_rng(op.value + 7 * d.priority)
  n = 1000
  a = random_bits(d, n, rng)
  # operands of similar magnitude too, so sums cancel and products stay in range
  b = random_bits(d, n, rng)
  E, M = FMT[d]
  near = [(x & ~(((1 << E) - 1) << M)) | (((x >> M) & ((1 << E) - 1)) << M) for x in a]
  b = [int(v) for v in b[: len(a) // 2]] + [y ^ (int(rng.integers(0, 2)) << (E + M)) for y in near[len(a) // 2:]]
  args = [a] if op in GroupOp.Unary else [a, b[: len(a)]]
  got = ev(op, d, *[from_bits(x, d) for x in args])
  want = [float_ref(op, d, list(t)) for t in zip(*args)]
  assert_float_matches(got, want, d, f"{op.name} {d}")

@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_neg_cmp_where_exact(d: DType) -> None:
  rng = np.random.default_rng(d.priority)
  a, b = random_bits(d, 300, rng), random_bits(d, 300, rng)
  E, M = FMT[d]
  assert to_bits(ev(Ops.NEG, d, from_bits(a, d)), d) == [x ^ (1 << (E + M)) for x in a]
  va, vb = [value(x, d) for x in a], [value(x, d) for x in b]
  lt, ne = ev(Ops.CMPLT, dtypes.bool, from_bits(a, d), from_bits(b, d), sd=d), ev(Ops.CMPNE, dtypes.bool, from_bits(a, d), from_bits(b, d), sd=d)
  assert lt.tolist() == [bool(x < y) for x, y in zip(va, vb)]
  assert ne.tolist() == [bool(x != y) for x, y in zip(va, vb)]   # nan != anything; -0 == +0
  c = rng.integers(0, 2, len(a)).astype(bool)
  assert to_bits(ev(Ops.WHERE, d, c, from_bits(a, d), from_bits(b, d)), d) == [x if k else y for k, x, y in zip(c, a, b)]  # NaN payloads too

def test_denormals_are_kept() -> None:
  """Guards against FTZ/DAZ set in the process (e.g. by a library built with -ffast-math)."""
  tiny = np.array([2.0 ** -126], np.float32)
  assert ev(Ops.MUL, dtypes.float32, tiny, np.array([0.5], np.float32)).tolist() == [2.0 ** -127]
  assert ev(Ops.ADD, dtypes.float64, np.array([5e-324]), np.array([5e-324])).tolist() == [1e-323]
  assert ev(Ops.MUL, dtypes.float16, np.array([2.0 ** -14], np.float16), np.array([2.0 ** -10], np.float16)).tolist() == [2.0 ** -24]


# ---------------------------------------------------------------------------------------------
# MAX and same_bits

@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_max_is_commutative_bit_for_bit(d: DType) -> None:
  sp = special_bits(d)
  a = [x for x in sp for _ in sp]
  b = [y for _ in sp for y in sp]
  ab = to_bits(ev(Ops.MAX, d, from_bits(a, d), from_bits(b, d)), d)
  ba = to_bits(ev(Ops.MAX, d, from_bits(b, d), from_bits(a, d)), d)
  for x, y, r, r2 in zip(a, b, ab, ba):
    vx, vy = value(x, d), value(y, d)
    if (isinstance(vx, float) and math.isnan(vx)) or (isinstance(vy, float) and math.isnan(vy)):
      assert is_nan_bits(r, d) and is_nan_bits(r2, d)
      continue
    assert r == r2, f"MAX({x:#x}, {y:#x}) = {r:#x} but MAX({y:#x}, {x:#x}) = {r2:#x}"
    if vx == vy == 0: assert r == (x & y), "MAX(+0, -0) must be +0"
    else: assert r == (x if vx > vy else y)

@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_same_bits_nan_rule(d: DType) -> None:
  E, M = FMT[d]
  inf, sgn = ((1 << E) - 1) << M, 1 << (E + M)
  nans = [inf | 1, inf | (1 << (M - 1)), sgn | inf | 3]
  a = from_bits([nans[0], nans[1], 0, 0, inf, 1], d)
  b = from_bits([nans[2], nans[0], sgn, 0, inf, 2], d)
  assert S.same_bits(a, b, d).tolist() == [True, True, False, True, True, False]
  assert not S.same_bits(from_bits([inf | 1], d), from_bits([inf], d), d)[0]   # NaN vs inf differ

def test_same_bits_ints_and_bad_dtype() -> None:
  assert S.same_bits(np.array([1, -1], np.int8), np.array([1, 1], np.int8), dtypes.int8).tolist() == [True, False]
  with pytest.raises(TypeError, match="stored as numpy uint16"): S.same_bits(np.zeros(1, np.float32), np.zeros(1, np.float32), dtypes.bfloat16)


# ---------------------------------------------------------------------------------------------
# MULACC: one rounding of the exact a*b + c

def fma_ref(ab: int, bb: int, cb: int, d: DType) -> int:
  a, b, c = value(ab, d), value(bb, d), value(cb, d)
  if any(isinstance(v, float) for v in (a, b, c)):
    fa, fb, fc = float(a), float(b), float(c)
    if math.isnan(fa) or math.isnan(fb) or math.isnan(fc): return encode(math.nan, d)
    if math.isinf(fa) or math.isinf(fb):
      if fa == 0 or fb == 0: return encode(math.nan, d)
      p = math.copysign(math.inf, fa * fb if not (math.isinf(fa) and math.isinf(fb)) else math.copysign(1, fa) * math.copysign(1, fb))
      if math.isinf(fc) and fc != p: return encode(math.nan, d)
      return encode(p, d)
    return encode(fc, d)
  p = a * b
  exact = p + c
  psign = decode(ab, d)[0] ^ decode(bb, d)[0]
  zsign = psign & decode(cb, d)[0] if p == 0 and c == 0 else 0
  return encode(exact, d, zsign)

def check_fma(d: DType, triples: list[tuple[int, int, int]]) -> None:
  a, b, c = (from_bits([t[i] for t in triples], d) for i in range(3))
  got = ev(Ops.MULACC, d, a, b, c)
  assert_float_matches(got, [fma_ref(*t, d) for t in triples], d, f"MULACC {d} on {[tuple(hex(v) for v in t) for t in triples][:3]}...")

def bits_st(d: DType) -> st.SearchStrategy[int]: return st.integers(0, (1 << (8 * d.itemsize)) - 1)

def trap_triples(d: DType, rng: np.random.Generator, n: int) -> list[tuple[int, int, int]]:
  """a, b with short significands so a*b lands exactly on a midpoint of d, and a tiny c that decides the
  rounding; plus c = -RN(a*b) (the exact low part survives alone) and c near -a*b (deep cancellation)."""
  E, M = FMT[d]
  out = []
  for _ in range(n):
    h = (M + 2) // 2
    ma, mb = int(rng.integers(1 << h, 1 << (h + 1))) | 1, int(rng.integers(1 << h, 1 << (h + 1))) | 1
    ea, eb = int(rng.integers(-20, 20)), int(rng.integers(-20, 20))
    A, B = Fraction(ma) * Fraction(2) ** (ea - h), Fraction(mb) * Fraction(2) ** (eb - h)
    sa, sb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    ab, bb = encode(A, d) | (sa << (E + M)), encode(B, d) | (sb << (E + M))
    p = value(ab, d) * value(bb, d)
    bias = (1 << (E - 1)) - 1
    tiny_exp = int(rng.integers(2 - bias - M, max(3 - bias - M, -60))) if d != dtypes.float16 else int(rng.integers(-24, -14))
    tiny = encode(Fraction(2) ** tiny_exp * int(rng.integers(1, 4)), d) | (int(rng.integers(0, 2)) << (E + M))
    rn = encode(p, d)
    near = encode(-p * (1 + Fraction(int(rng.integers(-8, 9)), 1 << int(rng.integers(M - 3, M + 30)))), d)
    out += [(ab, bb, tiny), (ab, bb, rn ^ (1 << (E + M))), (ab, bb, near)]
    # c a power of two and a*b of the other sign around half the spacing just below |c|
    k = int(rng.integers(-5, 6))
    pw = encode(Fraction(2) ** k, d) | (sa << (E + M))
    for f in (Fraction(1), 1 + Fraction(1, 1 << h), 1 - Fraction(1, 1 << h), Fraction(2), Fraction(1, 2)):
      out.append((encode(f, d) | ((1 - sa) << (E + M)), encode(Fraction(2) ** (k - M - 2), d), pw))
  return out

@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_mulacc_random_and_traps(d: DType) -> None:
  rng = np.random.default_rng(100 + d.priority)
  n = 600
  a, b, c = random_bits(d, n, rng), random_bits(d, n, rng), random_bits(d, n, rng)
  check_fma(d, list(zip(a, b, c)) + trap_triples(d, rng, 300))

@pytest.mark.parametrize("d", FLOATS, ids=str)
@HYP
@given(data=st.data())
def test_mulacc_hypothesis(d: DType, data: st.DataObject) -> None:
  E, M = FMT[d]
  trip = st.tuples(bits_st(d), bits_st(d), bits_st(d))
  # also operands of moderate exponent so products and addends meet
  mid = st.builds(lambda s, e, m: (s << (E + M)) | (e << M) | m, st.integers(0, 1),
                  st.integers(max(1, (1 << (E - 1)) - 1 - 12), (1 << (E - 1)) - 1 + 12), st.integers(0, (1 << M) - 1))
  check_fma(d, data.draw(st.lists(st.one_of(trip, st.tuples(mid, mid, mid), st.tuples(mid, mid, bits_st(d))), min_size=1, max_size=40)))

def test_mulacc_float64_double_rounding_traps() -> None:
  two = Fraction(2)
  cases = [
    (1 + two ** -27, 1 + two ** -26 + two ** -60, -(two ** -26 + two ** -27)),   # exact 1 + 2**-53 + tiny: rounds up
    (1 + two ** -27, 1 + two ** -26, -(two ** -26 + two ** -27)),                 # exact midpoint 1 + 2**-53: ties to even
    (1 + two ** -27, 1 - two ** -27, -1),                                         # pure cancellation, -2**-54
    (two ** 512, two ** 512, -(two ** 1023)),                                     # a*b overflows float64, the sum does not
    (two ** -537, two ** -537, Fraction(0)),                                      # the smallest subnormal, exactly
    (3 * two ** -540, two ** -536, -(two ** -1074)),                              # a subnormal result with rounding
    (two ** -600, -(two ** -500), Fraction(0)),                                   # underflows to -0
    (1 + two ** -52, 1 - two ** -52, -1),                                         # -2**-104
  ]
  bits = [tuple(encode(v, dtypes.float64) for v in t) for t in cases]
  check_fma(dtypes.float64, bits)
  # the float32 trap: the exact sum sits 2**-100 off a float32 midpoint that plain float64 rounding hits
  f = [(1 + two ** -12, 1 + two ** -12, two ** -100), (1 + two ** -12, 1 + two ** -12, -(two ** -100))]
  check_fma(dtypes.float32, [tuple(encode(v, dtypes.float32) for v in t) for t in f])
  got = ev(Ops.MULACC, dtypes.float32, *(np.array([v], np.float32) for v in (1 + 2 ** -12, 1 + 2 ** -12, 2.0 ** -100)))
  assert got[0] == np.float32(1 + 2 ** -11 + 2 ** -23)

@HYP
@given(st.lists(st.tuples(st.floats(allow_nan=False, allow_infinity=False), st.floats(allow_nan=False, allow_infinity=False)), min_size=1, max_size=30))
def test_add_round_to_odd_and_exact_parts(pairs: list[tuple[float, float]]) -> None:
  a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
  with np.errstate(all="ignore"):
    fin = (np.abs(a + b) < 2.0 ** 1020) & ((np.abs(a * b) > 2.0 ** -900) | (a * b == 0))   # no neighbour of the sum is inf
  a, b = a[fin], b[fin]
  r = S.add_round_to_odd(a, b)
  s, e = S.two_sum(a, b)
  for x, y, z, s1, e1 in zip(a.tolist(), b.tolist(), r.tolist(), s.tolist(), e.tolist()):
    exact = Fraction(x) + Fraction(y)
    assert Fraction(s1) + Fraction(e1) == exact
    if Fraction(z) != exact:
      lo, hi = sorted([z, math.nextafter(z, math.inf if Fraction(z) < exact else -math.inf)])
      assert Fraction(lo) < exact < Fraction(hi) and np.array([z]).view(np.uint64)[0] & 1 == 1
  p, pe = S.two_prod(a, b)
  with np.errstate(all="ignore"):
    ok = (np.abs(a) < 2.0 ** 990) & (np.abs(b) < 2.0 ** 990) & (np.abs(a * b) > 2.0 ** -900) & (np.abs(a * b) < 2.0 ** 1000)
  for x, y, p1, e1 in zip(a[ok].tolist(), b[ok].tolist(), p[ok].tolist(), pe[ok].tolist()):
    assert Fraction(p1) + Fraction(e1) == Fraction(x) * Fraction(y)


# ---------------------------------------------------------------------------------------------
# casts

def src_values(s: DType, rng: np.random.Generator) -> np.ndarray:
  if s == dtypes.bool: return np.array([False, True, True, False])
  if dtypes.is_int(s): return np.array(int_values(s, 200, rng), s.np)
  bits = random_bits(s, 300, rng)
  # plus values inside the integer ranges (with fractions) so float->int has defined lanes to check
  edges = [v * k for v in (1, 127, 128, 255, 256, 32767, 32768, 65535, 2.0 ** 31, 2.0 ** 32, 2.0 ** 63, 2.0 ** 64) for k in (1, -1, 0.999, 1.001)]
  vals = np.concatenate([rng.uniform(-300, 300, 100), rng.uniform(-70000, 70000, 100), rng.uniform(-2.0 ** 64, 2.0 ** 64, 100), edges, [0.5, -0.5, -0.9]])
  return np.concatenate([from_bits(bits, s), S.round_float(vals, s)])

def exact_of(x: np.ndarray, s: DType) -> list[Fraction | float | bool]:
  if dtypes.is_float(s): return [value(b, s) for b in to_bits(x, s)]
  return [int(v) for v in x.tolist()]

@pytest.mark.parametrize("s", ALL, ids=str)
@pytest.mark.parametrize("d", ALL, ids=str)
def test_cast_matrix(s: DType, d: DType) -> None:
  rng = np.random.default_rng(s.priority * 16 + d.priority)
  x = src_values(s, rng)
  got = ev(Ops.CAST, d, x, sd=s)
  assert got.dtype == d.np and got.shape == x.shape
  vals = exact_of(x, s)
  sbits = to_bits(x, s) if dtypes.is_float(s) else [0] * len(vals)
  if d == dtypes.bool:
    assert got.tolist() == [bool(v != 0) for v in vals]   # nan != 0
  elif dtypes.is_int(d):
    gv = got.tolist()
    for v, g in zip(vals, gv):
      if isinstance(v, float): continue   # nan/inf: undefined
      t = math.trunc(v)
      if s == dtypes.bool or dtypes.is_int(s): assert g == wrap(t, d), (v, g)
      elif dtypes.min(d) <= t <= dtypes.max(d): assert g == t, (v, g)
  else:
    want = [encode(v, d) if isinstance(v, float) else encode(v, d, decode(b, s)[0] if dtypes.is_float(s) else 0) for v, b in zip(vals, sbits)]
    assert_float_matches(got, want, d, f"CAST {s}->{d}")
    if dtypes.is_float(s):   # NaN stays NaN and keeps its sign
      for b, g in zip(sbits, to_bits(got, d)):
        if is_nan_bits(b, s): assert is_nan_bits(g, d) and (g >> (d.bits - 1)) == (b >> (s.bits - 1))

def near_ties_int(d: DType, p: int, rng: np.random.Generator) -> list[int]:
  """Integers at, just above and just below the midpoints between neighbours of a p-bit format."""
  lo, hi = int(dtypes.min(d)), int(dtypes.max(d))
  out = []
  for sh in range(1, d.bits - p + 1):
    for _ in range(6):
      base = int(rng.integers(1 << (p - 1), 1 << p))
      mid = (2 * base + 1) << (sh - 1)
      for v in (mid - 1, mid, mid + 1, mid + (1 << max(sh - 3, 0)), -mid, -mid - 1, -mid + 1):
        if lo <= v <= hi: out.append(v)
  return out + [hi, lo, hi - 1]

@pytest.mark.parametrize("d", [dtypes.bfloat16, dtypes.float16, dtypes.float32, dtypes.float64], ids=str)
@pytest.mark.parametrize("s", [dtypes.int64, dtypes.uint64, dtypes.int32, dtypes.uint32], ids=str)
def test_int_to_float_near_ties_round_once(s: DType, d: DType) -> None:
  vals = near_ties_int(s, FMT[d][1] + 1, np.random.default_rng(s.priority + 20 * d.priority))
  got = ev(Ops.CAST, d, np.array(vals, s.np), sd=s)
  assert_float_matches(got, [encode(Fraction(v), d) for v in vals], d, f"CAST {s}->{d}")

def test_int64_to_bfloat16_double_rounding_example() -> None:
  v = 2 ** 60 + 2 ** 52 + 1   # float64 rounds it to a bfloat16 midpoint; one rounding goes up
  got = ev(Ops.CAST, dtypes.bfloat16, np.array([v], np.int64), sd=dtypes.int64)
  assert to_bits(got, dtypes.bfloat16) == [encode(Fraction(2 ** 60 + 2 ** 53), dtypes.bfloat16)]

@pytest.mark.parametrize("d", [dtypes.bfloat16, dtypes.float16, dtypes.float32], ids=str)
@pytest.mark.parametrize("s", [dtypes.float64, dtypes.float32], ids=str)
def test_float_narrowing_near_ties(s: DType, d: DType) -> None:
  if s.itemsize <= d.itemsize: return
  E, M = FMT[d]
  rng = np.random.default_rng(s.priority + d.priority)
  bias = (1 << (E - 1)) - 1
  vals = []
  for _ in range(400):
    e = int(rng.integers(1 - bias - M - 2, bias + 2))
    mid = Fraction(2 * int(rng.integers(1 << M, 1 << (M + 1))) + 1) * Fraction(2) ** (e - M - 1)
    b = encode(mid, s) | (int(rng.integers(0, 2)) << (s.bits - 1))
    vals += [b - 1, b, b + 1]
  mx = Fraction(2 - Fraction(1, 1 << M)) * Fraction(2) ** bias
  thr = encode(mx + Fraction(2) ** (bias - M - 1), s)
  vals += [thr - 1, thr]   # just below and at the overflow threshold
  got = ev(Ops.CAST, d, from_bits(vals, s), sd=s)
  want = [encode(value(b, s), d, decode(b, s)[0]) if not isinstance(value(b, s), float) else encode(value(b, s), d) for b in vals]
  assert_float_matches(got, want, d, f"CAST {s}->{d}")
  assert to_bits(got[-1:], d) == [((1 << E) - 1) << M] and to_bits(got[-2:-1], d) == [encode(mx, d)]

@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16, dtypes.float32], ids=str)
def test_round_float_random_float64(d: DType) -> None:
  rng = np.random.default_rng(d.priority)
  bits = random_bits(dtypes.float64, 2500, rng)
  # exponents around d's range, where the interesting roundings are
  E, M = FMT[d]
  near = rng.integers(1023 - (1 << (E - 1)) - M - 3, 1023 + (1 << (E - 1)) + 2, 2500)
  bits += [(int(s) << 63) | (int(e) << 52) | int(m) for s, e, m in zip(rng.integers(0, 2, 2500), near, rng.integers(0, 1 << 52, 2500, dtype=np.uint64))]
  # exact ties of d's normal grid, and one float64 ulp either side of them
  low = (1 << (52 - M)) - 1
  ties = [(b & ~low) | (1 << (51 - M)) for b in bits[-2500:]]
  bits += ties + [t + 1 for t in ties] + [t - 1 for t in ties]
  got = S.round_float(from_bits(bits, dtypes.float64), d)
  want = [encode(value(b, dtypes.float64), d, b >> 63) if not isinstance(value(b, dtypes.float64), float) else encode(value(b, dtypes.float64), d) for b in bits]
  assert_float_matches(got, want, d, f"round_float {d}")
  generic = S.round_f64_bits(from_bits(bits, dtypes.float64), E, M).astype(UINT[d.itemsize])   # the bit-level model of the C helpers
  assert_float_matches(generic.view(d.np) if d != dtypes.bfloat16 else generic, want, d, f"round_f64_bits {d}")

def test_f32_to_bf16_matches_f64_path_and_bf16_to_f32() -> None:
  rng = np.random.default_rng(5)
  u = np.concatenate([rng.integers(0, 1 << 32, 200000, dtype=np.uint64).astype(np.uint32), np.array(special_bits(dtypes.float32), np.uint32)])
  f = u.view(np.float32)
  a, b = S.f32_to_bf16(f), S.f64_to_bf16(S.to_float64(f, dtypes.float32))
  assert S.same_bits(a, b, dtypes.bfloat16).all()
  nan = np.isnan(f)
  assert (S._isnan(a, dtypes.bfloat16) == nan).all() and ((a[nan] >> 15) == (u[nan] >> 31)).all() and (a[nan] & 0x40).all()   # quiet, sign kept
  h = np.arange(1 << 16, dtype=np.uint16)
  assert (S.bf16_to_f32(h).view(np.uint32) == h.astype(np.uint32) << 16).all()
  assert (S.f32_to_bf16(S.bf16_to_f32(h)) == np.where(S._isnan(h, dtypes.bfloat16), h | 0x40, h)).all()

def test_bitcast_reinterprets_bytes() -> None:
  rng = np.random.default_rng(9)
  for s in ALL:
    for d in ALL:
      if s.itemsize != d.itemsize or s == d: continue
      raw = rng.integers(0, 2 if dtypes.bool in (s, d) else 256, 64 * s.itemsize, dtype=np.uint8)
      x = raw.view(np.uint8 if s == dtypes.bool else s.np).astype(s.np) if s == dtypes.bool else raw.view(s.np)
      got = S.evaluate(Ops.BITCAST, d, [x], [s])
      assert got.dtype == d.np and got.tobytes() == raw.tobytes(), (s, d)
      assert not np.shares_memory(got, x)


# ---------------------------------------------------------------------------------------------
# native transcendentals

@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_native_transcendental_special_values(d: DType) -> None:
  def run(op: Ops, xs: list[float]) -> list[float]: return S.to_python(ev(op, d, S.from_python(xs, d)), d)
  inf, nan = math.inf, math.nan
  e = run(Ops.EXP2, [-inf, inf, nan, 0.0, 3.0, -1.0, 1e6])
  assert e[:2] == [0.0, inf] and math.isnan(e[2]) and e[3:] == [1.0, 8.0, 0.5, inf]
  lg = run(Ops.LOG2, [0.0, -0.0, -1.0, inf, nan, 8.0, 1.0, -inf])
  assert lg[:2] == [-inf, -inf] and math.isnan(lg[2]) and lg[3] == inf and math.isnan(lg[4]) and lg[5:7] == [3.0, 0.0] and math.isnan(lg[7])
  sn = run(Ops.SIN, [inf, -inf, nan, 0.0, -0.0])
  assert all(math.isnan(v) for v in sn[:3]) and sn[3:] == [0.0, -0.0] and math.copysign(1, sn[4]) == -1
  x = S.from_python([0.3, 1.7, 2.5], d)
  assert S.same_bits(ev(Ops.SIN, d, x), S.round_float(np.sin(S.to_float64(x, d)), d), d).all()   # float64 then one rounding


# ---------------------------------------------------------------------------------------------
# undefined behaviour

def ub(op: Ops, d: DType, *xs: np.ndarray, sd: DType | None = None) -> tuple[str, list[bool]] | None:
  sdt = sd or d
  r = S.ub_check(op, d, list(xs), [sdt] * len(xs))
  ev(op, d, *xs, sd=sdt)   # evaluating the same lanes neither raises nor warns
  return None if r is None else (r[0], np.asarray(r[1]).tolist())

def test_ub_integer_division() -> None:
  a, b = np.array([7, -128, -128, 5, 0], np.int8), np.array([0, -1, 2, 1, 0], np.int8)
  assert ub(Ops.IDIV, dtypes.int8, a, b) == ("integer division by zero", [True, False, False, False, True])
  assert ub(Ops.MOD, dtypes.int8, a, b) == ("integer division by zero", [True, False, False, False, True])
  b2 = np.array([3, -1, 2, 1, 1], np.int8)
  assert ub(Ops.IDIV, dtypes.int8, a, b2) == ("signed division overflow (MIN // -1)", [False, True, False, False, False])
  assert ub(Ops.MOD, dtypes.int8, a, b2) == ("signed division overflow (MIN % -1)", [False, True, False, False, False])
  assert ub(Ops.IDIV, dtypes.uint8, np.array([255], np.uint8), np.array([255], np.uint8)) is None
  assert ub(Ops.IDIV, dtypes.int64, np.array([-2 ** 63], np.int64), np.array([-2], np.int64)) is None

@pytest.mark.parametrize("d", INTS, ids=str)
@pytest.mark.parametrize("op", [Ops.SHL, Ops.SHR], ids=lambda o: o.name)
def test_ub_shift_range(op: Ops, d: DType) -> None:
  amts = [0, d.bits - 1, d.bits, d.bits + 5] + ([] if dtypes.is_unsigned(d) else [-1])
  a = np.ones(len(amts), d.np)
  assert ub(op, d, a, np.array(amts, d.np)) == (f"shift amount out of range [0, {d.bits})", [False, False, True, True] + [True] * (len(amts) - 4))
  assert ub(op, d, a[:2], np.array([0, d.bits - 1], d.np)) is None

@pytest.mark.parametrize("s", FLOATS, ids=str)
def test_ub_float_to_int(s: DType) -> None:
  x = S.from_python([1.5, math.nan, -math.inf, 2.0], s)
  assert ub(Ops.CAST, dtypes.int32, x, sd=s) == ("float->int cast of NaN/inf", [False, True, True, False])
  y = S.from_python([127.5, 128.0, -128.0, -129.0, -0.75], s)
  assert ub(Ops.CAST, dtypes.int8, y, sd=s) == ("float->int cast out of range of int8", [False, True, False, True, False])
  z = S.from_python([-0.75, -1.0, 255.0, 256.0], s)
  assert ub(Ops.CAST, dtypes.uint8, z, sd=s) == ("float->int cast out of range of uint8", [False, True, False, True])
  assert ub(Ops.CAST, dtypes.bool, x, sd=s) is None and ub(Ops.CAST, s, x, sd=s) is None

def test_ub_float_to_wide_ints() -> None:
  x = np.array([2.0 ** 63, 2.0 ** 63 - 1024, -(2.0 ** 63), 2.0 ** 64, 2.0 ** 64 - 2048, -0.5])
  assert ub(Ops.CAST, dtypes.int64, x, sd=dtypes.float64) == ("float->int cast out of range of int64", [True, False, False, True, True, False])
  assert ub(Ops.CAST, dtypes.uint64, x, sd=dtypes.float64) == ("float->int cast out of range of uint64", [False, False, True, True, False, False])
  got = ev(Ops.CAST, dtypes.uint64, x[[0, 1, 4, 5]], sd=dtypes.float64).tolist()
  assert got == [2 ** 63, 2 ** 63 - 1024, 2 ** 64 - 2048, 0]

def test_ub_bitcast_to_bool_and_every_reason_is_listed() -> None:
  assert ub(Ops.BITCAST, dtypes.bool, np.array([0, 1, 2], np.uint8), sd=dtypes.uint8) == ("bitcast to bool of a byte other than 0 or 1", [False, False, True])
  reasons = ["integer division by zero", "signed division overflow (MIN // -1)", "shift amount out of range [0, 8)",
             "float->int cast of NaN/inf", "float->int cast out of range of int8", "bitcast to bool of a byte other than 0 or 1"]
  assert all(any(r.startswith(k) for k in S.UNDEFINED) for r in reasons)
  for k in ("out-of-bounds access", "uninitialized read", "local memory race"): assert k in S.UNDEFINED
  assert "NaN sign and payload" in S.IMPLEMENTATION_DEFINED
  doc = " ".join((S.__doc__ or "").split())
  for k in (*S.UNDEFINED, *S.IMPLEMENTATION_DEFINED): assert k in doc, f"{k!r} is not stated in the module docstring"   # the written spec

def test_ub_mask_broadcasts_with_vectors() -> None:
  a = np.arange(8, dtype=np.int32).reshape(2, 4)
  b = np.array([[1, 0, 1, 1]], np.int32)
  r = S.ub_check(Ops.IDIV, dtypes.int32.vec(4), [a, b], [dtypes.int32.vec(4)] * 2)
  assert r is not None and r[1].shape == (2, 4) and r[1].tolist() == [[False, True, False, False]] * 2

def edge_arrays(d: DType) -> np.ndarray:
  if dtypes.is_float(d): return from_bits(special_bits(d), d)
  if d == dtypes.bool: return np.array([False, True])
  return np.array(int_values(d, 0, np.random.default_rng(0)) + [-1 if not dtypes.is_unsigned(d) else 0], d.np)

@pytest.mark.parametrize("op", sorted(GroupOp.ALU - {Ops.WHERE}, key=lambda o: o.value), ids=lambda o: o.name)
def test_every_op_on_edge_values_never_raises_or_warns(op: Ops) -> None:
  n = 1 if op in GroupOp.Unary else 2 if op in GroupOp.Binary else 3
  for d in ALL:
    if d == dtypes.bool and op not in (Ops.XOR, Ops.OR, Ops.AND, Ops.CMPLT, Ops.CMPNE, Ops.MAX): continue
    if (op in GroupOp.IntOnly and not dtypes.is_int(d)) or ((op in GroupOp.FloatOnly or op is Ops.MULACC) and not dtypes.is_float(d)): continue
    if op in GroupOp.Bitwise and dtypes.is_float(d): continue
    e = edge_arrays(d)
    grids = np.meshgrid(*([e] * n), indexing="ij")
    out = ev(op, dtypes.bool if op in GroupOp.Comparison else d, *[g.reshape(-1) for g in grids], sd=d)
    assert out.shape == (len(e) ** n,)
    S.ub_check(op, dtypes.bool if op in GroupOp.Comparison else d, [g.reshape(-1) for g in grids], [d] * n)


# ---------------------------------------------------------------------------------------------
# shapes, vectors, conversions to and from Python, input checks

def test_vectors_and_broadcasting() -> None:
  v4 = dtypes.float32.vec(4)
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  b = np.float32(2) * np.ones((1, 4), np.float32)
  got = S.evaluate(Ops.MUL, v4, [a, b], [v4, v4])
  assert got.shape == (3, 4) and (got == a * 2).all()
  cmp = S.evaluate(Ops.CMPLT, dtypes.bool.vec(4), [a, b], [v4, v4])
  assert cmp.dtype == np.bool_ and cmp.tolist()[0] == [True, True, False, False]
  w = S.evaluate(Ops.WHERE, v4, [cmp, a, b], [dtypes.bool.vec(4), v4, v4])
  assert w.tolist()[0] == [0.0, 1.0, 2.0, 2.0]
  c = S.evaluate(Ops.CAST, dtypes.int8.vec(4), [a], [v4])
  assert c.dtype == np.int8 and c.shape == (3, 4)
  s = S.evaluate(Ops.ADD, dtypes.int32, [np.array(3, np.int32), np.array(4, np.int32)], [dtypes.int32] * 2)
  assert s.shape == () and int(s) == 7

def test_as_const_and_round_trip_for_every_float() -> None:
  for d in FLOATS:
    for v in (0.1, -0.0, 1e300, -1e-300, 65520.0, math.inf):
      c = dtypes.as_const(v, d)
      assert isinstance(c, float) and math.copysign(1, c) == math.copysign(1, v)
      assert float(S.to_float64(S.round_float(np.array([c]), d), d)[0]) == c   # held exactly
    assert math.isnan(dtypes.as_const(math.nan, d))
  assert dtypes.as_const(65520.0, dtypes.float16) == math.inf and dtypes.as_const(65519.0, dtypes.float16) == 65504.0

def test_from_python_and_to_python() -> None:
  assert S.from_python([[1, 2], [300, -129]], dtypes.int8).tolist() == [[1, 2], [44, 127]]
  assert S.from_python(2 ** 64 - 1, dtypes.int64).tolist() == -1 and S.from_python([-1], dtypes.uint64).tolist() == [2 ** 64 - 1]
  assert S.from_python([2.9, -2.9, True], dtypes.int32).tolist() == [2, -2, 1]
  assert S.from_python([0, 2, math.nan], dtypes.bool).tolist() == [False, True, True]
  big = 2 ** 60 + 2 ** 52 + 1
  assert S.to_python(S.from_python([big], dtypes.bfloat16), dtypes.bfloat16) == [float(2 ** 60 + 2 ** 53)]
  assert S.to_python(S.from_python([2 ** 53 + 1], dtypes.float64), dtypes.float64) == [float(2 ** 53)]
  assert S.to_python(S.from_python([10 ** 400, -(10 ** 400)], dtypes.float32), dtypes.float32) == [math.inf, -math.inf]
  assert S.from_python([0.1], dtypes.float32).tolist() == [np.float32(0.1)]
  h = S.to_python(S.from_python([0.1, 1e-8], dtypes.float16), dtypes.float16)
  assert h == [float(np.float16(0.1)), float(np.float16(1e-8))] and all(isinstance(v, float) for v in h)
  assert S.to_python(np.array(5, np.uint64), dtypes.uint64) == [5] and S.to_python(np.array([True]), dtypes.bool) == [True]
  with pytest.raises(ValueError, match=r"not a value of dtypes\.int"): S.from_python([math.nan], dtypes.int32)

def test_bad_inputs_have_clear_errors() -> None:
  f32 = dtypes.float32
  with pytest.raises(TypeError, match=r"ADD operand 1: dtypes\.float is stored as numpy float32, got an array of float64"):
    S.evaluate(Ops.ADD, f32, [np.zeros(2, np.float32), np.zeros(2)], [f32, f32])
  with pytest.raises(ValueError, match=r"IDIV .* needs int operands"): S.evaluate(Ops.IDIV, f32, [np.zeros(1, np.float32)] * 2, [f32, f32])
  with pytest.raises(ValueError, match="not defined on bool"): S.evaluate(Ops.ADD, dtypes.bool, [np.zeros(1, bool)] * 2, [dtypes.bool] * 2)
  with pytest.raises(ValueError, match="takes 2 operands"): S.evaluate(Ops.ADD, f32, [np.zeros(1, np.float32)], [f32])
  with pytest.raises(ValueError, match="equal itemsize"): S.evaluate(Ops.BITCAST, dtypes.int32, [np.zeros(1, np.float64)], [dtypes.float64])
  with pytest.raises(ValueError, match="not an ALU op"): S.evaluate(Ops.LOAD, f32, [], [])
  with pytest.raises(ValueError, match="trailing axis of 4"):
    S.evaluate(Ops.NEG, f32.vec(4), [np.zeros((2, 3), np.float32)], [f32.vec(4)])
  with pytest.raises(ValueError, match="not a float dtype"): S.round_float(np.zeros(1), dtypes.int32)
