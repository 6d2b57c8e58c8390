"""Checking cases: the five oracles (oracles/case.py ORACLES) on a batch of cases, in the calling process.

Per group (cases with one kernel, target and input set): the unoptimized kernel is lowered once, run on PYTHON in
checked mode (undefined behaviour: the inputs are regenerated as "simple" ones once, then the group is counted as UB,
never a finding), compared with the AST evaluator (small kernels), and every optimized kernel is lowered, run on
PYTHON and compared with it. Then every program of the batch that PYTHON ran cleanly goes to the other devices: the
CPU compiles all of them in ONE compiler call (one shared object, a function per program) and runs each between red
zones of sentinel bytes; other devices go through their own Runner. Every device must equal PYTHON bit for bit on
the same linear program.

Cross-Opt tolerance (float results of non-exact cases; docs/architecture.md allows reordered float reductions): within
`rtol(dtype) * max(1, largest finite |unoptimized result|)`, rtol 1e-5 for float32/float64 and 8 ulps at 1.0 for
float16/bfloat16 -- the rule of tests/refgrad/test_opt.py and refgrad/search.py. Everything else is bit for bit.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import json
import re
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oracles import fpstate
from oracles.ast_eval import can_eval, eval_ast, small_enough
from oracles.astjson import ast_from_json
from oracles.case import Case, Result, opt_from_json
from oracles.inputs import cross_opt_rules, input_caused, nan_views, values
from oracles.programs import raw_kernel_of, run_program
from oracles.tensor_oracles import tensor_level
from refgrad.codegen import to_linear
from refgrad.device import Buffer, CompileError, Device
from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.kernel import Kernel
from refgrad.opt import InvalidOptError, apply_opts
from refgrad.program import ProgramSpec, Runner, precompile
from refgrad.renderer.serialize import decode_dtype, encode_dtype
from refgrad.runtime.ops_cpu import CPUAllocator
from refgrad.runtime.simt import Memory, Program, UndefinedBehaviourError
from refgrad.target import TARGETS
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp

TIMES: Counter[str] = Counter()   # seconds spent per stage in this process (bench/bench_fuzz.py reads them)
regenerated: set[str] = set()   # groups whose inputs were undefined behaviour and were regenerated (counted by the caller)
REDZONE = 64            # sentinel bytes before and after every CPU buffer
SENTINEL = 0xA7
fp_changes: dict[str, str] = {}   # device -> an FP-state change its batch's library load caused, reported with its next program
OUT_FILL = 0x5A         # initial bytes of buffers the kernel only stores to (the same on every device)


def rtol(d: DType) -> float:
  return max(1e-5, 8 * {dtypes.float16: 2.0 ** -10, dtypes.bfloat16: 2.0 ** -7}.get(d, 0.0))

def digest(arrs: list[np.ndarray]) -> str:
  h = hashlib.sha256()
  for a in arrs: h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
  return h.hexdigest()[:16]

@contextmanager
def timed(stage: str) -> Iterator[None]:
  st = time.perf_counter()
  try: yield
  finally: TIMES[stage] += time.perf_counter() - st

def _first_line(e: BaseException) -> str: return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"

def _trace_tail(e: BaseException) -> str:
  tb = traceback.extract_tb(e.__traceback__)
  return _first_line(e) + (f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else "")


# ---- programs -------------------------------------------------------------------------------------------------

@dataclass(eq=False)
class Prog:
  name: str
  uops: list[UOp]
  spec: ProgramSpec | None   # None: a program a device under test runs (only PYTHON's run needs it)
  outs: dict[str, list[np.ndarray]] = field(default_factory=dict)   # device -> buffers after the run

def lower(k: Kernel, name: str) -> Prog:
  """The linear program of a kernel, for every device (transcendentals decomposed, as every default renderer asks)."""
  with timed("lower"): uops = to_linear(k.lower(), _py_renderer())
  return Prog(name, uops, ProgramSpec.from_uops(name, uops, "PYTHON"))

@functools.cache
def _py_renderer() -> Any: return Device["PYTHON"].renderer

def run_python(p: Prog, data: list[np.ndarray]) -> list[np.ndarray]:
  """Run on the PYTHON device's executor (checked mode); UndefinedBehaviourError propagates. The program goes to the
  executor directly: it was verified when lowered, and its JSON round trip is the serializer's own tests' business."""
  with timed("python"):
    prg = Program(p.name, p.uops, verify=False)
    mems = [Memory(np.ascontiguousarray(a).view(np.uint8).reshape(-1).copy()) for a in data]
    assert p.spec is not None
    prg(mems, p.spec.global_size, p.spec.local_size, checked=True)
  return [m.data.view(a.dtype).copy() for m, a in zip(mems, data)]


def batched(device: str) -> bool:
  """Whether a device gets batched compiles (public: docs/backends.md): a C device on host memory, i.e. its allocator is
  the CPU's (CPUAllocator), its renderer has `render_parts(name, uops) -> (declarations, function lines)` (CRenderer
  and its subclasses), its compiler a `compile_cached(src)`, and `runtime(name, lib)` takes raw buffer pointers (CPUProgram)."""
  d = Device[device]
  return isinstance(d.allocator, CPUAllocator) and callable(getattr(d.renderer, "render_parts", None)) and callable(getattr(d.compiler, "compile_cached", None))

class CPUBatch:
  """Many programs compiled by ONE call of the device's C compiler: their declarations shared, a function each."""
  def __init__(self, progs: list[Prog], device: str = "CPU"):
    self.fns: dict[str, Any] = {}
    self.errors: dict[str, BaseException] = {}
    dev = Device[device]
    parts: dict[str, tuple[list[str], list[str]]] = {}
    for p in progs:
      try:
        with timed("render C"): parts[p.name] = dev.renderer.render_parts(p.name, p.uops)
      except Exception as e: self.errors[p.name] = e
    if not parts: return
    try: self._load(dev, parts)
    except CompileError:   # find the program(s) at fault: compile each on its own
      for name, pr in parts.items():
        try: self._load(dev, {name: pr})
        except CompileError as e: self.errors[name] = e

  def _load(self, dev: Any, parts: dict[str, tuple[list[str], list[str]]]) -> None:
    decls = dict.fromkeys(d for pr in parts.values() for d in pr[0])
    src = "\n".join([*decls, *(ln for pr in parts.values() for ln in pr[1])]) + "\n"
    with timed("cc"): lib = dev.compiler.compile_cached(src)
    for name in parts: self.fns[name] = dev.runtime(name, lib)   # the program object: a plugin may wrap the call

  def run(self, name: str, data: list[np.ndarray]) -> tuple[list[np.ndarray], str | None]:
    """(the buffers after the run, None or which red zone was written)."""
    raws = []
    for a in data:
      raw = np.full(a.nbytes + 2 * REDZONE, SENTINEL, np.uint8)
      raw[REDZONE:REDZONE + a.nbytes] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
      raws.append(raw)
    with timed("run CPU"): self.fns[name](*(ctypes.c_void_p(r.ctypes.data + REDZONE) for r in raws))
    bad = None
    for i, (a, raw) in enumerate(zip(data, raws)):
      lo, hi = raw[:REDZONE], raw[REDZONE + a.nbytes:]
      if (lo != SENTINEL).any() or (hi != SENTINEL).any():
        where = f"{int(REDZONE - np.flatnonzero(lo != SENTINEL)[0])} bytes before" if (lo != SENTINEL).any() else f"{int(np.flatnonzero(hi != SENTINEL)[-1]) + 1} bytes after"
        bad = f"buffer {i} ({a.size} x {a.dtype}): a store wrote up to {where} the buffer"
        break
    return [raw[REDZONE:REDZONE + a.nbytes].view(a.dtype).copy() for a, raw in zip(data, raws)], bad


