"""Atomics of many lanes on few addresses run as one ordered scan per address (ops._atom_scan) with the results of
lane-by-lane rounds (ATOM_ROUNDS): every op and type, old values, float rounding order, shared memory of several CTAs."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.nv.ptx import ops
from refgrad.device import Device
from tests.emulators.ptx.ptxkit import HEAD

# every op sm_80 has (ptxas accepts each kernel); f16x2, cas, inc and dec take the scan's lane-by-lane branch
CASES = [("add", "u32"), ("add", "u64"), ("add", "f32"), ("add", "f64"), ("add", "f16"), ("add", "f16x2"), ("min", "s32"), ("max", "u64"),
         ("min", "s64"), ("and", "b32"), ("or", "b64"), ("xor", "b32"), ("exch", "b32"), ("exch", "b64"), ("cas", "b32"), ("cas", "b64"),
         ("inc", "u32"), ("dec", "u32")]
REG = {"u32": "b32", "s32": "b32", "b32": "b32", "f32": "f32", "f16x2": "b32", "bf16x2": "b32", "u64": "b64", "s64": "b64", "b64": "b64",
       "f64": "f64", "f16": "b16", "bf16": "b16"}


def kernel(op: str, t: str, space: str) -> str:
  """Lane i applies atom.op to slot i % 3 (global: of `acc`; shared: of its CTA's copy, then written out per CTA) with
  operand x[i] (cas: compare with the slot's lane-order predecessor's x, swap in x[i]); old values to `olds`."""
  r, w = REG[t], {"b16": 2, "b32": 4, "f32": 4, "b64": 8, "f64": 8}[REG[t]]
  lt = {"b16": "b16", "b32": "b32", "f32": "b32", "b64": "b64", "f64": "b64"}[r]
  cas = ", %v2" if op == "cas" else ""
  body = f"""
  ld.param.u64 %rd0, [acc]; ld.param.u64 %rd1, [xs]; ld.param.u64 %rd2, [olds];
  mov.u32 %r0, %tid.x; mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mad.lo.u32 %r3, %r1, %r2, %r0;
  mul.wide.u32 %rd3, %r3, {w}; add.s64 %rd4, %rd1, %rd3; ld.global.{lt} %v1, [%rd4];
  {"add.s64 %rd9, %rd4, -" + str(w) + "; setp.eq.u32 %p0, %r3, 0; @%p0 mov.u64 %rd9, %rd4; ld.global." + lt + " %v2, [%rd9];" if op == "cas" else ""}
  rem.u32 %r4, %r3, 3; mul.wide.u32 %rd5, %r4, {w};"""
  if space == "global":
    body += f"""
  add.s64 %rd6, %rd0, %rd5;
  atom.global.{op}{".noftz" if t in ("f16", "bf16", "f16x2", "bf16x2") else ""}.{t} %v0, [%rd6], %v1{cas};"""
  else:
    body += f"""
  mov.u32 %r5, sh; cvt.u32.u64 %r6, %rd5; add.u32 %r6, %r5, %r6;
  setp.lt.u32 %p1, %r0, 3; shl.b32 %r7, %r0, {w.bit_length() - 1}; add.u32 %r7, %r5, %r7;
  mul.wide.u32 %rd7, %r0, {w}; add.s64 %rd7, %rd0, %rd7;
  @%p1 ld.global.{lt} %v3, [%rd7]; @%p1 st.shared.{lt} [%r7], %v3;
  bar.sync 0;
  atom.shared.{op}{".noftz" if t in ("f16", "bf16", "f16x2", "bf16x2") else ""}.{t} %v0, [%r6], %v1{cas};
  bar.sync 0;
  @%p1 ld.shared.{lt} %v3, [%r7];
  mul.lo.u32 %r8, %r1, 3; add.u32 %r8, %r8, %r0; mul.wide.u32 %rd8, %r8, {w}; ld.param.u64 %rd10, [percta]; add.s64 %rd8, %rd10, %rd8;
  @%p1 st.global.{lt} [%rd8], %v3;"""
  body += f"""
  add.s64 %rd4, %rd2, %rd3; st.global.{lt} [%rd4], %v0;
  ret;"""
  return HEAD + f""".visible .entry k(.param .u64 acc, .param .u64 xs, .param .u64 olds, .param .u64 percta)
{{
  .reg .pred %p<4>; .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .{r} %v<4>;
  .shared .align 8 .b8 sh[24];
{body}
}}"""


def values(t: str, n: int, rng: np.random.Generator) -> np.ndarray:
  if t in ("f32", "f64", "f16"): return (rng.standard_normal(n) * 100).astype({"f32": np.float32, "f64": np.float64, "f16": np.float16}[t]).view(f"u{ {'f32': 4, 'f64': 8, 'f16': 2}[t]}")
  if t == "bf16": return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
  if t in ("f16x2",): return rng.standard_normal(2 * n).astype(np.float16).view(np.uint32)
  if t == "bf16x2": return (rng.standard_normal(2 * n).astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(np.uint32)
  w = {"u32": 4, "s32": 4, "b32": 4, "u64": 8, "s64": 8, "b64": 8}[t]
  return rng.integers(0, 40 if t in ("u32",) else 2**(8 * w - 2), n, dtype=np.uint64).astype(f"u{w}")


@pytest.mark.parametrize("op, t", CASES)
@pytest.mark.parametrize("space", ["global", "shared"])
def test_scan_equals_rounds(op, t, space, monkeypatch: pytest.MonkeyPatch):
  rng = np.random.default_rng(5)
  grid, block = ((2, 1, 1), (64, 1, 1)) if space == "global" else ((1, 1, 1), (128, 1, 1))   # (shared: the scan is per CTA)
  n = 128
  x = values(t, n, rng)
  start = values(t, 3, rng)
  if op == "cas": start[:] = x[[0, 0, 0]]   # slot i % 3's first lane compares with its own value: swaps happen
  outs, scans = [], []
  orig = ops._atom_scan
  monkeypatch.setattr(ops, "_atom_scan", lambda *a: scans.append(1) or orig(*a))
  for rounds in (ops.ATOM_ROUNDS, 10**9):   # the scan (many lanes per address), then lane by lane
    monkeypatch.setattr(ops, "ATOM_ROUNDS", rounds)
    r = Device["NV"].run_ptx(kernel(op, t, space), "k", [start.copy(), x, np.zeros_like(x), np.zeros(6, x.dtype)], grid=grid, block=block)
    outs.append([a.tobytes() for a in (r[0], r[2], r[3])])
  assert scans == [1] and outs[0] == outs[1]


def test_float_add_is_in_lane_order():
  x = np.float32([1e8, 1.0, -1e8, 1.0] * 16)   # the order of the adds decides the sum
  r = Device["NV"].run_ptx(kernel("add", "f32", "global"), "k", [np.zeros(3, np.float32), x.view(np.uint32), np.zeros(64, np.uint32),
                                                                  np.zeros(6, np.uint32)], block=(64, 1, 1))
  want = np.zeros(3, np.float32)
  for i, v in enumerate(x): want[i % 3] = np.float32(want[i % 3] + v)
  assert r[0].tobytes() == want.tobytes()
