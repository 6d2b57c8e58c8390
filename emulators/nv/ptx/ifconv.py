"""If-conversion of a loop body's forward branches (emulators/nv/ptx/loops.py): a body whose branches all jump forward
inside it (nvcc's diamonds for `a != a || ...` / `a == b` / `a > b` helpers, several per unrolled iteration) is an
acyclic graph of basic blocks whose layout order is already topological. Each block that not every path runs gets a lane
mask (the OR over its incoming edges of the source block's mask AND the branch condition); its instructions compute on
every lane of the row and keep the new value only where the mask is set, so a register written on one path only keeps
its old value (and its old definedness) on the other lanes, exactly as the stepped executor leaves it.

Only pure 32-bit register instructions that rows.py compiles take part (no loads: a skipped lane must not fault), and
every instruction of a masked block joins the loop's carried region (run row by row through these functions). In checked
mode a read of an undefined lane, where the reading instruction runs, abandons the fast path (the stepped loop then
reports exactly what it reports); otherwise definedness is tracked per register: a masked write defines only its lanes."""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from emulators.nv.ptx import rows
from emulators.nv.ptx.parse import Entry, Instr

enabled = True   # False: a loop body with branches is not planned (stepped)
Env = dict[str, np.ndarray]
IOp = Callable[[Env, dict[str, np.ndarray], bool, int], None]   # (values, defined lanes, checked, lanes)


class Undefined(Exception):
  """A region instruction read an undefined lane where it runs: the stepped loop decides what that means."""


@dataclass
class Blocks:
  """The forward branches of a body instrs[top:back] as basic blocks (each named by its first position; `back` is the
  exit every path reaches)."""
  branches: list[int]
  block_of: dict[int, int] = field(default_factory=dict)   # body position -> its block
  full: set[int] = field(default_factory=set)              # blocks on every path from the top to the exit
  into: dict[int, list[tuple[int, str | None, bool]]] = field(default_factory=dict)   # block -> (source block, branch predicate or None, taken when it is)

  def masked(self) -> list[int]:
    """Body positions in blocks that not every path runs."""
    return [i for i, b in self.block_of.items() if b not in self.full]


def blocks(e: Entry, top: int, back: int) -> Blocks | None:
  """The body's blocks, when its every branch is a direct forward jump to a label inside (top, back] and no branch from
  outside the body lands inside it; None otherwise."""
  instrs = e.instrs
  brs = [i for i in range(top, back) if instrs[i].op == "bra"]
  starts = {top, back}
  for i in brs:
    ins = instrs[i]
    if len(ins.args) != 1 or ins.args[0].kind not in ("label", "sym"): return None
    t = e.labels.get(str(ins.args[0].value))
    if t is None or not i < t <= back: return None
    starts |= {t, i + 1}
  for i, ins in enumerate(instrs):   # no jump into the body from outside it (its top excepted)
    if ins.op == "bra" and not top <= i < back and ins.args and (t := e.labels.get(str(ins.args[0].value))) is not None and top < t <= back: return None
  B = Blocks(brs)
  order = sorted(starts)
  into: dict[int, list[tuple[int, str | None, bool]]] = {b: [] for b in order}
  for b, nxt in itertools.pairwise(order):
    for i in range(b, nxt): B.block_of[i] = b
    last = instrs[nxt - 1]
    if last.op != "bra": into[nxt].append((b, None, True))
    else:
      t = e.labels[str(last.args[0].value)]
      into[t].append((b, last.pred, not last.pred_neg))
      if last.pred is not None: into[nxt].append((b, last.pred, last.pred_neg))
  # on every path iff (paths top -> b) x (paths b -> exit) == all paths (every edge goes forward: layout order is topological)
  to: dict[int, int] = {top: 1}
  for b in order[1:]: to[b] = sum(to[s] for s, _, _ in into[b])
  out = {s: [b for b in order if any(x == s for x, _, _ in into[b])] for s in order}
  frm: dict[int, int] = {back: 1}
  for b in reversed(order[:-1]): frm[b] = sum(frm[x] for x in out[b] for s, _, _ in into[x] if s == b)
  B.full = {b for b in order if to[b] and to[b] * frm[b] == to[back]}
  B.into = into
  return B


