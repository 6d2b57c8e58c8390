"""What the machine and the instruction handlers share: the fault a program raises, lane masks, raw bits <-> typed
numpy values."""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators.amd.rdna3 import alu as A

LANES = 32
U32, U64 = np.uint32, np.uint64
LANE_BITS = (U32(1) << np.arange(LANES, dtype=U32))


class WaveFault(Exception):
  """A fault inside the program: what, the kind ('mmu' / 'compute'), the address (for MMU faults)."""
  def __init__(self, what: str, kind: str = "compute", address: int | None = None):
    super().__init__(what)
    self.what, self.kind, self.address = what, kind, address


def is_float(t: str) -> bool: return t[0] == "f"


def typed(raw: np.ndarray, t: str) -> np.ndarray:
  if t in ("p16", "x16"): return raw.astype(U32)
  nt = A.NP[t]
  rt = A.RAW[np.dtype(nt).itemsize]
  return raw.view(nt) if raw.dtype == rt else raw.astype(rt).view(nt)   # a view of the raw bits when their width matches


def untyped(val: Any, t: str) -> np.ndarray:
  nt = A.NP.get(t, U32)
  size = np.dtype(nt).itemsize
  v = np.asarray(val)
  if is_float(t):
    with np.errstate(all="ignore"): return v.astype(nt).view(A.RAW[size])
  if v.dtype.kind == "f": raise WaveFault(f"internal: a float result for a {t} destination")
  if v.dtype == np.bool_: v = v.astype(np.int64)
  return v.astype(np.int64 if v.dtype.kind == "i" else np.uint64).astype(A.RAW[size] if size != 2 else np.uint16) if size >= 4 else \
    v.astype(np.int64).astype(np.uint16)


def lanes_to_mask(b: np.ndarray) -> np.ndarray:
  """[n, 32] bool -> uint32 per wave (bit l = lane l: the little-endian bytes of the packed lanes)."""
  return np.packbits(b, axis=1, bitorder="little").view("<u4")[:, 0].astype(U32, copy=False)


def mask_to_lanes(m: np.ndarray) -> np.ndarray:
  """uint32 (or the low dword of uint64) per wave -> [n, 32] bool."""
  m = np.ascontiguousarray(np.asarray(m).astype("<u4").reshape(-1, 1))
  return np.unpackbits(m.view(np.uint8), axis=1, bitorder="little").view(np.bool_)
