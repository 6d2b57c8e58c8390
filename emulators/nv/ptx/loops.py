"""Counted loops run as whole arrays: the uniform scheduler's fast path for a loop whose iterations are independent but
for their accumulators (the PTX counterpart of refgrad/runtime/simt_loops.py).

A loop `top: body; @p bra top` qualifies (`plan`) when its body is straight-line code of pure register instructions and
global/param loads (no store, atomic, barrier, warp instruction, shared/local/generic access or special register) and
every register the body carries from one iteration to the next is
- an induction variable: written once, by `add`/`sub` of itself and an immediate (same width as the register), or
- an accumulator chain: read by one instruction only, whose result is read by one instruction only, ... up to the one
  writing it back (the other operands of the chain never depend on a chain), or else
- part of the carried region: the instructions depending on a carried register, when they alone write what they write
  and load nothing; they are stepped once per iteration on one row (the rest of the body still runs as arrays).
and p (the loop condition) is a setp of induction variables, loop-invariant registers and immediates. A body with
forward branches inside it qualifies too when they can be if-converted (emulators/nv/ptx/ifconv.py): the instructions of
the blocks not every path runs, and the branches themselves, join the carried region as lane masks and masked writes.

Then, for every lane at once: the trip count comes from the induction variables alone (the same for every lane, else
no fast path); a chunk of iterations runs each body instruction once on (iterations x lanes) arrays through the very
step closures of fast.py; each accumulator is folded in iteration order, one rounding per step: `np.add.accumulate`
for `add.rn.f32 d, c, x` (the ufunc the f32 step itself calls, accumulator first), else its own step once per iteration
on one row. The body writes nothing but registers, so a run is speculative: a fault, an undefined value or a shape not
handled restores every register the loop writes and returns None, and the scheduler steps the loop as always (reporting
exactly what it reports)."""
from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from emulators.nv.ptx import affine, chains, ifconv, memo, rows
from emulators.nv.ptx.affine import Aff
from emulators.nv.ptx.affine import Plan as AffinePlan
from emulators.nv.ptx.execute import Launch, PTXFault, Regs
from emulators.nv.ptx.parse import TYPES, Entry, Instr, Operand

CHUNK_ELEMS = 1 << 16   # lanes x iterations per chunk (cache-sized)
DROP_ELEMS = 0   # chunks this large drop each register after its last use (measured: even small chunks gain, memory reused)
enabled = True   # False: loops are stepped (tests compare both)
_NOT_PURE = frozenset({"st", "atom", "red", "shfl", "vote", "activemask", "redux", "match", "mma", "wmma", "ldmatrix", "cp", "membar", "fence", "bar", "barrier",
                       "bra", "ret", "exit", "trap", "call", "prefetch", "prefetchu", "mbarrier", "nanosleep", "discard", "applypriority", "pmevent"})
READS_FIRST = frozenset({"st", "red", "bar", "barrier", "prefetch", "prefetchu", "nanosleep", "cp"})   # a first operand that is read
_CMPS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
         "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}
