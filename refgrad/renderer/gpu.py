"""CUDA C and HIP C source for a linear program: one `extern "C" __global__` kernel per program.

The kernel is `extern "C" __global__ void __launch_bounds__(N) name(T0* data0, ..., Tv var, ...)`:
buffers in DEFINE_GLOBAL index order, then DEFINE_VARs in program order (no `__restrict__`: buffers
may alias). Launch indices: gidxD -> blockIdx, lidxD -> threadIdx, idxD -> blockIdx*blockDim+threadIdx
(D = 0, 1, 2 -> x, y, z) with a guard for launches that cover more than the size; `launch_dims` says
the grid and block the renderer assumed. DEFINE_LOCAL is a `__shared__` array, BARRIER is
`__syncthreads()`. Every op gives the reference semantics (refgrad/uop/semantics.py) bit for bit:

- integer ADD/MUL/NEG/SHL are computed in an unsigned type and converted back (wrap-around without
  signed overflow), SHR/IDIV/MOD/compares are C's own operators, exactly as the C renderer does;
- floats never contract a*b+c into an fma: CUDA spells every float32/float64 ADD/MUL/RECIP/SQRT with
  the round-to-nearest intrinsics (`__fadd_rn`, `__dmul_rn`, `__frcp_rn`, `__dsqrt_rn`, ...), which
  nvcc never fuses whatever `--fmad` says; HIP uses plain operators under
  `#pragma clang fp contract(off)` (HIP's own `_rn` functions were approximate or contractible in some
  ROCm versions); MULACC is `fmaf`/`fma`, and for float16/bfloat16 the C renderer's scheme (exact
  product in double, round-to-odd add, one final rounding);
- float16 is stored as `__half` (CUDA) or `_Float16` (HIP) and only converted: ops compute in float
  and round once; bfloat16 is stored as its bits (`unsigned short`) with small helpers;
- casts that must not round twice (double/int32/int64 -> bfloat16, double -> float16) go through a
  round-to-odd float or double, as in the C renderer; MAX follows the NaN / +-0 rules with a helper;
- vectors are structs of an array; ALU ops, CAST and BITCAST work lane by lane; vector LOAD/STORE
  copy the struct with memcpy (no alignment is assumed).
Native transcendentals (EXP2/LOG2/SIN reaching the renderer) are `exp2f/log2f/sinf` (double: `exp2`,
...), never the `__expf`-style fast intrinsics. Float results assume the default, IEEE-conforming
compiler modes: CUDA without `--use_fast_math`/`-ftz=true`; HIP with `-ffp-contract=off`,
denormals kept and `-fhip-fp32-correctly-rounded-divide-sqrt` (the default).

Each target's limits are data on its renderer (`GPULimits`); a program beyond them is refused with a
ValueError naming the offending uop.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from string import Template

from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.renderer import Renderer
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import verify_linear


@dataclass(frozen=True)
class GPULimits:
  """Facts about one GPU target that a program must fit."""
  max_threads_per_block: int              # work-items in one workgroup
  max_block_dims: tuple[int, int, int]    # work-items per workgroup, per dimension
  max_grid_dims: tuple[int, int, int]     # workgroups per launch, per dimension
  shared_memory_per_block: int            # bytes of statically declared local memory per workgroup
  warp_size: int                          # lanes that run in lockstep (warp / wavefront)
  max_vector_bytes: int                   # widest native global load/store; wider vectors are still rendered (as several)

# CUDA: compute capability 5.0-10.x; 48 KiB is the static __shared__ limit (more needs dynamic shared memory)
CUDA_LIMITS = GPULimits(1024, (1024, 1024, 64), (2 ** 31 - 1, 65535, 65535), 48 * 1024, 32, 16)
# AMD (HIP): 1024 work-items per workgroup, 64 KiB LDS per workgroup; wave64 on GCN/CDNA, wave32 on RDNA
HIP_LIMITS = GPULimits(1024, (1024, 1024, 1024), (2 ** 31 - 1, 65535, 65535), 64 * 1024, 64, 16)

_DIM = "xyz"

# C++ types of scalar dtypes; float16 differs per dialect, bfloat16 values are their bits
_CTYPE = {"bool": "bool", "char": "signed char", "uchar": "unsigned char", "short": "short", "ushort": "unsigned short",
          "int": "int", "uint": "unsigned int", "long": "long long", "ulong": "unsigned long long", "half": "$half",
          "bfloat16": "unsigned short", "float": "float", "double": "double"}

# helpers: name -> (dependencies, code). $fn/$half/$h2f/$f2h/$memcpy are filled in per dialect; RG_DADD/RG_DSUB/
# RG_DMUL (from "rg_dops") are double ops that must round once each and never fuse
_HELPERS: dict[str, tuple[tuple[str, ...], str]] = {
  "rg_dops": ((), "#define RG_DADD(a, b) $dadd\n#define RG_DSUB(a, b) $dsub\n#define RG_DMUL(a, b) $dmul"),
  "rg_bitcast": ((), """template <typename T, typename F> $fn T rg_bitcast(F f) { T t; $memcpy(&t, &f, sizeof(T)); return t; }"""),
  "rg_bf2f": ((), """$fn float rg_bf2f(unsigned short b) { return __uint_as_float((unsigned int)b << 16); }"""),
  "rg_f2bf": ((), """/* float -> bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN with its sign */
