"""Pre-decoded forms of the hottest instruction shapes: each Instr is turned once into a closure step(L) with its operands
resolved (register names, masks, immediates as numpy scalars, the compare or rounding picked), so a step does only numpy
work. Anything not matched here runs through the family handler of ops.TABLE (same semantics, slower). A row of FAST
maps a family to a builder(ins, entry) -> closure or None (None: use the generic handler).

The closures keep checked mode: an operand's definedness (memcheck) flows into the destination exactly as Launch.get/put do."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from emulators.nv.ptx import semantics as S
from emulators.nv.ptx.execute import SPECIAL_NAMES, Launch, PTXFault
from emulators.nv.ptx.ops import TABLE, selected_defined
from emulators.nv.ptx.parse import TYPES, Entry, Instr, Operand

Step = Callable[[Launch], None]
Fetch = Callable[[Launch], tuple[np.ndarray, "np.ndarray | None"]]
_MASK = {w: np.uint64((1 << (8 * w)) - 1) for w in (1, 2, 4)}


def _and(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
  return b if a is None else a if b is None else a & b


def _bits_fetch(o: Operand, w: int, e: Entry) -> Fetch | None:
  """Raw bits of a register or integer immediate operand, truncated to w bytes (a uint64 array or scalar; a register's
  own array when no truncation is needed: read-only)."""
  if o.kind == "reg":
    if w == 8 or (o.value in e.regs and TYPES[e.regs[o.value]] <= w): return lambda L: L.bits(o)
    m = _MASK[w]
    def f(L: Launch) -> tuple[np.ndarray, np.ndarray | None]:
      b, d = L.bits(o)
      return b & m, d
    return f
  if o.kind == "imm":
    v = np.uint64(o.value & ((1 << (8 * w)) - 1))
    return lambda L: (v, None)
  return None


def _fimm_bits(o: Operand, t: str) -> Fetch | None:
  """A float immediate's bits as type t (converted as Launch.get converts it)."""
  f = _typed_fetch(o, t) if o.kind == "fimm" else None
  if f is None: return None
  c = np.uint64(int(np.asarray(f(None)[0]).view(S.UINT[TYPES[t]])))   # type: ignore[arg-type]
  return lambda L: (c, None)


def _typed_fetch(o: Operand, t: str) -> Fetch | None:
  """An operand as numpy values of type t (register, or an immediate as a numpy scalar), like Launch.get."""
  if t not in S.NP or t in ("bf16", "pred", "f16x2", "bf16x2") or TYPES[t] not in (1, 2, 4, 8): return None
  w, dt = TYPES[t], S.NP[t]
  if o.kind == "reg":
    ut, name = S.UINT[w], o.value
    def reg(L: Launch) -> tuple[np.ndarray, np.ndarray | None]:
      if L.sel.size == L.n:
        if (v := L.typed.get(name)) is not None and v.dtype == dt: return v, L.defined.get(name)
        if (v := dict.get(L.regs, name)) is not None and v.itemsize == w: return v.view(dt), L.defined.get(name)   # typed as wide, or 8-byte bits
      b, d = L.bits(o)
      v = b.view(dt) if w == 8 else b.astype(ut).view(dt)
      if L.sel.size == L.n and name in L.regs: L.typed[name] = v   # the next reader of this type takes it as is
      return v, d
    return reg
  if o.kind == "imm":
    v = float(o.value) if S.is_float(t) else o.value & ((1 << (8 * w)) - 1)
    c = np.array([v], dt)[0] if S.is_float(t) else np.array([v], S.UINT[w]).view(dt)[0]
    return lambda L: (c, None)
  if o.kind == "fimm" and S.is_float(t):
    v, fw = o.value  # type: ignore[misc]
    x = np.array([v], np.uint64).view(np.float64) if fw == 8 else np.array([v], np.uint32).view(np.float32)
    c = x.astype(dt)[0]
    return lambda L: (c, None)
  return None


def _dest(ins: Instr, e: Entry, o: Operand, t: str) -> Callable[[Launch, np.ndarray, np.ndarray | None], None] | None:
  """Writer of t-typed results into register o, as raw bits (sign-extended for signed types, masked to the register)."""
  if o.kind != "reg" or o.value not in e.regs: return None
  rt = e.regs[o.value]
  if rt == "pred" or t == "pred" or TYPES[rt] > 8: return None
  rw, w = TYPES[rt], TYPES[t]
  name = o.value
  if S.is_signed(t) and rw > w:
    def tob(v: np.ndarray) -> np.ndarray: return v.astype(np.int64).view(np.uint64) & _MASK[rw] if rw < 8 else v.astype(np.int64).view(np.uint64)
  elif rw < w:
    ut, m = S.UINT[w], _MASK[rw]
    def tob(v: np.ndarray) -> np.ndarray: return v.view(ut).astype(np.uint64) & m
  else:
    ut = S.UINT[w]
    def tob(v: np.ndarray) -> np.ndarray: return v.view(ut).astype(np.uint64)
  if rw != w: return lambda L, v, d: L.put_bits(name, tob(v), d)
  def put(L: Launch, v: np.ndarray, d: np.ndarray | None) -> None:   # the typed values too: the next reader of that type skips a conversion
    if v.dtype.itemsize == w and v.size == L.n: L.put_typed(name, v, d)
    else: L.put_bits(name, tob(v), d)
  return put


def _pred_dest(e: Entry, o: Operand) -> Callable[[Launch, np.ndarray, np.ndarray | None], None] | None:
  if o.kind != "reg" or e.regs.get(o.value) != "pred": return None
  name = o.value
  def put(L: Launch, v: np.ndarray, d: np.ndarray | None) -> None:   # a fresh bool array kept as it is (Launch.pred reads it)
    if v.dtype == np.bool_ and v.ndim == 1: L.put_typed(name, v, d)
    else: L.put_bits(name, v.astype(np.uint64), d)
  return put


