"""The pre-decoded steps (emulators/nv/ptx/fast.py) give the bits of the family handlers (ops.py) they stand in for:
each hot instruction shape runs with and without them on operands full of specials, and the results must be equal."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.nv.ptx import fast
from tests.emulators.ptx.ptxkit import one

RNG = np.random.default_rng(11)
F32_SPECIAL = np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3.4e38, 2.0**-126, 0.1], np.float32)


def _f32(n: int = 48) -> np.ndarray: return np.concatenate([F32_SPECIAL, RNG.standard_normal(n - len(F32_SPECIAL)).astype(np.float32) * 1e3])
def _u32(n: int = 48) -> np.ndarray:
  return np.concatenate([np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x12345678], np.uint32), RNG.integers(0, 2**32, n - 6, dtype=np.uint32)])
def _u64(n: int = 48) -> np.ndarray:
  return np.concatenate([np.array([0, 1, 2**63, 2**64 - 1, 2**32], np.uint64), RNG.integers(0, 2**64 - 1, n - 5, dtype=np.uint64)])


def _f32_limits(n: int = 64) -> np.ndarray:
  lim = np.array([2.0**31, -2.0**31, 2.0**32, 2147483520.0, -2147483904.0, 4294967040.0, -0.4, -0.5, -0.6, 0.5, 1.5, 2.5, -1.5,
                  8388607.5, -8388608.5, 16777217.0], np.float32)
  return np.concatenate([lim, _f32(n - len(lim))])


CASES = [   # (instruction, input makers, input register types, output dtype, output register type)
  *[(f"{op}.rn.f32 %d, %a, %b", [_f32, _f32], ["f32", "f32"], np.float32, "f32") for op in ("add", "sub", "mul")],
  ("add.f32 %d, %a, 0f3F800000", [_f32], ["f32"], np.float32, "f32"),
  ("fma.rn.f32 %d, %a, %b, %c", [_f32, _f32, _f32], ["f32"] * 3, np.float32, "f32"),
  ("neg.f32 %d, %a", [_f32], ["f32"], np.float32, "f32"), ("abs.f32 %d, %a", [_f32], ["f32"], np.float32, "f32"),
  *[(f"{op}.s32 %d, %a, %b", [_u32, _u32], ["b32", "b32"], np.uint32, "b32") for op in ("add", "sub", "mul.lo")],
  *[(f"mul.wide.{t} %d, %a, {v}", [_u32, _u32], ["b32", "b32"], np.uint64, "b64") for t in ("s32", "u32") for v in ("%b", "4", "-3")],
  ("add.s32 %d, %a, -7", [_u32], ["b32"], np.uint32, "b32"), ("add.s64 %d, %a, %b", [_u64, _u64], ["b64", "b64"], np.uint64, "b64"),
  *[(f"setp.{c}.f32 %d, %a, %b", [_f32, _f32], ["f32", "f32"], np.bool_, "pred") for c in ("eq", "ne", "lt", "ge", "gtu", "nan", "num", "neu", "ltu", "leu", "geu", "equ")],
  *[(f"setp.{c}.{t} %d, %a, %b", [_u32, _u32], ["b32", "b32"], np.bool_, "pred") for c in ("lt", "ne", "ge") for t in ("s32", "u32")],
  ("setp.ne.s32 %d, %a, 250", [_u32], ["b32"], np.bool_, "pred"),
  ("setp.lt.f32 %p, %a, %b; selp.f32 %d, %a, 0fBF800000, %p", [_f32, _f32], ["f32", "f32"], np.float32, "f32"),
  ("setp.lt.u32 %p, %a, %b; selp.b32 %d, %a, %b, %p", [_u32, _u32], ["b32", "b32"], np.uint32, "b32"),
  # a setp's bools read by guards (divergent: per-lane PCs) and by a selp of other bits
  ("setp.gtu.f32 %p, %a, %b; @%p add.rn.f32 %d, %a, %b; @!%p mul.rn.f32 %d, %a, %b", [_f32, _f32], ["f32", "f32"], np.float32, "f32"),
  ("setp.ne.s32 %p, %a, 7; selp.b64 %d, 5, -1, %p", [_u32], ["b32"], np.uint64, "b64"),
  # integer neg and mad.lo (wrapping: INT_MIN, products past the width)
  ("neg.s32 %d, %a", [_u32], ["b32"], np.uint32, "b32"), ("neg.s64 %d, %a", [_u64], ["b64"], np.uint64, "b64"),
  *[(f"mad.lo.{t} %d, %a, %b, %c", [_u32, _u32, _u32], ["b32"] * 3, np.uint32, "b32") for t in ("s32", "u32")],
  ("mad.lo.s32 %d, %a, 60, %b", [_u32, _u32], ["b32", "b32"], np.uint32, "b32"),
  ("mad.lo.u64 %d, %a, %b, %c", [_u64, _u64, _u64], ["b64"] * 3, np.uint64, "b64"),
  *[(f"prmt.b32 %d, %a, %b, {c}", [_u32, _u32], ["b32", "b32"], np.uint32, "b32") for c in (30212, 4180, 0x3210, 0x5432, 0x0123, 0x8888)],
  ("mov.b32 %d, %a", [_f32], ["f32"], np.uint32, "b32"), ("mov.f32 %d, 0f3FB8AA3B", [_f32], ["f32"], np.float32, "f32"),
  ("mov.b32 %d, 0f3FB8AA3B", [_f32], ["f32"], np.float32, "f32"), ("mov.b64 %d, 0d3FF0000000000001", [_u64], ["b64"], np.uint64, "b64"),
  # constants read as another type of the width, NaN payloads, special registers (typed 32-bit values)
  (".reg .f32 %q; mov.f32 %q, 0f7FC01234; add.rn.f32 %d, %q, %a", [_f32], ["f32"], np.uint32, "f32"),
  (".reg .b32 %q; mov.b32 %q, 0fFF800001; mov.b32 %d, %q", [_f32], ["f32"], np.uint32, "b32"),
  (".reg .b32 %q; mov.s32 %q, -5; add.s32 %d, %q, %a", [_u32], ["b32"], np.uint32, "b32"),
  (".reg .b32 %q; mov.u32 %q, 7; shl.b32 %d, %a, %q", [_u32], ["b32"], np.uint32, "b32"),
  (".reg .b32 %q; mov.u32 %q, %tid.x; mul.lo.s32 %d, %q, %a", [_u32], ["b32"], np.uint32, "b32"),
  *[(f"{op}.{t} %d, %a, {n}", [_u32], ["b32"], np.uint32, "b32") for op in ("shl", "shr") for t in ("b32", "s32", "u32") for n in (0, 1, 23, 31)],
  *[(f"{op}.b64 %d, %a, {n}", [_u64], ["b64"], np.uint64, "b64") for op in ("shl", "shr") for n in (0, 33, 63)],
  ("shr.s64 %d, %a, 7", [_u64], ["b64"], np.uint64, "b64"),
  *[(f"{op}.{t} %d, %a, {n}", [_f32], ["f32"], np.uint32, "b32") for op in ("shl", "shr") for t in ("b32", "s32") for n in (1, 9)],   # a float's bits
  # float -> int (saturating, NaN -> 0, each rounding) and int -> float conversions, around the limits
  *[(f"cvt.{r}.{t}.f32 %d, %a", [_f32_limits], ["f32"], np.uint32, "b32") for r in ("rni", "rzi", "rmi", "rpi") for t in ("s32", "u32")],
  *[(f"cvt.rn.f32.{t} %d, %a", [_u32], ["b32"], np.float32, "f32") for t in ("s32", "u32")],
  *[(f"{op}.{t} %d, %a, {n}", [_u64], ["b64"], np.uint64, "b64") for op in ("shl", "shr") for t in ("s64", "u64") for n in (1, 40)],
  *[(f"{op}.b32 %d, %a, {v}", [_u32, _u32], ["b32", "b32"], np.uint32, "b32") for op in ("and", "or", "xor") for v in ("%b", "-4096")],
  # div/rem by an immediate (the renderer's constant divisors): signs, INT_MIN, powers of two, the largest divisors
  *[(f"{op}.{t} %d, %a, {v}", [_u32], ["b32"], np.uint32, "b32") for op in ("div", "rem") for t in ("s32", "u32")
    for v in ("32", "3", "-3", "-2147483648", "2147483647", "1", "4294967295")],
  *[(f"{op}.{t} %d, %a, {v}", [_u64], ["b64"], np.uint64, "b64") for op in ("div", "rem") for t in ("s64", "u64") for v in ("7", "-1000000007", "1")],
]


def _f32_b_nan(n: int = 48) -> np.ndarray:   # NaNs (both signs) where _f32's a is a number: which NaN comes out shows
  x = _f32(n)
  x[::3] = np.array([0x7FC00000, 0xFFC00001, 0x7F800001], np.uint32).view(np.float32)[np.arange(len(x[::3])) % 3]
  return x


CASES += [(f"{op}.rn.f32 %d, %a, %b", [_f32, _f32_b_nan], ["f32", "f32"], np.uint32, "f32") for op in ("add", "sub", "mul")]


@pytest.mark.parametrize("instr, makers, ityp, out, otyp", CASES, ids=[c[0] for c in CASES])
def test_predecoded_step_matches_family_handler(instr, makers, ityp, out, otyp, monkeypatch):
  ins = [m() for m in makers]
  if "%p" in instr: instr = ".reg .pred %p; " + instr
  monkeypatch.setattr(fast, "enabled", True)
  a = one(instr, ins, out, ityp, otyp)
  monkeypatch.setattr(fast, "enabled", False)
  b = one(instr, ins, out, ityp, otyp)
  assert a.tobytes() == b.tobytes()


def test_predecoded_loads_of_every_width_match():
  # ld.global of u8 s8 u16 s16 f32 u64 from one byte buffer (the second operand's), 32 threads
  src_bytes = RNG.integers(0, 256, 64 * 16, dtype=np.uint8)
  for t, w, dt in (("u8", 1, np.uint32), ("s8", 1, np.uint32), ("u16", 2, np.uint32), ("s16", 2, np.uint32), ("f32", 4, np.float32),
                   ("u64", 8, np.uint64)):
    rt = "b64" if w == 8 else "f32" if t == "f32" else "b32"
    instr = f".reg .{rt} %x; mul.wide.u32 %rd7, %r0, {w}; add.s64 %rd7, %rd1, %rd7; ld.global.{t} %x, [%rd7+{w}]; mov.b{64 if w == 8 else 32} %d, %x"
    res = []
    for on in (True, False):
      fast.enabled = on
      try: res.append(one(instr, [np.zeros(32, np.uint8), src_bytes], dt, ["b16", "b16"], rt if rt != "f32" else "b32").tobytes())
      finally: fast.enabled = True
    assert res[0] == res[1]


_BYTES4 = """.reg .b32 %x<8>; mul.wide.u32 %rd7, %r0, 4; add.s64 %rd7, %rd1, %rd7;
  ld.global.u8 %x0, [%rd7+{o}]; ld.global.u8 %x1, [%rd7+{o1}]; prmt.b32 %x4, %x1, %x0, 30212;
  {between}
  ld.global.u8 %x2, [%rd7+{o2}]; ld.global.u8 %x3, [%rd7+{o3}]; prmt.b32 %x5, %x3, %x2, 30212; prmt.b32 %d, %x5, %x4, 4180"""


@pytest.mark.parametrize("o", [0, 1, 4, 3])
@pytest.mark.parametrize("between", ["", "st.global.u8 [%rd7+{o2}], %r0;", "add.s64 %rd7, %rd7, 1;"])
def test_coalesced_byte_loads_match_byte_by_byte(o, between):
  # nvcc's unaligned float load: 4 byte loads and 3 prmt. Gathered at once unless a store or a write to the base intervenes;
  # the result must be what the loads give one by one (fast steps off), at aligned and unaligned offsets
  src = _BYTES4.replace("{between}", between).format(o=o, o1=o + 1, o2=o + 2, o3=o + 3)
  buf = RNG.integers(0, 256, 32 * 4 + 8, dtype=np.uint8)
  res = []
  for on in (True, False):
    fast.enabled = on
    try: res.append(one(src, [np.zeros(32, np.uint8), buf], np.uint32, ["b16", "b16"], "b32"))
    finally: fast.enabled = True
  assert res[0].tobytes() == res[1].tobytes()
  if not between:   # and it is the little-endian word at that offset
    assert res[0].tolist() == [int.from_bytes(buf[4 * t + o:4 * t + o + 4].tobytes(), "little") for t in range(32)]


def test_division_by_an_immediate_is_predecoded():
  """div/rem by a constant other than 0 (-1 when signed) take the pre-decoded step (the cases above compare its bits);
  a register divisor, 0 and a signed -1 stay with the family handler (which reports a division by zero)."""
  from emulators.nv.ptx.parse import parse
  src = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k()
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  rem.s32 %r1, %r0, 32;
  div.u32 %r1, %r0, 7;
  div.s64 %rd1, %rd0, -9;
  rem.s32 %r1, %r0, %r2;
  div.u32 %r1, %r0, 0;
  div.s32 %r1, %r0, -1;
  ret;
}
"""
  e = parse(src).entries["k"]
  steps = fast.compile_entry(e)
  kinds = ["_divrem_imm" in (f.__qualname__ if f is not None else "") for f in steps[:6]]
  assert kinds == [True, True, True, False, False, False]