def run_generic(device: str, p: Prog, data: list[np.ndarray]) -> list[np.ndarray]:
  """Any other device (mock GPUs, third-party backends): through its own Runner."""
  r = Runner(p.name, p.uops, device)
  bufs = [Buffer(device, dt.size, dt.base).copyin(a) for (_, dt), a in zip(r.spec.globals, data)]
  r(*bufs)
  return [b.numpy().reshape(a.shape) for b, a in zip(bufs, data)]


# ---- comparing ------------------------------------------------------------------------------------------------

MAX_VALUE_BYTES = 1 << 14   # bytes of each buffer a finding keeps as bits (larger ones: this prefix and a hash of all)

def _hex(a: np.ndarray) -> str:
  raw = np.ascontiguousarray(a).view(np.uint8).tobytes()
  return raw.hex() if len(raw) <= MAX_VALUE_BYTES else f"{raw[:MAX_VALUE_BYTES].hex()}...sha256:{hashlib.sha256(raw).hexdigest()}"

def values_of(dts: list[DType], inputs: list[np.ndarray], expected: list[np.ndarray], actual: list[np.ndarray]) -> dict[str, Any]:
  """A finding's values as bits: every buffer before the run, as expected after it and as the device left it
  (little-endian hex of the raw bytes, bfloat16 as its uint16 bits)."""
  return {"dtypes": [d.name for d in dts], "inputs": [_hex(a) for a in inputs], "expected": [_hex(a) for a in expected],
          "actual": [_hex(a) for a in actual]}