def _ld(ins: Instr, e: Entry) -> Step | None:
  """ld.global(.v2/.v4) of 1/2/4/8-byte types into registers; ld.param of scalars."""
  if ins.has("param") and len(ins.types) == 1 and not any(m in ins.mods for m in ("v2", "v4", "v8")): return _ld_param(ins, e)
  if not ins.has("global") or e.globals_bytes or len(ins.types) != 1 or ins.types[0] in ("pred", "bf16x2", "f16x2") or TYPES[ins.types[0]] > 8:
    return None
  if any(m in ins.mods for m in ("v8",)): return None
  t = ins.types[0]
  w = TYPES[t]
  n = 4 if ins.has("v4") else 2 if ins.has("v2") else 1
  a = ins.args[1]
  if a.kind != "addr" or a.value.kind != "reg": return None
  base, off = a.value, a.offset
  dsts = ins.args[0].value if n > 1 else (ins.args[0],)
  puts = []
  for o in dsts:  # type: ignore[union-attr]
    if o.kind == "sym" and o.value == "_": puts.append(None); continue
    p = _dest(ins, e, o, t)
    if p is None: return None
    puts.append(p)
  dt, ut, hint = S.NP[t], S.UINT[w], [None]   # hint: where the mapping this load used last starts (Launch.global_at)
  def step(L: Launch) -> None:
    if L.pre is not None and L.pre[0] is ins: raw, dd = L.pre[1], None   # the bytes a loop run read as a strided block
    else:
      b, d = L.bits(base)
      if d is not None and L.checked and not d.all():
        raise PTXFault("compute", f"undefined value used as an address by {L.thread(int(np.flatnonzero(~d)[0]))}", ins)
      raw, dd = L.global_at(b, off, n * w, None, hint)
    vals = np.ascontiguousarray(raw).view(ut).reshape(-1, n).view(dt) if n > 1 else raw.view(ut).reshape(-1).view(dt)
    for i, p in enumerate(puts):   # a vector's elements each copied out contiguous (a strided column slows every reader 2-3x)
      if p is not None: p(L, vals[:, i].copy() if n > 1 else vals, dd)
  step.takes_pre = True   # type: ignore[attr-defined]   (loops.py may hand it the bytes: L.pre)
  return step


def _ld_param(ins: Instr, e: Entry) -> Step | None:
  """ld.param of a kernel parameter (every lane reads the same bytes of constant buffer 0)."""
  t = ins.types[0]
  a, d = ins.args[1], ins.args[0]
  if a.kind != "addr" or a.value.kind != "sym" or d.kind != "reg": return None
  p = next((p for p in e.params if p.name == a.value.value), None)
  if p is None or TYPES[t] > 8 or t == "pred" or not 0 <= a.offset <= p.size - TYPES[t]: return None
  put = _dest(ins, e, d, t)
  if put is None: return None
  lo, hi, dt = p.offset + a.offset, p.offset + a.offset + TYPES[t], S.NP[t]
  wide = TYPES[t] == 8 and TYPES[e.regs[d.value]] == 8
  def step(L: Launch) -> None:
    if hi > len(L.params): raise PTXFault("compute", f"a .param read past the {len(L.params)} parameter bytes", ins)
    one = np.frombuffer(L.params, dt, 1, lo)   # (read-only: the parameter bytes)
    # a pointer: every lane's value as one read-only broadcast (no memory per lane; a later write to some lanes copies it),
    # made by the array constructor (np.broadcast_to's Python wrapper costs 3x)
    if wide and L.sel.size == L.n: L.put_typed(d.value, np.ndarray((L.n,), one.dtype, one, 0, (0,)), None)
    else: put(L, np.full(L.sel.size, one[0]), None)
  return step


def _st(ins: Instr, e: Entry) -> Step | None:
  if not ins.has("global") or e.globals_bytes or len(ins.types) != 1 or ins.types[0] in ("pred",) or TYPES[ins.types[0]] > 8: return None
  t = ins.types[0]
  w = TYPES[t]
  n = 4 if ins.has("v4") else 2 if ins.has("v2") else 1
  if ins.has("v8"): return None
  a = ins.args[0]
  if a.kind != "addr" or a.value.kind != "reg": return None
  base, off = a.value, a.offset
  srcs = ins.args[1].value if n > 1 else (ins.args[1],)
  if any(o.kind != "reg" for o in srcs): return None  # type: ignore[union-attr]
  ut, hint = S.UINT[w], [None]
  def step(L: Launch) -> None:
    if not (pre := L.pre is not None and L.pre[0] is ins):
      b, d = L.bits(base)
      if d is not None and L.checked and not d.all():
        raise PTXFault("compute", f"undefined value used as an address by {L.thread(int(np.flatnonzero(~d)[0]))}", ins)
    dd = None
    cols = []
    whole = L.sel.size == L.n
    for o in srcs:  # type: ignore[union-attr]
      if whole and (r := L.regs.raw(o.value)) is not None and r.itemsize == w:   # typed as wide (or 8-byte bits): its bits viewed
        v, dv = r.view(ut), L.defined.get(o.value)
      else:
        v, dv = L.bits(o)
        v = v.astype(ut)
      cols.append(v)
      dd = _and(dd, dv)
    data = (_columns(cols, ut) if n > 1 else np.ascontiguousarray(cols[0])).view(np.uint8).reshape(-1, n * w)   # (a broadcast value: made whole)
    if pre: L.store_in(*L.pre[1], n * w, (data, dd))   # where a fused address chain found them (chains.py)
    else: L.global_at(b, off, n * w, (data, dd), hint)
  step.takes_pre = True   # type: ignore[attr-defined]   (chains.py may hand it (mapping, offsets): L.pre)
  return step


