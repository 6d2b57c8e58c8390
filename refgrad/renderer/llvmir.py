"""LLVM IR for a linear program: one function for the host CPU (the LLVM device, JIT through llvmlite), or one kernel
for AMD gfx1100 (`amdgcn-amd-amdhsa`, wave32) or NVPTX, each compiled by llvmlite (refgrad/runtime/ops_llvm.py,
refgrad/runtime/amd_elf.py).

Every op is rendered so the result is bit for bit the reference semantics (refgrad/uop/semantics.py):
- no fast-math flags on any instruction and no `llvm.fmuladd`: a MUL then an ADD round twice (LLVM's default
  FPOpFusion::Standard fuses only fmuladd); MULACC is `llvm.fma` (float32/float64) or, for float16/bfloat16, the exact
  product in double, a round-to-odd add and one final rounding (`rg_add_odd`), as the C renderer does;
- integers wrap (no nsw/nuw); the undefined cases are total as on the CPU backend (refgrad/renderer/cstyle.py): IDIV/MOD
  by 0 give 0, MIN / -1 gives MIN, MIN % -1 gives 0, shift amounts are masked to the width, float->int casts saturate
  and NaN gives 0 (`llvm.fpto[su]i.sat`);
- float16 is LLVM `half`, computed in float and rounded once (GPUs: `fpext`/`fptrunc`; the host: the integer helpers
  `rg_h2f`/`rg_f2h`, so no compiler-rt libcall is needed where the CPU lacks F16C); bfloat16 is its bits
  (`i16`) and goes through `rg_f2bf` / `rg_bf2f`; conversions that must not round twice go through a round-to-odd
  float (`rg_d2f_odd`) or double (`rg_i64_odd`, `rg_u64_odd`);
- MAX is NaN when either operand is NaN and +0 for (+0, -0) in either order (`rg_max_*`);
- bool is `i1` as a value and `i8` in memory; vectors are their lanes (one SSA value each), loaded and stored as LLVM
  vectors.

Accumulators and loop counters are `alloca`s (promoted to registers by LLVM's mem2reg), so the IR keeps the program's
order and scoping without phi bookkeeping. A read of an accumulator happens where the reading uop is, as in C.
Targets (`TARGETS`): "host" runs SPECIALs as loops around the body, a program with BARRIERs or WMMAs in work-item
phases (refgrad/renderer/llvmir_phases.py, the C renderer's plan); "amdgcn" and "nvptx" read work-item and workgroup
ids from intrinsics, keep DEFINE_LOCALs in addrspace(3) globals and render BARRIER as a workgroup barrier (amdgcn:
between workgroup release/acquire fences); amdgcn renders WMMA as `llvm.amdgcn.wmma.*` (gfx11), nvptx refuses it.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from refgrad import knobs
from refgrad.dtype import DType, dtypes
from refgrad.renderer import Renderer
from refgrad.renderer.llvmir_helpers import HELPER_INTRINSICS, HELPER_SUBST, HELPERS, INTRINSICS
from refgrad.renderer.llvmir_phases import plan, wmma_helper
from refgrad.target import AMD, CPU, CUDA, IDX_BLOCK_SIZE, TENSOR_CORES, Target, launch_geometry
from refgrad.uop.decompositions import decompose_transcendentals
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import load_parts, verify_linear

# value type of each scalar dtype (bfloat16: its bits); in memory bool is a byte
VTYPE = {"bool": "i1", "char": "i8", "uchar": "i8", "short": "i16", "ushort": "i16", "int": "i32", "uint": "i32", "long": "i64",
         "ulong": "i64", "half": "half", "bfloat16": "i16", "float": "float", "double": "double"}
FTYPE = {"half": "float", "bfloat16": "float", "float": "float", "double": "double"}   # the type a float op computes in


@dataclass(frozen=True)
class LLVMTarget:
  """What differs between the modules: triple, address spaces, kernel spelling and launch indices."""
  name: str
  triple: str
  global_as: int                 # address space of buffers
  local_as: int                  # address space of DEFINE_LOCAL (host: allocas)
  kernel: str                    # `define <kernel> void @name(...)`
  private_as: int                # address space of allocas (accumulators, loop counters)
  ids: dict[str, str]            # "gidx"/"lidx" -> intrinsic name pattern with {d} for x/y/z ("" on the host: loops)
  barrier: tuple[str, ...]       # lines of a BARRIER
  hw: Target                     # limits and launch geometry
  attrs: str = ""                # function attributes
  soft_half: bool = False        # float16 <-> float by integer helpers (no libcalls: the host may lack F16C)
  recip_f64: bool = False        # float RECIP divided in double, double RECIP by rg_recip_f64 (see float_alu)
  half_arith: bool = False       # float16 ADD/MUL as half instructions (see float_alu)
  # float -> float16 by the integer helper, never `fptrunc`: gfx11 LLVM selects v_fma_mix*_f16 x, y, +0 for
  # fptrunc(fmul float x, y), which turns a -0 product into +0
  soft_f2h: bool = False
  # EXP2/LOG2/SIN that reach the renderer (native ones: conformance's "native" group) rendered as refgrad's decomposition
  # (its native form: SIN reduced exactly past SIN_RANGE, decompositions._sin_wide_f32/_f64): gfx11 has no f64
  # exp2/log2/sin (LLVM has no libcall for them: a fatal error, not an exception) and v_sin_f32 is 1 ULP only after an
  # approximate argument reduction
  decompose: bool = False

_AMD_NO = ("amdgpu-no-implicitarg-ptr", "amdgpu-no-dispatch-ptr", "amdgpu-no-queue-ptr", "amdgpu-no-dispatch-id", "amdgpu-no-lds-kernel-id",
           "amdgpu-no-flat-scratch-init", "amdgpu-no-heap-ptr", "amdgpu-no-hostcall-ptr", "amdgpu-no-multigrid-sync-arg",
           "amdgpu-no-default-queue", "amdgpu-no-completion-action", "amdgpu-no-cluster-id-x", "amdgpu-no-cluster-id-y", "amdgpu-no-cluster-id-z")
TARGETS = {
  "host": LLVMTarget("host", "", 0, 0, "", 0, {}, (), CPU, "nounwind", soft_half=True),
  # hidden kernel arguments and the user SGPRs the runtime does not fill are switched off (docs/hw/amd_code_object.md)
  "amdgcn": LLVMTarget("amdgcn", "amdgcn-amd-amdhsa", 1, 3, "amdgpu_kernel", 5,
                       {"gidx": "llvm.amdgcn.workgroup.id.{d}", "lidx": "llvm.amdgcn.workitem.id.{d}"},
                       ('fence syncscope("workgroup") release', "call void @llvm.amdgcn.s.barrier()", 'fence syncscope("workgroup") acquire'),
                       AMD, " ".join(["nounwind", *(f'"{a}"' for a in _AMD_NO), '"uniform-work-group-size"="true"']), recip_f64=True,
                       half_arith=True, soft_f2h=True, decompose=True),
  "nvptx": LLVMTarget("nvptx", "nvptx64-nvidia-cuda", 1, 3, "ptx_kernel", 0,
                      {"gidx": "llvm.nvvm.read.ptx.sreg.ctaid.{d}", "lidx": "llvm.nvvm.read.ptx.sreg.tid.{d}"},
                      ("call void @llvm.nvvm.barrier0()",), CUDA, "nounwind"),
}
_DECLS = {"llvm.amdgcn.s.barrier": "declare void @llvm.amdgcn.s.barrier()", "llvm.nvvm.barrier0": "declare void @llvm.nvvm.barrier0()"}



def _wrap(v: int, bits: int) -> int:
  """v as the signed two's-complement integer of `bits` bits (how LLVM IR spells every integer constant)."""
  v &= (1 << bits) - 1
  return v - (1 << bits) if v >> (bits - 1) else v


