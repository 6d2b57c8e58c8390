"""The scheduler: min-PC stepping, branches, exits and CTA barriers over a Launch (emulators/nv/ptx/execute.py)."""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators.nv.ptx import chains as CHAINS
from emulators.nv.ptx import execute as X
from emulators.nv.ptx import extern as EXTERN
from emulators.nv.ptx import fast as FAST
from emulators.nv.ptx import loops as LOOPS
from emulators.nv.ptx import memo as MEMO
from emulators.nv.ptx.execute import Launch, PTXFault
from emulators.nv.ptx.execute import warp_check as _warp_check
from emulators.nv.ptx.fast import compile_entry
from emulators.nv.ptx.ops import CONTROL, TABLE, strong
from emulators.nv.ptx.parse import Entry, Operand, PTXError


def check_supported(e: Entry) -> None:
  """Every instruction of an entry has a table row (or is control flow): else a PTXError naming the line."""
  for ins in e.instrs:
    if ins.op not in TABLE and ins.op not in CONTROL:
      raise PTXError(ins.line, ins.text, f"instruction {ins.op!r} is not supported by the PTX emulator")


def run(e: Entry, grid: tuple[int, int, int], block: tuple[int, int, int], params: bytes, vm: Any, shared_bytes: int, checked: bool) -> None:
  L = Launch(e, grid, block, params, vm, shared_bytes, checked)
  try:
    with np.errstate(all="ignore"): _run(L)   # IEEE results (inf, NaN) are values here, not warnings
  except PTXFault: raise
  except (NotImplementedError, KeyError, StopIteration, IndexError) as ex:   # a handler met a form it does not take
    ins = L.ins
    if ins is None: raise
    raise PTXFault("compute", f"{ins.op}.{'.'.join(ins.mods)} is not supported ({type(ex).__name__}: {ex})", ins) from None
  finally:
    for m in L.touched.values(): m.settle()
    EXTERN.flush(L)   # the launch's printf output


