"""Module-scope .global / .const variables and their initializers (emulators/nv/ptx/initializers.py): integers, floats,
addresses of other variables (generic(sym)+off, sym+off, one byte of an address), arrays of them, as nvcc writes them
(module_vars.cu) and as hand-written PTX (checked with ptxas where it is on PATH); errors name the line and the form."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from emulators.nv.ptx import load_entry
from emulators.nv.ptx.execute import GLOBAL_WINDOW
from emulators.nv.ptx.parse import PTXError, parse
from refgrad.device import Device
from tests.emulators.ptx.ptxkit import HEAD, nvcc_ptx, ptxas_ok

HERE = Path(__file__).parent
NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: these tests compile CUDA C to PTX with it")
I32 = np.int32


@pytest.fixture(scope="module")
def mv(tmp_path_factory) -> str: return nvcc_ptx(tmp_path_factory, HERE / "module_vars.cu")


def run(src: str, entry: str, args: list, n: int) -> list:
  return Device["NV"].run_ptx(src, entry, args, grid=(1, 1, 1), block=(n, 1, 1))


# ---- nvcc's output ------------------------------------------------------------------------------------------------
@NVCC
def test_pointer_table(mv):
  assert run(mv, "ptab", [np.zeros(8, I32)], 8)[0].tolist() == [10, 20, 11, 21] * 2


@NVCC
def test_pointer_with_offset(mv):
  assert run(mv, "ptrinit", [np.zeros(8, I32)], 8)[0].tolist() == [3, 4] * 4


@NVCC
def test_string_table_and_null(mv):
  names = [b"ab", b"cd", None]
  want = [-1 if names[t % 3] is None else names[t % 3][t >> 2 & 1] for t in range(12)]
  assert run(mv, "strtab", [np.zeros(12, I32)], 12)[0].tolist() == want


@NVCC
def test_float_scalars_global_and_const(mv):
  t = np.arange(8, dtype=np.float32)
  assert run(mv, "fscal", [np.zeros(8, np.float32)], 8)[0].tobytes() == (np.float32(1.5) * t + np.float32(2.5)).tobytes()


@NVCC
def test_structs_packed_pointer_bytes_const_pointer_and_rows(mv):
  y = run(mv, "structs", [np.zeros(11, np.int64)], 1)[0]
  assert y.tolist() == [7, 2, ord("x"), -9, 5, 4, 8, -5, 0x7FFFFFFFFFFFFFFF, 0 * 100 + 4 * 10 + 6, 1]


@NVCC
def test_function_address_is_an_error_of_the_entries_using_it(mv):
  with pytest.raises(PTXError, match=r"PTX line \d+: a call prototype"): load_entry(mv, "fptr")   # (its indirect call, first)
  load_entry(mv, "ptab")   # the other entries of the module load and run (above)


# ---- hand-written forms -------------------------------------------------------------------------------------------
VARS = """.global .align 4 .b8 bytes[8] = {1, -1, 0x7f, 010, 0b101, 255U};
.global .align 4 .u32 words[2][3] = {{1}, {4, 5, 6}};
.global .align 4 .s32 open[] = {-7, 8, 9};
.global .align 2 .s16 neg = -2;
.global .align 8 .u64 big = 18446744073709551615;
.global .align 4 .f32 f[4] = {0f3FC00000, 0d3FF8000000000000, 2.5, -0.0};
.global .align 8 .f64 d[3] = {0d4004000000000000, 0f3FC00000, 1e300};
.global .align 4 .f32 rounded[4] = {1.0e300, 0d3FF0000000000001, 0d3FB999999999999A, -1e-50};
.global .align 8 .u64 ptrs[4] = {generic(words)+12, words+4, generic(bytes), 0};
.global .align 1 .u8 pbytes[9] = {3, 0xFF(generic(open)+4), 0xFF00(generic(open)+4), 0xFF0000(generic(open)+4), 0xFF000000(generic(open)+4), 0xFF00000000(generic(open)+4), 0xFF0000000000(generic(open)+4), 0xFF000000000000(generic(open)+4), 0xFF00000000000000(generic(open)+4)};
.const .align 8 .u64 cptr = generic(open)+8;
.const .align 4 .f32 cf = 0f40490FDB;
.weak .global .align 4 .u32 weak = 77;
.visible .global .align 8 .u64 vis = generic(weak);
"""


def test_initializer_bytes():
  m = parse(HEAD + VARS + ".visible .entry k() { ret; }\n")
  g = {n: v for n, v in m.globals.items()}
  assert g["bytes"].init == bytes([1, 255, 0x7F, 8, 5, 255, 0, 0]) and g["bytes"].size == 8
  assert np.frombuffer(g["words"].init, np.uint32).tolist() == [1, 0, 0, 4, 5, 6]
  assert np.frombuffer(g["open"].init, np.int32).tolist() == [-7, 8, 9] and g["open"].size == 12
  assert g["neg"].init == struct.pack("<h", -2) and g["big"].init == b"\xff" * 8
  assert np.frombuffer(g["f"].init, np.float32).tolist() == [1.5, 1.5, 2.5, 0.0] and g["f"].init[12:] == struct.pack("<f", -0.0)
  assert np.frombuffer(g["d"].init, np.float64).tolist() == [2.5, 1.5, 1e300]
  assert g["rounded"].init.hex() == "0000807f0000803fcdcccc3d00000080"   # (the bytes ptxas writes: nearest, overflow to inf)
  at = {n: GLOBAL_WINDOW + v.offset for n, v in g.items()}
  assert np.frombuffer(g["ptrs"].init, np.uint64).tolist() == [at["words"] + 12, at["words"] + 4, at["bytes"], 0]
  assert g["pbytes"].init == bytes([3]) + struct.pack("<Q", at["open"] + 4)
  assert g["cptr"].init == struct.pack("<Q", at["open"] + 8) and g["cptr"].space == "const"
  assert g["cf"].init == bytes.fromhex("DB0F4940")
  assert g["weak"].init == struct.pack("<I", 77) and g["vis"].init == struct.pack("<Q", at["weak"])   # (.weak: nvcc -rdc templates)


def test_large_tables_and_octal():
  vals = [(i * 37) % 300 - 44 for i in range(20000)]
  src = HEAD + f".global .align 4 .b8 tab[20004] = {{{', '.join(map(str, vals))}}};\n.global .u32 o[2] = {{010, 8}};\n.visible .entry k() {{ ret; }}\n"
  g = parse(src).globals
  assert g["tab"].init == (np.array(vals) & 0xFF).astype(np.uint8).tobytes() + bytes(4) and g["o"].init == struct.pack("<II", 8, 8)


def test_initialized_variables_read_by_a_kernel(tmp_path):
  src = HEAD + VARS + """.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  .reg .f32 %f<2>;
  ld.param.u64 %rd0, [out];
  ld.global.u64 %rd1, [ptrs];          // &words[1][0]
  ld.u32 %r1, [%rd1];                  // 4
  ld.global.u64 %rd2, [ptrs+8];        // &words[0][1]
  ld.global.u32 %r2, [%rd2+12];        // words[1][1] = 5
  ld.const.u64 %rd3, [cptr];           // &open[2]
  ld.u32 %r3, [%rd3];                  // 9
  ld.global.u8 %r4, [pbytes+1];        // low byte of &open[1] (its page offset)
  ld.const.f32 %f1, [cf];
  mov.b32 %r5, %f1;
  st.global.u32 [%rd0], %r1;
  st.global.u32 [%rd0+4], %r2;
  st.global.u32 [%rd0+8], %r3;
  st.global.u32 [%rd0+12], %r4;
  st.global.u32 [%rd0+16], %r5;
  ret;
}
"""
  ptxas_ok(src, tmp_path)
  m = parse(src)
  want4 = (GLOBAL_WINDOW + m.globals["open"].offset + 4) & 0xFF
  y = run(src, "k", [np.zeros(5, np.uint32)], 1)[0]
  assert y.tolist() == [4, 5, 9, want4, 0x40490FDB]


def test_stores_to_module_variables_stay_in_the_launch():
  src = HEAD + """.global .align 4 .u32 ctr = 5;
