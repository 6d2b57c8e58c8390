"""Optimizations of a kernel (Opts): each reshapes the kernel's axes (refgrad/kernel.py) or refuses with an
InvalidOptError that says why. Applying a list of Opts is deterministic, and `valid_opts` lists what can be
applied to a kernel as it stands (the fuzzer and searches draw from it).

An Opt names an axis by its position in a list that depends on the op:
  UPCAST, LOCAL, PADTO   position among the output axes (kinds global)
  UNROLL                 position among the reduce axes (kind reduce)
  SWAP                   two positions among the output axes: (axis, arg) are swapped
  NOLOCALS               no axis: later Opts may not use local memory or work-items
`arg` is the size of the new axis (UPCAST/UNROLL/LOCAL: it must divide the axis; 0 means the whole axis for
UPCAST/UNROLL), or the multiple to pad to (PADTO).

Not yet here: GROUP/GROUPTOP (reductions through local memory) and TC (tensor cores); asking for them
raises InvalidOptError saying so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto

from refgrad.dtype import dtypes
from refgrad.kernel import Kernel, axis_size, identity_element
from refgrad.schedule import can_be_undefined
from refgrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite


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
MAX_LOCAL = 256      # work-items per workgroup


def apply_opt(k: Kernel, opt: Opt) -> Kernel:
  """A new kernel: k with opt applied (k itself is unchanged)."""
  def fail(why: str) -> InvalidOptError: return InvalidOptError(f"{opt} on kernel {k.name} (axes {_describe(k)}): {why}")
  ret = k.copy()
  if opt.op in (OptOps.GROUP, OptOps.GROUPTOP, OptOps.TC): raise fail("not implemented yet (reductions through local memory / tensor cores)")
  if opt.op is OptOps.NOLOCALS:
    if k.of_kind("local"): raise fail("the kernel already has local axes")
    if k.nolocals: raise fail("NOLOCALS was already applied")
    ret.nolocals = True
  elif opt.op is OptOps.SWAP:
    glb = k.global_axes
    if not (isinstance(opt.axis, int) and isinstance(opt.arg, int) and 0 <= opt.axis < opt.arg < len(glb)):
      raise fail(f"needs two output axes 0 <= axis < arg < {len(glb)}")
    a, b = glb[opt.axis], glb[opt.arg]
    ia, ib = ret.axes.index(a), ret.axes.index(b)
    ret.axes[ia], ret.axes[ib] = b, a
  else:
    axes = k.reduce_axes if opt.op is OptOps.UNROLL else k.global_axes
    if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(axes):
      raise fail(f"axis must be 0..{len(axes) - 1} among the {'reduce' if opt.op is OptOps.UNROLL else 'output'} axes")
    r = axes[opt.axis]
    n = axis_size(r)
    amt = n if opt.arg == 0 and opt.op in (OptOps.UPCAST, OptOps.UNROLL) else opt.arg
    if not isinstance(amt, int) or amt < 2: raise fail(f"arg must be an int >= 2{' (or 0: the whole axis)' if opt.op is not OptOps.LOCAL else ''}")
    if opt.op is OptOps.PADTO:
      if n % amt == 0: raise fail(f"axis of size {n} is already a multiple of {amt}")
      if any(can_be_undefined(u) and r in u.toposort for u in k.ast.toposort):
        raise fail("padded lanes would run an op that can be undefined (IDIV, MOD, shift, float->int) on placeholder values")
      _padto(ret, r, -(-n // amt) * amt)
    else:
      if n % amt: raise fail(f"{amt} does not divide the axis size {n}")
      if opt.op in (OptOps.UPCAST, OptOps.UNROLL):
        grown = amt * math.prod(axis_size(x) for x in k.of_kind("upcast", "unroll"))
        if grown > MAX_UPCAST: raise fail(f"upcast/unroll product would be {grown} > {MAX_UPCAST}")
      if opt.op is OptOps.LOCAL:
        if k.nolocals: raise fail("NOLOCALS forbids local axes")
        if (m := amt * math.prod(axis_size(x) for x in k.of_kind("local"))) > MAX_LOCAL: raise fail(f"workgroup would have {m} > {MAX_LOCAL} work-items")
      kind = {OptOps.UPCAST: "upcast", OptOps.UNROLL: "unroll", OptOps.LOCAL: "local"}[opt.op]
      if amt == n: ret.kinds[r] = kind
      else: ret.split(r, amt, kind)
  ret.applied.append(opt)
  return ret

def apply_opts(k: Kernel, opts: list[Opt]) -> Kernel:
  for o in opts: k = apply_opt(k, o)
  return k


def valid_opts(k: Kernel) -> list[Opt]:
  """Every Opt (with the small sizes a search would try) that applies to k as it stands, in a fixed order."""
  cands: list[Opt] = []
  for i in range(len(k.global_axes)):
    cands += [Opt(OptOps.UPCAST, i, a) for a in (0, 2, 3, 4, 8)] + [Opt(OptOps.LOCAL, i, a) for a in (2, 4, 8, 16, 32)]
    cands += [Opt(OptOps.PADTO, i, a) for a in (4, 8, 16, 32)]
    cands += [Opt(OptOps.SWAP, i, j) for j in range(i + 1, len(k.global_axes))]
  for i, _ in enumerate(k.reduce_axes): cands += [Opt(OptOps.UNROLL, i, a) for a in (0, 2, 3, 4, 8)]
  cands.append(Opt(OptOps.NOLOCALS))
  out = []
  for o in dict.fromkeys(cands):
    try: apply_opt(k, o)
    except InvalidOptError: continue
    out.append(o)
  return out


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
  new, valid = ctx
  if new not in u.src[1].toposort or (len(u.src) == 4 and valid in u.src[3].toposort): return None
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
