"""Address chains fused into their global access, in straight-line code: refgrad's and nvcc's

    mul.wide.s32 %rdA, %rX, c;  add.s64 %rdB, %rdP, %rdA;  ld/st.global [%rdB+off] ...

(either add operand order) where %rdA is read by the add only and %rdB by the access only (dead after it, outside every
loop). The mul and the add then do nothing, and the access finds its elements from %rX directly: P + c * x + off per lane
with P one value for every lane (a parameter's pointer), bounds from x's extremes and element indices from x
(Launch.gather_scaled / scaled_offsets: no 64-bit product, sum or address per lane). Where that does not apply (P differs
between lanes, some lanes only, an undefined operand, an address outside one mapping or not aligned, undefined memory in
checked mode) the two instructions run as steps before the access, which then runs as always: the same values, faults and
reports. Loops run as arrays fuse their own chains (loops.Fused)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from emulators.nv.ptx.execute import Launch
from emulators.nv.ptx.parse import TYPES, Entry, Instr, Operand

Step = Callable[[Launch], None]
enabled = True   # False: every chain stepped (tests compare both)


def wide_mul(e: Entry, mu: Instr) -> tuple[str, bool, int] | None:
  """(x, signed, c) of an unguarded `mul.wide.{s,u}32 d, x, c` of a 32-bit register x and an immediate 0 < c < 2^31."""
  t = mu.types[0] if len(mu.types) == 1 else ""
  if mu.op != "mul" or mu.pred is not None or t not in ("s32", "u32") or set(mu.mods) != {"wide", t} or len(mu.args) != 3: return None
  d, xo, co = mu.args
  if d.kind != "reg" or xo.kind != "reg" or co.kind != "imm" or not 0 < co.value < 1 << 31 or TYPES.get(e.regs.get(str(xo.value), "pred")) != 4: return None
  return str(xo.value), t == "s32", co.value


def add64(ad: Instr) -> list[str] | None:
  """The two source registers of an unguarded `add.{s,u}64` of registers."""
  if ad.op != "add" or ad.pred is not None or ad.types not in (("s64",), ("u64",)) or ad.mods != ad.types or len(ad.args) != 3: return None
  return None if any(o.kind != "reg" for o in ad.args) else [str(o.value) for o in ad.args[1:]]


def global_width(ac: Instr) -> int | None:
  """The bytes per lane (1, 2, 4, 8 or 16) of an unguarded global ld or st of one type (scalar, v2 or v4)."""
  if ac.op not in ("ld", "st") or not ac.has("global") or ac.pred is not None or len(ac.types) != 1 or ac.has("v8"): return None
  w = TYPES[ac.types[0]] * (4 if ac.has("v4") else 2 if ac.has("v2") else 1)
  return w if w in (1, 2, 4, 8, 16) else None


def scaled(PL: Launch, XL: Launch, p: str, x: str, signed: bool, off: int) -> tuple[int, np.ndarray] | None:
  """(P + off, x's low 32 bits as int32 or uint32) when P (a register of PL) is one defined 64-bit value for every lane and
  x (of XL) is defined; else None (the chain is stepped)."""
  pv, xv = PL.regs.raw(p), XL.regs.raw(x)
  if pv is None or xv is None or pv.itemsize != 8 or not pv.size or xv.itemsize not in (4, 8): return None
  if PL.checked and (PL.defined.get(p) is not None or XL.defined.get(x) is not None): return None
  if pv.strides != (0,) and pv.min() != pv.max(): return None   # (a parameter's pointer: one broadcast value)
  xs = (xv if xv.itemsize == 4 else xv.astype(np.uint32)).view(np.int32 if signed else np.uint32)   # (bits: the low 32)
  return int(pv[:1].view(np.uint64)[0]) + off, xs


def chain(e: Entry, i: int) -> tuple[str, bool, int, str, int, int] | None:
  """(x, signed, c, P, offset, access bytes) when instrs[i:i + 3] are such a chain (its registers' reads not checked)."""
  instrs = e.instrs
  if i + 2 >= len(instrs): return None
  mu, ad, ac = instrs[i:i + 3]
  if (m := wide_mul(e, mu)) is None or (ops := add64(ad)) is None or (w := global_width(ac)) is None: return None
  ra = str(mu.args[0].value)
  if ops.count(ra) != 1: return None
  p, rb = ops[1 - ops.index(ra)], str(ad.args[0].value)
  if p in (rb, ra) or TYPES.get(e.regs.get(p, "pred")) != 8 or TYPES.get(e.regs.get(rb, "pred")) != 8: return None
  a = ac.args[1] if ac.op == "ld" else ac.args[0]
  if a.kind != "addr" or a.value.kind != "reg" or str(a.value.value) != rb: return None
  return *m, p, a.offset, w


def fuse(e: Entry, fns: list[Step | None], dead: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
  """Fuse each chain of e (the access's pre-decoded step taking L.pre): fns changed in place; the dead registers per
  position, with x and P now dropped after the access (it reads them)."""
  if not enabled: return dead
  dead = list(dead)
  targets = set(e.labels.values())
  i = 0
  while i + 2 < len(fns):
    c = chain(e, i)
    j, l = i + 1, i + 2
    fa = fns[l]
    if c is None or j in targets or l in targets or not getattr(fa, "takes_pre", False) or fns[i] is None or fns[j] is None:
      i += 1
      continue
    x, signed, cst, p, off, w = c
    ra, rb = str(e.instrs[i].args[0].value), str(e.instrs[j].args[0].value)
    if rb not in dead[l] or (ra != rb and ra not in dead[j]) or (e.instrs[l].op == "st" and rb in _names(e.instrs[l].args[1])):
      i += 1
      continue
    moved = [r for r in (x,) if r in dead[i]] + [r for r in (p,) if r in dead[j]] + [r for r in (ra,) if ra != rb and r in dead[j]]
    dead[i] = tuple(r for r in dead[i] if r != x)
    dead[j] = tuple(r for r in dead[j] if r not in (p, ra))
    dead[l] = tuple(dict.fromkeys(dead[l] + tuple(moved)))
    fns[l] = _fused(e.instrs[i], fns[i], e.instrs[j], fns[j], e.instrs[l], fa, x, signed, cst, p, off, w)  # type: ignore[arg-type]
    fns[i] = fns[j] = _nothing
    i += 3
  return dead


def _names(o: Operand) -> list[str]:
  if o.kind == "reg": return [str(o.value)]
  if o.kind in ("vec", "pair"): return [r for x in o.value for r in _names(x)]  # type: ignore[union-attr]
  return []


def _nothing(L: Launch) -> None:
  """The mul and the add of a fused chain: the access computes them where it needs them."""


def _fused(mi: Instr, mf: Step, ai: Instr, af: Step, ins: Instr, f: Step, x: str, signed: bool, c: int, p: str, off: int, w: int) -> Step:
  load = ins.op == "ld"
  def step(L: Launch) -> None:
    got = None
    if L.sel.size == L.n and (s := scaled(L, L, p, x, signed, off)) is not None:
      got = L.gather_scaled(*s, c, w) if load else L.scaled_offsets(*s, c, w)
    if got is None:   # the chain as steps, then the access as always
      for ci, cf in ((mi, mf), (ai, af)):
        L.ins, L._d = ci, None
        cf(L)
      L.ins, L._d = ins, None
      return f(L)
    L.pre = (ins, got)
    try: f(L)
    finally: L.pre = None
  return step
