"""Vector memory access: loads and stores of consecutive, aligned elements merged into one vector LOAD/STORE.

Upcasts and unrolls copy a kernel's loads and stores once per value of the expanded axis; where the copies
touch w consecutive elements of one buffer (same gate) starting at an index that is provably a multiple of
w, they become one access of a w-vector (w a power of two, at most the target's widest access): a vector
STORE of the VECTORIZEd values, or a vector LOAD whose lanes the old loads' users read with GEP. Alignment
is proved on the index's linear form (sum of coefficient * term + constant, exact in the wrap-around ring of
the index dtype): every coefficient and the constant must be multiples of w. The result is the same
program up to how memory is touched, so every backend gives the same bits.
"""
from __future__ import annotations

import math
from collections import defaultdict

from refgrad.dtype import DType, dtypes
from refgrad.uop.ops import Ops, UOp
from refgrad.uop.spec import load_parts

Linear = tuple[frozenset[tuple[UOp, int]], int]   # (terms with their non-zero coefficients, constant)


def linear_form(u: UOp, memo: dict[UOp, tuple[dict[UOp, int], int]] | None = None) -> Linear:
  """u as sum(coefficient * term) + constant over ADD, NEG and MUL by a constant; anything else is a term."""
  memo = {} if memo is None else memo
  terms, const = _linear(u, memo)
  return frozenset((t, c) for t, c in terms.items() if c), const

def _linear_srcs(u: UOp) -> tuple[UOp, ...]:
  """The sources whose linear forms u's is made of."""
  if u.op is Ops.ADD: return u.src
  if u.op is Ops.NEG: return u.src[:1]
  if u.op is Ops.MUL and (c := next((s for s in u.src if s.op is Ops.CONST), None)) is not None: return (u.src[1] if c is u.src[0] else u.src[0],)
  return ()

def _linear(u: UOp, memo: dict[UOp, tuple[dict[UOp, int], int]]) -> tuple[dict[UOp, int], int]:
  # sources first with an explicit stack: an index expression can be thousands of ADDs deep
  stack: list[tuple[UOp, bool]] = [(u, False)]
  while stack:
    x, ready = stack.pop()
    if x in memo: continue
    if not ready:
      stack.append((x, True))
      stack.extend((s, False) for s in _linear_srcs(x) if s not in memo)
      continue
    if x.op is Ops.CONST: r: tuple[dict[UOp, int], int] = ({}, int(x.arg))
    elif x.op is Ops.ADD:
      (ta, ca), (tb, cb) = memo[x.src[0]], memo[x.src[1]]
      t = dict(ta)
      for k, v in tb.items(): t[k] = t.get(k, 0) + v
      r = (t, ca + cb)
    elif (srcs := _linear_srcs(x)) and x.op is Ops.NEG:
      ta, ca = memo[srcs[0]]
      r = ({k: -v for k, v in ta.items()}, -ca)
    elif srcs:   # MUL by a constant
      ta, ca = memo[srcs[0]]
      c = int((x.src[0] if x.src[1] is srcs[0] else x.src[1]).arg)
      r = ({k: v * c for k, v in ta.items()}, ca * c)
    else: r = ({x: 1}, 0)
    memo[x] = r
  return memo[u]


def vectorize_memory(sink: UOp, max_bytes: int) -> UOp:
  """sink with runs of scalar LOADs/STOREs merged into vector accesses of at most max_bytes (see the module docstring)."""
  memo: dict[UOp, tuple[dict[UOp, int], int]] = {}
  loads: dict[tuple, dict[int, UOp]] = defaultdict(dict)
  for u in sink.toposort:
    if u.op is Ops.LOAD and (key := _key(u, *load_parts(u)[:3], memo, u.src[-1] if u.src[-1].op is Ops.BARRIER else None)) is not None:
      loads[key[0]].setdefault(key[1], u)
  stores: dict[tuple, dict[int, UOp]] = defaultdict(dict)
  for st in sink.src:
    if st.op is Ops.STORE and (key := _key(st, st.src[0], st.src[1], st.src[3] if len(st.src) == 4 else None, memo, None)) is not None:
      stores[key[0]].setdefault(key[1], st)
  sub: dict[UOp, UOp] = {}
  for (_, terms, *_), at in loads.items():
    for o, w in _runs(at, terms, max_bytes):
      first = at[o]
      buf, idx, gate, _ = load_parts(first)
      vdt = first.dtype.vec(w)
      src: tuple[UOp, ...] = (buf, idx)
      if gate is not None: src += (gate, UOp(Ops.VECTORIZE, vdt, tuple(load_parts(at[o + i])[3] for i in range(w))))  # type: ignore[misc]
      if first.src[-1].op is Ops.BARRIER: src += (first.src[-1],)
      vec = UOp(Ops.LOAD, vdt, src)
      for i in range(w): sub[at[o + i]] = vec.gep(i)
  merged: dict[UOp, UOp | None] = {}
  for (_, terms, *_), at in stores.items():
    for o, w in _runs(at, terms, max_bytes):
      first = at[o]
      val = UOp(Ops.VECTORIZE, first.src[2].dtype.vec(w), tuple(at[o + i].src[2] for i in range(w)))
      merged[first] = first.replace(src=(first.src[0], first.src[1], val, *first.src[3:]))
      for i in range(1, w): merged[at[o + i]] = None
  if not sub and not merged: return sink
  out = [merged.get(st, st) if st in merged else st for st in sink.src]
  new = UOp(Ops.SINK, dtypes.void, tuple(s for s in out if s is not None))
  return new.substitute(sub) if sub else new


def _key(u: UOp, buf: UOp, idx: UOp, gate: UOp | None, memo: dict, barrier: UOp | None) -> tuple[tuple, int] | None:
  """((buffer, terms, gate, barrier), constant offset) of a scalar access of a scalar buffer, else None."""
  base: DType = buf.dtype.base  # type: ignore[attr-defined]
  vdt = u.dtype if u.op is Ops.LOAD else u.src[2].dtype
  if base.count != 1 or vdt.count != 1 or idx.dtype.count != 1: return None
  terms, const = linear_form(idx, memo)
  return (buf, terms, gate, barrier), const

def _runs(at: dict[int, UOp], terms: frozenset[tuple[UOp, int]], max_bytes: int) -> list[tuple[int, int]]:
  """(start offset, width) of the aligned runs to merge, widest first."""
  if len(at) < 2: return []
  itemsize = next(iter(at.values())).src[0].dtype.base.itemsize  # type: ignore[attr-defined]
  align = math.gcd(*(c for _, c in terms)) if terms else 0   # the index minus its constant is a multiple of this
  out: list[tuple[int, int]] = []
  used: set[int] = set()
  w = 1 << max(0, (max_bytes // itemsize).bit_length() - 1)
  while w >= 2:
    if align % w == 0:
      for o in sorted(at):
        if o % w == 0 and all(o + i in at and o + i not in used for i in range(w)):
          out.append((o, w))
          used.update(range(o, o + w))
    w //= 2
  return out
