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
  if op in ("add", "sub") and t in ("s32", "u32") and ins.mods == (t,) and len(ins.args) == 3 and dt in _W32:   # wrapping
    fa, fb = _src(ins.args[1], e, "u32"), _src(ins.args[2], e, "u32")
    if fa is None or fb is None: return None
    h = np.add if op == "add" else np.subtract
    def iop(env: Env) -> None: env[d] = np.asarray(h(fa(env), fb(env)), _U32)
    return iop
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



# ---- the PTX renderer's MAX as a fold ---------------------------------------------------------------------------------
# c = MAX(c, x) is rendered (refgrad/renderer/ptx.py `fmax`) as max / setp.eq / and / selp / setp.nan / add / selp: a NaN
# operand gives c + x, equal operands their bitwise AND, else the larger. Under these instruction semantics the step is
# "the first NaN met, quieted (x86 and numpy keep the first operand's NaN of an add), else the largest value with -0 below
# +0": associative, so a chunk's rows fold at once. With x first (MAX(x, c)) the NaN kept is the newest one.
_MAX_SHAPE = (("max", "f32"), ("setp", "eq", "f32"), ("and", "b32"), ("selp", "f32"), ("setp", "nan", "f32"), ("add", "rn", "f32"), ("selp", "f32"))


def max_fold(instrs: list[Instr], carried: str) -> tuple[str, bool] | None:
  """(x, c first) when the region is exactly the rendered MAX of the carried register c and one other register x."""
  if len(instrs) != 7 or any(i.pred is not None or i.op != sh[0] or set(i.mods) != set(sh[1:]) or len(i.args) != 3 + (i.op == "selp")
                             for i, sh in zip(instrs, _MAX_SHAPE)): return None
  if any(o.kind != "reg" for i in instrs for o in i.args): return None
  r = [[o.value for o in i.args] for i in instrs]
  a, b = r[0][1], r[0][2]
  if carried not in (a, b) or a == b or any(r[j][1:] != [a, b] for j in (1, 2, 4, 5)): return None
  d_max, p_eq, d_and, p_nan, d_add = r[0][0], r[1][0], r[2][0], r[4][0], r[5][0]
  d_sel = r[3][0]
  x = b if a == carried else a
  if r[3][1:] != [d_and, d_max, p_eq] or r[6] != [carried, d_add, d_sel, p_nan]: return None
  names = [d_max, p_eq, d_and, p_nan, d_add, carried, x]
  if len(set(names)) != 7 or (d_sel != d_max and d_sel in names): return None
  return x, a == carried


def max_fold_rows(c: np.ndarray, X: np.ndarray, c_first: bool) -> np.ndarray:
  """The carried value (uint32 bits, n lanes) after folding rows X (k x n, uint32 bits) in order, as the rendered MAX."""
  allv = np.concatenate([c[None, :], X], axis=0)   # (k + 1, n): the start value first
  f = allv.view(np.float32)
  isnan = np.isnan(f)
  key = (allv.view(np.int32) ^ ((allv >> np.uint32(31)).astype(np.int32) * np.int32(0x7FFFFFFF)))   # total order, -0 < +0
  cols = np.arange(allv.shape[1])
  out = allv[key.argmax(axis=0), cols]
  anynan = isnan.any(axis=0)
  if anynan.any():
    pick = isnan.argmax(axis=0) if c_first else allv.shape[0] - 1 - isnan[::-1].argmax(axis=0)
    out = np.where(anynan, allv[pick, cols] | np.uint32(0x00400000), out)
  return out
