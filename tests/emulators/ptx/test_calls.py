"""call / .func (PTX ISA §9.7.12.2, by-value .param arguments and results): nvcc's PTX of calls.cu (kept as calls.ptx)
runs with the results of numpy / Python; bad calls are parse errors naming the line."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emulators.nv.ptx import load_entry
from emulators.nv.ptx.parse import PTXError, parse
from refgrad.device import Device
from tests.emulators.ptx.ptxkit import HEAD

PTX = (Path(__file__).parent / "calls.ptx").read_text()


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  ia, ib = a.view(np.int64), b.view(np.int64)
  ia, ib = np.where(ia < 0, np.int64(-2**63) - ia, ia), np.where(ib < 0, np.int64(-2**63) - ib, ib)
  return np.abs(ia - ib)


def test_double_sin_cos_slow_path():
  import mpmath
  x = np.array([0.5, -3.0, np.pi, 1e6, 1e10, -1e22, 1e300, 2.0 ** 1000, 6.0e15, -7.7e200, 0.0, -0.0, np.inf, np.nan])
  out = Device["NV"].run_ptx(PTX, "dsincos", [np.zeros(2 * len(x)), x, np.int32(len(x))], grid=(1, 1, 1), block=(32, 1, 1))[0]
  s, c = out[0::2], out[1::2]
  fin = np.isfinite(x)
  mpmath.mp.prec = 2200   # enough for the reduction of 2**1000
  ref_s = np.array([float(mpmath.sin(mpmath.mpf(float(v)))) for v in x[fin]])
  ref_c = np.array([float(mpmath.cos(mpmath.mpf(float(v)))) for v in x[fin]])
  # CUDA's sin/cos are within 2 ulp over the full range (CUDA C Programming Guide, mathematical functions, double
  # precision): that is nvcc's library's accuracy; the emulator runs its instructions exactly (here it is 0 or 1 ulp)
  assert _ulps(s[fin], ref_s).max() <= 2 and _ulps(c[fin], ref_c).max() <= 2
  assert np.signbit(s[x == 0]).tolist() == [False, True] and np.isnan(s[~fin]).all() and np.isnan(c[~fin]).all()


def test_calls_with_params_results_nested_and_divergent():
  n = 40
  x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
  out, steps = Device["NV"].run_ptx(PTX, "calls", [np.zeros(n, np.float32), np.zeros(n, np.int32), x, np.int32(n)],
                                    grid=(2, 1, 1), block=(32, 1, 1))[:2]
  i = np.arange(n, dtype=np.float32)
  def axpb(a, b):   # nvcc contracts a * b + 1 to one fma.rn.f32: f64 holds the exact result here (f32 times an int below 2**6, plus 1)
    return (a.astype(np.float64) * np.float64(b) + 1.0).astype(np.float32)
  want = axpb(x, i.astype(np.float64)) - (axpb(x, 3) + axpb(-x, 4))
  assert np.array_equal(out, want.astype(np.float32))
  def collatz(v: int) -> int:
    k = 0
    while v != 1: v, k = (3 * v + 1 if v & 1 else v // 2), k + 1
    return k
  assert steps.tolist() == [collatz(k + 1) if k % 3 == 0 else -2 for k in range(n)]


def test_the_inlined_callee_keeps_its_own_lines():
  e = parse(PTX).entries["calls"]
  assert not any(ins.op == "call" for ins in e.instrs)
  lines = [ins.line for ins in e.instrs]
  func_start = next(k for k, ln in enumerate(PTX.split("\n"), 1) if "_Z7collatzj(" in ln and ".func" in ln)
  assert any(ln > func_start for ln in lines)   # instructions report the callee's PTX line




@pytest.mark.parametrize("body, why", [
  ("{ .param .b32 p; .param .b32 r; call.uni (r), nofunc, (p); }", "not a .func of this module"),
  ("{ .param .b32 p; .param .b32 r; call.uni (r), f, (p, p); }", "with 2 arguments"),
  ("{ .param .b32 p; .param .b32 r; call.uni (r), g, (p); }", "recursive call of g"),
  ("{ .param .b32 r; call.uni (r), %rd1, (r), proto; }", "call form not supported"),
])
def test_bad_calls_name_the_line(body, why):
  src = HEAD + """.func (.param .b32 fr) f(.param .b32 fp) { .reg .b32 %r; ld.param.b32 %r, [fp]; st.param.b32 [fr], %r; ret; }
.func (.param .b32 gr) g(.param .b32 gp) { .param .b32 p; .param .b32 r; call.uni (r), g, (p); ret; }
.visible .entry k(.param .u64 out)
{
  .reg .b64 %rd<2>;
""" + body + "\n  ret;\n}\n"
  parse(src)   # the module parses: the call is an error of the entry that makes it, raised when that entry is loaded
  with pytest.raises(PTXError, match=why) as ex: load_entry(src, "k")
  assert "PTX line" in str(ex.value)
