"""Deliberately broken pieces of refgrad, for the fuzzer's tests. Imported by fuzz workers (`--preload` /
Options.preload) with $FUZZ_INJECT naming the bug; `inject(name)` applies one in the calling process.

  c_helper      the C helper rg_maxf ignores NaN and the order of +-0 (`a > b ? a : b`)
  render_cast   the C renderer zero-extends signed ints that are cast to a wider int
  unroll        lowering an UNROLL drops the last unrolled copy of the reduced value
  simt_max      the PYTHON executor's float MAX ignores NaN (numpy fmax)
  symbolic      a rule folds x < c to true when x <= c (off by one)
  symbolic_wrap integer bounds ignore wrap-around (a sum past the dtype's max is taken as is), so rules that trust
                them fold wrongly in the scheduler and in lowering alike (only the AST evaluator is independent)
  symbolic_float  the shared symbolic matcher reassociates float constant products ((x*c1)*c2 -> x*(c1*c2))
  index_wrap    a rule "keeps a dividend positive": (x + c) % n -> (x + (c + n)) % n where x + c >= 0, which wraps int32
                only when x + c is within n of 2^31 (index arithmetic of a view of about 2^31 elements: big_view)
  lifetime      run_schedule hands an intermediate's memory on after its last *write*, not its last read (the
                unfused program's later kernels overwrite an input they still read)
  gradient      the gradient rule of MUL gives each operand the gradient times *itself* (the sources swapped)
  runtime_wait  the HCQ runtime's copy queues do not wait for the timeline (a copy-out may run before the kernel that
                writes its source, a copy-in while a kernel still reads the buffer)
  jit_stale     a TinyJit HCQ replay patches only the first kernel argument (the output): the launches go on reading the
                capture's input buffers
  symbolic_join the divmod join rule ((x/c1)%n)*c2 + x%c3 -> x%(c1*n) applied without checking that the constants are
                equal and c1*n fits the dtype (the guard of symbolic._join_divmod_mod left out)
  symbolic_and  integer bounds of x & y (both non-negative) start at 1, not 0: comparisons of masked bits, such as
                (x & 1) == 0 or (x & m) < 1, fold to false
  gradient_drop backward() loses every gradient: each requested gradient is zeros (materialized) or missing
  fuse_pad_ub   the scheduler fuses an op that can be undefined (x // y) under a pad: the padded lanes divide by the
                gate's alternative 0 (schedule._walk's `padded and can_be_undefined(u)` cut dropped)
  segv          a test-only device SEGV: the CPU, but the optimized program of case i segfaults when i % 16 is 3, 4 or 5
  unconstructible  a test-only device BROKEN whose construction raises
  hang          a test-only device HANG: the CPU, but the optimized program of case i never returns when i % 16 is 11, 12 or 13
"""
from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import numpy as np


def _c_helper() -> None:
  from refgrad.renderer import cstyle
  deps, _ = cstyle._HELPERS["rg_maxf"]
  cstyle._HELPERS["rg_maxf"] = (deps, "$fn float rg_maxf(float a, float b) { return a > b ? a : b; }")

def _render_cast() -> None:
  from refgrad.dtype import dtypes
  from refgrad.renderer import cstyle
  orig = cstyle.CStyleProgram.cast
  def cast(self: Any, x: str, src: Any, dst: Any) -> str:
    if dtypes.is_int(src) and dtypes.is_int(dst) and not dtypes.is_unsigned(src) and dst.bits > src.bits:
      return f"(({self.scalar_type(dst)})({ {8: 'unsigned char', 16: 'unsigned short', 32: 'unsigned int'}[src.bits]}){x})"
    return orig(self, x, src, dst)
  cstyle.CStyleProgram.cast = cast  # type: ignore[method-assign]

def _unroll() -> None:
  import itertools

  from refgrad import kernel
  from refgrad.uop.ops import Ops, PatternMatcher, UPat
  def broken(ctx: Any, u: Any) -> Any:
    unr = [r for r in u.src[1:] if r in ctx]
    if not unr: return None
    vals = [u.src[0].substitute({r: r.const_like(v) for r, v in zip(unr, vs)}) for vs in itertools.product(*(range(kernel.axis_size(r)) for r in unr))]
    acc = vals[0]
    for v in vals[1:-1]: acc = acc.alu(u.arg, v)   # the bug: the last copy is lost
    rest = tuple(r for r in u.src[1:] if r not in ctx)
    return acc if not rest else u.replace(src=(acc, *rest))
  kernel._expand_unroll = PatternMatcher([(UPat(Ops.REDUCE, name="u"), broken)])

