"""Counted loops of RDNA3 code run as whole arrays: the iterations of a one-block loop (a block whose s_cbranch_scc0/1
goes back to its own entry) run together, as extra waves of one call of the block, instead of one block call each.

A loop qualifies when its block (blocks.py) runs no handler whose SGPR effects are unlisted (so it stores nothing and
touches no LDS: only VALU, SALU, SMEM and global loads) and its exit is an s_cmp/s_cmpk on SGPRs and constants. What a
body computes before it reads it depends only on the iteration; what it reads before writing it and also writes is
carried: SCC, SGPR and VGPR inductions (counters, 64-bit address pairs), and accumulators, the VGPRs that only v_add_f32
chains `acc = acc + x` (or `x + acc`) read and write.

One iteration runs as a block call first; the change of each carried register over it is its step (two adjacent ones
as one 64-bit value; VGPRs per lane). Where no VGPR is carried and the scalar instructions alone determine the carried
SGPRs (`dry_prev`: they run as a block of their own on a copy of the SGPRs), that step comes from them and the batch
starts with the first iteration (`from_start`, `split_from_start`); the loop's next such batch (the same number of
waves) guesses the steps this one took (`_kept_prev`: no dry run), checked like every prediction (a wrong guess changes
nothing and is not made again). The exit compare, evaluated (execute.sopc_scc / sopk_op) on the predicted values,
gives the trip count (the same for every wave, else no batch). The batch then runs the loop-mode block (built with the
accumulators: their adds only record the other operand, m.acc) on a copy of the machine with (iterations x waves)
waves, each iteration's copy starting from the predicted registers, the other VGPRs as at the batch's start and SCC as
the branch leaves it. A body with only inline VALU work is lane-wise and runs every lane (Machine.unmasked: no masked
writes; loads still read only the enabled lanes); the disabled lanes' values are dropped when the batch is taken.
Where such a body's scalar inputs are also the same in every wave and it reads no lane mask or EXEC as a scalar
(nothing sees a lane's position in its wave), the batch runs on the enabled lanes packed 32 to a wave (`_packed`;
`first_packed`: from the loop's first iteration on), every packed lane enabled (the last wave's rest copy the first
lane and are dropped), so no instruction of it writes under a lane mask.

Nothing predicted goes unchecked: the batch is used only when every iteration's branch went where it was predicted and
the carried registers (enabled lanes) and SCC each iteration ends with are the next one's predicted start. The
accumulators are then folded in iteration order by the row itself: its ufunc's `accumulate` (few lanes; a record taken
as `x + acc` only when no x is a NaN: x + acc == acc + x for np.add then), or one row call per add (many lanes). The
machine takes the last iteration's registers. Anything else (a fault, a failed check, a row that is not a numpy ufunc:
a seeded mutation) discards the batch and the loop runs block by block, so faults name the PC and lane they name
without batches, checked mode reports what it reports, and a changed row takes effect either way.

A loop whose carried VGPRs fail their prediction (no induction: a max chain) runs split from its next dispatch on
(`Split`): the instructions depending on those VGPRs as a block of their own once per iteration (every lane computed,
the middle iterations as an inner block: no entry test, no mask or definedness written at its end), the rest as a
batch first, whose iterations' registers the carried part reads; anything failing is undone and the blocks run the
loop."""
from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulators.amd.rdna3 import blocks as B
from emulators.amd.rdna3 import execute as E
from emulators.amd.rdna3 import lanes as M
from emulators.amd.rdna3 import ops as X
from emulators.amd.rdna3.decode import WIDTH, Inst, branch_target
from emulators.amd.rdna3.lanes import LANE_BITS, U32, U64
from emulators.amd.rdna3.opcodes import VOP3B

LOOPS: dict[tuple[bytes, int], dict[int, Loop | None]] = {}   # (code bytes, VGPR count) -> entry PC -> loop (None: not one)
MAX_BYTES = 48 << 20   # the batch's register files (VGPRs, their definedness) at most this big: longer loops run in chunks
MIN_N = 4
TRIPS0 = 64            # the first window of iterations whose exit compare is evaluated (_batch: grown 8x while none exits)
# accumulators other than an add chain's (or one with NaN operands the chain takes as acc + x) fold, from this many lanes
# (waves x 32) on, by the row's calls per iteration, else by its accumulate (numpy's accumulate of a 2-D array costs ~20 ns
# an element: 4 ms for 1,024 lanes x 230 adds, where the calls take 0.5 ms; it wins only for few lanes: 128 lanes x 120
# adds 0.12 ms against 0.2 ms)
FOLD_LANES = 256
# from this many enabled lanes on, an add chain's fold is one np.add.reduce down axis 0 (every lane of the batch's waves,
# the inner loop; the rows added in order), whatever FOLD_LANES says: 128 lanes x 128 adds 10 us against 90 us by
# accumulate, 32 lanes x 4,000 adds 0.13 ms against 2 ms; one enabled lane of 32 x 1,000 adds 29 us against 20 us
REDUCE_LANES = 4
SHORT_LANES = 2048     # from this many lanes on, a batch of fewer than MIN_N iterations is not run
SALU = ("SOP1", "SOP2", "SOPK")
_LOCAL = threading.local()   # the batch's VGPR file, kept for the next batch (a fresh one costs page faults)


def _scratch(size: int, name: str = "buf") -> np.ndarray:
  buf = getattr(_LOCAL, name, None)
  if buf is None or buf.size < size:
    buf = np.empty(size, U32)
    setattr(_LOCAL, name, buf)
  return buf[:size]


class Records(list):
  """An accumulator's records in a batch (blocks._record): (form, the other operand in every lane), in program order."""
  def add(self, form: int, x: np.ndarray, shape: tuple[int, ...]) -> None:
    self.append((form, np.full(shape, x)))   # np.full == broadcast_to + copy, cheaper


class FoldBuffer:
  """An add chain's records written straight into the rows of its fold (`_batch`: [acc; each iteration's operands in
  program order], float32, lanes the inner axis) instead of kept apart and copied there: one copy of each operand, not
  two. k: the records per iteration the block makes (Block.nrec); fewer or more is a failed batch."""
  def __init__(self, n: int, W: int, k: int):
    self.buf = np.empty((1 + n * k, W * 32), np.float32)
    self.rows = self.buf[1:].reshape(n, k, W, 32)
    self.n, self.W, self.k, self.forms = n, W, k, []

  def add(self, form: int, x: np.ndarray, shape: tuple[int, ...]) -> None:
    j = len(self.forms)
    if j >= self.k: raise IndexError("more records than the block lists")
    x = np.asarray(x)
    np.copyto(self.rows[:, j], x.reshape(self.n, self.W, -1) if x.shape[0] == self.n * self.W else x)
    self.forms.append(form)

  def records(self) -> list[tuple[int, np.ndarray]]:
    """The records as Records keeps them (float32 [n * W, 32] each), for the other folds."""
    return [(f, np.ascontiguousarray(self.rows[:, j]).reshape(-1, 32)) for j, f in enumerate(self.forms)]


