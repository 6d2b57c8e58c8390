"""Gathers from flat device memory for the SIMT executor (interpreted and array loops alike)."""
from __future__ import annotations

from typing import Any

import numpy as np

from refgrad.dtype import dtypes
from refgrad.uop.ops import GroupOp, Ops, UOp


def gather(view: np.ndarray, idx: np.ndarray, bc: int, c: int, res: int | None = None) -> np.ndarray:
  """The c consecutive elements of the flat array `view` from element idx*bc on, for every index (in bounds, checked by the
  caller): shaped like idx, with a trailing axis of c when c > 1. `take` copies elements whole, so every bit (NaN payloads
  too) is kept. Vectors whose first elements all lie at one offset modulo c are rows of the buffer viewed as (-1, c) from
  that offset: one row take, several times faster than indexing with an (n, c) table of element positions.
  res: idx*bc modulo c when the caller proved it for every index (`residue`), which saves checking it here."""
  e = idx if bc == 1 else idx.astype(np.int64) * bc
  if c == 1: return np.take(view, e)
  if e.size:
    r = int(e.reshape(-1)[0]) % c if res is None else res
    pow2 = c & (c - 1) == 0   # indices are >= 0 here: masks and shifts instead of (slow) integer division
    if res is not None or bool(((e & (c - 1)) if pow2 else (e % c)).__eq__(r).all()):
      rows = view[r:r + (view.size - r) // c * c].reshape(-1, c)
      q = e if r == 0 else e - r
      return np.take(rows, (q >> (c.bit_length() - 1)) if pow2 else q // c, axis=0)
  return np.stack([np.take(view, e + k if k else e) for k in range(c)], axis=-1)   # element by element (an int32 index plus k stays in bounds)


def residue(u: UOp, m: int, memo: dict[UOp, int | None], depth: int = 0) -> int | None:
  """u's value modulo m (a power of two: int32/int64 wrapping keeps residues modulo powers of two) when the uops prove it
  for every lane, else None. Follows ADD, MUL and SHL of integer values down to CONSTs (at most 64 deep)."""
  if u in memo: return memo[u]
  r: int | None = None
  if depth < 64 and u.dtype.count == 1 and dtypes.is_int(u.dtype) and u.dtype != dtypes.bool:
    if u.op is Ops.CONST: r = int(u.arg) % m
    elif u.op in (Ops.ADD, Ops.MUL):
      a, b = residue(u.src[0], m, memo, depth + 1), residue(u.src[1], m, memo, depth + 1)
      if u.op is Ops.MUL and 0 in (a, b): r = 0
      elif a is not None and b is not None: r = (a + b if u.op is Ops.ADD else a * b) % m
    elif u.op is Ops.SHL and u.src[1].op is Ops.CONST and 0 <= int(u.src[1].arg) < u.dtype.itemsize * 8:
      a, k = residue(u.src[0], m, memo, depth + 1), 1 << int(u.src[1].arg)
      r = 0 if k % m == 0 else None if a is None else a * k % m
  memo[u] = r
  return r


def lane_form(u: UOp, memo: dict[UOp, Any], depth: int = 0) -> Any:
  """How u's value depends on the lane, from its uops: "uniform" (the same on every lane), ("lane", s) for the SPECIAL s
  itself, ("period", P, s) for a function of s % P, ("block", B, s) for a function of s // B, else None. A load whose
  index is periodic or blockwise in the lane id touches only P (or lanes / B) distinct places: it gathers those once.
  Looks at most 64 uops deep (deeper index expressions, e.g. thousands of chained views, are None)."""
  if u in memo: return memo[u]
  f: Any = None
  if depth >= 64: pass
  elif u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.RANGE): f = "uniform"
  elif u.op is Ops.SPECIAL: f = ("lane", u)
  elif u.op in (Ops.MOD, Ops.IDIV) and u.src[0].op is Ops.SPECIAL and u.src[1].op is Ops.CONST and int(u.src[1].arg) > 0:
    f = ("period" if u.op is Ops.MOD else "block", int(u.src[1].arg), u.src[0])
  elif u.op in GroupOp.ALU or u.op is Ops.CAST:
    forms = {lane_form(x, memo, depth + 1) for x in u.src} - {"uniform"}
    if not forms: f = "uniform"
    elif len(forms) == 1 and (g := forms.pop()) is not None and g[0] != "lane": f = g   # any function of s % P (s // B) is one too
  memo[u] = f
  return f
