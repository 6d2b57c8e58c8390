"""Optimizations of a kernel (Opts): each reshapes the kernel's axes (refgrad/kernel.py) or refuses with an
InvalidOptError that says why. Applying a list of Opts is deterministic, and `valid_opts` lists what can be
applied to a kernel as it stands (the fuzzer and searches draw from it). Limits come from the kernel's target
(refgrad/target.py): work-items per workgroup, local memory, tensor cores.

An Opt names an axis by its position in a list that depends on the op:
  UPCAST, LOCAL, PADTO   position among the output axes (kinds global)
  UNROLL, GROUP,         position among the reduce axes (kind reduce)
  GROUPTOP
  SWAP                   two positions among the output axes: (axis, arg) are swapped
  NOLOCALS               no axis: later Opts may not use local memory or work-items
  TC                     position in the list of (M, N, K) axis triples a tensor core can take (`tc_candidates`);
                         arg: which of the target's tensor cores (its position in target.tensor_cores)
`arg` is the size of the new axis (UPCAST/UNROLL/LOCAL/GROUP/GROUPTOP: it must divide the axis; 0 means the whole
axis for UPCAST/UNROLL), or the multiple to pad to (PADTO). GROUP takes the inner part of a reduce axis (work-items
read neighbouring elements), GROUPTOP the outer part. TC must be the first Opt; its reduction can then be
neither unrolled nor grouped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto

from refgrad.dtype import dtypes
from refgrad.kernel import Kernel, TCUse, axis_size, identity_element, tc_factors
from refgrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from refgrad.uop.semantics import can_be_undefined


class OptOps(Enum):
  UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); GROUP = auto(); GROUPTOP = auto(); PADTO = auto(); SWAP = auto()
  NOLOCALS = auto(); TC = auto()
  def __repr__(self) -> str: return f"OptOps.{self.name}"


@dataclass(frozen=True)
class Opt:
  op: OptOps
  axis: int | None = None
  arg: int | None = None
  def __repr__(self) -> str: return f"Opt({self.op.name}, {self.axis}, {self.arg})"


class InvalidOptError(ValueError):
  """The Opt cannot be applied to this kernel; the message says which Opt and why."""


MAX_UPCAST = 16      # product of upcast and unroll sizes (program growth)


def apply_opt(k: Kernel, opt: Opt) -> Kernel:
  """A new kernel: k with opt applied (k itself is unchanged)."""
  def fail(why: str) -> InvalidOptError: return InvalidOptError(f"{opt} on kernel {k.name} (axes {_describe(k)}): {why}")
  ret = k.copy()
  tgt = k.target
  if opt.op is OptOps.NOLOCALS:
    if k.local_size > 1 or k.tc: raise fail("the kernel already has local axes")
    if k.nolocals: raise fail("NOLOCALS was already applied")
    ret.nolocals = True
  elif opt.op is OptOps.TC: _apply_tc(k, ret, opt, fail)
  elif opt.op is OptOps.SWAP:
    glb = k.global_axes
    if not (isinstance(opt.axis, int) and isinstance(opt.arg, int) and 0 <= opt.axis < opt.arg < len(glb)):
      raise fail(f"needs two output axes 0 <= axis < arg < {len(glb)}")
    a, b = glb[opt.axis], glb[opt.arg]
    ia, ib = ret.axes.index(a), ret.axes.index(b)
    ret.axes[ia], ret.axes[ib] = b, a
  else:
    on_reduce = opt.op in (OptOps.UNROLL, OptOps.GROUP, OptOps.GROUPTOP)
    axes = k.reduce_axes if on_reduce else k.global_axes
    if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(axes):
      raise fail(f"axis must be 0..{len(axes) - 1} among the {'reduce' if on_reduce else 'output'} axes")
    r = axes[opt.axis]
    n = axis_size(r)
    amt = n if opt.arg == 0 and opt.op in (OptOps.UPCAST, OptOps.UNROLL) else opt.arg
    if not isinstance(amt, int) or amt < 2: raise fail(f"arg must be an int >= 2{' (or 0: the whole axis)' if opt.op in (OptOps.UPCAST, OptOps.UNROLL) else ''}")
    if on_reduce and k.tc is not None and r in _reduce_of(k, k.tc.k).src[1:]:
      raise fail("the reduction runs on tensor cores: its axes can be neither unrolled nor grouped")
    if opt.op is OptOps.PADTO:
      if n % amt == 0: raise fail(f"axis of size {n} is already a multiple of {amt}")
      if any(can_be_undefined(u) and r in u.toposort for u in k.ast.toposort):
        raise fail("padded lanes would run an op that can be undefined (IDIV, MOD, shift, float->int) on placeholder values")
      _padto(ret, r, -(-n // amt) * amt)
    else:
      if n % amt: raise fail(f"{amt} does not divide the axis size {n}")
      if opt.op in (OptOps.UPCAST, OptOps.UNROLL):
        if (grown := amt * k.upcast_size) > MAX_UPCAST: raise fail(f"upcast/unroll product would be {grown} > {MAX_UPCAST}")
      else:
        if k.nolocals: raise fail("NOLOCALS forbids local axes")
        if (m := amt * k.local_size) > tgt.max_threads_per_block: raise fail(f"workgroup would have {m} > {tgt.max_threads_per_block} work-items")
      if opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
        red = _reduce_of(k, r)
        if any(u is not red and u.op is Ops.REDUCE for u in red.src[0].toposort) or any(red in u.src[0].toposort for u in _reduces(k) if u is not red):
          raise fail("a grouped reduction may not contain or be inside another reduction")
      kind = {OptOps.UPCAST: "upcast", OptOps.UNROLL: "unroll", OptOps.LOCAL: "local", OptOps.GROUP: "group", OptOps.GROUPTOP: "group"}[opt.op]
      if amt == n: ret.kinds[r] = kind
      else: ret.split(r, amt, kind, top=opt.op is OptOps.GROUPTOP)
      if kind == "group" and (b := _local_bytes(ret)) > tgt.shared_memory_per_block:
        raise fail(f"the partials of the grouped reductions would need {b} bytes of local memory > {tgt.shared_memory_per_block}")
  ret.applied.append(opt)
  return ret

def apply_opts(k: Kernel, opts: list[Opt]) -> Kernel:
  for o in opts: k = apply_opt(k, o)
  return k


def valid_opts(k: Kernel) -> list[Opt]:
  """Every Opt (with the small sizes a search would try) that applies to k as it stands, in a fixed order."""
  out = []
  for o in candidate_opts(k):
    try: apply_opt(k, o)
    except InvalidOptError: continue
    out.append(o)
  return out

def candidate_opts(k: Kernel) -> list[Opt]:
  """The Opts `valid_opts` tries, in its order, before checking which apply (a random walk can draw from these and
  keep the first that applies, without trying them all)."""
  cands: list[Opt] = []
  if not k.applied: cands += [Opt(OptOps.TC, i, j) for i in range(len(tc_candidates(k))) for j in range(len(k.target.tensor_cores))]
  for i in range(len(k.global_axes)):
    cands += [Opt(OptOps.UPCAST, i, a) for a in (0, 2, 3, 4, 8)] + [Opt(OptOps.LOCAL, i, a) for a in (2, 4, 8, 16, 32)]
    cands += [Opt(OptOps.PADTO, i, a) for a in (4, 8, 16, 32)]
    cands += [Opt(OptOps.SWAP, i, j) for j in range(i + 1, len(k.global_axes))]
  for i, _ in enumerate(k.reduce_axes):
    cands += [Opt(OptOps.UNROLL, i, a) for a in (0, 2, 3, 4, 8)]
    cands += [Opt(op, i, a) for op in (OptOps.GROUP, OptOps.GROUPTOP) for a in (2, 4, 8, 16)]
  cands.append(Opt(OptOps.NOLOCALS))
  return list(dict.fromkeys(cands))


# ---- tensor cores -----------------------------------------------------------------------------------------

def tc_candidates(k: Kernel) -> list[tuple[UOp, UOp, UOp]]:
  """The (m, n, k) axes a tensor core could take: the kernel's one reduction is an ADD of products of two
  casts (from a float16/bfloat16 value), m an output axis only the first factor reads, n one only the second
  reads, k a reduce axis both read. Sizes are not checked here (a tensor core needs multiples of its tile)."""
  reds = _reduces(k)
  if len(reds) != 1 or not (f := tc_factors(reds[0])): return []
  x, y = f[0].toposort, f[1].toposort
  glb = k.global_axes
  ms, ns = [r for r in glb if r in x and r not in y], [r for r in glb if r in y and r not in x]
  ks = [r for r in k.reduce_axes if r in x and r in y]
  return [(m, n, kk) for m in ms for n in ns for kk in ks]

def _apply_tc(k: Kernel, ret: Kernel, opt: Opt, fail) -> None:
  tgt = k.target
  if not tgt.tensor_cores: raise fail(f"target {tgt.name} has no tensor cores")
  if k.applied: raise fail("TC must be the first Opt")
  cands = tc_candidates(k)
  if not cands: raise fail("the kernel is not a single ADD reduction of products of two casts with separate output axes for each factor")
  if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(cands): raise fail(f"axis must be 0..{len(cands) - 1} among the (M, N, K) axis choices")
  if not isinstance(opt.arg, int) or not 0 <= opt.arg < len(tgt.tensor_cores): raise fail(f"arg must be 0..{len(tgt.tensor_cores) - 1}: a tensor core of {tgt.name}")
  tc = tgt.tensor_cores[opt.arg]
  red = _reduces(k)[0]
  if tc_factors(red, tc) is None:
    raise fail(f"{tc.name} takes products of {tc.dtype_in!r} values cast to {tc.dtype_out!r}, summed in {tc.dtype_out!r}")
  axes = cands[opt.axis]
  for r, size, what in zip(axes, tc.dims, "MNK"):
    if axis_size(r) % size: raise fail(f"{what} axis of size {axis_size(r)} is not a multiple of {tc.name}'s {what} = {size}")
  if (m := tc.threads * k.local_size) > tgt.max_threads_per_block: raise fail(f"workgroup would have {m} > {tgt.max_threads_per_block} work-items")
  tiles = []
  for r, size, kind in zip(axes, tc.dims, ("tc_m", "tc_n", "tc_k")):
    if axis_size(r) == size: ret.kinds[r] = kind; tiles.append(r)
    else: tiles.append(ret.split(r, size, kind)[1])
  ret.tc = TCUse(tc, *tiles)


# ---- helpers ----------------------------------------------------------------------------------------------

def _reduces(k: Kernel) -> list[UOp]: return [u for u in k.ast.toposort if u.op is Ops.REDUCE]

def _reduce_of(k: Kernel, r: UOp) -> UOp: return next(u for u in _reduces(k) if r in u.src[1:])

def _local_bytes(k: Kernel) -> int:
  """Local memory of the grouped reductions' partials: one element per work-item for each (upcast copy of a) grouped REDUCE."""
  groups = set(k.of_kind("group"))
  per_copy = sum(u.dtype.itemsize for u in _reduces(k) if groups & set(u.src[1:]))
  return per_copy * k.local_size * math.prod(axis_size(r) for r in k.of_kind("upcast"))


