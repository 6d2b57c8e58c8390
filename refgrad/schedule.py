"""The scheduler: a tensor graph (refgrad/lazy.py) -> kernels and copies, and running them.

Which nodes get their own buffer (the rest are fused into the kernel that reads them):
  - what is asked for (the roots), CONTIGUOUS, and both sides of a COPY;
  - a REDUCE_AXIS read through an EXPAND or from inside another reduction (fusing it would
    recompute the whole reduction for every element of the broadcast);
  - any computed value read through an EXPAND (no recomputation blow-up: each value of a
    broadcast is computed once);
  - an op that can be undefined (IDIV, MOD, shifts, float->int casts) read through a PAD, because
    padded lanes run on the gated loads' placeholder values;
  - a REDUCE_AXIS that two kernels would otherwise both compute.
Everything else fuses: elementwise chains, elementwise ops into and after a reduction, movement ops
(which become index arithmetic on the loads).

A kernel's AST is built by index lowering: each node is asked for its value at an index (one
expression per axis) under a validity condition; movement ops rewrite the index, PAD narrows the
validity (loads are gated by it), a fused REDUCE_AXIS opens new reduce axes.
"""
from __future__ import annotations

import contextlib
import math
import time
import weakref
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from refgrad import knobs, program
from refgrad.device import Buffer, target_for
from refgrad.dtype import dtypes
from refgrad.heuristic import hand_coded_optimizations
from refgrad.kernel import Kernel, axis_size
from refgrad.lazy import buffer_of, new_buffer
from refgrad.opt import Opt, apply_opts
from refgrad.program import Runner
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.semantics import can_be_undefined
from refgrad.uop.symbolic import simplify

# a node computed by an earlier schedule -> the BUFFER holding it (alive as long as the node is)
realized: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()
_MAX_ELEMENTS = 2**31 - 1   # indices are int32


