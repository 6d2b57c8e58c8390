"""Calls of functions a module declares without a body (emulators/nv/ptx/extern.py): device printf (vprintf) with C printf
semantics (checked against the C library's snprintf where ctypes finds it), assert (__assertfail: a fault naming the
assertion), malloc (a fault when executed), and that an unsupported call is an error of the entries that make it only."""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from emulators.nv.ptx import load_entry
from emulators.nv.ptx.extern import format_float, format_int, format_pointer, format_string
from emulators.nv.ptx.parse import PTXError
from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from tests.emulators.ptx.ptxkit import HEAD, nvcc_ptx, ptxas_ok

HERE = Path(__file__).parent
_LIBC_PATH = ctypes.util.find_library("c")
LIBC = ctypes.CDLL(_LIBC_PATH) if _LIBC_PATH else None
NEEDS_LIBC = pytest.mark.skipif(LIBC is None, reason="no C library found by ctypes: C's snprintf is the oracle of these tests")
I32 = np.int32


@pytest.fixture(scope="module")
def pa(tmp_path_factory) -> str: return nvcc_ptx(tmp_path_factory, HERE / "printf_assert.cu")


def c_format(fmt: bytes, *args) -> bytes:
  buf = ctypes.create_string_buffer(4096)
  n = LIBC.snprintf(buf, len(buf), fmt, *args)  # type: ignore[union-attr]
  assert 0 <= n < len(buf)
  return buf.raw[:n]


def run(src: str, entry: str, args: list, grid: int = 1, block: int = 1) -> list:
  return Device["NV"].run_ptx(src, entry, args, grid=(grid, 1, 1), block=(block, 1, 1))


# ---- the formatter against C ------------------------------------------------------------------------------------------
INT_SPECS = [b"%d", b"%i", b"%u", b"%x", b"%X", b"%o", b"%5d", b"%-5d|", b"%05d", b"%+d", b"% d", b"%.3d", b"%.0d", b"%#x", b"%#X", b"%#o",
             b"%#.0o", b"%08.3d", b"%-+6i", b"%+05d", b"% 05d", b"%#08x", b"%hd", b"%hhd", b"%hu", b"%hhx", b"%c", b"%3c", b"%-3c|"]
INTS = [0, 1, -1, 42, -42, 255, 256, 65535, 70000, 2**31 - 1, -2**31]
LONG_SPECS = [b"%ld", b"%lld", b"%lu", b"%llu", b"%lx", b"%llX", b"%lo", b"%20lld", b"%-20llu|", b"%+.25lld", b"%#llx", b"%zd", b"%jd"]
LONGS = [0, -1, 2**63 - 1, -2**63, 1234567890123, -1234567890123]
FLOAT_SPECS = [b"%f", b"%e", b"%g", b"%E", b"%G", b"%F", b"%.0f", b"%.0e", b"%.0g", b"%#.0f", b"%#g", b"%10.4f", b"%-10.2e|", b"%+f", b"% e",
               b"%010.3f", b"%-010.3g|", b"%.20f", b"%.17g", b"%#.3g", b"%.10e", b"%012g", b"%+012e",
               b"%a", b"%A", b"%.0a", b"%.1a", b"%.2a", b"%.13a", b"%.15a", b"%#a", b"%#.0a", b"%012a", b"%-14a|", b"%+a", b"% .3A"]
FLOATS = [0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 1e-5, 123456.789, 1e300, -1e-300, 5e-324, 1/3, 1e16, 9.9999995, math.inf, -math.inf, math.nan, -math.nan,
          0.1, 1.03125, 1.09375, 255.5, 1.9999999999999998, 2.2250738585072014e-308, 2.225073858507201e-308]


@NEEDS_LIBC
@pytest.mark.parametrize("spec", INT_SPECS)
def test_int_conversions_match_c(spec):
  m = re.fullmatch(rb"%([-+ #0]*)(\d+)?(?:\.(\d*))?(hh|h)?([diouxXc])(\|?)", spec)
  flags, w, p, length, conv, bar = m.groups()
  for v in INTS:
    ours = format_int(v & 0xFFFFFFFF, flags, int(w) if w else None, (int(p) if p else 0) if p is not None else None, conv, length) + bar
    assert ours == c_format(spec, ctypes.c_int(v)), (spec, v)


@NEEDS_LIBC
@pytest.mark.parametrize("spec", LONG_SPECS)
def test_long_conversions_match_c(spec):
  m = re.fullmatch(rb"%([-+ #0]*)(\d+)?(?:\.(\d*))?(ll|l|z|j)([diouxX])(\|?)", spec)
  flags, w, p, length, conv, bar = m.groups()
  for v in LONGS:
    ours = format_int(v & 0xFFFFFFFFFFFFFFFF, flags, int(w) if w else None, int(p) if p else None, conv, length) + bar
    assert ours == c_format(spec, ctypes.c_longlong(v)), (spec, v)