SPECIALS = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd0, [out];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %tid.y;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ctaid.y;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %nctaid.x;
  mad.lo.s32 %r6, %r3, %r5, %r2;
  mov.u32 %r7, %ntid.y;
  mul.lo.s32 %r7, %r7, %r4;
  mul.lo.s32 %r6, %r6, %r7;
  mad.lo.s32 %r7, %r1, %r4, %r0;
  add.s32 %r6, %r6, %r7;
  mul.wide.u32 %rd1, %r6, 16;
  add.s64 %rd2, %rd0, %rd1;
  st.global.v4.u32 [%rd2], {%r0, %r1, %r2, %r3};
  ret;
}
"""


def test_special_registers_kept_per_launch_shape():
  """Special registers are built once per launch shape and kept (read-only) for the next launch of that shape: launches
  of different shapes, alternating, each read their own ids."""
  from refgrad.device import Device
  for grid, block in [((3, 2, 1), (4, 5, 1)), ((2, 3, 1), (5, 4, 1)), ((3, 2, 1), (4, 5, 1)), ((1, 1, 1), (7, 1, 1))]:
    n = grid[0] * grid[1] * block[0] * block[1]
    (out,) = Device["NV"].run_ptx(SPECIALS, "k", [np.zeros(n * 4, np.uint32)], grid=grid, block=block)
    cy, cx, ty, tx = np.meshgrid(np.arange(grid[1]), np.arange(grid[0]), np.arange(block[1]), np.arange(block[0]), indexing="ij")
    want = np.stack([tx, ty, cx, cy], -1).reshape(-1, 4).astype(np.uint32)
    assert (out.reshape(-1, 4) == want).all(), (grid, block)


def test_shifts_of_registers_as_wide_run_on_typed_values():
  """shl/shr by an immediate of a register as wide as the type take the typed step (the cases above compare its bits)."""
  from emulators.nv.ptx.parse import parse
  src = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k()
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  shl.b32 %r1, %r0, 23;
  shr.s32 %r1, %r0, 1;
  shr.u64 %rd1, %rd0, 33;
  ret;
}
"""
  steps = fast.compile_entry(parse(src).entries["k"])
  assert [f.__name__ for f in steps[:3]] == ["step_t"] * 3


