"""One Python function per SIMT program: the instruction loop of `Program._run` unrolled into straight-line source.

The interpreter dispatches every instruction through a table: fetch (closure, frees), call, test the jump target, free
the dead registers one by one. The generated function does the same work in the same order with none of that: blocks
become Python blocks (IF: `if`; RANGE: `if` + `while`, ENDRANGE's jump back is `continue`, its exit `break`), frees
are inline stores, and the two commonest instructions skip their closures while no undefined value is in play:

- ALU/CAST/BITCAST: `regs[o] = fn([regs[a], ...])`, fn being the same `semantics.op_fn` the closure calls (an op that
  may have undefined behaviour keeps its closure in checked mode, which runs `ub_check`); where semantics runs the op as
  one numpy ufunc unchanged (`plain_ufunc`: float32/float64 ADD/MUL/compares, integer ADD/MUL/MAX/bitwise/compares), that
  ufunc itself;
- GEP: the component, copied to a contiguous array as the closure does.

Every other instruction, and these two whenever `st.undef` is not empty, call the very closure the interpreter calls,
so checked-mode reports are the same. Programs nested too deep for Python's block limit keep the interpreter."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.uop.ops import Ops

MAX_LOOP_DEPTH = 16   # Python allows 20 statically nested loop blocks; each RANGE needs one
_CMP = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal}
_FLOAT = {Ops.ADD: np.add, Ops.MUL: np.multiply}
_INT = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.XOR: np.bitwise_xor, Ops.OR: np.bitwise_or, Ops.AND: np.bitwise_and}


def plain_ufunc(op: Ops, dtype: DType, sdts: Sequence[DType]) -> Any:
  """The numpy ufunc that `semantics.op_fn(op, dtype, sdts)` runs unchanged on operands of one dtype (result in dtype's
  storage, no widening, no fix-up of zeros or NaNs), else None. tests/refgrad/test_simt_codegen.py checks each bit for bit."""
  if len(sdts) != 2 or sdts[0] != sdts[1] or dtype.count != sdts[0].count: return None
  s = sdts[0].scalar()
  if op in _CMP: return _CMP[op] if dtype.scalar() == dtypes.bool and (s in (dtypes.float32, dtypes.float64) or (dtypes.is_int(s) and s != dtypes.bool)) else None
  if dtype.scalar() != s: return None
  if s in (dtypes.float32, dtypes.float64): return _FLOAT.get(op)
  return _INT.get(op) if dtypes.is_int(s) and s != dtypes.bool else None


def generate(name: str, ops: Sequence[Ops], code: Sequence[tuple[Callable, tuple[int, ...]]]) -> Callable[[Any], None] | None:
  """The program as one function of the batch state, or None when it nests loops too deep. ops[k]: the op of code[k]."""
  lines = ["def run(st):", " regs, undef, checked = st.regs, st.undef, st.checked"]
  env: dict[str, Any] = {}
  depth, loops = 1, 0
  stack: list[Ops] = []
  def emit(line: str) -> None: lines.append(" " * depth + line)
  def frees(fr: tuple[int, ...]) -> None:
    if not fr: return
    emit("; ".join(f"regs[{s}] = None" for s in fr))
    emit("if undef: " + "; ".join(f"undef.pop({s}, None)" for s in fr))
  for k, ((fn, fr), op) in enumerate(zip(code, ops)):
    f = f"F{k}"
    env[f] = fn
    gen = getattr(fn, "gen", None)
    if op is Ops.IF:
      emit(f"if {f}(st) is None:")
      depth += 1
      stack.append(op)
      frees(fr)
    elif op is Ops.RANGE:
      if (loops := loops + 1) > MAX_LOOP_DEPTH: return None
      emit(f"if {f}(st) is None:")
      depth += 1
      frees(fr)
      emit("while True:")
      depth += 1
      stack.append(op)
    elif op is Ops.ENDIF:
      emit(f"{f}(st)")
      frees(fr)
      depth -= 1
      assert stack.pop() is Ops.IF
    elif op is Ops.ENDRANGE:
      emit(f"if {f}(st) is None: break")   # it frees what dies with the loop itself
      depth -= 2
      loops -= 1
      assert stack.pop() is Ops.RANGE
    elif gen is not None and gen[0] == "alu":
      _, o, src, opfn, may_ub, uf = gen
      env[f"G{k}"] = opfn if uf is None else uf
      emit(f"if undef{' or checked' if may_ub else ''}: {f}(st)")
      args = ", ".join(f"regs[{a}]" for a in src)
      emit(f"else: regs[{o}] = G{k}({args})" if uf is not None else f"else: regs[{o}] = G{k}([{args}])")
      frees(fr)
    elif gen is not None and gen[0] == "gep":
      _, o, a, c = gen
      emit(f"if undef: {f}(st)")
      emit(f"else: x = regs[{a}]; regs[{o}] = x[..., {c}].copy() if x.shape[0] > 1 else x[..., {c}]")
      frees(fr)
    else:
      emit(f"{f}(st)")
      frees(fr)
  if stack: return None   # unbalanced blocks: the interpreter reports them
  if len(lines) == 2: lines.append(" pass")
  ns = dict(env)
  exec(compile("\n".join(lines), f"<simt program {name}>", "exec"), ns)   # source built above from the program's own tables
  return ns["run"]
