"""cp.async (PTX ISA 9.0 §9.7.9.25): asynchronous copies from global to shared memory, what nvcc emits for
__pipeline_memcpy_async / cuda::memcpy_async on sm_80.

`cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size | , ignore-src}` queues a copy for the executing thread;
`cp.async.commit_group` closes the thread's current group; `cp.async.wait_group N` completes every committed group but
the N most recent; `cp.async.wait_all` completes all of them (the open group included). A copy is performed when it is
completed (one of the schedules the ISA allows): its source is read then, src-size bytes (the rest of cp-size zero), and
its destination written then by that thread, so the race checker sees the write at the wait. In checked mode the
destination bytes are undefined from the issue until then: a thread reading them before waiting reads undefined values."""
from __future__ import annotations

import numpy as np

from emulators.nv.ptx.execute import Launch, PTXFault
from emulators.nv.ptx.mbarrier import arrive, object_address
from emulators.nv.ptx.parse import Instr


class Pending:
  """The copies a launch has queued and not completed: one row per issue (lanes, dst, src, sizes, group of each lane)."""
  def __init__(self, n: int):
    self.group = np.zeros(n, np.int64)   # per lane: the number of its open (uncommitted) group
    self.rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray, Instr]] = []


def _pending(L: Launch) -> Pending:
  if L.cp_async is None: L.cp_async = Pending(L.n)
  return L.cp_async


def _issue(L: Launch, ins: Instr) -> None:
  if not (ins.has("shared") and ins.has("global")) or ins.has("bulk") or ins.has("mbarrier"):
    raise PTXFault("compute", f"cp.{'.'.join(ins.mods)} is not supported (only cp.async.{{ca,cg}}.shared.global)", ins)
  dst, src = L.address(ins.args[0]), L.address(ins.args[1])
  size = ins.args[2]
  if size.kind != "imm" or size.value not in (4, 8, 16) or (ins.has("cg") and size.value != 16):
    raise PTXFault("compute", f"cp.async copy size {size.value} is not 4, 8 or 16 (16 for .cg)", ins)
  cp = int(size.value)  # type: ignore[arg-type]
  srcsize = np.full(L.sel.size, cp, np.int64)
  if len(ins.args) > 3:
    x = ins.args[3]
    if x.kind == "reg" and L.e.regs.get(str(x.value)) == "pred": srcsize = np.where(L.get(x, "pred"), 0, cp)   # ignore-src
    elif x.kind in ("reg", "imm"): srcsize = L.get(x, "u32").astype(np.int64)
    if (srcsize > cp).any(): raise PTXFault("compute", f"cp.async src-size {int(srcsize.max())} above the copy size {cp} (undefined)", ins)
  P = _pending(L)
  P.rows.append((L.sel.copy(), dst, src, cp, srcsize, P.group[L.sel].copy(), ins))
  if L.shared_def is not None:   # undefined until completed
    ix = (L.cta[L.sel] * L.shared.shape[1] + dst.astype(np.int64))[:, None] + np.arange(cp)
    if ((ix < 0) | (dst.astype(np.int64)[:, None] + np.arange(cp) >= L.shared_bytes)).any():
      L.load("shared", dst, cp)   # the ordinary bounds report
    L.shared_def.reshape(-1)[ix] = False


def _complete(L: Launch, keep: int | None) -> None:
  """Complete the selected lanes' copies of groups older than their `keep` most recent committed ones (None: all)."""
  P = _pending(L)
  if not P.rows: return
  sel, ins = L.sel, L.ins
  act = np.zeros(L.n, np.bool_)
  act[sel] = True
  rest = []
  try:
    for lanes, dst, src, cp, srcsize, grp, issued in P.rows:
      now = act[lanes] & (True if keep is None else grp < P.group[lanes] - keep)
      if now.any():
        L.sel, L.ins = lanes[now], issued
        raw, d = L.load("global", src[now], cp)
        raw = np.where(np.arange(cp)[None, :] < srcsize[now][:, None], raw, 0).astype(np.uint8)
        L.ins = ins
        L.store("shared", dst[now], raw, d)
      if (~now).any(): rest.append((lanes[~now], dst[~now], src[~now], cp, srcsize[~now], grp[~now], issued))
  finally: L.sel, L.ins = sel, ins
  P.rows = rest


def cp(L: Launch, ins: Instr) -> None:
  if not ins.has("async"): raise PTXFault("compute", f"cp.{'.'.join(ins.mods)} is not supported", ins)
  if ins.has("mbarrier"):   # cp.async.mbarrier.arrive{.noinc}: the object's arrive follows the thread's copies so far
    _complete(L, None)      # (completed now: a schedule the ISA allows); without .noinc the pending count was raised for it
    if ins.has("noinc"):
      L.atomic = True
      try: arrive(L, ins, object_address(L, ins, ins.args[0]), np.ones(L.sel.size, np.uint32), False, True)
      finally: L.atomic = False
    else: object_address(L, ins, ins.args[0])
  elif ins.has("commit_group"):
    _pending(L).group[L.sel] += 1
  elif ins.has("wait_group"):
    n = ins.args[0] if ins.args else None
    if n is None or n.kind != "imm" or n.value < 0: raise PTXFault("compute", "cp.async.wait_group needs a constant group count", ins)
    _complete(L, int(n.value))  # type: ignore[arg-type]
  elif ins.has("wait_all"): _complete(L, None)
  else: _issue(L, ins)
