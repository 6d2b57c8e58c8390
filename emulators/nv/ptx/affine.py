"""Affine integer registers of a loop run as arrays (emulators/nv/ptx/loops.py): index and address arithmetic whose value in
iteration k is a + b*k per lane, with a and b per-lane arrays or integers. Such an instruction is computed once per loop
run on n-lane arrays instead of once per chunk on (iterations x lanes) arrays; a register is made a (k x n) array only
where a non-affine instruction (a load's address, a compare) reads it: one broadcast add instead of a chain of integer
instructions.

Exactness: the plan computes with exact integers (int64 arrays whose bounds are checked first) and accepts a result only
when every value it takes over the loop's iterations lies in [0, 2^(8w-1)) for its register's width w: the register then
holds exactly that value, the same under every signed or unsigned reading of that width, and the ring identities of
wrapping add/sub/mul/shl say nothing was lost. Anything else (a value that may be negative or overflow, a product of two
iteration-dependent values, another instruction or type) is simply not affine and runs through its step closure."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulators.nv.ptx.parse import TYPES, Entry, Instr, Operand

enabled = True   # False: every instruction of a loop run as arrays steps on (iterations x lanes) arrays (tests compare both)
MIN_TRIPS = 16   # shorter loops step every instruction (planning costs more Python per instruction than it saves there)
MIN_ELEMS = 16384   # nor is a loop planned whose iterations x lanes are at most this (matmul 64's 16 x 1,024, sum's 1,000 x 1: planning cost more)
_LIMIT = 1 << 62   # bounds beyond this are refused (int64 products and sums stay exact)


@dataclass(eq=False)
class Aff:
  """value(k) = a + b * k per lane (k: the iteration, 0 for the first one of this loop run); w: the register's bytes."""
  a: np.ndarray | int
  b: np.ndarray | int
  alo: int
  ahi: int
  blo: int
  bhi: int
  w: int

  def bounds(self, T: int) -> tuple[int, int]:
    ends = (self.blo * 0, self.blo * (T - 1), self.bhi * 0, self.bhi * (T - 1))
    return self.alo + min(ends), self.ahi + max(ends)

  def rows(self, ks: np.ndarray, n: int) -> np.ndarray:
    """The values of iterations ks for every lane, (len(ks) * n,) typed as the register's width (int32 / int64). Every
    value, and so b * k (a value less a, both in range), fits that width: computed in it."""
    dt = np.int32 if self.w == 4 else np.int64
    a = self.a.astype(dt)[None, :] if isinstance(self.a, np.ndarray) else dt(self.a)
    if isinstance(self.b, np.ndarray): v = a + self.b.astype(dt)[None, :] * ks.astype(dt)[:, None]
    else: v = a + (ks * self.b).astype(dt)[:, None]
    if v.shape != (ks.size, n): v = np.broadcast_to(v, (ks.size, n))
    return np.ascontiguousarray(v).reshape(-1)

  def last(self, k: int, n: int) -> np.ndarray:
    """The n lanes' values in iteration k, typed as the register's width."""
    v = np.broadcast_to(np.asarray(self.a + self.b * k, np.int64), (n,)).copy()
    return v.astype(np.int32) if self.w == 4 else v


def _span(x: np.ndarray | int) -> tuple[int, int]:
  return (int(x.min()), int(x.max())) if isinstance(x, np.ndarray) else (x, x)


def _make(a: np.ndarray | int, b: np.ndarray | int, w: int, T: int, bounds: tuple[int, int, int, int] | None = None) -> Aff | None:
  """The affine value a + b*k when it stays in [0, 2^(8w-1)) over T iterations. bounds: (alo, ahi, blo, bhi) known to
  contain every a and b (from the operands' bounds: interval arithmetic), else scanned."""
  (alo, ahi), (blo, bhi) = ((bounds[0], bounds[1]), (bounds[2], bounds[3])) if bounds is not None else (_span(a), _span(b))
  if isinstance(b, np.ndarray) and blo == bhi: b = blo   # one step for every lane (a uniform loop bound times the induction)
  if max(abs(alo), abs(ahi), abs(blo), abs(bhi)) * max(T, 1) >= _LIMIT: return None
  r = Aff(a, b, alo, ahi, blo, bhi, w)
  lo, hi = r.bounds(T)
  return r if 0 <= lo and hi < 1 << (8 * w - 1) else None


def _mul(x: Aff, c: np.ndarray | int, clo: int, chi: int, w: int, T: int) -> Aff | None:
  """x times an iteration-independent c (both bounded: the products stay exact in int64)."""
  m = max(abs(clo), abs(chi))
  if max(abs(x.alo), abs(x.ahi), abs(x.blo), abs(x.bhi)) * max(m, 1) * max(T, 1) >= _LIMIT: return None
  pa, pb = (x.alo * clo, x.alo * chi, x.ahi * clo, x.ahi * chi), (x.blo * clo, x.blo * chi, x.bhi * clo, x.bhi * chi)
  return _make(x.a * c, x.b * c, w, T, (min(pa), max(pa), min(pb), max(pb)))


def _int_type(t: str) -> int | None:
  return TYPES[t] if t[0] in "bsu" and t[1:] in ("32", "64") else None


_OPS = frozenset({"mov", "cvta", "cvt", "add", "sub", "shl", "mul"})


