"""PTX for a linear program: one `.visible .entry` per program (ISA 8.0, `.target sm_80`, `.address_size 64`), no nvcc.

The entry is `name(.param .u64 data0, ..., .param .s32 var, ...)`: buffers in DEFINE_GLOBAL index order, then
DEFINE_VARs in program order, `.s32` or `.s64` (the CUDA renderer's parameters, so NVPTXProgram launches either). Launch indices as in
the CUDA renderer: gidxD = %ctaid, lidxD = %tid, idxD = %ctaid * %ntid + %tid with an early `ret` past the size.
DEFINE_LOCAL is a `.shared` array, BARRIER is `bar.sync 0`, RANGE a counted loop, IF a predicated branch to its ENDIF.

Values live in registers, one per lane of a vector value (VECTORIZE/GEP only rename):
- bool is a predicate (`.pred`); in memory a byte (0 or 1);
- int8..int32 and their unsigned forms are 32-bit registers holding the value sign- or zero-extended ("canonical"):
  ops that can leave the range (ADD, MUL, NEG, SHL, IDIV) are re-extended from the dtype's width with `cvt`;
  int64/uint64 are 64-bit registers;
- float16 and bfloat16 are `.b16` registers of their bits; float and double are `.f32`/`.f64`.
Every op is the reference semantics (refgrad/uop/semantics.py) bit for bit:
- float ADD/MUL/RECIP/SQRT carry an explicit `.rn` (`rcp.rn`/`sqrt.rn` are correctly rounded), `fma.rn` appears only for
  MULACC (float16/bfloat16: `fma.rn.f16`/`.bf16`, one rounding of the exact a*b+c, as the reference's round-to-odd scheme);
  16-bit float ops other than MULACC widen to f32 exactly, compute there and round once back;
- MAX: NaN when either is NaN, MAX(+0, -0) = +0 (the bitwise AND of equal operands); CMPNE is `setp.neu` (true for NaN);
- IDIV/MOD are C's truncating `div`/`rem`, and the cases C leaves undefined are total as on the CPU: by 0 gives 0,
  MIN / -1 gives MIN, MIN % -1 gives 0 (with CHECKED=1, the default, the bare instruction: the executor's checked mode
  reports a division by zero, as the PYTHON device reports that undefined behaviour); shift amounts are masked;
- float -> int is `cvt.rzi`, which saturates and gives 0 for NaN (the CPU's total cast);
- casts that must not round twice (int32/int64/double -> bfloat16) go through a float rounded to odd (`cvt.rz` plus a
  sticky bit when inexact); sm_80 has `cvt` to bf16 only from f32.
Native transcendentals (EXP2/LOG2/SIN reaching the renderer, NATIVE_TRANSCENDENTALS=1) are `ex2/lg2/sin.approx.f32`
(16-bit floats through f32); double has no approximate form, so its EXP2/LOG2/SIN are the reference's decomposition
(refgrad/uop/decompositions.py, bit-exact) rendered in place; decomposed ones are ordinary ops here.
WMMA is `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`, 16-bit fragment elements packed in pairs.
Vector LOAD/STORE are `.v2`/`.v4` where the index is provably a multiple of the lane count (so the address is aligned),
else one access per lane. The instruction spellings are the tables below (one row per op and dtype family), so a test
can change one row and show the oracle catches it.
"""
from __future__ import annotations

import math
import re
import struct

from refgrad import knobs
from refgrad.dtype import DType, dtypes
from refgrad.renderer import Renderer
from refgrad.target import CUDA, IDX_BLOCK_SIZE, TENSOR_CORES, launch_geometry
from refgrad.uop.decompositions import decompose_transcendentals
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import load_parts, verify_linear

HEADER = (".version 8.0", ".target sm_80", ".address_size 64")

# dtype name -> (register class, arithmetic type, memory type)
DTYPES: dict[str, tuple[str, str, str]] = {
  "bool": ("pred", "pred", "u8"),
  "char": ("b32", "s32", "s8"), "uchar": ("b32", "u32", "u8"), "short": ("b32", "s32", "s16"), "ushort": ("b32", "u32", "u16"),
  "int": ("b32", "s32", "s32"), "uint": ("b32", "u32", "u32"), "long": ("b64", "s64", "s64"), "ulong": ("b64", "u64", "u64"),
  "half": ("b16", "f16", "b16"), "bfloat16": ("b16", "bf16", "b16"), "float": ("f32", "f32", "f32"), "double": ("f64", "f64", "f64"),
}
# DEFINE_VAR dtype -> (register class, .param type): the CUDA renderer's `int` / `long long` parameters
VAR_PARAMS: dict[DType, tuple[str, str]] = {dtypes.int32: ("b32", "s32"), dtypes.int64: ("b64", "s64")}
REG_PREFIX = {"pred": "%p", "b16": "%rs", "b32": "%r", "b64": "%rd", "f32": "%f", "f64": "%fd"}
_BITS = {"pred": 1, "b16": 16, "b32": 32, "b64": 64, "f32": 32, "f64": 64}