def _simt_max() -> None:
  from refgrad.dtype import dtypes
  from refgrad.runtime import simt
  from refgrad.uop import semantics
  from refgrad.uop.ops import Ops
  class Broken:
    def __getattr__(self, name: str) -> Any: return getattr(semantics, name)
    @staticmethod
    def op_fn(op: Any, dt: Any, sdts: Any) -> Any:
      if op is Ops.MAX and dt in (dtypes.float32, dtypes.float64): return lambda xs: np.fmax(xs[0], xs[1])
      return semantics.op_fn(op, dt, sdts)
  simt.semantics = Broken()  # type: ignore[assignment]

def _symbolic() -> None:
  from refgrad import codegen
  from refgrad.dtype import dtypes
  from refgrad.uop import symbolic as sym
  from refgrad.uop.ops import Ops, PatternMatcher, UOp, UPat
  def broken(x: Any, c: Any) -> Any:   # x < c is known true when x <= c: off by one
    return UOp.const(dtypes.bool, True) if sym._is_int(x) and x.vmax <= c.arg and x.vmin < c.arg else None
  rule = (UPat(Ops.CMPLT, src=(UPat.var("x"), UPat.cvar("c"))), broken)
  codegen.symbolic = PatternMatcher([rule, *sym.symbolic.rules])  # type: ignore[attr-defined]

def _symbolic_wrap() -> None:
  import math

  from refgrad.dtype import dtypes
  from refgrad.uop import ops
  def bounds(u: Any) -> Any:
    dt = u.dtype
    if dt.count > 1 or not (dtypes.is_int(dt) or dt == dtypes.bool): return (-math.inf, math.inf)
    r = ops.bounds_unclamped(u)
    return (dtypes.min(dt), dtypes.max(dt)) if r is None or r[0] > r[1] else r   # the bug: no check that r fits dt
  ops.bounds = bounds

def _symbolic_float_assoc() -> None:
  from refgrad.uop import symbolic as sym
  from refgrad.uop.ops import Ops, UPat
  def broken(x: Any, c1: Any, c2: Any) -> Any:   # (x*c1)*c2 -> x*(c1*c2) for floats too: reassociation changes the rounding
    return x * x.const_like(c1.arg * c2.arg)
  rule = (UPat(Ops.MUL, src=[UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c1")]), UPat.cvar("c2")]), broken)
  sym.symbolic.__init__([rule, *sym.symbolic.rules])   # in place: the scheduler's simplify and lowering share this matcher

def _index_wrap() -> None:
  from refgrad.dtype import dtypes
  from refgrad.uop import symbolic as sym
  from refgrad.uop.ops import Ops, UPat
  made: set[Any] = set()   # the constants this rule made: it never fires on its own result again
  def broken(x: Any, c: Any, n: Any) -> Any:   # (x + c) % n -> (x + (c + n)) % n where x + c >= 0: wraps when x + c + n passes int max
    if c in made or not sym._is_int(x) or n.arg <= 0 or x.vmin + c.arg < 0 or c.arg + n.arg > dtypes.max(x.dtype): return None
    made.add(k := x.const_like(c.arg + n.arg))
    return (x + k) % n
  rule = (UPat(Ops.MOD, src=(UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c")]), UPat.cvar("n"))), broken)
  sym.symbolic.__init__([rule, *sym.symbolic.rules])   # in place: the scheduler's simplify and lowering share this matcher

def _lifetime() -> None:
  from refgrad import schedule
  from refgrad.device import Buffer
  def run_schedule(items: Any, keep: Any) -> None:
    last_use = {it.bufs[0]: i for i, it in enumerate(items)}   # the bug: the last writer, not the last reader
    produced = {it.bufs[0] for it in items}
    free: dict[Any, list[Any]] = {}
    for i, it in enumerate(items):
      out = it.bufs[0]
      key = (out.arg[1], out.arg[2], out.dtype)
      if out not in schedule.buffer_of: schedule.buffer_of[out] = free[key].pop() if out not in keep and free.get(key) else Buffer(*key)
      bufs = [schedule.buffer_of[b] for b in it.bufs]
      if it.ast is None: bufs[0].copyin(bufs[1].numpy())
      else: schedule.get_runner(it.ast, it.device, it.name)(*bufs, wait=False)
      for b in set(it.bufs):
        if last_use.get(b) == i and b in produced and b not in keep: free.setdefault((b.arg[1], b.arg[2], b.dtype), []).append(schedule.buffer_of[b])
  schedule.run_schedule = run_schedule

def _gradient() -> None:
  from refgrad import gradient
  from refgrad.uop.ops import Ops, UPat
  rule = (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (gradient._mul(ret.src[0], ctx), gradient._mul(ret.src[1], ctx)))   # the bug: swapped
  gradient.pm_gradient.__init__([rule, *gradient.pm_gradient.rules])

def _symbolic_join() -> None:
  from refgrad.uop import symbolic as sym
  from refgrad.uop.ops import Ops, UPat
  def broken(x: Any, c1: Any, n: Any, c2: Any, c3: Any) -> Any:   # the bug: c2, c3 and the overflow of c1*n not checked
    return x % x.const_like(c1.arg * n.arg) if sym._is_int(x) and c1.arg > 0 and n.arg > 0 else None
  rule = (UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat(Ops.MOD, src=(UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("n"))), UPat.cvar("c2")]),
                             UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("c3")))]), broken)
  sym.symbolic.__init__([rule, *sym.symbolic.rules])   # in place: the scheduler's simplify and lowering share this matcher