@dataclass
class Loop:
  block: B.Block             # the loop-mode block
  carried: tuple[int, ...]   # SGPRs carried from one iteration to the next
  pairs: tuple[tuple[int, int], ...]   # (first SGPR, 1 or 2 dwords): the carried SGPRs as 32- or 64-bit inductions
  accs: tuple[int, ...]      # accumulator VGPRs
  vcarried: tuple[int, ...]  # the other VGPRs carried (inductions: predicted like the SGPRs, per lane)
  vpairs: tuple[tuple[int, int], ...]
  taken: bool                # the SCC value that takes the back edge
  cmp: Inst                  # the exit compare
  after: frozenset[int]      # SGPRs the body writes before the compare (it reads the iteration's updated value)
  exit_pc: int               # where the loop goes on when the branch is not taken
  failed: bool = False       # a batch's carried registers were not what was predicted: not tried again
  badv: frozenset[int] = frozenset()   # the carried VGPRs whose prediction failed (what a Split steps)
  split: Split | None = None   # the loop as a batched part and a stepped part (`_split`), once badv is known
  nosplit: bool = False      # no Split applies
  sblock: B.Block | None = None   # the body's scalar work alone (`dry_prev`), once known to apply
  nosblock: bool = False     # no scalar-only run applies
  steps: tuple | None = None   # (waves, SGPR steps, VGPR steps) of the last batch from the first iteration (`_first_batch`)
  noguess: bool = False      # a batch from kept steps failed once: `dry_prev` every time


@dataclass
class Split:
  """A loop whose carried VGPRs are no inductions (softmax's NaN-exact max): the instructions that depend on them,
  directly or through registers they wrote (the carried part), run once per iteration as a block of their own on the
  waves as they are; the rest (loads, addresses, the counter and the exit compare) runs as one batch (`_batch`) first,
  and its registers the carried part reads are set from that batch's iteration before each of its runs."""
  floop: Loop                # the batched part as a loop of its own (its block skips the carried part)
  cblock: B.Block            # the carried part, one iteration (it skips the rest and ends before the branch)
  cinner: B.Block | None     # the same as an inner run (blocks.build inner=True) for the iterations between the first and the last
  inject: tuple[tuple[str, int], ...]    # registers ("v"/"s", number) the carried part reads as the batched part left them
  restore: tuple[tuple[str, int], ...]   # registers both parts write whose last write in the body is the batched part's
  chain: int | None = None   # the one register carried from iteration to iteration where it is one VGPR (`_scan`)
  scan: int = 0              # the next guess of SCANS to try for the chain (len(SCANS): none left)


def _sgpr_dsts(i: Inst) -> set[int] | None:
  """The SGPRs an instruction of a loop body writes (SCC aside); None where they are not known here."""
  f, n = i.f, i.op.name
  if i.fmt in SALU: return set() if n.startswith("s_cmpk") else set(range(f["sdst"], f["sdst"] + WIDTH.get(i.op.dst, 1)))
  if i.fmt == "SOPC": return set()
  if i.fmt == "SMEM": return set(range(f["sdata"], f["sdata"] + WIDTH[i.op.dst]))
  if i.fmt == "VOPC": return {B.VCC}
  if i.fmt == "VOP3" and n.startswith(("v_cmp", "v_readlane", "v_readfirstlane")): return {f["vdst"]}
  if i.fmt == "VOP3" and n in VOP3B: return {f["sdst"]}
  if i.fmt in ("VOP1", "VOP2", "VOP3", "VOPD", "FLAT"): return set() if n != "v_readfirstlane_b32" else {f["vdst"]}
  return None


def analyze(m: Any, pc: int, b: B.Block, skip: frozenset[int] = frozenset()) -> Loop | None:
  last = b.insts[-1]
  if last.op.name not in ("s_cbranch_scc0", "s_cbranch_scc1") or branch_target(last) != pc or b.opaque: return None
  cv = b.vreads & b.vwritten
  carried = tuple(sorted(b.sreads & b.swritten))
  salu = [k for k, i in enumerate(b.insts[:-1]) if i.fmt in (*SALU, "SOPC")]
  if not salu: return None
  k = salu[-1]
  cmp = b.insts[k]
  if not (cmp.fmt == "SOPC" or cmp.op.name.startswith("s_cmpk_")): return None
  ops = [(cmp.f["ssrc0"], cmp.op.srcs[0]), (cmp.f["ssrc1"], cmp.op.srcs[1])] if cmp.fmt == "SOPC" else [(cmp.f["sdst"], "b32")]
  after: set[int] = set()
  for i in b.insts[:k]:
    if (d := _sgpr_dsts(i)) is None: return None
    after |= d
  for c, t in ops:
    regs = set(range(c, c + WIDTH.get(t, 1))) if c < 128 else set()
    if c >= 128 and not (c <= 208 or 240 <= c <= 248 or c == 255): return None   # only registers and constants
    if regs & b.swritten and not regs <= set(carried): return None   # a value the body computes before it: not predicted
  # the accumulators: the carried VGPRs that only v_add_f32 chains use (one that is used otherwise is left to prediction)
  accs, lb = set(cv), b
  while accs:
    bad: set[int] = set()
    if (lb := B.build(m, pc, frozenset(accs), bad, skip)) is not None: break
    if not bad: return None
    accs -= bad
  if lb is None or len(lb.insts) != len(b.insts) or lb.opaque: lb, accs = b, set()
  vcar = tuple(sorted(cv - accs))
  return Loop(lb, carried, _pairs(carried), tuple(sorted(accs)), vcar, _pairs(vcar), last.op.name == "s_cbranch_scc1", cmp,
              frozenset(after & set(carried)), last.pc + last.size)


