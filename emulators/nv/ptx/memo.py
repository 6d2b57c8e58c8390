"""Launch-shape values kept from one launch to the next: index arithmetic that depends on nothing but the launch shape
(%tid, %ctaid, immediates, a counted loop's induction variable) gives the same arrays in every launch of that shape, and
a kernel launched again (every call of a tensor program) need not compute them again.

The memo is by identity, so it never has to know what a value means: a pure register instruction (no memory, no special
state) whose register operands are all read-only arrays (the launch shape's special registers, or results kept here)
stores its result, made read-only, under its operands' ids; the next time it meets the very same operand arrays (kept
alive by the entry, so an id is never reused while it is stored) it writes the stored result instead of computing it.
Read-only arrays are never written in place (a partial write copies first: Launch.put_bits), so a stored result stays
the value it was. Only instructions whose destination can hold such a value (`plan`: every write of it is a pure
instruction of such registers) are wrapped; one that keeps missing (a loop stepped iteration by iteration makes fresh
operands every time) stops trying. `derived` keeps values made from read-only arrays the same way (a loop run's tiled
invariants, induction rows and trip count, a fused load's element indices, a kept value's bits). Bounded: FIFO eviction
above BUDGET bytes."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from emulators.nv.ptx.parse import Entry, Instr, Operand

if TYPE_CHECKING:
  from emulators.nv.ptx.execute import Launch

enabled = True   # False: nothing kept (tests compare both)
BUDGET = 48 << 20   # bytes of stored arrays (results and what `derived` made), oldest dropped first
MAX_ENTRIES = 1 << 14
GIVE_UP = 64   # an instruction stops trying after this many misses with fewer than a quarter as many hits

# register-only instructions whose result is a function of their operands alone (no memory, carry flag or special state)
PURE = frozenset({"add", "sub", "mul", "mad", "mul24", "mad24", "shl", "shr", "and", "or", "xor", "not", "cnot", "neg", "abs", "min", "max",
                  "setp", "selp", "cvt", "mov", "div", "rem", "slct", "bfe", "bfi", "prmt", "popc", "clz", "brev", "lop3", "shf", "sad",
                  "fma", "sqrt", "rcp", "ex2", "lg2", "sin", "cos", "tanh", "copysign", "testp"})

_store: dict[tuple, tuple] = {}   # key -> (operands kept alive, value, bytes)
_bytes = 0
counts = [0, 0]   # values taken from the memo, values stored (tests read them)
_lock = threading.Lock()   # (each mock GPU runs its kernels on its own worker thread: stores and evictions one at a time)


def clear() -> None:
  global _bytes
  with _lock:
    _store.clear()
    _bytes = 0


def _keep(key: tuple, entry: tuple, nbytes: int) -> None:
  global _bytes
  with _lock:
    if (old := _store.pop(key, None)) is not None: _bytes -= old[2]
    _store[key] = entry
    _bytes += nbytes
    while (_bytes > BUDGET or len(_store) > MAX_ENTRIES) and _store:
      _bytes -= _store.pop(next(iter(_store)))[2]


def _frozen(v: Any) -> bool:
  """v is a read-only array whose memory nothing writes: its own, or all of one read-only array's (a typed view)."""
  if not isinstance(v, np.ndarray) or v.flags.writeable: return False
  b = v.base
  return b is None or (isinstance(b, np.ndarray) and b.base is None and not b.flags.writeable and b.nbytes == v.nbytes)


def _freeze(v: np.ndarray) -> bool:
  """Make a fresh result read-only (its base too, when it is a typed view of a fresh array); False where it is not fresh."""
  b = v.base
  if b is None:
    if not v.flags.owndata: return False
  elif not (isinstance(b, np.ndarray) and b.base is None and b.flags.owndata and b.nbytes == v.nbytes): return False
  else: b.setflags(write=False)
  v.setflags(write=False)
  return True


def _regs(o: Operand) -> list[str] | None:
  """The registers an operand reads; None where it reads anything else a memo cannot key on (a symbol, an address)."""
  if o.kind == "reg": return [str(o.value)]
  if o.kind in ("imm", "fimm"): return []
  if o.kind == "not" and isinstance(o.value, Operand): return _regs(o.value)
  return None


def _shape(ins: Instr, e: Entry) -> tuple[str, list[str]] | None:
  """(destination, register operands) of an instruction the memo may wrap."""
  if ins.op not in PURE or ins.pred is not None or not ins.args or ins.args[0].kind != "reg" or any("cc" in m for m in ins.mods): return None
  d = str(ins.args[0].value)
  srcs: list[str] = []
  for o in ins.args[1:]:
    r = _regs(o)
    if r is None: return None
    srcs += r
  return d, srcs


