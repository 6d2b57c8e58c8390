"""Instruction handlers, one per encoding format (the per-opcode semantics are the tables of ops.py). Each handler runs
one instruction for the waves `idx` (all at the same PC) of a Machine."""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators.amd.rdna3 import alu as A
from emulators.amd.rdna3 import lanes as M
from emulators.amd.rdna3 import ops as X
from emulators.amd.rdna3.decode import T16, WIDTH, Inst, branch_target, flat_offset, vopd_dsty
from emulators.amd.rdna3.opcodes import VOP3B
from refgrad.dtype import dtypes
from refgrad.uop.semantics import wmma as wmma_ref

U32, U64 = M.U32, M.U64
LANES = M.LANES
VCC, EXEC = 106, 126


# ---- SOPP -----------------------------------------------------------------------------------------------------------
NOPS = frozenset({"s_nop", "s_set_inst_prefetch_distance", "s_waitcnt", "s_delay_alu", "s_clause", "s_waitcnt_depctr", "s_sleep", "s_setprio", "s_icache_inv",
                  "s_wait_idle", "s_sendmsg", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_lgkmcnt", "s_waitcnt_expcnt"})
BRANCH_COND = {"s_branch": lambda m, idx: np.ones(len(idx), np.bool_), "s_cbranch_scc0": lambda m, idx: ~m.scc[idx],
               "s_cbranch_scc1": lambda m, idx: m.scc[idx], "s_cbranch_vccz": lambda m, idx: m.s[idx, VCC] == 0,
               "s_cbranch_vccnz": lambda m, idx: m.s[idx, VCC] != 0, "s_cbranch_execz": lambda m, idx: m.s[idx, EXEC] == 0,
               "s_cbranch_execnz": lambda m, idx: m.s[idx, EXEC] != 0}


# trap ids (s_trap's SIMM16[7:0]) of the traps refgrad's kernels contain: llvm.debugtrap is s_trap 3, rendered only as the
# checked-mode guard of an integer division's divisor (refgrad/renderer/llvmir.py)
TRAPS = {3: "integer division by zero (llvm.debugtrap: the LLVM IR renderer's checked-mode guard of IDIV/MOD)"}


def sopp(m: Any, i: Inst, idx: np.ndarray) -> None:
  n = i.op.name
  if n in NOPS: return m.advance(i, idx)
  if n == "s_endpgm":
    m.done[idx] = True
    return None
  if n == "s_barrier":
    m.bar[idx] = True
    m.pc[idx] += i.size   # the next instruction itself (not past no-ops): a divergent-barrier report names PC - 4
    return None
  if n == "s_trap":   # a trap handler is not modelled: the dispatch faults, naming the trap and the first enabled lane
    tid = i.f["simm16"] & 0xFF
    ex = m.s[idx, EXEC]
    w = int(np.flatnonzero(ex)[0]) if ex.any() else 0
    lane = (int(ex[w]) & -int(ex[w])).bit_length() - 1   # the lowest enabled lane
    raise M.WaveFault(f"lane {max(lane, 0)} of wave {int(idx[w])}: s_trap {tid}: {TRAPS.get(tid, 'a trap (no trap handler is emulated)')}")
  if n in BRANCH_COND:
    if m.sdirty and n != "s_branch":   # a condition from an undefined value (EXEC never is: sset reports that write)
      if "scc" in n: m.sreport(idx, f"a branch ({n})", m.sund(idx, 253, "b32"))
      elif "vcc" in n: m.sreport(idx, f"a branch ({n})", m.sund(idx, VCC, "b32"), True)
    take = BRANCH_COND[n](m, idx)
    m.pc[idx] = np.where(take, branch_target(i), m.pc[idx] + i.size)
    return None
  raise M.WaveFault(f"{n} is not emulated")


# ---- scalar ALU -----------------------------------------------------------------------------------------------------
# checked mode: SALU ops whose result bit k depends on bit k of the sources alone (undefined bits stay where they are);
# any other op with an undefined source bit (or an undefined SCC it reads) gives a wholly undefined result and SCC
BITWISE = ("s_and_", "s_or_", "s_xor_", "s_nand_", "s_nor_", "s_xnor_", "s_andn2_", "s_orn2_", "s_and_not1_", "s_or_not1_", "s_not_", "s_mov_")
READS_SCC = ("s_cselect_", "s_addc_", "s_subb_", "s_cmov", "s_cmovk")


def _sundef(m: Any, i: Inst, idx: np.ndarray, parts: list[np.ndarray | None]) -> np.ndarray | None:
  """The undefined bits of an SALU result from its sources' (uint64 per wave; None: defined)."""
  if not m.sdirty: return None
  if i.op.name.startswith(READS_SCC): parts = parts + [m.sund(idx, 253, "b64")]
  parts = [p for p in parts if p is not None]
  if not parts: return None
  u = parts[0] if len(parts) == 1 else np.bitwise_or.reduce(parts)
  if i.op.name.startswith(BITWISE): return u
  return np.where(u != 0, U64(0xFFFFFFFFFFFFFFFF if WIDTH.get(i.op.dst, 1) == 2 else 0xFFFFFFFF), U64(0))


def _decided(fn: Any, x: np.ndarray, u: np.ndarray) -> np.ndarray:
  """The bits of the bitwise fn(x) that x's undefined bits u decide: where fn gives different bits with them all 0 and all 1
  (exact for an op whose bit k depends on bit k alone)."""
  return (np.asarray(fn(x & ~u)) ^ np.asarray(fn(x | u))) & U64(0xFFFFFFFF)


def _sresult(m: Any, i: Inst, idx: np.ndarray, r: Any, scc: Any, und: np.ndarray | None = None) -> None:
  if r is not None: m.swrite(idx, i.f["sdst"], i.op.dst, np.asarray(r, U64), und)
  if scc is not None:
    m.scc[idx] = np.asarray(scc, np.bool_)
    m.scc_set(idx, None if und is None else und != 0)
  m.advance(i, idx)


def sop2(m: Any, i: Inst, idx: np.ndarray) -> None:
  o = i.op
  if (fn := X.SALU.get(o.name)) is None: raise M.WaveFault(f"{o.name} is not emulated")
  a = m.sreg(idx, i.f["ssrc0"], o.srcs[0], i.literal)
  b = m.sreg(idx, i.f["ssrc1"], o.srcs[1], i.literal)
  r, scc = fn(a, b, m.scc[idx].astype(U64))
  ua, ub = m.sund(idx, i.f["ssrc0"], o.srcs[0]), m.sund(idx, i.f["ssrc1"], o.srcs[1])
  if (ua is not None or ub is not None) and o.name.startswith(BITWISE):
    # a bitwise op: the result bits each source's undefined bits decide, the other source as it is (s_and_b32 exec_lo,
    # exec_lo, vcc_lo keeps the undefined lanes EXEC enables, not those it disables), and bits undefined in both
    z = np.zeros(len(idx), U64)
    ua, ub = (z if ua is None else ua), (z if ub is None else ub)
    c = m.scc[idx].astype(U64)
    full = U64(0xFFFFFFFFFFFFFFFF if WIDTH.get(o.dst, 1) == 2 else 0xFFFFFFFF)
    und = ((fn(a & ~ua, b, c)[0] ^ fn(a | ua, b, c)[0]) | (fn(a, b & ~ub, c)[0] ^ fn(a, b | ub, c)[0]) | (ua & ub)) & full
    return _sresult(m, i, idx, r, scc, und)
  _sresult(m, i, idx, r, scc, _sundef(m, i, idx, [ua, ub]))


def sop1(m: Any, i: Inst, idx: np.ndarray) -> None:
  o, f = i.op, i.f
  if o.name in X.SAVEEXEC:
    s0 = m.sreg(idx, f["ssrc0"], "b32", i.literal)
    old = m.s[idx, EXEC].astype(U64)
    new = X.SAVEEXEC[o.name](s0, old) & U64(0xFFFFFFFF)
    if (u := m.sund(idx, f["ssrc0"], "b32")) is not None:   # EXEC bits the undefined bits decide: a report
      m.sset(idx, EXEC, 1, _decided(lambda x: X.SAVEEXEC[o.name](x, old), s0, u))
    m.s[idx, EXEC] = new.astype(U32)
    return _sresult(m, i, idx, old, new != 0)
  if o.name in ("s_and_not0_wrexec_b32", "s_and_not1_wrexec_b32"):
    s0 = m.sreg(idx, f["ssrc0"], "b32", i.literal)
    old = m.s[idx, EXEC].astype(U64)
    new = ((~s0 & old) if o.name == "s_and_not0_wrexec_b32" else (s0 & ~old)) & U64(0xFFFFFFFF)
    if (u := m.sund(idx, f["ssrc0"], "b32")) is not None:
      m.sset(idx, EXEC, 1, _decided(lambda x: (~x & old) if o.name == "s_and_not0_wrexec_b32" else (x & ~old), s0, u))
    m.s[idx, EXEC] = new.astype(U32)
    return _sresult(m, i, idx, new, new != 0)
  if o.name in ("s_cmov_b32", "s_cmov_b64"):
    s0 = m.sreg(idx, f["ssrc0"], o.srcs[0], i.literal)
    cur = m.sreg(idx, f["sdst"], o.dst, None)
    return _sresult(m, i, idx, np.where(m.scc[idx], s0, cur), None, _sundef(m, i, idx, [m.sund(idx, f["ssrc0"], o.srcs[0]), m.sund(idx, f["sdst"], o.dst)]))
  if o.name.startswith("s_bitset"):   # D[S0 bits] = 0/1: the destination is read too; SCC is kept (ISA guide, SOP1)
    bits = 64 if o.name.endswith("64") else 32
    bit = U64(1) << (m.sreg(idx, f["ssrc0"], o.srcs[0], i.literal) & U64(bits - 1))
    cur = m.sreg(idx, f["sdst"], o.dst, None)
    und = _sundef(m, i, idx, [m.sund(idx, f["ssrc0"], o.srcs[0]), m.sund(idx, f["sdst"], o.dst)])
    return _sresult(m, i, idx, (cur | bit) if o.name.startswith("s_bitset1") else (cur & ~bit & U64((1 << bits) - 1)), None, und)
  if o.name == "s_getpc_b64": return _sresult(m, i, idx, np.full(len(idx), m.pgm + i.pc + 4, U64), None)
  if (fn := X.SALU.get(o.name)) is None: raise M.WaveFault(f"{o.name} is not emulated")
  r, scc = fn(m.sreg(idx, f["ssrc0"], o.srcs[0], i.literal), m.scc[idx].astype(U64))
  _sresult(m, i, idx, r, scc, _sundef(m, i, idx, [m.sund(idx, f["ssrc0"], o.srcs[0])]))


def _signed(x: np.ndarray, bits: int) -> np.ndarray:
  return np.where(x >> U64(bits - 1) & U64(1), x.astype(np.int64) - (1 << bits), x.astype(np.int64)) if bits < 64 else x.view(np.int64)


def sopc_scc(n: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """The SCC an SOPC compare sets from its uint64 sources (s_cmp_<c>_<t>, s_bitcmp0/1)."""
  if n.startswith("s_bitcmp"):
    bits = 64 if n.endswith("64") else 32
    bit = (a >> (b & U64(bits - 1))) & U64(1)
    return (bit == 0) if "bitcmp0" in n else (bit == 1)
  c, t = n.split("_")[2:4]
  if t == "i32": a, b = _signed(a, 32), _signed(b, 32)
  return X.SCMP[c](a, b)


def sopc(m: Any, i: Inst, idx: np.ndarray) -> None:
  o = i.op
  a = m.sreg(idx, i.f["ssrc0"], o.srcs[0], i.literal)
  b = m.sreg(idx, i.f["ssrc1"], o.srcs[1], i.literal)
  m.scc[idx] = sopc_scc(o.name, a, b)
  if m.sdirty: m.scc_set(idx, _sundef(m, i, idx, [m.sund(idx, i.f["ssrc0"], o.srcs[0]), m.sund(idx, i.f["ssrc1"], o.srcs[1])]))
  m.advance(i, idx)


SOPK_READS = frozenset({"s_addk_i32", "s_mulk_i32"})   # SOPK ops of sopk_op that read SDST (s_cmpk_* too)


def sopk_op(n: str, cur: np.ndarray, k: int) -> tuple[np.ndarray | None, np.ndarray | None]:
  """(result, SCC) of s_addk_i32 / s_mulk_i32 / s_cmpk_* on SDST's value cur (uint64 per wave) and SIMM16 k (None: not
  written)."""
  ks = k - (1 << 16) if k & 0x8000 else k
  if n == "s_addk_i32":
    r = _signed(cur, 32) + ks
    return r.astype(U64) & U64(0xFFFFFFFF), (r > 0x7FFFFFFF) | (r < -0x80000000)
  if n == "s_mulk_i32": return (_signed(cur, 32) * ks).astype(U64) & U64(0xFFFFFFFF), None
  if n.startswith("s_cmpk_"):
    c, t = n.split("_")[2], n.split("_")[3]
    a, b = (_signed(cur, 32), ks) if t == "i32" else (cur, U64(k))
    return None, X.SCMP[c](a, b)
  raise M.WaveFault(f"{n} is not emulated")


def sopk(m: Any, i: Inst, idx: np.ndarray) -> None:
  o, f = i.op, i.f
  n = o.name
  k = f["simm16"]
  ks = k - (1 << 16) if k & 0x8000 else k
  if n in NOPS: return m.advance(i, idx)
  if n == "s_movk_i32": return _sresult(m, i, idx, np.full(len(idx), ks & 0xFFFFFFFF, U64), None)
  if n == "s_cmovk_i32":
    cur = m.sreg(idx, f["sdst"], "b32", None)
    return _sresult(m, i, idx, np.where(m.scc[idx], U64(ks & 0xFFFFFFFF), cur), None, _sundef(m, i, idx, [m.sund(idx, f["sdst"], "b32")]))
  r, scc = sopk_op(n, m.sreg(idx, f["sdst"], "b32", None), k)
  und = _sundef(m, i, idx, [m.sund(idx, f["sdst"], "b32")])
  _sresult(m, i, idx, r, scc, und)


# ---- scalar memory --------------------------------------------------------------------------------------------------
def smem(m: Any, i: Inst, idx: np.ndarray) -> None:
  f = i.f
  nd = WIDTH[i.op.dst]
  # (a load whose waves' addresses differed once skips the uniform test: the general path gives the same registers)
  if not m.sdirty and "waves" not in i.extra and _smem_uniform(m, i, idx, nd): return m.advance(i, idx)
  sb = f["sbase"] << 1
  off = f["offset"] - (1 << 21) if f["offset"] & (1 << 20) else f["offset"]
  if f["soffset"] == 124 and sb + 2 <= 128:   # no SOFFSET (per-wave bases: conv2d's rows): the pair read as one int64, the bits sreg gives
    addr = (m.s[m.ix(idx), sb:sb + 2].view(np.int64)[:, 0] + off) & ~3
  else:
    base = m.sreg(idx, sb, "b64", None)
    soff = m.sreg(idx, f["soffset"], "b32", None) if f["soffset"] != 124 else np.zeros(len(idx), U64)
    addr = ((base.astype(np.int64) + off + soff.astype(np.int64)) & ~3).astype(np.int64)   # scalar loads ignore the low 2 bits
  if m.sdirty:
    m.sreport(idx, "the address of a scalar load", m.sund(idx, f["sbase"] << 1, "b64"))
    if f["soffset"] != 124: m.sreport(idx, "the address of a scalar load", m.sund(idx, f["soffset"], "b32"))
  if (out := _smem_gather(m, addr, nd)) is not None and f["sdata"] + nd <= 128:
    m.s[m.ix(idx), f["sdata"]:f["sdata"] + nd] = out
    if m.sdirty: m.sundef[m.ix(idx), f["sdata"]:f["sdata"] + nd] = 0
    return m.advance(i, idx)
  out = np.zeros((len(idx), nd), U32)
  # checked mode: dwords with bytes nothing wrote load as undefined SGPRs (not on a loop batch's copy: a fault there)
  track = m.strack()
  und = np.zeros((len(idx), nd), np.bool_) if track else None
  for a in np.unique(addr):
    sel = addr == a
    data = m.mem_read(int(a), 4 * nd, f"scalar load {i.op.name}", check=not track)
    out[sel] = data.view(U32)
    if track and (r := m.vm.find(int(a))).mem.bits is not None and (ub := r.mem.undefined_bytes(int(a) - r.va, int(a) - r.va + 4 * nd)).size:
      und[np.ix_(sel, np.unique(ub // 4))] = True
      if m.undef_origin is None:
        m.undef_origin = r.mem.origin or f"in kernel {m.name} at PC 0x{i.pc:x} ({i.text}) from 0x{int(a):x}, which nothing has written"
  for k in range(nd): m.s[idx, f["sdata"] + k] = out[:, k]
  if track and f["sdata"] + nd <= 128 and (m.sdirty or und.any()):
    m.sundef[m.ix(idx), f["sdata"]:f["sdata"] + nd] = np.where(und, U32(0xFFFFFFFF), U32(0))
    m.sdirty = True
  m.advance(i, idx)


def _smem_uniform(m: Any, i: Inst, idx: np.ndarray, nd: int) -> bool:
  """The usual scalar load (the kernel arguments): every wave's base and SOFFSET the same, the dwords in one mapping
  and defined: one read, the same dwords to every wave. False: nothing done (the general path)."""
  f = i.f
  sb, so, sd = f["sbase"] << 1, f["soffset"], f["sdata"]
  if sd + nd > 128 or sb + 1 >= 128 or (so != 124 and so >= 128): return False
  ix = m.ix(idx)
  col = m.s[ix, sb:sb + 2]
  if len(col) > 1 and not (col == col[0]).all():
    i.extra["waves"] = True
    return False
  base = int(col[0, 0]) | int(col[0, 1]) << 32
  soff = 0
  if so != 124:
    c = m.s[ix, so]
    if len(c) > 1 and not (c == c[0]).all(): return False
    soff = int(c[0])
  off = f["offset"] - (1 << 21) if f["offset"] & (1 << 20) else f["offset"]
  addr = (base + off + soff) & ~3 & 0xFFFFFFFFFFFFFFFF   # scalar loads ignore the low 2 bits (execute.smem: int64, then)
  if addr >= 1 << 63: return False
  r = m.vm.find(addr)
  if r is None or addr + 4 * nd > r.end or r.va % 4: return False
  o = addr - r.va
  if m.checked and r.mem.bits is not None and r.mem.undefined_bytes(o, o + 4 * nd).size: return False
  m._touch(r.va, addr, addr + 4 * nd, False)
  m.s[ix, sd:sd + nd] = r.mem.data[o:o + 4 * nd].view(U32)
  return True


def _smem_gather(m: Any, addr: np.ndarray, nd: int) -> np.ndarray | None:
  """Every wave's nd dwords at addr [n] in one gather, when all lie in one mapping and are defined; None: the per-address
  reads (Machine.mem_read), which name the fault of an unmapped or undefined address."""
  lo, hi = int(addr.min()), int(addr.max()) + 4 * nd
  r = m.vm.find(lo)
  if r is None or hi > r.end or r.va % 4: return None
  q = (addr - r.va) >> 2   # dword indices in the mapping (addr is dword aligned: the low 2 bits are cleared)
  if nd > 1: q = q[:, None] + np.arange(nd)
  # a dword's 4 definedness bits are one nibble of the bitmap
  if m.checked and (bits := r.mem.bits) is not None and not (((bits[q >> 1] >> ((q & 1) * 4).astype(np.uint8)) & np.uint8(15)) == 15).all(): return None
  m._touch(r.va, lo, hi, False)
  data = r.mem.data
  return data[:len(data) - len(data) % 4].view(U32).take(q.reshape(-1), mode="wrap").reshape(len(addr), nd)   # every index checked in the mapping


# ---- vector ALU -----------------------------------------------------------------------------------------------------
def _mods(i: Inst, x: np.ndarray, k: int, t: str) -> np.ndarray:
  if i.fmt != "VOP3" or t[0] != "f" or i.op.name in VOP3B: return x
  if (i.f["abs"] >> k) & 1: x = np.abs(x)
  if (i.f["neg"] >> k) & 1: x = -x
  return x


def _bits_mods(i: Inst, raw: np.ndarray, k: int, bits: int) -> np.ndarray:
  """neg/abs on an untyped (b32) operand, as sign-bit edits (v_cndmask_b32 passes float modifiers through)."""
  if i.fmt != "VOP3": return raw
  sign = U32(1 << (bits - 1)) if bits == 32 else np.uint16(1 << 15)
  if (i.f["abs"] >> k) & 1: raw = raw & ~sign
  if (i.f["neg"] >> k) & 1: raw = raw ^ sign
  return raw


def _finish_float(i: Inst, r: np.ndarray, t: str) -> np.ndarray:
  if i.fmt != "VOP3" or t[0] != "f": return r
  with np.errstate(all="ignore"):
    if (om := i.f["omod"]): r = r * r.dtype.type({1: 2.0, 2: 4.0, 3: 0.5}[om])
    if i.f["clamp"]: r = np.where(np.isnan(r), r.dtype.type(0), np.clip(r, 0, 1)).astype(r.dtype)
  return r


def _srcs(m: Any, i: Inst, idx: np.ndarray, lanes: np.ndarray) -> list[tuple[int, str, int | None]]:
  """(operand code, type, half) for each source of a VOP1/2/C/3 instruction."""
  o, f = i.op, i.f
  if i.fmt == "VOP3":
    codes = [f["src0"], f["src1"], f["src2"]]
    return [(codes[k], t, (f["op_sel"] >> k) & 1 if t in T16 else None) for k, t in enumerate(o.srcs)]
  out = []
  for k, t in enumerate(o.srcs):
    if k == 0: out.append((f["src0"], t, None))
    elif k == 1: out.append((256 + f["vsrc1"], t, None))
    elif t == "m": out.append((VCC, "m", None))
    elif o.name in ("v_fmac_f32", "v_fmac_f16"): out.append((256 + f["vdst"], t, None))
  if o.name in ("v_fmamk_f32", "v_fmamk_f16"): out = [out[0], (255, o.srcs[1], None), out[1]]
  if o.name in ("v_fmaak_f32", "v_fmaak_f16"): out = [out[0], out[1], (255, o.srcs[2], None)]
  return out


def _read(m: Any, i: Inst, idx: np.ndarray, lanes: np.ndarray, code: int, t: str, hi: int | None) -> np.ndarray:
  if t == "m":   # a lane mask (carry in, v_cndmask's selector): its undefined bits are undefined lanes
    if m.track is not None and (u := m.sund(idx, code, "b32")) is not None: m.track.append([~M.mask_to_lanes(u.astype(U32))])
    return m.sreg(idx, code, "b32", i.literal)
  return m.vsrc(idx, code, t, i.literal, hi, lanes)


def _lane_def(m: Any, idx: np.ndarray, code: int, t: str) -> np.ndarray | None:
  """Checked mode: the lanes in which a VOP source is defined ([n, 32]; None: all): a VGPR's definedness, a lane mask's
  defined bits, a scalar without undefined bits."""
  w = WIDTH.get(t, 1)
  if code >= 256:
    r = code - 256
    if t in T16: r &= 0x7F
    d = m.vinit[m.ix(idx), r, :]
    if w == 2: d = d & m.vinit[m.ix(idx), r + 1, :]
    return None if d.all() else d
  if (u := m.sund(idx, code, "b32" if t == "m" else t)) is None: return None
  if t == "m": return ~M.mask_to_lanes(u.astype(U32))
  return np.broadcast_to((u == 0)[:, None], (len(idx), LANES))


# VALU opcodes with their own code below; every other opcode is a row of ops.VALU (`_valu_row`, decided once per Inst)
VALU_OWN = ("v_cmp", "v_cndmask_b", "v_add_co_", "v_sub_co_", "v_subrev_co_", "v_mad_u64_u32", "v_mad_i64_i32", "v_div_scale_",
            "v_div_fmas_", "v_readfirstlane_b32", "v_readlane_b32", "v_writelane_b32", "v_mbcnt_", "v_swap_b32", "v_nop")


def carry_op(n: str, a: np.ndarray, b: np.ndarray, cin: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
  """v_add_co/v_sub_co/v_subrev_co (and the _ci_ forms with the carry-in lanes cin): the 32-bit result and the carry
  (add) or borrow (sub) out, computed in uint32 (ISA guide, V_ADD_CO_CI_U32 etc.): a + b + c carries where a + b wraps
  or the + c wraps it (r = 2^32 - 1); a - b - c borrows where a < b or the - c wraps it (a - b = 0)."""
  a, b = np.asarray(a).astype(U32, copy=False), np.asarray(b).astype(U32, copy=False)
  if "subrev" in n: a, b = b, a
  if "add" in n:
    r = a + b
    cy = r < a
    if cin is not None:
      r2 = r + np.asarray(cin).astype(U32)
      cy = cy | (r2 < r)
      r = r2
    return r, cy
  r = a - b
  cy = a < b
  if cin is not None:
    c = np.asarray(cin).astype(U32)
    cy = cy | (r < c)
    r = r - c
  return r, cy


def valu(m: Any, i: Inst, idx: np.ndarray) -> None:
  if (row := i.extra.get("valu")) is None:
    n = i.op.name
    row = i.extra["valu"] = (_srcs(None, i, idx, None), X.VALU.get(n)) if not n.startswith(VALU_OWN) and n in X.VALU else ()
  if row: return _valu_row(m, i, idx, *row)
  o, f = i.op, i.f
  n = o.name
  lanes = m.exec_mask(idx)
  srcs = _srcs(m, i, idx, lanes)
  if n == "v_nop": return m.advance(i, idx)
  strict = n.startswith("v_read")   # results that become scalar state (an SGPR keeps undefined bits only for lane masks)
  if m.vinit is not None and not strict: m.track = []
  rl = lanes   # the lanes src0 is read in: v_readlane/v_readfirstlane read one (an SGPR spill lives in one lane)
  if n == "v_readlane_b32":
    c, t, h = srcs[1]
    one = (np.broadcast_to(_read(m, i, idx, lanes, c, t, h), (len(idx), 1))[:, 0] & U32(31)).astype(np.int64)
    rl = np.arange(LANES)[None, :] == one[:, None]
  elif n == "v_readfirstlane_b32": rl = lanes & (np.cumsum(lanes, axis=1) == 1)
  try: raw = [_read(m, i, idx, rl if k == 0 else lanes, c, t, h) for k, (c, t, h) in enumerate(srcs)]
  finally: reads, m.track = m.track, None
  dfn = _definedness(n, reads, len(idx))
  vals = [raw[k] if t == "m" else _mods(i, M.typed(raw[k], t), k, t) for k, (c, t, h) in enumerate(srcs)]
  vdst = f.get("vdst", 0)
  dhi = (f["op_sel"] >> 3) & 1 if i.fmt == "VOP3" and o.dst in T16 else None
  # a lane mask written from undefined lanes keeps them as undefined bits (checked mode: Machine.sset; EXEC reports)
  mund = None if dfn is None else M.lanes_to_mask(lanes & ~dfn[0]).astype(U64)
  if n.startswith(("v_cmp_", "v_cmpx_")):
    res = X.compare(n)(vals[0], vals[1]) & lanes
    mask = M.lanes_to_mask(res)
    d = EXEC if n.startswith("v_cmpx_") else VCC if i.fmt == "VOPC" else vdst
    m.sset(idx, d, 1, mund)
    m.s[idx, d] = mask
    return m.advance(i, idx)
  if n in ("v_cndmask_b32", "v_cndmask_b16"):
    bits = 32 if n.endswith("32") else 16
    sel = M.mask_to_lanes(vals[2])
    r = np.where(sel, _bits_mods(i, raw[1], 1, bits), _bits_mods(i, raw[0], 0, bits))
    if m.vinit is not None:   # the selected source's definedness, and the mask's: a WHERE is undefined where its condition is
      d = [_lane_def(m, idx, c, t) for c, t, _ in srcs[:3]]
      if any(x is not None for x in d):
        one = np.ones((len(idx), LANES), np.bool_)
        d = [one if x is None else x for x in d]
        dfn = [np.where(sel, d[1], d[0]) & d[2]]
    m.vwrite(idx, vdst, o.dst, r, lanes, dhi, dfn)
    return m.advance(i, idx)
  if n in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"):
    r, cy = carry_op(n, vals[0], vals[1], M.mask_to_lanes(vals[2]) if "_ci_" in n else None)
    carry = cy & lanes
    if f.get("clamp") and i.fmt == "VOP3": r = np.where(cy, U32(0xFFFFFFFF) if "add" in n else U32(0), r)   # saturated
    m.vwrite(idx, vdst, "u32", r, lanes, None, dfn)
    m.sset(idx, f["sdst"] if i.fmt == "VOP3" else VCC, 1, mund)
    m.s[idx, f["sdst"] if i.fmt == "VOP3" else VCC] = M.lanes_to_mask(carry)
    return m.advance(i, idx)
  if n in ("v_mad_u64_u32", "v_mad_i64_i32"):
    if n == "v_mad_u64_u32":
      p = vals[0].astype(object) * vals[1].astype(object) + vals[2].astype(object)
      r = np.vectorize(lambda x: x & 0xFFFFFFFFFFFFFFFF, otypes=[U64])(p)
      carry = np.vectorize(lambda x: x >> 64 != 0, otypes=[np.bool_])(p)
    else:
      p = vals[0].astype(object) * vals[1].astype(object) + vals[2].astype(object)
      r = np.vectorize(lambda x: x & 0xFFFFFFFFFFFFFFFF, otypes=[U64])(p)
      carry = np.vectorize(lambda x: not -(1 << 63) <= x < (1 << 63), otypes=[np.bool_])(p)
    m.vwrite(idx, vdst, "b64", r, lanes, None, dfn)
    m.sset(idx, f["sdst"], 1, None if dfn is None else M.lanes_to_mask(lanes & ~dfn[-1]).astype(U64))
    m.s[idx, f["sdst"]] = M.lanes_to_mask(carry & lanes)
    return m.advance(i, idx)
  if n in ("v_div_scale_f32", "v_div_scale_f64"):
    act = lanes
    r, vcc = A.div_scale(*[np.where(np.broadcast_to(act, np.broadcast(v, act).shape), v, v.dtype.type(1)) for v in vals])
    m.vwrite(idx, vdst, o.dst, M.untyped(r, o.dst), lanes, None, dfn)
    m.sset(idx, f["sdst"], 1, mund)
    m.s[idx, f["sdst"]] = M.lanes_to_mask(vcc & lanes)
    return m.advance(i, idx)
  if n in ("v_div_fmas_f32", "v_div_fmas_f64"):
    vcc = M.mask_to_lanes(m.s[idx, VCC]) & lanes
    if (u := m.sund(idx, VCC, "b32")) is not None:   # the implicit VCC's undefined lanes
      dfn = [(np.ones((len(idx), LANES), np.bool_) if dfn is None else dfn[0]) & ~M.mask_to_lanes(u.astype(U32))]
    r = _finish_float(i, A.div_fmas(vals[0], vals[1], vals[2], vcc), o.dst)
    m.vwrite(idx, vdst, o.dst, M.untyped(r, o.dst), lanes, None, dfn)
    return m.advance(i, idx)
  if n == "v_readfirstlane_b32":
    v = np.broadcast_to(raw[0], (len(idx), LANES))
    first = np.where(lanes.any(axis=1), np.argmax(lanes, axis=1), 0)
    m.swrite(idx, vdst, "b32", v[np.arange(len(idx)), first])
    return m.advance(i, idx)
  if n == "v_readlane_b32":
    v = np.broadcast_to(raw[0], (len(idx), LANES))
    lane = (np.broadcast_to(raw[1], (len(idx), 1))[:, 0] & U32(31)).astype(np.int64)
    m.swrite(idx, vdst, "b32", v[np.arange(len(idx)), lane])
    return m.advance(i, idx)
  if n == "v_writelane_b32":
    lane = (np.broadcast_to(raw[1], (len(idx), 1))[:, 0] & U32(31)).astype(np.int64)
    sel = np.arange(LANES)[None, :] == lane[:, None]
    m.vwrite(idx, vdst, "b32", np.broadcast_to(raw[0], (len(idx), LANES)), sel)
    return m.advance(i, idx)
  if n in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
    below = (U64(1) << np.arange(LANES, dtype=U64)) - U64(1)
    if n == "v_mbcnt_lo_u32_b32":
      cnt = A.popcount(np.broadcast_to(raw[0], (len(idx), 1)).astype(U64) & below[None, :])
    else: cnt = np.zeros((len(idx), LANES), U32)   # wave32: no lanes 32..63 below any lane
    m.vwrite(idx, vdst, "u32", (cnt.astype(U64) + raw[1].astype(U64)) & U64(0xFFFFFFFF), lanes, None, dfn)
    return m.advance(i, idx)
  if n == "v_swap_b32":
    a = m.vsrc(idx, f["src0"], "b32", None, None, lanes).copy()
    b = m.vsrc(idx, 256 + f["vdst"], "b32", None, None, lanes).copy()
    m.vwrite(idx, f["src0"] - 256, "b32", b, lanes)
    m.vwrite(idx, vdst, "b32", a, lanes)
    return m.advance(i, idx)
  fn = X.VALU.get(n)
  if fn is None: raise M.WaveFault(f"{n} is not emulated")
  with np.errstate(all="ignore"): r = fn(*vals)
  if o.dst[0] == "f": r = _finish_float(i, np.asarray(r).astype(A.NP[o.dst]), o.dst)
  elif i.fmt == "VOP3" and f.get("clamp"): r = np.clip(np.asarray(r), *(lambda t: (t.min, t.max))(np.iinfo(A.NP[o.dst])))
  m.vwrite(idx, vdst, o.dst, M.untyped(r, o.dst), lanes, dhi, dfn)
  m.advance(i, idx)


def _valu_row(m: Any, i: Inst, idx: np.ndarray, srcs: list[tuple[int, str, int | None]], fn: Any) -> None:
  """A VALU op that is one row of ops.VALU: read the sources (definedness tracked), apply modifiers, the row, clamp/omod, write."""
  o, f = i.op, i.f
  lanes = m.exec_mask(idx)
  if m.vinit is not None: m.track = []
  try: raw = [_read(m, i, idx, lanes, c, t, h) for c, t, h in srcs]
  finally: reads, m.track = m.track, None
  dfn = _definedness(o.name, reads, len(idx))
  vals = [raw[k] if t == "m" else _mods(i, M.typed(raw[k], t), k, t) for k, (c, t, h) in enumerate(srcs)]
  with np.errstate(all="ignore"): r = fn(*vals)
  if o.dst[0] == "f": r = _finish_float(i, np.asarray(r).astype(A.NP[o.dst]), o.dst)
  elif i.fmt == "VOP3" and f.get("clamp"): r = np.clip(np.asarray(r), *(lambda t: (t.min, t.max))(np.iinfo(A.NP[o.dst])))
  dhi = (f["op_sel"] >> 3) & 1 if i.fmt == "VOP3" and o.dst in T16 else None
  m.vwrite(idx, f.get("vdst", 0), o.dst, M.untyped(r, o.dst), lanes, dhi, dfn)
  m.advance(i, idx)


# 64-bit results whose low dword depends only on the sources' low dwords (carries run upward): an undefined high half of
# a source leaves the low half of the result defined (LLVM feeds undefined high halves to v_mad_u64_u32 for 32-bit math)
LOW_FROM_LOW = frozenset({"v_lshlrev_b64", "v_mad_u64_u32", "v_mad_i64_i32"})


def _definedness(n: str, reads: list[list[np.ndarray]] | None, nw: int) -> list[np.ndarray] | None:
  """Per result dword, the lanes whose value is defined: every source dword defined (the low dword of LOW_FROM_LOW ops:
  the sources' low dwords). None: not tracked (all defined)."""
  if not reads: return None   # not tracked, or no VGPR source: the written lanes are defined
  if n not in LOW_FROM_LOW:
    ds = [d for r in reads for d in r]
    return [ds[0] if len(ds) == 1 else np.logical_and.reduce(ds)]
  ones = np.ones((nw, LANES), np.bool_)
  every = ones.copy()
  for r in reads:
    for d in r: every &= d
  if n in LOW_FROM_LOW:
    low = ones.copy()
    for r in reads: low &= r[0]
    return [low, every]
  return [every]


# integer dot products (ISA guide V_DOT4_I32_IU8 etc.): (bits per element, signed form); NEG_LO[0]/[1] mark src0/src1
# signed in the IU forms, as LLVM prints llvm.amdgcn.sudot4's sign flags (neg_lo:[1,1,0])
DOTS = {"v_dot4_i32_iu8": (8, True), "v_dot4_u32_u8": (8, False), "v_dot8_i32_iu4": (4, True), "v_dot8_u32_u4": (4, False)}

WMMA_IN = {"v_wmma_f32_16x16x16_f16": "float16", "v_wmma_f32_16x16x16_bf16": "bfloat16"}


def wmma(m: Any, i: Inst, idx: np.ndarray, lanes: np.ndarray) -> None:
  """V_WMMA_F32_16X16X16_{F16,BF16}, gfx11 wave32 fragments (ISA guide, "Wave Matrix Multiply Accumulate"): A row l%16 holds
  K = 0..15 in 8 VGPRs (two 16-bit halves each), B column l%16 likewise, C/D VGPR e of lane l is element (2e + l//16, l%16);
  lanes 16..31 repeat lanes 0..15 for A and B. D = C + sum over k in order (refgrad.uop.semantics.wmma)."""
  f = i.f
  if not lanes.all(): raise M.WaveFault("WMMA with EXEC not covering all 32 lanes (the result is undefined on hardware)")
  if f["neg"] or f["neg_hi"] or f["clamp"] or f["op_sel"]: raise M.WaveFault("WMMA modifiers (neg/clamp/op_sel) are not emulated")
  def frag(code: int, what: str) -> np.ndarray:
    if code < 256: raise M.WaveFault(f"WMMA {what} from a scalar or constant operand is not emulated")
    regs = np.stack([m.vsrc(idx, code + k, "b32", None, None, lanes) for k in range(8)], axis=2)   # [n, 32, 8]
    return regs
  a, b = frag(f["src0"], "A"), frag(f["src1"], "B")
  if m.checked:
    for nm, x in (("A", a), ("B", b)):
      if (bad := (x[:, :16] != x[:, 16:]).any(axis=2)).any():
        wi, lane = map(int, np.argwhere(bad)[0])
        raise M.WaveFault(f"WMMA {nm} fragment of lane {lane + 16} of wave {int(idx[wi])} differs from lane {lane}'s (lanes 16..31 must repeat 0..15)")
  def halves(x: np.ndarray) -> np.ndarray:   # [n, 16 lanes, 8 regs] -> [n, 16, 16] element e = reg e//2, half e%2
    lo, hi = (x & U32(0xFFFF)).astype(np.uint16), (x >> U32(16)).astype(np.uint16)
    return np.stack([lo, hi], axis=3).reshape(x.shape[0], 16, 16)
  am, bm = halves(a[:, :16]), halves(b[:, :16])       # am[w, row, k]; bm[w, col, k]
  dt = {"float16": dtypes.float16, "bfloat16": dtypes.bfloat16}[WMMA_IN[i.op.name]]
  av = am.view(np.float16) if dt == dtypes.float16 else am
  bv = bm.view(np.float16) if dt == dtypes.float16 else bm
  c = frag(f["src2"], "C").view(np.float32)           # [n, 32 lanes, 8]: element (2e + l//16, l%16)
  lane = np.arange(LANES)
  cm = np.zeros((len(idx), 16, 16), np.float32)
  for e in range(8): cm[:, 2 * e + lane // 16, lane % 16] = c[:, :, e]
  d = wmma_ref(av, np.swapaxes(bv, 1, 2), cm, dt)
  for e in range(8): m.vwrite(idx, f["vdst"] + e, "f32", d[:, 2 * e + lane // 16, lane % 16].view(U32), lanes)


def vop3p(m: Any, i: Inst, idx: np.ndarray) -> None:
  o, f = i.op, i.f
  n = o.name
  lanes = m.exec_mask(idx)
  if n in WMMA_IN:
    wmma(m, i, idx, lanes)
    return m.advance(i, idx)
  if n in DOTS:
    bits, signed_ok = DOTS[n]
    raw = [m.vsrc(idx, c, "b32", i.literal, None, lanes).astype(np.int64) for c in (f["src0"], f["src1"], f["src2"])]
    acc = raw[2] if signed_ok else raw[2] & 0xFFFFFFFF
    if signed_ok: acc = (acc << 32) >> 32   # the i32 accumulator
    mask = (1 << bits) - 1
    for k in range(32 // bits):
      x, y = ((raw[j] >> (bits * k)) & mask for j in (0, 1))
      if signed_ok and f["neg"] & 1: x = x - ((x >> (bits - 1)) << bits)   # NEG_LO[0]: src0 signed
      if signed_ok and f["neg"] & 2: y = y - ((y >> (bits - 1)) << bits)   # NEG_LO[1]: src1 signed
      acc = acc + x * y
    if f["clamp"]: acc = np.clip(acc, -(1 << 31), (1 << 31) - 1) if signed_ok else np.clip(acc, 0, (1 << 32) - 1)
    m.vwrite(idx, f["vdst"], "b32", (acc & 0xFFFFFFFF).astype(U32), lanes)
    return m.advance(i, idx)
  codes = [f["src0"], f["src1"], f["src2"]][:len(o.srcs)]
  raw = [m.vsrc(idx, c, "b32", i.literal, None, lanes).astype(U32) for c in codes]
  sel = [(f["op_sel"] >> k) & 1 for k in range(3)]
  selhi = [(f["op_sel_hi"] >> k) & 1 for k in range(2)] + [f["op_sel_hi2"]]
  nlo = [(f["neg"] >> k) & 1 for k in range(3)]
  nhi = [(f["neg_hi"] >> k) & 1 for k in range(3)]
  def half(x: np.ndarray, h: int) -> np.ndarray: return ((x >> U32(16 * h)) & U32(0xFFFF)).astype(np.uint16)
  if n in X.PK:
    t, fn = X.PK[n]
    outs = []
    for s, ng in ((sel, nlo), (selhi, nhi)):
      args = [half(r, s[k]).view(t) for k, r in enumerate(raw)]
      if t == np.float16: args = [-a if ng[k] else a for k, a in enumerate(args)]
      with np.errstate(all="ignore"): outs.append(np.asarray(fn(*args)).astype(t).view(np.uint16))
    if f["clamp"]: raise M.WaveFault(f"{n} with clamp is not emulated")
    m.vwrite(idx, f["vdst"], "b32", outs[0].astype(U32) | (outs[1].astype(U32) << U32(16)), lanes)
    return m.advance(i, idx)
  if n in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
    args = []
    for k, r in enumerate(raw):
      if selhi[k]: x = half(r, sel[k]).view(np.float16).astype(np.float32)   # op_sel_hi: the operand is f16 (op_sel picks the half)
      else: x = r.view(np.float32)
      if (f["neg_hi"] >> k) & 1: x = np.abs(x)
      if nlo[k]: x = -x
      args.append(x)
    r = A.fma(*args)
    if n == "v_fma_mix_f32":
      if f["clamp"]: r = np.where(np.isnan(r), np.float32(0), np.clip(r, 0, 1)).astype(np.float32)
      m.vwrite(idx, f["vdst"], "f32", r.view(U32), lanes)
    else:
      # ISA pseudocode: D0.f16 = f32_to_f16(fma(in0, in1, in2)) with f32 `in`: the fma rounds to f32, then to f16 (two
      # roundings: what LLVM selects it for, fptrunc(fmul/fma float))
      with np.errstate(all="ignore"): r16 = r.astype(np.float16)
      if f["clamp"]: r16 = np.where(np.isnan(r16), np.float16(0), np.clip(r16, 0, 1)).astype(np.float16)
      m.vwrite(idx, f["vdst"], "b16", r16.view(np.uint16), lanes, 1 if n.endswith("hi_f16") else 0)
    return m.advance(i, idx)
  raise M.WaveFault(f"{n} is not emulated")


VOPD_FN = {"v_dual_fmac_f32": "v_fmac_f32", "v_dual_fmaak_f32": "v_fmaak_f32", "v_dual_fmamk_f32": "v_fmamk_f32",
           "v_dual_mul_f32": "v_mul_f32", "v_dual_add_f32": "v_add_f32", "v_dual_sub_f32": "v_sub_f32", "v_dual_subrev_f32": "v_subrev_f32",
           "v_dual_mov_b32": "v_mov_b32", "v_dual_max_f32": "v_max_f32", "v_dual_min_f32": "v_min_f32",
           "v_dual_add_nc_u32": "v_add_nc_u32", "v_dual_lshlrev_b32": "v_lshlrev_b32", "v_dual_and_b32": "v_and_b32"}
VOPD_TYPES = {"v_add_nc_u32": "u32", "v_lshlrev_b32": "b32", "v_and_b32": "b32", "v_mov_b32": "b32"}


def vopd(m: Any, i: Inst, idx: np.ndarray) -> None:
  """Two VALU ops issued together: both read their sources before either writes (ISA guide, "VOPD" dual issue)."""
  f = i.f
  lanes = m.exec_mask(idx)
  results = []
  for name, d, s0, s1 in zip(i.op.name.split("::"), (f["vdstx"], vopd_dsty(i)), (f["src0x"], f["src0y"]),
                             (f["vsrc1x"], f["vsrc1y"])):
    if m.vinit is not None: m.track = []
    try: results.append(_vopd_half(m, i, idx, lanes, name, d, s0, s1))
    finally: reads, m.track = m.track, None
    results[-1] = results[-1] + (_definedness(name, reads, len(idx)),)
  for d, r, dfn in results: m.vwrite(idx, d, "b32", r, lanes, None, dfn)
  m.advance(i, idx)


def _vopd_half(m: Any, i: Inst, idx: np.ndarray, lanes: np.ndarray, name: str, d: int, s0: int, s1: int) -> tuple[int, np.ndarray]:
  """One half of a VOPD pair: (destination register, result bits)."""
  if name == "v_dual_cndmask_b32":
    a = m.vsrc(idx, s0, "b32", i.literal, None, lanes)
    b = m.vsrc(idx, 256 + s1, "b32", i.literal, None, lanes)
    if m.track is not None and (u := m.sund(idx, VCC, "b32")) is not None: m.track.append([~M.mask_to_lanes(u.astype(U32))])
    return d, np.where(M.mask_to_lanes(m.s[idx, VCC]), b, a)
  base = VOPD_FN.get(name)
  if base is None: raise M.WaveFault(f"{name} is not emulated")
  t = VOPD_TYPES.get(base, "f32")
  a = M.typed(m.vsrc(idx, s0, t, i.literal, None, lanes), t)
  if base == "v_mov_b32": args = [a]
  else:
    b = M.typed(m.vsrc(idx, 256 + s1, t, None, None, lanes), t)
    k = np.float32(np.uint32(i.literal or 0).view(np.float32))
    if base == "v_fmac_f32": args = [a, b, M.typed(m.vsrc(idx, 256 + d, t, None, None, lanes), t)]
    elif base == "v_fmamk_f32": args = [a, k, b]
    elif base == "v_fmaak_f32": args = [a, b, k]
    else: args = [a, b]
  with np.errstate(all="ignore"): r = X.VALU[base](*args)
  return d, M.untyped(np.asarray(r).astype(A.NP[t]), t)


# ---- LDS ------------------------------------------------------------------------------------------------------------
DS_LOAD = {"ds_load_b32": (4, False), "ds_load_b64": (8, False), "ds_load_b96": (12, False), "ds_load_b128": (16, False),
           "ds_load_u8": (1, False), "ds_load_i8": (1, True), "ds_load_u16": (2, False), "ds_load_i16": (2, True)}
# D16 forms: 8/16 bits (sign- or zero-extended to 16) into the low (1) or high (2) half of VDST, the other half kept;
# the _d16_hi stores write the high half of DATA0 (ISA guide, "LDS instructions": DS_LOAD_U8_D16 .. DS_STORE_B16_D16_HI)
DS_LOAD_D16 = {"ds_load_u8_d16": (1, False, 1), "ds_load_u8_d16_hi": (1, False, 2), "ds_load_i8_d16": (1, True, 1),
               "ds_load_i8_d16_hi": (1, True, 2), "ds_load_u16_d16": (2, False, 1), "ds_load_u16_d16_hi": (2, False, 2)}
DS_STORE_D16_HI = {"ds_store_b8_d16_hi": 1, "ds_store_b16_d16_hi": 2}
DS_STORE = {"ds_store_b32": 4, "ds_store_b64": 8, "ds_store_b96": 12, "ds_store_b128": 16, "ds_store_b8": 1, "ds_store_b16": 2}
DS_2ADDR = {"ds_load_2addr_b32": (4, 1), "ds_load_2addr_stride64_b32": (4, 64), "ds_load_2addr_b64": (8, 1),
            "ds_load_2addr_stride64_b64": (8, 64), "ds_store_2addr_b32": (4, 1), "ds_store_2addr_stride64_b32": (4, 64),
            "ds_store_2addr_b64": (8, 1), "ds_store_2addr_stride64_b64": (8, 64)}
DS_ATOMIC = {"ds_add_u32": lambda a, b: a + b, "ds_sub_u32": lambda a, b: a - b, "ds_min_i32": lambda a, b: np.minimum(a.view(np.int32), b.view(np.int32)).view(U32),
             "ds_max_i32": lambda a, b: np.maximum(a.view(np.int32), b.view(np.int32)).view(U32), "ds_min_u32": np.minimum, "ds_max_u32": np.maximum,
             "ds_and_b32": lambda a, b: a & b, "ds_or_b32": lambda a, b: a | b, "ds_xor_b32": lambda a, b: a ^ b,
             "ds_add_f32": lambda a, b: (a.view(np.float32) + b.view(np.float32)).view(U32), "ds_add_rtn_u32": lambda a, b: a + b,
             "ds_storexchg_rtn_b32": lambda a, b: b}


def _lds_index(m: Any, i: Inst, idx: np.ndarray, addr: np.ndarray, nbytes: int, lanes: np.ndarray) -> np.ndarray:
  size = m.lds.shape[1]
  addr &= 0xFFFFFFFF   # the LDS address (VGPR + offset) is 32 bits: LLVM folds negative bases into the offset
  bad = lanes & ((addr < 0) | (addr + nbytes > size))
  if bad.any():
    wi, lane = map(int, np.argwhere(bad)[0])
    raise M.WaveFault(f"lane {lane} of wave {int(idx[wi])}: LDS access of {nbytes} bytes at {int(addr[wi, lane])} is out of bounds "
                         f"(the workgroup has {size} bytes of LDS, RSRC2.LDS_SIZE)")
  return addr


def _lds_read(m: Any, i: Any, idx: np.ndarray, addr: np.ndarray, nbytes: int, lanes: np.ndarray, undef: list | None = None) -> np.ndarray:
  """[n, 32, nbytes] of LDS. Checked mode: bytes never written are a fault; bytes stored from undefined lanes give
  undefined lanes (appended to `undef` as [n, 32, dwords], None when none; without `undef`, or on a loop batch's copy:
  a fault)."""
  addr = _lds_index(m, i, idx, addr.copy(), nbytes, lanes)
  g = m.wg[idx][:, None, None]
  a = np.where(lanes, addr, 0)[:, :, None] + np.arange(nbytes)[None, None, :]
  if m.ldsinit is not None:
    bad = lanes & ~m.ldsinit[g, a].all(axis=2)
    if bad.any():
      wi, lane = map(int, np.argwhere(bad)[0])
      raise M.WaveFault(f"lane {lane} of wave {int(idx[wi])} reads LDS bytes {int(addr[wi, lane])}..{int(addr[wi, lane]) + nbytes} "
                           "that were never written (uninitialized LDS)")
    u = m.ldsundef[g, a] & lanes[:, :, None]
    if u.any():
      if undef is None or m.vinit is None:
        wi, lane = map(int, np.argwhere(u.any(axis=2))[0])
        raise M.WaveFault(f"lane {lane} of wave {int(idx[wi])} reads LDS bytes {int(addr[wi, lane])}..{int(addr[wi, lane]) + nbytes} "
                          "that hold an undefined value (stored from a value loaded from memory nothing wrote)")
      undef.append(u.reshape(u.shape[0], LANES, nbytes // 4, 4).any(axis=3) if nbytes >= 4 else u.any(axis=2, keepdims=True))
    elif undef is not None: undef.append(None)
  elif undef is not None: undef.append(None)
  return m.lds[g, a]   # [n, 32, nbytes]


def _ds_data(m: Any, idx: np.ndarray, lanes: np.ndarray, nb: int, read: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
  """(data, lanes, undefined bytes) of a DS store, as _lds_write takes them after the address (`_tracked_bytes`)."""
  data, und = _tracked_bytes(m, lanes, nb, read)
  return data, lanes, und


def _lds_undef(parts: list, shape: tuple[int, int], nds: list[int]) -> np.ndarray | None:
  """The undefined dwords of one or two LDS reads (`_lds_read`'s undef parts) side by side, or None."""
  if all(p is None for p in parts): return None
  return np.concatenate([np.zeros(shape + (k,), np.bool_) if p is None else p for p, k in zip(parts, nds)], axis=2)


def _lds_write(m: Any, i: Any, idx: np.ndarray, addr: np.ndarray, data: np.ndarray, lanes: np.ndarray, undef: np.ndarray | None = None) -> None:
  """Store each enabled lane's bytes; `undef` ([n, 32, nbytes], checked mode): bytes from undefined lanes, kept undefined."""
  nbytes = data.shape[2]
  addr = _lds_index(m, i, idx, addr.copy(), nbytes, lanes)
  wi, li = np.nonzero(lanes)
  g = m.wg[idx][wi][:, None]
  a = addr[wi, li][:, None] + np.arange(nbytes)[None, :]
  m.lds[g, a] = data[wi, li]
  if m.ldsinit is not None:
    m.ldsinit[g, a] = True
    m.ldsundef[g, a] = False if undef is None else undef[wi, li]


def _to_bytes(v: np.ndarray, nbytes: int) -> np.ndarray:
  """[n, 32] of uint64/uint32 -> [n, 32, nbytes] little-endian bytes."""
  v = np.ascontiguousarray(v, "<u8")
  return v.reshape(v.shape + (1,)).view(np.uint8)[:, :, :nbytes]


def _from_bytes(b: np.ndarray) -> np.ndarray:
  """[n, 32, nbytes <= 8] little-endian bytes -> [n, 32] uint64."""
  pad = np.zeros(b.shape[:2] + (8,), np.uint8)
  pad[:, :, :b.shape[2]] = b
  return pad.view("<u8")[:, :, 0]


def _vdata(m: Any, idx: np.ndarray, r: int, nbytes: int, lanes: np.ndarray) -> np.ndarray:
  """nbytes (up to 16) of consecutive VGPRs from r as [n, 32, nbytes]."""
  nd = max(1, -(-nbytes // 4))
  parts = [_to_bytes(m.vsrc(idx, 256 + r + k, "b32", None, None, lanes), 4) for k in range(nd)]
  return np.concatenate(parts, axis=2)[:, :, :nbytes]


def _vstore_bytes(m: Any, idx: np.ndarray, r: int, data: np.ndarray, lanes: np.ndarray, undef: np.ndarray | None = None) -> None:
  """VGPRs r.. = the bytes [n, 32, nbytes]; `undef` [n, 32, dwords]: the lanes whose dword is undefined (None: none)."""
  nd = -(-data.shape[2] // 4)
  pad = np.zeros(data.shape[:2] + (4 * nd,), np.uint8)
  pad[:, :, :data.shape[2]] = data
  words = pad.view("<u4")
  for k in range(nd): m.vwrite(idx, r + k, "b32", words[:, :, k], lanes, None, None if undef is None else [~undef[:, :, k]])


def ds(m: Any, i: Inst, idx: np.ndarray) -> None:
  f = i.f
  n = i.op.name
  lanes = m.exec_mask(idx)
  if f["gds"]: raise M.WaveFault("GDS is not emulated")
  addr = m.vsrc(idx, 256 + f["addr"], "b32", None, None, lanes).astype(np.int64)
  off = f["offset0"] | f["offset1"] << 8
  und: list = []   # the loads' undefined dwords (values stored from undefined lanes: they flow as values)
  sh = (len(idx), LANES)
  if n in DS_LOAD:
    nb, sgn = DS_LOAD[n]
    b = _lds_read(m, i, idx, addr + off, nb, lanes, und)
    if nb < 4: _write_loaded(m, idx, f["vdst"], b, nb, sgn, 0, lanes, und[0])
    else: _vstore_bytes(m, idx, f["vdst"], b, lanes, und[0])
  elif n in DS_STORE:
    nb = DS_STORE[n]
    _lds_write(m, i, idx, addr + off, *_ds_data(m, idx, lanes, nb, lambda: _vdata(m, idx, f["data0"], nb, lanes)))
  elif n in DS_LOAD_D16:
    nb, sgn, d16 = DS_LOAD_D16[n]
    b = _lds_read(m, i, idx, addr + off, nb, lanes, und)
    _write_loaded(m, idx, f["vdst"], b, nb, sgn, d16, lanes, und[0])
  elif n in DS_STORE_D16_HI:
    nb = DS_STORE_D16_HI[n]
    _lds_write(m, i, idx, addr + off, *_ds_data(m, idx, lanes, nb, lambda: _store_data(m, idx, f["data0"], nb, 1, lanes)))
  elif n in DS_2ADDR:
    nb, stride = DS_2ADDR[n]
    a0, a1 = addr + f["offset0"] * nb * stride, addr + f["offset1"] * nb * stride
    if "load" in n:
      b = np.concatenate([_lds_read(m, i, idx, a0, nb, lanes, und), _lds_read(m, i, idx, a1, nb, lanes, und)], axis=2)
      _vstore_bytes(m, idx, f["vdst"], b, lanes, _lds_undef(und, sh, [nb // 4] * 2))
    else:
      d0 = _ds_data(m, idx, lanes, nb, lambda: _vdata(m, idx, f["data0"], nb, lanes))
      d1 = _ds_data(m, idx, lanes, nb, lambda: _vdata(m, idx, f["data1"], nb, lanes))
      _lds_write(m, i, idx, a0, *d0)
      _lds_write(m, i, idx, a1, *d1)
  elif n in DS_ATOMIC:
    # lanes in lane order, one at a time per address conflict: apply sequentially over lanes (vectorized across waves)
    for lane in range(LANES):
      ln = np.zeros_like(lanes)
      ln[:, lane] = lanes[:, lane]
      if not ln.any(): continue
      old = _from_bytes(_lds_read(m, i, idx, addr + off, 4, ln)).astype(U32)
      val = m.vsrc(idx, 256 + f["data0"], "b32", None, None, ln)
      with np.errstate(all="ignore"): new = np.asarray(DS_ATOMIC[n](old, np.broadcast_to(val, old.shape))).astype(U32)
      _lds_write(m, i, idx, addr + off, _to_bytes(new, 4), ln)
      if "rtn" in n: m.vwrite(idx, f["vdst"], "b32", old, ln)
  else: raise M.WaveFault(f"{n} is not emulated")
  m.advance(i, idx)


# ---- global memory --------------------------------------------------------------------------------------------------
FLAT_LOAD = {"load_u8": (1, False, 0), "load_i8": (1, True, 0), "load_u16": (2, False, 0), "load_i16": (2, True, 0),
             "load_b32": (4, False, 0), "load_b64": (8, False, 0), "load_b96": (12, False, 0), "load_b128": (16, False, 0),
             "load_d16_u8": (1, False, 1), "load_d16_i8": (1, True, 1), "load_d16_b16": (2, False, 1),
             "load_d16_hi_u8": (1, False, 2), "load_d16_hi_i8": (1, True, 2), "load_d16_hi_b16": (2, False, 2)}
FLAT_STORE = {"store_b8": (1, 0), "store_b16": (2, 0), "store_b32": (4, 0), "store_b64": (8, 0), "store_b96": (12, 0),
              "store_b128": (16, 0), "store_d16_hi_b8": (1, 2), "store_d16_hi_b16": (2, 2)}


def _write_loaded(m: Any, idx: np.ndarray, vdst: int, b: np.ndarray, nb: int, sgn: bool, d16: int, lanes: np.ndarray,
                  undef: np.ndarray | None = None) -> None:
  """The bytes a FLAT/GLOBAL/SCRATCH load read into VDST: whole dwords, or 8/16 bits extended (sign when sgn) into the
  dword or into a 16-bit half (d16 = 1 low, 2 high). `undef` [n, 32, dwords]: lanes loaded from undefined bytes."""
  if nb >= 4: return _vstore_bytes(m, idx, vdst, b, lanes, undef)
  v = _from_bytes(b)
  if sgn: v = (v.astype(np.int64) << (64 - 8 * nb) >> (64 - 8 * nb)).astype(U64)
  dfn = None if undef is None else [~undef[:, :, 0]]
  if d16 and m.vinit is not None and m.undef_origin is not None and vdst < m.nv:
    # one definedness bit per dword: once this dispatch has loaded undefined bytes, a half loaded into a dword keeps the
    # other half's undefinedness (LLVM packs two loaded halves into one dword: either undefined makes it so). Before
    # that, a defined half marks the dword defined (a never-written other half is then no use of undefined data)
    old = m.vinit[m.ix(idx), vdst, :]
    dfn = [old.copy() if dfn is None else old & dfn[0]]
  if d16 == 0: m.vwrite(idx, vdst, "b32", (v & U64(0xFFFFFFFF)).astype(U32), lanes, None, dfn)
  else: m.vwrite(idx, vdst, "b16", (v & U64(0xFFFF)).astype(np.uint16), lanes, d16 - 1, dfn)

def _store_data(m: Any, idx: np.ndarray, data: int, nb: int, d16: int, lanes: np.ndarray) -> np.ndarray:
  """The nb bytes per lane a FLAT/GLOBAL/SCRATCH store writes from DATA (a *_d16_hi store takes the high half)."""
  if d16: return _to_bytes(m.vsrc(idx, 256 + data, "b32", None, None, lanes) >> U32(16), nb)
  return _vdata(m, idx, data, nb, lanes)


def _global_store_data(m: Any, idx: np.ndarray, data: int, nb: int, d16: int, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
  """A global (or scratch) store's bytes (`_store_data`) and which come from undefined VGPR dwords (`_tracked_bytes`)."""
  return _tracked_bytes(m, lanes, nb, lambda: _store_data(m, idx, data, nb, d16, lanes))


def _tracked_bytes(m: Any, lanes: np.ndarray, nb: int, read: Any) -> tuple[np.ndarray, np.ndarray | None]:
  """The [n, 32, nb] bytes `read` gathers from VGPR dwords (in order) and, in checked mode, which of them come from
  undefined dwords ([n, 32, nb] bool; None: none): a store writes them as undefined bytes (the memcheck model), no report."""
  if m.vinit is None: return read(), None
  m.track = []
  try: b = read()
  finally: reads, m.track = m.track, None
  und = np.repeat(np.stack([~d[0] for d in reads], axis=2), 4, axis=2)[:, :, :nb]
  return b, (und if (und & lanes[:, :, None]).any() else None)

def scratch(m: Any, i: Inst, idx: np.ndarray) -> None:
  """SCRATCH_*: a lane's private bytes at OFFSET (+ VADDR when SVE, + the SGPR SADDR names); outside the size the dispatch
  gives (TMPRING_SIZE.WAVESIZE) is a fault naming the lane. Checked mode: bytes keep definedness as global memory does."""
  f, n = i.f, i.op.name.split("_", 1)[1]
  lanes = m.exec_mask(idx)
  addr = np.full((len(idx), M.LANES), flat_offset(i), np.int64)
  if f["sve"]: addr = addr + m.vsrc(idx, 256 + f["addr"], "b32", None, None, lanes).astype(np.int64)
  if f["saddr"] not in (124, 125):
    if m.sdirty: m.sreport(idx, "the address of a scratch access", m.sund(idx, f["saddr"], "b32"))
    addr = addr + m.sreg(idx, f["saddr"], "b32", None).astype(np.int64)[:, None]
  nb = FLAT_LOAD[n][0] if n in FLAT_LOAD else FLAT_STORE[n][0] if n in FLAT_STORE else 0
  if not nb: raise M.WaveFault(f"{i.op.name} is not emulated")
  size = m.priv.shape[2]
  bad = lanes & ((addr < 0) | (addr + nb > size))
  if bad.any():
    wi, lane = (int(x[0]) for x in np.nonzero(bad))
    raise M.WaveFault(f"lane {lane} of wave {int(idx[wi])}: scratch access of {nb} bytes at {int(addr[wi, lane])} is outside the "
                      f"{size} private bytes per lane the dispatch provides", "mmu")
  w, ln = np.nonzero(lanes)
  ix = addr[w, ln][:, None] + np.arange(nb)
  if n in FLAT_LOAD:
    _, sgn, d16 = FLAT_LOAD[n]
    und = None
    # checked mode: bytes never written (or written from undefined lanes, e.g. a spill of one) load as undefined lanes, as
    # global memory does; a loop batch's copy (no definedness) faults instead and the batch is discarded
    if m.checked and not (ok := m.privinit[idx[w][:, None], ln[:, None], ix]).all():
      if m.vinit is None:
        k = int(np.flatnonzero(~ok.all(axis=1))[0])
        raise M.WaveFault(f"lane {int(ln[k])} of wave {int(idx[w[k]])}: scratch load of {nb} bytes at {int(ix[k, 0])} reads bytes never written "
                          "(uninitialized)")
      nd = max(1, nb // 4)
      und = np.zeros((len(idx), M.LANES, nd), np.bool_)
      und[w, ln] = ~(ok.reshape(len(w), nd, -1).all(axis=2) if nb >= 4 else ok.all(axis=1, keepdims=True))
      if m.undef_origin is None: m.undef_origin = f"in kernel {m.name} at PC 0x{i.pc:x} ({i.text}) from scratch bytes nothing wrote"
    b = np.zeros((len(idx), M.LANES, nb), np.uint8)
    b[w, ln] = m.priv[idx[w][:, None], ln[:, None], ix]
    _write_loaded(m, idx, f["vdst"], b, nb, sgn, d16, lanes, und)
  else:
    _, d16 = FLAT_STORE[n]
    data, und = _global_store_data(m, idx, f["data"], nb, d16, lanes)
    m.priv[idx[w][:, None], ln[:, None], ix] = data[w, ln]
    if m.checked: m.privinit[idx[w][:, None], ln[:, None], ix] = True if und is None else ~und[w, ln]
  m.advance(i, idx)


def flat(m: Any, i: Inst, idx: np.ndarray) -> None:
  f = i.f
  seg = f["seg"]
  if seg == 1: return scratch(m, i, idx)
  n = i.op.name.split("_", 1)[1]
  lanes = m.exec_mask(idx)
  off = flat_offset(i)
  saddr = f["saddr"] not in (124, 125) and seg == 2
  if saddr:
    if m.sdirty: m.sreport(idx, "the address of a global access", m.sund(idx, f["saddr"], "b64"))
    base = m.sreg(idx, f["saddr"], "b64", None)[:, None]
    addr = base + m.vsrc(idx, 256 + f["addr"], "b32", None, None, lanes).astype(U64)
  else: addr = m.vsrc(idx, 256 + f["addr"], "b64", None, None, lanes)
  addr = (addr.astype(np.int64) + off).astype(U64)
  if n in FLAT_LOAD:
    nb, sgn, d16 = FLAT_LOAD[n]
    if nb >= 4 and m.load_dwords(idx, addr, nb // 4, lanes, f["vdst"]): return m.advance(i, idx)   # whole aligned dwords
    b, und = m.gather(idx, addr, nb, lanes, i)
    _write_loaded(m, idx, f["vdst"], b, nb, sgn, d16, lanes, und)
  elif n in FLAT_STORE:
    nb, d16 = FLAT_STORE[n]
    if nb >= 4 and not d16 and m.store_dwords(idx, addr, nb // 4, lanes, f["data"]): return m.advance(i, idx)   # whole aligned dwords
    data, und = _global_store_data(m, idx, f["data"], nb, d16, lanes)
    m.scatter(idx, addr, data, lanes, i, und)
  else: raise M.WaveFault(f"{i.op.name} is not emulated")
  m.advance(i, idx)


def mubuf(m: Any, i: Inst, idx: np.ndarray) -> None:
  if i.op.name in ("buffer_gl0_inv", "buffer_gl1_inv"): return m.advance(i, idx)   # caches are not modelled: memory is coherent
  raise M.WaveFault(f"{i.op.name} is not emulated")


HANDLERS = {"SOPP": sopp, "SOP1": sop1, "SOP2": sop2, "SOPC": sopc, "SOPK": sopk, "SMEM": smem, "VOP1": valu, "VOP2": valu,
            "VOPC": valu, "VOP3": valu, "VOP3P": vop3p, "VOPD": vopd, "DS": ds, "FLAT": flat, "MUBUF": mubuf}