def differing_dtype(detail: str) -> str:
  """The dtype named by a `differs` line ("buffer 0 (float) differs ..."), or ""."""
  m = re.search(r"buffer \d+ \((\w+)\)", detail)
  return m.group(1) if m else ""

def differs(a: list[np.ndarray], b: list[np.ndarray], dts: list[DType], tol: bool = False) -> str | None:
  """None when equal (bit for bit, or within the cross-Opt tolerance for floats with tol), else where they differ."""
  for i, (x, y, d) in enumerate(zip(a, b, dts)):
    same = semantics.same_bits(x, y, d)
    if tol and dtypes.is_float(d):
      xf, yf = semantics.to_float64(x, d), semantics.to_float64(y, d)
      fin = np.isfinite(yf)
      atol = rtol(d) * max(1.0, float(np.abs(yf[fin]).max()) if fin.any() else 1.0)
      with np.errstate(invalid="ignore"): same = same | (np.abs(xf - yf) <= atol)
    if not np.all(same):
      j = int(np.flatnonzero(~np.asarray(same).reshape(-1))[0])
      return f"buffer {i} ({d.name}) differs at element {j} of {x.size}: {semantics.to_python(x.reshape(-1)[j:j + 1], d)[0]!r}, expected {semantics.to_python(y.reshape(-1)[j:j + 1], d)[0]!r}"
  return None


def _differs_viewed(a: list[np.ndarray], b: list[np.ndarray], dts: list[DType], views: dict[int, DType | None], only: int | None = None,
                    tol: bool = False) -> str | None:
  """`differs` on the buffers (or buffer `only`), each compared as its nan_views float dtype, if any, or skipped."""
  for i, (x, y, d) in enumerate(zip(a, b, dts)):
    if only is not None and i != only: continue
    if i in views:
      if (v := views[i]) is None: continue
      x, y, d = x.view(v.np), y.view(v.np), v
    if (bad := differs([x], [y], [d], tol)) is not None: return bad.replace("buffer 0", f"buffer {i}", 1)
  return None


# ---- a batch of cases -----------------------------------------------------------------------------------------

@dataclass
class _Group:
  cases: list[Case]
  ast: UOp
  k0: Kernel
  dts: list[DType]
  data: list[np.ndarray]
  exact: bool
  base: Prog
  rules: dict[int, str]                                  # stored buffer -> "exact" | "tolerance" | "skip" (oracles/inputs.py)
  views: dict[int, DType | None] = field(default_factory=dict)   # buffers holding BITCAST NaN bits (oracles/inputs.py nan_views)

  def differs(self, a: list[np.ndarray], b: list[np.ndarray], only: int | None = None, tol: bool = False) -> str | None:
    return _differs_viewed(a, b, self.dts, self.views, only, tol)
  progs: dict[int, Prog] = field(default_factory=dict)   # case index -> optimized program (PYTHON ran it cleanly)
  by_uops: dict[tuple[UOp, ...], Prog] = field(default_factory=dict)   # programs already run, by their linear program

def _buffers(ast: UOp) -> tuple[list[PtrDType], set[int], set[int]]:
  glb = sorted({u.arg: u.dtype for u in ast.toposort if u.op is Ops.DEFINE_GLOBAL}.items())
  if [i for i, _ in glb] != list(range(len(glb))): raise ValueError(f"kernel buffers are not numbered 0..n-1: {[i for i, _ in glb]}")
  loaded = {u.src[0].arg for u in ast.toposort if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL}
  stored = {u.src[0].arg for u in ast.toposort if u.op is Ops.STORE}
  return [dt for _, dt in glb], loaded, stored

def input_values(c: Case) -> dict[str, Any]:
  """The values of a finding with no outputs (a crash or a hang): every buffer before the run, as bits."""
  ast = ast_from_json(c.ast)
  data = make_inputs(ast, c.inputs)
  return values_of([p.base.scalar() for p in _buffers(ast)[0]], data, [], [])