def _columns(cols: list[np.ndarray], dt: type) -> np.ndarray:
  """np.stack(cols, 1) as dt: one column assignment each (about half np.stack's time on its few wide columns)."""
  out = np.empty((max(c.size for c in cols), len(cols)), dt)
  for j, c in enumerate(cols): out[:, j] = c
  return out


def _prmt(ins: Instr, e: Entry) -> Step | None:
  """prmt.b32 with a constant selector (default mode, no sign replication): fixed byte fields of {b, a}."""
  if ins.mods != ("b32",) or ins.args[3].kind != "imm": return None
  fa, fb = _bits_fetch(ins.args[1], 4, e), _bits_fetch(ins.args[2], 4, e)
  if fa is None or fb is None or _dest(ins, e, ins.args[0], "u32") is None or e.regs[ins.args[0].value] not in ("b32", "u32", "s32"): return None
  if ins.args[1].kind != "reg" or ins.args[2].kind != "reg": return None
  c = ins.args[3].value
  sel = [(c >> (4 * i)) & 0xF for i in range(4)]
  if any(sv & 8 for sv in sel): return None   # sign replication: the generic handler
  # runs of result bytes taken from consecutive source bytes of x = b:a move as one field: (x >> src) & mask << dst
  fields: list[list[int]] = []   # [dst byte, src byte, length]
  for i, sv in enumerate(sel):
    if fields and fields[-1][1] + fields[-1][2] == sv and fields[-1][0] + fields[-1][2] == i: fields[-1][2] += 1
    else: fields.append([i, sv, 1])
  ops = [(np.uint64(8 * src), np.uint64((1 << (8 * ln)) - 1), np.uint64(8 * dst)) for dst, src, ln in fields]
  def step(L: Launch) -> None:
    a, da = fa(L)
    b, db = fb(L)
    x = a | (b << np.uint64(32))
    r = None
    for sh, m, to in ops:
      f = (x >> sh) & m
      if to: f <<= to
      r = f if r is None else r | f
    L.put_bits(name, r, _and(da, db))
  name = ins.args[0].value
  return step


def _mov(ins: Instr, e: Entry) -> Step | None:
  """mov of a register, special register or immediate into a register of the type's width."""
  if len(ins.types) != 1 or len(ins.args) != 2: return None
  t = ins.types[0]
  d, s = ins.args
  if t == "pred" or d.kind != "reg" or e.regs.get(d.value) in (None, "pred") or TYPES.get(t, 16) > 8 or TYPES[e.regs[d.value]] != TYPES[t]: return None
  name, w = d.value, TYPES[t]
  if s.kind == "fimm":   # a float literal: converted to a float type, its own bits for a .b type of its width
    if t[0] == "b" and s.value[1] == w: c = np.uint64(s.value[0])
    else:
      f = _fimm_bits(s, t) if S.is_float(t) else None
      if f is None: return None
      c = f(None)[0]   # type: ignore[arg-type]
    return _mov_const(name, c, t, w)
  if s.kind == "imm": return _mov_const(name, np.uint64(s.value & ((1 << (8 * w)) - 1)), t, w)
  if s.kind != "reg" or e.regs.get(s.value) == "pred": return None
  f = _bits_fetch(s, w, e)
  m = _MASK.get(w)
  src = s.value
  if src not in e.regs and w == 4:   # a special register (ids, sizes: below 2^32) as typed 32-bit values
    known = src in SPECIAL_NAMES
    def special(L: Launch) -> None:
      if known and L.sel.size == L.n: return L.put_typed(name, L.special.u32(src), None)   # the launch shape's values, kept
      b, dd = L.bits(s)
      if L.sel.size == L.n: L.put_typed(name, b.astype(np.uint32), dd)
      else: L.put_bits(name, b & m, dd)
    return special
  def step(L: Launch) -> None:
    if L.sel.size == L.n and (v := L.regs.raw(src)) is not None and v.itemsize == w:   # typed as wide: copied as it is
      return L.put_typed(name, v.copy(), L.defined.get(src))   # a fresh array: registers never share storage
    b, dd = f(L)  # type: ignore[misc]
    L.put_bits(name, b & m if m is not None else b.copy(), dd)
  return step


def _mov_const(name: str, c: np.uint64, t: str, w: int) -> Step:
  """mov of a constant (its bits c): a 32-bit register gets typed values (float32 for .f32, else the type's integers),
  which its readers of that width take as they are; other widths get the bits."""
  if w != 4: return lambda L: L.put_bits(name, np.full(L.sel.size, c, np.uint64), None)
  dt = S.NP[t] if t in S.NP and TYPES[t] == 4 else np.uint32
  c4 = np.uint32(int(c))
  def step(L: Launch) -> None:
    if L.sel.size == L.n: L.put_typed(name, np.full(L.n, c4, np.uint32).view(dt), None)   # (bits filled: NaN payloads kept)
    else: L.put_bits(name, np.full(L.sel.size, c, np.uint64), None)
  return step


def _int_binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Instr, Entry], Step | None]:
  def build(ins: Instr, e: Entry) -> Step | None:
    if len(ins.types) != 1 or len(ins.args) != 3: return None
    t = ins.types[0]
    if t[0] not in "sub" or TYPES[t] > 8 or any(m not in (t, "lo") for m in ins.mods): return None
    st = ("s" if S.is_signed(t) else "u") + t[1:]
    fa, fb, put = _typed_fetch(ins.args[1], st), _typed_fetch(ins.args[2], st), _dest(ins, e, ins.args[0], st)
    if fa is None or fb is None or put is None or ins.args[1].kind != "reg": return None
    def step(L: Launch) -> None:
      a, da = fa(L)
      b, db = fb(L)
      put(L, fn(a, b), _and(da, db))
    return step
  return build