@NEEDS_LIBC
@pytest.mark.parametrize("spec", FLOAT_SPECS)
def test_float_conversions_match_c(spec):
  m = re.fullmatch(rb"%([-+ #0]*)(\d+)?(?:\.(\d*))?([fFeEgGaA])(\|?)", spec)
  flags, w, p, conv, bar = m.groups()
  for v in FLOATS:
    bits = struct.unpack("<Q", struct.pack("<d", v))[0]
    ours = format_float(bits, flags, int(w) if w else None, (int(p) if p else 0) if p is not None else None, conv) + bar
    assert ours == c_format(spec, ctypes.c_double(v)), (spec, v)


@NEEDS_LIBC
def test_strings_and_pointers_match_c():
  for spec, flags, w, p in [(b"%s", b"", None, None), (b"%8s", b"", 8, None), (b"%-8s|", b"-", 8, None), (b"%.2s", b"", None, 2),
                            (b"%.0s", b"", None, 0), (b"%10.3s", b"", 10, 3)]:
    for s in (b"", b"abc", b"hello world"):
      assert format_string(s, flags, w, p) + (b"|" if spec.endswith(b"|") else b"") == c_format(spec, ctypes.c_char_p(s))
    assert format_string(None, flags, w, p) + (b"|" if spec.endswith(b"|") else b"") == c_format(spec, ctypes.c_char_p(None))
  for spec, flags, w in [(b"%p", b"", None), (b"%20p", b"", 20), (b"%-20p|", b"-", 20)]:
    for v in (0, 0x1000, 0x3000000001234):
      assert format_pointer(v, flags, w) + (b"|" if spec.endswith(b"|") else b"") == c_format(spec, ctypes.c_void_p(v))