def test_common_conversions_are_predecoded():
  """cvt float32 <-> 32-bit int with a rounding and nothing else take the pre-decoded step (the cases above compare its
  bits); .ftz, .sat and other types stay with the family handler."""
  from emulators.nv.ptx.parse import parse
  src = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k()
{
  .reg .b32 %r<4>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<4>;
  cvt.rzi.s32.f32 %r1, %f0;
  cvt.rni.u32.f32 %r1, %f0;
  cvt.rn.f32.s32 %f1, %r0;
  cvt.rzi.ftz.s32.f32 %r1, %f0;
  cvt.rn.sat.f32.s32 %f1, %r0;
  cvt.rzi.s64.f32 %rd1, %f0;
  ret;
}
"""
  steps = fast.compile_entry(parse(src).entries["k"])
  assert [f.__name__ for f in steps[:6]] == ["f2i", "f2i", "i2f", "<lambda>", "<lambda>", "<lambda>"]


def test_integer_neg_and_mad_are_predecoded():
  """neg.s32 and mad.lo take their integer steps (the cases above compare the bits); neg.f32 keeps the float step,
  mad.hi / mad.rn.f32 the family handler."""
  from emulators.nv.ptx.parse import parse
  src = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k()
{
  .reg .b32 %r<4>;
  .reg .f32 %f<4>;
  neg.s32 %r1, %r0;
  mad.lo.u32 %r1, %r0, %r2, %r3;
  neg.f32 %f1, %f0;
  mad.hi.s32 %r1, %r0, %r2, %r3;
  mad.rn.f32 %f1, %f0, %f2, %f3;
  ret;
}
"""
  steps = fast.compile_entry(parse(src).entries["k"])
  assert [f.__name__ for f in steps[:5]] == ["neg", "mad", "step", "<lambda>", "<lambda>"]