def _base(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u

def is_realized(u: UOp) -> bool:
  """A BUFFER, reshapes of one (same data), or a node an earlier schedule computed."""
  return _base(u).op is Ops.BUFFER or u in realized

def buffer_node(u: UOp) -> UOp:
  """The BUFFER behind a realized node."""
  return b if (b := _base(u)).op is Ops.BUFFER else realized[u]


@dataclass
class ScheduleItem:
  """One step: a kernel (ast set) writing bufs[0] from bufs[1:], or a copy bufs[1] -> bufs[0]."""
  ast: UOp | None
  bufs: list[UOp]
  device: str
  name: str = ""


def _reads_memory(roots: list[UOp]) -> set[UOp]:
  """The nodes whose value depends on some buffer (the others are arithmetic on constants and IOTA alone)."""
  out: set[UOp] = set()
  for u in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort:
    if u.op is Ops.BUFFER or u in realized or any(s in out for s in u.src): out.add(u)
  return out


def _cheap(u: UOp, compute: set[UOp]) -> bool:
  """u is loaded data through movement ops and casts only: nothing worth computing once."""
  while u not in compute:
    if u.op not in GroupOp.Movement and u.op not in (Ops.CAST, Ops.DETACH): return True
    u = u.src[0]
  return False

def find_realizes(roots: list[UOp]) -> list[UOp]:
  """The nodes that get their own buffer, sources before users (see the module docstring). A reduction
  that would be fused into two kernels is realized once instead (repeat until none is)."""
  forced: set[UOp] = set()
  # work worth doing once: reductions, and elementwise ops on loaded values (arithmetic on constants and IOTA
  # alone is as cheap to recompute as to load, e.g. an arange compared against a broadcast index; so is a cast of
  # a load, which also keeps a mixed-precision matmul's inputs in their narrow dtype for tensor cores)
  loads = _reads_memory(roots)
  compute: set[UOp] = set()
  for u in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort:
    if u.op is Ops.REDUCE_AXIS or (u in loads and u.op in GroupOp.Elementwise and not (u.op is Ops.CAST and _cheap(u.src[0], compute))): compute.add(u)
  while True:
    kernel_roots, fused_into = _walk(roots, forced, compute)
    shared = {u for u, rs in fused_into.items() if len(rs) > 1 and u.op is Ops.REDUCE_AXIS} - forced
    if not shared: return [u for u in UOp(Ops.SINK, dtypes.void, tuple(kernel_roots)).toposort if u in kernel_roots]
    forced |= shared

def _walk(roots: list[UOp], forced: set[UOp], compute: set[UOp]) -> tuple[set[UOp], dict[UOp, set[UOp]]]:
  work: list[UOp] = list(roots)
  stop = set(roots) | forced
  kernel_roots: set[UOp] = set()
  fused_into: dict[UOp, set[UOp]] = {}
  seen: set[tuple[UOp, UOp, bool, bool, bool]] = set()
  while work:
    root = work.pop()
    if root in kernel_roots or is_realized(root): continue
    kernel_roots.add(root)
    if root.op is Ops.COPY:
      work.append(root.src[0])
      continue
    stack = [(s, False, False, False) for s in (root.src if root.op is Ops.CONTIGUOUS else (root,))]
    while stack:
      u, expanded, in_reduce, padded = stack.pop()
      if (key := (root, u, expanded, in_reduce, padded)) in seen: continue
      seen.add(key)
      if is_realized(u) or u.op in (Ops.CONST, Ops.IOTA): continue
      if (u is not root and u in stop) or u.op in (Ops.COPY, Ops.CONTIGUOUS) or (u.op is Ops.REDUCE_AXIS and (expanded or in_reduce)) \
          or (expanded and u in compute) or (padded and can_be_undefined(u)):
        work.append(u)
        stop.add(u)
        continue
      fused_into.setdefault(u, set()).add(root)
      grows = u.op is Ops.EXPAND and math.prod(u.shape) > math.prod(u.src[0].shape)
      stack.extend((s, expanded or grows, in_reduce or u.op is Ops.REDUCE_AXIS, padded or u.op is Ops.PAD) for s in u.src)
  return kernel_roots, fused_into


Need = tuple[UOp, tuple[UOp, ...], 'UOp | None']   # a value the lowering needs: (node, index, validity)

class _Lowerer:
  """Builds one kernel's AST: the value of a node at an index, loads numbered as kernel parameters."""
  def __init__(self, bufs: list[UOp], done: dict[UOp, UOp]):
    self.bufs = bufs                        # [output BUFFER, input BUFFERs...]
    self.done = done                        # nodes realized earlier in this schedule -> their BUFFER
    self.params: dict[UOp, UOp] = {}
    self.cache: dict[tuple[UOp, tuple[UOp, ...], UOp | None], UOp] = {}
    self.axes = 0

  def axis(self, size: int) -> UOp:
    self.axes += 1
    return UOp.range(size, self.axes - 1)

  def param(self, b: UOp) -> UOp:
    if b not in self.params:
      if b not in self.bufs: self.bufs.append(b)
      self.params[b] = UOp.define_global(self.bufs.index(b), b.dtype, b.arg[2])
    return self.params[b]

  def value(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None, top: bool = False) -> UOp:
    """The value of u at idx. `_value` is a generator that yields the (node, idx, valid) it needs and is sent their values:
    an explicit stack instead of recursion, so thousands of chained ops lower without RecursionError."""
    key = (u, idx, valid)
    if (ret := self.cache.get(key)) is not None: return ret
    stack = [(key, self._value(u, idx, valid, top))]
    sent: UOp | None = None
    while stack:
      k, gen = stack[-1]
      try: need = gen.send(sent)
      except StopIteration as done:
        stack.pop()
        sent = self.cache[k] = done.value
        continue
      if (sent := self.cache.get(need)) is None: stack.append((need, self._value(*need, False)))
    return self.cache[key]

  def _value(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None, top: bool) -> Generator[Need, UOp, UOp]:
    op, a = u.op, u.arg
    if not top and (u in self.done or is_realized(u)):
      b = self.done[u] if u in self.done else buffer_node(u)
      flat = simplify(_flat(idx, u.shape))
      return self.param(b).load(flat, valid, 0 if b.dtype != dtypes.bool else False) if valid is not None else self.param(b).load(flat)
    if op is Ops.CONST: return UOp.const(u.dtype, a)
    if op is Ops.IOTA: return idx[0].cast(u.dtype)
    if op in GroupOp.Elementwise:
      srcs = []
      for x in u.src: srcs.append((yield (x, idx, valid)))
      return UOp(op, u.dtype, tuple(srcs), a)
    if op in (Ops.CONTIGUOUS, Ops.DETACH): return (yield (u.src[0], idx, valid))
    s = u.src[0]
    if op is Ops.RESHAPE: return (yield (s, _reshape_idx(idx, s.shape, u.shape), valid))
    if op is Ops.PERMUTE:
      new = [idx[0]] * len(a)
      for i, p in enumerate(a): new[p] = idx[i]
      return (yield (s, tuple(new), valid))
    if op is Ops.EXPAND: return (yield (s, tuple(UOp.const(dtypes.int32, 0) if n == 1 else i for i, n in zip(idx, s.shape)), valid))
    if op is Ops.SHRINK: return (yield (s, tuple(simplify(i + b) for i, (b, _) in zip(idx, a)), valid))
    if op is Ops.FLIP: return (yield (s, tuple(simplify(UOp.const(dtypes.int32, n - 1) - i) if f else i for i, n, f in zip(idx, s.shape, a)), valid))
    if op is Ops.PAD:
      conds: list[UOp] = []
      new = []
      for i, n, (b, _) in zip(idx, s.shape, a):
        j = simplify(i - b) if b else i
        if j.vmin < 0: conds.append(UOp.const(dtypes.int32, -1) < j)
        if j.vmax >= n: conds.append(j < n)
        new.append(j)
      if not conds: return (yield (s, tuple(new), valid))
      cond = conds[0]
      for c in conds[1:]: cond = cond & c
      v = (valid & cond) if valid is not None else cond
      return v.where((yield (s, tuple(new), v)), UOp.const(u.dtype, False if u.dtype == dtypes.bool else 0))
    if op is Ops.REDUCE_AXIS:
      rop, axes = a
      ranges = {ax: self.axis(s.shape[ax]) for ax in axes}
      inner = yield (s, tuple(ranges.get(ax, i) for ax, i in enumerate(idx)), valid)
      return UOp(Ops.REDUCE, u.dtype, (inner, *ranges.values()), rop)
    raise NotImplementedError(f"cannot lower {op.name} into a kernel")


def _flat(idx: tuple[UOp, ...], shape: tuple[int, ...]) -> UOp:
  """sum(idx_i * stride_i), built innermost-first so the `(x//c)*c + x%c` rules can fold it back."""
  out: UOp | None = None
  stride = 1
  for i, n in reversed(list(zip(idx, shape))):
    if n == 1: continue
    term = i * stride if stride != 1 else i
    out = term if out is None else term + out
    stride *= n
  return out if out is not None else UOp.const(dtypes.int32, 0)

def _reshape_idx(idx: tuple[UOp, ...], old: tuple[int, ...], new: tuple[int, ...]) -> tuple[UOp, ...]:
  """Index into `old` for an index into `new` (same element count), block by block of matching products."""
  zero = UOp.const(dtypes.int32, 0)
  out = [zero] * len(old)
  if 0 in old: return tuple(out)   # an empty tensor is never read (its reads are masked off): any index will do
  nn = [(k, n) for k, n in enumerate(new) if n != 1]
  oo = [(k, n) for k, n in enumerate(old) if n != 1]
  a = b = 0
  while a < len(nn) and b < len(oo):
    pa, pb, ea, eb = nn[a][1], oo[b][1], a + 1, b + 1
    while pa != pb:
      if pa < pb: pa, ea = pa * nn[ea][1], ea + 1
      else: pb, eb = pb * oo[eb][1], eb + 1
    flat = _flat(tuple(idx[k] for k, _ in nn[a:ea]), tuple(n for _, n in nn[a:ea]))
    stride = pb
    for k, n in oo[b:eb]:
      stride //= n
      out[k] = simplify((flat // stride) % n)
    a, b = ea, eb
  return tuple(out)


def kernel_ast(u: UOp, out: UOp, done: dict[UOp, UOp] | None = None) -> tuple[UOp, list[UOp]]:
  """The AST computing node u into BUFFER out, and its buffers (out first)."""
  low = _Lowerer([out], done or {})
  idx = tuple(low.axis(n) for n in u.shape)
  val = low.value(u, idx, None, top=True)
  store = low.param(out).store(simplify(_flat(idx, u.shape)), val)
  # simplification can drop loads (e.g. where(True, a, b)): number the buffers that are still read
  ast = simplify(UOp(Ops.SINK, dtypes.void, (store,)))
  used = sorted(g.arg for g in ast.toposort if g.op is Ops.DEFINE_GLOBAL)
  if used != list(range(len(low.bufs))):
    renum = {g: UOp.define_global(used.index(g.arg), g.dtype.base, g.dtype.size) for g in ast.toposort if g.op is Ops.DEFINE_GLOBAL}
    ast = ast.substitute(renum)
  return ast, [low.bufs[i] for i in used]


def _kernel_name(ast: UOp) -> str:
  k = Kernel(ast)
  glb = "_".join(str(axis_size(r)) for r in k.global_axes) or "1"
  red = "_".join(str(axis_size(r)) for r in k.reduce_axes)
  return f"r_{glb}__{red}" if red else f"E_{glb}"


def create_schedule(roots: list[UOp], default_device: str) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Kernels and copies computing every root, in order, and the BUFFER each realized node goes to.
  The BUFFERs have no memory yet (`run_schedule` assigns it)."""
  items: list[ScheduleItem] = []
  out: dict[UOp, UOp] = {}
  for u in find_realizes(roots):
    n = math.prod(u.shape)
    if n > _MAX_ELEMENTS: raise ValueError(f"a tensor of shape {u.shape} has more than 2**31-1 elements")
    if u.op is Ops.COPY:
      src = out[u.src[0]] if u.src[0] in out else buffer_node(u.src[0])
      b = out[u] = new_buffer(u.arg, n, u.dtype, backed=False)
      items.append(ScheduleItem(None, [b, src], u.arg, f"copy {src.arg[1]} -> {u.arg}"))
      continue
    dev = u.device or default_device
    b = out[u] = new_buffer(dev, n, u.dtype, backed=n == 0)
    if n == 0: continue
    ast, bufs = kernel_ast(u, b, out)
    for s in bufs[1:]:
      if s.arg[1] != dev: raise ValueError(f"a kernel on {dev} reads a buffer on {s.arg[1]}: move it with .to({dev!r}) first")
    items.append(ScheduleItem(ast, bufs, dev, _kernel_name(ast)))
  return items, out


def optimize(ast: UOp, device: str, name: str = "kernel", opts: Sequence[Opt] | None = None) -> Kernel:
  """The kernel as it runs on `device`, for the device's target (refgrad/target.py). `opts`: exactly these Opts, in order
  (InvalidOptError names one that does not apply; () is the unoptimized kernel). Without them the knobs choose: unoptimized
  with NOOPT=1, searched with BEAM=n (refgrad/search.py), else the hand-coded Opts (refgrad/heuristic.py)."""
  k = Kernel(ast, name, target_for(device))
  if opts is not None: return apply_opts(k, list(opts))
  if knobs.get("NOOPT"): return k
  if (beam := knobs.get("BEAM")) > 0:
    # loaded on demand: BEAM search brings the PYTHON executor (~0.2 s of imports)
    from refgrad.search import cached_beam
    return cached_beam(k, device, beam)
  return hand_coded_optimizations(k)

# kernel cache: the same AST for the same device, target, choice of Opts and CHECKED (a renderer may emit checks, e.g.
# the amdgcn LLVM IR's division-by-zero trap) is compiled once
_runners: dict[tuple[Any, ...], Runner] = {}

def get_runner(ast: UOp, device: str, name: str = "kernel", opts: Sequence[Opt] | None = None) -> Runner:
  """The compiled kernel of `ast` on `device` (cached), optimized with exactly `opts` when given, else as the knobs choose
  (see `optimize`). Its `opts` are the Opts it was optimized with."""
  choice = ("opts", tuple(opts)) if opts is not None else (knobs.get("NOOPT"), knobs.get("BEAM"))
  key = (ast, device, target_for(device).name, knobs.get("CHECKED"), *choice)
  if (r := _runners.get(key)) is None:
    k = optimize(ast, device, name, opts)
    r = _runners[key] = Runner.from_sink(name, k.lower(), device, tuple(k.applied))
    if program.DEBUG >= 2: print(f"{device:7s} {name:30s} compiled for {k.target.name}, Opts: {', '.join(map(repr, k.applied)) or 'none'}")
  return r


@dataclass(frozen=True)
class Launch:
  """One step run_schedule ran: a kernel (its runner, its buffers with the output first, its AST and the Opts it was
  optimized with) or a copy (runner and ast None, buffers [dest, src])."""
  runner: Runner | None
  bufs: tuple[Buffer, ...]
  ast: UOp | None
  name: str
  device: str
  opts: tuple[Opt, ...] = ()

_recorders: list[list[Launch]] = []

@contextlib.contextmanager
def recording() -> Iterator[list[Launch]]:
  """Record every step run_schedule runs inside the block, in order (TinyJit captures through this; tests and tools read
  which kernels ran with which Opts). Blocks nest: every open one records each step."""
  log: list[Launch] = []
  _recorders.append(log)
  try: yield log
  finally: _recorders.remove(log)

def _record(step: Launch) -> None:
  for log in _recorders: log.append(step)


def run_schedule(items: list[ScheduleItem], keep: set[UOp]) -> None:
  """Run the items in order without waiting for them (a copy waits for its source). Outputs not in `keep` are intermediates: an intermediate's memory is
  handed to a later output of the same device, size and dtype once its last reader has run."""
  last_use: dict[UOp, int] = {}
  for i, it in enumerate(items):
    for b in it.bufs: last_use[b] = i
  produced = {it.bufs[0] for it in items}
  free: dict[tuple[str, int, Any], list[Buffer]] = {}
  for i, it in enumerate(items):
    out = it.bufs[0]
    key = (out.arg[1], out.arg[2], out.dtype)
    if out not in buffer_of:
      buffer_of[out] = free[key].pop() if out not in keep and free.get(key) else Buffer(*key)
    bufs = [buffer_of[b] for b in it.bufs]
    if it.ast is None:
      st = time.perf_counter()
      bufs[0].copyin(bufs[1].numpy())
      if _recorders: _record(Launch(None, tuple(bufs), None, it.name, it.device))
      if program.DEBUG >= 2: print(f"{it.device:7s} {it.name:30s} {bufs[0].nbytes:9d} bytes {(time.perf_counter() - st) * 1e3:9.3f} ms")
    else:
      runner = get_runner(it.ast, it.device, it.name)
      if _recorders: _record(Launch(runner, tuple(bufs), it.ast, it.name, it.device, runner.opts))
      # launches enqueue and return (HCQ devices run them asynchronously; reading a result synchronizes), except under
      # DEBUG=2, which prints each kernel's time and so waits for it
      runner(*bufs, wait=program.DEBUG >= 2)
    for b in set(it.bufs):
      if last_use[b] == i and b in produced and b not in keep:
        free.setdefault((b.arg[1], b.arg[2], b.dtype), []).append(buffer_of[b])


def realize(roots: list[UOp], default_device: str, keep_nodes: set[UOp] | frozenset[UOp] = frozenset()) -> dict[UOp, UOp]:
  """Compute every root (and every node in `keep_nodes` that the schedule realizes on the way); returns
  node -> BUFFER for those, also remembered in `realized` while the node lives."""
  items, out = create_schedule(roots, default_device)
  wanted = set(roots) | set(keep_nodes)
  keep = {b for u, b in out.items() if u in wanted}
  run_schedule(items, keep)
  ret = {u: b for u, b in out.items() if u in wanted}
  # a graph of constants alone has no device, and its node is shared by equal graphs on every device: not remembered
  realized.update((u, b) for u, b in ret.items() if u.device is not None)
  return ret