.global .align 8 .u64 self = generic(ctr);
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd0, [out];
  ld.global.u64 %rd1, [self];
  atom.add.u32 %r1, [%rd1], 1;
  ld.global.u32 %r2, [ctr];
  st.global.u32 [%rd0], %r2;
  ret;
}
"""
  for _ in range(2): assert run(src, "k", [np.zeros(1, np.uint32)], 3)[0].tolist() == [8]   # a fresh copy of the initial bytes per launch


@pytest.mark.parametrize("decl, why", [
  (".global .u32 a = 1.5;", "floating-point literal in a .u32"),
  (".global .f32 a = 1;", "an integer in a .f32"),
  (".global .u32 a = gv;", "address in a .u32"),
  (".global .u16 a[2] = {0xFFFF(gv), 1};", "mask 0xFFFF"),
  (".global .u32 a[2] = {1, 2, 3};", "3 elements for an array of 2"),
  (".global .u64 a = generic(gv)-4;", "unexpected '-'"),
  (".global .u64 a = gv * 2;", "cannot read"),
  (".global .f16 a = 0x3c00;", "initializers of .f16"),
])
def test_bad_initializers_name_the_line_and_form(decl, why):
  with pytest.raises(PTXError, match=r"PTX line 5: initializer .* of a: .*" + why):
    parse(HEAD + ".global .align 4 .b8 gv[4];\n" + decl + "\n.visible .entry k() { ret; }\n")


def test_function_address_in_an_initializer_is_an_error_of_its_users(tmp_path):
  src = HEAD + """.func (.param .b32 r) inc(.param .b32 x) { .reg .b32 %r<2>; ld.param.b32 %r0, [x]; add.s32 %r1, %r0, 1; st.param.b32 [r], %r1; ret; }
