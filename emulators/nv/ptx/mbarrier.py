"""mbarrier (PTX ISA 9.0 §9.7.13.15), the split-phase barrier objects in shared memory that sm_80 code uses through
cuda::barrier, cuda::pipeline and cuda::memcpy_async: init, inval, arrive (.noComplete), arrive_drop, test_wait /
try_wait (.parity) and pending_count, and cp.async.mbarrier.arrive (emulators/nv/ptx/cpasync.py).

The 64-bit object is opaque to programs; here it holds the pending arrivals of the current phase (bits 0-20), the
expected arrivals of every phase (bits 32-52) and the current phase's parity (bit 63). Zero is not a valid barrier
(init takes counts of 1 to 2**20 - 1), so an invalidated or never-initialized object is reported. The state an arrive
returns holds the phase parity it arrived in (bit 63) and the pending count it left (bits 0-20). Arrivals of one
instruction apply in lane order; a phase completes when its pending count reaches zero, and the next one then expects
the expected count again."""
from __future__ import annotations

import numpy as np

from emulators.nv.ptx.execute import SHARED_WINDOW, Launch, PTXFault
from emulators.nv.ptx.parse import Instr, Operand

MAX_COUNT = (1 << 20) - 1
_PEND, _EXP, _PHASE = np.uint64(0x1FFFFF), np.uint64(0x1FFFFF << 32), np.uint64(1 << 63)


def object_address(L: Launch, ins: Instr, o: Operand) -> np.ndarray:
  """The objects' shared-memory offsets (a generic address must point into the shared window)."""
  a = L.address(o)
  if L.space_of(ins) == "shared": return a
  sh = L._generic_split(a)["shared"]
  if not sh.all():
    raise PTXFault("compute", f"mbarrier object outside shared memory (generic address 0x{int(a[np.flatnonzero(~sh)[0]]):x}) "
                   f"of {L.thread(int(np.flatnonzero(~sh)[0]))}", ins)
  return a - np.uint64(SHARED_WINDOW)


def _words(L: Launch, ins: Instr, addr: np.ndarray) -> np.ndarray:
  """The selected lanes' objects, each a valid (initialized) barrier; else a fault naming the offset and thread."""
  if (addr & np.uint64(7)).any():
    i = int(np.flatnonzero(addr & np.uint64(7))[0])
    raise PTXFault("compute", f"mbarrier object at shared offset {int(addr[i])} is not 8-byte aligned ({L.thread(i)})", ins)
  raw, d = L.load("shared", addr, 8)
  w = np.ascontiguousarray(raw).view(np.uint64).reshape(-1)
  bad = (w & _EXP) == 0 if d is None else ~d | ((w & _EXP) == 0)
  if bad.any():
    i = int(np.flatnonzero(bad)[0])
    raise PTXFault("compute", f"mbarrier at shared offset {int(addr[i])} used by {L.thread(i)} is not initialized (mbarrier.init) or was invalidated", ins)
  return w


def _store(L: Launch, addr: np.ndarray, w: np.ndarray) -> None:
  L.store("shared", addr, np.ascontiguousarray(w.astype(np.uint64)).view(np.uint8).reshape(-1, 8), None)


def _completed(L: Launch, fin: np.ndarray, lanes: np.ndarray) -> None:
  """Phases completed by lanes (indices into L.sel) where fin: for the shared-memory race checker a barrier of their
  CTAs, as bar.sync is (what the arrivals did before is ordered before what a wait that sees the phase does after; a
  thread's access after its arrive but before the completion is not told apart: a race there goes unreported)."""
  for cta in np.unique(L.cta[L.sel[lanes[fin]]]): L.race_reset(int(cta))


