"""A kernel: its AST and the axes it iterates over, lowered to a linear program for one target.

The AST is a SINK of STOREs whose indices are expressions of axis placeholders: RANGE UOps whose
arg is the axis number and whose end is the axis size. Output axes are the RANGEs outside every
REDUCE; reduce axes are the RANGEs a REDUCE(value, *ranges, arg=op) sums or maxes over. Keeping the
AST in terms of axes is what lets the optimizer (refgrad/opt.py) reshape a kernel by substituting
axes before lowering turns them into launch indices and loops. Each axis has a kind:

  global   an output axis: launch indices (workgroups)            local    an output axis: work-items of a workgroup
  upcast   an output axis expanded in the program (unrolled)      reduce   a reduction loop
  unroll   a reduce axis expanded in the program                  group    a reduce axis spread over work-items (GROUP)
  tc_m, tc_n, tc_k   the M, N and K axes of a tensor-core tile (TC), held in fragments across the lanes of a warp

Lowering, in order:
  - unroll: a REDUCE over an unroll axis combines one copy of its value per unroll value;
  - upcast: one copy of every store per combination of upcast values;
  - tensor cores: the REDUCE becomes WMMAs on fragments gathered by the target's lane layout (each lane's
    A and B elements are the value's two factors at the layout's coordinates), accumulated over the other
    reduce axes; every store is repeated per element of the lane's C fragment, at the C layout's coordinates;
  - GROUP: each work-item reduces its share, stores it to local memory, a BARRIER publishes it, then every
    work-item reduces the group's partials in order; only the group's first work-item stores to global memory;
  - launch indices: without local axes, the global axes become one flat launch index `idx0` (a loop on
    CPU, lanes on the PYTHON device), split back with // and %; with local axes (work-items, group axes,
    the warp lanes of tensor cores, innermost last), globals become gidx and locals lidx, in as many
    dimensions as the target's limits allow;
  - each remaining REDUCE becomes a DEFINE_ACC reset before its loops and an ASSIGN inside them;
  - memory access: loads and stores of consecutive, aligned elements become one vector access (up to the
    target's widest).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from refgrad.dtype import DType, dtypes
from refgrad.target import CPU, Layout, Target, TensorCore
from refgrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from refgrad.uop.symbolic import simplify
from refgrad.vectorize import vectorize_memory


def identity_element(op: Ops, dtype: DType) -> Any:
  """The value a reduction starts from: 0 for ADD, the dtype's smallest value for MAX."""
  if op is Ops.ADD: return 0
  if op is Ops.MAX: return -math.inf if dtypes.is_float(dtype) else dtypes.min(dtype)
  raise ValueError(f"no reduction for {op}")

def axis_size(r: UOp) -> int: return r.src[0].arg


class TCUse(NamedTuple):
  """A tensor core applied to a kernel: which one, and its M, N, K tile axes."""
  tc: TensorCore
  m: UOp
  n: UOp
  k: UOp