def _pairs(regs: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
  """Registers as (first, 1 or 2): two adjacent carried registers are one 64-bit value (an address pair)."""
  pairs, rest = [], list(regs)
  while rest:
    r = rest.pop(0)
    if rest and rest[0] == r + 1:
      pairs.append((r, 2))
      rest.pop(0)
    else: pairs.append((r, 1))
  return tuple(pairs)


def loop_at(m: Any, pc: int, b: B.Block) -> Loop | None:
  key = (m.code, m.nv)
  if (d := LOOPS.get(key)) is None:
    if len(LOOPS) >= 256: LOOPS.pop(next(iter(LOOPS)))
    d = LOOPS[key] = {}
  if pc not in d: d[pc] = analyze(m, pc, b)
  lp = d[pc]
  if lp is not None and lp.failed and lp.badv and lp.split is None and not lp.nosplit:
    lp.split = _split(m, pc, lp, b)
    lp.nosplit = lp.split is None
  return None if lp is None or (lp.failed and (lp.split is None or lp.split.floop.failed)) else lp


def _predict(pairs: tuple[tuple[int, int], ...], prev: dict[int, np.ndarray], cur: dict[int, np.ndarray], n: int) -> dict[int, np.ndarray]:
  """Each carried register's value at the start of batch iterations 0..n (uint32 [n + 1, *shape]), the step being its
  change over the iteration before (prev -> cur: register -> uint32 array, per wave or per wave and lane)."""
  out: dict[int, np.ndarray] = {}
  for r, w in pairs:
    p0, p1 = _wide(prev, r, w), _wide(cur, r, w)
    j = np.arange(n + 1, dtype=U64).reshape((-1,) + (1,) * p1.ndim)
    _split_wide(out, r, w, p1[None] + (p1 - p0)[None] * j)   # modulo 2^64: the low 32 bits of a 32-bit one are right
  return out


def _wide(regs: Any, r: int, w: int) -> np.ndarray:
  """Register r's value as uint64: a pair (w 2) r, r + 1 as its low and high dwords, else r alone."""
  return regs[r].astype(U64) | (regs[r + 1].astype(U64) << U64(32)) if w == 2 else regs[r].astype(U64)


def _split_wide(out: Any, r: int, w: int, v: np.ndarray) -> None:
  """out[r] (and out[r + 1] for a pair) = the dwords of the uint64 values v."""
  out[r] = (v & U64(0xFFFFFFFF)).astype(U32)
  if w == 2: out[r + 1] = (v >> U64(32)).astype(U32)


def _trips(m: Any, lp: Loop, pred: dict[int, np.ndarray], n: int) -> tuple[int, bool] | None:
  """(iterations to run, whether the branch is taken after the last of them) from the exit compare on the predicted
  values; None where the waves would leave the loop at different iterations."""
  i = lp.cmp
  vals = []
  ops = [(i.f["ssrc0"], i.op.srcs[0]), (i.f["ssrc1"], i.op.srcs[1])] if i.fmt == "SOPC" else [(i.f["sdst"], "b32")]
  for c, t in ops:
    w = WIDTH.get(t, 1)
    if c >= 128:
      vals.append(np.full((n, m.W), m.const(c, t, i.literal, None), U64))
      continue
    v = np.zeros((n, m.W), U64)
    for k in range(w):
      r = c + k
      x = (pred[r][1:] if r in lp.after else pred[r][:-1]) if r in pred else np.broadcast_to(m.s[:, r], (n, m.W))
      v |= x.astype(U64) << U64(32 * k)
    vals.append(v)
  if i.fmt == "SOPC": scc = E.sopc_scc(i.op.name, vals[0].reshape(-1), vals[1].reshape(-1))
  else: scc = E.sopk_op(i.op.name, vals[0].reshape(-1), i.f["simm16"])[1]
  take = np.asarray(scc, np.bool_).reshape(n, m.W) == lp.taken
  every, none = take.all(axis=1), ~take.any(axis=1)
  stop = np.flatnonzero(~every)
  if not stop.size: return n, True
  j = int(stop[0])
  return (j + 1, False) if none[j] else None


def before(m: Any, lp: Loop) -> tuple[np.ndarray, np.ndarray]:
  """What `run` needs of the state before the iteration that runs as a block: the SGPRs and the carried VGPRs."""
  return m.s.copy(), m.v[:, list(lp.vcarried), :].copy()


def run(m: Any, lp: Loop, prev: tuple[np.ndarray, np.ndarray]) -> bool:
  """After one iteration ran as a block (the state before it: `before`), the next iterations as one batch, while the
  waves stay in the loop (at most what MAX_BYTES allows); False: nothing done (the caller goes on block by block)."""
  if lp.failed: return lp.split is not None and _carried(m, lp, prev)
  got = _packed(m, lp, prev)
  return _batch(m, lp, prev) if got is None else got


def _packable(m: Any, lp: Loop, b: B.Block, states: tuple[np.ndarray, ...]) -> tuple[np.ndarray, int, int] | None:
  """(the enabled lanes, their count E, packed waves P) where block b (and the loop's batch) may run on the enabled lanes
  packed 32 to a wave and that at least halves the waves: a lane-wise body whose scalar inputs are the same in every
  wave in each SGPR file of `states` (then so is all its scalar work), which reads no lane mask it did not compute, no
  mask it computed as a scalar and not EXEC (a lane's position in its wave is never seen). None: not applicable."""
  lanes = (m.s[:, 126][:, None] & LANE_BITS) != 0
  E = int(lanes.sum())
  P = -(-E // 32)
  if not b.lanewise or b.lreads or b.maskever & b.sall or {126, 127} & b.sall or not E or 2 * P > m.W: return None
  cols = sorted(set(b.sreads) | set(lp.carried))
  if not (all((x[:, cols] == x[:1, cols]).all() for x in states) and (m.scc == m.scc[0]).all()): return None
  return lanes, E, P


def _first_lanes(lanes: np.ndarray) -> int:
  """k where every wave enables exactly its first k lanes (a partial workgroup of k work-items), else 0."""
  k = int(lanes[0].sum())
  return k if k and lanes[0, :k].all() and (lanes == lanes[0]).all() else 0


def _pack(m: Any, lanes: np.ndarray, E: int, P: int) -> tuple[Any, Any]:
  """The packed machine (every lane enabled: the lanes past E copy the first lane, compute what it computes from the
  same scalars and addresses, and are dropped by `_unpack`; no masked writes) and the function packing [W, k, 32]."""
  sel = np.flatnonzero(lanes.reshape(-1))
  first = _first_lanes(lanes)
  def pack(x: np.ndarray) -> np.ndarray:   # [W, k, 32] -> [P, k, 32]: the enabled lanes in order, 32 to a wave
    k = x.shape[1]
    out = np.empty((k, P * 32), x.dtype)   # register-major (Machine.v): each register's lanes one row
    if first: out[:, :E].reshape(k, -1, first)[:] = x.transpose(1, 0, 2)[:, :, :first]   # a slice, no index
    else: np.take(x.transpose(1, 0, 2).reshape(k, -1), sel, axis=1, out=out[:, :E])
    out[:, E:] = out[:, :1]
    return out.reshape(k, P, 32).transpose(1, 0, 2)
  pm = copy.copy(m)
  pm.W, pm.s, pm.v, pm.vinit = P, np.tile(m.s[:1], (P, 1)), pack(m.v), None
  pm.s[:, 126] = 0xFFFFFFFF
  pm.scc, pm.pc = np.full(P, m.scc[0]), np.full(P, m.pc[0], np.int64)
  pm.done, pm.bar, pm.wg, pm.bound = np.zeros(P, np.bool_), np.zeros(P, np.bool_), np.zeros(P, np.int64), {}
  pm._idx, pm._ix, pm._lanes, pm.steps, pm.batches = None, None, None, 0, 0
  return pm, pack


def _unpack(m: Any, pm: Any, lanes: np.ndarray, E: int, blocks: tuple[B.Block, ...], accs: tuple[int, ...]) -> bool:
  """The packed machine's state back: the VGPRs the blocks write (and the accumulators) to their lanes, the scalars
  (the same in every packed wave) to every wave, the lane masks bit by bit. False (nothing changed) where the packed
  waves disagree on a scalar."""
  P = pm.W
  if not ((pm.pc == pm.pc[0]).all() and (pm.scc == pm.scc[0]).all()): return False
  maskw = frozenset().union(*(b.maskw for b in blocks))
  sw = sorted(c for c in frozenset().union(*(b.swritten for b in blocks)) - maskw if c < 128)
  if sw and not (pm.s[:, sw] == pm.s[:1, sw]).all(): return False
  wr = sorted(r for r in set().union(*(b.vwritten for b in blocks)) | set(accs) if r < m.nv)
  if m.v.transpose(1, 0, 2).flags.c_contiguous:
    # register by register, each a row of both register-major files: the packed row's first E lanes to the enabled lanes
    src = pm.v.transpose(1, 0, 2).reshape(m.nv, P * 32)
    dst = m.v.transpose(1, 0, 2).reshape(m.nv, m.W * 32)
    first = _first_lanes(lanes)
    sel = None if first else np.flatnonzero(lanes.reshape(-1))
    for a, b in B.runs(wr):   # runs of consecutive registers: slices of both files (no gathered copy)
      if first: dst.reshape(m.nv, m.W, 32)[a:b, :, :first] = src[a:b, :E].reshape(b - a, m.W, first)   # the first lanes of every wave
      else: dst[a:b, sel] = src[a:b, :E]
  else:
    ew, el = np.nonzero(lanes)
    flat = pm.v.transpose(0, 2, 1).reshape(P * 32, m.nv)[:E]
    for r in wr: m.v[ew, r, el] = flat[:, r]
  if m.vinit is not None: B.mark_rows(m.vinit, B.runs(wr), lanes[:, None, :], bool(lanes.all()))
  m.s[:, sw] = pm.s[0, sw]
  if maskw:   # every mask SGPR at once: the packed lanes' bits (the first E) to the enabled lanes, packed per wave
    cs = sorted(maskw)
    bits = ((pm.s[:, cs].T[:, :, None] & LANE_BITS) != 0).reshape(len(cs), -1)[:, :E]
    got = np.zeros((len(cs), m.W * 32), np.bool_)
    got[:, np.flatnonzero(lanes.reshape(-1))] = bits
    m.s[:, cs] = M.lanes_to_mask(got.reshape(-1, 32)).reshape(len(cs), m.W).T
  m.scc[:] = pm.scc[0]
  m.pc[:] = pm.pc[0]
  m._lanes = None
  return True


def _packed(m: Any, lp: Loop, prev: tuple[np.ndarray, np.ndarray]) -> bool | None:
  """The batch on the enabled lanes alone (`_packable`): the packed machine runs `_batch`, `_unpack` puts its state
  back. None: not applicable (the batch runs on the waves as they are)."""
  b = lp.block
  if (got := _packable(m, lp, b, (m.s, prev[0]))) is None: return None
  lanes, E, P = got
  reads = sorted(r for r in b.vreads if r < m.nv)
  if m.vinit is not None and not B.defined_rows(m.vinit, B.runs(reads), lanes, bool(lanes.all())): return False
  pm, pack = _pack(m, lanes, E, P)
  pprev = (np.tile(prev[0][:1], (P, 1)), pack(prev[1]) if prev[1].size else prev[1][:P])
  ok = _batch(pm, lp, pprev)
  m.steps += pm.steps
  if not ok or not _unpack(m, pm, lanes, E, (b,), lp.accs): return False
  m.batches += 1
  return True


SCALAR_FMTS = (*SALU, "SOPC", "SMEM")
DRY_SHARE = 3   # a dry run of more than 1/3 of a loop body's instructions is not made (`_scalar_block`)


def _scalar_block(m: Any, lp: Loop, pc: int, b: B.Block) -> B.Block | None:
  """The body's scalar instructions, and the vector ones the carried VGPRs (inductions: address pairs) and the SGPRs
  those scalar ones read need (their backward slice over the iteration), alone as a block, the rest skipped: what
  determines the carried registers after an iteration. None: not applicable (the slice needs a load, or an instruction
  no block lists the registers of). Cached on the loop."""
  if lp.sblock is not None or lp.nosblock: return lp.sblock
  lp.nosblock = True
  body = b.insts[:-1]
  vs: set[int] = set()
  for i in body:
    if i.fmt in SCALAR_FMTS: continue
    if (d := _sgpr_dsts(i)) is None: return None
    vs |= d
  keep = {i.pc for i in body if i.fmt in SCALAR_FMTS}
  sb = B.build(m, pc, skip=frozenset(i.pc for i in body if i.fmt not in SCALAR_FMTS))
  if sb is None: return None
  need = {("v", r) for r in lp.vcarried} | {("s", c) for c in vs & (sb.sreads | sb.lreads | sb.sall | set(lp.carried))}
  if need:   # the vector instructions computing them, walking back over the iteration
    for i in reversed(body):
      if i.fmt in SCALAR_FMTS: continue
      if (rw := _rw(m, i)) is None: return None
      rd, wr = rw
      if not wr & need: continue
      if i.fmt == "FLAT": return None   # an induction computed from memory: no dry run
      keep.add(i.pc)
      need = (need - wr) | {x for x in rd if x[0] in ("v", "s")}
    if len(keep) > len(body) // DRY_SHARE: return None   # about an iteration's work: the block itself runs it as cheaply
    sb = B.build(m, pc, skip=frozenset(i.pc for i in body if i.pc not in keep))
    if sb is None or sb.opaque: return None
  if [i.pc for i in sb.insts] != [i.pc for i in b.insts if i.pc in keep or i is b.insts[-1]]: return None
  lp.sblock, lp.nosblock = sb, False
  return sb


def dry_prev(m: Any, lp: Loop, pc: int, b: B.Block) -> tuple[np.ndarray, np.ndarray] | None:
  """Before a loop's first iteration (every wave at its entry pc, block b): the instructions that determine the carried
  registers (`_scalar_block`) on copies of the registers give each carried register's change over one iteration, and
  so the registers as they would have been one iteration earlier (now - change; modulo 2^32, pairs 2^64; VGPRs per
  lane): what `_batch` takes as `prev`, so the batch starts with the first iteration (no iteration run as a block
  first). None: not applicable, or the waves would leave the loop after one iteration (the batch checks every
  prediction as always)."""
  if lp.failed or (sb := _scalar_block(m, lp, pc, b)) is None: return None
  dm = copy.copy(m)
  dm.s, dm.scc, dm.pc, dm.bound = m.s.copy(), m.scc.copy(), m.pc.copy(), {}
  dm.vinit, dm.sundef, dm.sccundef, dm.sdirty = None, None, None, False   # no definedness: undefined bytes fault (None)
  dm.touched = {k: list(v) for k, v in m.touched.items()}
  if lp.vcarried or sb.vwritten:   # a register-major copy (as Machine.v) of the VGPRs the dry run reads or writes
    rows = sorted({r for r in (*sb.vreads, *sb.vwritten) if r < m.nv} | {r + k for r, w in lp.vpairs for k in range(w)})
    base = np.empty((m.nv, m.W, 32), U32)
    base[rows] = m.v.transpose(1, 0, 2)[rows]
    dm.v = base.transpose(1, 0, 2)
  try:
    with np.errstate(all="ignore"):
      if not sb.fn(dm, m._idx): return None
  except Exception: return None
  if not (dm.pc == pc).all(): return None
  # one iteration back: now - (after the dry run - now)
  return _one_back(m, lp, _steps(lp.pairs, _Cols(m.s), _Cols(dm.s)), _steps(lp.vpairs, _Cols(m.v), _Cols(dm.v)))


def _one_back(m: Any, lp: Loop, ssteps: dict[int, np.ndarray], vsteps: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
  """(the SGPR file, the carried VGPRs [W, carried, 32]) one iteration before now, by the carried registers' steps."""
  prev = m.s.copy()
  _back(lp.pairs, _Cols(m.s), ssteps, _Cols(prev))
  vprev = m.v[:, list(lp.vcarried), :].copy()
  _back(lp.vpairs, _Cols(m.v), vsteps, _Cols(vprev, {r: k for k, r in enumerate(lp.vcarried)}))
  return prev, vprev


def _steps(pairs: tuple[tuple[int, int], ...], prev: Any, cur: Any) -> dict[int, np.ndarray]:
  """Each carried value's change over an iteration (uint64, modulo 2^32 or 2^64 for pairs): prev -> cur, where prev[r]
  and cur[r] are register r's values (uint32 arrays)."""
  return {r: _wide(cur, r, w) - _wide(prev, r, w) for r, w in pairs}


def _back(pairs: tuple[tuple[int, int], ...], cur: Any, steps: dict[int, np.ndarray], out: Any) -> None:
  """out[r] = register r's value one iteration before cur (cur - step, modulo 2^32 or 2^64 for pairs)."""
  for r, w in pairs: _split_wide(out, r, w, _wide(cur, r, w) - steps[r])


class _Cols:
  """Register r as column r of an [W, regs] SGPR file or row `k` of a [W, regs, 32] VGPR selection (`at`: r -> k)."""
  def __init__(self, a: np.ndarray, at: dict[int, int] | None = None): self.a, self.at = a, at
  def __getitem__(self, r: int) -> np.ndarray: return self.a[:, r] if self.at is None else self.a[:, self.at[r], :]
  def __setitem__(self, r: int, x: np.ndarray) -> None:
    if self.at is None: self.a[:, r] = x
    else: self.a[:, self.at[r], :] = x


def _kept_prev(m: Any, lp: Loop) -> tuple[np.ndarray, np.ndarray] | None:
  """`prev` (as `dry_prev` gives it) from the steps of the loop's last batch from its first iteration (the same number
  of waves): a guess, checked by `_batch` as every prediction is (the first iteration starts from the registers as they
  are, each next one from the prediction the one before must end with), so a step that does not hold only costs the
  batch. None: no steps kept."""
  st = lp.steps
  if st is None or st[0] != m.W: return None
  return _one_back(m, lp, st[1], st[2])


def from_start(m: Any, lp: Loop, pc: int, b: B.Block) -> bool:
  """The whole loop from its first iteration as one batch (`dry_prev`, or the steps the last such batch took:
  `_kept_prev`), on the waves as they are; False: nothing done (the caller runs the first iteration as a block). The
  scheduler counted the step: one less here."""
  if (m.vinit is not None and not m.clean()) or not _first_batch(m, lp, pc, b): return False
  m.steps -= 1
  return True


def _first_batch(m: Any, lp: Loop, pc: int, b: B.Block) -> bool:
  """The loop from its first iteration (every wave at its entry pc, block b) as one batch on m, predicted from the
  steps the last such batch took (`_kept_prev`) or else by the dry run (`dry_prev`), whose steps are then kept; False:
  nothing changed."""
  if not lp.noguess and (prev := _kept_prev(m, lp)) is not None:
    if _batch(m, lp, prev, guess=True): return True
    lp.steps, lp.noguess = None, True   # a batch from kept steps failed (whatever the cause): never guessed again
  if (prev := dry_prev(m, lp, pc, b)) is None: return False
  steps = None if lp.noguess else \
    (m.W, _steps(lp.pairs, _Cols(prev[0]), _Cols(m.s)), _steps(lp.vpairs, _Cols(prev[1], {r: k for k, r in enumerate(lp.vcarried)}), _Cols(m.v)))
  if not _batch(m, lp, prev): return False
  lp.steps = steps
  return True


def split_from_start(m: Any, lp: Loop, pc: int, b: B.Block) -> int:
  """A split loop (`Split`) from its first iteration: the batched part's scalar work predicts it (`dry_prev` on the
  whole body b, the vector instructions, the carried part's included, skipped), then `_carried`. 0: not tried (the
  caller runs b, then `run`); 1: done; 2: tried and undone (the caller runs the loop block by block). Checked mode:
  only where b's own entry test would pass (its reads defined in the enabled lanes, no undefined SGPR)."""
  sp = lp.split
  if sp is None or sp.floop.failed: return 0
  if m.vinit is not None:
    reads = sorted(r for r in b.vreads if r < m.nv)
    lanes = (m.s[:, 126][:, None] & LANE_BITS) != 0
    if not m.clean() or not B.defined_rows(m.vinit, B.runs(reads), lanes, bool(lanes.all())): return 0
  if (prev := dry_prev(m, sp.floop, pc, b)) is None: return 0
  pv = m.v[:, list(lp.vcarried), :].copy()   # `_carried` takes the batched part's carried VGPRs from lp.vcarried's places
  for k, r in enumerate(sp.floop.vcarried): pv[:, lp.vcarried.index(r), :] = prev[1][:, k, :]
  if not _carried(m, lp, (prev[0], pv)): return 2
  m.steps -= 1   # the scheduler counted the step
  return 1


def first_packed(m: Any, lp: Loop, b: B.Block) -> int:
  """Before a loop's first iteration (block b, every wave at its entry): where b and the batch can run packed
  (`_packable`, the checked-mode entry test of b passed), the first iteration as b on the packed machine, then the
  batch there (`_batch`) while the waves stay in the loop, and the state back (`_unpack`). So a loop over waves with few
  enabled lanes runs no iteration on the waves as they are. 0: nothing done (the caller runs b, then `run`); 1: done;
  2: the first iteration done, the batch refused (the caller goes on block by block)."""
  if lp.failed: return 0
  pc0 = int(m.pc[0])
  if (got := _packable(m, lp, b, (m.s,))) is None or (lp.block is not b and _packable(m, lp, lp.block, (m.s,)) is None): return 0
  lanes, E, P = got
  if m.vinit is not None:
    reads = sorted(r for r in b.vreads if r < m.nv)
    if not m.clean() or not B.defined_rows(m.vinit, B.runs(reads), lanes, bool(lanes.all())): return 0
  pm, _ = _pack(m, lanes, E, P)
  pm._idx = idx = np.arange(P)
  pm._ix = slice(None)
  # the whole loop as one batch where the kept steps or the scalar work give the first iteration's prediction
  if _first_batch(pm, lp, pc0, b):
    if not _unpack(m, pm, lanes, E, (lp.block,), lp.accs): return 0
    m.steps += pm.steps - 1   # the scheduler counted the step
    m.batches += 1
    return 1
  pprev = (pm.s.copy(), pm.v[:, list(lp.vcarried), :].copy())
  try:
    with np.errstate(all="ignore"):
      if not b.fn(pm, idx): return 0
  except Exception: return 0   # a fault: the waves as they are run the iteration and name it
  pm.steps += len(b.insts) - 1   # the scheduler counted the step that runs it (as for a block)
  ran = bool((pm.pc == pc0).all()) and _batch(pm, lp, pprev)
  if not _unpack(m, pm, lanes, E, (b, lp.block) if ran else (b,), lp.accs if ran else ()): return 0
  m.steps += pm.steps
  m.batches += ran
  return 1 if ran or int(m.pc[0]) != pc0 else 2


def _batch(m: Any, lp: Loop, prev: tuple[np.ndarray, np.ndarray], grab: dict | None = None, guess: bool = False) -> bool:
  """The loop's iterations from the machine's state on as one batch (the module's docstring), `prev` the state one
  iteration before (its carried registers give the steps); False: nothing changed. guess: prev is a guess
  (`_kept_prev`): a failed prediction marks nothing on the loop."""
  row = X.VALU["v_add_f32"]
  if lp.accs and not (isinstance(row, np.ufunc) and row.nin == 2): return False
  W = m.W
  per = W * m.nv * 32 * 4
  cap = max(1, MAX_BYTES // max(per, 1))
  # the trip count from predictions over a window growing from TRIPS0 iterations up to cap (cap is large for few waves:
  # predicting all of it for a short loop would cost more than the batch); a window the waves stay in all along is
  # grown, so the count is the one the whole cap gives
  p0, p1 = {r: prev[0][:, r] for r in lp.carried}, {r: m.s[:, r] for r in lp.carried}
  k = min(cap, TRIPS0)
  while True:
    pred = _predict(lp.pairs, p0, p1, k)
    if (got := _trips(m, lp, pred, k)) is None: return False
    if got != (k, True) or k == cap: break
    k = min(cap, 8 * k)
  n, on = got
  if n < (MIN_N if W * 32 >= SHORT_LANES else 2): return False   # a short batch of many waves costs more than it saves
  N = n * W
  s0 = _scratch(N * 128, "sbuf").reshape(N, 128)   # every iteration's SGPRs: the batch's start, then the predictions
  s0.reshape(n, W, 128)[:] = m.s
  for r, x in pred.items(): s0.reshape(n, W, 128)[:, :, r] = x[:n]
  lanes = (m.s[:, 126][:, None] & LANE_BITS) != 0
  reads = sorted(r for r in lp.block.vreads if r < m.nv)
  # checked mode: the block's entry test, on the machine (every iteration starts with its VGPRs); the batch then runs
  # without definedness (each value the block computes is defined in the enabled lanes, as it marks them)
  if m.vinit is not None and not B.defined_rows(m.vinit, B.runs(reads), lanes, bool(lanes.all())): return False
  mx = copy.copy(m)
  # VGPRs: the ones the body reads before writing them as at the batch's start, the others never read before written
  # register-major ([VGPR, wave, lane] in memory): each register of all the batch's waves is one contiguous array
  v = _scratch(m.nv * n * W * 32).reshape(m.nv, n, W, 32)
  for a, b in B.runs(reads): v[a:b] = m.v.transpose(1, 0, 2)[a:b, None]   # slices of the register-major files: no gather
  vpred = _predict(lp.vpairs, {r: prev[1][:, k] for k, r in enumerate(lp.vcarried)}, {r: m.v[:, r, :] for r in lp.vcarried}, n)
  for r, x in vpred.items(): v[r] = x[:n]
  mx.W, mx.s, mx.v, mx.vinit = N, s0, v.reshape(m.nv, N, 32).transpose(1, 0, 2), None
  mx.scc = np.full(N, lp.taken)
  mx.scc[:W] = m.scc
  mx.pc, mx.done, mx.bar = np.full(N, m.pc[0], np.int64), np.zeros(N, np.bool_), np.zeros(N, np.bool_)
  # an add chain over enough enabled lanes folds by reduce: its records go straight into the fold's rows
  nrec = dict(lp.block.nrec)
  E = int(lanes.sum()) if lp.accs else 0
  direct = row is np.add and E >= REDUCE_LANES
  mx.wg, mx.bound = np.tile(m.wg, n), {}
  mx.acc = {r: FoldBuffer(n, W, nrec[r]) if direct and nrec.get(r) else Records() for r in lp.accs}
  mx.touched = {k: list(v) for k, v in m.touched.items()}
  idx = np.arange(N)
  mx._idx, mx._ix, mx._lanes = idx, slice(None), None
  # a lane-wise body computes the disabled lanes too (no masked writes; loads still only the enabled lanes'): their
  # values are dropped below, where the registers written keep theirs in the disabled lanes
  mx.unmasked = lp.block.lanewise
  try:
    with np.errstate(all="ignore"):
      if not lp.block.fn(mx, idx): return False
  except Exception:   # any fault: the interpreter reruns these iterations and names it
    return False
  # the checks: every branch as predicted, the carried SGPRs and SCC each iteration ends with are the next one's start
  pcs = mx.pc.reshape(n, W)
  if not ((pcs[:-1] == m.pc[0]).all() and (pcs[-1] == (m.pc[0] if on else lp.exit_pc)).all()): return False
  e3 = mx.s.reshape(n, W, 128)
  if any(r not in pred or not (e3[:-1, :, r] == pred[r][1:n]).all() for r in lp.carried):
    if not guess: lp.failed = True
    return False
  if bad := frozenset(r for r, x in vpred.items() if not ((mx.v[:, r, :].reshape(n, W, 32)[:-1] == x[1:n]) | ~lanes).all()):
    if not guess: lp.failed, lp.badv = True, bad
    return False
  if not (mx.scc.reshape(n, W)[:-1] == lp.taken).all(): return False
  wr = sorted(r for r in lp.block.vwritten if r < m.nv)
  # the VGPRs read and not listed as written end as they began (a handler writing one unlisted: no batch)
  if (keep := [r for r in reads if r not in lp.block.vwritten and r not in lp.accs]) and \
     not (mx.v[(n - 1) * W:N][:, keep, :] == m.v[:, keep, :]).all(): return False
  results = {}
  sel = lanes.reshape(-1)   # the enabled lanes (of W * 32): the only ones whose accumulator changes
  every = bool(lanes.all())   # every lane enabled: the folds' results as they are (np.where with a mask costs a pass)
  for r in lp.accs:
    fb = mx.acc[r]
    if isinstance(fb, FoldBuffer):
      if len(fb.forms) != fb.k: return False
      # an acc-second operand with a NaN: the other folds (x + acc differs from acc + x only for two NaNs)
      if not any(form and np.isnan(fb.rows[:, j]).any() for j, form in enumerate(fb.forms)):
        # an add chain: [acc; each iteration's operands in program order] summed down axis 0 in one call (numpy adds the
        # rows in order into the lane's running sum, acc first)
        fb.buf[0] = m.v[:, r, :].view(np.float32).reshape(-1)
        with np.errstate(all="ignore"): acc = np.add.reduce(fb.buf, axis=0).reshape(W, 32)
        results[r] = acc.view(U32) if every else np.where(lanes, acc.view(U32), m.v[:, r, :])
        continue
      recs = fb.records()
    else: recs = fb
    if not recs: return False
    if W * 32 >= FOLD_LANES:   # many lanes: the row's own calls, iteration by iteration (either operand order exact)
      acc = m.v[:, r, :].view(np.float32).copy()
      xs = [(form, a.reshape(n, W, 32)) for form, a in recs]
      with np.errstate(all="ignore"):
        for t in range(n):
          for form, x in xs:   # in place (out=: an elementwise ufunc, checked above), in the block's operand order
            if form: row(x[t], acc, out=acc)
            else: row(acc, x[t], out=acc)
      results[r] = acc.view(U32) if every else np.where(lanes, acc.view(U32), m.v[:, r, :])
      continue
    k = len(recs)
    # per enabled lane its sequence of operands, iteration by iteration, each in program order: [lanes, n * k], contiguous
    xs = np.stack([a for _, a in recs], axis=-1).view(np.float32).reshape(n, W * 32, k)[:, sel, :]
    if any(form for form, _ in recs):   # acc as the second operand: x + acc == acc + x for np.add unless x is a NaN
      if row is not np.add or np.isnan(xs[:, :, [j for j, (form, _) in enumerate(recs) if form]]).any(): return False
    seq = np.concatenate([m.v[:, r, :].reshape(-1)[sel].view(np.float32)[:, None], xs.transpose(1, 0, 2).reshape(-1, n * k)], axis=1)
    with np.errstate(all="ignore"): res = np.asarray(row.accumulate(seq, axis=1)[:, -1], np.float32)
    out = m.v[:, r, :].copy()
    out.reshape(-1)[sel] = res.view(U32)
    results[r] = out
  if grab is not None: grab["mx"], grab["n"] = mx, n   # every iteration's registers, for a Split's carried part
  last = slice((n - 1) * W, N)
  m.s[:] = mx.s[last]
  m.scc[:] = mx.scc[last]
  # the registers written: disabled lanes keep their values, as without the batch
  for a, b in B.runs(wr):
    if every: m.v[:, a:b, :] = mx.v[last, a:b, :]
    else: m.v[:, a:b, :] = np.where(lanes[:, None, :], mx.v[last, a:b, :], m.v[:, a:b, :])
  for r, x in results.items(): m.v[:, r, :] = x
  if m.vinit is not None: B.mark_rows(m.vinit, B.runs(wr), lanes[:, None, :], every)
  m.pc[:] = mx.pc[last]
  m.touched.clear()
  m.touched.update(mx.touched)
  m.steps += n * len(lp.block.insts)
  m.batches += 1
  m._lanes = None
  return True


VALU_FMTS = ("VOP1", "VOP2", "VOP3", "VOPC", "VOPD", "VOP3P")
SNAP_BYTES = 16 << 20   # a Split's state snapshot (to undo a failed carried part) at most this big
UNMASKED_CARRIED = True   # a Split's carried part computes every lane (`_carried`; ~8% faster than masked writes)


def _rw(m: Any, i: Inst) -> tuple[set[tuple], set[tuple]] | None:
  """The registers one instruction reads and writes, as its own one-instruction block lists them (("v", VGPR dword),
  ("s", SGPR), ("scc",)); None where no block lists them."""
  one = B.build(m, i.pc, stop=i.pc + i.size)
  if one is None or one.opaque or len(one.insts) != 1: return None
  rd = {("v", r) for r in one.vreads} | {("s", c) for c in (*one.sreads, *one.lreads, *one.sall)}
  wr = {("v", r) for r in one.vwritten} | {("s", c) for c in one.swritten}
  if i.fmt in (*SALU, "SOPC"): rd, wr = rd | {("scc",)}, wr | {("scc",)}   # SALU: SCC read and written (conservatively)
  elif any(k.startswith(("src", "ssrc")) and v == 253 for k, v in i.f.items()): rd.add(("scc",))
  return rd, wr


def _split(m: Any, pc: int, lp: Loop, b: B.Block) -> Split | None:
  """The carried part: the instructions reading a failed prediction's VGPRs or what such an instruction wrote (to a
  fixpoint over the back edge); it must be VALU work only, read what the rest wrote only where the rest's last write
  of it in the iteration came first (that value is the batch's end of iteration), and read the rest's writes from
  the iteration before nowhere. None where it does not apply."""
  body, br = b.insts[:-1], b.insts[-1]
  sets = [_rw(m, i) for i in body]
  if any(x is None for x in sets) or any(i.fmt == "SOPP" for i in body): return None
  rw: list[tuple[set[tuple], set[tuple]]] = sets   # type: ignore[assignment]
  T = {("v", r) for r in lp.badv}
  tainted = [False] * len(body)
  for _ in range(len(body) + 2):
    changed = False
    for k, (rd, wr) in enumerate(rw):
      if not tainted[k] and rd & T: tainted[k] = changed = True
      if tainted[k]: T |= wr
      else: T -= wr
    if not changed: break
  C = [k for k in range(len(body)) if tainted[k]]
  if not C or tainted[body.index(lp.cmp)]: return None
  if any(body[k].fmt not in VALU_FMTS or ("scc",) in rw[k][0] | rw[k][1] for k in C): return None
  def writers(x: tuple) -> list[int]: return [j for j in range(len(body)) if x in rw[j][1]]
  inject, carried_c = set(), set()
  for k in C:
    for x in rw[k][0]:
      ws = writers(x)
      before = [j for j in ws if j < k]
      if before:
        if tainted[before[-1]]: continue   # the carried part's own value of this iteration
        if any(not tainted[j] for j in ws if j > k): return None   # the rest writes it again later in the iteration
        fw = [j for j in ws if not tainted[j]]
        if any(tainted[j] and j < fw[-1] for j in ws): return None   # the carried part wrote it before the rest's last write
        inject.add(x)
      elif ws:
        if not tainted[ws[-1]]: return None   # the rest's value from the iteration before
        carried_c.add(x)
  if inject & carried_c: return None
  restore = {x for x in set().union(*(rw[j][1] for j in C)) if (ws := writers(x)) and not tainted[ws[-1]]}
  cpcs = frozenset(body[k].pc for k in C)
  fb = B.build(m, pc, skip=cpcs)
  if fb is None or len(fb.insts) != len(body) - len(C) + 1 or fb.insts[-1] is not br: return None
  if (fl := analyze(m, pc, fb, cpcs)) is None or fl.cmp is not lp.cmp or not set(fl.vcarried) <= set(lp.vcarried): return None
  cb = B.build(m, body[C[0]].pc, skip=frozenset(i.pc for i in body) - cpcs, stop=br.pc)
  if cb is None or len(cb.insts) != len(C) or cb.opaque: return None
  # the inner runs write no lane mask to its SGPR: only where no run reads a mask SGPR the runs write
  ci = None if (cb.lreads | cb.sreads) & cb.maskever else B.build(m, body[C[0]].pc, skip=frozenset(i.pc for i in body) - cpcs, stop=br.pc, inner=True)
  if ci is not None and [i.pc for i in ci.insts] != [i.pc for i in cb.insts]: ci = None
  chain = next(iter(carried_c))[1] if len(carried_c) == 1 and next(iter(carried_c))[0] == "v" else None
  return Split(fl, cb, ci, tuple(sorted(inject)), tuple(sorted(restore)), chain)


# guesses of a chain's values (float32 folds over the VGPRs injected in an iteration, then over the iterations): a
# guess is only used where one run of the carried part over every middle iteration gives it back bit for bit
SCANS = (np.maximum, np.minimum)


def _scan(m: Any, sp: Split, mx: Any, n: int, lanes: np.ndarray) -> bool:
  """A Split's middle iterations 1..n-2 at once, after iteration 0 ran on m: the chain VGPR's value at the start of
  iterations 1..n-1 guessed by a fold (SCANS), then the carried part run once over iterations 1..n-2 (a copy of the
  batch's rows of those iterations, the chain set to the guesses) must give the guesses of iterations 2..n-1 back in
  every enabled lane: then each guess is the value stepping computes (by induction from iteration 1's, which is m's),
  and m's chain is set to iteration n-1's (the last iteration runs on m as before and writes every other register the
  carried part writes: the chain is the only one it reads from the iteration before). False: m unchanged, the next
  guess is tried at the next dispatch."""
  r, W = sp.chain, m.W
  assert r is not None
  xs = [x for kind, x in sp.inject if kind == "v"]
  if not xs or not sp.cblock.lanewise or sp.cinner is None: return False
  op = SCANS[sp.scan]
  R = slice(W, (n - 1) * W)
  vr = mx.v[R]   # [rows, nv, 32]: the batched part's registers in iterations 1..n-2
  y = op.reduce(np.stack([vr[:, x, :] for x in xs]).view(np.float32), axis=0).reshape(n - 2, W, 32)
  g = op.accumulate(np.concatenate([m.v[:, r, :].view(np.float32)[None], y]), axis=0).view(U32)   # chain at 1..n-1
  my = copy.copy(mx)
  my.v = np.ascontiguousarray(vr.transpose(1, 0, 2)).transpose(1, 0, 2)   # a copy (the carried part writes injected VGPRs)
  my.v[:, r, :] = g[:-1].reshape(-1, 32)
  my.s, my.scc, my.pc = mx.s[R].copy(), mx.scc[R].copy(), mx.pc[R].copy()
  my.done, my.bar, my.wg = mx.done[R].copy(), mx.bar[R].copy(), mx.wg[R]
  my.W, my.vinit, my.bound, my.unmasked = (n - 2) * W, None, {}, True
  idx = np.arange(my.W)
  my._idx, my._ix, my._lanes = idx, slice(None), None
  try: ok = sp.cinner.fn(my, idx) and bool(((my.v[:, r, :].reshape(n - 2, W, 32) == g[1:]) | ~lanes).all())
  except Exception: ok = False
  if not ok:
    sp.scan += 1
    return False
  m.v[:, r, :] = np.where(lanes, g[-1], m.v[:, r, :])
  return True


def _carried(m: Any, lp: Loop, prev: tuple[np.ndarray, np.ndarray]) -> bool:
  """A Split loop: the batched part as one batch (it sets the machine to its last iteration), then the carried part
  once per iteration with the registers it reads from the batched part set from that iteration (enabled lanes), then
  the registers the batched part writes last back. Anything failing undoes it all (the blocks run the loop).
  Checked mode: definedness needs no undo beyond VGPRs (vinit): the batch's copy keeps none (an undefined load faults
  there and nothing of the machine changes), the carried block is VALU only and refuses undefined reads, and blocks run
  only while no SGPR bit or SCC is undefined (the batch writes no sundef/sccundef; test_undefined_loads: split loops)."""
  sp = lp.split
  assert sp is not None
  fl, W = sp.floop, m.W
  if fl.failed or m.v.nbytes > SNAP_BYTES: return False
  snap = (m.s.copy(), m.v.copy(), None if m.vinit is None else m.vinit.copy(), m.scc.copy(), m.pc.copy(),
          {k: list(v) for k, v in m.touched.items()}, m.steps, m.batches)
  out: dict = {}
  if not _batch(m, fl, (prev[0], prev[1][:, [lp.vcarried.index(r) for r in fl.vcarried], :]), out): return False
  mx, n = out["mx"], out["n"]
  lanes = (m.s[:, 126][:, None] & LANE_BITS) != 0
  every = bool(lanes.all())
  fin = {x: (m.v[:, x[1], :] if x[0] == "v" else m.s[:, x[1]]).copy() for x in sp.restore}
  pc, scc, idx = m.pc.copy(), m.scc.copy(), m._idx
  bound, m.bound = m.bound, {}
  # a lane-wise carried part computes every lane (Machine.unmasked: whole-register writes, no masked copies): the
  # disabled lanes of the registers it and the injection write are put back below as they were (snap; the batch keeps
  # disabled lanes as they were too)
  unmasked = UNMASKED_CARRIED and not every and sp.cblock.lanewise
  m.unmasked = unmasked
  ok = True
  try:
    with np.errstate(all="ignore"):
      t = 0
      while t < n:
        if t == 1 and n >= 4 and sp.chain is not None and sp.scan < len(SCANS) and _scan(m, sp, mx, n, lanes): t = n - 1
        rows = slice(t * W, (t + 1) * W)
        for kind, r in sp.inject:
          if kind == "s": m.s[:, r] = mx.s[rows, r]
          else: m.v[:, r, :] = mx.v[rows, r, :] if every or unmasked else np.where(lanes, mx.v[rows, r, :], m.v[:, r, :])
        # the first and the last iteration as the whole block (the entry test, the masks and definedness written)
        if not (sp.cblock if t == 0 or t == n - 1 or sp.cinner is None else sp.cinner).fn(m, idx):
          ok = False
          break
        t += 1
  except Exception: ok = False   # a fault: the blocks rerun the loop and name it
  finally: m.bound, m.unmasked = bound, False
  if ok and unmasked:
    for r in sorted({r for r in sp.cblock.vwritten if r < m.nv} | {r for kind, r in sp.inject if kind == "v"}):
      m.v[:, r, :] = np.where(lanes, m.v[:, r, :], snap[1][:, r, :])
  if not ok:
    m.s[:], m.v[:], m.scc[:], m.pc[:] = snap[0], snap[1], snap[3], snap[4]
    if m.vinit is not None: m.vinit[:] = snap[2]
    m.touched.clear()
    m.touched.update(snap[5])
    m.steps, m.batches = snap[6], snap[7]
    m._lanes = None
    return False
  for (kind, r), x in fin.items():
    if kind == "v": m.v[:, r, :] = x
    else: m.s[:, r] = x
  m.pc[:], m.scc[:] = pc, scc
  m.steps += n * len(sp.cblock.insts)
  m._lanes = None
  return True