def arrive(L: Launch, ins: Instr, addr: np.ndarray, count: np.ndarray, drop: bool, complete: bool) -> np.ndarray:
  """Arrivals of the selected lanes (each `count`, in lane order) on the objects at addr; the state each gets."""
  keys = L.cta[L.sel].astype(np.int64) * max(L.shared_bytes, 1) + addr.astype(np.int64)
  order = np.argsort(keys, kind="stable")
  ks = keys[order]
  first = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])   # the first lane (in sorted order) of each object
  group = np.cumsum(np.r_[True, ks[1:] != ks[:-1]]) - 1
  sel = L.sel
  L.sel = sel[order[first]]
  try: w = _words(L, ins, addr[order[first]])
  finally: L.sel = sel
  p, e, ph = (w & _PEND).astype(np.int64), ((w & _EXP) >> np.uint64(32)).astype(np.int64), (w >> np.uint64(63)).astype(np.int64)
  c = count[order].astype(np.int64)
  if drop:   # the expected count of later phases falls with each arrival: applied one arrival per object at a time
    return _arrive_drop(L, ins, addr, order, first, group, p, e, ph, c, complete)
  before = np.cumsum(c) - c
  before -= before[first][group]   # arrivals of the same object ahead of each lane
  gp, ge = p[group], e[group]
  def done(t: np.ndarray) -> np.ndarray:   # phases completed after t arrivals
    return np.where(t < gp, 0, 1 + (t - gp) // ge)
  t = before + c
  if not complete and (done(t) > done(before)).any():
    i = order[int(np.flatnonzero(done(t) > done(before))[0])]
    raise PTXFault("compute", f"mbarrier.arrive.noComplete completes the phase (undefined) by {L.thread(int(i))}", ins)
  left = np.where(t < gp, gp - t, (ge - (t - gp) % ge) % ge)   # 0: this arrival completed its phase
  state = (((ph[group] ^ (done(before) & 1)).astype(np.uint64) << np.uint64(63)) | left.astype(np.uint64))
  total = np.add.reduceat(c, first)
  new = np.where(total < p, p - total, e - (total - p) % e)
  nph = ph ^ (np.where(total < p, 0, 1 + (total - p) // e) & 1)
  _completed(L, (total >= p), order[first])
  return _commit(L, addr, order, first, nph, e, new, state)


def _arrive_drop(L: Launch, ins: Instr, addr: np.ndarray, order: np.ndarray, first: np.ndarray, group: np.ndarray,
                 p: np.ndarray, e: np.ndarray, ph: np.ndarray, c: np.ndarray, complete: bool) -> np.ndarray:
  rank = np.arange(order.size) - first[group]
  state = np.empty(order.size, np.uint64)
  for r in range(int(rank.max()) + 1):   # round r: the r-th arrival on every object
    m = rank == r
    g, cm = group[m], c[m]
    e[g] -= cm
    if (e[g] < 0).any(): raise PTXFault("compute", f"mbarrier.arrive_drop below zero expected arrivals by {L.thread(int(order[np.flatnonzero(m)[0]]))}", ins)
    left = p[g] - cm
    fin = left <= 0
    if not complete and fin.any(): raise PTXFault("compute", f"mbarrier.arrive_drop.noComplete completes the phase (undefined) by {L.thread(int(order[np.flatnonzero(m)[0]]))}", ins)
    state[m] = (ph[g].astype(np.uint64) << np.uint64(63)) | np.maximum(left, 0).astype(np.uint64)
    ph[g] ^= fin.astype(np.int64)
    p[g] = np.where(fin, e[g], left)
    _completed(L, fin, order[m])
  return _commit(L, addr, order, first, ph, e, p, state)


def _commit(L: Launch, addr: np.ndarray, order: np.ndarray, first: np.ndarray, ph: np.ndarray, e: np.ndarray, p: np.ndarray,
            state: np.ndarray) -> np.ndarray:
  """Store each object's phase, expected and pending counts (through its first arriving lane); the states in lane order."""
  sel = L.sel
  L.sel = sel[order[first]]
  try: _store(L, addr[order[first]], (ph.astype(np.uint64) << np.uint64(63)) | (e.astype(np.uint64) << np.uint64(32)) | p.astype(np.uint64))
  finally: L.sel = sel
  out = np.empty(sel.size, np.uint64)
  out[order] = state
  return out


def mbarrier(L: Launch, ins: Instr) -> None:
  kind = next((m for m in ins.mods if m in ("init", "inval", "arrive", "arrive_drop", "test_wait", "try_wait", "pending_count")), None)
  if kind is None or ins.has("expect_tx") or ins.has("complete_tx") or any(m.startswith("shared::cluster") for m in ins.mods):
    raise PTXFault("compute", f"mbarrier.{'.'.join(ins.mods)} is not supported (sm_80's mbarrier: init inval arrive arrive_drop test_wait try_wait pending_count)", ins)
  if kind == "pending_count":
    return L.put(ins.args[0], "u32", (L.get(ins.args[1], "b64") & _PEND).astype(np.uint32))
  if kind in ("init", "inval"):
    addr = object_address(L, ins, ins.args[0])
    if kind == "inval": return _store(L, addr, np.zeros(addr.size, np.uint64))
    n = L.get(ins.args[1], "u32").astype(np.uint64)
    if ((n < 1) | (n > MAX_COUNT)).any():
      i = int(np.flatnonzero((n < 1) | (n > MAX_COUNT))[0])
      raise PTXFault("compute", f"mbarrier.init count {int(n[i])} outside 1..{MAX_COUNT} by {L.thread(i)}", ins)
    return _store(L, addr, (n << np.uint64(32)) | n)
  addr = object_address(L, ins, ins.args[1])
  L.atomic = True   # (barrier operations are not data races)
  try:
    if kind in ("arrive", "arrive_drop"):
      count = L.get(ins.args[2], "u32") if len(ins.args) > 2 else np.ones(L.sel.size, np.uint32)
      state = arrive(L, ins, addr, count, kind == "arrive_drop", not ins.has("noComplete"))
      return L.put(ins.args[0], "b64", state)
    w = _words(L, ins, addr)
    cur = w >> np.uint64(63)
    want = L.get(ins.args[2], "u32").astype(np.uint64) & np.uint64(1) if ins.has("parity") else L.get(ins.args[2], "b64") >> np.uint64(63)
    L.put(ins.args[0], "pred", cur != want)   # the phase waited on has completed once the current phase differs
  finally: L.atomic = False