def _divrem_imm(name: str) -> Callable[[Instr, Entry], Step | None]:
  """div/rem.{s,u}{16,32,64} by an immediate other than 0 (and -1 when signed): C's truncating quotient and remainder,
  as the family handler computes them (nothing to report: the divisor is never 0, the quotient never overflows)."""
  def build(ins: Instr, e: Entry) -> Step | None:
    if len(ins.types) != 1 or len(ins.args) != 3 or ins.args[1].kind != "reg" or ins.args[2].kind != "imm": return None
    t = ins.types[0]
    if t[0] not in "su" or TYPES[t] not in (2, 4, 8) or ins.mods != (t,): return None
    w, signed = TYPES[t], t[0] == "s"
    b = ins.args[2].value & ((1 << (8 * w)) - 1)
    if signed and b >> (8 * w - 1): b -= 1 << (8 * w)
    if b == 0 or (signed and b == -1): return None
    fa, put = _typed_fetch(ins.args[1], t), _dest(ins, e, ins.args[0], t)
    if fa is None or put is None: return None
    c = S.NP[t](b)
    if not signed: fn = (lambda a: a // c) if name == "div" else (lambda a: a % c)
    # np.fmod of integers is C's remainder (the dividend's sign); a - r is a multiple of c: its floor quotient is exact
    elif name == "rem": fn = lambda a: np.fmod(a, c)
    else: fn = lambda a: (a - np.fmod(a, c)) // c
    def step(L: Launch) -> None:
      a, da = fa(L)
      put(L, fn(a), da)
    return step
  return build


def _cvt(ins: Instr, e: Entry) -> Step | None:
  """cvt.{rni,rzi,rmi,rpi}.{s32,u32}.f32 and cvt.rn.f32.{s32,u32} without .ftz/.sat: semantics.to_int / to_float's
  results, computed in float32 (the float32 values whose integer rounding is at least the type's maximum as a float64
  are exactly those at least its float32 rounding, 2^31 or 2^32; the minimum is exact) and through float64 (exact for
  32-bit integers, then one rounding)."""
  if len(ins.types) != 2 or len(ins.args) != 2 or ins.args[1].kind != "reg": return None
  dt, st = ins.types
  rnd = [m for m in ins.mods if m not in (dt, st)]
  if len(rnd) != 1: return None
  if st == "f32" and dt in ("s32", "u32") and rnd[0] in S.INT_ROUND:
    fa, put = _typed_fetch(ins.args[1], "f32"), _dest(ins, e, ins.args[0], dt)
    if fa is None or put is None: return None
    f, npt = S.INT_ROUND[rnd[0]], S.NP[dt]
    info = np.iinfo(npt)
    hi, lo, vmax, vmin = np.float32(info.max), np.float32(info.min), npt(info.max), npt(info.min)
    def f2i(L: Launch) -> None:
      a, da = fa(L)
      r = f(a)
      if r.size and lo < r.min() and r.max() < hi: return put(L, r.astype(npt), da)   # (a NaN makes min and max NaN: below)
      big, small = r >= hi, r <= lo
      put(L, np.where(big, vmax, np.where(small, vmin, np.where(big | small | np.isnan(r), np.float32(0), r).astype(npt))), da)
    return f2i
  if dt == "f32" and st in ("s32", "u32") and rnd[0] == "rn":
    fa, put = _typed_fetch(ins.args[1], st), _dest(ins, e, ins.args[0], "f32")
    if fa is None or put is None: return None
    def i2f(L: Launch) -> None:
      a, da = fa(L)
      put(L, a.astype(np.float64).astype(np.float32), da)
    return i2f
  return None


def _int_neg_mad(name: str) -> Callable[[Instr, Entry], Step | None]:
  """neg.s{32,64} and mad.lo.{s,u}{32,64} (wrapping, as the family handler computes them on the typed values); neg.f32
  goes on to _f32, anything else (.hi/.wide, .sat, .cc, other types) to the family handler."""
  then = _f32(name) if name == "neg" else None
  nsrc = 1 if name == "neg" else 3
  def build(ins: Instr, e: Entry) -> Step | None:
    t = ins.types[0] if len(ins.types) == 1 else ""
    if not t or t[0] not in "su" or TYPES[t] not in (4, 8) or len(ins.args) != 1 + nsrc or ins.args[1].kind != "reg":
      return then(ins, e) if then is not None else None
    if set(ins.mods) != ({t} if name == "neg" else {t, "lo"}) or (name == "neg" and t[0] != "s"): return None
    fs, put = [_typed_fetch(o, t) for o in ins.args[1:]], _dest(ins, e, ins.args[0], t)
    if put is None or any(f is None for f in fs): return None
    if name == "neg":
      fa = fs[0]
      def neg(L: Launch) -> None:
        a, da = fa(L)  # type: ignore[misc]
        put(L, -a, da)
      return neg
    fa, fb, fc = fs
    def mad(L: Launch) -> None:
      a, da = fa(L)  # type: ignore[misc]
      b, db = fb(L)  # type: ignore[misc]
      c, dc = fc(L)  # type: ignore[misc]
      put(L, a * b + c, _and(_and(da, db), dc))
    return mad
  return build


def _f32(name: str) -> Callable[[Instr, Entry], Step | None]:
  """add/sub/mul.rn.f32 and fma.rn.f32 without .ftz/.sat (neg/abs without modifiers)."""
  nsrc = {"neg": 1, "abs": 1, "fma": 3, "mad": 3}.get(name, 2)
  def build(ins: Instr, e: Entry) -> Step | None:
    if ins.types != ("f32",) or len(ins.args) != 1 + nsrc: return None
    if any(m not in ("f32", "rn") for m in ins.mods): return None
    fs = [_typed_fetch(o, "f32") for o in ins.args[1:]]
    put = _dest(ins, e, ins.args[0], "f32")
    if put is None or any(f is None for f in fs) or ins.args[1].kind != "reg": return None
    if name == "fma":
      def op(v: list[np.ndarray]) -> np.ndarray: return S.ffma(*np.broadcast_arrays(*v), "rn")
    # sub is a + (-b), as the family handler computes it: the same NaN (a NaN b comes out with its sign flipped)
    else: op = {"add": lambda v: v[0] + v[1], "sub": lambda v: v[0] + -v[1], "mul": lambda v: v[0] * v[1],
                "neg": lambda v: -v[0], "abs": lambda v: np.abs(v[0])}[name]
    if nsrc == 2 and e.regs[ins.args[0].value] in ("f32", "b32", "u32", "s32"):   # the common shape, with fewer calls
      fa, fb, name_ = fs[0], fs[1], ins.args[0].value
      op2 = {"add": np.add, "sub": lambda a, b: a + -b, "mul": np.multiply}[name]
      def step2(L: Launch) -> None:
        a, da = fa(L)  # type: ignore[misc]
        b, db = fb(L)  # type: ignore[misc]
        r = op2(a, b)
        if da is None and db is None and L.sel.size == L.n:   # (put_typed's common case, inline: the hottest step)
          L.regs[name_] = L.typed[name_] = r
          if L.checked: L.defined[name_] = None
        else: L.put_typed(name_, r, db if da is None else da if db is None else da & db)
      return step2
    def step(L: Launch) -> None:   # (the scheduler runs every step under np.errstate(all="ignore"))
      vals, d = [], None
      for f in fs:
        v, dv = f(L)  # type: ignore[misc]
        vals.append(v)
        d = _and(d, dv)
      put(L, np.asarray(op(vals), np.float32), d)
    return step
  return build


def _setp(ins: Instr, e: Entry) -> Step | None:
  if len(ins.types) != 1 or len(ins.args) != 3 or ins.args[0].kind != "reg": return None
  t = ins.types[0]
  cs = [m for m in ins.mods if m != t]
  if len(cs) != 1 or t in ("bf16", "f16", "f16x2", "bf16x2", "pred"): return None
  c = cs[0]
  fa, fb, put = _typed_fetch(ins.args[1], t), _typed_fetch(ins.args[2], t), _pred_dest(e, ins.args[0])
  if fa is None or fb is None or put is None or ins.args[1].kind != "reg": return None
  plain = S.is_float(t) and c in ("eq", "lt", "le", "gt", "ge")   # ordered compares: false with a NaN as numpy gives
  cmp = S._CMP[c] if plain or (not S.is_float(t) and c in ("eq", "ne", "lt", "le", "gt", "ge")) else \
    _UNORDERED[c] if S.is_float(t) and c in _UNORDERED else lambda a, b: S.cmp(a, b, c, t)
  def step(L: Launch) -> None:
    a, da = fa(L)
    b, db = fb(L)
    put(L, cmp(a, b), _and(da, db))
  return step


# unordered float compares (true where either is NaN) as one compare: numpy's != is true with a NaN, and the others are the
# negation of the ordered opposite (false with a NaN)
_UNORDERED: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
  "neu": np.not_equal, "ltu": lambda a, b: ~np.greater_equal(a, b), "leu": lambda a, b: ~np.greater(a, b),
  "gtu": lambda a, b: ~np.less_equal(a, b), "geu": lambda a, b: ~np.less(a, b)}


