"""The PTX instruction table: family -> handler(launch, instr). Each handler reads its operands for the selected lanes
(Launch.sel), computes with the semantics of PTX ISA 9.0 §9.7, and writes its destinations."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from emulators.nv.ptx import semantics as S
from emulators.nv.ptx.cpasync import cp
from emulators.nv.ptx.execute import LOCAL_WINDOW, SHARED_WINDOW, Launch, PTXFault, from_bytes, to_bytes
from emulators.nv.ptx.execute import warp_check as _warp_check
from emulators.nv.ptx.extern import call as extern_call
from emulators.nv.ptx.mbarrier import mbarrier
from emulators.nv.ptx.parse import TYPES, Instr, Operand
from emulators.nv.ptx.simd import TABLE as VIDEO
from emulators.nv.ptx.wmma import ldmatrix, mma_float, wmma

ROUNDS = ("rn", "rz", "rm", "rp")
IROUNDS = ("rni", "rzi", "rmi", "rpi")


def _t(ins: Instr, i: int = -1) -> str:
  if not ins.types: raise PTXFault("compute", f"{ins.op} needs a type", ins)
  return ins.types[i]

def _rnd(ins: Instr) -> str: return next((m for m in ins.mods if m in ROUNDS), "rn")

def _finish(L: Launch, ins: Instr, t: str, r: np.ndarray) -> np.ndarray:
  if ins.has("ftz"): r = S.ftz(r)
  if ins.has("sat") and S.is_float(t): r = S.sat(r)
  return r


def _fv(L: Launch, o, t: str) -> np.ndarray:
  """A float operand as a numpy float array (bf16 widened to f32; .ftz flushes inputs)."""
  v = L.get(o, t)
  if t == "bf16": return S.bf16_to_f32(v)
  return v

def _fout(t: str, r: np.ndarray) -> np.ndarray:
  if t == "bf16": return S.f32_to_bf16(r.astype(np.float32)).view(np.uint16) if r.dtype != np.float64 else S.f64_to_bf16(r).view(np.uint16)
  return r.astype(S.NP[t])


def _x2(fn):
  """Apply a scalar-half handler to each half of f16x2/bf16x2 operands."""
  def run(L: Launch, ins: Instr, t: str, vals: list[np.ndarray]) -> np.ndarray:
    h = "f16" if t == "f16x2" else "bf16"
    lo = [(v & np.uint32(0xFFFF)).astype(np.uint16) for v in vals]
    hi = [(v >> np.uint32(16)).astype(np.uint16) for v in vals]
    def conv(x): return x.view(np.float16) if h == "f16" else S.bf16_to_f32(x)
    def back(r): return (r.astype(np.float16).view(np.uint16) if h == "f16" else _fout("bf16", r)).astype(np.uint32)
    return back(fn(L, ins, h, [conv(x) for x in lo])) | (back(fn(L, ins, h, [conv(x) for x in hi])) << np.uint32(16))
  return run


def _arith(name: str):
  """add sub mul mad fma div min max neg abs and integer forms."""
  def f_float(L: Launch, ins: Instr, t: str, v: list[np.ndarray]) -> np.ndarray:
    if ins.has("ftz"): v = [S.ftz(x) for x in v]
    rnd = _rnd(ins)
    if t == "bf16":   # computed in f32 then rounded once (exact products; sums are innocuous double roundings, 24 >= 2*8+2)
      v = [x.astype(np.float32) for x in v]
    if name == "add": return S.fadd(v[0], v[1], rnd)
    if name == "sub": return S.fadd(v[0], -v[1], rnd)
    if name == "mul": return S.fmul(v[0], v[1], rnd)
    if name in ("fma", "mad"):   # bf16: the exact product plus c rounded to odd in f64, then one rounding to bf16 (in _fout)
      if t != "bf16": return S.ffma(v[0], v[1], v[2], rnd)
      return S.add_round_to_odd(v[0].astype(np.float64) * v[1].astype(np.float64), v[2].astype(np.float64))
    if name == "div":
      if ins.has("approx") or ins.has("full"): return S.fdiv(v[0], v[1], "rn")   # within the approx bound (exact here)
      return S.fdiv(v[0], v[1], rnd)
    if name in ("min", "max"): return S.fminmax(v[0], v[1], name == "max", ins.has("NaN"))
    if name == "neg": return -v[0]
    if name == "abs": return np.abs(v[0])
    raise PTXFault("compute", f"{name} is not defined on .{t}", ins)

  nsrc = {"neg": 1, "abs": 1, "mad": 3, "fma": 3}.get(name, 2)

  def run(L: Launch, ins: Instr) -> None:
    t = _t(ins)
    if ins.has("cc") and name in ("add", "sub", "mad"): return _carry(L, ins)
    d, srcs = ins.args[0], ins.args[1:1 + nsrc]
    if S.is_float(t):
      if t in ("f16x2", "bf16x2"):
        r = _x2(f_float)(L, ins, t, [L.get(o, "b32") for o in srcs])
        return L.put(d, "b32", r)
      v = [_fv(L, o, t) for o in srcs]
      with np.errstate(all="ignore"): r = f_float(L, ins, t, v)
      r = _finish(L, ins, t, r) if t != "bf16" else r
      return L.put(d, t, _fout(t, r) if t in ("bf16", "f16") else r.astype(S.NP[t]))
    wide, hi = ins.has("wide"), ins.has("hi")
    st = ("s" if S.is_signed(t) else "u") + t[1:]
    v = [L.get(o, st) for o in srcs]
    with np.errstate(all="ignore"):
      if name in ("add", "sub"):
        if ins.has("sat"):
          r = (v[0].astype(np.int64) + (v[1].astype(np.int64) if name == "add" else -v[1].astype(np.int64)))
          r = np.clip(r, np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32)
        else: r = v[0] + v[1] if name == "add" else v[0] - v[1]
      elif name in ("mul", "mad"):
        if wide:
          wt = S.SINT[2 * v[0].itemsize] if S.is_signed(t) else S.UINT[2 * v[0].itemsize]
          r = v[0].astype(wt) * v[1].astype(wt)
          if name == "mad": r = r + L.get(srcs[2], st[0] + str(16 * v[0].itemsize))
          return L.put(d, st[0] + str(16 * v[0].itemsize), r)
        r = S.mulhi(v[0], v[1], S.is_signed(t)) if hi else v[0] * v[1]
        if name == "mad": r = r + v[2]
      elif name in ("min", "max"): r = np.minimum(v[0], v[1]) if name == "min" else np.maximum(v[0], v[1])
      elif name == "neg": r = -v[0]
      elif name == "abs": r = np.abs(v[0])
      elif name in ("div", "rem"):
        zero = v[1] == 0
        if zero.any():
          if L.checked: raise PTXFault("compute", f"integer division by zero ({name}, undefined in PTX) by {L.thread(int(np.flatnonzero(zero)[0]))}", ins)
        b = np.where(zero, 1, v[1]).astype(v[1].dtype)
        if S.is_signed(t):   # C semantics: truncation toward zero; INT_MIN / -1 wraps
          a64 = v[0].astype(np.int64) if v[0].itemsize < 8 else v[0]
          b64 = b.astype(np.int64) if b.itemsize < 8 else b
          ovf = (b64 == -1)
          bs = np.where(ovf, 1, b64)   # floor quotient, then toward zero (abs() of INT64_MIN would overflow)
          fq = a64 // bs
          q = np.where(ovf, -a64, fq + ((fq < 0) & (fq * bs != a64)))
          r = (q if name == "div" else a64 - q * b64).astype(v[0].dtype)
        else: r = v[0] // b if name == "div" else v[0] % b
      else: raise PTXFault("compute", f"{name}.{t}", ins)
    L.put(d, st, r.astype(v[0].dtype))
  return run


CARRY = "%cc.cf"   # the condition-code carry flag (PTX ISA §9.7.2): a hidden per-lane register, 0 or 1


def _carry(L: Launch, ins: Instr) -> None:
  """add.cc / addc(.cc) / sub.cc / subc(.cc) / mad(.lo/.hi).cc / madc(.lo/.hi)(.cc) on .u32 .s32 .u64 .s64 (PTX ISA §9.7.2):
  the sum with the carry-in (addc, madc) or the difference (subc: a - b - 1 + CF); .cc writes the carry out. The flag is
  unsigned carry arithmetic whatever the type's signedness, and a subtraction is a + ~b + 1 on it: its flag is 1 when
  nothing was borrowed (the ISA's text calls the flag a borrow, but nvcc's own code (its inline-asm __int128 division)
  reads `addc 0, 0` after `sub.cc` as "no borrow", as the hardware's carry chain gives; tests/emulators/ptx/test_carry_rounding.py)."""
  t = _t(ins)
  w = TYPES[t] * 8
  if w not in (32, 64) or t[0] not in "su": raise PTXFault("compute", f"{ins.op}.{'.'.join(ins.mods)}: carry ops take .u32 .s32 .u64 .s64", ins)
  base = ins.op.removesuffix("c") if ins.op in ("addc", "subc", "madc") else ins.op
  use_in = ins.op in ("addc", "subc", "madc")
  ut = "u" + str(w)
  d = ins.args[0]
  a, b = L.get(ins.args[1], ut).astype(np.uint64), L.get(ins.args[2], ut).astype(np.uint64)
  if base == "mad":   # the low or high half of the product, then the add
    hi = ins.has("hi")
    a = S.mulhi(L.get(ins.args[1], t), L.get(ins.args[2], t), S.is_signed(t)).view(S.UINT[w // 8]).astype(np.uint64) if hi else a * b
    if w == 32: a &= np.uint64(0xFFFFFFFF)
    b = L.get(ins.args[3], ut).astype(np.uint64)
  cin = np.zeros(L.sel.size, np.uint64)
  if use_in:
    if CARRY not in L.regs:
      if L.checked: raise PTXFault("compute", f"{ins.op} reads the carry flag, which no .cc instruction set (undefined)", ins)
    else:
      cin, dc = L.bits(Operand("reg", CARRY))
      if dc is not None and L._d is not None: L._d = L._d & dc
      elif dc is not None: L._d = dc
  if base in ("add", "mad"):
    if w == 32: s, out = a + b + cin, None
    else:
      s = a + b
      out = (s < a) | ((s + cin) < s)
      s = s + cin
  else:   # a + ~b + carry-in (1 for sub.cc): the flag out is that sum's carry, set when nothing was borrowed
    nb = ~b & np.uint64(0xFFFFFFFF) if w == 32 else ~b
    c = cin if use_in else np.ones(L.sel.size, np.uint64)
    if w == 32: s, out = a + nb + c, None
    else:
      s = a + nb
      out = (s < a) | ((s + c) < s)
      s = s + c
  if w == 32:
    if out is None: out = (s >> np.uint64(32)) != 0
    s = s & np.uint64(0xFFFFFFFF)
  dd = L._d
  L.put(d, ut, s.astype(S.UINT[w // 8]))
  if ins.has("cc"): L.put_bits(CARRY, out.astype(np.uint64), dd)


def _bitop(name: str):
  def run(L: Launch, ins: Instr) -> None:
    t = _t(ins)
    if t == "pred":
      v = [L.get(o, "pred") for o in ins.args[1:]]
      return L.put(ins.args[0], "pred", _PRED_BITOPS[name](v))
    u = "u" + t[1:] if t[0] in "bsu" else "b32"
    v = [L.get(o, u) for o in ins.args[1:]]
    L.put(ins.args[0], u, _BITOPS[name](v))
  return run


_PRED_BITOPS: dict[str, Callable[[list[np.ndarray]], np.ndarray]] = {
  "and": lambda v: v[0] & v[1], "or": lambda v: v[0] | v[1], "xor": lambda v: v[0] ^ v[1], "not": lambda v: ~v[0]}
_BITOPS = {**_PRED_BITOPS, "cnot": lambda v: (v[0] == 0).astype(v[0].dtype)}


def _lop3(L: Launch, ins: Instr) -> None:
  """lop3.b32 d, a, b, c, immLut: each result bit is bit (a<<2 | b<<1 | c) of immLut, for a b c that bit of the sources
  (immLut = F(0xF0, 0xCC, 0xAA)); lop3.{or,and}.b32 d|p, a, b, c, immLut, q also sets p = (d != 0) op q."""
  d, p = (ins.args[0].value if ins.args[0].kind == "pair" else (ins.args[0], None))  # type: ignore[misc]
  a, b, c = (L.get(o, "u32") for o in ins.args[1:4])
  lut = L.get(ins.args[4], "u32")
  r = np.zeros(a.size, np.uint32)
  for k in range(8):   # the minterm a^(k>>2) b^(k>>1) c^k where the table's bit k is set
    term = (a if k & 4 else ~a) & (b if k & 2 else ~b) & (c if k & 1 else ~c)
    r |= np.where((lut >> np.uint32(k)) & np.uint32(1), term, np.uint32(0)).astype(np.uint32)
  L.put(d, "u32", r)
  if p is not None:
    if len(ins.args) != 6 or not (ins.has("or") or ins.has("and")): raise PTXFault("compute", "lop3 with a predicate result needs .or/.and and a predicate q", ins)
    q = L.get(ins.args[5], "pred")
    L.put(p, "pred", ((r != 0) | q) if ins.has("or") else ((r != 0) & q))


def _mode_n(ins: Instr, v: np.ndarray) -> np.ndarray:
  """A bit position or count of bmsk / szext as int64: .clamp limits it to 32, .wrap takes it mod 32."""
  if ins.has("wrap"): return (v & np.uint32(31)).astype(np.int64)
  if not ins.has("clamp"): raise PTXFault("compute", f"{ins.op} needs .clamp or .wrap", ins)
  return np.minimum(v, np.uint32(32)).astype(np.int64)


def _bmsk(L: Launch, ins: Instr) -> None:
  """bmsk.{clamp,wrap}.b32 d, a, b: b one-bits starting at bit a (those past bit 31 dropped)."""
  a, b = (_mode_n(ins, L.get(o, "u32")) for o in ins.args[1:3])
  ones = np.int64(0xFFFFFFFF)
  hi = np.where(a + b < 32, (ones << np.minimum(a + b, 32)) & ones, 0)
  L.put(ins.args[0], "u32", (((ones << a) & ones) & ~hi).astype(np.uint32))


def _szext(L: Launch, ins: Instr) -> None:
  """szext.{clamp,wrap}.{s32,u32} d, a, b: the low N = b bits of a sign- (.s32) or zero-extended (.u32); N = 0 gives 0,
  N >= 32 (.clamp) gives a."""
  a, n = L.get(ins.args[1], "u32").astype(np.int64), _mode_n(ins, L.get(ins.args[2], "u32"))
  low = a & ((np.int64(1) << n) - 1)
  if _t(ins) == "s32": low = np.where((n > 0) & ((low >> np.maximum(n - 1, 0)) & 1 == 1), low - (np.int64(1) << n), low)
  L.put(ins.args[0], "u32", (np.where(n >= 32, a, np.where(n == 0, 0, low)) & 0xFFFFFFFF).astype(np.uint32))


def _fns(L: Launch, ins: Instr) -> None:
  """fns.b32 d, mask, base, offset: the position of the |offset|-th set bit of mask counting from bit base toward the
  MSB (offset > 0) or the LSB (offset < 0), or base itself when offset is 0 and that bit is set; else 0xFFFFFFFF."""
  mask, base, off = L.get(ins.args[1], "u32"), L.get(ins.args[2], "u32").astype(np.int64), L.get(ins.args[3], "s32").astype(np.int64)
  if L.checked and ((base < 0) | (base > 31)).any():
    raise PTXFault("compute", f"fns base outside 0..31 (undefined) for {L.thread(int(np.flatnonzero((base < 0) | (base > 31))[0]))}", ins)
  pos = np.arange(32, dtype=np.int64)
  bit = ((mask[:, None] >> pos.astype(np.uint32)) & np.uint32(1)).astype(bool)
  up = bit & (pos >= base[:, None])
  down = bit & (pos <= base[:, None])
  k = np.abs(off)[:, None]
  hit_up = up & (np.cumsum(up, axis=1) == k)                    # the k-th set bit at or above base
  hit_down = down & (np.cumsum(down[:, ::-1], axis=1)[:, ::-1] == k)   # the k-th set bit at or below base, going down
  hit = np.where((off > 0)[:, None], hit_up, hit_down)
  found = hit.any(axis=1) & (off != 0)
  r = np.where(found, hit.argmax(axis=1), -1)
  r = np.where(off == 0, np.where(bit[np.arange(bit.shape[0]), np.clip(base, 0, 31)], base, -1), r)
  L.put(ins.args[0], "u32", (r & 0xFFFFFFFF).astype(np.uint32))


def _sad(L: Launch, ins: Instr) -> None:
  """sad d, a, b, c: c + |a - b| (the difference exact, the sum wrapping to the type's width)."""
  t = _t(ins)
  ut = "u" + t[1:]
  a, b = L.get(ins.args[1], t), L.get(ins.args[2], t)
  ua, ub = a.view(S.UINT[TYPES[t]]), b.view(S.UINT[TYPES[t]])
  with np.errstate(all="ignore"): r = np.where(a > b, ua - ub, ub - ua) + L.get(ins.args[3], ut)   # |a - b| fits the unsigned type
  L.put(ins.args[0], ut, r.astype(S.UINT[TYPES[t]]))


def _mul24(L: Launch, ins: Instr) -> None:
  """mul24/mad24 .lo/.hi on .u32/.s32: the 48-bit product of the low 24 bits of a and b (sign-extended for .s32), its
  bits 0-31 (.lo) or 16-47 (.hi); mad24 adds c (.hi.sat.s32: clamped to the int32 range)."""
  t = _t(ins)
  if t not in ("u32", "s32"): raise PTXFault("compute", f"{ins.op} takes .u32 or .s32", ins)
  a, b = (L.get(o, "u32").astype(np.int64) & 0xFFFFFF for o in ins.args[1:3])
  if t == "s32": a, b = (np.where(x & 0x800000, x - (1 << 24), x) for x in (a, b))
  prod = a * b
  r = (prod >> 16) if ins.has("hi") else prod
  if ins.op == "mad24":
    r = r + L.get(ins.args[3], t).astype(np.int64)   # (|a * b| < 2**46: .hi of .s32 is exact as prod >> 16)
    if ins.has("sat"):
      if not (ins.has("hi") and t == "s32"): raise PTXFault("compute", "mad24.sat is defined for .hi.s32 only", ins)
      r = np.clip(r, -2**31, 2**31 - 1)
  L.put(ins.args[0], "u32", (r & 0xFFFFFFFF).astype(np.uint32))


def _shift(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  w = TYPES[t] * 8
  st = ("s" if S.is_signed(t) else "u") + str(w)
  a, s = L.get(ins.args[1], st), L.get(ins.args[2], "u32").astype(np.uint64)
  big = s >= w
  sc = np.minimum(s, w - 1).astype(a.dtype if a.dtype.kind == "u" else S.UINT[a.itemsize]).astype(a.dtype)
  with np.errstate(all="ignore"):
    if ins.op == "shl": r = np.where(big, 0, a << sc)
    else: r = np.where(big, np.where(a < 0, -1, 0) if S.is_signed(t) else 0, a >> sc)
  L.put(ins.args[0], st, r.astype(a.dtype))


def _shf(L: Launch, ins: Instr) -> None:
  a, b, c = (L.get(o, "u32").astype(np.uint64) for o in ins.args[1:4])
  n = (c & np.uint64(31)) if ins.has("wrap") else np.minimum(c, np.uint64(32))
  x = (b << np.uint64(32)) | a
  r = (x << n) >> np.uint64(32) if ins.has("l") else (x >> n)
  L.put(ins.args[0], "u32", (r & np.uint64(0xFFFFFFFF)).astype(np.uint32))


def _mov(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  d, s = ins.args[0], ins.args[1]
  if d.kind == "vec" or s.kind == "vec":   # pack / unpack
    if s.kind == "vec":
      parts = [L.get(o, "u" + str(TYPES[t] * 8 // len(s.value))).astype(np.uint64) for o in s.value]
      w = TYPES[t] * 8 // len(parts)
      r = sum((p << np.uint64(w * i) for i, p in enumerate(parts)), np.zeros(L.sel.size, np.uint64))
      return L.put(d, t, r.astype(S.UINT[TYPES[t]]))
    v = L.get(s, "u" + str(TYPES[t] * 8)).astype(np.uint64)
    w = TYPES[t] * 8 // len(d.value)
    for i, o in enumerate(d.value):
      if o.kind == "sym" and o.value == "_": continue
      L.put(o, "u" + str(w), ((v >> np.uint64(w * i)) & np.uint64((1 << w) - 1)).astype(S.UINT[w // 8]))
    return None
  if s.kind == "sym":
    L.put(d, t, L.bits(s)[0].astype(S.UINT[TYPES[t]]) if t != "pred" else L.bits(s)[0])
    return None
  L.put(d, t, L.get(s, t))


_CVTA_BASE = {"shared": np.uint64(SHARED_WINDOW), "local": np.uint64(LOCAL_WINDOW), "global": np.uint64(0)}   # generic windows


def _cvta(L: Launch, ins: Instr) -> None:
  space = L.space_of(ins)
  a = L.get(ins.args[1], "u64") if ins.args[1].kind != "sym" else L.bits(ins.args[1])[0]
  base = _CVTA_BASE.get(space)
  if base is None: raise PTXFault("compute", f"cvta.{space}", ins)
  r = a - base if ins.has("to") else a + base
  L.put(ins.args[0], _t(ins), r.astype(S.UINT[TYPES[_t(ins)]]))


def _setp(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  c = next(m for m in ins.mods if m not in (t, "ftz", "and", "or", "xor"))
  a, b = L.get(ins.args[1], t), L.get(ins.args[2], t)
  if t == "bf16": a, b = S.bf16_to_f32(a), S.bf16_to_f32(b)
  if ins.has("ftz"): a, b = S.ftz(a), S.ftz(b)
  r = S.cmp(a, b, c, t)
  dst = ins.args[0]
  q = None
  if dst.kind == "pair": dst, q = dst.value
  if len(ins.args) > 3:
    p = L.get(ins.args[3], "pred")
    op = next(m for m in ins.mods if m in ("and", "or", "xor"))
    comb = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
    L.put(dst, "pred", comb(r, p))
    if q is not None: L.put(q, "pred", comb(~r, p))
    return
  L.put(dst, "pred", r)
  if q is not None: L.put(q, "pred", ~r)


def _set(L: Launch, ins: Instr) -> None:
  """set.CmpOp{.BoolOp}{.ftz}.dtype.stype d, a, b{, {!}c}: setp's comparison (and combination) as a value: all ones
  (integer dtype) or 1.0f (.f32) when true, 0 when false."""
  if len(ins.types) != 2: raise PTXFault("compute", "set needs .dtype.stype", ins)
  dt, t = ins.types
  c = next(m for m in ins.mods if m not in (dt, t, "ftz", "and", "or", "xor"))
  a, b = L.get(ins.args[1], t), L.get(ins.args[2], t)
  if t == "bf16": a, b = S.bf16_to_f32(a), S.bf16_to_f32(b)
  if ins.has("ftz"): a, b = S.ftz(a), S.ftz(b)
  r = S.cmp(a, b, c, t)
  if len(ins.args) > 3:
    op = next(m for m in ins.mods if m in ("and", "or", "xor"))
    r = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op](r, L.get(ins.args[3], "pred"))
  if dt == "f32": return L.put(ins.args[0], "f32", np.where(r, np.float32(1), np.float32(0)))
  if dt not in ("u32", "s32"): raise PTXFault("compute", f"set.{dt}: the destination type is .u32, .s32 or .f32", ins)
  L.put(ins.args[0], "u32", np.where(r, np.uint32(0xFFFFFFFF), np.uint32(0)))


def _isspacep(L: Launch, ins: Instr) -> None:
  """isspacep.{global,shared,local,const,param} p, a: whether generic address a lies in that state space's window."""
  a = L.get(ins.args[1], "u64")
  parts = L._generic_split(a)
  space = next((m for m in ins.mods if m in ("global", "shared", "local", "const", "param")), None)
  if space is None: raise PTXFault("compute", "isspacep needs a state space (.global .shared .local .const .param)", ins)
  L.put(ins.args[0], "pred", parts.get(space, np.zeros(a.size, np.bool_)))


def selected_defined(p: np.ndarray, dp: np.ndarray | None, da: np.ndarray | None, db: np.ndarray | None) -> np.ndarray | None:
  """Definedness of a per-lane selection: the chosen operand's, where the predicate itself is defined (memcheck: the
  operand not chosen does not matter)."""
  if da is None and db is None: return dp
  d = np.where(p, True if da is None else da, True if db is None else db)
  return d if dp is None else d & dp

def _selp(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  (a, da), (b, db), (p, dp) = L.get_defined(ins.args[1], t), L.get_defined(ins.args[2], t), L.get_defined(ins.args[3], "pred")
  d = selected_defined(p, dp, da, db)
  L.put(ins.args[0], t, np.where(p, a, b), d)


def _slct(L: Launch, ins: Instr) -> None:
  t, ct = ins.types[0], ins.types[1]
  a, b, c = L.get(ins.args[1], t), L.get(ins.args[2], t), L.get(ins.args[3], ct)
  if ins.has("ftz"): c = S.ftz(c)
  L.put(ins.args[0], t, np.where(c >= 0, a, b))


def _cvt_tf32(L: Launch, ins: Instr) -> None:
  """cvt.{rna,rn,rz}.tf32.f32 d, a (d a .b32): semantics.to_tf32."""
  rnd = [m for m in ins.mods if m not in ins.types]
  if ins.types[1] != "f32" or len(rnd) != 1 or rnd[0] not in S.TF32_ROUNDS:
    raise PTXFault("compute", f"cvt.{'.'.join(ins.mods)} is not supported (to .tf32: only .rna/.rn/.rz from .f32, no .relu/.satfinite)", ins)
  L.put(ins.args[0], "b32", S.to_tf32(L.get(ins.args[1], "f32"), rnd[0]))


def _cvt(L: Launch, ins: Instr) -> None:
  dt, st = ins.types[0], ins.types[1]
  if dt == "tf32": return _cvt_tf32(L, ins)
  rnd = next((m for m in ins.mods if m in ROUNDS + IROUNDS), "")
  x = L.get(ins.args[1], st)
  with np.errstate(all="ignore"):
    if S.is_float(dt):
      if rnd in IROUNDS:   # round to an integral value in the same float type
        f = _fv(L, ins.args[1], st) if st == "bf16" else x
        if ins.has("ftz"): f = S.ftz(f)
        r = S.INT_ROUND[rnd](f)
        r = _fout(dt, r) if dt == "bf16" else r.astype(S.NP[dt])
      else:
        if ins.has("ftz") and st == "f32": x = S.ftz(x)
        if S.is_float(st) and rnd == "" and TYPES[dt] < TYPES[st] and dt != "bf16": rnd = "rn"
        r = S.to_float(x, st, dt, rnd.removesuffix("i") if rnd else "rn")
        if ins.has("ftz") and dt == "f32": r = S.ftz(r)
        if ins.has("sat") and dt != "bf16": r = S.sat(r)
      return L.put(ins.args[0], dt, r)
    if S.is_float(st):
      f = S.bf16_to_f32(x) if st == "bf16" else x
      if ins.has("ftz"): f = S.ftz(f)
      return L.put(ins.args[0], dt, S.to_int(f, dt, rnd))
    # integer -> integer: extend / truncate; .sat clamps
    if ins.has("sat"):
      info = np.iinfo(S.NP[dt])
      v = x.astype(np.float64) if x.itemsize == 8 else x.astype(np.int64)
      r = np.clip(v, info.min, info.max).astype(S.NP[dt])
    else: r = x.astype(S.NP[dt]) if dt[0] != "b" else x.astype(S.UINT[TYPES[dt]])
    L.put(ins.args[0], dt, r)


def _unary_int(name: str):
  def run(L: Launch, ins: Instr) -> None:
    t = _t(ins)
    w = TYPES[t] * 8
    v = L.get(ins.args[1], "u" + str(w)).astype(np.uint64)
    if name == "popc": r = _popc(v)
    elif name == "clz":
      r = np.full(v.size, w, np.uint32)
      nz = v != 0
      r[nz] = (w - 1 - np.floor(np.log2(v[nz].astype(np.float64))).astype(np.int64)).astype(np.uint32)
      # log2 of big u64 can round up to the next power of two: fix by checking the bit
      pos = (w - 1 - r[nz].astype(np.int64)).astype(np.uint64)
      off = (v[nz] >> pos) == 0
      r[np.flatnonzero(nz)[off]] += 1
    elif name == "brev":
      r = np.zeros(v.size, np.uint64)
      for i in range(w): r |= ((v >> np.uint64(i)) & np.uint64(1)) << np.uint64(w - 1 - i)
      return L.put(ins.args[0], "u" + str(w), r.astype(S.UINT[w // 8]))
    else: raise PTXFault("compute", name, ins)
    L.put(ins.args[0], "u32", r.astype(np.uint32))
  return run


def _bfind(L: Launch, ins: Instr) -> None:
  """Position of the most significant non-sign bit (0xFFFFFFFF if none); .shiftamt: the left shift that brings it to the top."""
  t = _t(ins)
  w = TYPES[t] * 8
  v = L.get(ins.args[1], t)
  if S.is_signed(t): v = np.where(v < 0, ~v, v)
  u = v.view(S.UINT[w // 8]).astype(np.uint64)
  pos = np.full(u.size, -1, np.int64)
  for b in range(w): pos = np.where((u >> np.uint64(b)) & np.uint64(1), b, pos)
  r = np.where(pos < 0, 0xFFFFFFFF, (w - 1 - pos) if ins.has("shiftamt") else pos)
  L.put(ins.args[0], "u32", r.astype(np.uint32))


def _popc(v: np.ndarray) -> np.ndarray:
  return np.unpackbits(v.astype(np.uint64).view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1).astype(np.uint32)


def _low_ones(n: np.ndarray) -> np.ndarray:
  """uint64 masks of the low n bits (n in 0..64) per lane."""
  return np.where(n >= 64, np.uint64(0xFFFFFFFFFFFFFFFF), (np.uint64(1) << np.minimum(n, np.uint64(63))) - np.uint64(1))


def _bfe(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  w = TYPES[t] * 8
  a = L.get(ins.args[1], "u" + str(w)).astype(np.uint64)
  pos, ln = (L.get(o, "u32").astype(np.uint64) & np.uint64(0xFF) for o in ins.args[2:4])
  p2 = np.minimum(pos, np.uint64(w))
  sh = np.where(p2 >= 64, np.uint64(0), a >> np.minimum(p2, np.uint64(63)))
  ln2 = np.minimum(ln, np.uint64(w))
  mask = _low_ones(ln2)
  r = sh & mask
  if S.is_signed(t):
    sbit_pos = np.minimum(pos + ln - np.uint64(1), np.uint64(w - 1))
    sbit = np.where(ln == 0, np.uint64(0), (a >> sbit_pos) & np.uint64(1))
    r = np.where((sbit == 1) & (ln2 < w), r | ~mask, r)
  L.put(ins.args[0], "u" + str(w), (r & np.uint64((1 << w) - 1)).astype(S.UINT[w // 8]))


def _bfi(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  w = TYPES[t] * 8
  a, b = (L.get(o, "u" + str(w)).astype(np.uint64) for o in ins.args[1:3])
  pos, ln = (L.get(o, "u32").astype(np.uint64) & np.uint64(0xFF) for o in ins.args[3:5])
  ln2 = np.minimum(ln, np.uint64(w))
  mask = _low_ones(ln2)
  ok = pos < w
  m = np.where(ok, mask << np.minimum(pos, np.uint64(63)), np.uint64(0))
  r = (b & ~m) | ((a << np.minimum(pos, np.uint64(63))) & m)
  L.put(ins.args[0], "u" + str(w), (r & np.uint64((1 << w) - 1)).astype(S.UINT[w // 8]))


# prmt's modes: for c & 3 = 0..3, the source bytes of result bytes 3, 2, 1, 0 (bytes 0-3 of a, 4-7 of b)
_PRMT_MODES = {"f4e": ("3210", "4321", "5432", "6543"), "b4e": ("5670", "6701", "7012", "0123"), "rc8": ("0000", "1111", "2222", "3333"),
               "ecl": ("3210", "3211", "3222", "3333"), "ecr": ("0000", "1110", "2210", "3210"), "rc16": ("1010", "3232", "1010", "3232")}


def _prmt(L: Launch, ins: Instr) -> None:
  a, b, c = (L.get(o, "u32") for o in ins.args[1:4])
  mode = next((m for m in ins.mods if m in _PRMT_MODES), None)
  if mode is not None:   # c's low two bits pick one of the mode's four byte selections
    pick = np.array([[int(ch) for ch in reversed(sel)] for sel in _PRMT_MODES[mode]], np.int64)[(c & np.uint32(3)).astype(np.int64)]
    src = np.stack([a, b], 1).view(np.uint8).reshape(-1, 8)
    return L.put(ins.args[0], "u32", np.ascontiguousarray(np.take_along_axis(src, pick, 1)).view(np.uint32).reshape(-1))
  if ins.args[3].kind == "imm":   # constant selector (what nvcc emits): shifts and masks per result byte
    x = a.astype(np.uint64) | (b.astype(np.uint64) << np.uint64(32))
    r = np.zeros(a.size, np.uint64)
    for i in range(4):
      sl = (ins.args[3].value >> (4 * i)) & 0xF
      byte = (x >> np.uint64(8 * (sl & 7))) & np.uint64(0xFF)
      if sl & 8: byte = np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0))
      r |= byte << np.uint64(8 * i)
    return L.put(ins.args[0], "u32", r.astype(np.uint32))
  src = np.stack([a, b], 1).view(np.uint8).reshape(-1, 8)   # bytes 0-3 of a, then 4-7 of b (little-endian)
  shifts = np.array([0, 4, 8, 12], np.uint32)
  sel = (c[:, None] >> shifts) & np.uint32(0xF)
  byte = np.take_along_axis(src, (sel & np.uint32(7)).astype(np.int64), 1)
  byte = np.where(sel & np.uint32(8), np.where(byte & np.uint8(0x80), np.uint8(0xFF), np.uint8(0)), byte)
  L.put(ins.args[0], "u32", np.ascontiguousarray(byte).view(np.uint32).reshape(-1))


def _ffloat(name: str):
  """sqrt rcp rsqrt ex2 lg2 sin cos tanh: .rn forms correctly rounded; .approx within the ISA's bounds (computed in f64)."""
  def run(L: Launch, ins: Instr) -> None:
    t = _t(ins)
    x = _fv(L, ins.args[1], t)
    if ins.has("ftz"): x = S.ftz(x)
    with np.errstate(all="ignore"):
      xd = x.astype(np.float64)
      if name == "sqrt": r = S.fsqrt(x, _rnd(ins)) if not ins.has("approx") else np.sqrt(xd)
      elif name == "rcp": r = S.fdiv(np.ones_like(x), x, _rnd(ins)) if not ins.has("approx") else 1.0 / xd
      elif name == "rsqrt": r = 1.0 / np.sqrt(xd)
      elif name == "ex2": r = np.exp2(xd)
      elif name == "lg2": r = np.log2(xd)
      elif name == "sin": r = np.sin(xd)
      elif name == "cos": r = np.cos(xd)
      elif name == "tanh": r = np.tanh(xd)
      else: raise PTXFault("compute", name, ins)
    r = _finish(L, ins, t, r.astype(np.float64 if t == "f64" else np.float32))
    L.put(ins.args[0], t, _fout(t, r))
  return run


def _testp(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  x = _fv(L, ins.args[1], t)
  c = next(m for m in ins.mods if m != t)
  with np.errstate(all="ignore"): r = _TESTP[c](x)
  L.put(ins.args[0], "pred", r)


_TESTP: dict[str, Callable[[np.ndarray], np.ndarray]] = {   # only the asked class is computed
  "finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x), "notanumber": np.isnan,
  "normal": lambda x: np.isfinite(x) & (np.abs(x) >= np.finfo(x.dtype).tiny), "subnormal": lambda x: (x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny)}


def _copysign(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  a, b = L.get(ins.args[1], t), L.get(ins.args[2], t)
  L.put(ins.args[0], t, np.copysign(b, a))


# ---- memory -------------------------------------------------------------------------------------------------------
def _vec_n(ins: Instr) -> int:
  for m in ins.mods:
    if m in ("v2", "v4", "v8"): return int(m[1])
  return 1


# strong ld/st (PTX ISA §8.4: .relaxed .acquire .release, and .volatile = .relaxed.sys; .mmio is .relaxed.sys too): the
# race checker's strong accesses (Launch._race), with the ordering they carry
_STRONG = frozenset({"volatile", "relaxed", "mmio", "acquire", "release"})


def strong(ins: Instr) -> tuple[bool, str | None]:
  """Whether an ld/st is a strong access, and the ordering it carries (acquire, release or None)."""
  if _STRONG.isdisjoint(ins.mods): return False, None
  return True, next((x for x in ins.mods if x in ("acquire", "release", "acq_rel")), None)


def _ld(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  n, w = _vec_n(ins), TYPES[t]
  addr = L.address(ins.args[1])
  L.strong, L.sem = strong(ins)
  try: raw, dd = L.load(L.space_of(ins), addr, n * w)
  finally: L.strong = False
  dsts = ins.args[0].value if n > 1 else (ins.args[0],)
  for i, o in enumerate(dsts):
    if o.kind == "sym" and o.value == "_": continue
    v = from_bytes(raw[:, i * w:(i + 1) * w], t if t != "pred" else "u8")
    L._d = dd
    L.put(o, t, v)


def _st(L: Launch, ins: Instr) -> None:
  t = _t(ins)
  n, w = _vec_n(ins), TYPES[t]
  addr = L.address(ins.args[0])
  srcs = ins.args[1].value if n > 1 else (ins.args[1],)
  L._d = None
  vals = [to_bytes(L.get(o, t), w) for o in srcs]
  L.strong, L.sem = strong(ins)
  try: L.store(L.space_of(ins), addr, np.concatenate(vals, axis=1), L._d)
  finally: L.strong = False


ATOM_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas")


def _atom(L: Launch, ins: Instr) -> None:
  """atom / red: lanes are applied in lane order; lanes hitting the same address are serialized in rounds, or (many
  lanes on few addresses: a lock, a shared accumulator) each address's lanes in one ordered scan (_atom_scan)."""
  t = _t(ins)
  op = next((m for m in ins.mods if m in ATOM_OPS), None)
  if op is None: raise PTXFault("compute", f"{ins.op} without a supported operation ({', '.join(ATOM_OPS)})", ins)
  if _vec_n(ins) > 1: raise PTXFault("compute", f"vector {ins.op} is not supported", ins)
  if t in ("f16x2", "bf16x2") and op != "add": raise PTXFault("compute", f"{ins.op}.{op}.{t} is not defined (packed halves take .add only)", ins)
  red = ins.op == "red"
  ai = 0 if red else 1
  addr = L.address(ins.args[ai])
  b = L.get(ins.args[ai + 1], t)
  c = L.get(ins.args[ai + 2], t) if op == "cas" else None
  space, w = L.space_of(ins), TYPES[t]
  old_all = np.zeros(addr.size, S.NP[t] if t != "bf16" else np.uint16)
  sel = L.sel
  # strong (relaxed unless .acquire/.release/.acq_rel): no race with other strong accesses, still one with weak ones
  L.strong, L.sem = True, next((m for m in ins.mods if m in ("acquire", "release", "acq_rel")), None)
  try:
    # (lanes of different CTAs at one shared offset touch different memory: rounds keep them apart, the scan would not)
    _, first, inv, counts = np.unique(addr, return_index=True, return_inverse=True, return_counts=True)
    if counts.max() > ATOM_ROUNDS and (space == "global" or L.ncta == 1 or (L.cta[sel] == L.cta[sel[0]]).all()):
      _atom_scan(L, ins, op, t, w, space, addr, b, c, first, inv.reshape(-1), old_all)
    else:
      left = np.arange(addr.size)
      now = np.sort(first)
      while left.size:
        L.sel = sel[now]
        raw, _ = L.load(space, addr[now], w)
        old = from_bytes(raw, t)
        new = _atom_apply(op, t, old, b[now], c[now] if c is not None else None, L, ins)
        L.store(space, addr[now], to_bytes(new.astype(old.dtype), w), None)
        old_all[now] = old
        left = np.setdiff1d(left, now, assume_unique=True)
        if left.size: now = left[np.sort(np.unique(addr[left], return_index=True)[1])]
  finally: L.sel, L.strong = sel, False
  if not red: L.put(ins.args[0], t, old_all)


ATOM_ROUNDS = 8   # more lanes than this on one address: one ordered scan per address instead of a round per lane


def _atom_apply(op: str, t: str, old: np.ndarray, x: np.ndarray, c: np.ndarray | None, L: Launch, ins: Instr) -> np.ndarray:
  """The value an atomic op leaves, from the value it found (one lane per address)."""
  with np.errstate(all="ignore"):
    if op == "add":
      if t == "f16": return (old.astype(np.float32) + x.astype(np.float32)).astype(np.float16)
      if t == "bf16": return S.f32_to_bf16(S.bf16_to_f32(old) + S.bf16_to_f32(x)).view(np.uint16)
      if t in ("f16x2", "bf16x2"): return _x2(lambda L_, i_, h, v: v[0].astype(np.float32) + v[1].astype(np.float32))(L, ins, t, [old, x])
      return old + x
    if op == "min": return S.fminmax(old, x, False, False) if S.is_float(t) else np.minimum(old, x)
    if op == "max": return S.fminmax(old, x, True, False) if S.is_float(t) else np.maximum(old, x)
    if op == "inc": return np.where(old >= x, 0, old + 1).astype(old.dtype)
    if op == "dec": return np.where((old == 0) | (old > x), x, old - 1).astype(old.dtype)
    if op == "and": return old & x
    if op == "or": return old | x
    if op == "xor": return old ^ x
    if op == "exch": return x
    assert c is not None
    return np.where(old == x, c, old)


def _atom_scan(L: Launch, ins: Instr, op: str, t: str, w: int, space: str, addr: np.ndarray, b: np.ndarray, c: np.ndarray | None,
               first: np.ndarray, inv: np.ndarray, old_all: np.ndarray) -> None:
  """Each address's lanes in lane order at once: integer add/and/or/xor/min/max and float add (f32 f64 f16) as an
  accumulate (one rounding per add, in order), exch as a shift, the rest one lane at a time on scalars."""
  sel = L.sel
  L.sel = sel[first]
  try: raw, _ = L.load(space, addr[first], w)
  finally: L.sel = sel
  mem = from_bytes(raw, t).copy()
  order = np.argsort(inv, kind="stable")   # lanes grouped by address, each group in lane order
  bounds = np.searchsorted(inv[order], np.arange(first.size + 1))
  integer = t[0] in "su" or (t[0] == "b" and t[1:].isdigit())   # (not bf16, bf16x2)
  ufunc = _ATOM_UFUNCS.get(op) if (op == "add" and t in ("f32", "f64", "f16")) or integer else None
  with np.errstate(all="ignore"):
    for g in range(first.size):
      lanes = order[bounds[g]:bounds[g + 1]]
      if op == "exch":
        old_all[lanes[0]], old_all[lanes[1:]], mem[g] = mem[g], b[lanes[:-1]], b[lanes[-1]]
      elif ufunc is not None:
        acc = ufunc.accumulate(np.concatenate([mem[g:g + 1], b[lanes].astype(mem.dtype)]))
        old_all[lanes], mem[g] = acc[:-1], acc[-1]
      else:   # (cas inc dec, float min/max, bf16 / packed halves: each lane its own step, in order)
        for i in lanes.tolist():
          o = mem[g:g + 1]
          old_all[i] = o[0]
          mem[g] = _atom_apply(op, t, o, b[i:i + 1], c[i:i + 1] if c is not None else None, L, ins)[0]
  L.sel = sel[first]
  try: L.store(space, addr[first], to_bytes(mem, w), None)
  finally: L.sel = sel


_ATOM_UFUNCS = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


# ---- warp-level ----------------------------------------------------------------------------------------------------
def _shfl(L: Launch, ins: Instr) -> None:
  mode = next(m for m in ins.mods if m in ("up", "down", "bfly", "idx"))
  dst = ins.args[0]
  p = None
  if dst.kind == "pair": dst, p = dst.value
  a_op = ins.args[1]
  b, c = L.get(ins.args[2], "u32"), L.get(ins.args[3], "u32")
  mask = L.get(ins.args[4], "u32") if len(ins.args) > 4 else np.full(L.sel.size, 0xFFFFFFFF, np.uint32)
  _warp_check(L, ins, mask)
  lane = (L.sel % 32).astype(np.int64)
  bval, cval, seg = (b & np.uint32(31)).astype(np.int64), (c & np.uint32(31)).astype(np.int64), ((c >> np.uint32(8)) & np.uint32(31)).astype(np.int64)
  maxl = (lane & seg) | (cval & ~seg)
  minl = lane & seg
  if mode == "up": j = lane - bval; ok = j >= maxl
  elif mode == "down": j = lane + bval; ok = j <= maxl
  elif mode == "bfly": j = lane ^ bval; ok = j <= maxl
  else: j = minl | (bval & ~seg); ok = j <= maxl
  j = np.where(ok, j, lane)
  src = L.sel - lane + j
  full, fd = L.regs.get(a_op.value) if a_op.kind == "reg" else None, L.defined.get(a_op.value) if a_op.kind == "reg" else None
  if full is None:
    v = L.get(a_op, "b32")
  else:
    if L.checked:
      act = np.zeros(L.n, np.bool_); act[L.sel] = True
      if not act[src].all():
        i = int(np.flatnonzero(~act[src])[0])
        raise PTXFault("compute", f"shfl.{mode} reads lane {int(j[i])}, which is not executing, for {L.thread(i)} (undefined)", ins)
    v = (full[src] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    L._d = fd[src] if fd is not None else None
  L.put(dst, "b32", v)
  if p is not None: L.put(p, "pred", ok)


def _members(L: Launch, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(warp of each selected lane, its lane bit, the lanes its own member mask names among its warp's executing lanes, the
  executing lanes of each warp).
  Each lane's result covers the lanes of ITS membermask (PTX ISA: vote/redux/match.sync), which may differ between lanes
  of one warp (cooperative groups' tiles: `0xFFFF << (lane & 16)`); naming a lane not executing is reported by
  warp_check in checked mode and left out here."""
  warp = L.sel // 32
  bit = np.uint64(1) << (L.sel % 32).astype(np.uint64)
  act = np.zeros(L.n // 32, np.uint64)
  np.bitwise_or.at(act, warp, bit)
  return warp, bit, mask.astype(np.uint64) & act[warp], act


def _vote(L: Launch, ins: Instr) -> None:
  mode = next(m for m in ins.mods if m in ("all", "any", "uni", "ballot"))
  mask = L.get(ins.args[2], "u32") if len(ins.args) > 2 else np.full(L.sel.size, 0xFFFFFFFF, np.uint32)
  _warp_check(L, ins, mask)
  pr = L.get(ins.args[1], "pred")
  warp, bit, mem, _ = _members(L, mask)
  ballot = np.zeros(L.n // 32, np.uint64)
  np.bitwise_or.at(ballot, warp, np.where(pr, bit, np.uint64(0)))
  bw = ballot[warp] & mem
  if mode == "ballot": return L.put(ins.args[0], "u32", bw.astype(np.uint32))
  r = {"all": bw == mem, "any": bw != 0, "uni": (bw == mem) | (bw == 0)}[mode]
  L.put(ins.args[0], "pred", r)


def _activemask(L: Launch, ins: Instr) -> None:
  act = np.zeros(L.n // 32, np.uint64)
  np.bitwise_or.at(act, L.sel // 32, np.uint64(1) << (L.sel % 32).astype(np.uint64))
  L.put(ins.args[0], "u32", act[L.sel // 32].astype(np.uint32))


def _match(L: Launch, ins: Instr) -> None:
  """match.any.sync: the lanes of the warp (among the lane's member mask) holding the same value; match.all.sync: the
  member mask if all of them hold the same value (else 0), and p = whether they do."""
  t = _t(ins)
  dst, p = (ins.args[0].value if ins.args[0].kind == "pair" else (ins.args[0], None))
  v = L.get(ins.args[1], t).astype(np.uint64)
  mask = L.get(ins.args[2], "u32")
  _warp_check(L, ins, mask)
  nw = L.n // 32
  vals = np.zeros((nw, 32), np.uint64)
  w, lane = L.sel // 32, L.sel % 32
  vals[w, lane] = v
  _, _, mem, _ = _members(L, mask)
  eq = vals[w] == v[:, None]   # (lanes, 32): which lanes of the warp hold this lane's value (members only count below)
  m = (eq.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1) & mem
  if ins.has("any"): return L.put(dst, "b32", m.astype(np.uint32))
  same = m == mem
  L.put(dst, "b32", np.where(same, mem, np.uint64(0)).astype(np.uint32))
  if p is not None: L.put(p, "pred", same)


_REDUX_IDENT = {"add": 0, "min": 2**40, "max": -2**40, "and": -1, "or": 0, "xor": 0}
_REDUX_REDUCE = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


def _redux(L: Launch, ins: Instr) -> None:
  op = next(m for m in ins.mods if m in _REDUX_IDENT)
  t = _t(ins)
  st = "s32" if t == "s32" else "u32"
  v = L.get(ins.args[1], st).astype(np.int64)
  mask = L.get(ins.args[2], "u32")
  _warp_check(L, ins, mask)
  warp, _, mem, act = _members(L, mask)
  nw, f = L.n // 32, _REDUX_REDUCE[op]
  if (mem == act[warp]).all():   # every lane's members are its warp's executing lanes (the usual case): one value per warp
    acc = np.full(nw, _REDUX_IDENT[op], np.int64)
    f.at(acc, warp, v)
    r = acc[warp]
  else:   # lanes of a warp with different members (tiles): each lane reduces over its own
    vals = np.full((nw, 32), _REDUX_IDENT[op], np.int64)
    vals[warp, L.sel % 32] = v
    inm = ((mem[:, None] >> np.arange(32, dtype=np.uint64)) & np.uint64(1)) != 0
    r = f.reduce(np.where(inm, vals[warp], _REDUX_IDENT[op]), axis=1)
  L.put(ins.args[0], "u32", (r & 0xFFFFFFFF).astype(np.uint32))


def _mma_layout(shape: str, ab: str) -> tuple[int, int, int, Callable, Callable, Callable] | None:
  """(M, K, elements per register, A (i) -> (row, col) arrays over the lanes, B (i) -> (row, col), C/D (i) -> (row, col)) of
  mma.sync shape with A/B type ab (PTX ISA 9.0 §9.7.14.5.8 fragment layouts; groupID g = laneid >> 2, t = laneid % 4)."""
  g, t = np.arange(32) >> 2, np.arange(32) % 4
  c16 = lambda i: (g + 8 * (i >= 2), 2 * t + (i & 1))   # the m16n8 C/D of every type below
  if ab in ("f16", "bf16") and shape == "m16n8k16":
    return 16, 16, 2, (lambda i: (g + 8 * (i in (2, 3, 6, 7)), 2 * t + (i & 1) + 8 * (i >= 4))), (lambda i: (2 * t + (i & 1) + 8 * (i >= 2), g)), c16
  if ab in ("f16", "bf16") and shape == "m16n8k8":
    return 16, 8, 2, (lambda i: (g + 8 * (i >= 2), 2 * t + (i & 1))), (lambda i: (2 * t + i, g)), c16
  if ab in ("s8", "u8") and shape == "m16n8k16":
    return 16, 16, 4, (lambda i: (g + 8 * (i >= 4), 4 * t + (i & 3))), (lambda i: (4 * t + i, g)), c16
  if ab in ("s8", "u8") and shape == "m16n8k32":
    return 16, 32, 4, (lambda i: (g + 8 * ((i // 4) % 2), 4 * t + (i & 3) + 16 * (i >= 8))), (lambda i: (4 * t + (i & 3) + 16 * (i >= 4), g)), c16
  if ab == "tf32" and shape == "m16n8k8":
    return 16, 8, 1, (lambda i: (g + 8 * (i & 1), t + 4 * (i >= 2))), (lambda i: (t + 4 * i, g)), c16
  if ab == "f64" and shape == "m8n8k4":
    return 8, 4, 1, (lambda i: (g, t)), (lambda i: (t, g)), (lambda i: (g, 2 * t + i))
  return None


_MMA_ACC = {"f16": "f32", "bf16": "f32", "tf32": "f32", "s8": "s32", "u8": "s32", "f64": "f64"}   # A/B type -> C/D type
_MMA_BITS = {"f16": np.uint16, "bf16": np.uint16, "s8": np.uint8, "u8": np.uint8, "tf32": np.uint32, "f64": np.uint64}


def _mma(L: Launch, ins: Instr) -> None:
  """mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype{.satfinite}: m16n8k16/m16n8k8 f32 += f16/bf16, m16n8k8 f32 +=
  tf32, m16n8k16/m16n8k32 s32 += s8/u8 (.satfinite), m8n8k4 f64 += f64 (.rn) (PTX ISA 9.0 §9.7.14.5.8 fragment layouts,
  table _mma_layout): per warp, A MxK, B Kx8 and C/D Mx8. Float arithmetic: wmma.mma_float (in-order k; f16/bf16/tf32:
  exact products, one float32 rounding per add, real tensor cores round differently; tf32: the low 13 mantissa bits
  ignored; f64: one IEEE fma per step); integer: exact, then 32 bits (wrapping; .satfinite clamps)."""
  shape = next((m for m in ins.mods if m.startswith("m") and "n" in m), "")
  ta = ins.types[1] if len(ins.types) == 4 else ""
  ct = _MMA_ACC.get(ta, "")
  integer = ct == "s32"
  lay = _mma_layout(shape, ta) if ct and ins.has("row") and ins.has("col") and ins.types[0] == ins.types[3] == ct else None
  rnd = [m for m in ins.mods if m in ("rn", "rz", "rm", "rp")]
  if lay is None or (integer and ins.types[2] not in ("s8", "u8")) or (not integer and ins.types[2] != ta) or (ins.has("satfinite") and not integer) \
     or rnd not in ([], ["rn"] if ta == "f64" else []):
    raise PTXFault("compute", f"mma.{'.'.join(ins.mods)} is not supported (m16n8k16/m16n8k8 .row.col f32 += f16/bf16; m16n8k8 f32 += tf32; "
                   "m16n8k16/m16n8k32 .row.col s32 += s8/u8; m8n8k4 f64 += f64 (.rn))", ins)
  M, K, per, a_at, b_at, c_at = lay
  d, a, b, c = ins.args[:4]
  mask = np.full(L.sel.size, 0xFFFFFFFF, np.uint32)
  _warp_check(L, ins, mask)
  if L.sel.size % 32: raise PTXFault("compute", "mma.sync with a partial warp", ins)
  nw = L.sel.size // 32
  lane = (L.sel % 32).reshape(nw, 32)
  if not (lane == np.arange(32)).all(): raise PTXFault("compute", "mma.sync needs whole warps in lane order", ins)
  ut = _MMA_BITS[ta]
  w = np.dtype(ut).itemsize
  def elems(regs) -> np.ndarray:   # (nw, 32, per * len(regs)) of w-byte values, the low part of each register first
    if w >= 4: return np.stack([L.get(o, "b64" if w == 8 else "b32").reshape(nw, 32) for o in regs], -1).astype(ut)
    out = []
    for o in regs:
      v = L.get(o, "b32").reshape(nw, 32)
      out += [((v >> np.uint32(8 * w * j)) & np.uint32((1 << (8 * w)) - 1)).astype(ut) for j in range(per)]
    return np.stack(out, -1)
  ae, be = elems(a.value), elems(b.value)
  A, B = np.zeros((nw, M, K), ut), np.zeros((nw, K, 8), ut)
  for i in range(ae.shape[-1]):
    r, cc = a_at(i)
    A[:, r, cc] = ae[:, :, i]
  for i in range(be.shape[-1]):
    r, cc = b_at(i)
    B[:, r, cc] = be[:, :, i]
  cv = np.stack([L.get(o, ct).reshape(nw, 32) for o in c.value], -1)
  C = np.zeros((nw, M, 8), cv.dtype)
  for i in range(cv.shape[-1]):
    r, cc = c_at(i)
    C[:, r, cc] = cv[:, :, i]
  if not integer: D = mma_float(ta, A, B, C)
  else:
    Ai = (A.view(np.int8) if ta == "s8" else A).astype(np.int64)
    Bi = (B.view(np.int8) if ins.types[2] == "s8" else B).astype(np.int64)
    D64 = C.astype(np.int64) + np.einsum("wik,wkj->wij", Ai, Bi)   # |products| <= 2**16, at most 32 terms: exact
    D64 = np.clip(D64, -2**31, 2**31 - 1) if ins.has("satfinite") else D64 & 0xFFFFFFFF
    D = D64.astype(np.uint32).view(np.int32)
  for i, o in enumerate(d.value):
    r, cc = c_at(i)
    L.put(o, ct, D[:, r, cc].reshape(-1))


def _dp(L: Launch, ins: Instr) -> None:
  """dp4a: c + the dot product of a's and b's four bytes; dp2a.lo/.hi: c + a's two 16-bit halves times b's bytes 0-1 / 2-3.
  Each operand's signedness comes from its type; the sum wraps to 32 bits."""
  at, bt = ins.types[0], ins.types[1]
  a, b = L.get(ins.args[1], "u32"), L.get(ins.args[2], "u32")
  c = L.get(ins.args[3], "u32").astype(np.int64)
  def parts(v: np.ndarray, w: int, signed: bool) -> np.ndarray:
    p = np.ascontiguousarray(v).view(np.uint8 if w == 1 else np.uint16).reshape(v.size, 4 // w)
    return (p.view(np.int8 if w == 1 else np.int16) if signed else p).astype(np.int64)
  bb = parts(b, 1, bt[0] == "s")
  if ins.op == "dp4a": acc = (parts(a, 1, at[0] == "s") * bb).sum(axis=1)
  else:
    hi = ins.has("hi")
    acc = (parts(a, 2, at[0] == "s") * bb[:, 2:4] if hi else parts(a, 2, at[0] == "s") * bb[:, 0:2]).sum(axis=1)
  L.put(ins.args[0], "u32", ((acc + c) & 0xFFFFFFFF).astype(np.uint32))


def _nop(L: Launch, ins: Instr) -> None: return None


def _fence(L: Launch, ins: Instr) -> None:
  """membar.{cta,gl,sys} (fence.sc) and fence.sc / fence.acq_rel: every access here is already in program order; for the
  race checker they make release and acquire patterns with strong accesses (Launch.fence). fence.proxy and
  fence.mbarrier_init order other proxies / barrier initialisation only."""
  if ins.op == "membar" or (not ins.has("proxy") and not ins.has("mbarrier_init")): L.fence()


TABLE: dict[str, object] = {
  **{n: _arith(n) for n in ("add", "sub", "mul", "mad", "fma", "div", "rem", "min", "max", "neg", "abs")},
  "addc": _carry, "subc": _carry, "madc": _carry,
  **{n: _bitop(n) for n in ("and", "or", "xor", "not", "cnot")},
  "shl": _shift, "shr": _shift, "shf": _shf, "mov": _mov, "cvta": _cvta, "setp": _setp, "selp": _selp, "slct": _slct, "cvt": _cvt,
  **{n: _unary_int(n) for n in ("popc", "clz", "brev")}, "bfe": _bfe, "bfind": _bfind, "bfi": _bfi, "prmt": _prmt,
  **{n: _ffloat(n) for n in ("sqrt", "rcp", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh")}, "testp": _testp, "copysign": _copysign,
  "ld": _ld, "ldu": _ld, "st": _st, "atom": _atom, "red": _atom, "shfl": _shfl, "vote": _vote, "activemask": _activemask, "redux": _redux, "match": _match,
  "mma": _mma, "wmma": wmma, "ldmatrix": ldmatrix, "cp": cp, "dp4a": _dp, "dp2a": _dp, "membar": _fence, "fence": _fence, "prefetch": _nop, "prefetchu": _nop,
  "set": _set, "isspacep": _isspacep, "discard": _nop, "applypriority": _nop, "pmevent": _nop,
  "mbarrier": mbarrier, "nanosleep": _nop,   # (nanosleep: a hint: the thread may sleep up to t ns (no result))
  "lop3": _lop3, "sad": _sad, "bmsk": _bmsk, "szext": _szext, "fns": _fns, "mul24": _mul24, "mad24": _mul24, **VIDEO,
  "call": extern_call,   # (calls of .funcs with a body are inlined by the parser: what is left calls an extern function)
}
# bra, ret, exit, bar/barrier are control flow: the scheduler (emulators/nv/ptx/run.py) handles them
CONTROL = ("bra", "ret", "exit", "bar", "barrier", "trap")
