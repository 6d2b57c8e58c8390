"""Decoding RDNA3 machine code: words -> `Inst` (format, opcode row, fields, literal), and the text LLVM's printer gives
for it (`Inst.text`, compared instruction by instruction with LLVM's assembly in the tests).

Operand encodings (RDNA3 ISA guide, "Microcode Formats": the SSRC / SRC operand tables): 0..105 SGPRs, 106/107 VCC_LO/HI,
108..123 TTMP, 124 NULL, 125 M0, 126/127 EXEC_LO/HI, 128..192 the integers 0..64, 193..208 -1..-16, 240..248 the float
constants 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 1/(2*pi), 250 DPP16, 251 VCCZ, 252 EXECZ, 253 SCC, 254 LDS_DIRECT,
255 a 32-bit literal after the instruction, 256..511 VGPRs."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from dataclasses import field as dfield

from emulators.amd.rdna3 import formats as F
from emulators.amd.rdna3 import opcodes as O
from emulators.fault import Fault

FLOAT_CONSTS = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
INV_2PI = {"f16": 0x3118, "f32": 0x3E22F983, "f64": 0x3FC45F306DC9C882}   # 1/(2*pi) as each width holds it
SPECIAL = {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi", 235: "src_shared_base",
           236: "src_shared_limit", 237: "src_private_base", 238: "src_private_limit", 239: "src_pops_exiting_wave_id",
           251: "src_vccz", 252: "src_execz", 253: "src_scc", 254: "src_lds_direct"}
WIDTH = {"b16": 1, "f16": 1, "i16": 1, "u16": 1, "p16": 1, "x16": 1, "m": 1, "b32": 1, "f32": 1, "i32": 1, "u32": 1,
         "b64": 2, "f64": 2, "i64": 2, "u64": 2, "b96": 3, "b128": 4, "b256": 8, "b512": 16, "-": 0}
LITERAL = 255


class DecodeError(Fault):
  pass


@dataclass
class Inst:
  pc: int                 # byte offset from the program start
  words: tuple[int, ...]
  fmt: str
  op: O.Op
  f: dict[str, int]       # the format's fields
  literal: int | None = None
  enc: str = ""           # how LLVM names the encoding in the mnemonic: "_e32"/"_e64" for VOP1/2/C ops, "" otherwise
  extra: dict = dfield(default_factory=dict)

  @property
  def size(self) -> int: return 4 * len(self.words)

  @property
  def name(self) -> str: return self.op.name

  @property
  def text(self) -> str: return disasm(self)


_SHIFTS: dict[str, list[tuple[str, int, int]]] = {}   # format -> (field, low bit, mask), from formats.py's (hi, lo) rows


def _u32(code: bytes, pc: int) -> int: return struct.unpack_from("<I", code, pc)[0]


def _srcs_of(fmt: str, f: dict[str, int]) -> list[int]:
  return [f[k] for k in ("src0", "src1", "src2", "ssrc0", "ssrc1", "src0x", "src0y") if k in f]


def decode_one(code: bytes, pc: int, where: str = "") -> Inst:
  """The instruction at byte `pc` of `code`; DecodeError names the PC, the words and the format on anything unknown."""
  if pc + 4 > len(code): raise DecodeError(f"{where}PC 0x{pc:x}: the code ends inside an instruction", "compute")
  w0 = _u32(code, pc)
  fmt = F.identify(w0)
  if fmt is None: raise DecodeError(f"{where}PC 0x{pc:x}: word 0x{w0:08x} is no RDNA3 instruction encoding", "compute", words=(w0,))
  if pc + 4 * fmt.dwords > len(code):
    raise DecodeError(f"{where}PC 0x{pc:x}: {fmt.name} instruction (word 0x{w0:08x}) runs past the end of the code", "compute", words=(w0,))
  words = list(struct.unpack_from(f"<{fmt.dwords}I", code, pc))
  base = int.from_bytes(code[pc:pc + 4 * fmt.dwords], "little")
  if (shifts := _SHIFTS.get(fmt.name)) is None:
    shifts = _SHIFTS[fmt.name] = [(k, lo, (1 << (hi - lo + 1)) - 1) for k, (hi, lo) in fmt.fields.items()]
  f = {k: (base >> lo) & mask for k, lo, mask in shifts}
  def unknown(what: str) -> DecodeError:
    ws = " ".join(f"0x{w:08x}" for w in words)
    return DecodeError(f"{where}PC 0x{pc:x}: {what} (format {fmt.name}, words {ws})", "compute", words=tuple(words))
  if fmt.name in F.UNSUPPORTED_FORMATS: raise unknown(f"{fmt.name} instructions are not emulated (opcode {f.get('op', '?')})")
  enc = ""
  if fmt.name == "VOPD":
    ox, oy = O.VOPD_OPS.get(f["opx"]), O.VOPD_OPS.get(f["opy"])
    if ox is None or oy is None or f["opx"] > 13: raise unknown(f"unknown VOPD opcode pair X {f['opx']}, Y {f['opy']}")
    row = O.Op(f["opx"] << 8 | f["opy"], f"{ox}::{oy}", "f32", ())
  else:
    tab = O.TABLES[fmt.name]
    row = tab.get(f["op"])
    if row is None: raise unknown(f"unknown opcode {f['op']}")
    if fmt.name in ("VOP1", "VOP2", "VOPC") and row.name in O.HAS_VOP3: enc = "_e32"   # LLVM names the encoding only if there are two
    if fmt.name == "VOP3" and f["op"] < 0x200: enc = "_e64"
    if fmt.name == "FLAT":
      if f["seg"] == 3: raise unknown("FLAT segment 3 is reserved")
      row = row._replace(name=f"{O.SEGMENTS[f['seg']]}_{row.name}")
  lit = None
  needs_lit = LITERAL in _srcs_of(fmt.name, f) and fmt.name in ("SOP1", "SOP2", "SOPC", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VOPD")
  if fmt.name == "VOPD" and (f["opx"] in (1, 2) or f["opy"] in (1, 2)): needs_lit = True
  if row.name in ("v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16"): needs_lit = True
  if needs_lit:
    if pc + 4 * (len(words) + 1) > len(code): raise unknown("the literal constant runs past the end of the code")
    lit = _u32(code, pc + 4 * len(words))
    words.append(lit)
  return Inst(pc, tuple(words), fmt.name, row, f, lit, enc)


def decode(code: bytes, start: int = 0, end: int | None = None, where: str = "") -> list[Inst]:
  """Every instruction of code[start:end] in order."""
  end = len(code) if end is None else end
  out, pc = [], start
  while pc < end:
    i = decode_one(code[:end], pc, where)
    out.append(i)
    pc += i.size
  return out


# ---- LLVM-style text ------------------------------------------------------------------------------------------------
def _reg(prefix: str, n: int, width: int) -> str:
  return f"{prefix}{n}" if width == 1 else f"{prefix}[{n}:{n + width - 1}]"


def _fconst(v: float) -> str: return f"{v:.1f}"


T16 = frozenset({"f16", "b16", "i16", "u16"})   # LLVM's true16 mode: 16-bit VGPR operands name a half (vN.l / vN.h)


def operand(code: int, t: str, lit: int | None = None, hi: int | None = None) -> str:
  """The printed form of a 9-bit source / 7- or 8-bit scalar operand `code` read as type `t`. A 16-bit VGPR operand
  names its half: `hi` given (VOP3 op_sel), or else bit 7 of the register number (the 32-bit encodings)."""
  w = WIDTH.get(t, 1)
  if code >= 256: return v16(code - 256, hi) if t in T16 else _reg("v", code - 256, w)
  if code < 106: return _reg("s", code, w)
  if code in (106, 126) and w == 2: return {106: "vcc", 126: "exec"}[code]
  if 108 <= code <= 123: return _reg("ttmp", code - 108, w)
  if code in SPECIAL: return SPECIAL[code]
  if 128 <= code <= 192: return str(code - 128)
  if 193 <= code <= 208: return str(192 - code)
  if code in FLOAT_CONSTS: return _fconst(FLOAT_CONSTS[code])
  if code == 248: return "0.15915494" if t not in ("f64",) else "0.15915494309189532"
  if code == LITERAL:
    assert lit is not None
    if t in ("f16", "b16", "i16", "u16", "p16") and lit <= 0xFFFF: return f"0x{lit & 0xFFFF:x}"
    return f"0x{lit:x}"
  return f"src{code}"


def v16(n: int, hi: int | None) -> str:
  if hi is None: n, hi = n & 0x7F, n >> 7
  return f"v{n}.{'h' if hi else 'l'}"


def vreg(n: int, t: str, hi: int | None = None) -> str: return v16(n, hi) if t in T16 else _reg("v", n, WIDTH.get(t, 1))


def _src(i: Inst, code: int, t: str, k: int) -> str:
  s = operand(code, t, i.literal, (i.f["op_sel"] >> k) & 1 if i.fmt == "VOP3" else None)
  if i.fmt == "VOP3" and (t[0] == "f" or (i.op.name.startswith("v_cndmask") and k < 2)):   # cndmask takes float modifiers
    if (i.f["abs"] >> k) & 1 and i.op.name not in O.VOP3B: s = f"|{s}|"
    if (i.f["neg"] >> k) & 1: s = f"-{s}"
  elif i.fmt == "VOP3" and (i.f["neg"] >> k) & 1: s = f"neg({s})"
  return s


def _waitcnt(v: int) -> str:
  vm, exp, lgkm = (v >> 10) & 0x3F, v & 7, (v >> 4) & 0x3F
  parts = [p for p, on in ((f"vmcnt({vm})", vm != 0x3F), (f"expcnt({exp})", exp != 7), (f"lgkmcnt({lgkm})", lgkm != 0x3F)) if on]
  return " ".join(parts) if parts else f"vmcnt({vm}) expcnt({exp}) lgkmcnt({lgkm})"


_DEP = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_2", "TRANS32_DEP_3",
        "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2", "SALU_CYCLE_3"]
_SKIP = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"]


def _delay_alu(v: int) -> str:
  id0, skip, id1 = v & 0xF, (v >> 4) & 7, (v >> 7) & 0xF
  parts = []
  if id0: parts.append(f"instid0({_DEP[id0] if id0 < len(_DEP) else id0})")
  if skip: parts.append(f"instskip({_SKIP[skip] if skip < len(_SKIP) else skip})")
  if id1: parts.append(f"instid1({_DEP[id1] if id1 < len(_DEP) else id1})")
  return " | ".join(parts) if parts else "0"


# s_waitcnt_depctr fields: name -> (hi, lo, the value meaning "no wait", which LLVM leaves unprinted)
DEPCTR = {"depctr_hold_cnt": (7, 7, 1), "depctr_sa_sdst": (0, 0, 1), "depctr_va_vdst": (15, 12, 15), "depctr_va_sdst": (11, 9, 7),
          "depctr_va_ssrc": (8, 8, 1), "depctr_va_vcc": (1, 1, 1), "depctr_vm_vsrc": (4, 2, 7)}


def _depctr(v: int) -> str:
  parts = [f"{k}({(v >> lo) & ((1 << (hi - lo + 1)) - 1)})" for k, (hi, lo, dflt) in DEPCTR.items() if (v >> lo) & ((1 << (hi - lo + 1)) - 1) != dflt]
  return " ".join(parts) if parts else f"0x{v:x}"


def branch_target(i: Inst) -> int:
  simm = i.f["simm16"] - (1 << 16) if i.f["simm16"] & 0x8000 else i.f["simm16"]
  return i.pc + 4 + 4 * simm


def _sopp(i: Inst) -> str:
  n, v = i.op.name, i.f["simm16"]
  if not i.op.srcs: return n
  if n == "s_waitcnt": return f"{n} {_waitcnt(v)}"
  if n == "s_delay_alu": return f"{n} {_delay_alu(v)}"
  if n.startswith(("s_branch", "s_cbranch")): return f"{n} @0x{branch_target(i):x}"
  if n == "s_sendmsg": return f"{n} sendmsg({ {3: 'MSG_DEALLOC_VGPRS'}.get(v, v) })"
  if n == "s_waitcnt_depctr": return f"{n} {_depctr(v)}"
  if n in ("s_clause", "s_set_inst_prefetch_distance"): return f"{n} 0x{v:x}"
  return f"{n} {v}"


def disasm(i: Inst) -> str:
  f, o, n = i.f, i.op, i.op.name
  fmt = i.fmt
  if fmt == "SOPP": return _sopp(i)
  if fmt == "SOP2": return f"{n} {operand(f['sdst'], o.dst)}, {operand(f['ssrc0'], o.srcs[0], i.literal)}, {operand(f['ssrc1'], o.srcs[1], i.literal)}"
  if fmt == "SOPC": return f"{n} {operand(f['ssrc0'], o.srcs[0], i.literal)}, {operand(f['ssrc1'], o.srcs[1], i.literal)}"
  if fmt == "SOP1":
    if not o.srcs: return f"{n} {operand(f['sdst'], o.dst)}"
    if o.dst == "-": return f"{n} {operand(f['ssrc0'], o.srcs[0], i.literal)}"
    return f"{n} {operand(f['sdst'], o.dst)}, {operand(f['ssrc0'], o.srcs[0], i.literal)}"
  if fmt == "SOPK":
    return f"{n} {operand(f['sdst'], o.dst)}, 0x{f['simm16']:x}"
  if fmt == "SMEM":
    s = f"{n} {operand(f['sdata'], o.dst)}, {operand(f['sbase'] << 1, 'b64')}, "
    s += f"0x{f['offset']:x}" if f["soffset"] == 124 else f"{operand(f['soffset'], 'b32')} offset:0x{f['offset']:x}"
    return s + (" glc" if f["glc"] else "") + (" dlc" if f["dlc"] else "")
  if fmt in ("VOP1", "VOP2", "VOPC"): return _vop_e32(i)
  if fmt == "VOP3": return _vop3(i)
  if fmt == "VOP3P": return _vop3p(i)
  if fmt == "VOPD": return _vopd(i)
  if fmt == "DS": return _ds(i)
  if fmt == "FLAT": return _flat(i)
  if fmt == "MUBUF": return n
  raise AssertionError(fmt)


def _vop_e32(i: Inst) -> str:
  f, o = i.f, i.op
  n = o.name + i.enc
  s0 = operand(f["src0"], o.srcs[0], i.literal) if o.srcs else ""
  if i.fmt == "VOP1":
    if not o.srcs: return n
    return f"{n} {vreg(f['vdst'], o.dst) if o.name != 'v_readfirstlane_b32' else operand(f['vdst'], 'b32')}, {s0}"
  s1 = vreg(f["vsrc1"], o.srcs[1])
  if i.fmt == "VOPC":
    return f"{n} {s0}, {s1}" if o.dst == "-" else f"{n} vcc_lo, {s0}, {s1}"
  d = vreg(f["vdst"], o.dst)
  if o.name in ("v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"): return f"{n} {d}, vcc_lo, {s0}, {s1}, vcc_lo"
  if o.name == "v_cndmask_b32": return f"{n} {d}, {s0}, {s1}, vcc_lo"
  if o.name in ("v_fmamk_f32", "v_fmamk_f16"): return f"{n} {d}, {s0}, 0x{i.literal:x}, {s1}"
  if o.name in ("v_fmaak_f32", "v_fmaak_f16"): return f"{n} {d}, {s0}, {s1}, 0x{i.literal:x}"
  return f"{n} {d}, {s0}, {s1}"


def _mods(i: Inst) -> str:
  f = i.f
  s = ""
  if f.get("clamp"): s += " clamp"
  if f.get("omod"): s += {1: " mul:2", 2: " mul:4", 3: " div:2"}[f["omod"]]
  return s


def _vop3(i: Inst) -> str:
  f, o = i.f, i.op
  n = o.name + i.enc
  srcs = [_src(i, f[k], t, j) for j, (k, t) in enumerate(zip(("src0", "src1", "src2"), o.srcs))]
  if o.name in O.VOP3B:
    if o.name.endswith("_co_ci_u32"): srcs[2] = operand(f["src2"], "m")
    dsts = [vreg(f["vdst"], o.dst), operand(f["sdst"], "m")]
  elif o.dst == "m": dsts = [operand(f["vdst"], "m")]
  elif o.dst == "-": dsts = []
  elif o.name == "v_readlane_b32": dsts = [operand(f["vdst"], "b32")]
  else: dsts = [vreg(f["vdst"], o.dst, (f["op_sel"] >> 3) & 1)]
  if o.name in ("v_cndmask_b32", "v_cndmask_b16"): srcs[2] = operand(f["src2"], "m")
  ops = ", ".join(dsts + srcs)
  s = f"{n} {ops}" if ops else n
  t16 = any(t in T16 for t in (o.dst, *o.srcs))
  if f["op_sel"] and o.name not in O.VOP3B and not t16:
    nsrc = len(o.srcs)
    bits = [(f["op_sel"] >> k) & 1 for k in range(nsrc)] + [(f["op_sel"] >> 3) & 1]
    s += " op_sel:[" + ",".join(map(str, bits)) + "]"
  return s + _mods(i)


def _vop3p(i: Inst) -> str:
  f, o = i.f, i.op
  nsrc = len(o.srcs)
  srcs = [operand(f[k], t, i.literal) for k, t in zip(("src0", "src1", "src2"), o.srcs)]
  mix = o.name.startswith("v_fma_mix")
  if mix:   # the mixed-precision FMAs spell neg_lo / neg_hi as the float modifiers - and |.|
    srcs = [("-" if (f["neg"] >> k) & 1 else "") + (f"|{x}|" if (f["neg_hi"] >> k) & 1 else x) for k, x in enumerate(srcs)]
  s = f"{o.name} {vreg(f['vdst'], o.dst) if not mix else operand(256 + f['vdst'], 'b32')}, " + ", ".join(srcs)
  sel = [(f["op_sel"] >> k) & 1 for k in range(nsrc)]
  hi = [(f["op_sel_hi"] >> k) & 1 for k in range(2)] + [f["op_sel_hi2"]]
  hi = hi[:nsrc]
  if any(sel): s += " op_sel:[" + ",".join(map(str, sel)) + "]"
  if (mix and any(hi)) or (not mix and not all(hi)): s += " op_sel_hi:[" + ",".join(map(str, hi)) + "]"
  nl = [(f["neg"] >> k) & 1 and not mix for k in range(nsrc)]
  nh = [(f["neg_hi"] >> k) & 1 and not mix for k in range(nsrc)]
  if any(nl): s += " neg_lo:[" + ",".join(str(int(x)) for x in nl) + "]"
  if any(nh): s += " neg_hi:[" + ",".join(str(int(x)) for x in nh) + "]"
  return s + (" clamp" if f["clamp"] else "")


def vopd_dsty(i: Inst) -> int: return (i.f["vdsty"] << 1) | ((i.f["vdstx"] & 1) ^ 1)


def _vopd_half(name: str, d: int, s0: int, s1: int, lit: int | None) -> str:
  a = operand(s0, "f32", lit)
  if name.endswith("mov_b32"): return f"{name} v{d}, {a}"
  if name.endswith("fmamk_f32"): return f"{name} v{d}, {a}, 0x{lit:x}, v{s1}"
  if name.endswith("fmaak_f32"): return f"{name} v{d}, {a}, v{s1}, 0x{lit:x}"
  return f"{name} v{d}, {a}, v{s1}"


def _vopd(i: Inst) -> str:
  f = i.f
  x, y = i.op.name.split("::")
  return _vopd_half(x, f["vdstx"], f["src0x"], f["vsrc1x"], i.literal) + " :: " + _vopd_half(y, vopd_dsty(i), f["src0y"], f["vsrc1y"], i.literal)


def _ds(i: Inst) -> str:
  f, o = i.f, i.op
  n = o.name
  ops = []
  if o.dst != "-": ops.append(vreg(f["vdst"], o.dst))
  ops.append(vreg(f["addr"], "b32"))
  data = o.srcs[1:]
  for k, t in zip(("data0", "data1"), data): ops.append(vreg(f[k], t))
  s = f"{n} " + ", ".join(ops)
  if "2addr" in n:
    if f["offset0"]: s += f" offset0:{f['offset0']}"
    if f["offset1"]: s += f" offset1:{f['offset1']}"
  else:
    off = f["offset0"] | f["offset1"] << 8
    if off: s += f" offset:{off}"
  return s + (" gds" if f["gds"] else "")


def flat_offset(i: Inst) -> int:
  off = i.f["offset"]
  return off - (1 << 13) if off & 0x1000 and i.f["seg"] != 0 else off


def _flat(i: Inst) -> str:
  f, o = i.f, i.op
  saddr = f["saddr"] != 124 and f["saddr"] != 125
  if f["seg"] == 1: addr = "off" if not f["sve"] else vreg(f["addr"], "b32")
  else: addr = vreg(f["addr"], "b32" if saddr else "b64")
  ops = []
  if o.dst != "-": ops.append(vreg(f["vdst"], o.dst))
  ops.append(addr)
  if o.srcs: ops.append(vreg(f["data"], o.srcs[0]))
  if f["seg"] != 0: ops.append(operand(f["saddr"], "b64" if f["seg"] == 2 else "b32") if saddr else "off")
  s = f"{o.name} " + ", ".join(ops)
  if (off := flat_offset(i)): s += f" offset:{off}"
  return s + (" glc" if f["glc"] else "") + (" slc" if f["slc"] else "") + (" dlc" if f["dlc"] else "")