def _run(L: Launch) -> None:
  e, checked = L.e, L.checked
  if e.steps is None or e.steps[0] != (FAST.enabled, CHAINS.enabled, MEMO.enabled):
    fns = compile_entry(e)
    if FAST.enabled and MEMO.enabled: MEMO.apply(e, fns, X.STABLE_SPECIALS)   # launch-shape index arithmetic kept across launches
    tops = LOOPS.plans(e) if FAST.enabled else {}
    # from each PC, the straight run of unguarded non-control instructions (run back to back in uniform mode), up to the
    # top of a loop with a fast path (the scheduler offers the whole loop to it there)
    ends = list(range(len(fns) + 1))
    for i in range(len(fns) - 1, -1, -1):
      if fns[i] is not None and e.instrs[i].pred is None: ends[i] = ends[i + 1] if i + 1 not in tops else i + 1
    dead = CHAINS.fuse(e, fns, _dead_after(e)) if FAST.enabled else [()] * len(fns)
    e.steps = ((FAST.enabled, CHAINS.enabled, MEMO.enabled), fns, [Operand("reg", i.pred) if i.pred is not None else None for i in e.instrs], ends, list(zip(e.instrs, fns, dead)),
               _uses_named_barriers(e), tops, dead, _spin_loops(e))
  _, fns, preds, ends, pairs, named, loops, dead, spin_loops = e.steps
  loops = loops if LOOPS.enabled else {}
  failed: set[int] = set()   # loops whose fast path did not apply in this launch: stepped from now on
  instrs, n_ins, labels = e.instrs, len(e.instrs), e.labels
  pc, waiting = L.pc, L.waiting
  steps = 0
  # uniform mode: while every live lane is at one PC (`uni`), that PC is a scalar and pc[] is written back on leaving it;
  # a guard or branch that every lane takes the same way stays in it
  uni: int | None = 0
  everyone = L.everyone
  yielded, spins = None, 0   # the per-lane scheduler's fairness: lanes that took SPIN_YIELD backward branches step aside
  big = L.n >= DROP_LANES
  while True:
    if uni is not None:
      cur = uni
      if cur >= n_ins: raise PTXFault("compute", f"control ran off the end of {e.name}", None)
      L.clock, L.sel = steps, everyone
      if cur in loops and cur not in failed:
        if (k := LOOPS.run(L, loops[cur], pairs, X.MAX_STEPS - steps)) is not None:
          steps += k
          uni = loops[cur].back + 1
          continue
        failed.add(cur)
        L.sel = everyone
      if (end := ends[cur]) > cur:
        for ins, f, gone in pairs[cur:end]:
          L.ins, L._d = ins, None
          f(L)
          if gone and big: L.drop(gone)
        steps += end - cur
        uni = end
        continue
      ins = instrs[cur]
      L.ins, L._d = ins, None
      steps += 1
      if steps > X.MAX_STEPS: raise PTXFault("compute", f"more than {X.MAX_STEPS} instruction steps (an endless loop?)", ins)
      if ins.pred is not None:
        pv, pd = L.pred(preds[cur])
        k = np.count_nonzero(pv) if pd is None or pd.all() else -1
        if k != 0 and k != everyone.size:   # diverges (or an undefined guard, reported below): back to per-lane PCs
          pc[everyone], uni = cur, None
          steps -= 1
          continue
        if (k != 0) == ins.pred_neg:   # nobody runs it
          uni = cur + 1
          continue
      f = fns[cur]
      if f is not None:
        f(L)
        if big and dead[cur]: L.drop(dead[cur])
        uni = cur + 1
        continue
      if ins.op == "bra":
        uni = labels[ins.args[0].value]
        continue
      if ins.op in ("ret", "exit"):   # every live lane leaves together: nobody waits at a barrier in uniform mode
        pc[everyone] = -1
        break
      pc[everyone], uni = cur, None   # ret / exit / barriers / trap: the per-lane scheduler
      steps -= 1
    run_ok = (pc >= 0) & ~waiting
    if not run_ok.any():
      if waiting.any(): _named_stuck(L) if named else _release(L, None)
      break
    cand = run_ok
    if yielded is not None:   # lanes that spun let the others run first (until those finish, wait or spin too)
      cand = run_ok & ~yielded
      if not cand.any(): yielded, cand = None, run_ok
    cur = int(pc[cand].min())
    if cur >= n_ins: raise PTXFault("compute", f"control ran off the end of {e.name}", None)
    sel = np.flatnonzero(cand & (pc == cur))
    ins = instrs[cur]
    L.ins, L.clock, L._d = ins, steps, None
    steps += 1
    if steps > X.MAX_STEPS: raise PTXFault("compute", f"more than {X.MAX_STEPS} instruction steps (an endless loop?)", ins)
    if ins.pred is not None:
      L.sel = sel
      pv, pd = L.pred(preds[cur])
      if checked and pd is not None and not pd.all():
        raise PTXFault("compute", f"guard predicate {ins.pred} is undefined for {L.thread(int(np.flatnonzero(~pd)[0]))}", ins)
      take = pv != ins.pred_neg
      pc[sel[~take]] = cur + 1
      sel = sel[take]
      if not sel.size: continue
    L.sel = sel
    op = ins.op
    if op == "bra":
      tgt = e.labels[ins.args[0].value]
      pc[sel] = tgt
      if tgt <= cur and cur in spin_loops and sel.size < np.count_nonzero(run_ok):   # a possible spin-wait, others could run
        spins += 1
        if spins >= SPIN_YIELD:   # (a thread spinning on one that is further on would otherwise never let it run)
          if yielded is None: yielded = np.zeros(L.n, np.bool_)
          yielded[sel], spins = True, 0
    elif op in ("ret", "exit"): pc[sel] = -1
    elif op in ("bar", "barrier") and ins.has("warp"):   # bar.warp.sync membermask: lanes of one warp, in step here
      _warp_sync(L, ins, sel)
      pc[sel] = cur + 1
    elif op in ("bar", "barrier") and named:
      _named_barrier(L, ins, sel, cur)
    elif op in ("bar", "barrier"):
      if ins.has("red"):   # bar.red.{popc.u32, and.pred, or.pred} d, id, {!}p: the predicate is taken at arrival
        if L.bar_val is None: L.bar_val = np.zeros(L.n, np.bool_)
        L.bar_val[sel] = L.get(ins.args[-1], "pred")
      waiting[sel] = True
      _release(L, cur)
    elif op == "trap": raise PTXFault("compute", f"trap executed by {L.thread(0)}", ins)
    else:
      fns[cur](L)
      pc[sel] = cur + 1
    if sel.size == everyone.size and not waiting.any() and pc[everyone[0]] >= 0 and (pc[everyone] == pc[everyone[0]]).all(): uni = int(pc[everyone[0]])


