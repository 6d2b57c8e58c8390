"""Reverse-mode autodiff over the tensor graph (refgrad/lazy.py).

`compute_gradient(root, root_grad, targets)` walks the nodes that lie on a path from `root` to a target,
last to first, and pushes each node's gradient to its sources with the rules in `pm_gradient`. A rule
gets the node (`ret`) and its gradient (`ctx`) and returns one gradient per source (None where the source
gets none). Gradients flow only into float nodes: integer and bool values are piecewise constant.

Decisions:
  - elementwise MAX with equal operands gives each operand half of the gradient (as tinygrad);
  - REDUCE_AXIS MAX splits the gradient evenly between all positions equal to the maximum (as tinygrad);
  - a tensor and its reshapes hold the same data, so they get the same gradient: a target RESHAPE(x)
    gets the gradient of x reshaped (a use of the data may reach x without passing through the target
    node, e.g. another tensor made from the same buffer);
  - CAST passes the gradient back (cast to the source dtype) between float dtypes only: a cast to or
    from an integer or bool is piecewise constant (and casting a gradient to an int could be UB; tinygrad
    casts back regardless);
  - a target that is reachable only through non-differentiable ops (comparisons, casts to int, ...)
    gets a zero gradient;
  - a node with a custom rule (`set_custom_rule`: pow, sigmoid, tanh, clip, rounding, exact selects) gives
    gradients straight to the inputs named in the rule, skipping the graph that computes its value: that
    graph is written for exact values (special cases, bit-exact selects) and its own derivative is wrong or
    NaN at the edges (0 * inf). Hash-consing may make one node of two equal constructions: both compute the
    same function of the same inputs, so the rule holds for both.
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any, cast

from refgrad import lazy
from refgrad.dtype import dtypes
from refgrad.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat

# ---- helpers building shaped tensor-graph nodes -------------------------------------------------------

def _const(like: UOp, value: Any) -> UOp:
  """`value` as a node of like's dtype and shape (a CONST has shape (); movement ops give it one)."""
  c = UOp.const(like.dtype, value)
  return lazy.expand(lazy.reshape(c, (1,) * len(like.shape)), like.shape)

def _alu(op: Ops, *srcs: UOp) -> UOp:
  if any(s.shape != srcs[0].shape for s in srcs): raise AssertionError(f"gradient: {op.name} on shapes {[s.shape for s in srcs]}")
  return srcs[0].alu(op, *srcs[1:])

def _mul(a: UOp, b: UOp) -> UOp: return _alu(Ops.MUL, a, b)
def _where(c: UOp, a: UOp, b: UOp) -> UOp: return _alu(Ops.WHERE, c, a, b)
def _recip(a: UOp) -> UOp: return _alu(Ops.RECIP, a)
def _scale(a: UOp, k: float) -> UOp: return _mul(a, _const(a, k))

def _max_grads(ret: UOp, g: UOp) -> tuple[UOp, UOp]:
  # ties (x == y) split the gradient in half between both operands
  x, y = ret.src
  zero, half = _const(g, 0), _scale(g, 0.5)
  tie = _where(_alu(Ops.CMPNE, x, y), zero, half)
  return _where(_alu(Ops.CMPLT, y, x), g, tie), _where(_alu(Ops.CMPLT, x, y), g, tie)

def _reduce_grads(ret: UOp, g: UOp) -> tuple[UOp]:
  x = ret.src[0]
  op, axes = ret.arg
  if op is Ops.ADD: return (lazy.expand(g, x.shape),)
  if op is Ops.MAX:
    # 1 where x equals the maximum; the gradient is shared evenly between the tied positions
    is_max = _where(_alu(Ops.CMPNE, x, lazy.expand(ret, x.shape)), _const(x, 0), _const(x, 1))
    share = _mul(g, _recip(lazy.reduce(is_max, Ops.ADD, axes)))
    return (_mul(is_max, lazy.expand(share, x.shape)),)
  raise NotImplementedError(f"gradient: no rule for REDUCE_AXIS {op}")

def _expand_grads(ret: UOp, g: UOp) -> tuple[UOp]:
  x = ret.src[0]
  return (lazy.reduce(g, Ops.ADD, tuple(i for i, (a, b) in enumerate(zip(x.shape, ret.shape)) if a != b)),)

def _cast_grads(ret: UOp, g: UOp) -> tuple[UOp | None]:
  # casting back to an integer type would be meaningless (and UB for large or NaN gradients)
  return (g.cast(ret.src[0].dtype) if dtypes.is_float(ret.src[0].dtype) and dtypes.is_float(ret.dtype) else None,)

def _copy_grads(ret: UOp, g: UOp) -> tuple[UOp]:
  dev = ret.src[0].device
  return (g if dev is None or dev == g.device else UOp(Ops.COPY, g.dtype, (g,), dev),)

_LN2 = math.log(2)

