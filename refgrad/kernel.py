"""A kernel: its AST and the axes it iterates over, lowered to a linear program for one renderer.

The AST is a SINK of STOREs whose indices are expressions of axis placeholders: RANGE UOps whose
arg is the axis number and whose end is the axis size. Output (global) axes are the RANGEs outside
every REDUCE; reduce axes are the RANGEs a REDUCE(value, *ranges, arg=op) sums or maxes over.
Keeping the AST in terms of axes is what lets the optimizer (Opts) reshape a kernel later by
substituting axes, before lowering turns them into launch indices and loops.

Lowering (no Opts): the global axes become one flat launch index `idx0` (a loop on CPU, lanes on
the PYTHON device), split back into axes with // and %; each REDUCE becomes a DEFINE_ACC reset
before its loops and an ASSIGN inside them.
"""
from __future__ import annotations

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


@dataclass
class Kernel:
  ast: UOp                      # SINK of STOREs over axis placeholders
  name: str = "kernel"
  global_axes: list[UOp] = field(init=False)
  reduce_axes: list[UOp] = field(init=False)

  def __post_init__(self) -> None:
    if self.ast.op is not Ops.SINK or not all(s.op is Ops.STORE for s in self.ast.src):
      raise ValueError("a kernel AST is a SINK of STOREs")
    reduced = {r for u in self.ast.toposort if u.op is Ops.REDUCE for r in u.src[1:]}
    ranges = sorted((u for u in self.ast.toposort if u.op is Ops.RANGE), key=lambda r: r.arg)
    self.global_axes = [r for r in ranges if r not in reduced]
    self.reduce_axes = [r for r in ranges if r in reduced]

  @property
  def full_shape(self) -> tuple[int, ...]: return tuple(r.src[0].arg for r in self.global_axes + self.reduce_axes)

  def lower(self) -> UOp:
    """The kernel graph the linearizer takes: launch indices for global axes, accumulators for REDUCEs."""
    sizes = [r.src[0].arg for r in self.global_axes]
    sub: dict[UOp, UOp] = {}
    if self.global_axes:
      idx0 = UOp.special("idx0", max(1, math.prod(sizes)))
      stride = 1
      for r, n in reversed(list(zip(self.global_axes, sizes))):
        sub[r] = (idx0 // stride) % n
        stride *= n
    return graph_rewrite(self.ast, _lower_rules, ctx=_LowerCtx(sub))


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
