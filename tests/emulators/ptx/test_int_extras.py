"""Integer rows nvcc emits for CUDA intrinsics (PTX ISA 9.0 §9.7.1, §9.7.8, §9.7.16.2): lop3, sad, mul24/mad24, the prmt
modes, the SIMD video instructions with their selectors, masks, .sat and .add; nanosleep; atom.add on packed halves."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad.device import Device
from tests.emulators.ptx.ptxkit import HEAD, one

U32 = np.uint32
rng = np.random.default_rng(7)
A = np.concatenate([U32([0, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0x80808080, 0x7F7F7F7F, 0x00FF00FF, 0x12345678]),
                    rng.integers(0, 2**32, 56, dtype=np.uint64).astype(U32)])
B = np.concatenate([A[:8][::-1], rng.integers(0, 2**32, 56, dtype=np.uint64).astype(U32)])
C = rng.integers(0, 2**32, A.size, dtype=np.uint64).astype(U32)


def lanes(v: int, k: int, signed: bool, w: int | None = None) -> list[int]:
  """The k elements of v (each w bits, 32 // k by default), sign- or zero-extended."""
  w = w or 32 // k
  x = [(int(v) >> (w * i)) & ((1 << w) - 1) for i in range(k)]
  return [e - (1 << w) if signed and e >> (w - 1) else e for e in x]


@pytest.mark.parametrize("lut", [0x96, 0xE8, 0xF0, 0xCA, 0x00, 0xFF, 0x1E])
def test_lop3_truth_table(lut):
  r = one(f"lop3.b32 %d, %a, %b, %c, {lut}", [A, B, C], U32, ["b32"] * 3, "b32")
  want = [sum(((lut >> (((x >> i) & 1) << 2 | ((y >> i) & 1) << 1 | ((z >> i) & 1))) & 1) << i for i in range(32))
          for x, y, z in zip(A.tolist(), B.tolist(), C.tolist())]
  assert r.tolist() == want


@pytest.mark.parametrize("t", ["u32", "s32", "u64", "s64", "u16", "s16"])
def test_sad_exact_difference_wrapping_sum(t):
  w = int(t[1:])
  dt = np.dtype(f"{t[0].replace('s', 'i')}{w // 8}")
  full = rng.integers(0, 2**w, (3, 64), dtype=np.uint64) if w == 64 else rng.integers(0, 2**w, (3, 64))
  a, b, c = (full[i].astype(np.dtype(f"u{w // 8}")).view(dt) for i in range(3))
  a[:2], b[:2] = np.iinfo(dt).min, np.iinfo(dt).max   # |MIN - MAX| needs the full unsigned range
  r = one(f"sad.{t} %d, %a, %b, %c", [a, b, c], dt, [f"b{w}"] * 3, f"b{w}")
  want = [(abs(int(x) - int(y)) + int(z)) % 2**w for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]
  assert r.view(f"u{w // 8}").tolist() == want


def test_mul24_mad24():
  a = np.concatenate([U32([0x00FFFFFF, 0x00800000, 0xFF7FFFFF, 0x12345678]), A[4:]])
  b = np.concatenate([U32([0x00FFFFFF, 0x00800000, 0x00000003, 0xFEDCBA98]), B[4:]])
  def s24(v: int) -> int: v &= 0xFFFFFF; return v - (1 << 24) if v >> 23 else v
  for t, f in (("u32", lambda v: v & 0xFFFFFF), ("s32", s24)):
    prods = [f(int(x)) * f(int(y)) for x, y in zip(a, b)]
    assert one(f"mul24.lo.{t} %d, %a, %b", [a, b], U32, ["b32"] * 2, "b32").tolist() == [p & 0xFFFFFFFF for p in prods]
    assert one(f"mul24.hi.{t} %d, %a, %b", [a, b], U32, ["b32"] * 2, "b32").tolist() == [(p >> 16) & 0xFFFFFFFF for p in prods]
    assert one(f"mad24.lo.{t} %d, %a, %b, %c", [a, b, C], U32, ["b32"] * 3, "b32").tolist() == [(p + int(c)) & 0xFFFFFFFF for p, c in zip(prods, C)]
  big = U32([0x7FFFFFFF, 0x80000000, 5, 0x7FFFFFF0])
  x, y = U32([0x7FFFFF, 0x800000, 2, 0x7FFFFF]), U32([0x7FFFFF, 0x7FFFFF, 3, 0x7FFFFF])
  sat = one("mad24.hi.sat.s32 %d, %a, %b, %c", [x, y, big], np.int32, ["b32"] * 3, "s32").tolist()
  want = [max(-2**31, min(2**31 - 1, ((s24(int(p)) * s24(int(q))) >> 16) + int(c.view(np.int32)))) for p, q, c in zip(x, y, big)]
  assert sat == want


@pytest.mark.parametrize("mode, sels", [("f4e", ("3210", "4321", "5432", "6543")), ("b4e", ("5670", "6701", "7012", "0123")),
                                        ("rc8", ("0000", "1111", "2222", "3333")), ("ecl", ("3210", "3211", "3222", "3333")),
                                        ("ecr", ("0000", "1110", "2210", "3210")), ("rc16", ("1010", "3232", "1010", "3232"))])
def test_prmt_modes(mode, sels):
  a, b = np.full(8, 0x33221100, U32), np.full(8, 0x77665544, U32)
  c = U32([0, 1, 2, 3, 4, 5, 0xFFFFFFFE, 0xFFFFFFFF])   # only c's low two bits count
  r = one(f"prmt.b32.{mode} %d, %a, %b, %c", [a, b, c], U32, ["b32"] * 3, "b32").tolist()
  assert r == [int("".join(f"{int(ch) * 0x11:02x}" for ch in sels[int(k) & 3]), 16) for k in c]


OPS = {"vadd": lambda p, q: p + q, "vsub": lambda p, q: p - q, "vabsdiff": lambda p, q: abs(p - q), "vmin": min, "vmax": max,
       "vavrg": lambda p, q: (p + q + 1) >> 1 if p + q >= 0 else (p + q) >> 1}


def _video(op: str, k: int, dt: str, at: str, bt: str, sat: bool, add: bool, mask: list[int], asel: list[int], bsel: list[int]) -> list[int]:
  w = 32 // k
  out = []
  for x, y, z in zip(A.tolist(), B.tolist(), C.tolist()):
    ea = lanes(x | y << 32, 2 * k, at == "s32", w)
    eb = lanes(x | y << 32, 2 * k, bt == "s32", w)   # (elements 0..k-1 are a's, k..2k-1 b's)
    t = [OPS[op](ea[asel[i]], eb[bsel[i]]) for i in range(k)]
    if sat: t = [max(-(1 << (w - 1)), min((1 << (w - 1)) - 1, v)) if dt == "s32" else max(0, min((1 << w) - 1, v)) for v in t]
    if add: out.append((z + sum(t[i] for i in mask)) & 0xFFFFFFFF)
    else: out.append(sum(((t[i] if i in mask else lanes(z, k, False)[i]) & ((1 << w) - 1)) << (w * i) for i in range(k)))
  return out


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("k", [2, 4])
def test_simd_video_defaults_sat_add(op, k):
  lane = list(range(k))
  for dt, at, bt in (("u32", "u32", "u32"), ("s32", "s32", "s32"), ("s32", "u32", "s32")):
    ty = f"{dt}.{at}.{bt}"
    r = one(f"{op}{k}.{ty} %d, %a, %b, %c", [A, B, C], U32, ["b32"] * 3, "b32").tolist()
    assert r == _video(op, k, dt, at, bt, False, False, lane, lane, [k + i for i in lane]), ty
    r = one(f"{op}{k}.{ty}.sat %d, %a, %b, %c", [A, B, C], U32, ["b32"] * 3, "b32").tolist()
    assert r == _video(op, k, dt, at, bt, True, False, lane, lane, [k + i for i in lane]), ty + ".sat"
    r = one(f"{op}{k}.{ty}.add %d, %a, %b, %c", [A, B, C], U32, ["b32"] * 3, "b32").tolist()
    assert r == _video(op, k, dt, at, bt, False, True, lane, lane, [k + i for i in lane]), ty + ".add"


def test_simd_video_selectors_and_masks():
  # a.h21 takes a's high half and b's low half (lanes 1, 0 written high first); d.h1 keeps c's low half
  r = one("vadd2.u32.u32.u32 %d.h1, %a.h21, %b.h03, %c", [A, B, C], U32, ["b32"] * 3, "b32").tolist()
  assert r == _video("vadd", 2, "u32", "u32", "u32", False, False, [1], [1, 2], [3, 0])
  r = one("vmax4.s32.s32.s32.add %d.b20, %a.b7350, %b.b0123, %c", [A, B, C], U32, ["b32"] * 3, "b32").tolist()
  assert r == _video("vmax", 4, "s32", "s32", "s32", False, True, [0, 2], [0, 5, 3, 7], [3, 2, 1, 0])


@pytest.mark.parametrize("cmp, f", [("eq", lambda p, q: p == q), ("ne", lambda p, q: p != q), ("lt", lambda p, q: p < q), ("le", lambda p, q: p <= q),
                                    ("gt", lambda p, q: p > q), ("ge", lambda p, q: p >= q)])
def test_vset(cmp, f):
  for k in (2, 4):
    for ty, sg in (("u32.u32", False), ("s32.s32", True)):
      r = one(f"vset{k}.{ty}.{cmp} %d, %a, %b, %c", [A, B, C], U32, ["b32"] * 3, "b32").tolist()
      assert r == [sum(int(f(p, q)) << (32 // k * i) for i, (p, q) in enumerate(zip(lanes(x, k, sg), lanes(y, k, sg)))) for x, y in zip(A, B)]
      r = one(f"vset{k}.{ty}.{cmp}.add %d, %a, %b, %c", [A, B, C], U32, ["b32"] * 3, "b32").tolist()
      assert r == [(int(z) + sum(int(f(p, q)) for p, q in zip(lanes(x, k, sg), lanes(y, k, sg)))) & 0xFFFFFFFF for x, y, z in zip(A, B, C)]


def test_video_bad_selector_names_the_line():
  with pytest.raises(Exception, match=r"selector \.h4"):
    one("vadd2.u32.u32.u32 %d, %a.h40, %b, %c", [A, B, C], U32, ["b32"] * 3, "b32")


def test_nanosleep_and_packed_half_atomics():
  src = HEAD + """
.visible .entry k(.param .u64 p0, .param .u64 p1)
{
  .reg .b32 %r<4>; .reg .b64 %rd<6>;
  ld.param.u64 %rd0, [p0]; ld.param.u64 %rd1, [p1]; cvta.to.global.u64 %rd0, %rd0; cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r0, %tid.x; nanosleep.u32 %r0;
  mul.wide.u32 %rd2, %r0, 4; add.s64 %rd3, %rd1, %rd2; ld.global.b32 %r1, [%rd3];
  atom.global.add.noftz.f16x2 %r2, [%rd0], %r1;
  red.global.add.noftz.bf16x2 [%rd0+4], %r1;
  ret;
}"""
  x = (rng.integers(-8, 8, 2 * 96) / 4).astype(np.float16)
  out = Device["NV"].run_ptx(src, "k", [np.zeros(4, np.uint16), x.view(np.uint32)], grid=(1, 1, 1), block=(96, 1, 1))[0]
  # every partial sum is a multiple of 1/4 below 2**11: exact in f16 and bf16, so the order of the lanes does not matter
  assert out[:2].view(np.float16).tolist() == [float(x[0::2].astype(np.float64).sum()), float(x[1::2].astype(np.float64).sum())]
  # the bf16x2 add reads the same bits as bfloat16 pairs: partial sums lose bits there, so lane order counts (lanes apply in
  # lane order), each add rounded to nearest even
  def bf16(v: float) -> float:
    b = int(np.float32(v).view(np.uint32))
    return float(np.uint32(((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16).view(np.float32))
  halves = x.view(np.uint16).astype(np.uint32) << np.uint32(16)
  want = []
  for part in (halves[0::2], halves[1::2]):
    acc = 0.0
    for v in part.view(np.float32).tolist(): acc = bf16(acc + v)
    want.append(acc)
  assert (out[2:].astype(np.uint32) << np.uint32(16)).view(np.float32).tolist() == want


@pytest.mark.parametrize("op, want", [("or", [0, 1, 1, 1]), ("and", [0, 0, 0, 1])])
def test_lop3_predicate_result(op, want):
  src = HEAD.replace("8.0", "8.2") + f""".visible .entry k(.param .u64 p0)
{{
  .reg .b32 %a, %b, %c, %d, %r0; .reg .pred %p, %q; .reg .b64 %rd<2>;
  ld.param.u64 %rd0, [p0]; mov.u32 %r0, %tid.x; mul.wide.u32 %rd1, %r0, 8; add.s64 %rd0, %rd0, %rd1;
  ld.global.u32 %a, [%rd0]; ld.global.u32 %b, [%rd0+4];
  setp.ne.u32 %q, %b, 0;
  lop3.{op}.b32 %d|%p, %a, %a, %a, 0xF0, %q;
  selp.b32 %c, 1, 0, %p; st.global.u32 [%rd0], %d; st.global.u32 [%rd0+4], %c;
  ret;
}}"""
  x = U32([[0, 0], [5, 0], [0, 1], [7, 1]])   # d = a (the table 0xF0 is a itself); p = (d != 0) op q
  r = Device["NV"].run_ptx(src, "k", [x.reshape(-1)], block=(4, 1, 1))[0].reshape(4, 2)
  assert r[:, 0].tolist() == [0, 5, 0, 7] and r[:, 1].tolist() == want


def _bmsk(a: int, b: int, wrap: bool) -> int:
  a, b = (a & 31, b & 31) if wrap else (min(a, 32), min(b, 32))
  return sum(1 << i for i in range(a, min(a + b, 32)))


def test_bmsk_szext():
  a = U32([0, 0, 5, 31, 32, 40, 3, 33, 0xFFFFFFFF, 16])
  b = U32([0, 32, 3, 1, 1, 2, 40, 33, 7, 0xFFFFFFFF])
  for mode in ("clamp", "wrap"):
    r = one(f"bmsk.{mode}.b32 %d, %a, %b", [a, b], U32, ["b32"] * 2, "b32").tolist()
    assert r == [_bmsk(int(x), int(y), mode == "wrap") for x, y in zip(a, b)], mode
  v = U32([0x80, 0xFF, 0x12345678, 0x7F, 0xFFFFFFFF, 0x8000, 5, 0x80000000, 0x1234, 0xABCDEF01])
  n = U32([8, 8, 12, 8, 0, 16, 40, 32, 33, 1])
  for mode in ("clamp", "wrap"):
    for t in ("u32", "s32"):
      r = one(f"szext.{mode}.{t} %d, %a, %b", [v, n], U32, ["b32"] * 2, "b32").tolist()
      want = []
      for x, k in zip(v.tolist(), n.tolist()):
        k = k & 31 if mode == "wrap" else min(k, 32)
        low = x & ((1 << k) - 1)
        if t == "s32" and k and low >> (k - 1): low -= 1 << k
        want.append(0 if k == 0 else x if k >= 32 else low & 0xFFFFFFFF)
      assert r == want, (mode, t)


def test_fns():
  mask = np.concatenate([U32([0b1011001, 0b1011001, 0b1011001, 0b1011001, 0b1011001, 0, 0xFFFFFFFF, 0x80000001, 0x80000001]), A[8:40]])
  base = np.concatenate([U32([0, 3, 3, 6, 6, 0, 31, 31, 0]), (A[8:40] % 32).astype(U32)])
  off = np.concatenate([np.int32([1, 1, -1, 0, -4, 1, 1, -2, 2]), rng.integers(-6, 7, 32).astype(np.int32)])
  r = one("fns.b32 %d, %a, %b, %c", [mask, base, off.view(U32)], U32, ["b32"] * 3, "b32").tolist()
  want = []
  for m, bs, o in zip(mask.tolist(), base.tolist(), off.tolist()):   # the ISA's search, bit by bit
    d = 0xFFFFFFFF
    if o == 0: d = bs if (m >> bs) & 1 else d
    else:
      pos, count, inc = bs, abs(o) - 1, 1 if o > 0 else -1
      while 0 <= pos < 32:
        if (m >> pos) & 1:
          if count == 0: d = pos; break
          count -= 1
        pos += inc
    want.append(d)
  assert r == want


@pytest.mark.parametrize("cmp, f", [("lt", lambda p, q: p < q), ("ge", lambda p, q: p >= q), ("ne", lambda p, q: p != q)])
def test_set_as_values(cmp, f):
  a, b = np.float32([1, 2, np.nan, -0.0, 3]), np.float32([2, 2, 1, 0.0, np.nan])
  want = [bool(f(x, y)) and not (np.isnan(x) or np.isnan(y)) for x, y in zip(a, b)]   # ordered comparisons: false on NaN
  assert one(f"set.{cmp}.u32.f32 %d, %a, %b", [a, b], U32, ["f32", "f32"], "u32").tolist() == [0xFFFFFFFF if w else 0 for w in want]
  assert one(f"set.{cmp}.f32.f32 %d, %a, %b", [a, b], np.float32, ["f32", "f32"], "f32").tolist() == [1.0 if w else 0.0 for w in want]
  s, t = np.int32([-1, 5, 7]), np.int32([0, 5, -9])
  assert one(f"set.{cmp}.s32.s32 %d, %a, %b", [s, t], np.int32, ["s32", "s32"], "s32").tolist() == [-1 if f(x, y) else 0 for x, y in zip(s, t)]


def test_isspacep_windows():
  src = HEAD + """.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<4>;
  .shared .align 4 .b32 sh[4];
  .local .align 4 .b32 lo[4];
  ld.param.u64 %rd0, [out];
  mov.u64 %rd1, sh; cvta.shared.u64 %rd1, %rd1;
  mov.u64 %rd2, lo; cvta.local.u64 %rd2, %rd2;
  isspacep.shared %p0, %rd1; isspacep.global %p1, %rd1; isspacep.local %p2, %rd2; isspacep.global %p3, %rd0;
  selp.u32 %r0, 1, 0, %p0; selp.u32 %r1, 2, 0, %p1; selp.u32 %r2, 4, 0, %p2; selp.u32 %r3, 8, 0, %p3;
  or.b32 %r0, %r0, %r1; or.b32 %r0, %r0, %r2; or.b32 %r0, %r0, %r3;
  st.global.u32 [%rd0], %r0;
  ret;
}"""
  assert Device["NV"].run_ptx(src, "k", [np.zeros(1, U32)])[0].tolist() == [1 | 4 | 8]
