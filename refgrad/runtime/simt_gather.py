"""Gathers from flat device memory for the SIMT executor (interpreted and array loops alike)."""
from __future__ import annotations

import numpy as np


def gather(view: np.ndarray, idx: np.ndarray, bc: int, c: int) -> np.ndarray:
  """The c consecutive elements of the flat array `view` from element idx*bc on, for every index (in bounds, checked by the
  caller): shaped like idx, with a trailing axis of c when c > 1. `take` copies elements whole, so every bit (NaN payloads
  too) is kept. Vectors whose first elements all lie at one offset modulo c are rows of the buffer viewed as (-1, c) from
  that offset: one row take, several times faster than indexing with an (n, c) table of element positions."""
  e = idx if bc == 1 else idx.astype(np.int64) * bc
  if c == 1: return np.take(view, e)
  if e.size:
    r = int(e.reshape(-1)[0]) % c
    pow2 = c & (c - 1) == 0   # indices are >= 0 here: masks and shifts instead of (slow) integer division
    if bool(((e & (c - 1)) if pow2 else (e % c)).__eq__(r).all()):
      rows = view[r:r + (view.size - r) // c * c].reshape(-1, c)
      q = e if r == 0 else e - r
      return np.take(rows, (q >> (c.bit_length() - 1)) if pow2 else q // c, axis=0)
  return np.stack([np.take(view, e + k if k else e) for k in range(c)], axis=-1)   # element by element (an int32 index plus k stays in bounds)