def make_inputs(ast: UOp, inputs: dict[str, Any]) -> list[np.ndarray]:
  ptrs, loaded, _ = _buffers(ast)
  has_sum = any(u.op is Ops.REDUCE and u.arg is Ops.ADD for u in ast.toposort)
  out = []
  for i, pt in enumerate(ptrs):
    d, n = pt.base.scalar(), pt.size * pt.base.count
    rng = np.random.default_rng([inputs["seed"], i])
    if i in loaded:
      a = values(d, n, inputs["mode"], rng)
      if has_sum and inputs["mode"] == "random" and dtypes.is_float(d):   # no near-overflow values where sums may be reordered
        f = semantics.to_float64(a, d)
        a = np.where(np.isfinite(f) & (np.abs(f) > (16 if d == dtypes.float16 else 1e4)), semantics.round_float(np.ones(1), d), a)
    else: a = np.zeros(n, np.bool_) if d == dtypes.bool else np.full(n * d.itemsize, OUT_FILL, np.uint8).view(d.np)
    out.append(a)
  return out


@dataclass(eq=False)
class DeviceProg:
  """One program every device under test runs, judged against PYTHON's result. Plain data (`wire()`: the program as
  plain rows, `wire_program`), so it can travel to a device's own worker process, which never sees the reference run."""
  name: str
  uops: list[UOp] | tuple[list[tuple[Any, ...]], list[int]]   # the linear program (on a pipe: `wire_program`'s rows and order)
  target: str                  # the target its kernel was optimized for (a device runs the programs of its own target)
  dts: list[str]               # encode_dtype of every buffer's scalar dtype
  data: list[np.ndarray]       # the buffers before the run
  expected: list[np.ndarray]   # the buffers after PYTHON ran it
  views: dict[int, str | None]  # nan_views: a buffer compared as this float dtype, or not at all (None)
  index: int                   # the case a failure is reported on
  case: dict[str, Any]         # that case (for a group's unoptimized program: the case without Opts)
  group: str                   # its group: a failing unoptimized program ends the group's checks on that device
  base: bool                   # the group's unoptimized program
  def wire(self) -> DeviceProg:
    return self if isinstance(self.uops, tuple) else dataclasses.replace(self, uops=wire_program(self.uops))
  def linear(self) -> list[UOp]:
    if isinstance(self.uops, tuple): self.uops = unwire_program(*self.uops)
    return self.uops
  def dtypes(self) -> list[DType]: return [decode_dtype(d) for d in self.dts]


def wire_program(uops: list[UOp]) -> tuple[list[tuple[Any, ...]], list[int]]:
  """A linear program as plain rows for a pipe between the fuzzer's own processes: (rows (op value, dtype text, source
  rows, arg) with every source before its users, the rows in program order). Cheaper to rebuild than serialize()'s
  JSON, whose checks guard text from disk: a device worker rebuilds every program it runs."""
  row: dict[UOp, int] = {}
  rows: list[tuple[Any, ...]] = []
  names: dict[DType, str] = {}
  def put(u: UOp) -> None:
    row[u] = len(rows)
    rows.append((u.op.value, names.get(u.dtype) or names.setdefault(u.dtype, encode_dtype(u.dtype)), tuple(row[x] for x in u.src), u.arg))
  for root in uops:
    if root in row: continue
    if all(x in row for x in root.src):   # the usual case: the sources came earlier in the program
      put(root)
      continue
    stack = [(root, False)]
    while stack:
      u, expanded = stack.pop()
      if u in row: continue
      if expanded or all(x in row for x in u.src): put(u)
      else: stack += [(u, True), *((x, False) for x in u.src if x not in row)]
  return rows, [row[u] for u in uops]

def unwire_program(rows: list[tuple[Any, ...]], order: list[int]) -> list[UOp]:
  dts: dict[str, DType] = {}
  built: list[UOp] = []
  for op, dt, srcs, arg in rows: built.append(UOp(_OPS[op], dts.get(dt) or dts.setdefault(dt, decode_dtype(dt)), tuple(built[i] for i in srcs), arg))
  return [built[i] for i in order]

_OPS = {o.value: o for o in Ops}


def check_cases(cases: list[Case], devices: list[str], ast_eval: bool = True, tick: Callable[[], None] | None = None) -> list[Result]:
  """Check every case on PYTHON and `devices` (not PYTHON itself) in this process; one Result per case, in order. `tick`
  is called after every step that takes about one case's time (a worker's heartbeat: a hang is found within one case's
  timeout). The fuzzer runs the same steps split over processes: `prepare` in a reference worker, `run_on_device` in
  one worker per device, `merge` in the coordinator."""
  results, progs = prepare(cases, ast_eval, tick)
  outcomes: dict[str, list[dict[str, Any]]] = {}
  for dev in devices:
    outcomes[dev] = [{}] * len(progs)
    run_on_device(dev, progs, outcomes[dev].__setitem__, tick, restore_fp=True)
  return merge(results, progs, outcomes, devices)