@dataclass
class Kernel:
  ast: UOp                                   # SINK of STOREs over axis placeholders
  name: str = "kernel"
  target: Target = CPU                       # what the kernel is optimized and lowered for
  axes: list[UOp] = field(init=False)        # every axis placeholder, in order (outermost first)
  kinds: dict[UOp, str] = field(init=False)
  applied: list[Any] = field(init=False)     # the Opts applied so far (refgrad/opt.py)
  nolocals: bool = field(init=False, default=False)
  tc: TCUse | None = field(init=False, default=None)

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
  @property
  def local_size(self) -> int:
    """Work-items per workgroup: local and group axes, times the warp of a tensor core."""
    return math.prod(axis_size(r) for r in self.of_kind("local", "group")) * (self.tc.tc.threads if self.tc else 1)
  @property
  def upcast_size(self) -> int: return math.prod(axis_size(r) for r in self.of_kind("upcast", "unroll"))
  def copy(self) -> Kernel:
    k = Kernel.__new__(Kernel)
    k.ast, k.name, k.target, k.axes, k.kinds, k.applied = self.ast, self.name, self.target, list(self.axes), dict(self.kinds), list(self.applied)
    k.nolocals, k.tc = self.nolocals, self.tc
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
    """The kernel graph the linearizer takes (see the module docstring for the steps)."""
    ast = self.ast
    if unrolls := self.of_kind("unroll"): ast = graph_rewrite(ast, _expand_unroll, ctx=set(unrolls))
    if ups := self.of_kind("upcast"):
      stores = []
      for vals in itertools.product(*(range(axis_size(r)) for r in ups)):
        stores.extend(ast.substitute({r: UOp.const(r.dtype, v) for r, v in zip(ups, vals)}).src)
      ast = UOp(Ops.SINK, dtypes.void, tuple(dict.fromkeys(stores)))
    fresh = itertools.count(max((r.arg for r in self.axes), default=-1) + 1)   # numbers of axes made while lowering
    warp = UOp.range(self.tc.tc.threads, next(fresh)) if self.tc else None
    loc = self.of_kind("local", "group") + ([warp] if warp is not None else [])
    accs = 0
    if self.tc: ast, accs = _tensor_cores(ast, self.tc, warp)
    if groups := self.of_kind("group"): ast = _group_reduces(ast, groups, loc, fresh)
    sub: dict[UOp, UOp] = {}
    glb = self.of_kind("global")
    if not loc: _launch(sub, glb, "idx", self.target.max_grid_dims[:1])
    else:
      _launch(sub, glb, "gidx", self.target.max_grid_dims)
      _launch(sub, loc, "lidx", self.target.max_block_dims)
    out = simplify(graph_rewrite(simplify(ast), _lower_rules, ctx=_LowerCtx(sub, accs)))
    out = vectorize_memory(out, self.target.max_vector_bytes)
    # the program keeps every buffer of the kernel, also one whose loads Opts and simplification made dead (two equal
    # fully unrolled sums: WHERE(c, x, x) -> x), so it is still launched with the kernel's buffers
    glb = sorted((u for u in self.ast.toposort if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    return out.replace(src=(*out.src, *missing)) if (missing := [u for u in glb if u not in out.toposort]) else out


def _launch(sub: dict[UOp, UOp], axes: list[UOp], prefix: str, limits: tuple[int, ...]) -> None:
  """Map axes to launch indices prefix0..: the last dims-1 axes get a dimension each (dimension 0 is the
  innermost), the rest share the highest dimension through // and %. Uses as many dimensions (up to
  len(limits)) as fit the per-dimension limits; the innermost axis always stays innermost in dimension 0."""
  if not axes: return
  for dims in range(len(limits), 0, -1):
    cut = max(1, len(axes) - dims + 1)
    groups = [axes[:cut]] + [[r] for r in axes[cut:]]
    if all(math.prod(axis_size(r) for r in g) <= lim for g, lim in zip(reversed(groups), limits)): break
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


# ---- tensor cores ---------------------------------------------------------------------------------------

def tc_factors(red: UOp, tc: TensorCore | None = None) -> tuple[UOp, UOp] | None:
  """The two factors of a REDUCE a tensor core can compute: an ADD over MUL(CAST(x), CAST(y)); with a tensor
  core, x and y must be of its dtype_in and the sum of its dtype_out (the products are then exact, as in the WMMA)."""
  v = red.src[0]
  if red.arg is not Ops.ADD or v.op is not Ops.MUL or not all(s.op is Ops.CAST for s in v.src): return None
  if tc is not None and (red.dtype != tc.dtype_out or any(s.src[0].dtype != tc.dtype_in for s in v.src)): return None
  return v.src[0].src[0], v.src[1].src[0]

def _coord(bits: tuple[tuple[str, int], ...], lane: UOp, e: int) -> UOp:
  """A layout coordinate of fragment element e as index arithmetic on the lane: runs of consecutive lane
  bits become one (lane // 2**b) % 2**n term."""
  out: UOp = UOp.const(dtypes.int32, sum(((e >> b) & 1) << j for j, (s, b) in enumerate(bits) if s == "e"))
  j = 0
  while j < len(bits):
    if bits[j][0] != "l": j += 1; continue
    n = 1
    while j + n < len(bits) and bits[j + n] == ("l", bits[j][1] + n): n += 1
    out = ((lane // (1 << bits[j][1])) % (1 << n)) * (1 << j) + out
    j += n
  return out

def _at(lay: Layout, lane: UOp, e: int, rows: UOp, cols: UOp) -> dict[UOp, UOp]:
  return {rows: _coord(lay.rows, lane, e), cols: _coord(lay.cols, lane, e)}

def _tensor_cores(ast: UOp, use: TCUse, lane: UOp) -> tuple[UOp, int]:
  """Every REDUCE over the tile's K axis becomes a WMMA chain; stores repeat per C fragment element."""
  tc, m, n, k = use
  fa, fb, fc = tc.frag_dtypes
  accs, frag = 0, {}
  for red in ast.toposort:
    if red.op is not Ops.REDUCE or k not in red.src[1:]: continue
    x, y = tc_factors(red, tc)  # type: ignore[misc]   # opt.py checked the pattern
    if m not in x.toposort: x, y = y, x
    a = UOp(Ops.VECTORIZE, fa, tuple(x.substitute(_at(tc.a, lane, e, m, k)) for e in range(tc.a.elems)))
    b = UOp(Ops.VECTORIZE, fb, tuple(y.substitute(_at(tc.b, lane, e, k, n)) for e in range(tc.b.elems)))
    zero = UOp.const(fc, 0.0)
    if rest := tuple(r for r in red.src[1:] if r is not k):
      acc = UOp(Ops.DEFINE_ACC, fc, (zero, *rest), (accs,))
      accs += 1
      frag[red] = UOp(Ops.ASSIGN, fc, (acc, UOp(Ops.WMMA, fc, (a, b, acc), tc.name)))
    else: frag[red] = UOp(Ops.WMMA, fc, (a, b, zero), tc.name)
  stores = [st.substitute({**_at(tc.c, lane, e, m, n), **{r: f.gep(e) for r, f in frag.items()}}) for st in ast.src for e in range(tc.c.elems)]
  return UOp(Ops.SINK, dtypes.void, tuple(dict.fromkeys(stores))), accs


# ---- GROUP: reductions through local memory -------------------------------------------------------------

def _group_reduces(ast: UOp, groups: list[UOp], loc: list[UOp], fresh: itertools.count) -> UOp:
  reds = [u for u in ast.toposort if u.op is Ops.REDUCE and any(r in groups for r in u.src[1:])]
  lid = _flat(loc)
  size = math.prod(axis_size(r) for r in loc)
  bufs, stores = [], []
  for i, red in enumerate(reds):
    rest = tuple(r for r in red.src[1:] if r not in groups)
    partial = red.replace(src=(red.src[0], *rest)) if rest else red.src[0]
    bufs.append(buf := UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(size, local=True), (), f"temp{i}"))
    stores.append(buf.store(lid, partial))
  bar = UOp(Ops.BARRIER, dtypes.void, tuple(stores))   # one barrier publishes every partial
  final = {}
  for red, buf in zip(reds, bufs):
    js = {r: UOp.range(axis_size(r), next(fresh)) for r in red.src[1:] if r in groups}
    part = UOp(Ops.LOAD, red.dtype, (buf, lid.substitute(js), bar))
    final[red] = UOp(Ops.REDUCE, red.dtype, (part, *js.values()), red.arg)
  ast = ast.substitute(final)
  # every work-item of a group holds the result: the first one stores it
  first = _all(*(r < 1 for r in groups))
  return ast.replace(src=tuple(st.replace(src=(*st.src[:3], _all(st.src[3], first) if len(st.src) == 4 else first)) for st in ast.src))

def _flat(axes: list[UOp]) -> UOp:
  out, stride = UOp.const(dtypes.int32, 0), 1
  for r in reversed(axes):
    out = r * stride + out
    stride *= axis_size(r)
  return out

def _all(*conds: UOp) -> UOp:
  out = conds[0]
  for c in conds[1:]: out = out & c
  return out


class _LowerCtx:
  def __init__(self, sub: dict[UOp, UOp], accs: int): self.sub, self.accs = sub, accs

def _lower_reduce(ctx: _LowerCtx, r: UOp) -> UOp:
  val, ranges = r.src[0], r.src[1:]
  acc = UOp(Ops.DEFINE_ACC, r.dtype, (UOp.const(r.dtype, identity_element(r.arg, r.dtype)), *ranges), (ctx.accs,))
  ctx.accs += 1
  return UOp(Ops.ASSIGN, r.dtype, (acc, acc.alu(r.arg, val)))

_lower_rules = PatternMatcher([
  (UPat(Ops.RANGE, name="r"), lambda ctx, r: ctx.sub.get(r)),
  (UPat(Ops.REDUCE, name="r"), _lower_reduce),
])
