"""Deliberately broken rows of refgrad's PTX renderer (refgrad/renderer/ptx.py), for the oracle-power tests. Imported by
fuzz workers (`preload`) with $FUZZ_INJECT naming the bug; `inject(name)` applies one in the calling process.

  ptx_rz        float ADD rounds toward zero (`add.rz` instead of `add.rn`)
  ptx_nobar     BARRIER renders as nothing (no `bar.sync 0`)
  ptx_lane      WMMA packs each pair of 16-bit fragment elements the wrong way round (a wrong fragment lane)
  ptx_fdiv      the executor's f32 `rcp.rn` row computes in f32 with numpy's division of 1 by x rounded toward zero
"""
from __future__ import annotations

import os

import numpy as np


def _rz() -> None:
  from refgrad.renderer import ptx
  from refgrad.uop.ops import Ops
  ptx.FLOAT_OPS[Ops.ADD] = "add.rz.{t}"

def _nobar() -> None:
  from refgrad.renderer import ptx
  ptx.BARRIER = "// bar.sync 0 (removed)"

def _lane() -> None:
  from refgrad.renderer import ptx
  ptx.PAIR = (1, 0)

def _exec_rcp() -> None:
  from emulators.nv.ptx import fast
  from emulators.nv.ptx import ops as xops
  fast.FAST["rcp"] = lambda ins, e: None   # no pre-decoded rcp step: every rcp runs through the (broken) table row
  orig = xops.TABLE["rcp"]
  def rcp(L, ins) -> None:
    if ins.types and ins.types[-1] == "f32" and not ins.has("approx"):
      x = L.get(ins.args[1], "f32")
      with np.errstate(all="ignore"): r = (np.float64(1.0) / x.astype(np.float64)).astype(np.float32)
      r = np.where(np.abs(r.astype(np.float64)) > np.abs(np.float64(1.0) / x.astype(np.float64)), np.nextafter(r, np.float32(0)), r)
      return L.put(ins.args[0], "f32", r.astype(np.float32))
    return orig(L, ins)
  xops.TABLE["rcp"] = rcp

BUGS = {"ptx_rz": _rz, "ptx_nobar": _nobar, "ptx_lane": _lane, "ptx_exec_rcp": _exec_rcp}

def inject(name: str) -> None: BUGS[name]()

if (_bug := os.environ.get("FUZZ_INJECT")) in BUGS: inject(_bug)