# integer ops on the arithmetic type {t} (s32/u32/s64/u64) and width {w}; the wrapping ones are re-extended for 8/16 bits
INT_OPS: dict[Ops, str] = {
  Ops.ADD: "add.{t}", Ops.MUL: "mul.lo.{t}", Ops.NEG: "neg.s{w}", Ops.MAX: "max.{t}", Ops.XOR: "xor.b{w}", Ops.OR: "or.b{w}",
  Ops.AND: "and.b{w}", Ops.SHL: "shl.b{w}", Ops.SHR: "shr.{t}", Ops.CMPLT: "setp.lt.{t}", Ops.CMPNE: "setp.ne.{t}",
  Ops.IDIV: "div.{t}", Ops.MOD: "rem.{t}",
}
WRAPS = frozenset({Ops.ADD, Ops.MUL, Ops.NEG, Ops.SHL, Ops.IDIV})
# bool ops on predicates (CMPLT: a < b is !a & b, see `bool_alu`)
PRED_OPS: dict[Ops, str] = {Ops.XOR: "xor.pred", Ops.OR: "or.pred", Ops.AND: "and.pred", Ops.MAX: "or.pred", Ops.CMPNE: "xor.pred"}
# float ops on f32/f64 ({t}); 16-bit floats compute these in f32 and round once back
FLOAT_OPS: dict[Ops, str] = {
  Ops.ADD: "add.rn.{t}", Ops.MUL: "mul.rn.{t}", Ops.NEG: "neg.{t}", Ops.RECIP: "rcp.rn.{t}", Ops.SQRT: "sqrt.rn.{t}",
  Ops.CMPLT: "setp.lt.{t}", Ops.CMPNE: "setp.neu.{t}", Ops.MULACC: "fma.rn.{t}",
}
# MULACC of 16-bit floats: one fused rounding in the 16-bit format
FMA16 = {"f16": "fma.rn.f16", "bf16": "fma.rn.bf16"}
# native transcendentals (only with NATIVE_TRANSCENDENTALS=1): approximate, within the ISA's stated bounds
APPROX = {Ops.EXP2: "ex2.approx.f32", Ops.LOG2: "lg2.approx.f32", Ops.SIN: "sin.approx.f32"}
# float <-> float conversions: (source type, destination type) -> instruction (bf16 goes through f32, see `cast`)
FCVT: dict[tuple[str, str], str] = {
  ("f16", "f32"): "cvt.f32.f16", ("f32", "f16"): "cvt.rn.f16.f32", ("f16", "f64"): "cvt.f64.f16", ("f64", "f16"): "cvt.rn.f16.f64",
  ("f32", "f64"): "cvt.f64.f32", ("f64", "f32"): "cvt.rn.f32.f64", ("f32", "bf16"): "cvt.rn.bf16.f32",
}
SPECIAL_REG = {"gidx": "%ctaid", "lidx": "%tid"}
BARRIER = "bar.sync 0;"   # a CTA-wide barrier: every thread of the block waits
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32"
PAIR = (0, 1)             # which fragment elements go in the low and high half of each packed 32-bit register
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_REG_TOKEN = re.compile(r"%[a-z]+[0-9]+")


# integer ops whose second operand may be an immediate (commutative: a constant first operand moves second)
_IMM_OPS = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX})


def _is_nan_lit(lit: str) -> bool:
  """Whether a 0f/0d float literal is a NaN (exponent all ones, fraction not zero)."""
  v = int(lit[2:], 16)
  if lit[1] == "d": return (v >> 52) & 0x7FF == 0x7FF and v & ((1 << 52) - 1) != 0
  return (v >> 23) & 0xFF == 0xFF and v & ((1 << 23) - 1) != 0


def _info(dt: DType) -> tuple[str, str, str]:
  try: return DTYPES[dt.scalar().name]
  except KeyError: raise ValueError(f"dtype {dt!r} has no PTX form") from None


def _f32_bits(v: float) -> int: return struct.unpack("<I", struct.pack("<f", v))[0]


