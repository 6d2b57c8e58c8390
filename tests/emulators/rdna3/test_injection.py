"""Seeded bugs in executor rows are caught: each injection below changes one row of the operation tables (ops.py) and
at least one kernel of the LLVM corpus must then disagree with numpy."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.amd.rdna3 import alu as A
from emulators.amd.rdna3 import ops as X
from tests.emulators.rdna3 import kernels as K
from tests.emulators.rdna3.llvm_util import run_direct
from tests.emulators.rdna3.test_execute import EXPECT, NP, N, inputs, kernels_of

U64 = np.uint64
INJECTIONS = {
  "v_add_f32 subtracts": ("VALU", "v_add_f32", lambda a, b: a - b),
  "v_fma_f32 rounds twice": ("VALU", "v_fma_f32", lambda a, b, c: (a * b).astype(a.dtype) + c),
  "v_mul_lo_u32 keeps the high word": ("VALU", "v_mul_lo_u32", lambda a, b: (a.astype(U64) * b.astype(U64)) >> U64(32)),
  "v_lshlrev_b32 shifts one more": ("VALU", "v_lshlrev_b32", lambda a, b: b << ((a + np.uint32(1)) & np.uint32(31))),
  "v_cvt_f32_u32 is signed": ("VALU", "v_cvt_f32_u32", lambda a: a.view(np.int32).astype(np.float32)),
  "v_min_f32 is max": ("VALU", "v_min_f32", A.fmax_ieee),
  "v_cmp_lt is le": ("FCMP", "lt", lambda a, b: a <= b),
}


def corpus_disagrees() -> list[str]:
  """Names of the elementwise kernels whose results differ from numpy."""
  bad = []
  for name, fn in EXPECT.items():
    t, tin, _ = K.ELEMENTWISE[name]
    a, b = inputs(NP[tin], np.random.default_rng(sum(map(ord, name))))
    if name in ("sqrt_f32", "sqrt_f16", "sqrt_f64", "log2_f32"): a = np.abs(a)
    if name.startswith("cvt_i"): a, b = np.trunc(a), np.abs(b)
    try: got = run_direct(kernels_of("elementwise")[name], [np.zeros(N, NP[t]), a, b], (N // 64, 1, 1), (64, 1, 1), checked=False)[0]
    except Exception:   # a fault is a disagreement too
      bad.append(name)
      continue
    with np.errstate(all="ignore"): want = np.asarray(fn(a, b)).astype(NP[t])
    if not np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")): bad.append(name)
  return bad


@pytest.mark.slow
def test_clean_corpus_agrees():
  assert corpus_disagrees() == []


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(INJECTIONS))
def test_injected_row_is_caught(monkeypatch, what):
  table, key, fn = INJECTIONS[what]
  monkeypatch.setitem({"VALU": X.VALU, "FCMP": X.FCMP}[table], key, fn)
  assert corpus_disagrees(), f"the seeded bug '{what}' went unnoticed by the corpus"
