"""Symbolic integer simplification: value bounds (`bounds`) and rewrite rules (`symbolic`).

Rules only fire where they are exact under the reference semantics: integer rules respect
wrap-around (they are applied only when bounds prove no overflow), float rules only where IEEE
guarantees the identity (x*1, x+(-0) are exact; x+0 is not: -0+0 = +0).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, NodeMemo, Ops, PatternMatcher, UOp, UPat, bounds, bounds_unclamped, graph_rewrite  # noqa: F401  (bounds: named here too)


def _fold(u: UOp) -> UOp | None:
  """Constant folding through the reference semantics, so folded values are bit-exact."""
  if not all(s.op is Ops.CONST for s in u.src) or u.dtype.count > 1: return None
  srcs = [semantics.from_python([s.arg], s.dtype) for s in u.src]
  if semantics.ub_check(u.op, u.dtype, srcs, [s.dtype for s in u.src]) is not None: return None  # keep UB visible at run time
  if u.op in GroupOp.Transcendental: return None  # native results are backend-specific
  out = semantics.evaluate(u.op, u.dtype, srcs, [s.dtype for s in u.src])
  return UOp(Ops.CONST, u.dtype, (), semantics.to_python(np.asarray(out).reshape(1), u.dtype)[0])

def _is_int(x: UOp) -> bool: return dtypes.is_int(x.dtype) and x.dtype.count == 1
def _fits(dt: DType, lo: Any, hi: Any) -> bool: return dtypes.min(dt) <= lo and hi <= dtypes.max(dt)

def _add_consts(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  # (x+c1)+c2 -> x+(c1+c2) is exact for wrap-around ints
  return x + x.const_like(c1.arg + c2.arg) if _is_int(x) else None

def _mul_consts(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  return x * x.const_like(c1.arg * c2.arg) if _is_int(x) else None

def _div_of_mul(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  # (x*c1)//c2 -> x*(c1//c2) when c2 divides c1 and x*c1 cannot wrap
  if not _is_int(x) or c2.arg <= 0 or c1.arg % c2.arg or not _fits(x.dtype, *sorted((x.vmin * c1.arg, x.vmax * c1.arg))): return None
  return x * x.const_like(c1.arg // c2.arg)

def _mod_small(x: UOp, c: UOp) -> UOp | None:
  return x if _is_int(x) and c.arg > 0 and 0 <= x.vmin and x.vmax < c.arg else None

def _div_small(x: UOp, c: UOp) -> UOp | None:
  return x.const_like(0) if _is_int(x) and c.arg > 0 and 0 <= x.vmin and x.vmax < c.arg else None

# index arithmetic from splitting and re-joining axes (reshapes, flat launch indices)
def _join_divmod(x: UOp, c1: UOp, c2: UOp, c3: UOp) -> UOp | None:
  # (x//c)*c + x%c == x for C division, whatever the sign of x
  return x if _is_int(x) and c1.arg == c2.arg == c3.arg > 0 else None

def _join_divmod_mod(x: UOp, c1: UOp, n: UOp, c2: UOp, c3: UOp) -> UOp | None:
  # ((x//c)%n)*c + x%c == x%(c*n) for x >= 0
  if not (_is_int(x) and c1.arg == c2.arg == c3.arg > 0 and n.arg > 0 and x.vmin >= 0 and _fits(x.dtype, 0, c1.arg * n.arg)): return None
  return x % x.const_like(c1.arg * n.arg)

def _split_mul_add(x: UOp, c: UOp, y: UOp, d: UOp) -> tuple[UOp, UOp] | None:
  # x*c + y with 0 <= y < c, x >= 0 and no wrap: // c is x, % c is y
  if not (_is_int(x) and c.arg == d.arg > 0 and x.vmin >= 0 and 0 <= y.vmin and y.vmax < c.arg and _fits(x.dtype, 0, x.vmax * c.arg + y.vmax)): return None
  return x, y

def _cmp_known(u: UOp) -> UOp | None:
  lo, hi = bounds_unclamped(u) or (0, 1)
  return UOp.const(dtypes.bool, bool(lo)) if lo == hi and u.dtype == dtypes.bool else None

def _where_same(c: UOp, x: UOp) -> UOp: return x

ints = tuple(dtypes.ints)

symbolic = PatternMatcher([
  # constant folding
  (UPat(GroupOp.ALU | {Ops.CAST, Ops.BITCAST}, name="u", src=UPat(Ops.CONST)), _fold),
  # identities that are exact for every dtype
  (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(None, 1)]), lambda x: x if not dtypes.is_bool(x.dtype) else None),
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
  (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("x"), UPat.var("x"))), _where_same),
  (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, True), UPat.var("x"), UPat.var())), lambda x: x),
  (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, False), UPat.var(), UPat.var("x"))), lambda x: x),
  (UPat(Ops.CAST, name="u", src=(UPat.var("x"),)), lambda u, x: x if u.dtype == x.dtype else None),
  # integer identities (exact under wrap-around)
  (UPat(Ops.ADD, src=[UPat.var("x", ints), UPat.const(ints, 0)]), lambda x: x),
  (UPat(Ops.MUL, src=[UPat.var("x", ints), UPat.const(ints, 0)]), lambda x: x.const_like(0)),
  (UPat(Ops.IDIV, src=(UPat.var("x", ints), UPat.const(ints, 1))), lambda x: x),
  (UPat(Ops.MOD, src=(UPat.var("x", ints), UPat.const(ints, 1))), lambda x: x.const_like(0)),
  (UPat(Ops.ADD, src=[UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c1")]), UPat.cvar("c2")]), _add_consts),
  (UPat(Ops.MUL, src=[UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c1")]), UPat.cvar("c2")]), _mul_consts),
  (UPat(Ops.IDIV, src=(UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c1")]), UPat.cvar("c2"))), _div_of_mul),
  (UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("c"))), _mod_small),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c"))), _div_small),
  (UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("c2")]),
                      UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("c3")))]), _join_divmod),
  (UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat(Ops.MOD, src=(UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("n"))), UPat.cvar("c2")]),
                      UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("c3")))]), _join_divmod_mod),
  (UPat(Ops.IDIV, src=(UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c")]), UPat.var("y")]), UPat.cvar("d"))),
   lambda x, c, y, d: r[0] if (r := _split_mul_add(x, c, y, d)) else None),
  (UPat(Ops.MOD, src=(UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c")]), UPat.var("y")]), UPat.cvar("d"))),
   lambda x, c, y, d: r[1] if (r := _split_mul_add(x, c, y, d)) else None),
  # comparisons decided by bounds
  (UPat(Ops.CMPLT, name="u", src=(UPat.var(dtype=ints), UPat.var())), _cmp_known),
  (UPat(Ops.CMPNE, name="u", src=(UPat.var(dtype=ints), UPat.var())), _cmp_known),
])

_SIMPLIFIED = NodeMemo("_simplified")

_ENABLED: ContextVar[bool] = ContextVar("simplify_enabled", default=True)

def simplify(u: UOp) -> UOp:
  """u under the `symbolic` rules. The rules depend on nothing but the node, so each node remembers its result."""
  return graph_rewrite(u, symbolic, memo=_SIMPLIFIED) if _ENABLED.get() else u

@contextmanager
def unsimplified() -> Iterator[None]:
  """`simplify` is the identity inside: the AST oracle schedules kernels exactly as the scheduler builds them, so a wrong
  symbolic rule cannot hide in the oracle's own input."""
  token = _ENABLED.set(False)
  try: yield
  finally: _ENABLED.reset(token)