.global .align 8 .u64 ftab[1] = {inc};
.global .align 4 .u32 fine = 3;
.visible .entry uses(.param .u64 out) { .reg .b64 %rd<3>; ld.param.u64 %rd1, [out]; ld.global.u64 %rd2, [ftab]; st.global.u64 [%rd1], %rd2; ret; }
.visible .entry other(.param .u64 out) { .reg .b32 %r<2>; .reg .b64 %rd<2>; ld.param.u64 %rd1, [out]; ld.global.u32 %r1, [fine]; st.global.u32 [%rd1], %r1; ret; }
"""
  ptxas_ok(src, tmp_path)
  with pytest.raises(PTXError, match=r"PTX line 5: initializer of ftab: inc is not a .global or .const variable .*used at PTX line 7"):
    load_entry(src, "uses")
  assert run(src, "other", [np.zeros(1, np.uint32)], 1)[0].tolist() == [3]


def test_unknown_symbol_in_an_initializer_poisons_only_its_users():
  src = HEAD + """.global .align 8 .u64 bad = generic(nowhere);
.global .align 8 .u64 worse = generic(bad);
.global .align 4 .u32 fine = 3;
.visible .entry uses(.param .u64 out) { .reg .b64 %rd<2>; ld.global.u64 %rd1, [worse]; ret; }
.visible .entry other(.param .u64 out) { .reg .b32 %r<2>; .reg .b64 %rd<2>; ld.param.u64 %rd1, [out]; ld.global.u32 %r1, [fine]; st.global.u32 [%rd1], %r1; ret; }
"""
  with pytest.raises(PTXError, match=r"PTX line 5: initializer of worse takes the address of bad"): load_entry(src, "uses")
  assert run(src, "other", [np.zeros(1, np.uint32)], 1)[0].tolist() == [3]


def test_address_table_is_not_the_digits_of_the_names():
  """The sweep's finding: digits inside symbol names were taken as the values ({generic(a0), generic(a1)} gave {0, 1})."""
  src = HEAD + ".global .align 4 .b8 a0[4] = {7};\n.global .align 8 .u64 t[2] = {generic(a0), generic(a0)+1};\n.visible .entry k() { ret; }\n"
  m = parse(src)
  base = GLOBAL_WINDOW + m.globals["a0"].offset
  assert np.frombuffer(m.globals["t"].init, np.uint64).tolist() == [base, base + 1]