def _regs_read(ins: Instr) -> list[str]:
  rs = [str(o.value) for o in ins.args[1:] if o.kind == "reg"]
  return rs + ([ins.pred] if ins.pred is not None else [])


def _check(dm: dict[str, np.ndarray], names: list[str], m: np.ndarray | None) -> None:
  for r in names:
    d = dm.get(r)
    if d is not None and not (d.all() if m is None else d[m].all()): raise Undefined(r)


def _mask_op(b: int, edges: list[tuple[int, str | None, bool]], full: set[int]) -> IOp:
  key = f"@{b}"
  src = [(None if s in full else f"@{s}", p, want) for s, p, want in edges]
  def mop(env: Env, dm: dict[str, np.ndarray], checked: bool, n: int) -> None:
    acc = np.zeros(n, np.bool_)
    for s, p, want in src:
      m = None if s is None else env[s]
      if p is not None:
        if checked: _check(dm, [p], m)
        c = env[p] if want else ~env[p]
        m = c if m is None else m & c
      acc = acc | (np.ones(n, np.bool_) if m is None else m)
    env[key] = acc
  return mop


def _guarded(ins: Instr, base: rows.Op, mkey: str | None) -> IOp:
  """ins (its own guard predicate, if any, and its block's mask mkey) through the array function of its unguarded form."""
  d = str(ins.args[0].value)
  reads = _regs_read(ins)
  p, neg = ins.pred, ins.pred_neg
  def gop(env: Env, dm: dict[str, np.ndarray], checked: bool, n: int) -> None:
    m = None if mkey is None else env[mkey]
    if p is not None:
      if checked: _check(dm, [p], m)
      c = ~env[p] if neg else env[p]
      m = c if m is None else m & c
    if checked and dm: _check(dm, [r for r in reads if r != p], m)
    if m is None:
      base(env)
      dm.pop(d, None)
      return
    old = env[d]
    base(env)
    env[d] = np.where(m, env[d], old)
    if d in dm: dm[d] = dm[d] | m
  return gop


def compile_region(e: Entry, positions: list[int], B: Blocks) -> list[IOp] | None:
  """The region's instructions in order (branches become the masks of the blocks they lead to), or None when one is not
  of the kinds rows.py compiles."""
  ops: list[IOp] = []
  started: set[int] = set()
  for i in positions:
    b = B.block_of[i]
    if b not in B.full and b not in started:
      started.add(b)
      if any(s not in B.full and s not in started for s, _, _ in B.into[b]): return None   # (a source block outside the region)
      ops.append(_mask_op(b, B.into[b], B.full))
    ins = e.instrs[i]
    if ins.op == "bra": continue
    if ins.op in ("ld", "ldu") or not ins.args or ins.args[0].kind != "reg": return None
    base = rows._op(dataclasses.replace(ins, pred=None, pred_neg=False), e)
    if base is None: return None
    ops.append(_guarded(ins, base, None if b in B.full else f"@{b}"))
  return ops


def mixed_nans(c: np.ndarray, X: np.ndarray) -> bool:
  """Whether some lane meets two NaNs that differ once quieted: which one `add` keeps then depends on numpy's loop (its
  SIMD body and remainder order operands differently), so only the rows, computed as the steps compute them, decide."""
  allv = np.concatenate([c[None, :], X], axis=0)
  nan = np.isnan(allv.view(np.float32))
  if not nan.any(): return False
  q = allv | np.uint32(0x00400000)
  return bool(((nan.sum(axis=0) > 1) & (np.where(nan, q, np.uint32(0xFFFFFFFF)).min(axis=0) != np.where(nan, q, np.uint32(0)).max(axis=0))).any())