def candidate(ins: Instr) -> bool:
  """Whether Plan.step can find the instruction affine at all (an integer instruction of its table), from its text only:
  loops.py asks only these, once per loop run."""
  return (ins.pred is None and ins.op in _OPS and len(ins.args) >= 2 and ins.args[0].kind == "reg" and len(ins.types) > 0
          and all(_int_type(t) is not None for t in ins.types))


class Plan:
  """The affine view of one loop run: for each body position, the registers' affine values known there."""
  def __init__(self, e: Entry, T: int, n: int, invariant: dict[str, np.ndarray]):
    self.e, self.T, self.n = e, T, n
    self.cur: dict[str, Aff] = {}        # register -> its affine value at the current position
    self.invariant = invariant           # registers the loop reads and never writes -> their bits (seeded when first read)

  def seed(self, r: str, bits: np.ndarray | None, step: int, w: int) -> None:
    """An induction variable (bits: its value before the loop) or an invariant (step 0)."""
    if bits is None or r not in self.e.regs or TYPES[self.e.regs[r]] != w: return
    v = (bits & np.uint64((1 << (8 * w)) - 1)).astype(np.int64) if w < 8 else bits.view(np.int64)
    if w == 8 and (v < 0).any(): return
    f = _make(v, step, w, self.T)
    if f is not None: self.cur[r] = f

  def operand(self, o: Operand, w: int) -> Aff | int | None:
    """An affine source of width w: a register known affine, or an immediate (any sign: the result is checked)."""
    if o.kind == "imm": return int(o.value)
    if o.kind != "reg": return None
    if o.value not in self.cur and o.value in self.invariant:
      self.seed(o.value, self.invariant.pop(o.value), 0, TYPES[self.e.regs.get(o.value, "pred")])
    f = self.cur.get(o.value)
    return f if f is not None and f.w == w else None

  def step(self, ins: Instr) -> Aff | None:
    """The affine value of the instruction's destination, or None (not affine: run its step closure)."""
    if ins.pred is not None or len(ins.args) < 2 or ins.args[0].kind != "reg" or len(ins.types) == 0: return None
    d = ins.args[0].value
    dw = TYPES.get(self.e.regs.get(d, "pred"), 0)
    op, t, T = ins.op, ins.types[0], self.T
    if op in ("mov", "cvta") and len(ins.types) == 1 and len(ins.args) == 2:
      if op == "cvta" and not (ins.has("global") and ins.has("to")): return None
      w = _int_type(t)
      x = self.operand(ins.args[1], w) if w == dw else None
      return x if isinstance(x, Aff) else None
    if op == "cvt" and len(ins.types) == 2 and set(ins.mods) == set(ins.types):
      wd, ws = _int_type(ins.types[0]), _int_type(ins.types[1])
      x = self.operand(ins.args[1], ws) if wd == dw and ws is not None else None
      return _make(x.a, x.b, wd, T, (x.alo, x.ahi, x.blo, x.bhi)) if isinstance(x, Aff) and wd is not None else None
    if len(ins.args) != 3 or len(ins.types) != 1: return None
    w = _int_type(t)
    if w is None: return None
    if op in ("add", "sub") and ins.mods == (t,) and dw == w:
      x, y = self.operand(ins.args[1], w), self.operand(ins.args[2], w)
      if x is None or y is None or (isinstance(x, int) and isinstance(y, int)): return None
      xa, xb, xr = (x.a, x.b, (x.alo, x.ahi, x.blo, x.bhi)) if isinstance(x, Aff) else (x, 0, (x, x, 0, 0))
      ya, yb, yr = (y.a, y.b, (y.alo, y.ahi, y.blo, y.bhi)) if isinstance(y, Aff) else (y, 0, (y, y, 0, 0))
      if op == "add": return _make(xa + ya, xb + yb, w, T, (xr[0] + yr[0], xr[1] + yr[1], xr[2] + yr[2], xr[3] + yr[3]))
      return _make(xa - ya, xb - yb, w, T, (xr[0] - yr[1], xr[1] - yr[0], xr[2] - yr[3], xr[3] - yr[2]))
    if op == "shl" and ins.mods == (t,) and dw == w and ins.args[2].kind == "imm" and 0 <= ins.args[2].value < 8 * w:
      x = self.operand(ins.args[1], w)
      return _mul(x, 1 << ins.args[2].value, 1 << ins.args[2].value, 1 << ins.args[2].value, w, T) if isinstance(x, Aff) else None
    if op == "mul" and t[0] in "su" and ((set(ins.mods) == {t, "lo"} and dw == w) or (set(ins.mods) == {t, "wide"} and w == 4 and dw == 8)):
      x, y = self.operand(ins.args[1], w), self.operand(ins.args[2], w)
      if isinstance(x, int): x, y = y, x
      if not isinstance(x, Aff) or y is None: return None
      if isinstance(y, int): return _mul(x, y, y, y, dw, T)
      if isinstance(x.b, int) and x.b == 0 and x.blo == x.bhi == 0: x, y = y, x   # the iteration-independent one second
      if not (isinstance(y.b, int) and y.b == 0): return None   # a product of two iteration-dependent values
      return _mul(x, y.a, y.alo, y.ahi, dw, T)
    return None