_PY_CMPS = {k: getattr(operator, {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(k, k)) for k in _CMPS}   # on Python ints (unbounded)
_INT = {1: (np.uint8, np.int8), 2: (np.uint16, np.int16), 4: (np.uint32, np.int32), 8: (np.uint64, np.int64)}


def _regs(o: Operand) -> list[str]:
  if o.kind == "reg": return [str(o.value)]
  if o.kind in ("vec", "pair"): return [r for x in o.value for r in _regs(x)]  # type: ignore[union-attr]
  if o.kind in ("addr", "not"): return _regs(o.value)  # type: ignore[arg-type]
  return []


def _dsts(ins: Instr) -> list[str]:
  return [] if not ins.args else _regs(ins.args[0])


def _srcs(ins: Instr) -> list[str]:
  return [r for o in ins.args[1:] for r in _regs(o)]


@dataclass
class Acc:
  """An accumulator chain: the carried register c is read by links[0] only; each link's result is read by the next link
  only; the last link writes c. Every other operand of a link is independent of every chain."""
  carried: str
  links: list[int]                  # positions, in order
  dests: list[str]                  # each link's result register (the last is `carried`)
  xs: list[list[str]]               # each link's other register operands (snapshotted per iteration)
  f32_add: bool                     # every link is add.rn.f32 d, prev, x or a 32-bit mov d, prev: np.add.accumulate


@dataclass
class LoopPlan:
  top: int
  back: int                                  # the `@p bra top`
  inductions: dict[str, tuple[int, int, int]] = field(default_factory=dict)   # reg -> (position, step, bytes)
  accs: list[Acc] = field(default_factory=list)
  region: list[tuple[int, list[str]]] = field(default_factory=list)   # else: (position, other operands) stepped per iteration
  tail: list[int] = field(default_factory=list)   # run once after the loop, on the last iteration's values (see _tail)
  srcs: dict[int, list[str]] = field(default_factory=dict)   # position -> the registers it reads (for the chunks: its operands)
  dsts: dict[int, list[str]] = field(default_factory=dict)   # position -> the registers it writes
  row_ops: list | None = None   # the carried region as array functions (emulators/nv/ptx/rows.py), when it compiles
  fold: tuple[str, str, bool] | None = None   # (carried, x, c first) when the region is the rendered MAX (rows.max_fold)
  cond: tuple = ()                           # (setp position, compare, signed, bytes, operands)
  blocks: ifconv.Blocks | None = None   # the body's forward branches, if-converted inside the carried region (ifconv.py)
  ifc_ops: list | None = None           # the carried region as ifconv.py's functions (then row_ops is None)
  ifc_fold: tuple[str, list[str], bool] | None = None   # (carried, x of each diamond, only carried read after) for a chain of nvcc MAX diamonds
  written: list[str] = field(default_factory=list)   # every register the body writes
  live_out: set[str] = field(default_factory=set)    # those read after the loop: outside the body, or carried (see plan)
  invariant: list[str] = field(default_factory=list)  # registers read but not written
  aff_cands: tuple | None = None   # (positions affine.Plan.step may take, invariants they read, every invariant) (_affine)
  aff_hits: tuple | None = None    # (trips, the positions found affine in its runs of that many trips) (_affine)
  aff_runs: int = 0
  layout: tuple | None = None   # (the steps they were made for, {(affine positions, affine registers): _chunks' layout})
  fused: dict[int, Fused] = field(default_factory=dict)   # load position -> its address chain gathered from the index (_fusions)


@dataclass(frozen=True)
class Fused:
  """A global load `ld [rdB+off]` whose address is `add.s64 rdB, P, rdA` of a loop-invariant P after `mul.wide.{s,u}32 rdA,
  x, c`, where rdA and rdB are read by nothing else: when P is the same for every lane, the load gathers its elements
  from x directly (Launch.gather_scaled: no 64-bit products, sums or addresses per lane); else the chain is stepped."""
  chain: tuple[int, int]   # (mul position, add position)
  x: str
  signed: bool
  c: int
  p: str
  off: int
  w: int


def _pure(ins: Instr, e: Entry) -> bool:
  if ins.op in _NOT_PURE or ins.pred is not None: return False
  if ins.op in ("ld", "ldu") and not (ins.has("global") or ins.has("param")): return False
  if ins.op == "cvta" and not ins.has("global"): return False
  return all(r in e.regs for o in ins.args for r in _regs(o))   # no special registers (per-lane ids, clocks)


def _convertible(ins: Instr, e: Entry, branch: bool) -> bool:
  """A forward branch of the body (ifconv.blocks checked where it goes) or a guarded pure instruction (its guard becomes a
  lane mask)."""
  if branch: return True
  return ins.op not in ("bra", "ld", "ldu") and _pure(dataclasses.replace(ins, pred=None, pred_neg=False), e)


def plan(e: Entry, top: int, back: int) -> LoopPlan | None:
  """The plan of the loop instrs[top:back] closed by the branch at `back`, or None when it does not qualify."""
  instrs = e.instrs
  br = instrs[back]
  if br.pred is None or back <= top: return None
  body = range(top, back)
  B = ifconv.blocks(e, top, back) if ifconv.enabled and any(instrs[i].op == "bra" for i in body) else None
  if B is not None and not B.branches: B = None
  masked = set(B.masked()) | set(B.branches) if B is not None else set()
  guarded = {i for i in masked if instrs[i].op != "bra"}   # (and the predicated instructions of full blocks)
  if B is not None: guarded |= {i for i in body if instrs[i].pred is not None and instrs[i].op != "bra"}
  if not all(_pure(instrs[i], e) or (B is not None and _convertible(instrs[i], e, i in B.branches)) for i in body): return None
  writes: dict[str, list[int]] = {}
  reads: dict[str, list[int]] = {}
  for i in body:
    for r in _dsts(instrs[i]): writes.setdefault(r, []).append(i)
    # a guarded write merges with the old value (it reads its destination); a branch reads its predicate
    for r in _srcs(instrs[i]) + (_dsts(instrs[i]) if i in guarded else []) + ([instrs[i].pred] if instrs[i].pred is not None else []):
      reads.setdefault(r, []).append(i)
  if any(len(set(w)) != len(w) for w in writes.values()): return None   # a register twice in one destination list
  P = LoopPlan(top, back)
  P.written, P.invariant = list(writes), [r for r in reads if r not in writes]
  carried = [r for r, w in writes.items() if any(j <= w[0] for j in reads.get(r, []))]
  # a register the body writes matters after the loop only when an instruction outside the body reads it (the loop's own
  # branch included) or the body reads it before writing it (a jump back to the top sees it): the others are not written back
  outside = {r for j, ins in enumerate(instrs) if not top <= j < back
             for r in _srcs(ins) + ([ins.pred] if ins.pred is not None else []) + (_dsts(ins) if ins.args and (ins.args[0].kind == "addr" or ins.op in READS_FIRST) else [])}
  P.live_out = {r for r in writes if r in outside} | set(carried)
  for r in carried:
    w = writes[r]
    ins = instrs[w[0]]
    t = ins.types[0] if len(ins.types) == 1 else None
    if (len(w) == 1 and w[0] not in masked and w[0] not in guarded and ins.op in ("add", "sub") and t is not None and t[0] in "sub" and TYPES[t] in (4, 8) and ins.mods == (t,)
        and TYPES[e.regs[r]] == TYPES[t] and ins.args[1].kind == "reg" and ins.args[1].value == r and ins.args[2].kind == "imm"):
      step = ins.args[2].value if ins.op == "add" else -ins.args[2].value
      P.inductions[r] = (w[0], step, TYPES[t])
  accs = _chains(e, [r for r in carried if r not in P.inductions], writes, reads) if B is None else None
  if accs is not None: P.accs = accs
  elif (region := _region(e, [r for r in carried if r not in P.inductions], writes, reads, body, masked | guarded)) is not None: P.region = region
  else: return None
  # the condition: p written once, by a setp of inductions / invariants / immediates
  pw = writes.get(br.pred, [])
  if len(pw) != 1 or any(pw[0] == i for i, _ in P.region): return None
  s = instrs[pw[0]]
  if s.op != "setp" or len(s.types) != 1 or len(s.args) != 3 or s.types[0][0] not in "sub" or TYPES[s.types[0]] not in (4, 8): return None
  cmp = [m for m in s.mods if m != s.types[0]]
  if len(cmp) != 1 or cmp[0] not in _CMPS: return None
  for o in s.args[1:]:
    if o.kind == "reg" and o.value in writes and o.value not in P.inductions: return None
    if o.kind not in ("reg", "imm"): return None
  P.cond = (pw[0], cmp[0], s.types[0][0] == "s" and cmp[0] not in ("lo", "ls", "hi", "hs"), TYPES[s.types[0]], s.args[1:])
  P.tail = _tail(e, P, body, writes, reads)
  P.live_out |= {r for i in P.tail for r in _srcs(instrs[i]) if r in writes}   # the tail runs after the loop, on their last values
  region_of = dict(P.region)
  links = {i: (a, j) for a in P.accs for j, i in enumerate(a.links)}
  P.srcs = {i: list(dict.fromkeys(links[i][0].xs[links[i][1]] if i in links else region_of[i] if i in region_of else _srcs(instrs[i]))) for i in body}
  P.dsts = {i: _dsts(instrs[i]) for i in body}
  if B is not None:
    P.blocks, P.ifc_ops = B, ifconv.compile_region(e, [i for i, _ in P.region], B)
    if P.ifc_ops is None or not masked <= set(region_of): return None
    first = instrs[P.region[0][0]]
    if first.op == "setp" and len(first.args) == 3 and first.args[1].kind == "reg" and (c := str(first.args[1].value)) in carried:
      if (m := ifconv.max_chain(e, [i for i, _ in P.region], c, top, back)) is not None: P.ifc_fold = (c, *m)
    return P
  P.fused = _fusions(e, P, writes, reads)
  if P.region: P.row_ops = rows.compile_region([instrs[i] for i, _ in P.region], e)
  carried = [r for r, w in writes.items() if any(j <= w[0] for j in reads.get(r, []))]
  if P.row_ops is not None and len(carried) == len(P.inductions) + 1:
    c = next(r for r in carried if r not in P.inductions)
    if (m := rows.max_fold([instrs[i] for i, _ in P.region], c)) is not None: P.fold = (c, *m)
  return P


def _only_reader(r: str, w: int, at: int, writes: dict[str, list[int]], reads: dict[str, list[int]], back: int) -> bool:
  """The value the instruction at `w` writes into r is read by the one at `at` only (up to r's next write in the body;
  the caller checks r is neither carried nor read after the loop)."""
  nxt = min((p for p in writes[r] if p > w), default=back)
  return [p for p in dict.fromkeys(reads.get(r, [])) if w < p <= nxt] == [at]


def _fusions(e: Entry, P: LoopPlan, writes: dict[str, list[int]], reads: dict[str, list[int]]) -> dict[int, Fused]:
  """The body's global loads whose address chain is `mul.wide.{s,u}32 rdA, x, c; add.s64 rdB, P, rdA` (either operand
  order) with P loop-invariant, x not written between the mul and the load, and rdA, rdB read by the chain only."""
  instrs, out = e.instrs, {}
  inside = {i for a in P.accs for i in a.links} | {i for i, _ in P.region} | set(P.tail)
  for l in range(P.top, P.back):
    ld = instrs[l]
    if (w := chains.global_width(ld)) is None or ld.op != "ld" or l in inside: continue
    a = ld.args[1]
    if a.kind != "addr" or a.value.kind != "reg" or (rb := str(a.value.value)) in P.live_out: continue
    j = max((p for p in writes.get(rb, []) if p < l), default=-1)
    if j < 0 or j in inside or not _only_reader(rb, j, l, writes, reads, P.back) or (ops := chains.add64(instrs[j])) is None: continue
    for ra, p in (ops, ops[::-1]):
      i = max((q for q in writes.get(ra, []) if q < j), default=-1)
      if p in writes or ra == p or TYPES.get(e.regs.get(p, "pred")) != 8 or ra in P.live_out or i < 0 or i in inside: continue
      if not _only_reader(ra, i, j, writes, reads, P.back) or (m := chains.wide_mul(e, instrs[i])) is None: continue
      x, signed, c = m
      if any(i < q < l for q in writes.get(x, [])): continue
      out[l] = Fused((i, j), x, signed, c, p, a.offset, w)
      break
  return out


_TAIL_OPS = frozenset({"setp", "add", "sub", "mul", "mov", "and", "or", "xor", "shl", "shr", "selp", "max", "min", "neg", "abs"})


def _tail(e: Entry, P: LoopPlan, body: range, writes: dict[str, list[int]], reads: dict[str, list[int]]) -> list[int]:
  """Instructions whose results no body instruction reads (the loop condition's setp, values used after the loop) and
  whose operands are not written after them in the body: only the last iteration's result matters, and after the loop
  every operand holds its last iteration's value there, so each runs once then (on n lanes, not iterations x n). Only
  operations that report nothing (no loads, no division)."""
  inside = {i for a in P.accs for i in a.links} | {i for i, _ in P.region}
  out = []
  for i in body:
    ins = e.instrs[i]
    if i in inside or ins.op not in _TAIL_OPS or any(reads.get(d) for d in _dsts(ins)): continue
    if all(max(writes.get(x, [-1])) < i for x in _srcs(ins)): out.append(i)
  return out


def _region(e: Entry, carried: list[str], writes: dict[str, list[int]], reads: dict[str, list[int]], body: range,
            forced: set[int] = frozenset()) -> list[tuple[int, list[str]]] | None:  # type: ignore[assignment]
  """The instructions that depend on a carried register (transitively, in the iteration) or are `forced` in (the
  if-converted ones), with their other register operands (a guard predicate included), when every write of a carried
  register is among them and none is a load: folded once per iteration."""
  inside: set[int] = set(forced)
  todo = list(carried) + [r for i in forced for r in _dsts(e.instrs[i])]
  seen: set[str] = set()
  while todo:
    r = todo.pop()
    if r in seen: continue
    seen.add(r)
    for i in reads.get(r, []):
      if i not in inside:
        inside.add(i)
        todo += _dsts(e.instrs[i])
  out_regs = {r for i in inside for r in _dsts(e.instrs[i])}
  # every write of a register the region writes (the carried ones included) is in it; no loads (addresses from carried values)
  if any(w not in inside for r in out_regs | set(carried) for w in writes.get(r, [])) or any(e.instrs[i].op in ("ld", "ldu") for i in inside): return None
  return [(i, [x for x in dict.fromkeys(_srcs(e.instrs[i]) + ([e.instrs[i].pred] if e.instrs[i].pred else [])) if x not in out_regs]) for i in sorted(inside)]


def _chains(e: Entry, carried: list[str], writes: dict[str, list[int]], reads: dict[str, list[int]]) -> list[Acc] | None:
  """Each carried register as an accumulator chain (see Acc), or None when one is not."""
  instrs = e.instrs
  used: set[int] = set()
  accs: list[Acc] = []
  for r in carried:
    w, rd = writes[r], reads[r]
    if len(w) != 1 or len(set(rd)) != 1: return None
    links, dests, xs, cur, prev = [], [], [], rd[0], r
    while True:
      li = instrs[cur]
      d = _dsts(li)
      if cur in used or len(d) != 1 or _srcs(li).count(prev) != 1 or writes.get(d[0]) != [cur]: return None
      links.append(cur)
      dests.append(d[0])
      xs.append([x for x in _srcs(li) if x != prev])
      if d[0] == r: break
      nxt = reads.get(d[0], [])
      if len(nxt) != 1 or nxt[0] <= cur: return None
      prev, cur = d[0], nxt[0]
    used |= set(links)
    f32 = all(e.regs.get(x) in ("f32", "b32", "u32", "s32") for x in (r, *dests)) and all(_f32_link(instrs[i], prev_) for i, prev_ in zip(links, [r, *dests]))
    f32 = f32 and any(instrs[i].op == "add" for i in links)
    accs.append(Acc(r, links, dests, xs, f32))
  chain = {d for a in accs for d in (a.carried, *a.dests)}
  if any(x in chain for a in accs for xl in a.xs for x in xl): return None
  return accs


def _f32_link(ins: Instr, prev: str) -> bool:
  """add.rn.f32 d, prev, x (x a register: the f32 step's np.add with the chain first) or mov.b32/.f32 d, prev."""
  if ins.op == "mov": return ins.types in (("b32",), ("f32",), ("u32",)) and ins.args[1].kind == "reg"
  return (ins.op == "add" and ins.types == ("f32",) and set(ins.mods) <= {"f32", "rn"} and len(ins.args) == 3 and ins.args[1].kind == "reg"
          and ins.args[1].value == prev and ins.args[2].kind == "reg")


def plans(e: Entry) -> dict[int, LoopPlan]:
  """Loop top -> plan, for every backward conditional branch whose loop qualifies."""
  out: dict[int, LoopPlan] = {}
  for i, ins in enumerate(e.instrs):
    if ins.op == "bra" and ins.pred is not None and ins.args and ins.args[0].kind in ("label", "sym", "reg"):
      t = e.labels.get(str(ins.args[0].value))
      if t is not None and t <= i and t not in out and (p := plan(e, t, i)) is not None: out[t] = p
  return out


def _value(L: Launch, P: LoopPlan, o: Operand, pos: int, ks: np.ndarray, w: int, signed: bool) -> np.ndarray | None:
  """Operand o of the instruction at `pos` in iterations ks (rows) for every lane, typed; None when undefined."""
  if o.kind == "imm":
    return np.array([o.value & ((1 << (8 * w)) - 1)], _INT[w][0]).view(_INT[w][1] if signed else _INT[w][0]).reshape(1, 1)
  name = str(o.value)
  b = L.regs.get(name)
  if b is None or (L.checked and L.defined.get(name) is not None): return None
  if name in P.inductions:
    ip, step, _ = P.inductions[name]
    k = ks + (1 if ip < pos else 0)
    b = b[None, :] + (np.uint64(step & 0xFFFFFFFFFFFFFFFF) * k.astype(np.uint64))[:, None]
  else: b = b[None, :]
  u = (b & np.uint64((1 << (8 * w)) - 1)).astype(_INT[w][0]) if w < 8 else b
  return u.view(_INT[w][1]) if signed else u


def trip_count(L: Launch, P: LoopPlan, limit: int) -> int | None:
  """Iterations the loop runs from here (the first included), the same for every lane; None otherwise or above limit."""
  pos, cmp, signed, w, (a, b) = P.cond
  neg = L.e.instrs[P.back].pred_neg
  if all(o.kind == "imm" or ((r := L.regs.get(str(o.value))) is not None and r.size and r.min() == r.max()) for o in (a, b)):
    L, size = _OneLane(L), 4096   # every lane holds the same operands (the usual counted loop): one lane decides for all
    if (t := _linear_trips(L, P, limit)) is not None: return t
  else: size = 16
  k0 = 0
  while k0 < limit:
    ks = np.arange(k0, min(k0 + size, limit), dtype=np.int64)
    x, y = _value(L, P, a, pos, ks, w, signed), _value(L, P, b, pos, ks, w, signed)
    if x is None or y is None: return None
    go = _CMPS[cmp](x, y) != neg   # (iterations, lanes): the branch back is taken after iteration k
    stop = ~go
    if stop.any():
      first = np.where(stop.any(axis=0), stop.argmax(axis=0), -1)
      if (first < 0).any() or (first != first[0]).any(): return None
      return int(k0 + first[0]) + 1
    k0, size = k0 + size, size * 4
  return None


def _linear_trips(L: _OneLane, P: LoopPlan, limit: int) -> int | None:
  """The trip count of a loop whose condition compares two operands changing by a constant each iteration (one lane, as
  trip_count's uniform case), from iterations 0 and 1 as Python integers: each operand's value in iteration k is
  congruent to x0 + k * (x1 - x0) modulo 2^bits, so it is that value wherever that lies in the compare type's range; for
  values linear in k that holds from 0 to t when it holds at both ends. Then the compare of these unbounded values, which
  switches once at most (a binary search; eq/ne from the difference), is the loop's. Where an end lies outside, the
  compare of the real (wrapping) operands is checked on every iteration up to t; None where that fails (trip_count then
  scans as before)."""
  pos, cmp, signed, w, (a, b) = P.cond
  neg = L.e.instrs[P.back].pred_neg
  xs = [_lane0(L, P, o, pos, k, w, signed) for o in (a, b) for k in (0, 1)]
  if any(v is None for v in xs): return None
  x0, x1, y0, y1 = xs  # type: ignore[misc]
  f = _PY_CMPS[cmp]
  def go(k: int) -> bool: return f(x0 + k * (x1 - x0), y0 + k * (y1 - y0)) != neg
  if not go(0): t = 0
  elif cmp in ("eq", "ne"):
    if not go(1): t = 1
    else:   # going on while the operands differ: it stops where the difference reaches 0
      d0, r = y0 - x0, (y1 - y0) - (x1 - x0)
      if r == 0 or d0 % r or -d0 // r < 1: return None
      t = -d0 // r
  else:   # lt/le/gt/ge/lo/ls/hi/hs of linear operands, going on at 0: it stops once at most
    if go(limit): return None
    lo, hi = 0, limit   # the first k where it stops lies in [lo, hi]
    while lo < hi:
      mid = (lo + hi) // 2
      if go(mid): lo = mid + 1
      else: hi = mid
    t = lo
  if t >= limit: return None
  rlo, rhi = (-(1 << (8 * w - 1)), 1 << (8 * w - 1)) if signed else (0, 1 << (8 * w))
  if all(rlo <= v < rhi for v in (x0 + t * (x1 - x0), y0 + t * (y1 - y0))): return t + 1   # (x0, y0 lie in range)
  if t > 1 << 16: return None
  ks = np.arange(t + 1, dtype=np.int64)
  x, y = _value(L, P, a, pos, ks, w, signed), _value(L, P, b, pos, ks, w, signed)   # type: ignore[arg-type]
  if x is None or y is None: return None
  g = (_CMPS[cmp](x, y) != neg)[:, 0]
  return t + 1 if g[:t].all() and not g[t] else None


def _lane0(L: _OneLane, P: LoopPlan, o: Operand, pos: int, k: int, w: int, signed: bool) -> int | None:
  """Operand o of the instruction at `pos` in iteration k, first lane, as _value computes it (a Python integer)."""
  m = (1 << (8 * w)) - 1
  if o.kind == "imm": v = o.value & m
  else:
    name = str(o.value)
    r = L.regs.get(name)
    if r is None or (L.checked and L.defined.get(name) is not None): return None
    v = int(r[0])
    if name in P.inductions:
      ip, step, _ = P.inductions[name]
      v += (step & 0xFFFFFFFFFFFFFFFF) * (k + (1 if ip < pos else 0))
    v &= m
  return v - (1 << (8 * w)) if signed and v >> (8 * w - 1) else v


class _OneLane:
  """The registers and flags of a Launch seen through its first lane (trip_count's operands only)."""
  def __init__(self, L: Launch):
    self.regs, self.checked, self.defined, self.e = _FirstLane(L.regs), L.checked, L.defined, L.e


class _FirstLane(dict):
  def __init__(self, regs: dict):
    super().__init__()
    self.src = regs
  def get(self, k: str, default: object = None) -> object:
    r = self.src.get(k)
    return default if r is None else r[:1]


def _f32(v: np.ndarray) -> np.ndarray:
  """A 32-bit register's value (bits, or typed as 4 bytes) as float32."""
  return v.astype(np.uint32).view(np.float32) if v.itemsize == 8 else v.view(np.float32)


def _fold_add(c: np.ndarray, X: np.ndarray, m: int, cx: np.ndarray | None = None) -> list[np.ndarray]:
  """c + X[0] + X[1] + ... in row order, one float32 rounding per add (as np.add does it): the value before the last m
  rows and after each of them. cx: the rows [c; X] in one array when the caller built them so (c and X its views):
  reduced as they are, not concatenated again."""
  R = X.shape[0]
  if X.shape[1] < 32:   # few lanes: one contiguous accumulate per lane
    acc = np.add.accumulate(np.concatenate([c[:, None], np.ascontiguousarray(X.T)], axis=1), axis=1)
    return [acc[:, i] for i in range(R - m, R + 1)]
  if R - m > 1:   # one reduce over the rows of [c; X]: C-contiguous, axis 0 outer, every lane adds its rows in order
    cxs = cx[:R - m + 1] if cx is not None else np.concatenate([c[None, :], X[:R - m]])
    acc = np.add.reduce(cxs, axis=0)   # (no pairwise sum: that is for the inner axis)
  else:
    acc = c.copy()
    for r in X[:R - m]: np.add(acc, r, out=acc)
  out = [acc]
  for r in X[R - m:]: out.append(out[-1] + r)
  return out


def run(L: Launch, P: LoopPlan, pairs: list, budget: int) -> int | None:
  """Run the loop at P.top for every lane (the uniform scheduler's state); returns the instruction steps it stands for,
  or None (nothing changed) when the fast path does not apply."""
  n = L.n
  if L.sel.size != n or not n or any(r not in L.regs for r in (*P.inductions, *(a.carried for a in P.accs))): return None
  if L.checked and any(L.defined.get(r) is not None for r in (*P.invariant, *P.inductions, *(a.carried for a in P.accs))): return None
  nbody = P.back - P.top + 1
  limit = max(budget // nbody, 0)
  ops = [L.regs.raw(str(o.value)) for o in P.cond[4] if o.kind == "reg"]   # (defined: checked above)
  # the trip count follows from the condition's operands: kept with them when they are kept launch-shape values (memo.py)
  T = memo.derived("trips", (P, *ops), (limit, L.n), trip_count, L, P, limit) if all(v is not None for v in ops) else trip_count(L, P, limit)
  if T is None: return None
  # the registers it writes that hold values now (the body's temporaries mostly do not): put back where it gives up
  regs, defined = L.regs, L.defined
  saved = {r: (b, defined.get(r)) for r in P.written if (b := dict.get(regs, r)) is not None}
  try:
    if not _chunks(L, P, pairs, T): raise _Abort
  except (PTXFault, _Abort, FloatingPointError):
    for r in P.written:
      L.typed.pop(r, None)
      b, d = saved.get(r, (None, None))
      if b is None: L.regs.pop(r, None)
      else: L.regs[r] = b
      if L.checked: L.defined[r] = d
    L.sel, L.ins = L.everyone, None
    return None
  return T * nbody


class _Abort(Exception):
  pass


def _run_row(L: Launch, pair: tuple, taken: dict[str, np.ndarray], j: int, n: int) -> None:
  """Run one instruction on iteration j's row of its chunk-computed operands `taken` (each k * n long)."""
  ins, f = pair[0], pair[1]
  for s, v in taken.items():
    L.regs[s] = v[j * n:(j + 1) * n]
    L.typed.pop(s, None)
    if L.checked: L.defined[s] = None
  L.ins, L._d = ins, None
  f(L)


def _affine(L: Launch, P: LoopPlan, pairs: list, T: int, skip: dict, region: dict) -> tuple[set[int], dict[int, list], dict[str, Aff], set[str]]:
  """The body positions computed as affine values (once, not per chunk), for each other position the affine registers it
  reads (made into rows before it runs), the affine registers' values after the loop, and the induction variables
  planned as affine values (emulators/nv/ptx/affine.py)."""
  if P.aff_cands is None:   # the positions Plan.step may find affine, and the invariants they read (seeded when first read)
    cands = {i for i in range(P.top, P.back) if affine.candidate(L.e.instrs[i])}
    P.aff_cands = (cands, [r for r in P.invariant if any(r in P.srcs[i] for i in cands)], set(P.invariant))
  cands, inv, invariant = P.aff_cands
  # the positions found affine in this loop's runs of T trips (one never found is tried again every 16th run: whether a
  # position is affine follows from the loop's text and, through the bounds, from the values, which may change)
  P.aff_runs += 1
  if P.aff_hits is not None and P.aff_hits[0] == T and P.aff_runs % 16: cands = P.aff_hits[1]
  A = AffinePlan(L.e, T, L.n, {r: L.regs.get(r) for r in inv if r in L.regs})
  for r, (_, step, w) in P.inductions.items(): A.seed(r, L.regs.get(r), step, w)
  seeded = set(A.cur)
  done: set[int] = set()
  needs: dict[int, list] = {}
  cur = A.cur
  for i in range(P.top, P.back):
    ins = pairs[i][0]
    if i in cands and i not in skip and i not in region and (f := A.step(ins)) is not None:
      done.add(i)
      cur[ins.args[0].value] = f
      continue
    if cur:
      needs[i] = [(x, cur[x]) for x in P.srcs[i] if x in cur and x not in invariant]
      for d in P.dsts[i]: cur.pop(d, None)
  P.aff_hits = (T, frozenset(done) | (P.aff_hits[1] if P.aff_hits is not None and P.aff_hits[0] == T else frozenset()))
  return done, needs, {r: f for r, f in A.cur.items() if r in P.written}, seeded


def _strided_loads(P: LoopPlan, pairs: list, needs: dict[int, list]) -> dict[int, tuple]:
  """Global loads (pre-decoded) whose address is affine with one step per iteration for every lane: position ->
  (per-lane address of iteration 0 with the offset, its bounds, step per iteration, bytes, every address aligned)."""
  out = {}
  for i, xs in needs.items():
    ins, f = pairs[i][0], pairs[i][1]
    if not getattr(f, "takes_pre", False) or len(ins.args) != 2 or ins.args[1].kind != "addr" or ins.has("v8"): continue
    base, off = ins.args[1].value.value, ins.args[1].offset
    g = next((g for x, g in xs if x == base), None)
    if g is None or not isinstance(g.b, int): continue
    w = TYPES[ins.types[0]] * (4 if ins.has("v4") else 2 if ins.has("v2") else 1)
    a = g.a + off
    aligned = w in (1, 2, 4, 8, 16) and not g.b % w and not (np.bitwise_or.reduce(a) if isinstance(a, np.ndarray) else a) % w
    if aligned: out[i] = (a, g.alo + off, g.ahi + off, g.b, w)
  return out


def _drop(W: Launch, regs: list[str], keep: set[str] | tuple, lastrow: dict[str, np.ndarray], n: int) -> bool:
  """Drop chunk registers after their last use (False: one holds undefined values, which the stepped loop reports);
  the last chunk's row of those written back after the loop is kept."""
  rg, typed, defined, checked = W.regs, W.typed, W.defined, W.checked
  for r in regs:
    if defined.pop(r, None) is not None and checked: return False
    v = dict.pop(rg, r, None)
    if v is not None and r in keep: lastrow[r] = v[-n:].copy()
    if typed: typed.pop(r, None)
  return True


def _gather(L: Launch, W: Launch, fz: Fused) -> np.ndarray | None:
  """A fused load's bytes from its index register (Launch.gather_scaled), when its invariant base is one defined 64-bit
  value for every lane and its index is defined; else None."""
  s = chains.scaled(L, W, fz.p, fz.x, fz.signed, fz.off)
  return None if s is None else W.gather_scaled(*s, fz.c, fz.w)


def _strided_load(W: Launch, s: tuple, k0: int, k: int, n: int) -> np.ndarray | None:
  return W.global_affine(*s, k0, k, n)


@dataclass
class _Layout:
  """What a loop run does per chunk, from which positions are affine (`done`) and run after the loop (`late`): the same
  for every run of a loop without affine planning (cached on its plan), else made per run."""
  skip: dict[int, tuple[Acc, int]]
  region: dict[int, list[str]]
  region_out: set[str]
  tail_out: set[str]
  read: set[str]                 # registers a stepped instruction reads
  keep: set[str]                 # chunk registers written back after the loop (their last row kept when dropped)
  order: list[tuple]             # per position run in chunks: (i, ins, step, operands taken or None, dests, registers dropped after)
  fused: dict[int, Fused]        # loads gathered from their index (their address chains not in `order`)
  gone: list[str]                # registers the body writes that nothing reads after the loop
  live: list[str]                # the others, but those in L already (the carried region's, the late ones')


def _layout(P: LoopPlan, pairs: list, done: set[int], late: set[int], after: dict, fused: dict[int, Fused]) -> _Layout:
  skip = {i: (a, j) for a in P.accs for j, i in enumerate(a.links)}
  region = dict(P.region)
  region_out = {r for i in region for r in P.dsts[i]}
  tail_out = {d for i in late for d in P.dsts[i]}
  fused = {l: f for l, f in fused.items() if getattr(pairs[l][1], "takes_pre", False)}   # (the load's pre-decoded step takes the bytes)
  chained = {q for f in fused.values() for q in f.chain}
  run = [i for i in range(P.top, P.back) if i not in done and i not in late and i not in chained]
  # a fused load reads its index (and, when its chain is stepped, the chain's registers; P is tiled then, not for every chunk)
  srcs = {i: P.srcs[i] + ([fused[i].x, *P.dsts[fused[i].chain[0]], *P.dsts[fused[i].chain[1]]] if i in fused else []) for i in run}
  read = {x for i in run for x in srcs[i]}
  # each chunk register is dropped after its last use, so fresh results reuse memory; those written back keep their last row
  last_use: dict[str, int] = {}
  for i in run:
    for r in srcs[i] + ([] if i in skip or i in region else P.dsts[i]): last_use[r] = i
  drop_at: dict[int, list[str]] = {}
  for r, i in last_use.items(): drop_at.setdefault(i, []).append(r)
  keep = (set(P.written) & P.live_out) - region_out - tail_out - set(after) - {d for a in P.accs for d in a.dests}
  order = [(i, pairs[i][0], pairs[i][1], skip[i][0].xs[skip[i][1]] if i in skip else region[i] if i in region else None, P.dsts[i], drop_at.get(i))
           for i in run]
  out = [r for r in P.written if r not in region_out and r not in tail_out]
  return _Layout(skip, region, region_out, tail_out, read, keep, order, fused, [r for r in out if r not in P.live_out], [r for r in out if r in P.live_out])


_LANES: dict[int, np.ndarray] = {}


def _lanes(n: int) -> np.ndarray:
  """np.arange(n) (a chunk's lane ids, its `sel` and `everyone`), kept read-only per size: a write into it raises."""
  if (r := _LANES.get(n)) is None:
    r = np.arange(n)
    r.setflags(write=False)
    if len(_LANES) >= 64: _LANES.pop(next(iter(_LANES)))
    _LANES[n] = r
  return r


def _clone(L: Launch) -> Launch:
  """A shallow copy of L (copy.copy's attributes, without its reduce protocol)."""
  W = Launch.__new__(Launch)
  W.__dict__.update(L.__dict__)
  return W


def _row_lane(L: Launch, n: int) -> Callable[[int], str]:
  """Launch.thread for a chunk's lanes (iteration-major rows of the n lanes, every lane selected in L)."""
  return lambda i: L.lane_name(int(i) % n)


def _tile(v: np.ndarray, k: int) -> np.ndarray:
  """v repeated k times end to end (np.tile's result for a 1-D v): one broadcast copy into a fresh array, about half
  np.tile's time (its reshape and repeat calls)."""
  out = np.empty(k * v.size, v.dtype)
  out.reshape(k, v.size)[...] = v
  return out


def _induction_rows(base: np.ndarray, step: int, w: int, ks: np.ndarray) -> np.ndarray:
  """An induction variable's rows for iterations ks (each lane's value before the loop: base), flat: 32-bit ones typed
  as uint32 (its readers view it), others as bits masked to the width."""
  if w == 4: return np.add(base[None, :], (np.uint32(step & 0xFFFFFFFF) * ks.astype(np.uint32))[:, None]).reshape(-1)
  rows = np.add(base[None, :], (np.uint64(step & 0xFFFFFFFFFFFFFFFF) * ks)[:, None])
  if w < 8: np.bitwise_and(rows, np.uint64((1 << (8 * w)) - 1), out=rows)   # (in place: no second k * n temporary)
  return rows.reshape(-1)


def _chunks(L: Launch, P: LoopPlan, pairs: list, T: int) -> bool:
  n, everyone = L.n, L.everyone
  K = max(1, min(T, CHUNK_ELEMS // n))
  planned = affine.enabled and T >= affine.MIN_TRIPS and T * n > affine.MIN_ELEMS
  if planned:
    done, needs, after, seeded = _affine(L, P, pairs, T, {i for a in P.accs for i in a.links}, dict(P.region))
  else: done, needs, after, seeded = set(), {}, {}, set()
  # the layout follows from which positions are affine (usually the same in every run of the loop): kept per plan
  key = (planned, frozenset(done), frozenset(after), fuse_enabled)
  if P.layout is None or P.layout[0] is not pairs: P.layout = (pairs, {})
  if (lay := P.layout[1].get(key)) is None:
    lay = _layout(P, pairs, done, set(P.tail) - done if planned else set(), after, P.fused if fuse_enabled and not planned else {})
    if len(P.layout[1]) < 8: P.layout[1][key] = lay
  region, keep = lay.region, lay.keep
  late = set(P.tail) - done if planned else set()
  # each induction variable's value now: 32-bit ones as uint32 (their rows are made typed, wrapping as the register does)
  base = {r: (v.view(np.uint32) if (v := L.regs.raw(r)).itemsize == 4 else v.astype(np.uint32)) if w == 4 else L.regs[r]
          for r, (_, _, w) in P.inductions.items()}
  read, fused = lay.read, lay.fused
  tiles: dict[str, np.ndarray] = {}   # invariant registers repeated K times (the last chunk may be shorter)
  strided = _strided_loads(P, pairs, needs) if planned else {}
  lastrow: dict[str, np.ndarray] = {}
  W = None
  final: dict[str, np.ndarray] = {}   # chain results of the last iteration
  for k0 in range(0, T, K):
    k = min(K, T - k0)
    W = _clone(L)
    lanes = _lanes(k * n)
    W.n, W.sel, W.regs, W.defined, W.typed, W.pref, W.everyone = k * n, lanes, Regs(), {}, {}, {}, lanes
    W.thread = _row_lane(L, n)   # (a fault's message, built before the loop is stepped again, names row i's lane i % n)
    for r in P.invariant:   # (only those a stepped instruction reads)
      if r not in read or (v := L.regs.raw(r)) is None: continue
      if k != K: W.regs[r] = memo.derived("tile", v, (k,), _tile, v, k)   # typed or bits, as L holds it
      else: W.regs[r] = tiles[r] if r in tiles else tiles.setdefault(r, memo.derived("tile", v, (k,), _tile, v, k))
    ks = np.arange(k0, k0 + k, dtype=np.uint64)
    for r, (_, step, w) in P.inductions.items():
      if r in seeded: continue   # made from its affine value where a stepped instruction reads it
      W.regs[r] = memo.derived("induction", L.regs.raw(r), (step, w, k0, k), _induction_rows, base[r], step, w, ks)
    kk = ks.astype(np.int64)
    made: dict[str, Aff] = {}   # registers whose rows were made from an affine value, and which
    taken: dict[int, dict[str, np.ndarray]] = {}
    kept = keep if k0 + k == T else ()
    drop = k * n >= DROP_ELEMS
    for i, ins, f, xs, dsts, drops in lay.order:
      if fused and (fz := fused.get(i)) is not None:
        if (raw := _gather(L, W, fz)) is not None: W.pre = (ins, raw)   # the load's bytes: its address chain never made
        else:   # the chain stepped (its invariant tiled for this chunk), then the load as always
          if fz.p not in W.regs and (v := L.regs.raw(fz.p)) is not None: W.regs[fz.p] = _tile(v, k)
          for q in fz.chain:
            W.ins, W._d = pairs[q][0], None
            pairs[q][1](W)
          if fz.p not in read: W.regs.pop(fz.p, None)
        W.ins, W._d = ins, None
        f(W)
        W.pre = None
        if drop and drops and not _drop(W, drops, kept, lastrow, n): return False
        continue
      if planned:
        if i in strided and (raw := _strided_load(W, strided[i], k0, k, n)) is not None:
          W.pre = (ins, raw)   # the load's address is never made into rows: it reads the block
          W.ins, W._d = ins, None
          f(W)
          W.pre = None
          for d in dsts: made.pop(d, None)
          if drop and drops and not _drop(W, drops, kept, lastrow, n): return False
          continue
        for x, g in needs.get(i, ()):
          if made.get(x) is not g:
            W.regs[x] = g.rows(kk, n)
            W.typed.pop(x, None)
            made[x] = g
      if xs is not None:   # a chain link or a region instruction: its operands are taken, it runs per iteration below
        t = taken[i] = {x: W.regs.raw(x) for x in xs if x in W.regs}   # typed or bits
        if len(t) != len(xs): return False
        if drop and drops and not _drop(W, drops, kept, lastrow, n): return False
        continue
      W.ins, W._d = ins, None
      f(W)
      if made:
        for d in dsts: made.pop(d, None)
      if drop and drops and not _drop(W, drops, kept, lastrow, n): return False
    if L.checked and any(d is not None for d in W.defined.values()): return False
    L.sel = everyone
    for a in P.accs:
      if a.f32_add:
        c = _f32(L.regs.raw(a.carried))
        adds = [j for j in range(len(a.links)) if a.xs[j]]
        # [c; the links' operands, iteration by iteration] written into one array (no concatenation of the columns first)
        cx = np.empty((1 + k * len(adds), n), np.float32)
        cx[0] = c
        rows = cx[1:].reshape(k, len(adds), n)
        for q, j in enumerate(adds): rows[:, q] = _f32(taken[a.links[j]][a.xs[j][0]]).reshape(k, n)
        tail = _fold_add(cx[0], cx[1:], len(adds), cx)
        v, m = tail[0], 0   # a leading mov copies the chain's value before the last iteration
        last = tail[1:]
        for j, d in enumerate(a.dests):
          if a.xs[j]: v, m = last[m], m + 1
          final[d] = v
        L.put_typed(a.carried, final[a.carried], None)
        continue
      for j in range(k):
        for li, i in enumerate(a.links):
          _run_row(L, pairs[i], taken[i], j, n)
          if L.checked and L.defined.get(a.dests[li]) is not None: return False
      for d in a.dests: final[d] = L.regs.raw(d)
    if region and not _run_region(L, P, [(pairs[i][0], pairs[i][1], taken[i]) for i in region], k, n): return False
  assert W is not None
  chain = {d for a in P.accs for d in a.dests}
  for r in lay.gone:   # nothing reads its value after the loop: dropped, not computed
    if dict.pop(L.regs, r, None) is not None:
      L.typed.pop(r, None)
      L.defined.pop(r, None)
  for r in lay.live:
    if r in after:   # last written by an affine instruction: its value in the last iteration
      L.put_typed(r, after[r].last(T - 1, n), None)
      continue
    if r in chain:   # float32 values (folded), or bits / typed values a row of the chain's steps wrote
      L.put_typed(r, final[r].copy(), None)
      continue
    b = W.regs.raw(r)
    if b is None:
      if r not in lastrow: return False
      L.put_typed(r, lastrow[r], None)
      continue
    L.put_typed(r, b[-n:].copy(), None)   # typed as the body's step wrote it, or bits
  for i in sorted(late):   # every operand now holds its last iteration's value
    L.ins, L._d = pairs[i][0], None
    pairs[i][1](L)
    if L.checked and any(L.defined.get(d) is not None for d in P.dsts[i]): return False
  return True


def _run_region(L: Launch, P: LoopPlan, steps: list[tuple], k: int, n: int) -> bool:
  """The carried region once per iteration in order, each instruction on one row of its other operands (chunk-computed,
  defined: a region loads nothing, so its results are defined where the carried values are)."""
  if P.ifc_ops is not None:   # if-converted: no stepped form of the region (the whole loop is stepped instead)
    if not rows_enabled: return False
    out = list(dict.fromkeys(d for ins, _, _ in steps for d in _dsts(ins)))
    per_row: dict[str, np.ndarray] = {}
    for _, _, taken in steps:
      for x, v in taken.items():
        if x not in per_row: per_row[x] = rows.value(v, L.e.regs[x]).reshape(k, n)
    return ifconv.run_rows(L, P.ifc_ops, out, per_row, k, n, P.ifc_fold if fold_enabled else None)
  if P.row_ops is not None and rows_enabled: return _run_region_rows(L, P.row_ops, steps, k, n, P.fold)
  rows_ = [(ins, f, [(x, v.reshape(k, n)) for x, v in ops.items()]) for ins, f, ops in steps]
  regs, typed = L.regs, L.typed
  if L.checked:
    for _, _, ops in rows_:
      for x, _ in ops: L.defined[x] = None
  for j in range(k):
    for ins, f, ops in rows_:
      for x, v in ops:
        dict.__setitem__(regs, x, v[j])
        if typed: typed.pop(x, None)
      L.ins, L._d = ins, None
      f(L)
  return not L.checked or all(L.defined.get(d) is None for ins, _, _ in rows_ for d in _dsts(ins))


rows_enabled = True   # False: the carried region steps through its step closures (tests compare both)
fuse_enabled = True   # False: a fused load's address chain is stepped (tests compare both)
fold_enabled = True   # False: a MAX region runs row by row too


def _run_region_rows(L: Launch, ops: list, steps: list[tuple], k: int, n: int, fold: tuple[str, str, bool] | None) -> bool:
  """The carried region through its array functions (rows.py): an environment of the region's registers, the other
  operands row by row, the written registers put back once after the chunk's last iteration. A MAX region folds every
  row but the last at once, then runs the last row (so every register it writes ends as the stepped loop leaves it)."""
  regs = L.e.regs
  out = list(dict.fromkeys(d for ins, _, _ in steps for d in _dsts(ins)))
  if L.checked and any(L.defined.get(r) is not None for r in out if r in L.regs): return False   # (results would be marked defined)
  env: dict[str, np.ndarray] = {r: rows.value(L.regs.raw(r), regs[r]) for r in out if r in L.regs}
  per_row = {x: rows.value(v, regs[x]).reshape(k, n) for _, _, taken in steps for x, v in taken.items()}
  items = list(per_row.items())
  first = 0
  if fold is not None and k > 1 and fold[0] in env and fold[1] in per_row and fold_enabled and not ifconv.mixed_nans(env[fold[0]], per_row[fold[1]][:k - 1]):
    env[fold[0]] = rows.max_fold_rows(env[fold[0]], per_row[fold[1]][:k - 1], fold[2])   # (two different NaNs in a lane: rows decide)
    first = k - 1
  for j in range(first, k):
    for x, v in items: env[x] = v[j]
    for f in ops: f(env)
  L.sel = L.everyone
  for r in out:
    v = env[r]
    if regs[r] == "pred": L.put_bits(r, v.astype(np.uint64), None)
    else: L.put_typed(r, v.copy(), None)
  return True