# ---- nvcc's printf ------------------------------------------------------------------------------------------------
def test_conversions_line_per_thread(pa, capsys):
  if LIBC is None: pytest.skip("no C library found by ctypes: C's snprintf is the oracle of this test")
  x = np.array([0, 1, -7, 123, 2**31 - 1, -2**31 + 5, 65, 300], I32)
  d = np.array([0.0, -0.0, 2.5, 1e300, math.inf, -math.nan, 1/3, -1234.5678])
  capsys.readouterr()
  r = run(pa, "conversions", [x, d, np.zeros(8, I32)], block=8)
  out = capsys.readouterr().out
  fmt = (b"%d|%i|%u|%x|%X|%o|%c|%s|%f|%e|%g|%p|%p|%ld|%lld|%lu|%llu|%%|%5d|%-5d|%05d|%+d|% d|%.3d|%#x|%#o|%10.4f|%-10.2e|%G|%hd|%hhu|%E|%.0f"
         b"|%*d|%.*f|%-8s|%.2s|%F|%a\n")   # (two printf calls in the kernel: at most 32 arguments each)
  want = b""
  for t in range(8):
    v, dv = int(x[t]), float(d[t])
    ll, ull = v * -1234567890123, (0xFFFFFFFF00000000 + (v & 0xFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF
    sh = ((v * 1000) & 0xFFFF) - (0x10000 if (v * 1000) & 0x8000 else 0)
    with np.errstate(over="ignore"): f = float(np.float32(dv))   # (1e300: inf, as cvt.rn.f32.f64 gives)
    ci, cd, cll = ctypes.c_int, ctypes.c_double, ctypes.c_longlong
    want += c_format(fmt, ci(v), ci(-v), ci(-v), ci(v), ci(v), ci(v), ci(ord("a") + t), b"str", cd(dv), cd(dv), cd(dv), ctypes.c_void_p(0x1000 + t),
                     ctypes.c_void_p(0), cll(ll), cll(ll), ctypes.c_ulonglong(ull), ctypes.c_ulonglong(ull), ci(v), ci(v), ci(v), ci(v), ci(v), ci(v), ci(v),
                     ci(v), cd(dv), cd(dv), cd(dv), ci(sh), ci(v + 250), cd(f), cd(dv), ci(t + 3), ci(v), ci(t), cd(dv), b"ab", b"xyz", cd(dv), cd(dv))
  assert out.encode() == want
  assert r[2].tolist() == [25 * 100 + 15] * 8   # the number of arguments parsed (CUDA's printf), * width and precision included


def test_order_is_block_then_thread_each_whole_and_no_arguments_returns_0(pa, capsys):
  capsys.readouterr()
  y = run(pa, "ordered", [np.zeros(8, I32)], grid=2, block=4)[0]
  want = "".join(f"block {b} thread {t} first\n" + (f"block {b} thread {t} odd\n" if t & 1 else "") + "".join(f"b{b} t{t} i{i}\n" for i in range(t))
                 + "no arguments\n" for b in range(2) for t in range(4))
  assert capsys.readouterr().out == want
  assert y.tolist() == [0] * 8


def test_at_most_32_arguments(pa, capsys):
  capsys.readouterr()
  y = run(pa, "many", [np.zeros(2, I32)], block=2)[0]
  assert capsys.readouterr().out == "".join(" ".join([str(t), *map(str, range(1, 32))]) + " %d\n" for t in range(2))
  assert y.tolist() == [32, 32]


def test_null_format_returns_minus_1_and_unsupported_conversion_faults(tmp_path, capsys):
  src = HEAD + """.extern .func (.param .b32 r) vprintf(.param .b64 f, .param .b64 a);
.global .align 1 .b8 fmtn[6] = {37, 110, 10};
.visible .entry k(.param .u64 out, .param .u32 which)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd0, [out];
  ld.param.u32 %r0, [which];
  mov.u64 %rd1, 0;
  mov.u64 %rd2, fmtn;
  cvta.global.u64 %rd2, %rd2;
  setp.ne.u32 %p0, %r0, 0;
  selp.b64 %rd3, %rd2, %rd1, %p0;
  {
  .param .b64 p0;
  st.param.b64 [p0], %rd3;
  .param .b64 p1;
  st.param.b64 [p1], 0;
  .param .b32 ret;
  call.uni (ret), vprintf, (p0, p1);
  ld.param.b32 %r1, [ret];
  }
  st.global.u32 [%rd0], %r1;
  ret;
}
""".replace(".reg .b32 %r<3>;", ".reg .b32 %r<3>;\n  .reg .pred %p<1>;")
  ptxas_ok(src, tmp_path, "-c")
  capsys.readouterr()
  assert run(src, "k", [np.zeros(1, I32), np.uint32(0)])[0].tolist() == [-1]
  assert capsys.readouterr().out == ""
  with pytest.raises(GPUFault, match=r"printf conversion '%n' is not supported.*PTX line"): run(src, "k", [np.zeros(1, I32), np.uint32(1)])


# ---- assert, malloc, extern calls ---------------------------------------------------------------------------------
def test_assert_that_holds_runs(pa):
  x = np.arange(64, dtype=I32)
  assert run(pa, "checked", [x, np.zeros(64, I32)], block=64)[1].tolist() == (x * 2).tolist()


def test_assert_that_fails_is_a_fault_naming_it(pa, capsys):
  x = np.array([1, 2, 300, 4, 500, 6], I32)
  capsys.readouterr()
  with pytest.raises(GPUFault, match=r"assertion `v < 100` failed at .*printf_assert\.cu:\d+ in void checked\(const int \*, int \*\), "
                                     r"by thread \(2, 0, 0\) of block \(0, 0, 0\) and 1 other thread.*PTX line \d+"):
    run(pa, "checked", [x, np.zeros(6, I32)], block=6)
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 2 and all(re.fullmatch(r".*printf_assert\.cu:\d+: void checked\(const int \*, int \*\): block: \[0,0,0\], "
                                              rf"thread: \[{t},0,0\] Assertion `v < 100` failed\.", ln) for ln, t in zip(lines, (2, 4)))


def test_malloc_faults_only_when_executed(pa):
  x = np.zeros(4, I32)
  assert run(pa, "heap", [x, np.zeros(4, I32)], block=4)[1].tolist() == [0, -1, -2, -3]
  with pytest.raises(GPUFault, match=r"device malloc is not emulated \(call of malloc by thread \(1, 0, 0\).*PTX line \d+"):
    run(pa, "heap", [np.array([0, 1, 0, 1], I32), np.zeros(4, I32)], block=4)


def test_recursion_and_prototypes_are_errors_of_their_entries_only(pa):
  with pytest.raises(PTXError, match=r"PTX line \d+: recursive call of _Z3fibi"): load_entry(pa, "fibk")
  with pytest.raises(PTXError, match=r"PTX line \d+: a call prototype \(\.callprototype"): load_entry(pa, "fsel")
  x = np.arange(32, dtype=I32)
  assert run(pa, "plain", [x, np.zeros(32, I32)], block=32)[1].tolist() == (x + 1).tolist()


def test_unknown_extern_call_faults_when_reached(tmp_path):
  src = HEAD + """.extern .func (.param .b32 r) mystery(.param .b32 a);
.visible .entry k(.param .u64 out, .param .u32 go)
{
  .reg .pred %p<1>;
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd0, [out];
  ld.param.u32 %r0, [go];
  setp.eq.u32 %p0, %r0, 0;
  mov.u32 %r1, 5;
  @%p0 bra $done;
  {
  .param .b32 a;
  st.param.b32 [a], %r0;
  .param .b32 r;
  call.uni (r), mystery, (a);
  ld.param.b32 %r1, [r];
  }
$done:
  st.global.u32 [%rd0], %r1;
  ret;
}
"""
  ptxas_ok(src, tmp_path, "-c")
  assert run(src, "k", [np.zeros(1, I32), np.uint32(0)])[0].tolist() == [5]
  with pytest.raises(GPUFault, match=r"call of mystery, which has no body in this module .*PTX line 19"):
    run(src, "k", [np.zeros(1, I32), np.uint32(1)])