$fn unsigned short rg_f2bf(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}"""),
  "rg_d2f_odd": ((), """/* double -> float rounded to odd: rounding that again to <= 22 bits equals one rounding of d */
$fn float rg_d2f_odd(double d) {
  float r = (float)d;
  if ((double)r != d && d == d) {
    unsigned int u = __float_as_uint(r);
    if (!(u & 1u)) { u += fabs((double)r) < fabs(d) ? 1u : 0xffffffffu; r = __uint_as_float(u); }
  }
  return r;
}"""),
  "rg_d2bf": (("rg_f2bf", "rg_d2f_odd"), """$fn unsigned short rg_d2bf(double d) { return rg_f2bf(rg_d2f_odd(d)); }"""),
  "rg_d2h": (("rg_d2f_odd",), """$fn $half rg_d2h(double d) { return $f2h(rg_d2f_odd(d)); }"""),
  "rg_add_odd": (("rg_dops",), """/* a + b rounded to odd: the TwoSum error says whether the sum was exact and which side the exact value is on */
$fn double rg_add_odd(double a, double b) {
  double s = RG_DADD(a, b), bb = RG_DSUB(s, a), e = RG_DADD(RG_DSUB(a, RG_DSUB(s, bb)), RG_DSUB(b, bb));
  unsigned long long u = (unsigned long long)__double_as_longlong(s);
  if (e != 0 && ((u >> 52) & 0x7ffull) != 0x7ffull && !(u & 1ull)) {
    u += (e > 0) == (s > 0) ? 1ull : ~0ull; s = __longlong_as_double((long long)u);
  }
  return s;
}"""),
  "rg_i64_odd": (("rg_add_odd",), """/* int64 -> double rounded to odd: both halves are exact doubles */
$fn double rg_i64_odd(long long x) { return rg_add_odd((double)(long long)((unsigned long long)x & 0xffffffff00000000ull), (double)(x & 0xffffffffll)); }"""),
  "rg_u64_odd": (("rg_add_odd",), """$fn double rg_u64_odd(unsigned long long x) { return rg_add_odd((double)(x & 0xffffffff00000000ull), (double)(x & 0xffffffffull)); }"""),
  "rg_fma_h": (("rg_add_odd", "rg_d2h", "rg_dops"), """/* fused multiply-add of float16: the product is exact in double, the sum rounded to odd, then one rounding */
$fn $half rg_fma_h($half a, $half b, $half c) { return rg_d2h(rg_add_odd(RG_DMUL((double)$h2f(a), (double)$h2f(b)), (double)$h2f(c))); }"""),
  "rg_fma_bf": (("rg_add_odd", "rg_d2bf", "rg_bf2f", "rg_dops"), """$fn unsigned short rg_fma_bf(unsigned short a, unsigned short b, unsigned short c) {
  return rg_d2bf(rg_add_odd(RG_DMUL((double)rg_bf2f(a), (double)rg_bf2f(b)), (double)rg_bf2f(c)));
}"""),
  "rg_maxf": ((), """/* MAX: NaN if either is NaN, MAX(+0,-0) = MAX(-0,+0) = +0, so the result does not depend on operand order */