# the scheduler runs the lanes at the smallest PC; lanes that keep branching back in a loop that reads memory another
# thread may write (atomics, volatile / relaxed / acquire loads, mbarrier tests: a spin-wait on a lock or flag that a
# thread further on releases) step aside after this many backward branches while other lanes could run, until those
# finish, wait or spin in turn: independent thread scheduling's progress guarantee (other loops keep the lanes together)
SPIN_YIELD = 2


def _spin_loops(e: Entry) -> frozenset[int]:
  """The positions of backward branches whose loop reads memory that other threads may change meanwhile."""
  out = set()
  for j, ins in enumerate(e.instrs):
    if ins.op == "bra" and ins.args and (t := e.labels.get(str(ins.args[0].value))) is not None and t <= j:
      if any(i.op in ("atom", "mbarrier") or (i.op == "ld" and strong(i)[0]) for i in e.instrs[t:j]): out.add(j)
  return frozenset(out)


DROP_LANES = 2048   # launches this wide drop dead registers (fresh memory per result costs more than a dict operation)
_READS_FIRST = LOOPS.READS_FIRST   # instructions whose first operand is read


def _dead_after(e: Entry) -> list[tuple[str, ...]]:
  """For each position, the registers no instruction reads after it, when no backward branch can come back to it: in
  uniform mode (every lane past it) their arrays are dropped there, so a kernel holds only its live values (fresh memory
  for every result costs more than the arithmetic on it)."""
  n = len(e.instrs)
  in_loop = [False] * n
  for j, ins in enumerate(e.instrs):
    if ins.op == "bra" and ins.args and (t := e.labels.get(str(ins.args[0].value))) is not None and t <= j:
      for i in range(t, j + 1): in_loop[i] = True
  last: dict[str, int] = {}
  for i, ins in enumerate(e.instrs):
    first = _regs(ins.args[0]) if ins.args and (ins.args[0].kind == "addr" or ins.op in _READS_FIRST) else []
    for r in ([ins.pred] if ins.pred is not None else []) + [r for o in ins.args[1:] for r in _regs(o)] + first:
      last[r] = i
  out: list[list[str]] = [[] for _ in range(n)]
  for r, i in last.items():
    if not in_loop[i] and r in e.regs: out[i].append(r)
  return [tuple(x) for x in out]


def _regs(o: Operand) -> list[str]:
  if o.kind == "reg": return [str(o.value)]
  if o.kind in ("vec", "pair"): return [r for x in o.value for r in _regs(x)]  # type: ignore[union-attr]
  if o.kind in ("addr", "not"): return _regs(o.value)  # type: ignore[arg-type]
  return []


