"""Linearization: a kernel graph (a SINK of STOREs) -> a linear program (see refgrad/uop/spec.py).

Every node gets a scope: the RANGE/IF blocks it must run inside (inherited from its sources; a
RANGE or IF adds itself for its users; an ASSIGN hands its users its scope minus the reduce
ranges of its accumulator, because after the loop they read the final value). Nodes that read an
accumulator's final value must come after its loop closes. Emission is greedy: emit every ready
node that fits the open blocks, else close the innermost block once nothing pending needs it,
else open the block some pending node needs (lowest axis first, ranges before IFs). Side effects
(STORE, DEFINE_ACC, ASSIGN, BARRIER) run in exactly their scope; pure values may be emitted as
soon as their sources exist (hoisted out of loops they do not depend on).
"""
from __future__ import annotations

from refgrad.dtype import dtypes
from refgrad.uop.ops import GroupOp, Ops, UOp

_EXACT_SCOPE = {Ops.STORE, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.BARRIER}


class LinearizeError(ValueError):
  """The kernel graph has no valid order (e.g. a value used outside the loop that computes it)."""


def linearize(sink: UOp) -> list[UOp]:
  nodes = [u for u in sink.toposort if u.op is not Ops.SINK]
  order = {u: i for i, u in enumerate(nodes)}
  reduce_ranges = {u: frozenset(u.src[1:]) for u in nodes if u.op is Ops.DEFINE_ACC}

  # scopes: what a node runs inside (scope) and what its users inherit (out)
  scope: dict[UOp, frozenset[UOp]] = {}
  out: dict[UOp, frozenset[UOp]] = {}
  after: dict[UOp, frozenset[UOp]] = {}   # reduce ranges that must be closed before the node runs
  for u in nodes:
    srcs = u.src[:1] if u.op is Ops.DEFINE_ACC else u.src
    s = frozenset().union(*(out[x] for x in srcs))
    a = frozenset().union(*(after[x] for x in srcs), *(reduce_ranges[x.src[0]] for x in srcs if x.op is Ops.ASSIGN))
    scope[u], after[u] = s, a - s
    out[u] = s | {u} if u.op in GroupOp.Block else s - reduce_ranges[u.src[0]] if u.op is Ops.ASSIGN else s
    # what reads an accumulator (its update, the ASSIGN) runs inside its loops, even when the value added does not depend on them
    if u.op is Ops.DEFINE_ACC: out[u] = s.union(*(out[r] | {r} for r in reduce_ranges[u]))
  for u in nodes:  # an accumulator is reset where its ASSIGNs' results live
    if u.op is Ops.ASSIGN: scope[u.src[0]] = scope[u.src[0]] | out[u]

  # a block may open only after the sibling loops its contents wait for have closed (loops that
  # share a scope with it are nested in it: those close inside it)
  block_after: dict[UOp, frozenset[UOp]] = {b: frozenset() for b in nodes if b.op in GroupOp.Block}
  nested: dict[UOp, frozenset[UOp]] = {b: frozenset() for b in block_after}
  pending_in: dict[UOp, int] = dict.fromkeys(block_after, 0)
  for u in nodes:
    for b in scope[u]:
      block_after[b] |= after[u]
      nested[b] |= scope[u]
      pending_in[b] += 1
  block_after = {b: a - nested[b] for b, a in block_after.items()}
  accs_of: dict[UOp, list[UOp]] = {}
  for acc, rs in reduce_ranges.items():
    for r in rs: accs_of.setdefault(r, []).append(acc)

  deps = {u: (u.src[:1] if u.op is Ops.DEFINE_ACC else u.src) for u in nodes}
  waiting = {u: len(set(deps[u])) for u in nodes}
  users: dict[UOp, list[UOp]] = {}
  for u in nodes:
    for s in set(deps[u]): users.setdefault(s, []).append(u)
  ready = {u for u in nodes if waiting[u] == 0}

  lin: list[UOp] = []
  emitted: set[UOp] = set()
  opened: list[UOp] = []
  closed: set[UOp] = set()

  def emit(u: UOp) -> None:
    lin.append(u)
    emitted.add(u)
    ready.discard(u)
    for b in scope[u]: pending_in[b] -= 1
    for v in users.get(u, ()):
      waiting[v] -= 1
      if waiting[v] == 0: ready.add(v)

  def fits(u: UOp) -> bool:
    if u.op in GroupOp.Block: return False
    op_set = frozenset(opened)
    if not after[u] <= closed: return False
    return scope[u] == op_set if u.op in _EXACT_SCOPE else scope[u] <= op_set

  while len(emitted) < len(nodes):
    if cands := [u for u in ready if fits(u)]:
      for u in sorted(cands, key=order.__getitem__): emit(u)
      continue
    if opened and pending_in[opened[-1]] == 0:
      b = opened.pop()
      lin.append(UOp(Ops.ENDRANGE if b.op is Ops.RANGE else Ops.ENDIF, dtypes.void, (b,)))
      closed.add(b)
      continue
    op_set = frozenset(opened)
    openable = [b for b in ready if b.op in GroupOp.Block and scope[b] <= op_set and pending_in[b] > 0 and block_after[b] <= closed
                and all(a in emitted for a in accs_of.get(b, ()))]
    if not openable:
      stuck = sorted((u for u in nodes if u not in emitted), key=order.__getitem__)[:3]
      raise LinearizeError(f"cannot order the kernel: open blocks {[b.arg for b in opened]}, waiting nodes {stuck}")
    b = min(openable, key=lambda b: (b.op is Ops.IF, b.arg if b.op is Ops.RANGE else 0, order[b]))
    emit(b)
    opened.append(b)
  while opened:
    b = opened.pop()
    lin.append(UOp(Ops.ENDRANGE if b.op is Ops.RANGE else Ops.ENDIF, dtypes.void, (b,)))
  return lin
