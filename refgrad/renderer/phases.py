"""The phase plan of a program with BARRIERs or WMMAs, shared by the renderers that run a workgroup on one CPU thread
(the C renderer, refgrad/renderer/cstyle.py `_CProgram.phased`, and the LLVM host module, refgrad/renderer/llvmir_phases.py).

Inside the workgroup loops, each BARRIER (or WMMA, a warp collective) ends a phase, and each phase is its own loop over
the work-items, so every work-item finishes one phase before any starts the next. A RANGE or IF with a barrier inside
("hoisted") runs in the workgroup scope around its phases: its end or condition must be provably uniform (built by ALU
ops from constants, variables, workgroup ids and hoisted loop indices). Uniform values at the top level are computed in
the workgroup scope. A per-work-item value (accumulators included) used in another phase than its own is "kept": the
backend stores it per work-item, indexed by the flat work-item id.
"""
from __future__ import annotations

from refgrad.target import check_wmma
from refgrad.uop.ops import GroupOp, Ops, UOp


def plan(name: str, uops: list[UOp], lidx_dims: set[str], backend: str) -> tuple[set[UOp], set[UOp], set[UOp]]:
  """(hoisted blocks, uniform values, kept values) of a program with barriers or WMMAs. `lidx_dims` are the dimensions
  ("0", "1", "2") that have work-items; `backend` names the renderer in errors. ValueError (from check_wmma) for a WMMA
  on partial warps, and for a barrier inside a block whose condition or end may differ between the work-items of a
  workgroup."""
  check_wmma(uops, None)   # whole warps in every workgroup
  cut = (Ops.BARRIER, Ops.WMMA)
  hoisted: set[UOp] = set()
  open_: list[UOp] = []
  barrier_in: dict[UOp, int] = {}     # hoisted block -> position of a barrier (or WMMA) inside it
  for i, u in enumerate(uops):
    if u.op in cut:
      for b in open_: hoisted.add(b); barrier_in.setdefault(b, i)
    if u.op in (Ops.ENDRANGE, Ops.ENDIF): open_.pop()
    if u.op in GroupOp.Block: open_.append(u)
  pos = {u: i for i, u in enumerate(uops)}
  # the fragments a WMMA reads are gathered from per-work-item storage, so they are never workgroup-scope scalars
  frags = {s.src[0] if s.op is Ops.ASSIGN else s for u in uops if u.op is Ops.WMMA for s in u.src}
  uniform: set[UOp] = set()
  phase: dict[UOp, int] = {}
  ph = depth = 0   # phase counter, open per-work-item blocks
  for i, u in enumerate(uops):
    op = u.op
    if op in (Ops.CONST, Ops.DEFINE_VAR): uniform.add(u)
    elif op is Ops.SPECIAL:
      # workgroup ids are loops around the whole body; idxD is one too when dimension D has no work-items
      if u.arg[0].startswith("gidx") or (u.arg[0].startswith("idx") and u.arg[0][-1] not in lidx_dims): uniform.add(u)
    elif op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL): pass
    elif op is Ops.BARRIER: ph += 1
    elif op is Ops.WMMA: ph += 1; phase[u] = ph   # its value is made between the phases, for the next one
    elif u in hoisted:
      if u.src[0] not in uniform:
        what = "a non-uniform IF" if op is Ops.IF else "a RANGE whose end is not provably uniform"
        inside = uops[barrier_in[u]]
        raise ValueError(f"{name}: uop {i} ({op.name}): {'barrier' if inside.op is Ops.BARRIER else f'WMMA {inside.arg}'} (uop {barrier_in[u]}) "
                         f"inside {what}: uop {pos[u.src[0]]} ({u.src[0].op.name}) may differ between the work-items of a workgroup, and "
                         f"{backend} runs a barrier's phases in the workgroup scope (a barrier reached by only part of a "
                         "workgroup is undefined)")
      ph += 1
      if op is Ops.RANGE: uniform.add(u)
    elif op in (Ops.ENDRANGE, Ops.ENDIF) and u.src[0] in hoisted: ph += 1
    elif depth == 0 and (op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST, Ops.VECTORIZE, Ops.GEP)) and all(s in uniform for s in u.src) \
        and u not in frags:
      uniform.add(u)
    else:
      if op in GroupOp.Block: depth += 1
      elif op in (Ops.ENDRANGE, Ops.ENDIF): depth -= 1
      phase[u] = ph
  # values used in another phase than their own; an ASSIGN's value is its accumulator's variable. A BARRIER source of a
  # LOAD only orders it (it has no phase). A WMMA's fragments and result live in storage its helper reads and writes.
  kept: set[UOp] = set()
  if lidx_dims:
    for u, p in phase.items():
      for s in u.src[:1] if u.op is Ops.DEFINE_ACC else u.src:
        while s.op is Ops.ASSIGN: s = s.src[0]
        if s in phase and phase[s] != p: kept.add(s)
    kept |= frags | {u for u in uops if u.op is Ops.WMMA}
  return hoisted, uniform, kept


__all__ = ["plan"]