def _release(L: Launch, cur: int | None) -> None:
  """CTAs whose every live lane waits at one barrier instruction move on. A CTA where some threads wait while others
  exited (or, at the end, can never arrive) is a partial barrier; lanes at different barrier instructions a divergent one."""
  pc, waiting = L.pc, L.waiting
  per = L.per_cta
  w = waiting.reshape(-1, per)
  a = (pc >= 0).reshape(-1, per)
  exited = L.live.reshape(-1, per) & ~a
  has = w.any(axis=1)
  partial = has & exited.any(axis=1)
  if cur is None: partial |= has & ~(w == a).all(axis=1)
  p2 = pc.reshape(-1, per)
  if partial.any():
    c = int(np.flatnonzero(partial)[0])
    lanes = np.flatnonzero(w[c])
    L.sel = c * per + lanes
    raise PTXFault("compute", f"divergent barrier: in block {c} only {lanes.size} of {int(L.live.reshape(-1, per)[c].sum())} threads reached "
                   f"the barrier ({int(exited[c].sum())} exited); {L.thread(0)} waits", L.e.instrs[int(p2[c, lanes[0]])])
  for c in np.flatnonzero(has & (w == a).all(axis=1)):
    pcs = np.unique(p2[c][w[c]])
    if pcs.size > 1 and not _one_unaligned_barrier([L.e.instrs[int(p)] for p in pcs]):
      raise PTXFault("compute", f"divergent barrier: block {int(c)} waits at {pcs.size} different barrier instructions "
                     f"(lines {', '.join(str(L.e.instrs[int(p)].line) for p in pcs)})", L.e.instrs[int(pcs[0])])
    idx = c * per + np.flatnonzero(w[c])
    ins = L.e.instrs[int(pcs[0])]
    if ins.has("red"):
      v = L.bar_val[idx]
      r = np.full(idx.size, v.sum(), np.uint32) if ins.has("popc") else np.full(idx.size, v.all() if ins.has("and") else v.any())
      L.sel, L._d = idx, None
      L.put(ins.args[0], "u32" if ins.has("popc") else "pred", r)
    pc[idx] += 1
    waiting[idx] = False
    L.race_reset(int(c))


def _one_unaligned_barrier(ins: list) -> bool:
  """Whether threads waiting at these different instructions meet at one barrier: `barrier.sync` without .aligned may
  be reached at different instructions (PTX ISA: divergent code paths); bar.sync (= barrier.sync.aligned) may not."""
  return all(i.op == "barrier" and not i.has("aligned") and not i.has("red") for i in ins) and len({str(i.args[0].value) for i in ins}) == 1


def _warp_sync(L: Launch, ins: Any, sel: np.ndarray) -> None:
  """bar.warp.sync membermask (PTX ISA §9.7.13.3): the lanes executing it here are in step; in checked mode the mask must
  name the executing lane and only lanes executing this instruction now (a member still elsewhere, or exited, would make
  the others wait for it: reported). Shared-memory accesses of the members before it are ordered before theirs after it."""
  mask = L.get(ins.args[0], "u32") if ins.args else np.full(sel.size, 0xFFFFFFFF, np.uint32)
  _warp_check(L, ins, mask)
  L.warp_synced(sel)


NBAR = 16   # barriers per CTA (PTX ISA §9.7.13.1: bar{.cta} ids 0..15)


def _uses_named_barriers(e: Entry) -> bool:
  """bar.arrive, a thread count or a barrier id other than the constant 0: the counting model below; else every barrier
  is the whole CTA's (the model of _release, which also reports barriers reached by lanes at different instructions)."""
  for ins in e.instrs:
    if ins.op not in ("bar", "barrier") or ins.has("red") or ins.has("warp"): continue
    if ins.has("arrive") or len(ins.args) > 1 or not ins.args or ins.args[0].kind != "imm" or ins.args[0].value != 0: return True
  return False