def _ubits_fetch(o: Operand, t: str, e: Entry) -> Fetch | None:
  """An operand's bits as the unsigned type of t's width (a register's typed value viewed, an immediate as a scalar)."""
  w = TYPES[t]
  if o.kind == "reg": return _typed_fetch(o, "u" + str(8 * w)) if o.value in e.regs and TYPES[e.regs[o.value]] == w else None
  if o.kind == "imm":   # (an integer literal where a float is expected is its value: not here)
    if S.is_float(t): return None
    c = S.UINT[w](o.value & ((1 << (8 * w)) - 1))
    return lambda L: (c, None)
  f = _fimm_bits(o, t) if o.kind == "fimm" and S.is_float(t) else None
  if f is None: return None
  cf = S.UINT[w](int(f(None)[0]))   # type: ignore[arg-type]
  return lambda L: (cf, None)


def _selp_typed(ins: Instr, e: Entry) -> Step | None:
  """selp of values as wide as the destination register: np.where on the operands' typed values, no bit conversions."""
  t = ins.types[0]
  if TYPES[t] not in (2, 4, 8) or len(ins.args) != 4 or ins.args[3].kind != "reg": return None
  ut = "u" + str(8 * TYPES[t])
  fa, fb, put = _ubits_fetch(ins.args[1], t, e), _ubits_fetch(ins.args[2], t, e), _dest(ins, e, ins.args[0], ut)
  if fa is None or fb is None or put is None or e.regs.get(ins.args[0].value) is None or TYPES[e.regs[ins.args[0].value]] != TYPES[t]: return None
  p = ins.args[3]
  def step(L: Launch) -> None:
    c, dp = L.pred(p)
    a, da = fa(L)
    b, db = fb(L)
    put(L, _where(c, a, b), selected_defined(c, dp, da, db))   # the chosen operand's definedness
  return step