def prepare(cases: list[Case], ast_eval: bool = True, tick: Callable[[], None] | None = None) -> tuple[list[Result], list[DeviceProg]]:
  """The reference's part: every oracle that needs no device under test, on PYTHON. (one Result per case, in order:
  "pass" where it is left to the devices; the programs the devices must run, in order: per group its unoptimized
  program, then each optimized program not already in the list)."""
  tick = tick or (lambda: None)
  results: dict[int, Result] = {}
  groups: dict[str, _Group | None] = {}
  first: dict[str, int] = {}
  for c in cases:
    key = c.group_key()
    if key not in groups:
      first[key] = c.index
      try: groups[key] = _start_group(c, results, ast_eval)
      except _GroupDone: groups[key] = None
    if (g := groups[key]) is None:   # UB inputs or a failing unoptimized kernel: reported once, by the group's first case
      f = results[first[key]]
      if c.index not in results: results[c.index] = Result(c.index, "ub" if f.status == "ub" else "invalid", detail=f.detail, target=c.target)
      continue
    g.cases.append(c)
    _optimized(g, c, results)
    tick()
  progs: list[DeviceProg] = []
  for key, g in groups.items():
    if g is None: continue
    dts = [encode_dtype(d) for d in g.dts]
    views = {i: None if v is None else encode_dtype(v) for i, v in g.views.items()}
    for c in [None, *g.cases]:
      if c is not None and (c.index not in g.progs or g.progs[c.index].name != f"f{c.index}"): continue   # another case's program: checked there
      p, owner = (g.base, _unopt_case_of(g.cases[0])) if c is None else (g.progs[c.index], c)
      progs.append(DeviceProg(p.name, p.uops, g.k0.target.name, dts, g.data, p.outs["PYTHON"], views, owner.index, owner.to_json(), key, c is None))
  out = []
  for c in cases:
    if c.index not in results:
      g = groups.get(c.group_key())
      results[c.index] = Result(c.index, "pass", exact=bool(g and g.exact), target=c.target, opt_kinds=sorted({o[0] for o in c.opts}))
    r = results[c.index]
    r.key, r.regenerated = c.key(), c.group_key() in regenerated
    out.append(r)
  regenerated.clear()
  return out, progs


def device_target(dev: str) -> str | None:
  """The target a device runs (None: any, like the CPU: C runs every linear program)."""
  t = getattr(Device[dev].renderer, "target", None)
  return None if t is None or t.name == "CPU" else t.name

def run_on_device(dev: str, progs: list[DeviceProg], done: Callable[[int, dict[str, Any]], None], tick: Callable[[], None] | None = None,
                  restore_fp: bool = True, built: Callable[[], None] | None = None) -> None:
  """Run the programs on device `dev` (a C device compiles them all in one compiler call first) and call done(i, outcome)
  for each, in order: {"status": "skip"} (another target's), "same" (the bytes PYTHON left), "out" with "out": the
  buffers (to be judged by `judge`: NaNs may differ), or "fail" with "oracle" (compile, redzone, fp-state) and "detail".
  `built` is called once the programs are built (default: tick). The floating-point control state is read before and after every call: a change is a "fp-state" outcome; with
  restore_fp (PYTHON runs in this process) the default state is then put back, else the device keeps running in the
  state it chose, as it would in a process of its own."""
  tick = tick or (lambda: None)
  tgt = device_target(dev)
  mine = [i for i, p in enumerate(progs) if tgt in (None, p.target)]
  for i in range(len(progs)):
    if i not in mine: done(i, {"status": "skip"})
  if not mine: return
  runs = {i: Prog(progs[i].name, progs[i].linear(), None) for i in mine}
  before = fpstate.probe()
  tick()
  batch = CPUBatch(list(runs.values()), dev) if batched(dev) else None
  if batch is None:   # a compiler that batches (nvcc): all of them in one call, into the compile cache its Runners read
    with timed("precompile"): precompile(dev, [(p.name, p.uops) for p in runs.values()])
  (built or tick)()   # the programs are built: what happens next is one program's doing
  if (fp := _fp_settle(before, restore_fp)) is not None: fp_changes[dev] = fp   # loading its library changed the FP state
  for i in mine:
    done(i, _on_device(dev, batch, runs[i], progs[i], restore_fp))

