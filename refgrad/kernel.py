"""A kernel: its AST and the axes it iterates over, lowered to a linear program for one renderer.

The AST is a SINK of STOREs whose indices are expressions of axis placeholders: RANGE UOps whose
arg is the axis number and whose end is the axis size. Output axes are the RANGEs outside every
REDUCE; reduce axes are the RANGEs a REDUCE(value, *ranges, arg=op) sums or maxes over. Keeping the
AST in terms of axes is what lets the optimizer (refgrad/opt.py) reshape a kernel by substituting
axes before lowering turns them into launch indices and loops. Each axis has a kind:

  global   an output axis: launch indices (workgroups)            local    an output axis: work-items of a workgroup
  upcast   an output axis expanded in the program (unrolled)      reduce   a reduction loop
  unroll   a reduce axis expanded in the program

Lowering: without local axes, the global axes become one flat launch index `idx0` (a loop on CPU,
lanes on the PYTHON device), split back with // and %; with local axes, globals become gidx and
locals lidx. Upcast and unroll axes are expanded by substituting each of their values; each REDUCE
becomes a DEFINE_ACC reset before its loops and an ASSIGN inside them.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from refgrad.dtype import DType, dtypes
from refgrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite


def identity_element(op: Ops, dtype: DType) -> Any:
  """The value a reduction starts from: 0 for ADD, the dtype's smallest value for MAX."""
  if op is Ops.ADD: return 0
  if op is Ops.MAX: return -math.inf if dtypes.is_float(dtype) else dtypes.min(dtype)
  raise ValueError(f"no reduction for {op}")

def axis_size(r: UOp) -> int: return r.src[0].arg


