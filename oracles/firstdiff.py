"""Where a device's run of a linear program first differs from PYTHON's: the first UOp whose value differs.

A probe program is the program with one more STORE after each candidate UOp (an elementwise op, a cast or a load of
one scalar), writing its value to a probe buffer of its dtype at a slot of its own for every thread and loop
iteration (offset + the flat index of the SPECIALs and the enclosing RANGEs). The device runs it as it runs any
program and PYTHON runs the same probe program; the first candidate, in program order, whose slots differ (same_bits:
any two NaNs equal) is the first difference. Only run for a finding that is kept, so its cost does not matter much;
candidates are split into probe programs of at most PROBE_SLOTS slots, checked in order until one shows a difference.
A candidate that cannot be probed (a loop bound that is not a constant; an index term the program already holds in a
scope the store cannot see) is left out: the answer is then the first difference among the others."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from oracles.astjson import ast_from_json
from oracles.case import Case, opt_from_json
from oracles.check import DeviceProg, Prog, lower, make_inputs, run_python
from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.kernel import Kernel
from refgrad.opt import apply_opts
from refgrad.program import ProgramSpec
from refgrad.renderer.serialize import encode_dtype
from refgrad.target import TARGETS
from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, Ops, UOp

PROBE_SLOTS = 1 << 20   # probe buffer elements per probe program
FILL = 0x5A             # bytes a probe buffer starts with


@dataclass
class Probe:
  uop_index: int   # the candidate's position in the original program
  op: str
  dtype: str
  buf: int         # which buffer of the probe program holds its slots (its DEFINE_GLOBAL arg)
  offset: int
  count: int


def _candidate(u: UOp) -> bool:
  return (u.op in GroupOp.Elementwise or u.op is Ops.LOAD) and not isinstance(u.dtype, PtrDType) and u.dtype.count == 1 and u.dtype != dtypes.void


def probe_programs(uops: list[UOp], slots: int = PROBE_SLOTS) -> list[tuple[list[UOp], list[Probe]]]:
  """The probe programs of a linear program (each: its UOps and its probes, in program order)."""
  nbufs = 1 + max((u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL), default=-1)
  stacks: list[tuple[UOp, ...]] = []   # the open RANGE/IF blocks after each position
  stack: list[UOp] = []
  for u in uops:
    if u.op in (Ops.ENDRANGE, Ops.ENDIF) and stack: stack.pop()
    if u.op in GroupOp.Block: stack.append(u)
    stacks.append(tuple(stack))
  specials = [u for u in uops if u.op is Ops.SPECIAL]
  cands: list[tuple[int, list[tuple[UOp, int]], int]] = []   # (position, [(index UOp, extent)], slots)
  for i, u in enumerate(uops):
    if not _candidate(u): continue
    dims = [(s, s.arg[1]) for s in specials] + [(r, r.src[0].arg if r.src[0].op is Ops.CONST else None) for r in stacks[i] if r.op is Ops.RANGE]
    if all(type(e) is int and e > 0 for _, e in dims): cands.append((i, dims, math.prod(e for _, e in dims)))
  out, chunk, used = [], [], 0
  for c in cands:
    if c[2] > slots: continue
    if used + c[2] > slots and chunk:
      out.append(_build(uops, stacks, chunk, nbufs))
      chunk, used = [], 0
    chunk.append(c)
    used += c[2]
  if chunk: out.append(_build(uops, stacks, chunk, nbufs))
  return [p for p in out if p[1]]


class _Builder:
  """Places the UOps of probe stores: a UOp the program already has is used only where it is visible (defined earlier,
  in an enclosing scope); constants go first, in the outermost scope; the rest right after the probed UOp."""
  def __init__(self, uops: list[UOp]):
    self.original = set(uops)
    self.placed: dict[UOp, tuple[UOp, ...]] = {}   # UOp -> the open blocks where it is defined
    self.front: list[UOp] = []

  def use(self, x: UOp, scope: tuple[UOp, ...], new: list[UOp]) -> UOp | None:
    if x in self.placed: return x if self.placed[x] == scope[:len(self.placed[x])] else None
    if x in self.original: return None   # it comes later in the program: a second copy is not allowed
    if x.op is Ops.CONST or x.op is Ops.DEFINE_GLOBAL: self.front.append(x)
    else: new.append(x)
    self.placed[x] = () if x.op in (Ops.CONST, Ops.DEFINE_GLOBAL) else scope
    return x

  def index(self, offset: int, dims: list[tuple[UOp, int]], n: int, scope: tuple[UOp, ...], new: list[UOp]) -> UOp | None:
    """offset + the flat index of dims (row major), or None where some term cannot be placed."""
    idx = self.use(UOp.const(dtypes.int, offset), scope, new)
    for d, e in dims:
      n //= e
      if idx is None or self.use(d, scope, new) is None: return None
      term: UOp | None = d
      if n != 1:
        if self.use(UOp.const(dtypes.int, n), scope, new) is None: return None
        term = self.use(UOp(Ops.MUL, dtypes.int, (d, UOp.const(dtypes.int, n))), scope, new)
      if term is None: return None
      idx = self.use(UOp(Ops.ADD, dtypes.int, (idx, term)), scope, new)
    return idx


def _build(uops: list[UOp], stacks: list[tuple[UOp, ...]], chunk: list[tuple[int, list[tuple[UOp, int]], int]], nbufs: int) -> tuple[list[UOp], list[Probe]]:
  sizes: dict[DType, int] = {}
  for i, _, n in chunk: sizes[uops[i].dtype] = sizes.get(uops[i].dtype, 0) + n
  b = _Builder(uops)
  bufs = {dt: UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), nbufs + k) for k, (dt, n) in enumerate(sizes.items())}
  for g in bufs.values(): b.use(g, (), [])
  offsets = dict.fromkeys(sizes, 0)
  chunk_at = {i: (dims, n) for i, dims, n in chunk}
  after: dict[int, list[UOp]] = {}
  probes: list[Probe] = []
  for i, u in enumerate(uops):
    b.placed.setdefault(u, stacks[i] if u.op not in GroupOp.Block else stacks[i][:-1])
    if u.op in GroupOp.Block: b.placed[u] = stacks[i]   # a RANGE is seen inside its own loop
    if i not in chunk_at: continue
    dims, n = chunk_at[i]
    new: list[UOp] = []
    if (idx := b.index(offsets[u.dtype], dims, n, stacks[i], new)) is None:
      for x in new: b.placed.pop(x, None)
      continue
    new.append(UOp(Ops.STORE, dtypes.void, (bufs[u.dtype], idx, u)))
    after[i] = new
    probes.append(Probe(i, u.op.name, u.dtype.name, bufs[u.dtype].arg, offsets[u.dtype], n))
    offsets[u.dtype] += n
  body: list[UOp] = []
  for i, u in enumerate(uops): body += [u, *after.get(i, [])]
  return list(dict.fromkeys(b.front)) + body, probes


def probe_buffers(prog: list[UOp], nbufs: int) -> list[np.ndarray]:
  """The probe buffers of a probe program (DEFINE_GLOBAL args nbufs..), filled with FILL bytes."""
  out = []
  for u in sorted((u for u in prog if u.op is Ops.DEFINE_GLOBAL and u.arg >= nbufs), key=lambda u: u.arg):
    d = u.dtype.base
    out.append(np.zeros(u.dtype.size, np.bool_) if d == dtypes.bool else np.full(u.dtype.size * d.itemsize, FILL, np.uint8).view(d.np))
  return out


def first_difference(probes: list[Probe], want: list[np.ndarray], got: list[np.ndarray], dts: dict[int, DType]) -> dict[str, Any] | None:
  """The first probe (program order) whose slots differ: {"op", "dtype", "uop_index", "element"}, or None."""
  for p in sorted(probes, key=lambda p: p.uop_index):
    d = dts[p.buf]
    a, b = want[p.buf][p.offset:p.offset + p.count], got[p.buf][p.offset:p.offset + p.count]
    same = np.asarray(semantics.same_bits(a, b, d)).reshape(-1)
    if not same.all(): return {"op": p.op, "dtype": p.dtype, "uop_index": p.uop_index, "element": int(np.flatnonzero(~same)[0])}
  return None


def reference_probes(case: Case, simple: bool = False) -> list[tuple[DeviceProg, list[Probe]]]:
  """The probe programs of a case's program (its kernel with its Opts, lowered as the fuzzer lowers it), each run on
  PYTHON: (the program with PYTHON's buffers after the run as its expected values, its probes). `simple`: the case's
  inputs were regenerated in "simple" mode (its Result's `regenerated`)."""
  ast = ast_from_json(case.ast)
  k = apply_opts(Kernel(ast, case.kernel, TARGETS[case.target]), [opt_from_json(o) for o in case.opts])
  p = lower(k, "probe")
  data = make_inputs(ast, {"seed": case.inputs["seed"], "mode": "simple"} if simple else case.inputs)
  out = []
  for uops, probes in probe_programs(p.uops):
    name = f"probe{len(out)}"
    bufs = [*data, *probe_buffers(uops, len(data))]
    want = run_python(Prog(name, uops, ProgramSpec.from_uops(name, uops, "PYTHON")), bufs)
    dts = [encode_dtype(u.dtype.base) for u in sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)]
    out.append((DeviceProg(name, uops, case.target, dts, bufs, want, {}, case.index, case.to_json(), "probe", False), probes))
  return out


def locate(probes: list[Probe], prog: DeviceProg, outcome: dict[str, Any]) -> dict[str, Any] | None:
  """The first difference a device's outcome of a probe program shows (None: none, or the device failed to run it)."""
  if outcome.get("status") != "out": return None
  return first_difference(probes, prog.expected, outcome["out"], dict(enumerate(prog.dtypes())))