def _on_device(dev: str, batch: CPUBatch | None, p: Prog, dp: DeviceProg, restore_fp: bool) -> dict[str, Any]:
  if (fp := fp_changes.pop(dev, None)) is not None: return {"status": "fail", "oracle": "fp-state", "detail": f"loading its programs: {fp}"}
  before = fpstate.probe()
  try: out = _on_device_run(dev, batch, p, dp.data)
  finally: fp = _fp_settle(before, restore_fp)
  if fp is not None: return {"status": "fail", "oracle": "fp-state", "detail": fp}
  if isinstance(out, dict): return out
  same = all(np.ascontiguousarray(a).view(np.uint8).tobytes() == np.ascontiguousarray(b).view(np.uint8).tobytes() for a, b in zip(out, dp.expected))
  return {"status": "same"} if same else {"status": "out", "out": out}

def _on_device_run(dev: str, batch: CPUBatch | None, p: Prog, data: list[np.ndarray]) -> list[np.ndarray] | dict[str, Any]:
  try:
    if batch is not None:
      if p.name in batch.errors: raise batch.errors[p.name]
      out, red = batch.run(p.name, data)
      if red is not None: return {"status": "fail", "oracle": "redzone", "detail": red}
      return out
    return run_generic(dev, p, data)
  except (CompileError, ValueError, TypeError, NotImplementedError, RuntimeError) as e:
    return {"status": "fail", "oracle": "compile", "detail": _trace_tail(e)}

def judge(dev: str, p: DeviceProg, outcome: dict[str, Any]) -> Result | None:
  """None when the device's outcome agrees with PYTHON, else the failure (its index and case still to be set)."""
  st = outcome["status"]
  if st in ("skip", "same"): return None
  dts = p.dtypes()
  if st == "fail":
    values = values_of(dts, p.data, [], []) if outcome["oracle"] in ("crash", "timeout") else None
    return Result(0, "fail", outcome["oracle"], dev, outcome["detail"], values=values)
  out, want = outcome["out"], p.expected
  if (bad := _differs_viewed(out, want, dts, {i: None if v is None else decode_dtype(v) for i, v in p.views.items()})) is None: return None
  return Result(0, "fail", "device", dev, bad, digest(want), digest(out), values=values_of(dts, p.data, want, out), dtype=differing_dtype(bad))

def merge(results: list[Result], progs: list[DeviceProg], outcomes: dict[str, list[dict[str, Any]]], devices: list[str]) -> list[Result]:
  """The reference's Results with each device's outcomes judged in: per case the first failure (devices in order);
  a device that fails a group's unoptimized program reports it on the group's first case and skips the group's others."""
  by_index = {r.index: k for k, r in enumerate(results)}
  for dev in devices:
    bad_base: set[str] = set()
    for p, o in zip(progs, outcomes[dev]):
      if p.group in bad_base or (fail := judge(dev, p, o)) is None: continue
      if p.base:
        bad_base.add(p.group)
        fail.detail = f"unoptimized kernel: {fail.detail}"
      k = by_index[p.index]
      if results[k].status != "pass": continue
      fail.index, fail.key, fail.regenerated = p.index, results[k].key, results[k].regenerated
      fail.case, fail.target, fail.opt_kinds = p.case, p.case["target"], sorted({o[0] for o in p.case["opts"]})
      results[k] = fail
  return results


class _GroupDone(Exception):
  """The group's cases all have results already (UB inputs, or the unoptimized kernel failed)."""

def _put(results: dict[int, Result], r: Result, case: Case) -> None:
  r.case, r.target, r.opt_kinds = case.to_json(), case.target, sorted({o[0] for o in case.opts})
  results[r.index] = r