def _describe(k: Kernel) -> str: return "(" + ", ".join(f"{axis_size(r)}:{k.kinds[r]}" for r in k.axes) + ")"


# ---- PADTO: the axis grows to m; lanes past the old size n load nothing and store nothing --------------

def _padto(k: Kernel, r: UOp, m: int) -> None:
  n = axis_size(r)
  new = UOp.range(m, r.arg)
  valid = new < n
  ast = k.ast.substitute({r: new})
  k.ast = graph_rewrite(ast, _pad_rules, ctx=(new, valid))
  k.axes[k.axes.index(r)] = new
  k.kinds[new] = k.kinds.pop(r)

def _gate_load(ctx: tuple[UOp, UOp], u: UOp) -> UOp | None:
  new, valid = ctx
  if new not in u.src[1].toposort or (len(u.src) == 4 and valid in u.src[2].toposort): return None
  gate = valid if len(u.src) == 2 else (u.src[2] & valid)
  alt = UOp.const(u.dtype, False if u.dtype == dtypes.bool else 0) if len(u.src) == 2 else u.src[3]
  return u.replace(src=(u.src[0], u.src[1], gate, alt))

def _gate_store(ctx: tuple[UOp, UOp], u: UOp) -> UOp | None:
  # PADTO pads an output axis: every store is gated, also one whose index does not use the axis (a size-1 axis, a
  # broadcast), else its padded lanes store again to the same element: a race, and a wrong value from the gated loads
  _, valid = ctx
  if len(u.src) == 4 and valid in u.src[3].toposort: return None
  return u.replace(src=(*u.src[:3], valid if len(u.src) == 3 else (u.src[3] & valid)))

def _gate_reduce(ctx: tuple[UOp, UOp], u: UOp) -> UOp | None:
  # padded iterations of a reduction contribute its identity
  new, valid = ctx
  if new not in u.src[1:] or (u.src[0].op is Ops.WHERE and u.src[0].src[0] is valid): return None
  return u.replace(src=(valid.where(u.src[0], UOp.const(u.dtype, identity_element(u.arg, u.dtype))), *u.src[1:]))

_pad_rules = PatternMatcher([
  (UPat(Ops.LOAD, name="u"), _gate_load),
  (UPat(Ops.STORE, name="u"), _gate_store),
  (UPat(Ops.REDUCE, name="u"), _gate_reduce),
])