def run_rows(L, ops: list[IOp], out: list[str], per_row: dict[str, np.ndarray], k: int, n: int, fold: tuple[str, list[str], bool] | None = None) -> bool:
  """The if-converted region once per row of a chunk (rows.py's environment plus lane masks and definedness); the written
  registers go back to L once. False (L unchanged): a read of an undefined lane. fold (carried, the x of each diamond):
  a chain of nvcc MAX diamonds (max_chain) folds every row but the last at once, then runs the last row (or, when only
  the carried value is read after the loop, folds every row and leaves the dead registers as they were)."""
  regs = L.e.regs
  env: Env = {}
  dm: dict[str, np.ndarray] = {}   # register -> lanes holding defined values (absent: all)
  absent = set()
  for r in out:
    v = L.regs.raw(r)
    if v is None:
      absent.add(r)
      env[r] = np.zeros(n, np.bool_ if regs[r] == "pred" else np.uint32)
      dm[r] = np.zeros(n, np.bool_)
      continue
    env[r] = rows.value(v, regs[r])
    if L.checked and (d := L.defined.get(r)) is not None: dm[r] = d.copy()
  items = list(per_row.items())
  checked = L.checked
  first = 0
  if fold is not None and (k > 1 or fold[2]) and fold[0] in env and fold[0] not in dm and all(x in per_row for x in fold[1]):
    m = k if fold[2] else k - 1
    X = np.stack([per_row[x][:m] for x in fold[1]], axis=1).reshape(-1, n)   # iteration by iteration, diamond by diamond
    if not mixed_nans(env[fold[0]], X):
      env[fold[0]] = rows.max_fold_rows(env[fold[0]], X, True)
      first = m
  try:
    for j in range(first, k):
      for x, v in items: env[x] = v[j]
      for f in ops: f(env, dm, checked, n)
  except Undefined:
    return False
  L.sel = L.everyone
  for r in out:
    d = dm.get(r)
    if r in absent and d is not None and not d.any(): continue   # no lane wrote it: still never written
    if regs[r] == "pred": L.put_bits(r, env[r].astype(np.uint64), d)
    else: L.put_typed(r, env[r].copy(), d)
  return True


# ---- nvcc's rg_maxf as a fold -----------------------------------------------------------------------------------------
# The CUDA renderer's MAX helper (NaN: a + b, equal: by a's sign bit, else the larger) is compiled by nvcc -O3 into
#   setp.nan.f32 pn, c, x; @pn bra N; setp.eq.f32 pe, c, x; @pe bra E; bra.uni G;
# then the blocks E: mov.b32 r, c; setp.lt.s32 pl, r, 0; selp.f32 d, x, c, pl   N: add.f32 d, c, x
#                G: setp.gt.f32 pg, c, x; selp.f32 d, c, x, pg
# in some order, each ending in `bra.uni J` (the last may fall through to J). Its step is the renderer's MAX step
# (rows.max_fold_rows with c first): a chain of them through a loop folds a chunk's rows at once.
def _is(ins: Instr, op: str, mods: set[str], nargs: int) -> bool:
  return ins.op == op and set(ins.mods) == mods and len(ins.args) == nargs and ins.pred is None and all(o.kind in ("reg", "imm") for o in ins.args)


def _a(ins: Instr) -> list:
  return [o.value for o in ins.args]


