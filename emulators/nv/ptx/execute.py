"""The PTX executor: every thread of a launch is a numpy lane; one Python step per executed instruction.

- Scheduling: each lane has a PC; a step runs the instruction at the smallest PC among runnable lanes, for every lane
  at that PC. Divergent paths thus reconverge at the first common PC (loops with different trip counts, early ret).
- bar.sync: lanes wait until every live lane of their CTA waits at the same barrier instruction; a CTA where some lanes
  wait while the others exited, or wait at another barrier, is a fault (divergent / partial barrier).
- Warps: the CTA's threads (x fastest) padded to a multiple of 32; lane g is laneid g % 32 of warp g // 32.
- Registers hold raw bits (uint64) plus, in checked mode, which lanes hold defined values (memcheck model: loads of
  undefined memory give undefined values; using one as an address or branch condition is reported).
- Memory: .global through the mock VM (a bad address is an MMU fault), .shared one array per CTA, .local per lane,
  .param from constant buffer 0. Generic addresses: shared and local windows above the 40-bit VM range.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from emulators.nv.ptx import memo as _memo
from emulators.nv.ptx import semantics as S
from emulators.nv.ptx.parse import GLOBAL_WINDOW, TYPES, Entry, Instr, Operand

SHARED_WINDOW, LOCAL_WINDOW, WINDOW_SIZE = 1 << 48, 2 << 48, 1 << 32   # (GLOBAL_WINDOW, parse.py: module variables, a fresh copy of their bytes per launch)
_LOG2 = {2: 1, 4: 2, 8: 3}
MAX_STEPS = 5_000_000   # instruction steps per launch before an endless loop is reported (not a hang)


class PTXFault(Exception):
  """A fault found while running: kind is mmu / compute; line is the PTX line; address the faulting one."""
  def __init__(self, kind: str, msg: str, ins: Instr | None, address: int | None = None):
    where = f" at PTX line {ins.line} ({ins.text.strip()})" if ins is not None else ""
    super().__init__(msg + where)
    self.kind, self.ins, self.address = kind, ins, address


_GEOMETRY: dict[tuple[int, int, int], tuple[np.ndarray, ...]] = {}


def _geometry(per_cta: int, ncta: int, nt: int) -> tuple[np.ndarray, ...]:
  """(lane ids, CTA of each lane, thread of each lane in its CTA, live lanes, initial PCs, live lane ids) of a launch shape,
  kept for the next launch of the same shape (read-only arrays)."""
  key = (per_cta, ncta, nt)
  if (r := _GEOMETRY.get(key)) is not None: return r
  g = np.arange(per_cta * ncta, dtype=np.int64)
  cta, t = g // per_cta, g % per_cta
  live = t < nt
  r = (g, cta, t, live, np.where(live, 0, -1).astype(np.int64), np.flatnonzero(live))
  for a in r: a.setflags(write=False)
  if len(_GEOMETRY) >= 64: _GEOMETRY.pop(next(iter(_GEOMETRY)))
  _GEOMETRY[key] = r
  return r


_U64 = np.dtype(np.uint64)


def _to_bits(v: np.ndarray) -> np.ndarray:
  """A register's typed value (an array of the register's width) as raw bits (uint64)."""
  return v.view(np.uint64) if v.itemsize == 8 else v.view(S.UINT[v.itemsize]).astype(np.uint64)


def _bits_of(v: np.ndarray) -> np.ndarray:
  """_to_bits, kept with v when v is a kept launch-shape value (memo.py: its readers key on the bits array then)."""
  return _to_bits(v) if v.flags.writeable else _memo.derived("bits", v, (), _to_bits, v)


class Regs(dict):
  """Register -> raw bits (uint64 per lane). An entry may hold the value typed instead (an array as wide as the register,
  any dtype: Launch.put_typed), its bits made when first read: a float op feeding float ops never converts to bits."""
  def get(self, k: str, default: Any = None) -> Any:
    r = dict.get(self, k)
    if r is None: return default
    if r.dtype is not _U64:
      r = _bits_of(r)
      dict.__setitem__(self, k, r)
    return r

  def __getitem__(self, k: str) -> np.ndarray:
    r = dict.__getitem__(self, k)
    if r.dtype is not _U64:
      r = _bits_of(r)
      dict.__setitem__(self, k, r)
    return r

  def raw(self, k: str) -> np.ndarray | None:
    """The entry as stored (typed or bits), without making bits."""
    return dict.get(self, k)


_ELEM = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
_V16 = np.dtype("V16")


def _lane_stride(a: np.ndarray | int, n: int) -> tuple[int, int] | None:
  """(first address, bytes between neighbouring lanes) when a's n lane addresses are evenly spaced upwards (one address:
  spacing 0), else None."""
  if not isinstance(a, np.ndarray): return int(a), 0
  if a.size != n or n == 0: return None
  a0 = int(a[0])
  if n == 1: return a0, 0
  s = int(a[1]) - a0
  if s < 0 or int(a[-1]) - a0 != s * (n - 1): return None
  if n > 2 and not np.array_equal(a, np.arange(n, dtype=a.dtype) * a.dtype.type(s) + a.dtype.type(a0)): return None
  return a0, s


class Launch:
  """The state of one launch of one entry."""
  def __init__(self, entry: Entry, grid: tuple[int, int, int], block: tuple[int, int, int], params: bytes, vm: Any,
               shared_bytes: int, checked: bool):
    self.e, self.grid, self.block, self.params, self.vm, self.checked = entry, grid, block, params, vm, checked
    nt = block[0] * block[1] * block[2]
    # warps of 32 lanes (the CTA padded with exited lanes) only where warp-level instructions need them
    self.per_cta = -(-nt // 32) * 32 if entry.warp_ops else nt
    self.ncta = grid[0] * grid[1] * grid[2]
    n = self.n = self.per_cta * self.ncta
    g, self.cta, t, self.live, pc0, self.everyone = _geometry(self.per_cta, self.ncta, nt)
    self._t = t
    self.shared_bytes = shared_bytes
    self.special = _Specials(self)
    self.regs = Regs()
    self.pref: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}   # coalesced byte loads: (group, byte) -> (lanes, bytes)
    # (ld, its bytes) read ahead by a loop run (loops.py) or a fused address chain (chains.py); (st, (mapping, offsets)) of one
    self.pre: tuple[Instr, Any] | None = None
    self.typed: dict[str, np.ndarray] = {}   # register -> its whole value as a typed array (put_typed; dropped on the next write)
    self.defined: dict[str, np.ndarray] = {}
    self.shared = np.zeros((self.ncta, max(shared_bytes, 1)), np.uint8)
    self.shared_def = np.zeros((self.ncta, max(shared_bytes, 1)), np.bool_) if checked else None
    self.local = np.zeros((n, max(entry.local_bytes, 1)), np.uint8)
    self.local_def = np.zeros(self.local.shape, np.bool_) if checked else None   # as shared_def: never-written bytes are undefined
    self.pc = pc0.copy()                                        # -1: exited
    self.waiting = np.zeros(n, np.bool_)                        # at a barrier
    self.clock = 0
    self.ins: Instr | None = None
    self.sel: np.ndarray = g
    self._d: np.ndarray | None = None
    self._map: tuple[np.ndarray, np.ndarray] | None = None
    self._gv: np.ndarray | None = None
    self._last: tuple[int, int, Any] | None = None   # (va, end, region) of the mapping the last global access used
    self.touched: dict[int, Any] = {}   # id(Memory) -> Memory whose definedness a store changed (settled at the end)
    self.mem_views: dict[int, dict[int, np.ndarray]] = {}   # id(Memory) -> element size -> the bytes viewed as that size (_elements)
    self.atomic = False   # inside barrier operations (mbarrier) and cp.async completions: no race reports
    self.race = (np.full(self.shared.size, -1, np.int64), np.full(self.shared.size, -1, np.int64)) if checked and shared_bytes else None
    # a strong access (atom/red, ld/st .relaxed .acquire .release .volatile) runs with strong set and sem its ordering
    self.strong, self.sem = False, None
    self.srace: tuple[np.ndarray, np.ndarray] | None = None   # strong accesses' (writer, reader) per shared byte, made at the first
    self.sspan: np.ndarray = np.zeros(0, np.int64)
    self.released: dict[int, np.ndarray] = {}   # first shared byte of a release -> the bytes its thread accessed before it
    self.fenced: np.ndarray | None = None   # lanes that ran a fence (membar, fence.sc/acq_rel): their strong writes release
    self.pending: dict[int, set[int]] = {}   # lane -> released bytes its strong reads read: acquired at its next fence
    self.bar_state: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None   # named barriers: (arrivals, expected) per CTA x id, waited id per lane
    self.bar_val: np.ndarray | None = None   # bar.red predicates, per lane, taken at arrival
    self.cp_async: Any = None   # cp.async copies not completed yet (emulators/nv/ptx/cpasync.py)

  # ---- operands ---------------------------------------------------------------------------------------------------
  def pred(self, o: Operand) -> tuple[np.ndarray, np.ndarray | None]:
    """A predicate register as bools for the selected lanes, and which are defined (None: all): the bool array a setp
    kept (every lane) as it is, else from the bits."""
    if o.kind == "reg" and self.sel.size == self.n and (r := self.regs.raw(o.value)) is not None and r.dtype == np.bool_:
      return r, self.defined.get(o.value)
    b, d = self.bits(o)
    return b != 0, d

  def bits(self, o: Operand) -> tuple[np.ndarray, np.ndarray | None]:
    """Raw bits (uint64) of an operand for the selected lanes, and which are defined (None: all)."""
    sel = self.sel
    if o.kind == "reg":
      name = o.value
      r = self.regs.get(name)
      if r is not None:
        d = self.defined.get(name)
        if sel.size == self.n: return r, d   # every lane: the register itself (handlers never write into operands)
        return r[sel], (d[sel] if d is not None else None)
      if name in self.special: return (self.special[name] if sel.size == self.n else self.special[name][sel]), None
      if (t := _TIMERS.get(name)) is not None: return np.full(sel.size, t(self.clock), np.uint64), None
      if name in self.e.regs:   # declared, never written
        return np.zeros(sel.size, np.uint64), (np.zeros(sel.size, np.bool_) if self.checked else None)
      raise PTXFault("compute", f"register {name} is not declared", self.ins)
    if o.kind == "imm": return np.full(sel.size, o.value & 0xFFFFFFFFFFFFFFFF, np.uint64), None
    if o.kind == "fimm": return np.full(sel.size, o.value[0], np.uint64), None
    if o.kind == "sym": return np.full(sel.size, self.symbol(o.value) + o.offset, np.uint64), None
    raise PTXFault("compute", f"operand {o} cannot be read here", self.ins)

  def symbol(self, name: str) -> int:
    e = self.e
    if name in e.shared: return e.shared[name].offset
    if name in e.local: return e.local[name].offset
    for p in e.params:
      if p.name == name: return p.offset
    if name in e.globals: return GLOBAL_WINDOW + e.globals[name].offset
    raise PTXFault("compute", f"unknown symbol {name}", self.ins)

  def get(self, o: Operand, t: str) -> np.ndarray:
    """Operand value as type t (float immediates are converted to t's width)."""
    if o.kind == "fimm" and S.is_float(t):
      v, w = o.value
      x = np.array([v], np.uint64).view(np.float64) if w == 8 else np.array([v], np.uint32).view(np.float32)
      f = x.astype(S.NP[t]) if t not in ("bf16",) else S.f32_to_bf16(x.astype(np.float32))
      return np.repeat(f, self.sel.size)
    if o.kind == "not":
      v = self.get(o.value, "pred")
      return ~v
    if o.kind == "reg" and t != "pred" and self.sel.size == self.n and (r := self.regs.raw(o.value)) is not None and r.itemsize == TYPES[t]:
      d = self.defined.get(o.value)   # every lane, a value as wide as t (typed or 8-byte bits): a view, no conversion
      if d is not None: self._d = d if self._d is None else self._d & d
      return r.view(S.NP[t] if t != "bf16" else np.uint16)
    b, d = self.bits(o)
    if d is not None: self._d = d if self._d is None else self._d & d
    if o.kind == "imm" and S.is_float(t):   # an integer literal where a float is expected is its value
      return np.full(self.sel.size, float(o.value), S.NP[t] if t != "bf16" else np.float32)
    w = TYPES[t]
    if t == "pred": return b != 0
    u = b.astype(S.UINT[w]) if w < 8 else b
    return u.view(S.NP[t]) if t not in ("bf16",) else u

  def get_defined(self, o: Operand, t: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Operand value as type t and which lanes hold defined values (None: all), kept out of the instruction's running
    definedness (for instructions whose result depends on one operand per lane, e.g. selp)."""
    saved, self._d = self._d, None
    try: return self.get(o, t), self._d
    finally: self._d = saved

  def put(self, o: Operand, t: str, v: np.ndarray, d: np.ndarray | None = None) -> None:
    """Write values of type t into a register for the selected lanes (sign-extended for signed types)."""
    if o.kind == "sym" and o.value == "_": return   # the sink
    if o.kind != "reg": raise PTXFault("compute", f"destination {o.value} is not a register", self.ins)
    name = o.value
    rt = self.e.regs.get(name)
    if rt is None: raise PTXFault("compute", f"register {name} is not declared", self.ins)
    if t == "pred" or rt == "pred": b = np.asarray(v).astype(np.bool_).astype(np.uint64)
    else:
      v = np.asarray(v)
      if v.ndim == 1 and v.size == self.n == self.sel.size and v.dtype.kind in "iuf" and v.itemsize == TYPES[rt] and v.flags.owndata:
        return self.put_typed(name, v, self._d if d is None else d)   # its own array as wide as the register: kept typed
      if v.dtype == np.bool_: v = v.astype(np.uint8)
      if v.dtype.kind == "i": b = v.astype(np.int64).view(np.uint64)
      elif v.dtype.kind == "f": b = v.view(S.UINT[v.itemsize]).astype(np.uint64)
      else: b = v.astype(np.uint64)
      w = TYPES[rt]
      if w < 8: b = b & np.uint64((1 << (8 * w)) - 1)
    if d is None: d = self._d
    if b.size != self.sel.size: b = np.broadcast_to(b, self.sel.shape).copy()
    self.put_bits(name, b, d)

  def put_typed(self, name: str, v: np.ndarray, d: np.ndarray | None) -> None:
    """Write typed values (an array as wide as the register, e.g. float32 into a .f32/.b32 register): while every lane
    runs, kept typed (readers of that type take it as is; the bits are made when first read), else as bits."""
    if self.sel.size != self.n: return self.put_bits(name, _to_bits(v), d)
    self.regs[name] = self.typed[name] = v
    if self.checked: self.defined[name] = None if d is None or d.all() else d.copy()

  def put_bits(self, name: str, b: np.ndarray, d: np.ndarray | None) -> None:
    """Write raw register bits (a fresh uint64 array, already masked to the register's width) for the selected lanes;
    d: which lanes hold defined values (None: all)."""
    sel = self.sel
    if self.typed: self.typed.pop(name, None)
    if sel.size == self.n:
      self.regs[name] = b
      if self.checked: self.defined[name] = None if d is None or d.all() else d.copy()
      return
    r = self.regs.raw(name)
    if r is not None and r.dtype is not _U64: r = self.regs[name] = _to_bits(r).copy() if r.itemsize == 8 else _to_bits(r)   # its own storage
    elif r is not None and not r.flags.writeable: r = self.regs[name] = r.copy()   # a shared read-only value (a broadcast parameter)
    if r is None:
      r = self.regs[name] = np.zeros(self.n, np.uint64)
      if self.checked: self.defined[name] = np.zeros(self.n, np.bool_)
    r[sel] = b
    if self.checked:
      dd = self.defined.get(name)
      if dd is None:
        if d is None or d.all(): return
        dd = self.defined[name] = np.ones(self.n, np.bool_)
      dd[sel] = True if d is None else d

  def drop(self, names: tuple[str, ...]) -> None:
    """Forget registers no instruction reads again (their memory is reused by the next results)."""
    for r in names:
      self.regs.pop(r, None)
      self.typed.pop(r, None)
      self.defined.pop(r, None)

  # ---- memory -----------------------------------------------------------------------------------------------------
  def address(self, o: Operand) -> np.ndarray:
    if o.kind != "addr": raise PTXFault("compute", "expected an address operand [..]", self.ins)
    b, d = self.bits(o.value)
    if self.checked and d is not None and not d.all():
      raise PTXFault("compute", f"undefined value used as an address by {self.thread(int(np.flatnonzero(~d)[0]))}", self.ins)
    a = b + np.uint64(o.offset & 0xFFFFFFFFFFFFFFFF)
    if o.value.kind == "reg" and TYPES.get(self.e.regs.get(str(o.value.value), ""), 8) == 4:   # a 32-bit register's sum wraps in
      a &= np.uint64(0xFFFFFFFF)                                                              # 32 bits (shared/local addresses)
    return a

  def thread(self, i: int) -> str: return self.lane_name(int(self.sel[i]))

  def lane_name(self, g: int) -> str:
    return f"thread ({int(self.special['%tid.x'][g])}, {int(self.special['%tid.y'][g])}, {int(self.special['%tid.z'][g])}) " \
           f"of block ({int(self.special['%ctaid.x'][g])}, {int(self.special['%ctaid.y'][g])}, {int(self.special['%ctaid.z'][g])})"

  def space_of(self, ins: Instr) -> str:
    for s in ("global", "shared", "local", "param", "const"):
      if ins.has(s): return s
    return "generic"

  def _flat(self, space: str, addr: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(backing 2-D array view as flat uint8, flat byte index of each lane's first byte, definedness flat or None)."""
    if space == "shared":
      a = addr.astype(np.int64)
      if w > 1 and int(np.bitwise_or.reduce(a)) & (w - 1): self.misaligned(a, w, "shared", 0)
      bad = (a < 0) | (a + w > self.shared_bytes)
      if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PTXFault("mmu", f"shared-memory access of {w} bytes at offset {int(a[i])} outside the CTA's {self.shared_bytes} bytes "
                       f"by {self.thread(i)}", self.ins, int(a[i]))
      return self.shared.reshape(-1), self.cta[self.sel] * self.shared.shape[1] + a, None if self.shared_def is None else self.shared_def.reshape(-1)
    if space == "local":
      a = addr.astype(np.int64)
      if w > 1 and int(np.bitwise_or.reduce(a)) & (w - 1): self.misaligned(a, w, "local", 0)
      bad = (a < 0) | (a + w > self.e.local_bytes)
      if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PTXFault("mmu", f"local-memory access of {w} bytes at offset {int(a[i])} outside the thread's {self.e.local_bytes} bytes "
                       f"by {self.thread(i)}", self.ins, int(a[i]))
      return self.local.reshape(-1), self.sel * self.local.shape[1] + a, None if self.local_def is None else self.local_def.reshape(-1)
    raise AssertionError(space)

  def misaligned(self, a: np.ndarray, w: int, space: str, base: int, store: bool | None = None) -> None:
    """Report the first lane whose address base + a is not a multiple of the access size w (PTX ISA §6.4.1.1: accesses
    must be naturally aligned; a GPU faults with "misaligned address"); return when every lane's is one."""
    full = a.astype(np.int64) + base if base else a.astype(np.int64)
    bad = (full & (w - 1)) != 0
    if not bad.any(): return
    i = int(np.flatnonzero(bad)[0])
    what = f"{space} access" if store is None else f"{space} {'store' if store else 'load'}"
    where = f"0x{int(full[i]) & 0xFFFFFFFFFFFFFFFF:x}" if space == "global" else f"offset {int(full[i])}"
    raise PTXFault("mmu", f"misaligned address: {what} of {w} bytes at {where} (not a multiple of {w}) by {self.thread(i)}", self.ins, int(full[i]))

  def _generic_split(self, addr: np.ndarray) -> dict[str, np.ndarray]:
    sh = (addr >= np.uint64(SHARED_WINDOW)) & (addr < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
    lo = (addr >= np.uint64(LOCAL_WINDOW)) & (addr < np.uint64(LOCAL_WINDOW + WINDOW_SIZE))
    return {"shared": sh, "local": lo, "global": ~(sh | lo)}

  def load(self, space: str, addr: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Bytes (lanes, w) at addr, and which lanes read only defined bytes (None: all)."""
    if space == "generic":
      parts = self._generic_split(addr)
      if parts["global"].all(): return self.load("global", addr, w)
      out, dd = np.zeros((addr.size, w), np.uint8), np.ones(addr.size, np.bool_)
      sel = self.sel
      for sp, m in parts.items():
        if not m.any(): continue
        base = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "global": 0}[sp]
        self.sel = sel[m]
        try: o, d = self.load(sp, addr[m] - np.uint64(base), w)
        finally: self.sel = sel
        out[m] = o
        if d is not None: dd[m] = d
      return out, dd
    if space == "param":
      a = addr.astype(np.int64)
      if ((a < 0) | (a + w > len(self.params))).any(): raise PTXFault("compute", f"a .param read past the {len(self.params)} parameter bytes", self.ins)
      buf = np.frombuffer(self.params, np.uint8)
      return buf[a[:, None] + np.arange(w)], None
    if space in ("global", "const") and self.e.globals_bytes and (addr >= np.uint64(GLOBAL_WINDOW)).any():
      return self._module_vars(addr, w, None), None
    if space == "global": return self._global(addr, w, None)
    flat, idx, defs = self._flat(space, addr, w)
    ix = idx[:, None] + np.arange(w)
    if space == "shared" and self.race is not None and not self.atomic: self._race(ix, False)
    return flat[ix], (defs[ix].all(axis=1) if defs is not None else None)

  def store(self, space: str, addr: np.ndarray, data: np.ndarray, d: np.ndarray | None) -> None:
    w = data.shape[1]
    if space == "generic":
      parts = self._generic_split(addr)
      if parts["global"].all(): return self.store("global", addr, data, d)
      sel = self.sel
      for sp, m in parts.items():
        if not m.any(): continue
        base = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "global": 0}[sp]
        self.sel = sel[m]
        try: self.store(sp, addr[m] - np.uint64(base), data[m], None if d is None else d[m])
        finally: self.sel = sel
      return
    if space in ("param", "const"): raise PTXFault("compute", f"a store to the read-only .{space} space", self.ins)
    if space == "global" and self.e.globals_bytes and (addr >= np.uint64(GLOBAL_WINDOW)).any(): return self._module_vars(addr, w, data)
    if space == "global": return self._global(addr, w, (data, d))
    flat, idx, defs = self._flat(space, addr, w)
    ix = idx[:, None] + np.arange(w)
    if space == "shared" and self.race is not None and not self.atomic: self._race(ix, True)
    flat[ix] = data
    if defs is not None: defs[ix] = True if d is None else d[:, None]

  def _race(self, ix: np.ndarray, write: bool) -> None:
    """Shared-memory race check (checked mode), the PTX memory model's data race (PTX ISA §8.7: two conflicting accesses,
    at least one a write, neither ordered before the other and not morally strong) restricted to one CTA: between two
    barriers of a CTA, a byte written by one thread may not be read or written by another, unless both accesses are
    strong (atom/red, ld/st .relaxed .acquire .release .volatile: every scope includes the CTA's threads, and volatile is
    relaxed.sys); a strong access against a weak one is a race. Per byte and kind (weak: self.race, strong: self.srace):
    the last writer and the reader (-1 none, -2 several, -10 - w: warp w synced, bar.warp.sync). A release/acquire pair
    orders the releasing thread's earlier accesses (_release / _acquire)."""
    strong, weak = self.strong, self.race
    w = ix.shape[1]
    lanes = np.repeat(self.sel, w)
    b = ix.reshape(-1)
    mine = -10 - lanes // 32   # a byte a warp synced (bar.warp.sync) with its own accesses: ordered for that warp's lanes
    kinds = [(weak, False)] + ([(self.srace, True)] if self.srace is not None else [])
    span = None
    for arr, skind in kinds:   # a weak access races with every other access; a strong one with weak ones and mixed sizes
      wr, rd = arr[0][b], arr[1][b]
      # accesses by another thread, not ordered before this one (only strong writers are ever -2: several)
      bad_w = ((wr >= 0) & (wr != lanes)) | ((wr <= -10) & (wr != mine))
      if skind: bad_w |= wr == -2
      bad = bad_w | ((rd != -1) & (rd != lanes) & (rd != mine)) if write else bad_w
      if skind and strong:   # strong against strong: morally strong only when both access the same bytes (§8.6; the last one's kept)
        if not bad.any(): continue
        span = np.repeat(ix[:, 0] * 64 + w, w)
        bad &= self.sspan[b] != span
        bad_w &= bad
      if bad.any():
        k = int(np.flatnonzero(bad)[0])
        wrote = bool(bad_w[k])
        who_id = int(wr[k] if wrote else rd[k])
        who = self.lane_name(who_id) if who_id >= 0 else f"the threads of warp {-who_id - 10} (synced among themselves)" if who_id <= -10 else "other threads"
        kind = (" (strong accesses of different bytes: strong accesses race unless they overlap completely)" if skind and strong else
                " (a weak access against a strong one: only strong accesses do not race with each other)" if skind or strong else "")
        raise PTXFault("compute", f"shared-memory race: {self.lane_name(int(lanes[k]))} {'writes' if write else 'reads'} shared byte "
                       f"{int(b[k]) % self.shared.shape[1]}, which {who} {'wrote' if wrote else 'read'} since the last barrier{kind}", self.ins)
    order = np.argsort(b, kind="stable")
    bs, ls = b[order], lanes[order]
    dup = (bs[1:] == bs[:-1]) & (ls[1:] != ls[:-1])
    if write and dup.any() and not strong:
      k = int(np.flatnonzero(dup)[0])
      raise PTXFault("compute", f"shared-memory race: {self.lane_name(int(ls[k]))} and {self.lane_name(int(ls[k + 1]))} write shared byte "
                     f"{int(bs[k]) % self.shared.shape[1]} in the same instruction", self.ins)
    if strong and write:
      if self.sem in ("release", "acq_rel"): self._release(ix, np.ones(ix.shape[0], np.bool_))
      elif self.fenced is not None and (f := self.fenced[self.sel]).any(): self._release(ix, f)   # fence; strong write
    if strong and self.srace is None:
      self.srace = (np.full(self.shared.size, -1, np.int64), np.full(self.shared.size, -1, np.int64))
      self.sspan = np.full(self.shared.size, -1, np.int64)   # per byte: the last strong access's first byte * 64 + its size
    if strong: self.sspan[b] = np.repeat(ix[:, 0] * 64 + w, w) if span is None else span
    writer, reader = self.srace if strong else weak
    if write and not strong: writer[b] = lanes
    else:
      a = writer if write else reader
      cur = a[b]
      a[b] = np.where((cur == -1) | (cur == mine), lanes, np.where(cur == lanes, cur, -2))
      if dup.any(): a[bs[1:][dup]] = -2
    if strong and not write and self.released:
      if self.sem in ("acquire", "acq_rel"): self._acquire(ix[:, 0])
      else:   # a strong read: acquires at its thread's next fence (strong read; fence)
        for g, key in zip(self.sel.tolist(), ix[:, 0].tolist()):
          if key in self.released: self.pending.setdefault(g, set()).add(key)

  def _release(self, ix: np.ndarray, rows: np.ndarray) -> None:
    """A release (st.release, atom .release/.acq_rel, or a strong write after a fence) by each lane of rows: the shared
    bytes its thread (or its synced warp) accessed since the last barrier, kept under the release's first byte for an
    acquire that reads it (PTX ISA §8.8: release and acquire patterns; §8.9: causality order). (After a fence, the
    accesses between the fence and the write count too: a race there goes unreported.)"""
    n = self.shared.shape[1]
    for i, g in enumerate(self.sel.tolist()):
      if not rows[i]: continue
      c = int(self.cta[g])
      ids = np.array([g, -10 - g // 32], np.int64)
      seen = np.zeros(n, np.bool_)
      for arr in (*self.race, *(self.srace or ())): seen |= np.isin(arr[c * n:(c + 1) * n], ids)
      key = int(ix[i, 0])
      got = np.flatnonzero(seen) + c * n
      self.released[key] = got if key not in self.released else np.union1d(self.released[key], got)

  def _acquire(self, keys: np.ndarray) -> None:
    """An acquire that reads a location a release wrote (keys: the first byte each lane read): the bytes the releasing
    thread accessed before the release are ordered before the acquiring thread's later accesses. Modelled as a barrier
    over those bytes (their race state is reset): a third thread that did not acquire is then not reported either (a
    race missed, never a false one)."""
    for key in np.unique(keys).tolist():
      got = self.released.get(key)
      if got is None: continue
      for arr in (*self.race, *(self.srace or ())): arr[got] = -1

  def fence(self) -> None:
    """membar / fence.sc / fence.acq_rel by the selected lanes (PTX ISA §8.8): their later strong writes release, and
    the releases their earlier strong reads read are acquired now."""
    if self.race is None: return
    if self.fenced is None: self.fenced = np.zeros(self.n, np.bool_)
    self.fenced[self.sel] = True
    if self.pending:
      for g in np.intersect1d(np.fromiter(self.pending, np.int64), self.sel).tolist(): self._acquire(np.fromiter(self.pending.pop(g), np.int64))

  def warp_synced(self, lanes: np.ndarray) -> None:
    """bar.warp.sync of `lanes`: the shared bytes they last wrote or read become their warp's (-10 - warp)."""
    if self.race is None or not lanes.size: return
    n = self.shared.shape[1]
    for w in np.unique(lanes // 32):
      members = lanes[lanes // 32 == w]
      c = int(self.cta[members[0]])
      for a in (*self.race, *(self.srace or ())):
        part = a[c * n:(c + 1) * n]
        part[np.isin(part, members)] = -10 - w

  def race_reset(self, cta: int) -> None:
    if self.race is None: return
    n = self.shared.shape[1]
    for a in (*self.race, *(self.srace or ())): a[cta * n:(cta + 1) * n] = -1
    if self.released: self.released = {k: v for k, v in self.released.items() if k // n != cta}
    if self.pending: self.pending = {g: ks for g, ks in self.pending.items() if int(self.cta[g]) != cta}

  def _module_vars(self, addr: np.ndarray, w: int, data: np.ndarray | None) -> np.ndarray | None:
    """Loads/stores of module-scope variables (every lane of the access must address them)."""
    if self._gv is None:
      self._gv = np.zeros(max(self.e.globals_bytes, 1), np.uint8)
      for v in self.e.globals.values():
        if v.init: self._gv[v.offset:v.offset + len(v.init)] = np.frombuffer(v.init, np.uint8)
    a = addr.astype(np.int64) - GLOBAL_WINDOW
    if w > 1 and int(np.bitwise_or.reduce(a)) & (w - 1): self.misaligned(addr, w, "global", 0, data is not None)
    bad = (a < 0) | (a + w > self.e.globals_bytes)
    if bad.any():
      i = int(np.flatnonzero(bad)[0])
      raise PTXFault("mmu", f"access of {w} bytes at 0x{int(addr[i]):x} outside the module's variables by {self.thread(i)}", self.ins, int(addr[i]))
    ix = a[:, None] + np.arange(w)
    if data is None: return self._gv[ix]
    self._gv[ix] = data
    return None

  def _global(self, addr: np.ndarray, w: int, st: tuple[np.ndarray, np.ndarray | None] | None) -> Any:
    last = self._last
    if last is not None:   # the usual case: every lane inside the mapping the previous access used
      va, end, r = last
      amin, amax = addr.min(), addr.max()
      if amin >= va and amax + np.uint64(w) <= end: return self._in_region(r, addr - np.uint64(va), w, st)
    else: amin, amax = addr.min(), addr.max()
    r = self.vm.find(int(amin))   # a bisect over the mappings' starts
    if r is not None and int(amax) + w <= r.end:
      self._last = (r.va, r.end, r)
      return self._in_region(r, addr - np.uint64(r.va), w, st)
    return self._global_any(addr, w, st)

  def global_at(self, b: np.ndarray, off: int, w: int, st: tuple[np.ndarray, np.ndarray | None] | None = None, hint: list | None = None) -> Any:
    """A global access at b + off (b: base register bits, off: the immediate): one add and one max when every lane stays
    inside the mapping the previous access used, or the one this instruction used last (`hint`: [its start], kept by the
    instruction's step across launches, found again in the VM by a bisect: kernels alternate between buffers); else the
    general path (search, MMU fault)."""
    last = self._last
    if hint is not None and (va := hint[0]) is not None and (last is None or last[0] != va) and (r := self.vm.find(va)) is not None and r.va == va:
      last = (va, r.end, r)
    if last is not None:
      va, _, r = last
      rel = b + np.uint64((off - va) & 0xFFFFFFFFFFFFFFFF)   # below the mapping wraps to huge: one max checks both ends
      if r.size >= w and rel.max() <= np.uint64(r.size - w):
        self._last = last
        return self._in_region(r, rel, w, st)
    out = self._global(b + np.uint64(off & 0xFFFFFFFFFFFFFFFF), w, st)
    if hint is not None and self._last is not None: hint[0] = self._last[0]
    return out

  def global_affine(self, a: np.ndarray | int, alo: int, ahi: int, b: int, w: int, k0: int, ks: int, n: int) -> np.ndarray | None:
    """The w bytes at a + b * k (a per lane, alo..ahi its bounds, every address a multiple of w) for k0 <= k < k0 + ks
    ((ks * n, w) uint8, row k then lane l), when they all lie in one mapping whose bytes are all defined; else None (the
    caller loads the ordinary way, which reports faults and undefined bytes). The bounds come from alo, ahi and b, not
    from a scan of every address."""
    lo, hi = alo + min(b * k0, b * (k0 + ks - 1)), ahi + max(b * k0, b * (k0 + ks - 1)) + w
    r = self.vm.find(lo) if lo >= 0 else None
    if r is None or hi > r.end or r.va % w or (self.checked and r.mem.bits is not None): return None
    if (g := _lane_stride(a, n)) is not None and b >= 0:
      # lanes evenly spaced (s >= 0 bytes apart): the rows are one strided view of the mapping, copied at once (no index arrays)
      a0, s = g
      view = np.ndarray((ks, n), _ELEM.get(w) or np.dtype(f"V{w}"), r.mem.data, a0 - r.va + b * k0, (b, s))
      return np.ascontiguousarray(view).view(np.uint8).reshape(-1, w)
    rel = (a - r.va) // w
    ix = (np.asarray(rel, np.intp)[None, :] if isinstance(rel, np.ndarray) else np.full((1, n), rel, np.intp)) + \
      ((b // w) * np.arange(k0, k0 + ks, dtype=np.intp))[:, None]
    v = self._elements(r, w)
    return (v.take(ix.reshape(-1), axis=0) if w == 16 else v.take(ix.reshape(-1))).view(np.uint8).reshape(-1, w)

  def gather_scaled(self, a: int, x: np.ndarray, c: int, w: int) -> np.ndarray | None:
    """The w bytes at a + c * x for every lane ((lanes, w) uint8; a an integer, x integer values, c > 0), when they all lie
    in one mapping, each a multiple of w (1, 2, 4, 8 or 16) from its start, and (checked) all of its bytes are defined;
    else None (the caller computes the addresses and loads the ordinary way, which reports faults and undefined bytes)."""
    if (s := self._scaled(a, x, c, w, True)) is None: return None
    r, ix = s
    v = self._elements(r, w)
    return (v.take(ix, axis=0) if w == 16 else v.take(ix)).view(np.uint8).reshape(-1, w)

  def scaled_offsets(self, a: int, x: np.ndarray, c: int, w: int) -> tuple[Any, np.ndarray] | None:
    """(mapping, byte offsets in it as uint64) of the w-byte stores at a + c * x, where gather_scaled would load (the
    mapping's definedness aside: a store marks it); None where it would not. Store with `store_in`."""
    if (s := self._scaled(a, x, c, w, False)) is None: return None
    r, ix = s
    return r, (ix * w).view(np.uint64)

  def store_in(self, r: Any, off: np.ndarray, w: int, st: tuple[np.ndarray, np.ndarray | None]) -> None:
    """Store st (bytes (lanes, w), defined or None) at byte offsets off of mapping r (found by scaled_offsets)."""
    self._in_region(r, off, w, st)

  def _scaled(self, a: int, x: np.ndarray, c: int, w: int, load: bool) -> tuple[Any, np.ndarray] | None:
    """(mapping, w-byte element index per lane) of the addresses a + c * x, as gather_scaled takes them. The bounds come
    from x's extremes (exact integers: an address inside the mapping is its own value mod 2^64), the indices from x
    without a 64-bit address per lane."""
    if not x.size or (w not in _ELEM and w != 16): return None
    # x's extremes and element indices depend on x, c and w alone: kept with x when x is a kept launch-shape value (memo.py)
    src = x if x.base is None else x.base   # (x all of src, in order: a typed view of it)
    whole = isinstance(src, np.ndarray) and src.nbytes == x.nbytes and x.flags.c_contiguous and src.flags.c_contiguous
    got = _memo.derived("scaled", src, (x.dtype.char, c, w), _scaled_index, x, c, w) if whole else _scaled_index(x, c, w)
    if got is None: return None
    xlo, xhi, ix = got
    lo, hi = a + c * xlo, a + c * xhi + w
    r = self.vm.find(lo) if lo >= 0 else None
    if r is None or hi > r.end or (load and self.checked and r.mem.bits is not None) or (b := a - r.va) % w or r.va % w: return None
    return r, (ix + b // w if b else ix)

  def _elements(self, r: Any, w: int) -> np.ndarray:
    """A mapping's bytes as w-byte elements, kept per launch: w 1, 2, 4, 8 unsigned integers, 16 rows of two uint64, -16
    one 16-byte void element each (a store of 16-byte rows as void elements costs ~10x less than a row assignment)."""
    mem = self.mem_views.get(id(r.mem))
    if mem is None: mem = self.mem_views[id(r.mem)] = {1: r.mem.data}
    if (v := mem.get(w)) is None:
      d = r.mem.data[:r.mem.data.size // abs(w) * abs(w)]
      v = mem[w] = d.view(np.uint64).reshape(-1, 2) if w == 16 else d.view(_V16) if w == -16 else d.view(S.UINT[w])
    return v

  def global_group(self, b: np.ndarray, off: int, w: int) -> np.ndarray | None:
    """The w bytes at b + off for every lane, when all lie in the last mapping used and all of its bytes are defined
    (else None: the caller loads the ordinary way, which reports faults and undefined bytes)."""
    if not b.size: return None
    for r in (self._last[2] if self._last is not None else None, self.vm.find((int(b[0]) + off) & 0xFFFFFFFFFFFFFFFF)):
      if r is None or r.mem.bits is not None or r.size < w: continue
      rel = b + np.uint64((off - r.va) & 0xFFFFFFFFFFFFFFFF)
      if rel.max() > np.uint64(r.size - w): continue
      self._last = (r.va, r.end, r)
      return self._in_region(r, rel, w, None, False)[0]
    return None

  def _in_region(self, r: Any, off: np.ndarray, w: int, st: tuple[np.ndarray, np.ndarray | None] | None, exact: bool = True) -> Any:
    """A load (st None: (bytes (lanes, w), defined or None)) or store of w bytes per lane at offsets off of one mapping;
    exact: one access of w bytes, which must be aligned to w (else the w bytes of a group of byte loads: any address)."""
    al = int(np.bitwise_or.reduce(off)) if w > 1 else 0
    if (al | r.va) & (w - 1) and exact: self.misaligned(off, w, "global", r.va, st is not None)
    k = w if w in (1, 2, 4, 8) else 0
    if k > 1 and al & (k - 1): k = 0   # unaligned (a group of byte loads, or a mapping not aligned to w): byte by byte
    off = off.view(np.intp)   # take/put with intp indices (uint64 ones are converted on every call); offsets < 2**63
    if not k and st is None and w % 8 == 0 and (self.checked is False or r.mem.bits is None) and not al & 7:
      # an aligned load wider than 8 bytes (ld.v4.f32, .v2.f64): one 16-byte row per lane, else w / 8 eight-byte elements
      if w == 16 and not al & 15:
        return self._elements(r, 16).take(off >> 4, axis=0).view(np.uint8).reshape(-1, 16), None
      return self._elements(r, 8)[_spread(off >> 3, w // 8)].view(np.uint8).reshape(-1, w), None
    if k:
      v = self._elements(r, k)
      e = off >> _LOG2[k] if k > 1 else off
    if st is None:
      out = v.take(e).view(np.uint8).reshape(-1, w) if k else r.mem.data[_spread(off, w)].reshape(-1, w)
      if not self.checked or r.mem.bits is None: return out, None
      ok = r.mem.elems_defined(e, k) if k else r.mem.elems_defined((off[:, None] + np.arange(w)).reshape(-1), 1).reshape(-1, w).all(axis=1)
      return out, (None if ok.all() else ok)
    data, d = st
    if k: v[e] = np.ascontiguousarray(data).view(S.UINT[k]).reshape(-1)
    elif w == 16 and not al & 15:   # an aligned st.v4 of 32-bit values: one 16-byte element per lane
      self._elements(r, -16)[off >> 4] = np.ascontiguousarray(data).view(_V16).reshape(-1)
    else: r.mem.data[off[:, None] + np.arange(w)] = data
    if r.mem.bits is not None or (d is not None and not d.all()):
      if not k and w % 8 == 0 and not al & 7: e, k1, rep = _spread(off >> 3, w // 8), 8, w // 8
      elif not k: e, k1, rep = _spread(off, w), 1, w
      else: k1, rep = k, 1
      dm = None if d is None else (d if rep == 1 else np.repeat(d, rep))
      if dm is None: _mark(r.mem, e, k1, True)
      else:
        if dm.any(): _mark(r.mem, e[dm], k1, True)
        if (~dm).any(): _mark(r.mem, e[~dm], k1, False); self._undef_stored(r.mem)
      self.touched[id(r.mem)] = r.mem   # settled once when the launch ends (a bitmap scan per store would dominate)
    return None

  def _undef_stored(self, mem: Any) -> None:
    """Undefined bytes stored into `mem`: the host's later report says which kernel stored them (as the RGL1 path does)."""
    if mem.origin is None:
      ins = self.ins
      mem.origin = f"in kernel {self.e.name}" + (f" (stored at PTX line {ins.line}: {ins.text.strip()})" if ins is not None else "")

  def _global_any(self, addr: np.ndarray, w: int, st: tuple[np.ndarray, np.ndarray | None] | None) -> Any:
    vm = self.vm
    if w > 1 and int(np.bitwise_or.reduce(addr)) & (w - 1): self.misaligned(addr.view(np.int64), w, "global", 0, st is not None)
    if self._map is None:   # the VM's mappings do not change while a kernel runs
      self._map = (np.array(vm.starts, np.uint64), np.array([r.end for r in vm.regions] or [0], np.uint64))
    starts, ends = self._map
    amin, amax = int(addr.min()), int(addr.max())
    one = int(np.searchsorted(starts, np.uint64(amin), side="right")) - 1
    if one >= 0 and amax + w <= int(ends[one]):   # every lane inside one mapping (the usual case)
      ri, ok, single = np.full(addr.size, one), np.ones(addr.size, np.bool_), True
    else:
      single = False
      ri = np.searchsorted(starts, addr, side="right") - 1
      ok = (ri >= 0)
      ok &= np.where(ok, addr + np.uint64(w) <= ends[np.maximum(ri, 0)], False)
    if not ok.all():
      i = int(np.flatnonzero(~ok)[0])
      a = int(addr[i])
      r = vm.find(a)
      why = "is not mapped" if r is None else f"runs past the end of the mapping 0x{r.va:x}..0x{r.end:x} ({r.size} bytes)"
      raise PTXFault("mmu", f"MMU fault: global {'store' if st else 'load'} of {w} bytes at 0x{a:x} {why}, by {self.thread(i)}", self.ins, a)
    if single:
      r = vm.regions[one]
      self._last = (r.va, r.end, r)
      return self._in_region(r, addr - np.uint64(r.va), w, st)
    if st is None: out, dd = np.zeros((addr.size, w), np.uint8), None
    lo, hi = (one, one) if single else (int(ri.min()), int(ri.max()))
    for r_i in ([lo] if lo == hi else np.unique(ri)):
      m = slice(None) if lo == hi else ri == r_i
      r = vm.regions[int(r_i)]
      off = (addr[m] - np.uint64(r.va)).astype(np.int64)
      ix = off[:, None] + np.arange(w)
      if st is None:
        out[m] = r.mem.data[ix]
        if self.checked and r.mem.bits is not None:
          ok2 = (((r.mem.bits[ix >> 3] >> (ix & 7).astype(np.uint8)) & np.uint8(1)) != 0).all(axis=1)
          if not ok2.all():
            if dd is None: dd = np.ones(addr.size, np.bool_)
            dd[m] = ok2
      else:
        data, d = st
        r.mem.data[ix] = data[m]
        if r.mem.bits is not None or (d is not None and not d.all()):
          dm = np.ones(ix.shape[0], np.bool_) if d is None else d[m]
          if dm.any(): r.mem.mark_elems(ix[dm].reshape(-1), 1, True)
          if (~dm).any(): r.mem.mark_elems(ix[~dm].reshape(-1), 1, False); self._undef_stored(r.mem)
          self.touched[id(r.mem)] = r.mem
    return None if st is not None else (out, dd)


def _spread(first: np.ndarray, m: int) -> np.ndarray:
  """(first[:, None] + np.arange(m)).reshape(-1): m column assignments (a broadcast add with so short an inner axis costs
  several times more)."""
  out = np.empty((first.size, m), first.dtype)
  for j in range(m): np.add(first, j, out=out[:, j]) if j else np.copyto(out[:, 0], first)
  return out.reshape(-1)


def _scaled_index(x: np.ndarray, c: int, w: int) -> tuple[int, int, np.ndarray] | None:
  """(min x, max x, the w-byte element index c * x / w per lane as intp) for Launch._scaled; None where c * x is not a
  whole number of elements for some x."""
  if c % w == 0:
    ix = x.astype(np.intp)
    if c != w: ix *= c // w
  elif w % c == 0 and not (q := w // c) & (q - 1):   # c * x a multiple of w: x a multiple of q (its low bits 0)
    if int(np.bitwise_or.reduce(x)) & (q - 1): return None
    ix = (x >> (q.bit_length() - 1)).astype(np.intp)   # (exact: an arithmetic shift of multiples of q)
  else: return None
  return int(x.min()), int(x.max()), ix


def _mark(mem: Any, e: np.ndarray, k: int, defined: bool) -> None:
  """Memory.mark_elems without ufunc.at: the elements are grouped by their bit position in the bitmap byte, so within a
  group every element of one byte applies the same mask (duplicates are harmless)."""
  if k == 8 or e.size < 64 or mem.bits is None: return mem.mark_elems(e, k, defined)
  lo, hi = int(e.min()), int(e.max())
  if hi - lo + 1 == e.size:   # as many elements as the range holds: when they cover it, one range of bytes (a slice)
    seen = np.zeros(e.size, np.bool_)
    seen[e - lo] = True
    if seen.all(): return mem.mark_range(lo * k, (hi + 1) * k, defined)
  pos = e.astype(np.int64, copy=False) * k
  byte, sh = pos >> 3, pos & 7
  bits = mem.bits
  for s in range(0, 8, k):
    idx = byte[sh == s] if k < 8 else byte
    if not idx.size: continue
    m = ((1 << k) - 1) << s
    if defined: bits[idx] |= np.uint8(m)
    else: bits[idx] &= np.uint8(~m & 0xFF)


class _Specials(dict):
  """Special registers (uint64 per lane), each built the first time a kernel reads it."""
  def __init__(self, L: Launch):
    super().__init__()
    self.L = L
  def __contains__(self, name: object) -> bool: return name in _SPECIALS or dict.__contains__(self, name)
  def __missing__(self, name: str) -> np.ndarray:
    L = self.L
    key = (name, L.grid, L.block, L.per_cta) if name not in _SMEM_SPECIALS else None
    if key is None or (v := _SPECIAL_CACHE.get(key)) is None:   # the launch shape's values, kept for its next launch (read-only)
      v = np.asarray(_SPECIALS[name](L), np.uint64) * np.ones(L.n, np.uint64)
      v.setflags(write=False)
      if key is not None:
        if len(_SPECIAL_CACHE) >= 256: _SPECIAL_CACHE.pop(next(iter(_SPECIAL_CACHE)))
        _SPECIAL_CACHE[key] = v
    self[name] = v
    return v

  def u32(self, name: str) -> np.ndarray:
    """A special register (ids, sizes: below 2^32) as uint32 values, kept per launch shape like the bits (read-only: a
    register holding it is never written in place, a partial write converts it to fresh bits)."""
    L = self.L
    key = ("u32", name, L.grid, L.block, L.per_cta) if name not in _SMEM_SPECIALS else None
    if key is None or (v := _SPECIAL_CACHE.get(key)) is None:
      v = self[name].astype(np.uint32)
      v.setflags(write=False)
      if key is not None:
        if len(_SPECIAL_CACHE) >= 256: _SPECIAL_CACHE.pop(next(iter(_SPECIAL_CACHE)))
        _SPECIAL_CACHE[key] = v
    return v


# the clocks count instruction steps (deterministic, increasing within a launch); %globaltimer reads them as nanoseconds
# after a fixed start (a timer is never 0)
_NS0 = 1 << 40
_TIMERS: dict[str, Callable[[int], int]] = {
  "%clock": lambda c: c & 0xFFFFFFFF, "%clock64": lambda c: c, "%clock_hi": lambda c: (c >> 32) & 0xFFFFFFFF,
  "%globaltimer": lambda c: _NS0 + c * 32, "%globaltimer_lo": lambda c: (_NS0 + c * 32) & 0xFFFFFFFF, "%globaltimer_hi": lambda c: (_NS0 + c * 32) >> 32,
}
_SMEM_SPECIALS = frozenset({"%dynamic_smem_size", "%total_smem_size"})   # the others depend on the launch shape only
_SPECIAL_CACHE: dict[tuple, np.ndarray] = {}


def _lanes(L: Launch) -> np.ndarray: return (L._t % 32).astype(np.uint64)
_SPECIALS: dict[str, Callable[[Launch], Any]] = {
  "%tid.x": lambda L: L._t % L.block[0], "%tid.y": lambda L: (L._t // L.block[0]) % L.block[1],
  "%tid.z": lambda L: L._t // (L.block[0] * L.block[1]),
  "%ntid.x": lambda L: L.block[0], "%ntid.y": lambda L: L.block[1], "%ntid.z": lambda L: L.block[2],
  "%ctaid.x": lambda L: L.cta % L.grid[0], "%ctaid.y": lambda L: (L.cta // L.grid[0]) % L.grid[1],
  "%ctaid.z": lambda L: L.cta // (L.grid[0] * L.grid[1]),
  "%nctaid.x": lambda L: L.grid[0], "%nctaid.y": lambda L: L.grid[1], "%nctaid.z": lambda L: L.grid[2],
  "%laneid": _lanes, "%warpid": lambda L: L._t // 32, "%nwarpid": lambda L: -(-L.per_cta // 32),
  "%smid": lambda L: 0, "%nsmid": lambda L: 1, "%gridid": lambda L: 0,
  "%lanemask_eq": lambda L: np.uint64(1) << _lanes(L), "%lanemask_lt": lambda L: (np.uint64(1) << _lanes(L)) - np.uint64(1),
  "%lanemask_le": lambda L: (np.uint64(2) << _lanes(L)) - np.uint64(1),
  "%lanemask_gt": lambda L: ~((np.uint64(2) << _lanes(L)) - np.uint64(1)) & np.uint64(0xFFFFFFFF),
  "%lanemask_ge": lambda L: ~((np.uint64(1) << _lanes(L)) - np.uint64(1)) & np.uint64(0xFFFFFFFF),
  "%dynamic_smem_size": lambda L: max(0, L.shared_bytes - L.e.shared_bytes), "%total_smem_size": lambda L: L.shared_bytes,
}
SPECIAL_NAMES = frozenset(_SPECIALS)
STABLE_SPECIALS = SPECIAL_NAMES - _SMEM_SPECIALS   # kept per launch shape: the same arrays in every launch of it (memo.py)


def to_bytes(v: np.ndarray, w: int) -> np.ndarray:
  """Values -> (lanes, w) little-endian bytes (truncating/extending to w bytes)."""
  if v.dtype == np.bool_: v = v.astype(np.uint8)
  if v.itemsize != w:
    v = (v.astype(np.int64) if v.dtype.kind == "i" else v.view(S.UINT[v.itemsize])).astype(S.UINT[w])
  return np.ascontiguousarray(v).view(np.uint8).reshape(-1, w)


def from_bytes(b: np.ndarray, t: str) -> np.ndarray:
  return np.ascontiguousarray(b).view(S.NP[t] if t != "bf16" else np.uint16).reshape(-1)


def warp_check(L: Launch, ins: Instr, mask: np.ndarray) -> None:
  """In checked mode the member mask must name exactly the active lanes of each warp executing it... at least include
  the executing lane, and every named lane must be executing."""
  if not L.checked: return
  lane = L.sel % 32
  act = np.zeros(L.n // 32, np.uint64)
  np.bitwise_or.at(act, L.sel // 32, np.uint64(1) << lane.astype(np.uint64))
  m = mask.astype(np.uint64)
  bad = ((m >> lane.astype(np.uint64)) & np.uint64(1)) == 0
  bad |= (m & ~act[L.sel // 32]) != 0
  if bad.any():
    i = int(np.flatnonzero(bad)[0])
    raise PTXFault("compute", f"{ins.op} member mask 0x{int(m[i]):08x} does not match the active lanes 0x{int(act[L.sel[i] // 32]):08x} of "
                   f"{L.thread(i)}'s warp", ins)