class _PTXProgram:
  """State of rendering one program: registers in use, each value's lane registers, labels, the lines."""

  def __init__(self, name: str, uops: list[UOp], renderer: PTXRenderer):
    self.name, self.uops, self.ren = name, uops, renderer
    self.nregs: dict[str, int] = {c: 0 for c in REG_PREFIX}
    self.v: dict[UOp, list[str]] = {}      # lane registers of each value
    self.pre: list[str] = []               # the prologue: parameters, launch indices, constants
    self.consts: dict[str, str] = {}       # constant register -> its mov line in pre (dropped when nothing reads it)
    self.body: list[str] = []
    self.shared: list[str] = []
    self.aligned: dict[UOp, int] = {}      # idx value -> a power of two it is provably a multiple of
    self.known: dict[str, int] = {}        # registers of integer constants -> their value
    self.fknown: dict[str, str] = {}       # registers of f32/f64 constants -> their literal (0f.../0d...)
    self.uses: dict[UOp, int] = {}         # how many uops read each value
    for u in uops:
      for x in u.src: self.uses[x] = self.uses.get(x, 0) + 1

  # ---- registers -------------------------------------------------------------------------------
  def reg(self, cls: str) -> str:
    n = self.nregs[cls]
    self.nregs[cls] = n + 1
    return f"{REG_PREFIX[cls]}{n}"

  def emit(self, line: str) -> None: self.body.append(line)

  def one(self, u: UOp) -> str:
    regs = self.v[u]
    if len(regs) != 1: raise ValueError(f"{self.name}: a {u.dtype!r} value used as a scalar")
    return regs[0]

  def lane(self, u: UOp, i: int) -> str:
    regs = self.v[u]
    return regs[0] if len(regs) == 1 else regs[i]

  # ---- constants -------------------------------------------------------------------------------
  def const(self, v: bool | int | float, dt: DType) -> str:
    cls = _info(dt)[0]
    r = self.reg(cls)
    if cls == "pred": line = f"mov.pred {r}, {int(bool(v))};"
    elif dtypes.is_int(dt):
      w = _BITS[cls]
      self.known[r] = int(v)
      line = f"mov.b{w} {r}, 0x{int(v) & ((1 << w) - 1):x};"
    else:
      lit = self.float_bits(float(v), dt)
      if cls in ("f32", "f64"): self.fknown[r] = lit
      line = f"mov.b{_BITS[cls]} {r}, {lit};"
    self.pre.append(line)
    self.consts[r] = line
    return r

  def live_pre(self) -> list[str]:
    """The prologue without the constants no instruction reads (most become immediates where they are used): an emulator
    runs every mov it is given, one array per lane set."""
    const_lines = set(self.consts.values())
    read = {t for ln in [*self.body, *(x for x in self.pre if x not in const_lines)] for t in _REG_TOKEN.findall(ln)}
    return [ln for ln in self.pre if ln not in const_lines or ln.split()[1].rstrip(",") in read]

  def imm(self, r: str, t: str) -> str:
    """A source operand of arithmetic type t: an integer constant's register as an immediate (in t's range), else itself.
    Immediates need no register read per lane, and a loop's bound stays a constant for its trip count."""
    if r not in self.known or t[0] not in "subf": return r
    bits = int(t[1:])
    v = self.known[r] & ((1 << bits) - 1)
    return str(v - (1 << bits) if t[0] == "s" and v >> (bits - 1) else v)

  def fimm(self, r: str, t: str) -> str:
    """A float constant's register as its exact literal for an f32/f64 operand, else itself."""
    lit = self.fknown.get(r)
    return lit if lit is not None and lit[1] == ("d" if t == "f64" else "f") else r

  @staticmethod
  def float_bits(fv: float, dt: DType) -> str:
    if dt == dtypes.float64: return f"0d{struct.unpack('<Q', struct.pack('<d', fv))[0]:016X}"
    if dt == dtypes.float32: return f"0f{_f32_bits(fv):08X}"
    if dt == dtypes.float16: return f"0x{0x7E00 if math.isnan(fv) else struct.unpack('<H', struct.pack('<e', fv))[0]:04X}"
    return f"0x{0x7FC0 if math.isnan(fv) else _f32_bits(fv) >> 16:04X}"   # bfloat16 constants are exact

  # ---- 16-bit floats through f32 -----------------------------------------------------------------
  def widen(self, x: str, t: str) -> str:
    """A register of float type t as f32/f64 (16-bit floats: exactly, in f32)."""
    if t in ("f32", "f64"): return x
    f = self.reg("f32")
    if t == "f16": self.emit(f"cvt.f32.f16 {f}, {x};")
    else:
      r = self.reg("b32")
      self.emit(f"cvt.u32.u16 {r}, {x};")
      self.emit(f"shl.b32 {r}, {r}, 16;")
      self.emit(f"mov.b32 {f}, {r};")
    return f

  def narrow(self, f: str, t: str) -> str:
    """An f32 register rounded once to float type t (f32/f64: itself)."""
    if t in ("f32", "f64"): return f
    h = self.reg("b16")
    self.emit(f"{FCVT[('f32', t)]} {h}, {f};")
    return h

  # ---- ALU -------------------------------------------------------------------------------------
  def alu(self, op: Ops, dt: DType, sdt: DType, s: list[str]) -> str:
    """One lane of an ALU op: operands of scalar dtype sdt (WHERE: of its values), result of scalar dtype dt."""
    if op is Ops.WHERE: return self.where(sdt, s)
    if sdt == dtypes.bool: return self.bool_alu(op, s)
    if dtypes.is_int(sdt): return self.int_alu(op, sdt, s)
    return self.float_alu(op, sdt, s)

  def where(self, dt: DType, s: list[str]) -> str:
    cls = _info(dt)[0]
    d = self.reg(cls)
    if cls == "pred":   # (c & a) | (!c & b)
      x, y = self.reg("pred"), self.reg("pred")
      self.emit(f"and.pred {x}, {s[0]}, {s[1]};")
      self.emit(f"and.pred {y}, !{s[0]}, {s[2]};")
      self.emit(f"or.pred {d}, {x}, {y};")
    else: self.emit(f"selp.b{_BITS[cls]} {d}, {self.bimm(s[1], _BITS[cls])}, {self.bimm(s[2], _BITS[cls])}, {s[0]};")
    return d

  def bimm(self, r: str, w: int) -> str:
    """A constant's register as its w-bit pattern in hex (an integer, or a float constant's literal bits), else itself."""
    if r in self.known: return f"0x{self.known[r] & ((1 << w) - 1):x}"
    lit = self.fknown.get(r)
    return f"0x{int(lit[2:], 16):x}" if lit is not None and (16 if lit[1] == "d" else 8) * 4 == w else r

  def bool_alu(self, op: Ops, s: list[str]) -> str:
    d = self.reg("pred")
    if op is Ops.CMPLT: self.emit(f"and.pred {d}, !{s[0]}, {s[1]};")
    elif op in PRED_OPS: self.emit(f"{PRED_OPS[op]} {d}, {s[0]}, {s[1]};")
    else: raise ValueError(f"{self.name}: {op.name} is not defined on bool")
    return d

  def canon(self, r: str, dt: DType) -> str:
    """Re-extend a 32-bit register to dt's canonical form (8- and 16-bit ints); other dtypes as they are."""
    if dt.bits in (8, 16):
      s = "s" if not dtypes.is_unsigned(dt) else "u"
      self.emit(f"cvt.{s}32.{s}{dt.bits} {r}, {r};")
    return r

  def int_alu(self, op: Ops, dt: DType, s: list[str]) -> str:
    cls, t, _ = _info(dt)
    w = _BITS[cls]
    if op not in INT_OPS: raise ValueError(f"{self.name}: {op.name} is not defined on {dt!r}")
    ins = INT_OPS[op].format(t=t, w=w)
    if op in GroupOp.Comparison:
      p = self.reg("pred")
      self.emit(f"{ins} {p}, {s[0]}, {self.imm(s[1], t)};")
      return p
    d = self.reg(cls)
    if op in (Ops.SHL, Ops.SHR) and s[1] in self.known:   # a constant amount, masked here
      self.emit(f"{ins} {d}, {s[0]}, {self.known[s[1]] & (dt.bits - 1)};")
    elif op in (Ops.SHL, Ops.SHR):   # the amount is a u32 register, masked to the dtype's width
      a = self.reg("b32")
      self.emit(f"cvt.u32.u64 {a}, {s[1]};" if w == 64 else f"mov.b32 {a}, {s[1]};")
      self.emit(f"and.b32 {a}, {a}, {dt.bits - 1};")
      self.emit(f"{ins} {d}, {s[0]}, {a};")
    elif op in (Ops.IDIV, Ops.MOD): self.divmod(op, dt, ins, d, s)
    elif op in _IMM_OPS:
      a, b = (s[1], s[0]) if s[0] in self.known and s[1] not in self.known else (s[0], s[1])   # commutative: the constant second
      self.emit(f"{ins} {d}, {a}, {self.imm(b, t if op not in (Ops.AND, Ops.OR, Ops.XOR) else 'u' + str(w))};")
    else: self.emit(f"{ins} {d}, {', '.join(s)};")
    return self.canon(d, dt) if op in WRAPS else d

  def divmod(self, op: Ops, dt: DType, ins: str, d: str, s: list[str]) -> None:
    """d = s0 (div|rem) s1, total: by 0 gives 0; signed by -1 gives -s0 (MIN wraps) or 0, as on the CPU. In checked mode
    (CHECKED=1) it is the bare instruction instead, so the executor reports a division by zero as the PYTHON device does."""
    cls, t, _ = _info(dt)
    w = _BITS[cls]
    if self.ren.checked or self.known.get(s[1], 0) not in (0, -1): return self.emit(f"{ins} {d}, {s[0]}, {self.imm(s[1], t)};")
    z, b = self.reg("pred"), self.reg(cls)
    self.emit(f"setp.eq.{t} {z}, {s[1]}, 0;")
    safe = z
    if not dtypes.is_unsigned(dt):
      m, safe = self.reg("pred"), self.reg("pred")
      self.emit(f"setp.eq.{t} {m}, {s[1]}, -1;")
      self.emit(f"or.pred {safe}, {z}, {m};")
    self.emit(f"selp.b{w} {b}, 1, {s[1]}, {safe};")
    self.emit(f"{ins} {d}, {s[0]}, {b};")
    if not dtypes.is_unsigned(dt) and op is Ops.IDIV:
      n = self.reg(cls)
      self.emit(f"neg.s{w} {n}, {s[0]};")
      self.emit(f"selp.b{w} {d}, {n}, {d}, {m};")
    self.emit(f"selp.b{w} {d}, 0, {d}, {z};")

  def float_alu(self, op: Ops, dt: DType, s: list[str]) -> str:
    cls, t, _ = _info(dt)
    if op is Ops.MULACC and t in FMA16:
      d = self.reg(cls)
      self.emit(f"{FMA16[t]} {d}, {s[0]}, {s[1]}, {s[2]};")
      return d
    if op is Ops.NEG and cls == "b16":   # flips the sign bit, exact
      d = self.reg(cls)
      self.emit(f"xor.b16 {d}, {s[0]}, 0x8000;")
      return d
    ct = "f64" if t == "f64" else "f32"
    w = [self.widen(x, t) for x in s]
    if op in GroupOp.Comparison:
      p = self.reg("pred")
      self.emit(f"{FLOAT_OPS[op].format(t=ct)} {p}, {w[0]}, {self.fimm(w[1], ct)};")
      return p
    r = self.reg(ct)
    if op is Ops.MAX: self.fmax(ct, r, w)
    elif op in GroupOp.Transcendental:
      self.emit(f"{APPROX[op]} {r}, {w[0]};")
    elif op in FLOAT_OPS:
      if op in (Ops.ADD, Ops.MUL) and w[0] in self.fknown and w[1] not in self.fknown and not _is_nan_lit(self.fknown[w[0]]):
        w = [w[1], w[0]]   # commutative (a NaN constant keeps its place: NaN operands' order)
      srcs = [w[0], *(self.fimm(x, ct) for x in w[1:])] if op not in (Ops.NEG, Ops.RECIP, Ops.SQRT) else w
      self.emit(f"{FLOAT_OPS[op].format(t=ct)} {r}, {', '.join(srcs)};")
    else: raise ValueError(f"{self.name}: {op.name} is not defined on {dt!r}")
    return self.narrow(r, t)

  def fmax(self, t: str, d: str, w: list[str]) -> None:
    """MAX: PTX max ignores a NaN and may order the zeros either way; the reference's NaN is a + b, and equal
    operands (+0/-0 included) give their bitwise AND (+0 for the zeros, the value otherwise)."""
    b = 64 if t == "f64" else 32
    eq, nan, z, n = self.reg("pred"), self.reg("pred"), self.reg(t), self.reg(t)
    self.emit(f"max.{t} {d}, {w[0]}, {w[1]};")
    self.emit(f"setp.eq.{t} {eq}, {w[0]}, {w[1]};")
    self.emit(f"and.b{b} {z}, {w[0]}, {w[1]};")
    self.emit(f"selp.{t} {d}, {z}, {d}, {eq};")
    self.emit(f"setp.nan.{t} {nan}, {w[0]}, {w[1]};")
    self.emit(f"add.rn.{t} {n}, {w[0]}, {w[1]};")
    self.emit(f"selp.{t} {d}, {n}, {d}, {nan};")

  # ---- CAST and BITCAST ------------------------------------------------------------------------
  def cast(self, x: str, src: DType, dst: DType) -> str:
    """One lane of CAST from scalar dtype src to scalar dtype dst."""
    if src == dst: return x
    scls, st, _ = _info(src)
    dcls, dt_, _ = _info(dst)
    d = self.reg(dcls)
    if src == dtypes.bool:
      one = {"f32": "0f3F800000", "f64": "0d3FF0000000000000", "f16": "0x3C00", "bf16": "0x3F80"}.get(dt_, "1")
      self.emit(f"selp.b{_BITS[dcls]} {d}, {one}, 0, {x};")
      return d
    if dst == dtypes.bool:
      if dtypes.is_int(src): self.emit(f"setp.ne.{st} {d}, {x}, 0;")
      else:   # nonzero magnitude bits: true for NaN and every nonzero value, false for +-0
        b = _BITS[scls]
        m = self.reg(f"b{b}")
        self.emit(f"and.b{b} {m}, {x}, 0x{(1 << (b - 1)) - 1:X};")
        self.emit(f"setp.ne.b{b} {d}, {m}, 0;")
      return d
    if dtypes.is_int(src) and dtypes.is_int(dst): return self.int_cast(x, src, dst, d)
    if dtypes.is_int(src):
      if dt_ == "bf16":
        if src.bits <= 16: f = self.reg("f32"); self.emit(f"cvt.rn.f32.{st} {f}, {x};")   # exact
        else: f = self.odd_f32(x, st)
        self.emit(f"{FCVT[('f32', 'bf16')]} {d}, {f};")
      else: self.emit(f"cvt.rn.{dt_}.{st} {d}, {x};")
      return d
    # a float source: bf16 is widened to f32 first (exact)
    if st == "bf16": x, st = self.widen(x, st), "f32"
    if dtypes.is_int(dst):   # truncation toward zero, saturating, NaN -> 0
      ct = f"{dt_[0]}{dst.bits}" if dst.bits < 32 else dt_
      self.emit(f"cvt.rzi.{ct}.{st} {d}, {x};")
      return self.canon(d, dst)
    if st == dt_: return x
    if dt_ == "bf16":
      f = self.odd_f32(x, st) if st == "f64" else x if st == "f32" else self.widen(x, st)
      self.emit(f"{FCVT[('f32', 'bf16')]} {d}, {f};")
      return d
    self.emit(f"{FCVT[(st, dt_)]} {d}, {x};")
    return d

  def int_cast(self, x: str, src: DType, dst: DType, d: str) -> str:
    scls, st, _ = _info(src)
    dcls = _info(dst)[0]
    if scls == dcls == "b64": self.emit(f"mov.b64 {d}, {x};")
    elif dcls == "b64": self.emit(f"cvt.{st[0]}64.{st} {d}, {x};")    # extends by the source's signedness
    elif scls == "b64": self.emit(f"cvt.u32.u64 {d}, {x};")           # the low 32 bits
    else: self.emit(f"mov.b32 {d}, {x};")
    return self.canon(d, dst) if dcls == "b32" else d

  def odd_f32(self, x: str, st: str) -> str:
    """An int32/int64/f64 register as f32 rounded to odd (truncate, then set the last bit when inexact): rounding
    that to bfloat16 equals one rounding of the source."""
    f, back, p, r = self.reg("f32"), self.reg("f64" if st == "f64" else "b64" if st[1:] == "64" else "b32"), self.reg("pred"), self.reg("b32")
    if st == "f64":
      self.emit(f"cvt.rz.f32.f64 {f}, {x};")
      self.emit(f"cvt.f64.f32 {back}, {f};")
      self.emit(f"setp.neu.f64 {p}, {back}, {x};")   # NaN: setting the last bit keeps it a NaN
    else:
      self.emit(f"cvt.rz.f32.{st} {f}, {x};")
      self.emit(f"cvt.rzi.{st}.f32 {back}, {f};")
      self.emit(f"setp.ne.{st} {p}, {back}, {x};")
    self.emit(f"mov.b32 {r}, {f};")
    self.emit(f"@{p} or.b32 {r}, {r}, 1;")
    self.emit(f"mov.b32 {f}, {r};")
    return f

  def bitcast(self, u: UOp, src: UOp) -> list[str]:
    """BITCAST between dtypes of equal itemsize: the lanes' bits regrouped into the destination's lanes."""
    sd, dd = src.dtype.scalar(), u.dtype.scalar()
    if dtypes.bool in (sd, dd):   # bool is the byte 0 or 1 (a byte other than those as bool is undefined: here nonzero is true)
      if {sd, dd} - {dtypes.bool, dtypes.int8, dtypes.uint8}: raise ValueError(f"{self.name}: BITCAST {src.dtype!r} -> {u.dtype!r}")
      return [self.cast(x, sd, dd) for x in self.v[src]]
    sw, dw = _bits_of(sd), _bits_of(dd)
    # each source lane as a raw register of its width (8-bit lanes are not supported in groups)
    raw = [self.to_raw(x, sd) for x in self.v[src]]
    if sw == dw: return [self.from_raw(r, dd) for r in raw]
    if sw < dw and sw >= 16:
      k = dw // sw
      out = []
      for i in range(0, len(raw), k):
        r = self.reg(f"b{dw}")
        self.emit(f"mov.b{dw} {r}, {{{', '.join(raw[i:i + k])}}};")
        out.append(self.from_raw(r, dd))
      return out
    if dw < sw and dw >= 16:
      out = []
      for x in raw:
        parts = [self.reg(f"b{dw}") for _ in range(sw // dw)]
        self.emit(f"mov.b{sw} {{{', '.join(parts)}}}, {x};")
        out += [self.from_raw(p, dd) for p in parts]
      return out
    raise ValueError(f"{self.name}: BITCAST {src.dtype!r} -> {u.dtype!r} (8-bit lanes regrouped) has no PTX form here")

  def to_raw(self, x: str, dt: DType) -> str:
    """A register of dt's bits in a b16/b32/b64 register of its width (8-bit ints: the low byte in a b32)."""
    cls = _info(dt)[0]
    w = _bits_of(dt)
    if w in (8, 32, 64) or cls == "b16": return x if cls in ("b16", "b32", "b64") else self.mov_bits(x, w)
    r = self.reg("b16")   # 16-bit ints: the low half of their 32-bit register
    self.emit(f"cvt.u16.u32 {r}, {x};")
    return r

  def mov_bits(self, x: str, w: int) -> str:
    r = self.reg(f"b{w}")
    self.emit(f"mov.b{w} {r}, {x};")
    return r

  def from_raw(self, r: str, dt: DType) -> str:
    cls, t, _ = _info(dt)
    w = _bits_of(dt)
    if cls == "b16": return r
    if cls in ("f32", "f64"): return self.mov_bits_to(r, cls, w)
    d = self.reg(cls)
    if w == 16: self.emit(f"cvt.{t[0]}32.{t[0]}16 {d}, {r};")
    else:
      self.emit(f"mov.b{w if w > 8 else 32} {d}, {r};")
      self.canon(d, dt)
    return d

  def mov_bits_to(self, r: str, cls: str, w: int) -> str:
    d = self.reg(cls)
    self.emit(f"mov.b{w} {d}, {r};")
    return d

  # ---- memory ----------------------------------------------------------------------------------
  def multiple(self, u: UOp) -> int:
    """A power of two that the int value u is provably a multiple of (1 when nothing is known)."""
    if u in self.aligned: return self.aligned[u]
    m = 1
    if u.op is Ops.CONST and isinstance(u.arg, int): m = (u.arg & -u.arg) if u.arg else 1 << 30
    elif u.op is Ops.MUL: m = self.multiple(u.src[0]) * self.multiple(u.src[1])
    elif u.op is Ops.ADD: m = min(self.multiple(u.src[0]), self.multiple(u.src[1]))
    elif u.op is Ops.SHL and u.src[1].op is Ops.CONST and isinstance(u.src[1].arg, int) and 0 <= u.src[1].arg < 31:
      m = self.multiple(u.src[0]) << u.src[1].arg
    self.aligned[u] = m = min(m, 1 << 30)
    return m

  def address(self, buf: UOp, idx: UOp) -> tuple[str, str]:
    """(state space, a 64-bit register of the element's address)."""
    base: DType = buf.dtype.base   # type: ignore[attr-defined]
    size = base.itemsize
    icls, it, _ = _info(idx.dtype)
    a = self.reg("b64")
    if icls == "b64": self.emit(f"mul.lo.s64 {a}, {self.one(idx)}, {size};")
    else: self.emit(f"mul.wide.{it} {a}, {self.one(idx)}, {size};")
    self.emit(f"add.s64 {a}, {self.one(buf)}, {a};")
    return ("shared" if buf.op is Ops.DEFINE_LOCAL else "global"), a

  def vector_ok(self, buf: UOp, idx: UOp, n: int, dt: DType) -> bool:
    """Whether n lanes go in one .v2/.v4 access: at most 16 bytes, and an aligned address (the buffers are)."""
    base: DType = buf.dtype.base   # type: ignore[attr-defined]
    return n in (2, 4) and base.count == 1 and dt.itemsize * n <= 16 and dt != dtypes.bool and self.multiple(idx) % n == 0

  def load(self, u: UOp) -> None:
    buf, idx, gate, alt = load_parts(u)
    sd, n = u.dtype.scalar(), u.dtype.count
    cls, _, mt = _info(sd)
    space, a = self.address(buf, idx)
    g = f"@{self.one(gate)} " if gate is not None else ""
    if cls == "pred":   # a byte
      out = []
      for i in range(n):
        r, p = self.reg("b32"), self.reg("pred")
        self.emit(f"mov.b32 {r}, 0;")
        self.emit(f"{g}ld.{space}.u8 {r}, [{a}+{i}];")
        self.emit(f"setp.ne.b32 {p}, {r}, 0;")
        if alt is not None: self.emit(f"@!{self.one(gate)} mov.pred {p}, {self.lane(alt, i)};")   # type: ignore[arg-type]
        out.append(p)
      self.v[u] = out
      return
    regs = [self.reg(cls) for _ in range(n)]
    if alt is not None:
      for i, r in enumerate(regs): self.emit(f"mov.b{_BITS[cls]} {r}, {self.lane(alt, i)};")
    if self.vector_ok(buf, idx, n, sd): self.emit(f"{g}ld.{space}.v{n}.{mt} {{{', '.join(regs)}}}, [{a}];")
    else:
      for i, r in enumerate(regs): self.emit(f"{g}ld.{space}.{mt} {r}, [{a}+{i * sd.itemsize}];")
    self.v[u] = regs

  def store(self, u: UOp) -> None:
    buf, idx, val = u.src[:3]
    sd, n = val.dtype.scalar(), val.dtype.count
    cls, _, mt = _info(sd)
    space, a = self.address(buf, idx)
    g = f"@{self.one(u.src[3])} " if len(u.src) == 4 else ""
    regs = self.v[val]
    if cls == "pred":
      for i in range(n):
        r = self.reg("b32")
        self.emit(f"selp.b32 {r}, 1, 0, {self.lane(val, i)};")
        self.emit(f"{g}st.{space}.u8 [{a}+{i}], {r};")
    elif n > 1 and self.vector_ok(buf, idx, n, sd): self.emit(f"{g}st.{space}.v{n}.{mt} [{a}], {{{', '.join(regs)}}};")
    else:
      for i in range(n): self.emit(f"{g}st.{space}.{mt} [{a}+{i * sd.itemsize}], {self.lane(val, i)};")

  # ---- WMMA ------------------------------------------------------------------------------------
  def wmma(self, i: int, u: UOp) -> None:
    tc = TENSOR_CORES.get(u.arg)
    if tc is None or tc not in self.ren.target.tensor_cores:
      raise ValueError(f"uop {i} (WMMA {u.arg}): not a tensor core of the {self.ren.target.name} target")
    if tc.dims != (16, 8, 16) or tc.dtype_in not in (dtypes.float16, dtypes.bfloat16) or tc.dtype_out != dtypes.float32:
      raise ValueError(f"uop {i} (WMMA {tc.name}): only m16n8k16 f16/bf16 -> f32 has a PTX instruction here")
    ty = "f16" if tc.dtype_in == dtypes.float16 else "bf16"
    def packed(x: UOp) -> list[str]:
      out = []
      for j in range(0, len(self.v[x]), 2):
        r = self.reg("b32")
        self.emit(f"mov.b32 {r}, {{{self.v[x][j + PAIR[0]]}, {self.v[x][j + PAIR[1]]}}};")   # the first element in the low half
        out.append(r)
      return out
    a, b = packed(u.src[0]), packed(u.src[1])
    c = self.v[u.src[2]]
    d = [self.reg("f32") for _ in range(tc.c.elems)]
    def group(rs: list[str]) -> str: return "{" + ", ".join(rs) + "}"
    self.emit(f"{MMA.format(ty=ty)} {group(d)}, {group(a)}, {group(b)}, {group(c)};")
    self.v[u] = d

  # ---- the program -----------------------------------------------------------------------------
  def render(self) -> str:
    if not _IDENT.fullmatch(self.name): raise ValueError(f"kernel name {self.name!r} is not a PTX identifier")
    verify_linear(self.uops)
    _, _, specials = launch_geometry(self.uops, self.ren.target, self.ren.idx_block_size)
    params = self.params()
    for name, (_, size) in specials.items(): self.special(name, size)
    blocks: dict[UOp, int] = {}
    for i, u in enumerate(self.uops): self.stmt(i, u, blocks)
    decls = [f".reg .{c} {REG_PREFIX[c]}<{n}>;" for c, n in self.nregs.items() if n]
    lines = [*HEADER, "", f".visible .entry {self.name}(", ",\n".join(f"  {p}" for p in params), ")", "{",
             *(f"  {ln}" for ln in [*decls, *self.shared, *self.live_pre(), *self.body, "ret;"]), "}"]
    return "\n".join(lines) + "\n"

  def params(self) -> list[str]:
    out = []
    glb = sorted((u for u in self.uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    if len({u.arg for u in glb}) != len(glb): raise ValueError(f"{self.name}: two DEFINE_GLOBALs share a parameter index")
    for u in glb:
      p, r = self.reg("b64"), self.reg("b64")
      out.append(f".param .u64 data{u.arg}")
      self.pre += [f"ld.param.u64 {p}, [data{u.arg}];", f"cvta.to.global.u64 {r}, {p};"]
      self.v[u] = [r]
    names: set[str] = set()
    for u in self.uops:
      if u.op is not Ops.DEFINE_VAR: continue
      name = u.arg[0]
      if not _IDENT.fullmatch(name) or re.fullmatch(r"data\d+", name) or name in names:
        raise ValueError(f"{self.name}: variable name {name!r} is not a PTX identifier or clashes with another parameter")
      if u.dtype not in VAR_PARAMS: raise ValueError(f"{self.name}: variable {name} is {u.dtype!r}; kernel variables are int32 or int64")
      names.add(name)
      cls, pt = VAR_PARAMS[u.dtype]
      r = self.reg(cls)
      out.append(f".param .{pt} {name}")
      self.pre.append(f"ld.param.{pt} {r}, [{name}];")
      self.v[u] = [r]
    for i, u in enumerate(self.uops):
      if u.op is not Ops.DEFINE_LOCAL: continue
      base: DType = u.dtype.base   # type: ignore[attr-defined]
      r = self.reg("b64")
      self.shared.append(f".shared .align 16 .b8 local{i}[{max(1, u.dtype.size * base.itemsize)}];")   # type: ignore[attr-defined]
      self.pre.append(f"mov.u64 {r}, local{i};")
      self.v[u] = [r]
    return out

  def special(self, name: str, size: int) -> None:
    kind, d = name[:-1], "xyz"[int(name[-1])]
    r = self.reg("b32")
    if kind in SPECIAL_REG: self.pre.append(f"mov.u32 {r}, {SPECIAL_REG[kind]}.{d};")
    else:   # a launch may cover more lanes than the size (whole blocks): those lanes do nothing
      c, n, t, p = self.reg("b32"), self.reg("b32"), self.reg("b32"), self.reg("pred")
      self.pre += [f"mov.u32 {c}, %ctaid.{d};", f"mov.u32 {n}, %ntid.{d};", f"mov.u32 {t}, %tid.{d};", f"mad.lo.s32 {r}, {c}, {n}, {t};",
                   f"setp.ge.u32 {p}, {r}, {size};", f"@{p} ret;"]
    for u in self.uops:
      if u.op is Ops.SPECIAL and u.arg[0] == name: self.v[u] = [r]

  def stmt(self, i: int, u: UOp, blocks: dict[UOp, int]) -> None:
    op, dt, src = u.op, u.dtype, u.src
    if op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL, Ops.SPECIAL, Ops.NOOP, Ops.SINK): return
    if op is Ops.CONST: self.v[u] = [self.const(u.arg, dt)]
    elif op is Ops.BARRIER: self.emit(BARRIER)
    elif op is Ops.RANGE:
      cls, t, _ = _info(dt)
      r, p = self.reg(cls), self.reg("pred")
      blocks[u] = i
      self.v[u] = [r]
      self.emit(f"mov.b{_BITS[cls]} {r}, 0;")   # the test at the bottom, as nvcc does: 3 instructions per iteration
      self.emit(f"setp.ge.{t} {p}, {r}, {self.imm(self.one(src[0]), t)};")
      self.emit(f"@{p} bra L{i}_end;")
      self.body.append(f"L{i}_top:")
    elif op is Ops.ENDRANGE:
      j, (r,), rng = blocks[src[0]], self.v[src[0]], src[0]
      t, p = _info(rng.dtype)[1], self.reg("pred")
      self.emit(f"add.{t} {r}, {r}, 1;")
      self.emit(f"setp.lt.{t} {p}, {r}, {self.imm(self.one(rng.src[0]), t)};")
      self.emit(f"@{p} bra L{j}_top;")
      self.body.append(f"L{j}_end:")
    elif op is Ops.IF:
      blocks[u] = i
      self.emit(f"@!{self.one(src[0])} bra L{i}_endif;")
    elif op is Ops.ENDIF: self.body.append(f"L{blocks[src[0]]}_endif:")
    elif op is Ops.DEFINE_ACC:
      cls = _info(dt)[0]
      regs = [self.reg(cls) for _ in range(dt.count)]
      for j, r in enumerate(regs): self.emit(f"mov.{'pred' if cls == 'pred' else f'b{_BITS[cls]}'} {r}, {self.lane(src[0], j)};")
      self.v[u] = regs
    elif op is Ops.ASSIGN:
      cls = _info(dt)[0]
      acc, val = self.v[src[0]], self.v[src[1]]
      last = self.body[-1] if self.body else ""
      fresh = src[1].op in GroupOp.ALU and src[1].op not in GroupOp.Transcendental   # ALU results are new registers, never aliases
      if len(acc) == 1 and fresh and self.uses.get(src[1]) == 1 and last.split(" ", 1)[-1].startswith(f"{val[0]},") and not last.startswith(("@", "mov.b32 {")):
        # the value's last instruction writes the accumulator itself (earlier ones, and its operands, still name the value)
        self.body[-1] = last.replace(f"{val[0]},", f"{acc[0]},", 1)
      else:
        for j, r in enumerate(acc): self.emit(f"mov.{'pred' if cls == 'pred' else f'b{_BITS[cls]}'} {r}, {self.lane(src[1], j)};")
      self.v[u] = acc
    elif op is Ops.LOAD: self.load(u)
    elif op is Ops.STORE: self.store(u)
    elif op is Ops.WMMA: self.wmma(i, u)
    elif op is Ops.VECTORIZE: self.v[u] = [self.one(s) for s in src]
    elif op is Ops.GEP: self.v[u] = [self.v[src[0]][u.arg[0]]]
    elif op is Ops.CAST: self.v[u] = [self.cast(self.lane(src[0], j), src[0].dtype.scalar(), dt.scalar()) for j in range(dt.count)]
    elif op is Ops.BITCAST: self.v[u] = self.bitcast(u, src[0])
    elif op in GroupOp.Transcendental and dt.scalar() == dtypes.float64:
      # double has no approximate instruction: the reference's bit-exact decomposition into basic ops is rendered instead
      d = decompose_transcendentals(u)
      for x in d.toposort:
        if x not in self.v: self.stmt(i, x, blocks)
      self.v[u] = self.v[d]
    elif op in GroupOp.ALU:
      sdt = (src[1] if op is Ops.WHERE else src[0]).dtype.scalar()
      if op in GroupOp.Transcendental and not dtypes.is_float(sdt): raise ValueError(f"uop {i}: {op.name} needs a float operand")
      self.v[u] = [self.alu(op, dt.scalar(), sdt, [self.lane(s, j) for s in src]) for j in range(dt.count)]
    else: raise ValueError(f"uop {i} ({op.name}) cannot be rendered to PTX")


def _bits_of(dt: DType) -> int: return 8 * dt.itemsize


class PTXRenderer(Renderer):
  """Linear program -> PTX text for sm_80 (see the module docstring); launched by the NV device with NV_CODE=ptx."""
  device, target = "NV", CUDA
  idx_block_size: int = IDX_BLOCK_SIZE

  def __init__(self, native_transcendentals: bool | None = None, checked: bool | None = None):
    if native_transcendentals is not None: self.native_transcendentals = native_transcendentals
    self._checked = checked

  @property
  def checked(self) -> bool:
    """Whether IDIV/MOD are the bare instructions (the executor's checked mode reports a division by zero) rather than
    total; the CHECKED knob unless given."""
    return bool(knobs.get("CHECKED")) if self._checked is None else self._checked

  def launch_dims(self, uops: list[UOp]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    grid, block, _ = launch_geometry(list(uops), self.target, self.idx_block_size)
    return grid, block

  def render(self, name: str, uops: list[UOp]) -> str:
    return _PTXProgram(name, list(uops), self).render()