def _diamond(e: Entry, p: int) -> tuple[str, str, str, int, set[str]] | None:
  """(c, x, d, the position after the join's label, the registers it writes but d) for the diamond starting at p."""
  I, lab = e.instrs, e.labels
  if p + 13 > len(I): return None
  h = I[p:p + 5]
  if not (_is(h[0], "setp", {"nan", "f32"}, 3) and _is(h[2], "setp", {"eq", "f32"}, 3)): return None
  pn, c, x = _a(h[0])
  pe = _a(h[2])[0]
  if _a(h[2])[1:] != [c, x] or c == x: return None
  brs = [(b.pred, b.pred_neg, lab.get(str(b.args[0].value)) if b.op == "bra" and len(b.args) == 1 else None) for b in (h[1], h[3], h[4])]
  if brs[0][:2] != (pn, False) or brs[1][:2] != (pe, False) or brs[2][0] is not None or None in (b[2] for b in brs): return None
  starts = {brs[1][2]: "E", brs[0][2]: "N", brs[2][2]: "G"}
  cur, d, joins, temps = p + 5, None, [], {pn, pe}
  for _ in range(3):
    kind = starts.pop(cur, None)
    if kind == "E" and _is(I[cur], "mov", {"b32"}, 2) and _is(I[cur + 1], "setp", {"lt", "s32"}, 3) and _is(I[cur + 2], "selp", {"f32"}, 4):
      r, pl = _a(I[cur])[0], _a(I[cur + 1])[0]
      if _a(I[cur])[1:] != [c] or _a(I[cur + 1])[1:] != [r, 0] or _a(I[cur + 2])[1:] != [x, c, pl]: return None
      dd, temps, cur = _a(I[cur + 2])[0], temps | {r, pl}, cur + 3
    elif kind == "N" and _is(I[cur], "add", {"f32"}, 3) and _a(I[cur])[1:] == [c, x]: dd, cur = _a(I[cur])[0], cur + 1
    elif kind == "G" and _is(I[cur], "setp", {"gt", "f32"}, 3) and _is(I[cur + 1], "selp", {"f32"}, 4):
      pg = _a(I[cur])[0]
      if _a(I[cur])[1:] != [c, x] or _a(I[cur + 1])[1:] != [c, x, pg]: return None
      dd, temps, cur = _a(I[cur + 1])[0], temps | {pg}, cur + 2
    else: return None
    if d not in (None, dd): return None
    d = dd
    if cur < len(I) and I[cur].op == "bra" and I[cur].pred is None and len(I[cur].args) == 1:
      joins.append(lab.get(str(I[cur].args[0].value)))
      cur += 1
  if any(j != cur for j in joins) or d is None or d in temps or c in temps or x in temps: return None
  return c, x, d, cur, temps


def max_chain(e: Entry, positions: list[int], carried: str, top: int, back: int) -> tuple[list[str], bool] | None:
  """(the x of each diamond in order, whether the chain's inner values are read nowhere outside the loop either) when the
  region `positions` is exactly a chain of nvcc MAX diamonds from the carried register back to it, and the registers
  they write besides the chain are read nowhere outside the loop: only the chain's values (or, with True, only the
  carried one) must end as stepping leaves them; the others are dead when the loop ends, whatever they hold."""
  pset = set(positions)
  pos, chain, xs, temps, covered = positions[0], [carried], [], set(), set()
  while covered != pset:
    if pos >= back: return None
    if pos not in pset:   # (a load between two diamonds)
      pos += 1
      continue
    m = _diamond(e, pos)
    if m is None or m[0] != chain[-1]: return None
    _, x, d, nxt, t = m
    chain.append(d)
    xs.append(x)
    temps |= t
    covered |= set(range(pos, nxt))
    pos = nxt
  if chain[-1] != carried or len(set(chain[1:])) != len(chain) - 1: return None
  mids = set(chain[1:-1])
  if any(x in mids or x in temps or x == carried for x in xs): return None
  outside = {r for i, ins in enumerate(e.instrs) if not top <= i <= back for o in ins.args for r in _names(o)}
  outside |= {ins.pred for i, ins in enumerate(e.instrs) if not top <= i <= back and ins.pred is not None}
  if temps & outside: return None
  return xs, not mids & outside


def _names(o) -> list[str]:
  if o.kind == "reg": return [str(o.value)]
  if o.kind in ("vec", "pair"): return [r for x in o.value for r in _names(x)]
  if o.kind in ("addr", "not"): return _names(o.value)
  return []