# what a kernel with llvm.debugtrap does not use: without these, LLVM asks the dispatch for the dispatch and queue
# pointers, the dispatch id and more (for a trap handler's fallback), which the AMD runtime does not provide
NO_TRAP_INPUTS = ("dispatch-ptr", "queue-ptr", "dispatch-id", "implicitarg-ptr", "heap-ptr", "hostcall-ptr", "multigrid-sync-arg",
                  "completion-action", "default-queue")


class _Program:
  """State of rendering one program: the function's lines, SSA names, helpers and intrinsics in use."""
  def __init__(self, name: str, uops: list[UOp], tgt: LLVMTarget, idx_block_size: int, trap_div: bool = False):
    self.name, self.uops, self.tgt, self.idx_block_size = name, uops, tgt, idx_block_size
    self.trap_div, self.trapped = trap_div, False   # guard IDIV/MOD divisors with a trap (amdgcn, checked mode); any rendered
    self.lines: list[str] = []       # body of the function
    self.allocas: list[str] = []     # entry-block allocas (accumulators, loop counters, host locals)
    self.globals: list[str] = []     # module-level definitions (GPU local memory)
    self.helpers: set[str] = set()
    self.decls: dict[str, str] = {}
    self.r: dict[UOp, list[str]] = {}   # lanes of each value
    self.acc: dict[UOp, list[str]] = {}  # the alloca of each lane of an accumulator
    self.ptr: dict[UOp, str] = {}       # pointer of each buffer / local
    self.n = self.nlab = 0
    self.block = "entry"
    self.closers: list[str] = []        # the lines that close each open host launch loop
    self.aas = f", addrspace({tgt.private_as})" if tgt.private_as else ""   # how allocas are spelled, and pointers to them
    self.ap = f"ptr addrspace({tgt.private_as})" if tgt.private_as else "ptr"
    # host programs with barriers or WMMAs (work-item phases)
    self.keep: dict[UOp, str] = {}      # kept value -> its array [work-items x [lanes x T]]
    self.lid: str = "0"                 # flat work-item id inside the open phase
    self.lsize = 1
    self.lidx: dict[str, int] = {}      # lidxD -> size
    self.in_phase = False
    self.phase_start = 0                # where the open phase's loops start in self.lines (uniform values go before it)
    self.extra: dict[str, str] = {}     # generated functions (WMMA helpers) by name

  # ---- emission ------------------------------------------------------------------------------------
  def tmp(self) -> str:
    self.n += 1
    return f"%t{self.n}"
  def fresh(self) -> int:
    """A new number for labels and allocas."""
    self.nlab += 1
    return self.nlab
  def emit(self, text: str) -> str:
    name = self.tmp()
    self.lines.append(f"{name} = {text}")
    return name
  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name
  def intrinsic(self, name: str, decl: str) -> str:
    self.decls.setdefault(name, decl)
    return f"@{name}"
  def use(self, helper: str) -> str:
    stack = [helper]
    while stack:
      h = stack.pop()
      if h not in self.helpers:
        self.helpers.add(h)
        stack.extend(HELPERS[h][0])
        for i in HELPER_INTRINSICS.get(h, ()): self.decls.setdefault(i, INTRINSICS[i])
    return f"@{helper}"
  def call(self, fn: str, ret: str, *args: tuple[str, str]) -> str: return self.emit(f"call {ret} {fn}({', '.join(f'{t} {v}' for t, v in args)})")

  # ---- types and constants ---------------------------------------------------------------------------
  @staticmethod
  def vt(dt: DType) -> str: return VTYPE[dt.scalar().name]
  @staticmethod
  def mt(dt: DType) -> str: return "i8" if dt.scalar() == dtypes.bool else VTYPE[dt.scalar().name]

  def const(self, v: bool | int | float, dt: DType) -> str:
    if dt == dtypes.bool: return "true" if v else "false"
    if dtypes.is_int(dt): return str(_wrap(int(v), 8 * dt.itemsize))
    fv = float(v)
    if dt == dtypes.bfloat16:   # exactly representable: the top half of the float32 bits (NaN: the canonical quiet one)
      return str(_wrap(0x7FC0 if math.isnan(fv) else struct.unpack("<I", struct.pack("<f", fv))[0] >> 16, 16))
    if dt == dtypes.float16: return f"0xH{struct.unpack('<H', struct.pack('<e', fv))[0]:04X}"
    if math.isnan(fv): return "0x7FF8000000000000"
    if dt == dtypes.float32: fv = struct.unpack("<f", struct.pack("<f", fv))[0]
    return f"0x{struct.unpack('<Q', struct.pack('<d', fv))[0]:016X}"

  def lanes(self, u: UOp) -> list[str]:
    """The lanes of value u here; an accumulator (or an ASSIGN to one) is read now, as C reads the variable."""
    a = u
    while a.op is Ops.ASSIGN: a = a.src[0]
    if a.op is Ops.DEFINE_ACC or a in self.keep:
      t = self.vt(a.dtype)
      return [self.emit(f"load {t}, {self.ap} {p}") for p in self.acc_ptrs(a)]
    return self.r[u]

  def acc_ptrs(self, a: UOp) -> list[str]:
    """Pointers to the lanes of an accumulator or kept value (a kept one: this work-item's element of its array)."""
    if a not in self.keep: return self.acc[a]
    at = f"[{self.lsize} x [{a.dtype.count} x {self.vt(a.dtype)}]]"
    return [self.emit(f"getelementptr {at}, ptr {self.keep[a]}, i32 0, i32 {self.lid}, i32 {k}") for k in range(a.dtype.count)]

  def lane(self, u: UOp, i: int) -> str:
    ls = self.lanes(u)
    return ls[i] if len(ls) > 1 else ls[0]

  # ---- float widening ---------------------------------------------------------------------------------
  def widen(self, x: str, dt: DType) -> str:
    if dt == dtypes.float16 and self.tgt.soft_half: return self.call(self.use("rg_h2f"), "float", ("i16", self.emit(f"bitcast half {x} to i16")))
    if dt == dtypes.float16: return self.emit(f"fpext half {x} to float")
    if dt == dtypes.bfloat16: return self.call(self.use("rg_bf2f"), "float", ("i16", x))
    return x
  def narrow(self, x: str, dt: DType) -> str:
    """A float result rounded once to a 16-bit float dtype."""
    if dt == dtypes.float16 and (self.tgt.soft_half or self.tgt.soft_f2h):
      return self.emit(f"bitcast i16 {self.call(self.use('rg_f2h'), 'i16', ('float', x))} to half")
    if dt == dtypes.float16: return self.emit(f"fptrunc float {x} to half")
    if dt == dtypes.bfloat16: return self.call(self.use("rg_f2bf"), "i16", ("float", x))
    return x
  def d2f_odd(self, x: str) -> str: return self.call(self.use("rg_d2f_odd"), "float", ("double", x))

  # ---- scalar ops -----------------------------------------------------------------------------------
  def alu(self, op: Ops, sdt: DType, s: list[str], i: int) -> str:
    """One lane of an ALU op on operands of scalar dtype `sdt` (WHERE: the dtype of its values)."""
    t = self.vt(sdt)
    if op is Ops.WHERE: return self.emit(f"select i1 {s[0]}, {t} {s[1]}, {t} {s[2]}")
    if sdt == dtypes.bool:
      if op is Ops.CMPLT: return self.emit(f"icmp ult i1 {s[0]}, {s[1]}")
      if op is Ops.CMPNE: return self.emit(f"icmp ne i1 {s[0]}, {s[1]}")
      ops = {Ops.MAX: "or", Ops.XOR: "xor", Ops.OR: "or", Ops.AND: "and"}
      if op in ops: return self.emit(f"{ops[op]} i1 {s[0]}, {s[1]}")
    elif dtypes.is_int(sdt): return self.int_alu(op, sdt, s)
    elif dtypes.is_float(sdt): return self.float_alu(op, sdt, s)
    raise ValueError(f"{self.name}: uop {i}: {op.name} is not defined on {sdt!r}")

  def int_alu(self, op: Ops, dt: DType, s: list[str]) -> str:
    t, signed, bits = self.vt(dt), not dtypes.is_unsigned(dt), 8 * dt.itemsize
    simple = {Ops.ADD: "add", Ops.MUL: "mul", Ops.XOR: "xor", Ops.OR: "or", Ops.AND: "and"}
    if op in simple: return self.emit(f"{simple[op]} {t} {s[0]}, {s[1]}")
    if op is Ops.NEG: return self.emit(f"sub {t} 0, {s[0]}")
    if op is Ops.CMPLT: return self.emit(f"icmp {'slt' if signed else 'ult'} {t} {s[0]}, {s[1]}")
    if op is Ops.CMPNE: return self.emit(f"icmp ne {t} {s[0]}, {s[1]}")
    if op is Ops.MAX:
      c = self.emit(f"icmp {'sgt' if signed else 'ugt'} {t} {s[0]}, {s[1]}")
      return self.emit(f"select i1 {c}, {t} {s[0]}, {t} {s[1]}")
    if op in (Ops.SHL, Ops.SHR):   # no shift amount outside [0, bits): masked, as on the CPU
      amt = self.emit(f"and {t} {s[1]}, {bits - 1}")
      return self.emit(f"{'shl' if op is Ops.SHL else 'ashr' if signed else 'lshr'} {t} {s[0]}, {amt}")
    if op in (Ops.IDIV, Ops.MOD):  # total: by 0 gives 0; signed: / -1 is a wrapping NEG, % -1 is 0
      zero = self.emit(f"icmp eq {t} {s[1]}, 0")
      if self.trap_div:   # checked mode: a divisor of 0 traps (s_trap 3), so the mock reports the undefined behaviour
        k = self.fresh()
        trap = self.intrinsic("llvm.debugtrap", "declare void @llvm.debugtrap()")
        self.lines.append(f"br i1 {zero}, label %divz{k}, label %divok{k}")
        self.label(f"divz{k}")
        self.lines += [f"call void {trap}()", f"br label %divok{k}"]
        self.label(f"divok{k}")
        self.trapped = True
      bad = zero
      if signed:
        m1 = self.emit(f"icmp eq {t} {s[1]}, -1")
        bad = self.emit(f"or i1 {zero}, {m1}")
      d = self.emit(f"select i1 {bad}, {t} 1, {t} {s[1]}")
      q = self.emit(f"{'s' if signed else 'u'}{'div' if op is Ops.IDIV else 'rem'} {t} {s[0]}, {d}")
      if signed:   # x / 1 == x and x % 1 == 0: what a divisor of -1 gives, up to the sign of the quotient
        neg = self.emit(f"sub {t} 0, {q}")
        q = self.emit(f"select i1 {m1}, {t} {neg}, {t} {q}")
      return self.emit(f"select i1 {zero}, {t} 0, {t} {q}")
    raise ValueError(f"{self.name}: {op.name} is not defined on {dt!r}")

  def float_alu(self, op: Ops, dt: DType, s: list[str]) -> str:
    ft = FTYPE[dt.name]
    if op is Ops.MULACC:
      if dt in (dtypes.float32, dtypes.float64):
        f = self.intrinsic(f"llvm.fma.{'f32' if ft == 'float' else 'f64'}", f"declare {ft} @llvm.fma.{'f32' if ft == 'float' else 'f64'}({ft}, {ft}, {ft})")
        return self.call(f, ft, (ft, s[0]), (ft, s[1]), (ft, s[2]))
      # 16-bit floats: the product is exact in double, the sum rounded to odd, then one rounding to the dtype
      a, b, c = (self.emit(f"fpext float {self.widen(x, dt)} to double") for x in s)
      p = self.emit(f"fmul double {a}, {b}")
      return self.narrow(self.d2f_odd(self.call(self.use("rg_add_odd"), "double", ("double", p), ("double", c))), dt)
    if op is Ops.NEG and dt == dtypes.bfloat16: return self.emit(f"xor i16 {s[0]}, -32768")
    if op is Ops.NEG and dt == dtypes.float16 and self.tgt.soft_half:
      bits = self.emit(f"bitcast half {s[0]} to i16")
      return self.emit(f"bitcast i16 {self.emit(f'xor i16 {bits}, -32768')} to half")
    if op is Ops.NEG: return self.emit(f"fneg {self.vt(dt)} {s[0]}")   # flips the sign bit, exact
    if op in (Ops.ADD, Ops.MUL) and dt == dtypes.float16 and self.tgt.half_arith:
      # the same bits as in float rounded once (24 >= 2*11 + 2), and LLVM cannot select gfx11's v_fma_mixlo_f16 x, y, +0 for
      # fptrunc(fmul(fpext x, y)): that gives +0 where the product is -0
      return self.emit(f"{'fadd' if op is Ops.ADD else 'fmul'} half {s[0]}, {s[1]}")
    w = [self.widen(x, dt) for x in s]
    if op is Ops.CMPLT: return self.emit(f"fcmp olt {ft} {w[0]}, {w[1]}")
    if op is Ops.CMPNE: return self.emit(f"fcmp une {ft} {w[0]}, {w[1]}")
    if op is Ops.ADD: e = self.emit(f"fadd {ft} {w[0]}, {w[1]}")
    elif op is Ops.MUL: e = self.emit(f"fmul {ft} {w[0]}, {w[1]}")
    elif op is Ops.RECIP and ft == "float" and self.tgt.recip_f64:
      # gfx11's f32 division rescales operands near the range ends (v_div_scale/v_div_fmas); in double, float operands never
      # reach that range, and one rounding of the double quotient to float is exact (53 >= 2*24 + 2). The exact *2 / 2
      # keeps LLVM from shrinking fptrunc(fdiv(fpext x)) back into a float division.
      d = self.emit(f"fmul double {self.emit(f'fpext float {w[0]} to double')}, 2.0")
      e = self.emit(f"fptrunc double {self.emit(f'fdiv double 2.0, {d}')} to float")
    elif op is Ops.RECIP and ft == "double" and self.tgt.recip_f64: e = self.call(self.use("rg_recip_f64"), "double", ("double", w[0]))
    elif op is Ops.RECIP: e = self.emit(f"fdiv {ft} {self.const(1.0, dtypes.float64)}, {w[0]}")
    elif op is Ops.MAX: e = self.call(self.use(f"rg_max_{ft}"), ft, (ft, w[0]), (ft, w[1]))
    elif op in (Ops.SQRT, *GroupOp.Transcendental):
      # SQRT is correctly rounded; native EXP2/LOG2/SIN (libm, ocml, libdevice) are checked within a ULP bound
      nm = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin"}[op]
      suf = "f32" if ft == "float" else "f64"
      e = self.call(self.intrinsic(f"llvm.{nm}.{suf}", f"declare {ft} @llvm.{nm}.{suf}({ft})"), ft, (ft, w[0]))
    else: raise ValueError(f"{self.name}: {op.name} is not defined on {dt!r}")
    return self.narrow(e, dt)

  def cast(self, x: str, src: DType, dst: DType) -> str:
    """One lane of CAST from scalar dtype src to scalar dtype dst."""
    if src == dst: return x
    st, t = self.vt(src), self.vt(dst)
    if dst == dtypes.bool:
      if src == dtypes.bfloat16: return self.emit(f"icmp ne i16 {self.emit(f'and i16 {x}, 32767')}, 0")
      if src == dtypes.float16:   # as bits: a half compare would be a libcall on a host without F16C
        bits = self.emit(f"bitcast half {x} to i16")
        return self.emit(f"icmp ne i16 {self.emit(f'and i16 {bits}, 32767')}, 0")
      if dtypes.is_float(src): return self.emit(f"fcmp une {st} {x}, {self.const(0.0, src)}")
      return self.emit(f"icmp ne {st} {x}, 0")
    if src == dtypes.bool:
      if dst == dtypes.bfloat16: return self.emit(f"select i1 {x}, i16 16256, i16 0")
      if dst == dtypes.float16: return self.emit(f"select i1 {x}, half 0xH3C00, half 0xH0000")
      return self.emit(f"uitofp i1 {x} to {t}" if dtypes.is_float(dst) else f"zext i1 {x} to {t}")
    if dtypes.is_int(src):
      sg = "s" if not dtypes.is_unsigned(src) else "u"
      if dtypes.is_int(dst):
        if dst.itemsize == src.itemsize: return x
        if dst.itemsize < src.itemsize: return self.emit(f"trunc {st} {x} to {t}")
        return self.emit(f"{'zext' if sg == 'u' else 'sext'} {st} {x} to {t}")
      if dst == dtypes.bfloat16:   # must not round twice: ints wider than float's 24 bits go through round-to-odd
        if src.itemsize <= 2: return self.narrow(self.emit(f"{sg}itofp {st} {x} to float"), dst)
        d = self.emit(f"{sg}itofp {st} {x} to double") if src.itemsize == 4 else \
          self.call(self.use("rg_u64_odd" if sg == "u" else "rg_i64_odd"), "double", ("i64", x))
        return self.narrow(self.d2f_odd(d), dst)
      # ints that are not exact in float are beyond float16's range either way: through float is one rounding
      if dst == dtypes.float16: return self.narrow(self.emit(f"{sg}itofp {st} {x} to float"), dst)
      return self.emit(f"{sg}itofp {st} {x} to {t}")
    # src is a float: 16-bit floats widen to float (exact) first
    w, wdt = self.widen(x, src), (dtypes.float32 if src in (dtypes.float16, dtypes.bfloat16) else src)
    wt = self.vt(wdt)
    if dtypes.is_int(dst):   # truncation where it fits, else saturation; NaN gives 0
      sg = "u" if dtypes.is_unsigned(dst) else "s"
      f = f"llvm.fpto{sg}i.sat.{t}.{'f32' if wt == 'float' else 'f64'}"
      return self.call(self.intrinsic(f, f"declare {t} @{f}({wt})"), t, (wt, w))
    if dst == wdt: return w
    if dst == dtypes.float64: return self.emit(f"fpext {wt} {w} to double")
    if dst == dtypes.float32: return self.emit(f"fptrunc double {w} to float")
    # to a 16-bit float: from double through round-to-odd float, then one rounding
    return self.narrow(self.d2f_odd(w) if wdt == dtypes.float64 else w, dst)

  def bitcast(self, u: UOp) -> list[str]:
    src = u.src[0]
    vals = self.lanes(src)
    sdt, ddt = src.dtype, u.dtype
    sv, dv = self.vec_type(sdt, memory=True), self.vec_type(ddt, memory=True)
    x = self.pack([self.to_mem(v, sdt) for v in vals], sdt)
    y = x if sv == dv else self.emit(f"bitcast {sv} {x} to {dv}")
    return [self.from_mem(v, ddt) for v in self.unpack(y, ddt)]

  # ---- vectors and memory form ---------------------------------------------------------------------------
  def vec_type(self, dt: DType, memory: bool = False) -> str:
    t = self.mt(dt) if memory else self.vt(dt)
    return t if dt.count == 1 else f"<{dt.count} x {t}>"
  def pack(self, lanes: list[str], dt: DType) -> str:
    """An LLVM vector (memory form) of the lanes."""
    if dt.count == 1: return lanes[0]
    vt, t, v = self.vec_type(dt, memory=True), self.mt(dt), "poison"
    for i, x in enumerate(lanes): v = self.emit(f"insertelement {vt} {v}, {t} {x}, i32 {i}")
    return v
  def unpack(self, v: str, dt: DType) -> list[str]:
    if dt.count == 1: return [v]
    vt = self.vec_type(dt, memory=True)
    return [self.emit(f"extractelement {vt} {v}, i32 {i}") for i in range(dt.count)]
  def to_mem(self, x: str, dt: DType) -> str: return self.emit(f"zext i1 {x} to i8") if dt.scalar() == dtypes.bool else x
  def from_mem(self, x: str, dt: DType) -> str: return self.emit(f"icmp ne i8 {x}, 0") if dt.scalar() == dtypes.bool else x

  def address(self, buf: UOp, idx: UOp) -> tuple[str, str]:
    """(pointer type, pointer) of element idx of buffer buf (in scalars of its base dtype)."""
    base: DType = buf.dtype.base  # type: ignore[attr-defined]
    aspace = self.tgt.local_as if buf.op is Ops.DEFINE_LOCAL and self.tgt.name != "host" else self.tgt.global_as
    pt = f"ptr addrspace({aspace})" if aspace else "ptr"
    i = self.lane(idx, 0)
    it = self.vt(idx.dtype)
    if it != "i64": i = self.emit(f"sext {it} {i} to i64")
    if base.count > 1: i = self.emit(f"mul i64 {i}, {base.count}")
    return pt, self.emit(f"getelementptr {self.mt(base)}, {pt} {self.ptr[buf]}, i64 {i}")

  def load(self, u: UOp) -> list[str]:
    buf, idx, g, alt = load_parts(u)
    vt, align = self.vec_type(u.dtype, memory=True), u.dtype.scalar().itemsize
    def read() -> list[str]:
      pt, p = self.address(buf, idx)
      return [self.from_mem(x, u.dtype) for x in self.unpack(self.emit(f"load {vt}, {pt} {p}, align {align}"), u.dtype)]
    if g is None: return read()
    # the memory is read only where the gate is true
    alts, gate, here, k = self.lanes(alt), self.lane(g, 0), self.block, self.fresh()
    self.lines.append(f"br i1 {gate}, label %ld{k}, label %ldj{k}")
    self.label(f"ld{k}")
    got = read()
    end = self.block
    self.lines.append(f"br label %ldj{k}")
    self.label(f"ldj{k}")
    t = self.vt(u.dtype)
    return [self.emit(f"phi {t} [ {a}, %{end} ], [ {b}, %{here} ]") for a, b in zip(got, alts if len(alts) > 1 else alts * len(got))]

  def store(self, u: UOp) -> None:
    buf, idx, val = u.src[:3]
    k = self.fresh()
    if len(u.src) == 4:
      self.lines.append(f"br i1 {self.lane(u.src[3], 0)}, label %st{k}, label %stj{k}")
      self.label(f"st{k}")
    v = self.pack([self.to_mem(x, val.dtype) for x in self.lanes(val)], val.dtype)
    pt, p = self.address(buf, idx)
    self.lines.append(f"store {self.vec_type(val.dtype, memory=True)} {v}, {pt} {p}, align {val.dtype.scalar().itemsize}")
    if len(u.src) == 4:
      self.lines.append(f"br label %stj{k}")
      self.label(f"stj{k}")

  # ---- launch ----------------------------------------------------------------------------------------
  def launch(self, phased: bool = False) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Define the SPECIALs: loops around the body on the host, intrinsics on a GPU. Returns the (grid, block) of a GPU."""
    sp = [u for u in self.uops if u.op is Ops.SPECIAL]
    if self.tgt.name == "host":
      sizes: dict[str, int] = {}
      for u in sp:
        if sizes.setdefault(u.arg[0], u.arg[1]) != u.arg[1]: raise ValueError(f"{self.name}: SPECIAL {u.arg[0]} has two sizes")
      vals = {}
      self.lidx = {n: sizes[n] for n in (f"lidx{d}" for d in "210") if n in sizes}
      for n in [f"{k}{d}" for d in "210" for k in ("gidx", "idx")] + ([] if phased else list(self.lidx)):
        if n in sizes: vals[n] = self.open_loop(str(sizes[n]), "i32")
      for u in sp:
        if u.arg[0] in vals: self.r[u] = [vals[u.arg[0]]]
      return (1, 1, 1), (1, 1, 1)
    grid, block, _ = launch_geometry(self.uops, self.tgt.hw, self.idx_block_size)
    vals = {}
    for u in sp:
      nm, size = u.arg
      if nm in vals: self.r[u] = [vals[nm]]; continue
      kind, d = nm[:-1], "xyz"[int(nm[-1])]
      def read(kind: str, d: str = d) -> str:
        f = self.tgt.ids[kind].format(d=d)
        return self.call(self.intrinsic(f, f"declare i32 @{f}()"), "i32")
      if kind in ("gidx", "lidx"): v = read(kind)
      else:   # idxD: a launch may cover more lanes than the size (whole blocks): those lanes do nothing
        g = self.emit(f"mul i32 {read('gidx')}, {block[int(nm[-1])]}")
        v = self.emit(f"add i32 {g}, {read('lidx')}")
        ok = self.emit(f"icmp ult i32 {v}, {size}")
        self.lines.append(f"br i1 {ok}, label %in_{nm}, label %exit")
        self.label(f"in_{nm}")
      vals[nm] = v
      self.r[u] = [v]
    return grid, block

  def open_loop(self, end: str, t: str) -> str:
    """A counting loop 0 .. end-1 (signed compare, as C's `for`); returns the counter's value inside it."""
    k = self.fresh()
    self.allocas.append(f"%c{k} = alloca {t}{self.aas}")
    self.lines.append(f"store {t} 0, {self.ap} %c{k}")
    self.lines.append(f"br label %loop{k}")
    self.label(f"loop{k}")
    v = self.emit(f"load {t}, {self.ap} %c{k}")
    c = self.emit(f"icmp slt {t} {v}, {end}")
    self.lines.append(f"br i1 {c}, label %body{k}, label %done{k}")
    self.label(f"body{k}")
    self.closers.append(f"{k}:{t}:{v}")
    return v

  def close_loop(self) -> None:
    k, t, v = self.closers.pop().split(":")
    nx = self.emit(f"add {t} {v}, 1")
    self.lines.append(f"store {t} {nx}, {self.ap} %c{k}")
    self.lines.append(f"br label %loop{k}")
    self.label(f"done{k}")

  # ---- the program -------------------------------------------------------------------------------------
  def render(self) -> str:
    if not self.name or not all(c.isalnum() or c == "_" for c in self.name) or self.name[0].isdigit():
      raise ValueError(f"kernel name {self.name!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*)")
    verify_linear(self.uops)
    host = self.tgt.name == "host"
    phased = host and any(u.op in (Ops.BARRIER, Ops.WMMA) for u in self.uops)
    params = self.params()
    _, block = self.launch(phased)
    ends: dict[UOp, str] = {}
    if phased: self.phased(ends)
    else:
      for i, u in enumerate(self.uops): self.stmt(i, u, ends)
    while self.closers: self.close_loop()
    if not host and any(u.op is Ops.SPECIAL and u.arg[0].startswith("idx") for u in self.uops):
      self.lines.append("br label %exit")
      self.label("exit")
    self.lines.append("ret void")
    attrs = self.tgt.attrs
    if self.tgt.name == "amdgcn": attrs += f' "amdgpu-flat-work-group-size"="1,{max(1, math.prod(block))}"'
    if self.trapped: attrs += " " + " ".join(f'"amdgpu-no-{a}"' for a in NO_TRAP_INPUTS)
    head = f"define {self.tgt.kernel + ' ' if self.tgt.kernel else ''}void @{self.name}({', '.join(params)}) #0 {{"
    out = [f'target triple = "{self.tgt.triple}"'] if self.tgt.triple else []
    out += self.globals + sorted(self.decls.values()) + list(self.extra.values())
    for h in HELPERS:
      if h in self.helpers:
        text = HELPERS[h][1]
        for k, v in HELPER_SUBST.get(h, {}).items(): text = text.replace(f"${k}", v)
        out.append(text)
    body = ["entry:", *self.allocas, *self.lines]
    out += [head, *(ln if ln.endswith(":") else "  " + ln for ln in body), "}", f"attributes #0 = {{ {attrs} }}"]
    return "\n".join(out) + "\n"

  def params(self) -> list[str]:
    glb = sorted((u for u in self.uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    idxs = [u.arg for u in glb]
    if len(set(idxs)) != len(idxs): raise ValueError(f"{self.name}: two DEFINE_GLOBALs share a parameter index ({idxs})")
    pt = f"ptr addrspace({self.tgt.global_as})" if self.tgt.global_as else "ptr"
    out = []
    for u in glb:
      self.ptr[u] = f"%data{u.arg}"
      out.append(f"{pt} %data{u.arg}")
    names: set[str] = set()
    for u in self.uops:
      if u.op is not Ops.DEFINE_VAR: continue
      if u.arg[0] in names: raise ValueError(f"{self.name}: two DEFINE_VARs are called {u.arg[0]!r}")
      names.add(u.arg[0])
      self.r[u] = [f"%var{len(names) - 1}"]
      out.append(f"{self.vt(u.dtype)} %var{len(names) - 1}")
    return out

  def stmt(self, i: int, u: UOp, ends: dict[UOp, str]) -> None:
    op, dt, src = u.op, u.dtype, u.src
    if op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL): return
    if op is Ops.DEFINE_LOCAL:
      base: DType = dt.base  # type: ignore[attr-defined]
      n = dt.size * base.count  # type: ignore[attr-defined]
      if self.tgt.name == "host":
        self.allocas.append(f"%local{i} = alloca [{n} x {self.mt(base)}], align 16")
        self.ptr[u] = f"%local{i}"
      else:
        self.globals.append(f"@local{i} = internal addrspace({self.tgt.local_as}) global [{n} x {self.mt(base)}] poison, align 16")
        self.ptr[u] = f"@local{i}"
      return
    if op is Ops.CONST: self.r[u] = [self.const(u.arg, dt)]; return
    if op is Ops.BARRIER:
      for d in self.tgt.barrier:
        if d.startswith("call void @"): self.decls.setdefault(d[11:d.index("(")], _DECLS[d[11:d.index("(")]])
      self.lines.extend(self.tgt.barrier)
      return
    if op is Ops.RANGE:
      self.r[u] = [self.open_loop(self.lane(src[0], 0), self.vt(dt))]
      return
    if op is Ops.ENDRANGE: self.close_loop(); return
    if op is Ops.IF:
      self.lines.append(f"br i1 {self.lane(src[0], 0)}, label %if{i}, label %endif{i}")
      self.label(f"if{i}")
      ends[u] = f"endif{i}"
      return
    if op is Ops.ENDIF:
      self.lines.append(f"br label %{ends[src[0]]}")
      self.label(ends[src[0]])
      return
    if op is Ops.DEFINE_ACC:
      t = self.vt(dt)
      init = self.expand(src[0], dt.count)
      if u not in self.keep:
        self.acc[u] = [f"%acc{i}_{k}" for k in range(dt.count)]
        self.allocas.extend(f"{p} = alloca {t}{self.aas}" for p in self.acc[u])
      for x, p in zip(init, self.acc_ptrs(u)): self.lines.append(f"store {t} {x}, {self.ap} {p}")
      return
    if op is Ops.ASSIGN:
      a = src[0]
      while a.op is Ops.ASSIGN: a = a.src[0]
      vals, t = self.lanes(src[1]), self.vt(a.dtype)
      for k, p in enumerate(self.acc_ptrs(a)): self.lines.append(f"store {t} {vals[k] if len(vals) > 1 else vals[0]}, {self.ap} {p}")
      return
    if op is Ops.LOAD: self.r[u] = self.load(u); return
    if op is Ops.STORE: self.store(u); return
    if op is Ops.WMMA: self.r[u] = self.wmma_gpu(i, u); return
    if op is Ops.VECTORIZE: self.r[u] = [self.lane(s, 0) for s in src]; return
    if op is Ops.GEP: self.r[u] = [self.lanes(src[0])[a] for a in u.arg]; return
    if op is Ops.BITCAST: self.r[u] = self.bitcast(u); return
    if op is Ops.CAST:
      self.r[u] = [self.cast(x, src[0].dtype.scalar(), dt.scalar()) for x in self.expand(src[0], dt.count)]
      return
    if op in GroupOp.ALU:
      sdt = (src[1] if op is Ops.WHERE else src[0]).dtype.scalar()
      if op in GroupOp.Transcendental and not dtypes.is_float(sdt): raise ValueError(f"uop {i}: {op.name} needs a float operand")
      if op in GroupOp.Transcendental and self.tgt.decompose:   # the decomposition's new uops, in order, then its result
        done = set(self.uops)
        sink = decompose_transcendentals(UOp(Ops.SINK, dtypes.void, (u,)), native=True)
        for v in sink.toposort:
          if v not in done and v.op is not Ops.SINK: self.stmt(i, v, ends)
        self.r[u] = self.r[sink.src[0]]
        return
      cols = [self.expand(s, dt.count) for s in src]
      self.r[u] = [self.alu(op, sdt, [c[k] for c in cols], i) for k in range(dt.count)]
      return
    raise ValueError(f"{self.name}: uop {i} ({op.name}) cannot be rendered to LLVM IR")

  # ---- host programs with barriers or WMMAs: work-item phases (refgrad/renderer/llvmir_phases.py) ----------------
  def phased(self, ends: dict[UOp, str]) -> None:
    hoisted, uniform, kept = plan(self.name, self.uops, {n[-1] for n in self.lidx})
    self.lsize = 1
    for v in self.lidx.values(): self.lsize *= v
    pos = {u: i for i, u in enumerate(self.uops)}
    for u in sorted(kept, key=lambda u: pos[u]):
      self.keep[u] = f"%keep{pos[u]}"
      self.allocas.append(f"%keep{pos[u]} = alloca [{self.lsize} x [{u.dtype.count} x {self.vt(u.dtype)}]], align 16")
    silent = (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.CONST)
    for i, u in enumerate(self.uops):
      if u.op is Ops.BARRIER: self.close_phase(); continue
      if u.op is Ops.WMMA: self.close_phase(); self.wmma(u); continue
      if u in hoisted or (u.op in (Ops.ENDRANGE, Ops.ENDIF) and u.src[0] in hoisted): self.close_phase()
      elif u in uniform and self.in_phase:   # computed once in the workgroup scope, before the open phase's loops
        body, self.lines = self.lines, []
        self.stmt(i, u, ends)
        body[self.phase_start:self.phase_start] = self.lines
        self.phase_start += len(self.lines)
        self.lines = body
        continue
      elif u not in uniform and u.op not in silent: self.open_phase()
      self.stmt(i, u, ends)
      if u in self.keep and u.op is not Ops.DEFINE_ACC:
        t = self.vt(u.dtype)
        for x, p in zip(self.r[u], self.acc_ptrs(u)): self.lines.append(f"store {t} {x}, ptr {p}")
    self.close_phase()

  def open_phase(self) -> None:
    if self.in_phase: return
    self.in_phase, self.phase_start = True, len(self.lines)
    vals = {n: self.open_loop(str(size), "i32") for n, size in self.lidx.items()}
    for u in self.uops:
      if u.op is Ops.SPECIAL and u.arg[0] in vals: self.r[u] = [vals[u.arg[0]]]
    lid = "0"
    for d in "210":
      if (n := f"lidx{d}") in vals:
        lid = vals[n] if lid == "0" else self.emit(f"add i32 {vals[n]}, {self.emit(f'mul i32 {lid}, {self.lidx[n]}')}")
    self.lid = lid

  def close_phase(self) -> None:
    if not self.in_phase: return
    for _ in self.lidx: self.close_loop()
    self.in_phase, self.lid = False, "0"

  def wmma(self, u: UOp) -> None:
    """A WMMA between two phases: every warp's D from the fragment arrays into the WMMA's own array."""
    name, text = wmma_helper(TENSOR_CORES[u.arg])
    if "@rg_h2f" in text: self.use("rg_h2f")
    self.extra.setdefault(name, text)
    frags = []
    for s in u.src:
      while s.op is Ops.ASSIGN: s = s.src[0]
      frags.append(f"ptr {self.keep[s]}")
    self.lines.append(f"call void @{name}(i32 {self.lsize}, {', '.join(frags)}, ptr {self.keep[u]})")

  def wmma_gpu(self, i: int, u: UOp) -> list[str]:
    """A gfx11 WMMA: one `llvm.amdgcn.wmma.f32.16x16x16.{f16,bf16}` per wave. refgrad's AMD lane layouts (refgrad/target.py)
    are the instruction's (A: row lane%16, k = element; B: column lane%16; C/D: row 2e + lane/16, column lane%16), so the
    fragments go in as they are (launch_geometry has checked the tensor core and whole waves)."""
    tc = TENSOR_CORES[u.arg]
    if self.tgt.name != "amdgcn" or tc.dims != (16, 16, 16) or tc.threads != 32 or tc.dtype_out != dtypes.float32:
      raise ValueError(f"{self.name}: uop {i} (WMMA {u.arg}) cannot be rendered to LLVM IR for {self.tgt.name}")
    kind, t = ("f16", "half") if tc.dtype_in == dtypes.float16 else ("bf16", "i16")
    f = f"llvm.amdgcn.wmma.f32.16x16x16.{kind}.v8f32.v16{'f16' if kind == 'f16' else 'i16'}"
    self.intrinsic(f, f"declare <8 x float> @{f}(<16 x {t}>, <16 x {t}>, <8 x float>)")
    a, b, c = (self.pack(self.lanes(s), s.dtype) for s in u.src)
    d = self.emit(f"call <8 x float> @{f}(<16 x {t}> {a}, <16 x {t}> {b}, <8 x float> {c})")
    return self.unpack(d, u.dtype)

  def expand(self, s: UOp, n: int) -> list[str]:
    ls = self.lanes(s)
    return ls if len(ls) == n else ls * n


class LLVMRenderer(Renderer):
  """Linear program -> LLVM IR text for one of `TARGETS` (see the module docstring)."""
  def __init__(self, target: str = "host", native_transcendentals: bool | None = None, idx_block_size: int = IDX_BLOCK_SIZE):
    if target not in TARGETS: raise ValueError(f"unknown LLVM target {target!r}: choose one of {', '.join(TARGETS)}")
    self.tgt, self.idx_block_size = TARGETS[target], idx_block_size
    self.target = self.tgt.hw
    self.device = {"host": "LLVM", "amdgcn": "AMD", "nvptx": "NV"}[target]
    if native_transcendentals is not None: self.native_transcendentals = native_transcendentals

  @property
  def checked(self) -> bool:
    """amdgcn: whether IDIV/MOD trap on a divisor of 0 (the CHECKED knob): the mock AMD GPU then reports the division by
    zero, as the PYTHON device reports that undefined behaviour; else they are total, as on the CPU."""
    return self.tgt.name == "amdgcn" and bool(knobs.get("CHECKED"))

  def render(self, name: str, uops: list[UOp]) -> str:
    return _Program(name, list(uops), self.tgt, self.idx_block_size, self.checked).render()

  def launch_dims(self, uops: list[UOp]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    grid, block, _ = launch_geometry(list(uops), self.target, self.idx_block_size)
    return grid, block


__all__ = ["TARGETS", "LLVMRenderer", "LLVMTarget"]