def _start_group(c: Case, results: dict[int, Result], ast_eval: bool) -> _Group:
  ast = ast_from_json(c.ast)
  k0 = Kernel(ast, c.kernel, TARGETS[c.target])
  ptrs, _, _ = _buffers(ast)
  dts = [p.base.scalar() for p in ptrs]
  try: base = lower(k0, f"u{c.index}")
  except Exception as e:
    _put(results, Result(c.index, "fail", "compile", "PYTHON", f"unoptimized kernel: {_trace_tail(e)}"), _unopt_case_of(c))
    raise _GroupDone from None
  inputs = dict(c.inputs)
  for attempt in range(2):
    data = make_inputs(ast, inputs)
    try:
      ref = run_python(base, data)
      break
    except UndefinedBehaviourError as e:
      if not input_caused(e):   # out of bounds, races, divergent barriers: the compiler's fault whatever the inputs
        _put(results, Result(c.index, "fail", "checked", "PYTHON", f"unoptimized kernel: {_first_line(e)}"), _unopt_case_of(c))
        raise _GroupDone from None
      if attempt == 1 or inputs["mode"] == "simple":
        # undefined on "simple" inputs too: the program's own, or one that fusion added (the program oracle tells which)
        if c.recipe is not None and (bad := _program_differs(c.recipe, inputs["seed"])) is not None:
          _put(results, Result(c.index, "fail", "program", "PYTHON", bad), _unopt_case_of(c))
        else: results[c.index] = Result(c.index, "ub", detail=_first_line(e), target=c.target)
        raise _GroupDone from None
      inputs = {"seed": inputs["seed"], "mode": "simple"}
      regenerated.add(c.group_key())
    except Exception as e:
      _put(results, Result(c.index, "fail", "reference", "PYTHON", f"unoptimized kernel: {_trace_tail(e)}"), _unopt_case_of(c))
      raise _GroupDone from None
  base.outs["PYTHON"] = ref
  rules = cross_opt_rules(ast, inputs["mode"])
  g = _Group([], ast, k0, dts, data, all(r == "exact" for r in rules.values()), base, rules, nan_views(ast))
  g.by_uops[tuple(base.uops)] = base
  # every kernel, as the scheduler built it before symbolic simplification when the case has its program (else the
  # simplified AST): whole when small, else a sample of output points with their full reductions
  with timed("AST evaluator"): raw = raw_kernel_of(c.recipe, ast) if ast_eval and c.recipe is not None else None   # only its oracle uses it
  oracle_ast = ast if raw is None else raw
  if ast_eval and can_eval(oracle_ast):
    try:
      with timed("AST evaluator"):
        def evaluate(a: UOp) -> dict[int, np.ndarray]:
          whole = small_enough(a)
          return eval_ast(a, dict(enumerate(data)), None if whole else dict(enumerate(ref)), None if whole else np.random.default_rng([inputs["seed"], 7]))
        try: ev = evaluate(oracle_ast)
        except Exception:   # the unsimplified AST may compute what simplification removed (a load past a dead gate, say)
          if oracle_ast is ast: raise
          ev = evaluate(ast)
      want = [ev[i] for i in range(len(data))]
      if (bad := g.differs(ref, want)) is not None:
        _put(results, Result(c.index, "fail", "ast-eval", "PYTHON", f"unoptimized kernel vs AST evaluator: {bad}", digest(want), digest(ref)), _unopt_case_of(c))
        raise _GroupDone
    except _GroupDone: raise
    except Exception as e:
      _put(results, Result(c.index, "fail", "ast-eval", "PYTHON", f"AST evaluator failed: {_trace_tail(e)}"), _unopt_case_of(c))
      raise _GroupDone from None
  if c.recipe is not None and inputs["seed"] % PROGRAM_EVERY == 0 and (bad := _program_differs(c.recipe, inputs["seed"])) is not None:
    _put(results, Result(c.index, "fail", "program", "PYTHON", bad, first_diff=_first_step(c.recipe, inputs["seed"])), _unopt_case_of(c))
    raise _GroupDone
  with timed("tensor oracles"): tl = tensor_level(c.recipe, inputs["seed"]) if c.recipe is not None else None   # "numpy", "grad"
  if tl is not None:
    _put(results, Result(c.index, "fail", tl[0], "PYTHON", tl[1]), _unopt_case_of(c))
    raise _GroupDone
  return g

PROGRAM_EVERY = 8            # the program oracle (a few C compiles) runs for groups whose input seed is a multiple of this
_programs_passed: set[str] = set()

