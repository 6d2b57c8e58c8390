"""A loop's carried region (emulators/nv/ptx/loops.py) as plain array functions: the instructions that depend on a carried
value run once per iteration on one row of lanes, so per-instruction overhead, not array work, is their cost. Here each
supported instruction becomes one function of an environment of 32-bit values (uint32 arrays) and predicates (bool
arrays), computed with the very semantics functions the step closures call (fast.py), so the bits are theirs. A region
with any other instruction is stepped as before."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from emulators.nv.ptx import semantics as S
from emulators.nv.ptx.parse import Entry, Instr, Operand

Env = dict[str, np.ndarray]
Op = Callable[[Env], None]
_F32, _U32 = np.float32, np.uint32
_W32 = ("b32", "f32", "u32", "s32")


def _reg32(o: Operand, e: Entry) -> bool:
  return o.kind == "reg" and e.regs.get(o.value) in _W32


def _src(o: Operand, e: Entry, t: str) -> Callable[[Env], np.ndarray] | None:
  """A 32-bit source read as t (f32: float32, else uint32): a register of the environment, or an immediate constant."""
  if _reg32(o, e):
    name = o.value
    if t == "f32": return lambda env: env[name].view(_F32)
    return lambda env: env[name]
  if t == "f32" and o.kind == "fimm":   # as Launch.get converts a float literal
    v, fw = o.value  # type: ignore[misc]
    c = (np.array([v], np.uint64).view(np.float64) if fw == 8 else np.array([v], np.uint32).view(np.float32)).astype(_F32)[0]
    return lambda env: c
  if t != "f32" and o.kind == "imm":
    u = _U32(o.value & 0xFFFFFFFF)
    return lambda env: u
  return None


def _op(ins: Instr, e: Entry) -> Op | None:
  if ins.pred is not None or not ins.args or ins.args[0].kind != "reg" or len(ins.types) != 1: return None
  op, t, d = ins.op, ins.types[0], ins.args[0].value
  dt = e.regs.get(d)
  if op in ("add", "sub", "mul", "max", "min") and t == "f32" and len(ins.args) == 3 and dt in _W32:
    if set(ins.mods) - ({"f32", "rn"} if op in ("add", "sub", "mul") else {"f32"}): return None
    fa, fb = _src(ins.args[1], e, "f32"), _src(ins.args[2], e, "f32")
    if fa is None or fb is None: return None
    f: Callable[[np.ndarray, np.ndarray], np.ndarray] = {
      "add": np.add, "sub": lambda a, b: a + -b, "mul": np.multiply,   # sub is a + (-b), as the f32 step computes it
      "max": lambda a, b: S.fminmax(a, b, True, False), "min": lambda a, b: S.fminmax(a, b, False, False)}[op]
    def fop(env: Env) -> None: env[d] = np.asarray(f(fa(env), fb(env)), _F32).view(_U32)
    return fop
  if op == "setp" and len(ins.args) == 3 and dt == "pred" and t in ("f32", "s32", "u32", "b32"):
    cs = [m for m in ins.mods if m != t]
    if len(cs) != 1: return None
    c, ct = cs[0], t if t != "b32" else "u32"
    fa, fb = _src(ins.args[1], e, ct), _src(ins.args[2], e, ct)
    if fa is None or fb is None: return None
    if ct == "s32":   # signed: the 32-bit values viewed as int32
      def sop(env: Env) -> None: env[d] = np.asarray(S.cmp(np.asarray(fa(env)).view(np.int32), np.asarray(fb(env)).view(np.int32), c, ct))
    else:
      def sop(env: Env) -> None: env[d] = np.asarray(S.cmp(fa(env), fb(env), c, ct))
    return sop
  if op in ("and", "or", "xor") and t == "b32" and len(ins.args) == 3 and dt in _W32:
    fa, fb = _src(ins.args[1], e, "u32"), _src(ins.args[2], e, "u32")
    if fa is None or fb is None: return None
    g = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    def bop(env: Env) -> None: env[d] = np.asarray(g(fa(env), fb(env)), _U32)
    return bop
  if op == "selp" and t in _W32 and len(ins.args) == 4 and dt in _W32 and ins.args[3].kind == "reg" and e.regs.get(ins.args[3].value) == "pred":
    if ins.mods != (t,): return None
    fa, fb, p = _src(ins.args[1], e, "u32"), _src(ins.args[2], e, "u32"), ins.args[3].value
    if fa is None or fb is None: return None
    def wop(env: Env) -> None: env[d] = np.where(env[p], fa(env), fb(env)).astype(_U32, copy=False)
    return wop
  if op == "mov" and t in _W32 and len(ins.args) == 2 and dt in _W32 and _reg32(ins.args[1], e) and ins.mods == (t,):
    s = ins.args[1].value
    def mop(env: Env) -> None: env[d] = env[s]
    return mop
  return None


def compile_region(instrs: list[Instr], e: Entry) -> list[Op] | None:
  """One function per instruction, or None when an instruction or register is not of the supported kinds."""
  ops = []
  for ins in instrs:
    f = _op(ins, e)
    if f is None: return None
    ops.append(f)
  return ops


def value(v: np.ndarray, rtype: str) -> np.ndarray:
  """A register's stored value (typed as 4 bytes, or uint64 bits) as the environment holds it."""
  if rtype == "pred": return v != 0 if v.dtype != np.bool_ else v
  return v.view(_U32) if v.itemsize == 4 else v.astype(_U32)