def _symbolic_and() -> None:
  from refgrad.uop import ops
  orig = ops.bounds_unclamped
  def bounds_unclamped(u: Any) -> Any:
    r = orig(u)
    return (1, r[1]) if u.op is ops.Ops.AND and r is not None and r[0] == 0 else r   # the bug: x & y of non-negatives taken for >= 1
  ops.bounds_unclamped = bounds_unclamped

def _gradient_drop() -> None:
  from refgrad.tensor import core
  core.compute_gradient = lambda root, root_grad, targets: {}   # the bug: nothing reaches the targets

def _fuse_pad_ub() -> None:
  from refgrad import schedule
  schedule.can_be_undefined = lambda u: False   # the bug: nothing under a pad is taken for possibly undefined

def _runtime_wait() -> None:
  from refgrad.runtime import hcq
  orig = hcq.HCQDevice.ordered
  def ordered(self: Any, engine: str) -> Any:
    return self.queue(engine) if engine == "copy" else orig(self, engine)   # the bug: no timeline wait before a copy
  hcq.HCQDevice.ordered = ordered  # type: ignore[method-assign]

def _jit_stale() -> None:
  from refgrad.runtime import hcq
  orig = hcq.KernArgs.set_buffer
  def set_buffer(self: Any, i: int, va: int) -> None:
    if i == 0: orig(self, i, va)   # the bug: the other arguments keep the capture's addresses
  hcq.KernArgs.set_buffer = set_buffer  # type: ignore[method-assign]


# ---- test-only devices --------------------------------------------------------------------------------------------

def make_device(name: str) -> Any:
  """SEGV / HANG: the CPU device whose programs crash / hang on some kernels (see the module docstring); BROKEN cannot
  be constructed."""
  if name == "BROKEN": raise RuntimeError("no such hardware here")
  from refgrad.device import Compiled
  from refgrad.renderer.cstyle import CRenderer
  from refgrad.runtime.ops_cpu import ClangCompiler, CPUAllocator, CPUProgram
  class Prog(CPUProgram):
    def __call__(self, *bufs: Any, **kw: Any) -> Any:
      # the optimized program of case i is named f<i>: SEGV crashes when i % 16 is 3..5, HANG never returns when it is 11..13
      i = int(self.name[1:]) if self.name.startswith("f") and self.name[1:].isdigit() else -1
      if name == "SEGV" and i % 16 in (3, 4, 5): ctypes.string_at(0)   # reads address 0: SIGSEGV
      if name == "HANG" and i % 16 in (11, 12, 13):
        while True: time.sleep(1)
      return super().__call__(*bufs, **kw)
  runtime = Prog
  return Compiled(name, CPUAllocator(), CRenderer(), ClangCompiler(), runtime)

def _register(*names: str) -> None:
  from refgrad.device import Device
  for n in names: Device._modules[n] = __name__

BUGS = {"c_helper": _c_helper, "render_cast": _render_cast, "unroll": _unroll, "simt_max": _simt_max, "symbolic": _symbolic, "symbolic_wrap": _symbolic_wrap, "symbolic_float": _symbolic_float_assoc, "index_wrap": _index_wrap, "lifetime": _lifetime, "gradient": _gradient, "runtime_wait": _runtime_wait, "symbolic_join": _symbolic_join,
        "symbolic_and": _symbolic_and, "gradient_drop": _gradient_drop, "fuse_pad_ub": _fuse_pad_ub, "jit_stale": _jit_stale,
        "segv": lambda: _register("SEGV"), "hang": lambda: _register("HANG"), "segv+hang": lambda: _register("SEGV", "HANG"),
        "unconstructible": lambda: _register("BROKEN")}

def inject(name: str) -> None: BUGS[name]()

if (_bug := os.environ.get("FUZZ_INJECT")): inject(_bug)