def plan(e: Entry, specials: frozenset[str]) -> dict[int, tuple[str, tuple[str, ...]]]:
  """Position -> (destination, register operands) of the instructions worth wrapping: those writing a launch-shape
  register, i.e. one every write of which is a pure instruction of launch-shape registers and immediates, or a mov.u32
  of one of `specials`, the special registers kept per launch shape (a fixpoint over the whole entry, control flow
  aside: the memo itself is exact whatever the values)."""
  writes: dict[str, list[tuple[int, list[str] | None]]] = {}
  for i, ins in enumerate(e.instrs):
    if not ins.args or ins.op in ("st", "red", "bra", "ret", "exit", "bar", "barrier"): continue
    s = _shape(ins, e)
    if s is not None and s[0] in e.regs:
      srcs = s[1]
      if ins.op == "mov" and len(srcs) == 1 and srcs[0] not in e.regs:
        srcs = [] if srcs[0] in specials else None   # type: ignore[assignment]
      elif any(r not in e.regs for r in srcs): srcs = None   # type: ignore[assignment]
      writes.setdefault(s[0], []).append((i, srcs))
    else:
      for r in _dests(ins.args[0]): writes.setdefault(r, []).append((i, None))
  geo = {r for r, ws in writes.items() if all(s is not None for _, s in ws)}
  changed = True
  while changed:
    changed = False
    for r in list(geo):
      if any(x not in geo for _, s in writes[r] for x in s):  # type: ignore[union-attr]
        geo.discard(r)
        changed = True
  out = {}
  for r in geo:
    for i, s in writes[r]:   # (a mov of a special register is one kept array already; a constant is kept too: its readers key on it)
      if s or e.instrs[i].op != "mov" or all(o.kind != "reg" for o in e.instrs[i].args[1:]): out[i] = (r, tuple(dict.fromkeys(s)))  # type: ignore[arg-type]
  return out


def _dests(o: Operand) -> list[str]:
  if o.kind == "reg": return [str(o.value)]
  if o.kind in ("vec", "pair"): return [r for x in o.value for r in _dests(x)]  # type: ignore[union-attr]
  return []


def wrap(f: Callable[[Launch], None], d: str, srcs: tuple[str, ...]) -> Callable[[Launch], None]:
  """f, with its result kept per operand arrays (see the module doc)."""
  stats = [0, 0]   # hits, misses
  tag = object()
  def step(L: Launch) -> None:
    if L.sel.size != L.n or (stats[1] >= GIVE_UP and stats[0] * 4 < stats[1]): return f(L)
    regs, defined = L.regs, L.defined
    xs = [dict.get(regs, s) for s in srcs]
    key = (tag, L.n, *map(id, xs))
    # a stored entry keeps its operands alive: an id found is that very (read-only) array, checked once when stored
    if (hit := _store.get(key)) is not None and (not L.checked or all(defined.get(s) is None for s in srcs)):
      stats[0] += 1
      counts[0] += 1
      v, typed = hit[1]
      if typed:
        regs[d] = L.typed[d] = v
        if L.checked: defined[d] = None
      else: L.put_bits(d, v, None)
      return None
    if not all(_frozen(x) for x in xs) or (L.checked and any(defined.get(s) is not None for s in srcs)): return f(L)
    stats[1] += 1
    f(L)
    v = dict.get(regs, d)
    if v is None or (L.checked and defined.get(d) is not None) or not _freeze(v): return None
    _keep(key, (xs, (v, L.typed.get(d) is v), v.nbytes), v.nbytes)
    counts[1] += 1
    return None
  step.memo = stats   # type: ignore[attr-defined]
  return step


def derived(kind: str, src: Any, args: tuple, make: Callable[..., Any], *margs: Any) -> Any:
  """make(*margs), a value (arrays made read-only, a number, or None) that follows from src and args alone, kept per
  (kind, src, args). src: a read-only array, or a tuple of them and of other objects make reads nothing mutable of (a
  loop's plan); nothing is kept unless every array in it is read-only."""
  if not enabled: return make(*margs)
  srcs = src if isinstance(src, tuple) else (src,)
  key = (kind, *map(id, srcs), *args)
  # (stored only for read-only arrays, kept alive by the entry: an id found is that very object)
  if (hit := _store.get(key)) is not None and all(a is b for a, b in zip(hit[0], srcs)):
    counts[0] += 1
    return hit[1]
  v = make(*margs)
  if not all(_frozen(a) for a in srcs if isinstance(a, np.ndarray)) or not any(isinstance(a, np.ndarray) for a in srcs): return v
  arrs = [a for a in (v if isinstance(v, tuple) else (v,)) if isinstance(a, np.ndarray)]
  if not all(_frozen(a) if not a.flags.writeable else _freeze(a) for a in arrs): return v
  nbytes = sum(a.nbytes for a in arrs)
  _keep(key, (srcs, v, nbytes), nbytes)
  counts[1] += 1
  return v


def apply(e: Entry, fns: list, specials: frozenset[str]) -> list:
  """fns with the planned instructions wrapped (in place)."""
  for i, (d, srcs) in plan(e, specials).items():
    if fns[i] is not None: fns[i] = wrap(fns[i], d, srcs)
  return fns