@dataclass
class Kernel:
  ast: UOp                                   # SINK of STOREs over axis placeholders
  name: str = "kernel"
  axes: list[UOp] = field(init=False)        # every axis placeholder, in order (outermost first)
  kinds: dict[UOp, str] = field(init=False)
  applied: list[Any] = field(init=False)     # the Opts applied so far (refgrad/opt.py)
  nolocals: bool = field(init=False, default=False)

  def __post_init__(self) -> None:
    if self.ast.op is not Ops.SINK or not all(s.op is Ops.STORE for s in self.ast.src):
      raise ValueError("a kernel AST is a SINK of STOREs")
    reduced = {r for u in self.ast.toposort if u.op is Ops.REDUCE for r in u.src[1:]}
    self.axes = sorted((u for u in self.ast.toposort if u.op is Ops.RANGE), key=lambda r: r.arg)
    self.kinds = {r: "reduce" if r in reduced else "global" for r in self.axes}
    self.applied = []

  def of_kind(self, *kinds: str) -> list[UOp]: return [r for r in self.axes if self.kinds[r] in kinds]
  @property
  def global_axes(self) -> list[UOp]: return self.of_kind("global")
  @property
  def reduce_axes(self) -> list[UOp]: return self.of_kind("reduce")
  @property
  def full_shape(self) -> tuple[int, ...]: return tuple(axis_size(r) for r in self.axes)
  def copy(self) -> Kernel:
    k = Kernel.__new__(Kernel)
    k.ast, k.name, k.axes, k.kinds, k.applied, k.nolocals = self.ast, self.name, list(self.axes), dict(self.kinds), list(self.applied), self.nolocals
    return k

  # ---- axis surgery (used by the Opts) ------------------------------------------------------------
  def new_axis(self, size: int) -> UOp:
    return UOp.range(size, max((r.arg for r in self.axes), default=-1) + 1)

  def split(self, r: UOp, inner: int, inner_kind: str, top: bool = False) -> tuple[UOp, UOp]:
    """Split axis r (size n) into (n/inner, inner) -- or (inner, n/inner) with top -- where the `inner`-sized
    part gets `inner_kind`; r = outer*size(inner part) + inner part, so the order of the elements is kept."""
    n = axis_size(r)
    assert n % inner == 0
    a = self.new_axis(inner if top else n // inner)
    self.axes.insert(self.axes.index(r) + 1, a)
    b = self.new_axis(n // inner if top else inner)
    self.axes.insert(self.axes.index(a) + 1, b)
    self.axes.remove(r)
    kind = self.kinds.pop(r)
    self.kinds[a], self.kinds[b] = (inner_kind, kind) if top else (kind, inner_kind)
    self.replace_axis(r, a * axis_size(b) + b, (a, b))
    return a, b

  def replace_axis(self, r: UOp, expr: UOp, ranges: tuple[UOp, ...]) -> None:
    """Substitute expr for axis r in the AST; REDUCEs over r reduce over `ranges` instead."""
    ast = self.ast.substitute({r: expr})
    self.ast = graph_rewrite(ast, _fix_reduce, ctx=(expr, ranges))

  # ---- lowering ---------------------------------------------------------------------------------------
  def lower(self) -> UOp:
    """The kernel graph the linearizer takes: launch indices, expanded upcasts/unrolls, accumulators."""
    ast = self.ast
    # unroll: a REDUCE over an unroll axis combines one copy of its value per unroll value
    if unrolls := self.of_kind("unroll"): ast = graph_rewrite(ast, _expand_unroll, ctx=set(unrolls))
    # upcast: one copy of every store per combination of upcast values
    if ups := self.of_kind("upcast"):
      stores = []
      for vals in itertools.product(*(range(axis_size(r)) for r in ups)):
        stores.extend(ast.substitute({r: UOp.const(r.dtype, v) for r, v in zip(ups, vals)}).src)
      ast = UOp(Ops.SINK, dtypes.void, tuple(dict.fromkeys(stores)))
    sub: dict[UOp, UOp] = {}
    glb, loc = self.of_kind("global"), self.of_kind("local")
    if not loc: _launch(sub, glb, "idx", 1)
    else:
      _launch(sub, glb, "gidx", 3)
      _launch(sub, loc, "lidx", 3)
    return graph_rewrite(ast.simplify(), _lower_rules, ctx=_LowerCtx(sub))


def _launch(sub: dict[UOp, UOp], axes: list[UOp], prefix: str, dims: int) -> None:
  """Map axes to launch indices prefix0..: the last dims-1 axes get a dimension each (dimension 0 is the
  innermost), the rest share the highest dimension through // and %."""
  if not axes: return
  groups = [axes[:max(1, len(axes) - dims + 1)]] + [[r] for r in axes[max(1, len(axes) - dims + 1):]]
  for d, group in enumerate(reversed(groups)):
    sizes = [axis_size(r) for r in group]
    idx = UOp.special(f"{prefix}{d}", max(1, math.prod(sizes)))
    stride = 1
    for r, n in reversed(list(zip(group, sizes))):
      sub[r] = (idx // stride) % n
      stride *= n


def _fix_reduce_fn(ctx: tuple[UOp, tuple[UOp, ...]], u: UOp) -> UOp | None:
  expr, ranges = ctx
  if expr not in u.src[1:]: return None
  return u.replace(src=(u.src[0], *(x for s in u.src[1:] for x in (ranges if s is expr else (s,)))))
_fix_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="u"), _fix_reduce_fn)])

def _expand_unroll_fn(ctx: set[UOp], u: UOp) -> UOp | None:
  unr = [r for r in u.src[1:] if r in ctx]
  if not unr: return None
  vals = [u.src[0].substitute({r: UOp.const(r.dtype, v) for r, v in zip(unr, vs)})
          for vs in itertools.product(*(range(axis_size(r)) for r in unr))]
  acc = vals[0]
  for v in vals[1:]: acc = acc.alu(u.arg, v)
  rest = tuple(r for r in u.src[1:] if r not in ctx)
  return acc if not rest else u.replace(src=(acc, *rest))
_expand_unroll = PatternMatcher([(UPat(Ops.REDUCE, name="u"), _expand_unroll_fn)])


class _LowerCtx:
  def __init__(self, sub: dict[UOp, UOp]): self.sub, self.accs = sub, 0

def _lower_reduce(ctx: _LowerCtx, r: UOp) -> UOp:
  val, ranges = r.src[0], r.src[1:]
  acc = UOp(Ops.DEFINE_ACC, r.dtype, (UOp.const(r.dtype, identity_element(r.arg, r.dtype)), *ranges), (ctx.accs,))
  ctx.accs += 1
  return UOp(Ops.ASSIGN, r.dtype, (acc, acc.alu(r.arg, val)))

_lower_rules = PatternMatcher([
  (UPat(Ops.RANGE, name="r"), lambda ctx, r: ctx.sub.get(r)),
  (UPat(Ops.REDUCE, name="r"), _lower_reduce),
])