# one gradient per source of `ret`, given ret's gradient `ctx`
pm_gradient = PatternMatcher([
  (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx, ctx)),
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (_mul(ret.src[1], ctx), _mul(ret.src[0], ctx))),
  (UPat(Ops.NEG, name="ret"), lambda ctx, ret: (_alu(Ops.NEG, ctx),)),
  (UPat(Ops.RECIP, name="ret"), lambda ctx, ret: (_alu(Ops.NEG, _mul(ctx, _mul(ret, ret))),)),
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (_mul(ctx, _recip(_scale(ret, 2))),)),
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (_mul(ctx, _scale(ret, _LN2)),)),
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (_mul(ctx, _recip(_scale(ret.src[0], _LN2))),)),
  # d sin(x) = cos(x) = sin(pi/2 - x)
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (_mul(ctx, _alu(Ops.SIN, _alu(Ops.ADD, _const(ret, math.pi / 2), _alu(Ops.NEG, ret.src[0])))),)),
  (UPat(Ops.MAX, name="ret"), lambda ctx, ret: _max_grads(ret, ctx)),
  (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (None, _where(ret.src[0], ctx, _const(ctx, 0)), _where(ret.src[0], _const(ctx, 0), ctx))),
  (UPat(GroupOp.Comparison | GroupOp.Bitwise | GroupOp.IntOnly | {Ops.BITCAST}, name="ret"), lambda ctx, ret: (None,) * len(ret.src)),
  (UPat(Ops.CAST, name="ret"), lambda ctx, ret: _cast_grads(ret, ctx)),
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (lazy.reshape(ctx, ret.src[0].shape),)),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (lazy.permute(ctx, tuple(sorted(range(len(ret.arg)), key=ret.arg.__getitem__))),)),
  (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: _expand_grads(ret, ctx)),
  (UPat(Ops.PAD, name="ret"), lambda ctx, ret: (lazy.shrink(ctx, tuple((b, b + n) for (b, _), n in zip(ret.arg, ret.src[0].shape))),)),
  (UPat(Ops.SHRINK, name="ret"), lambda ctx, ret: (lazy.pad(ctx, tuple((b, n - e) for (b, e), n in zip(ret.arg, ret.src[0].shape))),)),
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (lazy.flip(ctx, ret.arg),)),
  (UPat(Ops.REDUCE_AXIS, name="ret"), lambda ctx, ret: _reduce_grads(ret, ctx)),
  (UPat(Ops.CONTIGUOUS, name="ret"), lambda ctx, ret: (ctx,)),
  (UPat(Ops.DETACH), lambda ctx: (None,)),
  (UPat(Ops.COPY, name="ret"), lambda ctx, ret: _copy_grads(ret, ctx)),
])


# node -> (inputs, rule(ret, g, *inputs) -> one gradient (or None) per input); weak, so a rule dies with its node.
# A rule must not hold `ret` itself (it would keep the key alive): it gets it as an argument.
CustomRule = Callable[..., tuple[UOp | None, ...]]
custom_rules: weakref.WeakKeyDictionary[UOp, tuple[tuple[UOp, ...], CustomRule]] = weakref.WeakKeyDictionary()

def set_custom_rule(node: UOp, inputs: tuple[UOp, ...], rule: CustomRule) -> None:
  """Differentiate `node` with `rule` (given node, its gradient and `inputs`, all UOps) instead of through its sources."""
  custom_rules[node] = (inputs, rule)


def _data_node(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u

def _settle(u: UOp) -> UOp:
  # compute (and cache) shape and device now, node by node: computed lazily on a deep graph they would recurse once per level
  _ = u.shape, u.device
  return u


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """d(root)/d(t), weighted by root_grad (root's shape), for every target t reachable from root: a node of
  t's shape and dtype. Targets root does not depend on are left out."""
  if root_grad.shape != root.shape: raise ValueError(f"compute_gradient: root_grad shape {root_grad.shape} does not match root shape {root.shape}")
  graph = root.toposort
  for u in graph: _settle(u)
  data = {t: _data_node(t) for t in targets}
  wanted = {d for d in data.values() if d in graph}
  # the nodes on a path from root to a target, sources before users
  on_path: set[UOp] = set()
  for u in graph:
    if u in wanted or any(s in on_path for s in u.src): on_path.add(u)
  grads: dict[UOp, UOp] = {root: _settle(root_grad.cast(root.dtype))} if root in on_path else {}
  for u in reversed(graph):
    if u not in on_path or (g := grads.get(u)) is None or not u.src: continue
    if (custom := custom_rules.get(u)) is not None:
      srcs, src_grads = custom[0], tuple(custom[1](u, g, *custom[0]))
    else:
      if (new := pm_gradient.rewrite(u, ctx=g)) is None: raise NotImplementedError(f"gradient: no rule for {u.op.name}")
      srcs, src_grads = u.src, cast(tuple, new)
    if len(src_grads) != len(srcs): raise AssertionError(f"gradient rule for {u.op.name} gave {len(src_grads)} gradients for {len(srcs)} sources")
    for s, sg in zip(srcs, src_grads):
      if sg is None or s not in on_path or not dtypes.is_float(s.dtype): continue
      if sg.shape != s.shape or sg.dtype != s.dtype:
        raise AssertionError(f"gradient rule for {u.op.name} gave {sg.shape} {sg.dtype} for a source of {s.shape} {s.dtype}")
      grads[s] = _settle(sg if s not in grads else _alu(Ops.ADD, grads[s], sg))
  ret: dict[UOp, UOp] = {}
  for t, d in data.items():
    if d not in wanted: continue
    g = grads.get(d)
    ret[t] = lazy.reshape(g, t.shape) if g is not None else _const(t, 0)
  return ret