def _where(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """np.where(c, a, b) (a, b: arrays as long as c or scalars, of one dtype) as a fresh array; where every lane picks one
  side, a copy of it (np.where costs several times a copy whatever the mask; guards are mostly uniform)."""
  if c.size >= 256 and getattr(a, "dtype", None) == getattr(b, "dtype", None):
    r = b if not c.any() else a if c.all() else None
    if r is not None:
      if not isinstance(r, np.ndarray): return np.full(c.shape, r)
      if r.shape == c.shape: return r.copy()
    elif (dt := getattr(a, "dtype", None)) is not None and (ut := _SEL_UINT.get(dt.itemsize)) is not None and c.dtype == np.bool_ and all(getattr(x, "shape", c.shape) in (c.shape, ()) for x in (a, b)):
      # lanes pick both sides: b ^ ((a ^ b) & mask) on the bits, the same bits np.where copies, without its per-lane
      # branch (3-4x faster on a mixed mask)
      av, bv = a.view(ut), b.view(ut)
      m = c.astype(ut)
      np.negative(m, out=m)
      m &= av ^ bv
      m ^= bv
      return m.view(a.dtype)
  return np.where(c, a, b)


_SEL_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _selp(ins: Instr, e: Entry) -> Step | None:
  if len(ins.types) == 1 and ins.types[0] not in ("pred", "bf16") and (f := _selp_typed(ins, e)) is not None: return f
  if len(ins.types) != 1 or len(ins.args) != 4 or ins.types[0] == "pred" or TYPES[ins.types[0]] > 8: return None
  t = ins.types[0]
  if t == "bf16": return None
  w = TYPES[t]
  fa, fb = _bits_fetch(ins.args[1], w, e) or _fimm_bits(ins.args[1], t), _bits_fetch(ins.args[2], w, e) or _fimm_bits(ins.args[2], t)
  p = ins.args[3]
  d = ins.args[0]
  if fa is None or fb is None or p.kind != "reg" or d.kind != "reg" or d.value not in e.regs or TYPES[e.regs[d.value]] != w: return None
  name = d.value
  def step(L: Launch) -> None:
    pv, dp = L.pred(p)
    a, da = fa(L)
    b, db = fb(L)
    L.put_bits(name, np.where(pv, a, b), selected_defined(pv, dp, da, db))   # the chosen operand's definedness
  return step


def _mul_wide(ins: Instr, e: Entry) -> Step | None:
  """mul.wide.{s,u}{16,32}: the full product in the doubled width (a register or immediate second operand)."""
  if len(ins.types) != 1 or len(ins.args) != 3 or ins.args[1].kind != "reg" or set(ins.mods) != {"wide", ins.types[0]}: return None
  t = ins.types[0]
  if t not in ("s16", "u16", "s32", "u32"): return None
  wt = t[0] + str(2 * int(t[1:]))
  fa, fb, put = _typed_fetch(ins.args[1], t), _typed_fetch(ins.args[2], t), _dest(ins, e, ins.args[0], wt)
  if fa is None or fb is None or put is None: return None
  dt = S.NP[wt]
  def step(L: Launch) -> None:
    a, da = fa(L)
    b, db = fb(L)
    put(L, np.multiply(a, b, dtype=dt), _and(da, db))   # both operands widened, then the product (exact in the doubled width)
  return step


def _int_or_f32(op: str) -> Callable[[Instr, Entry], Step | None]:
  i, f = _int_binary({"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}[op]), _f32(op)
  if op == "mul": return lambda ins, e: f(ins, e) if ins.types == ("f32",) else _mul_wide(ins, e) if ins.has("wide") else i(ins, e)
  return lambda ins, e: f(ins, e) if ins.types == ("f32",) else i(ins, e)


def _cvta(ins: Instr, e: Entry) -> Step | None:
  """cvta.to.global / cvta.global: generic and global addresses coincide (a register copy)."""
  if not (ins.has("global") and len(ins.args) == 2 and ins.types in (("u64",), ("b64",)) and ins.args[1].kind == "reg"): return None
  d, s = ins.args
  if d.kind != "reg" or e.regs.get(d.value) not in ("u64", "b64", "s64"): return None
  name, src, move = d.value, s.value, _last_reader(e, ins, s.value)
  def step(L: Launch) -> None:
    if move and L.sel.size == L.n and (r := L.regs.raw(src)) is not None and r.dtype == np.uint64:   # every lane: moved
      dd = L.defined.get(src)
      L.drop((src,))
      return L.put_bits(name, r, dd)
    b, dd = L.bits(s)
    L.put_bits(name, b.copy(), dd)
  return step


def _last_reader(e: Entry, ins: Instr, reg: str) -> bool:
  """No instruction but `ins` mentions `reg` after it, none before it reads it, and no backward branch comes back to
  `ins`: its value can be moved into the destination (cvta after ld.param) instead of copied."""
  i = next(j for j, x in enumerate(e.instrs) if x is ins)
  for j, x in enumerate(e.instrs):
    if j == i: continue
    if x.op == "bra" and x.args and (t := e.labels.get(str(x.args[0].value))) is not None and t <= i <= j: return False
    ops = [o for o in x.args if reg in _names(o)]
    if x.pred == reg: return False
    if not ops: continue
    if j > i or ops != [x.args[0]] or x.args[0].kind != "reg" or x.op in ("st", "red", "bar", "barrier", "prefetch", "prefetchu", "nanosleep", "cp"): return False
  return True


def _names(o: Operand) -> list[str]:
  if o.kind == "reg": return [str(o.value)]
  if o.kind in ("vec", "pair"): return [r for x in o.value for r in _names(x)]  # type: ignore[union-attr]
  if o.kind in ("addr", "not"): return _names(o.value)  # type: ignore[arg-type]
  return []


def _shift_reg(ins: Instr, e: Entry) -> Step | None:
  """shl / shr.{b,s,u}{16,32,64} by a register amount (PTX ISA §9.7.8.7: amounts past the width give 0, or the sign for shr.s)."""
  t = ins.types[0]
  w = TYPES[t]
  if t[0] not in "bsu" or w not in (2, 4, 8) or ins.mods != (t,): return None
  st = ("s" if S.is_signed(t) else "u") + str(8 * w)
  fa, fs, put = _typed_fetch(ins.args[1], st), _typed_fetch(ins.args[2], "u32"), _dest(ins, e, ins.args[0], st)
  if fa is None or fs is None or put is None: return None
  bits, dt, shl = 8 * w, S.NP[st], ins.op == "shl"
  signed = S.is_signed(t) and not shl
  def step(L: Launch) -> None:
    a, da = fa(L)
    s, ds = fs(L)
    sc = np.minimum(s, bits - 1).astype(dt)
    if signed: r = a >> sc   # arithmetic: past the width, the sign
    else: r = np.where(s >= bits, dt(0), a << sc if shl else a >> sc)
    put(L, r, _and(da, ds))
  return step


def _shift_imm(ins: Instr, e: Entry) -> Step | None:
  """shl / shr.{b,s,u}{32,64} by an immediate below the width (shr.s: arithmetic)."""
  if len(ins.types) == 1 and len(ins.args) == 3 and ins.args[2].kind == "reg" and ins.args[1].kind == "reg": return _shift_reg(ins, e)
  if len(ins.types) != 1 or len(ins.args) != 3 or ins.args[2].kind != "imm" or ins.args[1].kind != "reg": return None
  t = ins.types[0]
  w = TYPES[t]
  d = ins.args[0]
  if t[0] not in "bsu" or w not in (4, 8) or ins.mods != (t,) or d.kind != "reg" or e.regs.get(d.value) in (None, "pred"): return None
  if TYPES[e.regs[d.value]] != w or not 0 <= ins.args[2].value < 8 * w: return None
  fa, name, n = _bits_fetch(ins.args[1], w, e), d.value, ins.args[2].value
  if TYPES[e.regs.get(ins.args[1].value, "pred")] == w:   # on the typed values of the width (no 64-bit bits made)
    ut_s = "u" + str(8 * w)
    ft, put = _typed_fetch(ins.args[1], ut_s), _dest(ins, e, d, ut_s)
    if ft is not None and put is not None:
      u, sg = S.UINT[w](n), S.SINT[w](n)
      if ins.op == "shl": opt = lambda a: a << u   # (bits past the width drop out)
      elif S.is_signed(t): opt = lambda a: (a.view(S.SINT[w]) >> sg).view(S.UINT[w])
      else: opt = lambda a: a >> u
      def step_t(L: Launch) -> None:
        a, da = ft(L)  # type: ignore[misc]
        put(L, opt(a), da)
      return step_t
  mask, sh, ut, st = np.uint64((1 << (8 * w)) - 1), np.uint64(n), S.UINT[w], S.SINT[w]
  if ins.op == "shl":
    def op(b: np.ndarray) -> np.ndarray: return (b << sh) & mask
  elif S.is_signed(t):
    def op(b: np.ndarray) -> np.ndarray: return (b.astype(ut).view(st) >> n).view(ut).astype(np.uint64)
  else:
    def op(b: np.ndarray) -> np.ndarray: return b >> sh
  def step(L: Launch) -> None:
    b, dd = fa(L)  # type: ignore[misc]
    L.put_bits(name, op(b), dd)
  return step


def _bitwise(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Instr, Entry], Step | None]:
  """and / or / xor .b32 .b64 of a register and a register or immediate (on raw bits)."""
  def build(ins: Instr, e: Entry) -> Step | None:
    if len(ins.types) != 1 or len(ins.args) != 3 or ins.args[1].kind != "reg": return None
    t = ins.types[0]
    w = TYPES[t]
    d = ins.args[0]
    if t[0] not in "bsu" or w not in (4, 8) or d.kind != "reg" or e.regs.get(d.value) in (None, "pred") or TYPES[e.regs[d.value]] != w: return None
    ut = "u" + str(8 * w)
    fa, fb, put = _typed_fetch(ins.args[1], ut), _typed_fetch(ins.args[2], ut), _dest(ins, e, d, ut)   # on the values as unsigned
    if fa is None or fb is None or put is None: return None
    def step(L: Launch) -> None:
      a, da = fa(L)
      b, db = fb(L)
      put(L, fn(a, b), db if da is None else da if db is None else da & db)
    return step
  return build


def _minmax(ins: Instr, e: Entry) -> Step | None:
  """min / max of f32 f64 (optionally .NaN; no .ftz) and of s/u 16-64 integers."""
  if len(ins.types) != 1 or len(ins.args) != 3: return None
  t = ins.types[0]
  if t not in ("f32", "f64") and (t[0] not in "su" or TYPES[t] < 2): return None
  if any(m not in (t, "NaN") for m in ins.mods) or (ins.has("NaN") and t[0] != "f"): return None
  fa, fb, put = _typed_fetch(ins.args[1], t), _typed_fetch(ins.args[2], t), _dest(ins, e, ins.args[0], t)
  if fa is None or fb is None or put is None or ins.args[1].kind != "reg": return None
  mx, nan = ins.op == "max", ins.has("NaN")
  if t[0] == "f": op = lambda a, b: S.fminmax(a, b, mx, nan)
  else: op = np.maximum if mx else np.minimum
  def step(L: Launch) -> None:
    a, da = fa(L)
    b, db = fb(L)
    put(L, np.asarray(op(a, b)), _and(da, db))
  return step


def _frn(name: str) -> Callable[[Instr, Entry], Step | None]:
  """rcp.rn.f32, sqrt.rn.f32 and div.rn.f32 (no .ftz): the correctly rounded semantics.fdiv / fsqrt the family handlers
  call, on the typed operands (no bit conversions); other forms (and integer div) go on to `then`."""
  then = _divrem_imm("div") if name == "div" else None
  nsrc = 2 if name == "div" else 1
  def build(ins: Instr, e: Entry) -> Step | None:
    if ins.types != ("f32",) or set(ins.mods) != {"rn", "f32"} or len(ins.args) != 1 + nsrc or ins.args[1].kind != "reg":
      return then(ins, e) if then is not None else None
    fs = [_typed_fetch(o, "f32") for o in ins.args[1:]]
    put = _dest(ins, e, ins.args[0], "f32")
    if put is None or any(f is None for f in fs): return None
    fa = fs[0]
    if name == "div":
      fb = fs[1]
      def div(L: Launch) -> None:
        a, da = fa(L)  # type: ignore[misc]
        b, db = fb(L)  # type: ignore[misc]
        a, b = np.broadcast_arrays(a, b)
        put(L, S.fdiv(a, b, "rn").astype(np.float32, copy=False), _and(da, db))
      return div
    def one(L: Launch) -> None:
      x, dx = fa(L)  # type: ignore[misc]
      # (rcp: fdiv's f64 quotient of 1 and x, without an array of ones; the f32 result is not copied again)
      put(L, ((1.0 / x.astype(np.float64)).astype(np.float32) if name == "rcp" else S.fsqrt(x, "rn").astype(np.float32, copy=False)), dx)
    return one
  return build


FAST: dict[str, Callable[[Instr, Entry], Step | None]] = {
  "min": _minmax, "max": _minmax,
  "ld": _ld, "st": _st, "prmt": _prmt, "cvta": _cvta, "shl": _shift_imm, "shr": _shift_imm,
  "and": _bitwise(np.bitwise_and), "or": _bitwise(np.bitwise_or), "xor": _bitwise(np.bitwise_xor), "mov": _mov, "setp": _setp, "selp": _selp,
  **{n: _int_or_f32(n) for n in ("add", "sub", "mul")}, **{n: _f32(n) for n in ("fma", "abs")}, "neg": _int_neg_mad("neg"), "mad": _int_neg_mad("mad"),
  "div": _frn("div"), "rem": _divrem_imm("rem"), "cvt": _cvt, "rcp": _frn("rcp"), "sqrt": _frn("sqrt"),
}


def _generic(ins: Instr) -> Step:
  h = TABLE[ins.op]
  return lambda L: h(L, ins)  # type: ignore[operator]


enabled = True   # False: every instruction through its generic handler (bench/bench_nv.py shows both)


def compile_entry(e: Entry) -> list[Step | None]:
  """One step closure per instruction (None for control flow, which the scheduler runs itself)."""
  out: list[Step | None] = []
  for ins in e.instrs:
    f = None
    if ins.op in TABLE:
      b = FAST.get(ins.op) if enabled else None
      f = (b(ins, e) if b is not None else None) or _generic(ins)
    out.append(f)
  if enabled: _coalesce_byte_loads(e, out)
  return out


# ---- byte loads -----------------------------------------------------------------------------------------------------
# nvcc loads a float it cannot assume aligned as 4 ld.global.u8 of [b+k] .. [b+k+3] (then prmt): the first of them gathers
# the 4 bytes once and the other three take theirs, when nothing between writes memory or the base register.
_MEM_WRITES = ("st", "atom", "red")


def _u8_load(ins: Instr) -> bool:
  return (ins.op == "ld" and ins.mods == ("global", "u8") and ins.pred is None and len(ins.args) == 2 and ins.args[0].kind == "reg"
          and ins.args[1].kind == "addr" and ins.args[1].value.kind == "reg")


def _dest_regs(ins: Instr) -> set[str]:
  if not ins.args or ins.op in ("st", "red"): return set()
  def regs(o: Operand) -> list[str]:
    if o.kind == "reg": return [str(o.value)]
    if o.kind in ("vec", "pair"): return [r for x in o.value for r in regs(x)]  # type: ignore[union-attr]
    return []
  return set(regs(ins.args[0]))


def _coalesce_byte_loads(e: Entry, out: list[Step | None]) -> None:
  """No label, control flow or memory write lies between a group's first load and its others, and an instruction is in at
  most one group: every prefetched byte is taken in the same pass that gathered it (or dropped when the lanes differ)."""
  instrs = e.instrs
  targets, taken = set(e.labels.values()), set()
  for i, ins in enumerate(instrs):
    if not _u8_load(ins) or out[i] is None or i in taken: continue
    base, k = ins.args[1].value.value, ins.args[1].offset
    members: dict[int, int] = {}   # byte (1..3) -> instruction index
    if base in _dest_regs(ins): continue
    for j in range(i + 1, min(i + 24, len(instrs))):
      x = instrs[j]
      if out[j] is None or x.op in _MEM_WRITES or j in targets: break
      if _u8_load(x) and j not in taken and x.args[1].value.value == base and (c := x.args[1].offset - k) in (1, 2, 3) and c not in members:
        members[c] = j
      if base in _dest_regs(x) or len(members) == 3: break
    puts = {c: _dest(instrs[j], e, instrs[j].args[0], "u8") for c, j in members.items()}
    put0 = _dest(ins, e, ins.args[0], "u8")
    if len(members) != 3 or put0 is None or any(p is None for p in puts.values()): continue
    taken |= {i, *members.values()}
    gid, first = i, out[i]
    def lead(L: Launch, first=first, put0=put0, gid=gid, base=ins.args[1].value, k=k, ins=ins) -> None:
      b, d = L.bits(base)
      raw = None if d is not None and not d.all() else L.global_group(b, k, 4)
      if raw is None: return first(L)  # type: ignore[misc]
      for c in (1, 2, 3): L.pref[(gid, c)] = (L.sel, raw)
      put0(L, raw[:, 0], None)
    out[i] = lead
    for c, j in members.items():
      put = puts[c]
      def member(L: Launch, own=out[j], put=put, key=(gid, c), c=c) -> None:
        p = L.pref.pop(key, None) if L.pref else None
        if p is None or p[0] is not L.sel: return own(L)  # type: ignore[misc]
        put(L, p[1][:, c], None)
      out[j] = member