def _program_differs(recipe: dict[str, Any], seed: int) -> str | None:
  """Oracle "program": the recipe's whole tensor program, fused as the scheduler likes on PYTHON, and with every step
  realized in its own kernel (fusion off) on the CPU, whose C loops expose a buffer reused while still read; NOOPT=1
  and the same inputs: the same bits (NaNs equal). None when they agree or the program itself meets undefined
  behaviour (PYTHON checked mode; the CPU run is not checked, so a UB program whose PYTHON run passed may differ: none is
  drawn from "simple" inputs); else what differs. Fusion must not add undefined behaviour: when the fused run meets it
  and the unfused one, checked on PYTHON too, does not, that is a finding (an op that can be undefined, x // y say,
  fused under a pad computes on the pad's alternative values: y = 0)."""
  key = json.dumps([{**recipe, "kernel": 0}, seed], sort_keys=True)
  if key in _programs_passed: return None
  outs: list[Any] = []
  with timed("program oracle"):
    for split in (False, True):
      try: outs.append(run_program(recipe, seed, split, "CPU" if split else "PYTHON"))
      except UndefinedBehaviourError as e:
        if split: return None
        try: run_program(recipe, seed, True, "PYTHON")
        except UndefinedBehaviourError: return None   # the program's own undefined behaviour
        except Exception: return None                 # the unfused program fails: compared elsewhere
        return f"the fused program meets undefined behaviour that the unfused one (every step realized, checked too) does not: {_first_line(e)}"
      except Exception as e: outs.append(e)
  a, b = outs
  if isinstance(a, Exception) or isinstance(b, Exception):
    if isinstance(a, Exception) and isinstance(b, Exception) and type(a) is type(b): return None   # the program itself is refused
    return f"program {'fused' if isinstance(a, Exception) else 'unfused'} failed: {_first_line(a if isinstance(a, Exception) else b)}"  # type: ignore[arg-type]
  if a.shape != b.shape or a.dtype != b.dtype: return f"program fused gives {a.dtype}{list(a.shape)}, unfused {b.dtype}{list(b.shape)}"
  same = a.view(np.uint8).reshape(a.size, -1) == b.view(np.uint8).reshape(b.size, -1)
  same = same.all(axis=1) if a.size else same.reshape(0)
  if a.dtype.kind == "f": same |= np.isnan(a).reshape(-1) & np.isnan(b).reshape(-1)
  if same.all():
    _programs_passed.add(key)
    return None
  j = int(np.flatnonzero(~same)[0])
  return f"program fused vs every step realized: element {j} of {a.size} is {a.reshape(-1)[j]!r} fused, {b.reshape(-1)[j]!r} unfused"

def _first_step(recipe: dict[str, Any], seed: int) -> dict[str, Any] | None:
  """For a "program" failure: the first step whose realized output differs, fused vs unfused (the shortest prefix of
  the recipe's steps that differs; a prefix draws the same inputs): {"op": its name, "dtype", "step": its position}."""
  steps = recipe["steps"]
  for k in range(1, len(steps) + 1):
    if _program_differs({**recipe, "steps": steps[:k]}, seed) is not None: return {"op": steps[k - 1][0], "dtype": recipe["dtype"], "step": k - 1}
  return None

def _unopt_case_of(c: Case) -> Case: return Case(c.index, c.kernel, c.ast, c.target, [], c.inputs, c.source, c.recipe)

def _optimized(g: _Group, c: Case, results: dict[int, Result]) -> None:
  if not c.opts:   # the unoptimized kernel itself: its program is the group's
    g.progs[c.index] = g.base  # type: ignore[assignment]
    return
  try: k = apply_opts(g.k0, [opt_from_json(o) for o in c.opts])
  except InvalidOptError as e:
    results[c.index] = Result(c.index, "invalid", detail=_first_line(e), target=c.target)
    return
  try: p = lower(k, f"f{c.index}")
  except Exception as e:
    _put(results, Result(c.index, "fail", "compile", "PYTHON", _trace_tail(e)), c)
    return
  if (same := g.by_uops.get(tuple(p.uops))) is not None:   # Opts that give a program already checked (SWAP back, NOLOCALS on CPU, ...)
    g.progs[c.index] = same
    return
  g.by_uops[tuple(p.uops)] = p
  try: out = run_python(p, g.data)
  except UndefinedBehaviourError as e:
    _put(results, Result(c.index, "fail", "checked", "PYTHON", _first_line(e)), c)
    return
  except Exception as e:
    _put(results, Result(c.index, "fail", "reference", "PYTHON", _trace_tail(e)), c)
    return
  p.outs["PYTHON"] = out
  ref = g.base.outs["PYTHON"]  # type: ignore[union-attr]
  for i in range(len(out)):   # stored buffers by their rule; buffers only read stay untouched
    rule = g.rules.get(i, "exact")
    if rule != "skip" and (bad := g.differs(out, ref, only=i, tol=rule == "tolerance")) is not None:
      what = f"{rule}: {bad}" if i in g.rules else f"input {bad} after the kernel ran"
      _put(results, Result(c.index, "fail", "cross-opt", "PYTHON", what, digest(ref), digest(out), g.exact, values=values_of(g.dts, g.data, ref, out),
                           dtype=differing_dtype(what)), c)
      return
  g.progs[c.index] = p

def _fp_settle(before: str, restore: bool = True) -> str | None:
  """A change of the floating-point control state since `before` (with restore: put back to the default), or None."""
  if (why := fpstate.changed(before, fpstate.probe())) is None: return None
  if not restore: return why
  return why + ("" if fpstate.restore() else "; it could not be restored")