$fn float rg_maxf(float a, float b) { if (a != a || b != b) return a + b; if (a == b) return (__float_as_uint(a) >> 31) ? b : a; return a > b ? a : b; }"""),
  "rg_maxd": ((), """$fn double rg_maxd(double a, double b) {
  if (a != a || b != b) return a + b; if (a == b) return (__double_as_longlong(a) < 0) ? b : a; return a > b ? a : b;
}"""),
}

_KEYWORDS = frozenset("""alignas alignof and asm auto bool break case catch char char16_t char32_t class const constexpr const_cast continue
  decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline int long mutable
  namespace new noexcept not nullptr operator or private protected public register reinterpret_cast return short signed sizeof static
  static_assert static_cast struct switch template this thread_local throw true try typedef typeid typename union unsigned using virtual
  void volatile wchar_t while xor _Float16 __half""".split())
_GENERATED = re.compile(r"^(alu|ld|acc|ridx|cast|vec|gep|local|data|gidx|lidx|idx)[0-9]+$|^rg_|^RG_|^__")
# names CUDA/HIP already declare: builtin vector types (float4, uint3, dim3, ...), launch variables and device functions;
# a kernel or variable called one of these would clash with or shadow them
_BUILTIN_TYPE = re.compile(r"^(u?char|u?short|u?int|u?long|u?longlong|float|double|half|bfloat16)[1-4]?$|^dim3$|^warpSize$")
_LIBRARY = frozenset("""sqrt sqrtf fma fmaf fabs fabsf exp exp2 exp2f expf log log2 log2f logf sin sinf cos cosf tan tanf pow powf min max abs
  fmin fminf fmax fmaxf floor floorf ceil ceilf trunc truncf round roundf rint rintf isnan isinf isfinite signbit memcpy memset malloc free
  printf assert blockIdx threadIdx blockDim gridDim half nv_bfloat16 hip_bfloat16""".split())


def _ident_ok(name: object) -> bool:
  return isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None and name not in _KEYWORDS \
    and not _GENERATED.match(name) and not _BUILTIN_TYPE.match(name) and name not in _LIBRARY


class _GPUProgram:
  """State of rendering one program for one dialect (subclasses): names of values, helpers, vector types."""
  dialect: dict[str, str] = {}   # $-placeholders of the helpers and _CTYPE
  prelude: tuple[str, ...] = ()  # lines before everything else

  def __init__(self, name: str, uops: list[UOp], renderer: GPURenderer):
    self.name, self.uops, self.ren = name, uops, renderer
    self.helpers: set[str] = set()
    self.vtypes: dict[str, str] = {}
    self.r: dict[UOp, str] = {}
    self.uses_half = False

  # ---- dialect hooks -------------------------------------------------------------------------
  def includes(self) -> list[str]: return list(self.prelude)
  def half_widen(self, x: str) -> str: raise NotImplementedError
  def half_narrow(self, x: str) -> str: raise NotImplementedError
  def half_literal(self, bits: int, fv: float) -> str: raise NotImplementedError
  def fbin(self, op: Ops, suf: str, a: str, b: str) -> str: raise NotImplementedError
  def funary(self, op: Ops, suf: str, a: str) -> str: raise NotImplementedError

  # ---- types and constants -------------------------------------------------------------------
  def scalar_type(self, dt: DType) -> str:
    if dt.scalar() == dtypes.float16: self.uses_half = True
    return Template(_CTYPE[dt.scalar().name]).substitute(self.dialect)

  def ctype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): raise ValueError(f"{self.name}: pointer dtype {dt!r} has no value type")
    if dt.count == 1: return self.scalar_type(dt)
    tname = f"rg_{dt.scalar().name}x{dt.count}"
    self.vtypes.setdefault(tname, f"struct {tname} {{ {self.scalar_type(dt.scalar())} v[{dt.count}]; }};")
    return tname

  def use(self, helper: str) -> str:
    stack = [helper]
    while stack:
      h = stack.pop()
      if h not in self.helpers: self.helpers.add(h); stack.extend(_HELPERS[h][0])
    return helper

  def literal(self, v: bool | int | float, dt: DType) -> str:
    if dt == dtypes.bool: return "true" if v else "false"
    if dtypes.is_int(dt):
      iv = int(v)
      if dt.bits == 64:
        s = f"{iv}ull" if dtypes.is_unsigned(dt) else f"{iv}ll" if iv != -2 ** 63 else "(-9223372036854775807ll-1)"
      elif dt.bits == 32: s = f"{iv}u" if dtypes.is_unsigned(dt) else str(iv) if iv != -2 ** 31 else "(-2147483647-1)"
      else: return f"(({_CTYPE[dt.name]}){iv})"
      return f"({s})" if s.startswith("-") else s
    fv = float(v)
    if dt in (dtypes.bfloat16, dtypes.float16):  # exactly representable: write the bits (NaN: the canonical quiet one)
      if dt == dtypes.bfloat16:
        bits = 0x7FC0 if math.isnan(fv) else struct.unpack("<I", struct.pack("<f", fv))[0] >> 16
        return f"((unsigned short)0x{bits:04x})"
      self.uses_half = True
      return self.half_literal(0x7E00 if math.isnan(fv) else struct.unpack("<H", struct.pack("<e", fv))[0], fv)
    if dt == dtypes.float64:
      if math.isnan(fv) or math.isinf(fv):
        return f"__longlong_as_double(0x{0x7FF8000000000000 if math.isnan(fv) else 0xFFF0000000000000 if fv < 0 else 0x7FF0000000000000:016x}ll)"
      s = fv.hex()
    else:
      if math.isnan(fv) or math.isinf(fv): return f"__int_as_float(0x{0x7FC00000 if math.isnan(fv) else 0xFF800000 if fv < 0 else 0x7F800000:08x})"
      s = fv.hex() + "f"
    return f"({s})" if s.startswith("-") else s

  # ---- scalar ops ----------------------------------------------------------------------------
  def alu(self, op: Ops, sdt: DType, s: list[str]) -> str:
    """One lane of an ALU op on operands of scalar dtype `sdt` (WHERE: the dtype of its values)."""
    if op is Ops.WHERE: return f"({s[0]} ? {s[1]} : {s[2]})"
    if op is Ops.CMPNE and not dtypes.is_float(sdt): return f"({s[0]} != {s[1]})"
    if op is Ops.CMPLT and not dtypes.is_float(sdt): return f"({s[0]} < {s[1]})"
    if sdt == dtypes.bool:
      if op is Ops.MAX: return f"(bool)({s[0]} | {s[1]})"
      return f"(bool)({s[0]} {({Ops.XOR: '^', Ops.OR: '|', Ops.AND: '&'})[op]} {s[1]})"
    if dtypes.is_int(sdt): return self.int_alu(op, sdt, s)
    return self.float_alu(op, sdt, s)

  def int_alu(self, op: Ops, dt: DType, s: list[str]) -> str:
    t = _CTYPE[dt.name]
    u = "unsigned long long" if dt.bits == 64 else "unsigned int"  # wrap-around without signed overflow or int promotion
    if op is Ops.ADD: return f"(({t})(({u}){s[0]} + ({u}){s[1]}))"
    if op is Ops.MUL: return f"(({t})(({u}){s[0]} * ({u}){s[1]}))"
    if op is Ops.NEG: return f"(({t})(-({u}){s[0]}))"
    if op is Ops.SHL: return f"(({t})(({u}){s[0]} << {s[1]}))"
    if op is Ops.MAX: return f"(({t})({s[0]} > {s[1]} ? {s[0]} : {s[1]}))"
    ops = {Ops.SHR: ">>", Ops.IDIV: "/", Ops.MOD: "%", Ops.XOR: "^", Ops.OR: "|", Ops.AND: "&"}
    if op in ops: return f"(({t})({s[0]} {ops[op]} {s[1]}))"
    raise ValueError(f"{self.name}: {op.name} is not defined on {dt!r}")

  def widen(self, x: str, dt: DType) -> str:
    """A 16-bit float as float (exact); float32/float64 as they are."""
    if dt == dtypes.float16: return self.half_widen(x)
    if dt == dtypes.bfloat16: return f"{self.use('rg_bf2f')}({x})"
    return x

  def narrow(self, x: str, dt: DType) -> str:
    """A float result rounded once to a 16-bit float dtype."""
    if dt == dtypes.float16: return self.half_narrow(x)
    if dt == dtypes.bfloat16: return f"{self.use('rg_f2bf')}({x})"
    return x

  def float_alu(self, op: Ops, dt: DType, s: list[str]) -> str:
    suf = "" if dt == dtypes.float64 else "f"
    if op is Ops.MULACC:
      if dt == dtypes.float16: return f"{self.use('rg_fma_h')}({s[0]}, {s[1]}, {s[2]})"
      if dt == dtypes.bfloat16: return f"{self.use('rg_fma_bf')}({s[0]}, {s[1]}, {s[2]})"
      return f"fma{suf}({s[0]}, {s[1]}, {s[2]})"
    w = [self.widen(x, dt) for x in s]
    if op is Ops.CMPLT: return f"({w[0]} < {w[1]})"
    if op is Ops.CMPNE: return f"({w[0]} != {w[1]})"
    if op in (Ops.ADD, Ops.MUL): e = self.fbin(op, suf, w[0], w[1])
    elif op is Ops.NEG: e = f"(-{w[0]})"   # flips the sign bit, exact
    elif op in (Ops.RECIP, Ops.SQRT): e = self.funary(op, suf, w[0])
    elif op is Ops.MAX: e = f"{self.use('rg_maxd' if dt == dtypes.float64 else 'rg_maxf')}({w[0]}, {w[1]})"
    elif op in GroupOp.Transcendental:
      # native: the accurate libdevice/ocml functions (float16/bfloat16 through float); checked within a ULP bound
      e = f"{({Ops.EXP2: 'exp2', Ops.LOG2: 'log2', Ops.SIN: 'sin'})[op]}{suf}({w[0]})"
    else: raise ValueError(f"{self.name}: {op.name} is not defined on {dt!r}")
    return self.narrow(e, dt)

  def cast(self, x: str, src: DType, dst: DType) -> str:
    """One lane of CAST from scalar dtype src to scalar dtype dst."""
    if src == dst: return x
    t = self.scalar_type(dst)
    if dst == dtypes.bool:
      if src == dtypes.bfloat16: return f"(({x} & 0x7fff) != 0)"
      return f"({self.widen(x, src)} != 0)"
    if src == dtypes.bool:
      if dst == dtypes.bfloat16: return f"((unsigned short)({x} ? 0x3f80 : 0))"
      if dst == dtypes.float16: return self.half_narrow(f"({x} ? 1.0f : 0.0f)")
      return f"(({t}){x})"
    if dtypes.is_int(src):
      if dst == dtypes.bfloat16:  # must not round twice: ints wider than float's 24 bits go through round-to-odd
        if src.bits <= 16: return f"{self.use('rg_f2bf')}((float){x})"
        if src.bits == 32: return f"{self.use('rg_d2bf')}((double){x})"
        return f"{self.use('rg_d2bf')}({self.use('rg_u64_odd' if dtypes.is_unsigned(src) else 'rg_i64_odd')}({x}))"
      # ints that are not exact in float are beyond float16's range either way: through float is one rounding
      if dst == dtypes.float16: return self.half_narrow(f"(float){x}")
      return f"(({t}){x})"
    # src is a float: widen 16-bit floats to float (exact) first
    w, wdt = self.widen(x, src), (dtypes.float32 if src in (dtypes.float16, dtypes.bfloat16) else src)
    if dtypes.is_int(dst) or dst == wdt: return f"(({t}){w})"   # truncation toward zero; out of range is UB
    if dst == dtypes.bfloat16: return f"{self.use('rg_d2bf')}({w})" if wdt == dtypes.float64 else f"{self.use('rg_f2bf')}({w})"
    if dst == dtypes.float16: return f"{self.use('rg_d2h')}({w})" if wdt == dtypes.float64 else self.half_narrow(w)
    return f"(({t}){w})"  # float <-> double: the conversion rounds once (RNE) or is exact

  def lanes(self, dt: DType, fn, srcs: tuple[UOp, ...]) -> str:
    """Apply a scalar renderer `fn(list of operand strings) -> str` to every lane of dtype dt."""
    if dt.count == 1: return fn([self.r[s] for s in srcs])
    parts = [fn([f"{self.r[s]}.v[{i}]" if s.dtype.count > 1 else self.r[s] for s in srcs]) for i in range(dt.count)]
    return f"{self.ctype(dt)}{{{{{', '.join(parts)}}}}}"

  # ---- the program ---------------------------------------------------------------------------
  def render(self) -> str:
    if not _ident_ok(self.name): raise ValueError(f"kernel name {self.name!r} is not a usable identifier")
    for i, u in enumerate(self.uops):
      if u.op is Ops.WMMA: raise NotImplementedError(f"uop {i}: WMMA is not supported by the {type(self.ren).__name__} yet")
    verify_linear(self.uops)
    params = self.params()
    _, block, head = self.launch()
    body = self.body()
    sig = f'extern "C" __global__ void __launch_bounds__({math.prod(block)}) {self.name}({", ".join(params)})'
    lines, depth = [sig + " {"], 1
    for ln in [*head, *body]:
      if ln == "}": depth -= 1
      lines.append("  " * depth + ln)
      if ln.endswith("{"): depth += 1
    lines.append("}")
    d = self.dialect
    helpers = [Template(_HELPERS[h][1]).substitute(d) for h in _HELPERS if h in self.helpers]
    return "\n".join([*self.includes(), *self.vtypes.values(), *helpers, *lines]) + "\n"

  def params(self) -> list[str]:
    glb = sorted((u for u in self.uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    idxs = [u.arg for u in glb]
    if len(set(idxs)) != len(idxs): raise ValueError(f"{self.name}: two DEFINE_GLOBALs share a parameter index ({idxs})")
    params = []
    for u in glb:
      self.r[u] = f"data{u.arg}"
      params.append(f"{self.scalar_type(u.dtype.base.scalar())}* data{u.arg}")  # type: ignore[attr-defined]
    names: set[str] = set()
    for u in self.uops:
      if u.op is not Ops.DEFINE_VAR: continue
      name = u.arg[0]
      if not _ident_ok(name) or name == self.name:
        raise ValueError(f"{self.name}: variable name {name!r} is not an identifier or clashes with a generated name")
      if name in names: raise ValueError(f"{self.name}: two DEFINE_VARs are called {name!r}")
      names.add(name)
      self.r[u] = name
      params.append(f"{_CTYPE[u.dtype.name]} {name}")
    return params

  def launch(self) -> tuple[tuple[int, int, int], tuple[int, int, int], list[str]]:
    """Grid and block (checked against the limits), then the lines that define the launch indices and local memory."""
    grid, block, specials = _launch_geometry(self.name, self.uops, self.ren)
    head = []
    for name, (_, size) in specials.items():
      kind, d = name[:-1], _DIM[int(name[-1])]
      if kind == "gidx": head.append(f"const int {name} = (int)blockIdx.{d};")
      elif kind == "lidx": head.append(f"const int {name} = (int)threadIdx.{d};")
      else:  # a launch may cover more lanes than the size (whole blocks): those lanes do nothing
        head += [f"const unsigned int {name}_u = blockIdx.{d} * blockDim.{d} + threadIdx.{d};", f"if ({name}_u >= {size}u) return;",
                 f"const int {name} = (int){name}_u;"]
    for u in self.uops:
      if u.op is Ops.SPECIAL: self.r[u] = u.arg[0]
    for i, u in enumerate(self.uops):
      if u.op is not Ops.DEFINE_LOCAL: continue
      base: DType = u.dtype.base  # type: ignore[attr-defined]
      self.r[u] = f"local{i}"
      head.append(f"__shared__ {self.scalar_type(base.scalar())} local{i}[{u.dtype.size * base.count}];")  # type: ignore[attr-defined]
    return grid, block, head

  def body(self) -> list[str]:
    out: list[str] = []
    for i, u in enumerate(self.uops):
      op, dt, src = u.op, u.dtype, u.src
      if op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.DEFINE_LOCAL): continue
      if op is Ops.CONST: self.r[u] = self.literal(u.arg, dt); continue
      if op is Ops.RANGE:
        self.r[u] = f"ridx{i}"
        out.append(f"for ({self.ctype(dt)} ridx{i} = 0; ridx{i} < {self.r[src[0]]}; ridx{i}++) {{")
      elif op in (Ops.ENDRANGE, Ops.ENDIF): out.append("}")
      elif op is Ops.IF: out.append(f"if ({self.r[src[0]]}) {{")
      elif op is Ops.BARRIER: out.append("__syncthreads();")
      elif op is Ops.DEFINE_ACC:
        self.r[u] = f"acc{i}"
        out.append(f"{self.ctype(dt)} acc{i} = {self.r[src[0]]};")
      elif op is Ops.ASSIGN:
        self.r[u] = self.r[src[0]]
        out.append(f"{self.r[src[0]]} = {self.r[src[1]]};")
      elif op is Ops.LOAD: out.append(self.load(i, u))
      elif op is Ops.STORE: out.append(self.store(u))
      else: out.append(self.value(i, u))
    return out

  def address(self, buf: UOp, idx: UOp) -> str:
    bc = buf.dtype.base.count  # type: ignore[attr-defined]
    return f"{self.r[buf]} + {self.r[idx]}" if bc == 1 else f"{self.r[buf]} + (long long){self.r[idx]} * {bc}"

  def load(self, i: int, u: UOp) -> str:
    self.r[u] = name = f"ld{i}"
    t = self.ctype(u.dtype)
    gate, alt = (self.r[u.src[2]], self.r[u.src[3]]) if len(u.src) == 4 else (None, None)
    if u.dtype.count == 1:  # the conditional reads memory only where the gate is true
      mem = f"{self.r[u.src[0]]}[{self.r[u.src[1]]}]"
      return f"{t} {name} = {gate} ? {mem} : {alt};" if gate else f"{t} {name} = {mem};"
    copy = f"{self.dialect['memcpy']}(&{name}, {self.address(u.src[0], u.src[1])}, sizeof({name}));"
    return f"{t} {name} = {alt}; if ({gate}) {copy}" if gate else f"{t} {name}; {copy}"

  def store(self, u: UOp) -> str:
    buf, idx, val = u.src[:3]
    gate = f"if ({self.r[u.src[3]]}) " if len(u.src) == 4 else ""
    if val.dtype.count == 1: return f"{gate}{self.r[buf]}[{self.r[idx]}] = {self.r[val]};"
    # vector values are always named variables (constants are scalars), so they have an address
    return f"{gate}{self.dialect['memcpy']}({self.address(buf, idx)}, &{self.r[val]}, sizeof({self.r[val]}));"

  def value(self, i: int, u: UOp) -> str:
    op, dt, src = u.op, u.dtype, u.src
    prefix = {Ops.VECTORIZE: "vec", Ops.GEP: "gep", Ops.CAST: "cast", Ops.BITCAST: "cast"}.get(op, "alu")
    name = self.r[u] = f"{prefix}{i}"
    t = self.ctype(dt)
    if op is Ops.VECTORIZE: e = f"{t}{{{{{', '.join(self.r[s] for s in src)}}}}}"
    elif op is Ops.GEP: e = f"{self.r[src[0]]}.v[{u.arg[0]}]"
    elif op is Ops.CAST: e = self.lanes(dt, lambda s: self.cast(s[0], src[0].dtype.scalar(), dt.scalar()), src)
    elif op is Ops.BITCAST: e = f"{self.use('rg_bitcast')}<{t}>({self.r[src[0]]})"
    elif op in GroupOp.ALU:
      sdt = (src[1] if op is Ops.WHERE else src[0]).dtype.scalar()
      e = self.lanes(dt, lambda s: self.alu(op, sdt, s), src)
    else: raise ValueError(f"uop {i} ({op.name}) cannot be rendered to {type(self.ren).__name__}")
    return f"{t} {name} = {e};"


class _CUDAProgram(_GPUProgram):
  dialect = {"fn": "static __device__ __forceinline__", "half": "__half", "h2f": "__half2float", "f2h": "__float2half_rn", "memcpy": "memcpy",
             "dadd": "__dadd_rn(a, b)", "dsub": "__dsub_rn(a, b)", "dmul": "__dmul_rn(a, b)"}
  def includes(self) -> list[str]: return ["#include <cuda_fp16.h>"] if self.uses_half else []   # only __half needs a header
  def half_widen(self, x: str) -> str: self.uses_half = True; return f"__half2float({x})"
  def half_narrow(self, x: str) -> str: self.uses_half = True; return f"__float2half_rn({x})"
  def half_literal(self, bits: int, fv: float) -> str: return f"__ushort_as_half((unsigned short)0x{bits:04x})"
  # the _rn intrinsics round once and are never contracted into an fma by nvcc, whatever --fmad says
  def fbin(self, op: Ops, suf: str, a: str, b: str) -> str:
    return f"__{'d' if suf == '' else 'f'}{'add' if op is Ops.ADD else 'mul'}_rn({a}, {b})"
  def funary(self, op: Ops, suf: str, a: str) -> str:
    return f"__{'d' if suf == '' else 'f'}{'rcp' if op is Ops.RECIP else 'sqrt'}_rn({a})"


class _HIPProgram(_GPUProgram):
  prelude = ("#include <hip/hip_runtime.h>", "#pragma clang fp contract(off)")
  dialect = {"fn": "static __device__ __forceinline__", "half": "_Float16", "h2f": "(float)", "f2h": "(_Float16)", "memcpy": "__builtin_memcpy",
             "dadd": "((a) + (b))", "dsub": "((a) - (b))", "dmul": "((a) * (b))"}
  def half_widen(self, x: str) -> str: return f"((float){x})"
  def half_narrow(self, x: str) -> str: return f"((_Float16)({x}))"
  def half_literal(self, bits: int, fv: float) -> str:
    if math.isnan(fv) or math.isinf(fv): return f"((_Float16)__int_as_float(0x{0x7FC00000 if math.isnan(fv) else 0xFF800000 if fv < 0 else 0x7F800000:08x}))"
    return f"((_Float16){fv.hex()}f)"
  # plain operators: the pragma above forbids contraction; division and sqrt are correctly rounded in HIP's default mode
  def fbin(self, op: Ops, suf: str, a: str, b: str) -> str: return f"({a} {'+' if op is Ops.ADD else '*'} {b})"
  def funary(self, op: Ops, suf: str, a: str) -> str:
    return f"(1.0{suf} / {a})" if op is Ops.RECIP else f"__builtin_sqrt{suf}({a})"


def _launch_geometry(name: str, uops: list[UOp], ren: GPURenderer) \
    -> tuple[tuple[int, int, int], tuple[int, int, int], dict[str, tuple[int, int]]]:
  """(grid, block, {special name: (uop position, size)}) of a program, checked against the renderer's limits."""
  lim = ren.limits
  specials: dict[str, tuple[int, int]] = {}
  for i, u in enumerate(uops):
    if u.op is not Ops.SPECIAL: continue
    nm, size = u.arg
    if nm in specials and specials[nm][1] != size: raise ValueError(f"uop {i}: SPECIAL {nm} has two sizes ({specials[nm][1]} and {size})")
    specials.setdefault(nm, (i, size))
  def where(nm: str) -> str: return f"uop {specials[nm][0]} (SPECIAL {nm}, size {specials[nm][1]})"
  idxs = [n for n in specials if n.startswith("idx")]
  grid, block = [1, 1, 1], [1, 1, 1]
  if idxs:
    if other := [n for n in specials if not n.startswith("idx")]:
      raise ValueError(f"{where(idxs[0])}: an idxD launch has no workgroups, so it cannot be mixed with {other[0]}")
    for i, u in enumerate(uops):
      if u.op in (Ops.DEFINE_LOCAL, Ops.BARRIER):
        raise ValueError(f"uop {i} ({u.op.name}): local memory and barriers need a gidx/lidx launch, this program uses {idxs[0]}")
    for nm in idxs:
      d, size = int(nm[-1]), specials[nm][1]
      block[d] = min(size, ren.idx_block_size) if d == 0 else 1
      grid[d] = -(-size // block[d])
  for nm, (_, size) in specials.items():
    d = int(nm[-1])
    if nm.startswith("gidx"): grid[d] = size
    elif nm.startswith("lidx"):
      block[d] = size
      if size > lim.max_block_dims[d]:
        raise ValueError(f"{where(nm)}: {size} work-items in dimension {_DIM[d]} exceed {ren.target}'s {lim.max_block_dims[d]}")
  for d in range(3):
    if grid[d] > lim.max_grid_dims[d]:
      nm = next(n for n in specials if int(n[-1]) == d and not n.startswith("lidx"))
      raise ValueError(f"{where(nm)}: {grid[d]} workgroups in dimension {_DIM[d]} exceed {ren.target}'s {lim.max_grid_dims[d]}")
  if (threads := math.prod(block)) > lim.max_threads_per_block:
    nm = max((n for n in specials if n.startswith("lidx")), key=lambda n: specials[n][0])
    raise ValueError(f"{where(nm)}: {threads} work-items per workgroup ({'x'.join(map(str, block))}) exceed {ren.target}'s {lim.max_threads_per_block}")
  shared = 0
  for i, u in enumerate(uops):
    if u.op is not Ops.DEFINE_LOCAL: continue
    al = u.dtype.base.scalar().itemsize  # type: ignore[attr-defined]
    shared = -(-shared // al) * al + u.dtype.size * u.dtype.base.itemsize  # type: ignore[attr-defined]
    if shared > lim.shared_memory_per_block:
      raise ValueError(f"uop {i} (DEFINE_LOCAL {u.arg}, {u.dtype!r}): local memory of the program reaches {shared} bytes, "
                       f"over {ren.target}'s {lim.shared_memory_per_block} bytes per workgroup")
  return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), specials


class GPURenderer(Renderer):
  """Shared by CUDARenderer and HIPRenderer: limits as data, the launch geometry, the program class."""
  target: str = ""
  limits: GPULimits
  idx_block_size: int = 256   # work-items per block along x for idxD launches (programs without workgroups)
  _program: type[_GPUProgram]

  def __init__(self, native_transcendentals: bool | None = None):
    if native_transcendentals is not None: self.native_transcendentals = native_transcendentals

  def launch_dims(self, uops: list[UOp]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid in workgroups, block in work-items) to launch the rendered kernel with; checked against the limits.
    The rendered text also runs correctly under any other launch whose block fits __launch_bounds__ and that covers
    each idxD size (e.g. ProgramSpec's: grid = the sizes, block = 1)."""
    grid, block, _ = _launch_geometry("kernel", list(uops), self)
    return grid, block

  def render(self, name: str, uops: list[UOp]) -> str:
    # EXP2/LOG2/SIN that reach the renderer are rendered natively; the flag only tells the pipeline whether to decompose first
    return self._program(name, list(uops), self).render()


class CUDARenderer(GPURenderer):
  """Linear program -> CUDA C (compiles with `nvcc --ptx -arch=sm_XX` or NVRTC; see the module docstring)."""
  device, target, limits, _program = "NV", "CUDA", CUDA_LIMITS, _CUDAProgram

  def __init__(self, arch: str = "sm_80", native_transcendentals: bool | None = None):
    super().__init__(native_transcendentals)
    if not re.fullmatch(r"sm_\d+[af]?", arch): raise ValueError(f"CUDA arch {arch!r} is not of the form sm_XX")
    self.arch = arch


class HIPRenderer(GPURenderer):
  """Linear program -> HIP C (hipcc/hiprtc with `-ffp-contract=off`; see the module docstring)."""
  device, target, _program = "AMD", "HIP", _HIPProgram

  def __init__(self, arch: str = "gfx942", native_transcendentals: bool | None = None):
    super().__init__(native_transcendentals)
    if not re.fullmatch(r"gfx[0-9a-f]+", arch): raise ValueError(f"AMD arch {arch!r} is not of the form gfxNNN")
    self.arch = arch
    # RDNA (gfx10xx and later: four digits) runs HIP compute as wave32 by default, GCN/CDNA (gfx9xx and older) as wave64
    wave = 32 if len(arch) >= 7 else 64
    self.limits = HIP_LIMITS if wave == 64 else GPULimits(**{**HIP_LIMITS.__dict__, "warp_size": 32})
