"""A loop's carried region run through array functions (emulators/nv/ptx/rows.py) gives the bits of its step closures
and of the loop stepped one instruction at a time."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.nv.ptx import loops
from emulators.nv.ptx.parse import parse
from tests.emulators.ptx.test_loops import MAX_NAN, SPECIAL, kernel, run

RNG = np.random.default_rng(17)


# a mix: signed and unsigned compares against immediates, selp of constants, bit ops, sub/mul/min, a mov
MIX = kernel("""
  mul.lo.s32 %r1, %r0, %r9;
  mul.wide.s32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.f32 %f1, 0f3F800000;
  mov.u32 %r2, 0;
L_top:
  ld.global.f32 %f2, [%rd5];
  sub.rn.f32 %f3, %f1, %f2;
  mul.rn.f32 %f4, %f3, 0f3F000000;
  min.f32 %f5, %f4, %f1;
  mov.b32 %r3, %f5;
  setp.lt.s32 %p2, %r3, 0;
  xor.b32 %r4, %r3, 0x80000000;
  selp.b32 %r5, %r4, %r3, %p2;
  setp.hi.u32 %p3, %r5, 0x7F000000;
  or.b32 %r6, %r5, 1;
  selp.b32 %f1, 0x3F800000, %r6, %p3;
  add.s64 %rd5, %rd5, 4;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.f32 [%rd3], %f1;
""")


@pytest.mark.parametrize("src", [MAX_NAN, MIX], ids=["max", "mix"])
def test_region_rows_match_steps_and_stepped_loop(monkeypatch, src):
  (plan,) = loops.plans(parse(src).entries["k"]).values()
  assert plan.region and plan.row_ops is not None and len(plan.row_ops) == len(plan.region)
  data = np.resize(np.concatenate([SPECIAL, RNG.standard_normal(200).astype(np.float32) * 3]), 24 * 40)
  RNG.shuffle(data)
  out = []
  for on_loops, on_rows in ((True, True), (True, False), (False, True)):
    monkeypatch.setattr(loops, "enabled", on_loops)
    monkeypatch.setattr(loops, "rows_enabled", on_rows)
    out.append(run(src, 24, data, 40).tobytes())
  assert out[0] == out[1] == out[2]


def test_region_with_other_instructions_is_stepped():
  fib = kernel("""
  mov.u32 %r2, 0;
  mov.u32 %r3, 0;
  mov.u32 %r4, 1;
L_top:
  mad.lo.s32 %r5, %r3, 3, %r4;
  mov.u32 %r3, %r4;
  mov.u32 %r4, %r5;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.u32 [%rd3], %r4;
""")
  (plan,) = loops.plans(parse(fib).entries["k"]).values()
  assert plan.region and plan.row_ops is None   # mad.lo.s32 has no array function: its step closures run


NANS = np.array([0x7F800001, 0xFFC00123, 0x7FA00000, 0x7FC00000, 0xFF800005], np.uint32).view(np.float32)   # signaling, signed, payloads


@pytest.mark.parametrize("lanes", [32, 24])   # (numpy's add keeps the second NaN of two in some lanes of 20-24-long arrays: not folded there)
@pytest.mark.parametrize("c_first", [True, False])
def test_max_region_folds_as_stepped(monkeypatch, c_first, lanes):
  """The rendered MAX folds every row but the last at once: the first NaN met (c first) or the newest (x first), quieted;
  else the largest with -0 below +0; lanes of only zeros, of NaNs only, of one NaN."""
  src = MAX_NAN if c_first else MAX_NAN.replace("%f1, %f2;", "%f2, %f1;")
  (plan,) = loops.plans(parse(src).entries["k"]).values()
  assert plan.fold == ("%f1", "%f2", c_first)
  n = 50
  x = RNG.standard_normal((lanes, n)).astype(np.float32)
  x[0] = np.where(RNG.random(n) < 0.5, np.float32(0.0), np.float32(-0.0))
  x[1] = -0.0
  x[2] = RNG.choice(NANS, n)
  for i in range(3, lanes, 3): x[i, RNG.integers(0, n, 2)] = RNG.choice(NANS, 2)
  x[4, 7] = np.inf
  x[5] = -np.inf
  out = []
  for fold in (True, False):
    monkeypatch.setattr(loops, "fold_enabled", fold)
    out.append(run(src, lanes, x.reshape(-1), n).tobytes())
  monkeypatch.setattr(loops, "enabled", False)
  out.append(run(src, lanes, x.reshape(-1), n).tobytes())
  assert out[0] == out[1] == out[2]
  r = np.frombuffer(out[0], np.uint32)
  assert r[1] == 0x80000000 and r[0] in (0, 0x80000000) and np.isnan(np.frombuffer(out[0], np.float32)[2])
  assert all(np.frombuffer(out[0], np.float32)[i] == x[i].max() for i in range(4, lanes) if not np.isnan(x[i]).any())