def test_constants_and_special_registers_are_typed():
  """mov of a constant or a special register into a 32-bit register keeps typed values (the cases above compare the
  bits); a 64-bit constant keeps bits."""
  from emulators.nv.ptx.parse import parse
  src = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k()
{
  .reg .b32 %r<4>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<4>;
  mov.f32 %f1, 0f3F800000;
  mov.u32 %r1, 7;
  mov.u32 %r2, %ctaid.x;
  mov.b64 %rd1, 5;
  ret;
}
"""
  e = parse(src).entries["k"]
  steps = fast.compile_entry(e)
  assert [f.__qualname__.split(".")[0] + "." + f.__name__ for f in steps[:4]] == ["_mov_const.step", "_mov_const.step", "_mov.special", "_mov_const.<lambda>"]


def _big(x: np.ndarray) -> np.ndarray: return np.resize(x, 512)   # past the lane count where a uniform selp copies one side
def _ones(v: float, dt: type = np.float32) -> callable: return lambda: np.full(512, v, dt)


SHORTCUT_CASES = [   # (instruction, input makers, input register types, output dtype, output register type)
  # selp whose guard every lane takes one way (a copy of one side: register, immediate, NaN payloads) or mixed
  *[(f"setp.lt.f32 %p, %a, %b; selp.b32 %d, {x}, {y}, %p", [mk, lambda: _big(_f32())], ["f32", "f32"], np.uint32, "f32")
    for mk in (_ones(-np.inf), _ones(np.inf), _ones(np.nan), lambda: _big(_f32())) for x, y in (("%a", "%b"), ("0x43010000", "%b"), ("%a", "0x7FC01234"))],
  *[(f"setp.ne.s32 %p, %a, 7; selp.b64 %d, {x}, -1, %p", [mk], ["b32"], np.uint64, "b64") for mk in (_ones(7, np.uint32), _ones(8, np.uint32))
    for x in ("5", "%rd8")],
  # mixed guards over many lanes (the bit select: each lane's bits from its side, NaN payloads kept)
  ("setp.lt.u32 %p, %a, %b; selp.b64 %d, %rd8, -1, %p", [lambda: _big(_u32()), lambda: _big(_u32())], ["b32", "b32"], np.uint64, "b64"),
  ("setp.lt.u32 %p, %a, %b; selp.b32 %d, %a, %b, %p", [lambda: _big(_u32()), lambda: _big(_u32())], ["b32", "b32"], np.uint32, "b32"),
  # float -> int conversions of values all inside the type's range (a plain conversion), and with one lane outside / NaN
  *[(f"cvt.{r}.{t}.f32 %d, %a", [mk], ["f32"], np.uint32, "b32") for r in ("rni", "rzi") for t in ("s32", "u32")
    for mk in (lambda: _big(np.abs(_f32()[12:]) % 1e6 + 0.5), lambda: _big(_f32()[12:] % 1e6), _f32_limits, lambda: np.append(_big(_f32()[12:] % 1e6), np.nan))],
  # rcp / sqrt / div .rn.f32 on the typed values (specials, subnormals, NaN payloads of either operand)
  *[(f"{op}.rn.f32 %d, %a", [mk], ["f32"], np.uint32, "f32") for op in ("rcp", "sqrt") for mk in (_f32, _f32_b_nan, lambda: _big(_f32()))],
  *[("div.rn.f32 %d, %a, %b", [ma, mb], ["f32", "f32"], np.uint32, "f32") for ma, mb in ((_f32, _f32_b_nan), (_f32_b_nan, _f32), (_f32, _f32))],
  ("div.rn.f32 %d, %a, 0f40400000", [_f32], ["f32"], np.uint32, "f32"),
  # mul.wide with immediates of either sign
  *[(f"mul.wide.{t} %d, %a, {v}", [_u32], ["b32"], np.uint64, "b64") for t in ("s32", "u32") for v in ("2147483647", "-2147483648", "65536")],
]


@pytest.mark.parametrize("instr, makers, ityp, out, otyp", SHORTCUT_CASES, ids=[c[0] for c in SHORTCUT_CASES])
def test_predecoded_shortcuts_match_family_handler(instr, makers, ityp, out, otyp, monkeypatch):
  test_predecoded_step_matches_family_handler(instr, makers, ityp, out, otyp, monkeypatch)


def test_rcp_sqrt_div_rn_are_predecoded_and_cvta_moves_a_dead_source():
  """rcp/sqrt/div.rn.f32 take pre-decoded steps (their bits: above); cvta moves its source only where nothing reads it
  later and it is outside loops, and a kernel reading the source after the cvta still sees it."""
  from emulators.nv.ptx.parse import parse
  head = ".version 8.0\n.target sm_80\n.address_size 64\n"
  e = parse(head + """.visible .entry k(.param .u64 p)
{
  .reg .f32 %f<4>;
  .reg .b64 %rd<6>;
  .reg .pred %q;
  rcp.rn.f32 %f1, %f0;
  sqrt.rn.f32 %f1, %f0;
  div.rn.f32 %f1, %f0, %f2;
  rcp.approx.f32 %f1, %f0;
  ld.param.u64 %rd0, [p];
  cvta.to.global.u64 %rd1, %rd0;
  ld.param.u64 %rd2, [p];
  cvta.to.global.u64 %rd3, %rd2;
  add.s64 %rd4, %rd2, 4;
  mov.u64 %rd5, 0;
L:
  cvta.to.global.u64 %rd1, %rd0;
  add.s64 %rd5, %rd5, 1;
  setp.lt.u64 %q, %rd5, 3;
  @%q bra L;
  ret;
}
""").entries["k"]
  steps = fast.compile_entry(e)
  assert [f.__name__ for f in steps[:4]] == ["one", "one", "div", "<lambda>"]
  cvtas = [i for i in e.instrs if i.op == "cvta"]
  assert [fast._last_reader(e, i, i.args[1].value) for i in cvtas] == [False, False, False]   # %rd0 read in the loop, %rd2 by the add
  e2 = parse(head + ".visible .entry k(.param .u64 p)\n{\n  .reg .b64 %rd<3>;\n  ld.param.u64 %rd0, [p];\n  cvta.to.global.u64 %rd1, %rd0;\n"
             "  mov.b64 %rd2, %rd1;\n  ret;\n}\n").entries["k"]
  cv = next(i for i in e2.instrs if i.op == "cvta")
  assert fast._last_reader(e2, cv, "%rd0")
  # run: the source moved (nothing reads it) and kept (read again after the cvta) give the same stored address
  src = head + """.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd0, [out];
  cvta.to.global.u64 %rd1, %rd0;
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd2, %r0, 8;
  add.s64 %rd3, %rd1, %rd2;
  ld.param.u64 %rd4, [out];
  cvta.to.global.u64 %rd5, %rd4;
  st.global.u64 [%rd3], %rd5;
  sub.s64 %rd5, %rd5, %rd4;
  st.global.u64 [%rd3], %rd4;
  ret;
}
"""
  from refgrad.device import Device
  for on in (True, False):
    fast.enabled = on
    try: out = Device["NV"].run_ptx(src, "k", [np.zeros(300, np.uint64)], grid=(1, 1, 1), block=(300, 1, 1))[0]
    finally: fast.enabled = True
    assert (out == out[0]).all() and out[0] != 0


def test_broadcast_parameter_written_by_some_lanes_matches():
  """A 64-bit parameter is held as one read-only broadcast value; lanes that then write the register (divergent: per-lane
  PCs, a partial write) get their own copy, and the others keep the parameter (the bits of the family handlers)."""
  src = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out, .param .u64 v)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  .reg .pred %p;
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [v];
  mov.u32 %r0, %tid.x;
  and.b32 %r1, %r0, 3;
  setp.eq.u32 %p, %r1, 1;
  @%p add.s64 %rd1, %rd1, 1000;
  @!%p bra SKIP;
  xor.b64 %rd1, %rd1, 5;
SKIP:
  mul.wide.u32 %rd2, %r0, 8;
  add.s64 %rd3, %rd0, %rd2;
  st.global.u64 [%rd3], %rd1;
  ret;
}
"""
  from refgrad.device import Device
  res = []
  for on in (True, False):
    fast.enabled = on
    try: res.append(Device["NV"].run_ptx(src, "k", [np.zeros(300, np.uint64), np.uint64(2**63 + 7)], grid=(1, 1, 1), block=(300, 1, 1))[0])
    finally: fast.enabled = True
  assert res[0].tobytes() == res[1].tobytes()
  t = np.arange(300)
  assert (res[0] == np.where(t % 4 == 1, (2**63 + 7 + 1000) ^ 5, 2**63 + 7).astype(np.uint64)).all()


@pytest.mark.parametrize("k", [1, 2, 4])
def test_store_definedness_marks_match_element_marks(k):
  """A store's elements made defined or undefined (execute._mark: a covered range as one slice, else grouped by bit
  position) leave the bitmap Memory.mark_elems leaves: a permuted full range, one with a duplicate and a hole, sparse."""
  from emulators.nv.ptx.execute import _mark
  from refgrad.runtime.simt import Memory
  base = RNG.permutation(np.arange(37, 37 + 300))
  dup = base.copy()
  dup[5] = dup[6]
  for e in (base, dup, base[::3], np.arange(8, 8 + 64)):
    for defined in (True, False):
      a, b = Memory.zeros(4096), Memory.zeros(4096)
      a.bits[:] = b.bits[:] = RNG.integers(0, 256, a.bits.size, dtype=np.uint8)
      _mark(a, e.astype(np.intp), k, defined)
      b.mark_elems(e.astype(np.intp), k, defined)
      assert a.bits.tobytes() == b.bits.tobytes()