def _named_barrier(L: Launch, ins: Any, sel: np.ndarray, cur: int) -> None:
  """bar.sync / barrier.sync a{, b} and bar.arrive / barrier.arrive a, b (PTX ISA §9.7.13.1): each executing thread
  arrives at barrier a of its CTA; sync threads wait until b threads (all the CTA's threads without b) have arrived,
  arrive threads go on. Arrival counts are per thread (warps of 32 count 32, as b must be a multiple of 32)."""
  if ins.has("red"): raise PTXFault("compute", "bar.red in a kernel that also uses bar.arrive / thread counts is not supported", ins)
  arrive = ins.has("arrive")
  if not ins.args or (arrive and len(ins.args) < 2): raise PTXFault("compute", f"{ins.op}.{'.'.join(ins.mods)} needs a barrier id{' and a thread count' if arrive else ''}", ins)
  bid = L.get(ins.args[0], "u32").astype(np.int64)
  if (bid >= NBAR).any():
    raise PTXFault("compute", f"barrier id {int(bid[bid >= NBAR][0])} is out of range 0..{NBAR - 1} for {L.thread(int(np.flatnonzero(bid >= NBAR)[0]))}", ins)
  per = L.per_cta
  size = L.live.reshape(-1, per).sum(axis=1)
  cta = L.cta[sel]
  want = L.get(ins.args[1], "u32").astype(np.int64) if len(ins.args) > 1 else size[cta]
  if L.bar_state is None: L.bar_state = (np.zeros((L.ncta, NBAR), np.int64), np.zeros((L.ncta, NBAR), np.int64), np.full(L.n, -1, np.int64))
  count, expect, wait_id = L.bar_state
  key = cta * NBAR + bid
  ex = expect.reshape(-1)
  prev = ex[key]
  clash = (prev != 0) & (prev != want)
  if (want <= 0).any() or clash.any():
    i = int(np.flatnonzero(clash | (want <= 0))[0])
    raise PTXFault("compute", f"barrier {int(bid[i])} of block {int(cta[i])}: {L.thread(i)} expects {int(want[i])} threads, "
                   f"{'another arrival expected ' + str(int(prev[i])) if prev[i] else 'not a positive count'}", ins)
  ex[key] = want
  np.add.at(count.reshape(-1), key, 1)
  if arrive: L.pc[sel] = cur + 1
  else:
    L.waiting[sel] = True
    wait_id[sel] = bid
  done = np.flatnonzero((count.reshape(-1) >= ex) & (ex > 0))
  if not done.size: return
  over = count.reshape(-1)[done] > ex[done]
  if over.any():
    k = int(done[over][0])
    raise PTXFault("compute", f"barrier {k % NBAR} of block {k // NBAR}: {int(count.reshape(-1)[k])} threads arrived, more than the "
                   f"{int(ex[k])} it counts (undefined)", ins)
  lane_key = L.cta * NBAR + wait_id
  free = L.waiting & (wait_id >= 0) & np.isin(lane_key, done)
  L.pc[free] += 1
  L.waiting[free] = False
  wait_id[free] = -1
  count.reshape(-1)[done] = 0
  ex[done] = 0
  for c in np.unique(done // NBAR): L.race_reset(int(c))


def _named_stuck(L: Launch) -> None:
  """Every remaining thread waits at a barrier that can no longer complete: report the first such barrier."""
  count, expect, wait_id = L.bar_state if L.bar_state is not None else (None, None, None)
  g = int(np.flatnonzero(L.waiting)[0])
  c = int(L.cta[g])
  b = int(wait_id[g]) if wait_id is not None else 0
  got, want = (int(count[c, b]), int(expect[c, b])) if count is not None else (0, 0)
  exited = int((L.live.reshape(-1, L.per_cta)[c] & (L.pc.reshape(-1, L.per_cta)[c] < 0)).sum())
  L.sel = np.array([g])
  raise PTXFault("compute", f"divergent barrier: barrier {b} of block {c} waits for {want} threads but only {got} arrived "
                 f"({exited} exited); {L.thread(0)} waits", L.e.instrs[int(L.pc[g])])
