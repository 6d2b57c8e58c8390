"""C source for a linear program: one function the CPU device compiles and calls.

The generated function is `void name(T0* data0, ..., Tv var, ...)`: buffers in DEFINE_GLOBAL index
order, then DEFINE_VARs in program order (no `restrict`: buffers may alias). SPECIALs become loops
around the whole body (workgroup loops outside, local memory declared between them and the
work-item loops). A program with BARRIERs runs in phases instead (see `_CProgram.phased`): inside
the workgroup loops, the body is cut at each barrier and each piece gets its own work-item loops,
so every work-item finishes one phase before any starts the next; a program without barriers
renders exactly as it did before barriers were supported. Every op is rendered so the result is
bit for bit the reference semantics (refgrad/uop/semantics.py), assuming the flags of
refgrad.runtime.ops_cpu.ClangCompiler (-fwrapv -ffp-contract=off, no fast-math):

- integer ADD/MUL/NEG/SHL are computed in an unsigned type and converted back, so no signed
  overflow or small-type promotion is involved; SHR/IDIV/MOD/compares use C's own operators;
- C (not the GPU dialects) makes the undefined cases total, so no input can trap (SIGFPE) or let the compiler
  assume it away: IDIV/MOD by 0 give 0, MIN / -1 gives MIN and MIN % -1 gives 0 (`rg_div_*`, `rg_mod_*`), shift
  amounts are masked to the width, float->int casts saturate and NaN gives 0 (`rg_f2i_*`). Defined inputs give
  exactly what C's operators give; these results are the CPU's, not reference semantics (the PYTHON device reports
  the same inputs as undefined behaviour in checked mode);
- float16 is `_Float16` for storage and conversion only: ops compute in float and convert back
  once; bfloat16 is stored as its bits (`unsigned short`) and goes through small helpers;
- helpers implement what C does not give directly: MAX with the NaN/+-0 rules, MULACC of 16-bit
  floats (exact product in double, round-to-odd add, one final rounding) and casts that must
  not double-round (double/int32/int64 -> bfloat16, double -> float16 via round-to-odd float);
- vectors are structs of an array; ALU ops, CAST and BITCAST on them are rendered lane by lane.
Helpers and vector typedefs are emitted only when a program uses them.

`CStyleProgram` renders what every C-like dialect shares, in C's spelling; `_CProgram` (here) and the CUDA/HIP
programs (refgrad/renderer/gpu.py) supply only what differs: types, spellings, signature, launch and barriers.
"""
from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from string import Template

from refgrad import coverage
from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.renderer import Renderer
from refgrad.renderer.phases import plan
from refgrad.target import TENSOR_CORES, TensorCore
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import load_parts, verify_linear

# C types of scalar dtypes (LP64: long long is 64 bits); bfloat16 values are their bits. Other dialects override a few.
_CTYPE = {"bool": "_Bool", "char": "signed char", "uchar": "unsigned char", "short": "short", "ushort": "unsigned short",
          "int": "int", "uint": "unsigned int", "long": "long long", "ulong": "unsigned long long", "half": "_Float16",
          "bfloat16": "unsigned short", "float": "float", "double": "double"}

# helpers of every dialect: name -> (dependencies, text). A text is a string.Template filled in with the dialect's
# `subst` ($fn, $half, ...), or {family: template} where the C and GPU families spell a helper differently (no entry:
# the family has no such helper). Emitted in this order, only when used. On GPUs, RG_DADD/RG_DSUB/RG_DMUL (from
# "rg_dops") are double ops that must round once each and never fuse; C's -ffp-contract=off gives that to plain operators.
_HELPERS: dict[str, tuple[tuple[str, ...], str | dict[str, str]]] = {
  "rg_dops": ((), {"gpu": "#define RG_DADD(a, b) $dadd\n#define RG_DSUB(a, b) $dsub\n#define RG_DMUL(a, b) $dmul"}),
  "rg_bitcast": ((), {"gpu": """template <typename T, typename F> $fn T rg_bitcast(F f) { T t; $memcpy(&t, &f, sizeof(T)); return t; }"""}),
  "rg_bf2f": ((), {
    "c": """$fn float rg_bf2f(unsigned short b) { unsigned int u = (unsigned int)b << 16; float f; __builtin_memcpy(&f, &u, 4); return f; }""",
    "gpu": """$fn float rg_bf2f(unsigned short b) { return __uint_as_float((unsigned int)b << 16); }"""}),
  "rg_f2bf": ((), """/* float -> bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN with its sign */
$fn unsigned short rg_f2bf(float f) {
  $u_of_f
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}"""),
  "rg_d2f_odd": ((), """/* double -> float rounded to odd: rounding that again to <= 22 bits equals one rounding of d */
$fn float rg_d2f_odd(double d) {
  float r = (float)d;
  if ((double)r != d && d == d) {
    $u_of_r
    if (!(u & 1u)) { u += ${fabs}((double)r) < ${fabs}(d) ? 1u : 0xffffffffu; $r_of_u }
  }
  return r;
}"""),
  "rg_d2bf": (("rg_f2bf", "rg_d2f_odd"), """$fn unsigned short rg_d2bf(double d) { return rg_f2bf(rg_d2f_odd(d)); }"""),
  "rg_d2h": (("rg_d2f_odd",), """$fn $half rg_d2h(double d) { return $d2h; }"""),
  "rg_add_odd": (("rg_dops",), {"c": """/* a + b rounded to odd: the TwoSum error says whether the sum was exact and which side the exact value is on */
$fn double rg_add_odd(double a, double b) {
  double s = a + b, bb = s - a, e = (a - (s - bb)) + (b - bb);
  if (e != 0 && __builtin_isfinite(s)) {
    unsigned long long u; __builtin_memcpy(&u, &s, 8);
    if (!(u & 1ull)) { u += (e > 0) == (s > 0) ? 1ull : ~0ull; __builtin_memcpy(&s, &u, 8); }
  }
  return s;
}""", "gpu": """/* a + b rounded to odd: the TwoSum error says whether the sum was exact and which side the exact value is on */
$fn double rg_add_odd(double a, double b) {
  double s = RG_DADD(a, b), bb = RG_DSUB(s, a), e = RG_DADD(RG_DSUB(a, RG_DSUB(s, bb)), RG_DSUB(b, bb));
  unsigned long long u = (unsigned long long)__double_as_longlong(s);
  if (e != 0 && ((u >> 52) & 0x7ffull) != 0x7ffull && !(u & 1ull)) {
    u += (e > 0) == (s > 0) ? 1ull : ~0ull; s = __longlong_as_double((long long)u);
  }
  return s;
}"""}),
  "rg_i64_odd": (("rg_add_odd",), """/* int64 -> double rounded to odd: both halves are exact doubles */
$fn double rg_i64_odd(long long x) { return rg_add_odd((double)(long long)((unsigned long long)x & 0xffffffff00000000ull), (double)(x & 0xffffffffll)); }"""),
  "rg_u64_odd": (("rg_add_odd",), """$fn double rg_u64_odd(unsigned long long x) { return rg_add_odd((double)(x & 0xffffffff00000000ull), (double)(x & 0xffffffffull)); }"""),
  "rg_fma_h": (("rg_add_odd", "rg_d2h", "rg_dops"), """/* fused multiply-add of float16: the product is exact in double, the sum rounded to odd, then one rounding */
$fn $half rg_fma_h($half a, $half b, $half c) { return rg_d2h(rg_add_odd($fma_h)); }"""),
  "rg_fma_bf": (("rg_add_odd", "rg_d2bf", "rg_bf2f", "rg_dops"), """$fn unsigned short rg_fma_bf(unsigned short a, unsigned short b, unsigned short c) {
  return rg_d2bf(rg_add_odd($fma_bf, (double)rg_bf2f(c)));
}"""),
  "rg_maxf": ((), """/* MAX: NaN if either is NaN, MAX(+0,-0) = MAX(-0,+0) = +0, so the result does not depend on operand order */
$fn float rg_maxf(float a, float b) { if (a != a || b != b) return a + b; if (a == b) return $signf ? b : a; return a > b ? a : b; }"""),
  "rg_maxd": ((), {"c": """$fn double rg_maxd(double a, double b) { if (a != a || b != b) return a + b; if (a == b) return __builtin_signbit(a) ? b : a; return a > b ? a : b; }""",
                   "gpu": """$fn double rg_maxd(double a, double b) {
  if (a != a || b != b) return a + b; if (a == b) return (__double_as_longlong(a) < 0) ? b : a; return a > b ? a : b;
}"""}),
}
_GENERATED_HELPERS = ("c:total_divmod", "c:total_f2i", "c:wmma", "c:lanes")   # made per dtype/tensor core, counted by family
coverage.declare_paths([*(f"c:{h}" for h in _HELPERS), *_GENERATED_HELPERS])

_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if inline int long register
  restrict return short signed sizeof static struct switch typedef union unsigned void volatile while _Bool _Complex _Imaginary _Float16""".split())
_GENERATED = re.compile(r"^(alu|ld|acc|ridx|cast|vec|gep|wmma|local|data|gidx|lidx|idx)[0-9]+$|^rg_")
# library functions the generated code may call: a kernel with one of these names would be called instead
_LIBRARY = frozenset("sqrt sqrtf fma fmaf exp2 exp2f log2 log2f sin sinf memcpy memmove memset".split())


def _ident_ok(name: object) -> bool:
  return isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None and name not in _C_KEYWORDS


class CStyleProgram:
  """State of rendering one program in a C-like dialect: names of values, helpers and vector types in use.

  This base renders everything the dialects share (integer ops, float ops through widen/narrow, casts, lanes,
  loads/stores, the statements of the body, the helpers) in C's spelling; a dialect subclass supplies the
  types, the spellings that differ, the kernel signature and how work-items and workgroups are run (`function`)."""
  types: dict[str, str] = _CTYPE   # scalar dtype name -> type
  family = "c"                     # which text of a per-family helper
  subst: dict[str, str] = {}       # $-placeholders of the helpers
  bools = ("0", "1")               # false, true
  bool_max_cast = False            # whether bool MAX is cast back to bool like XOR/OR/AND
  builtin = "__builtin_"           # prefix of fma/exp2/log2/sin
  memcpy = "__builtin_memcpy"
  ident = ("a usable C identifier", "a C identifier")   # for errors: kernel names, variable names
  dialect = "C"                    # for errors: what the program cannot be rendered to
  total = False                    # whether undefined integer ops and casts get a defined result (see the module docstring)
  overrides: dict[Ops, Callable[[DType, list[str]], str | None]] = {}   # op -> f(scalar dtype, operand texts): its text, or None

  def __init__(self, name: str, uops: list[UOp]):
    self.name, self.uops = name, uops
    self.helpers: set[str] = set()
    self.vtypes: dict[str, str] = {}   # vector type name -> its declaration
    self.r: dict[UOp, str] = {}        # how each value is written
    self.kept: set[UOp] = set()        # values that live across a barrier (C: one array element per work-item)
    self.generated: dict[str, str] = {}   # helpers made for this program (WMMA of one tensor core), by name, after the fixed ones
    self.uses_half = False

  # ---- dialect hooks (C's spelling here) ------------------------------------------------------
  def name_ok(self, name: str) -> bool: return _ident_ok(name) and not _GENERATED.match(name) and name not in _LIBRARY
  def var_ok(self, name: str) -> bool: return _ident_ok(name) and not _GENERATED.match(name)
  def includes(self) -> list[str]: return []
  def vtype_decl(self, tname: str, elem: str, n: int) -> str: return f"typedef struct {{ {elem} v[{n}]; }} {tname};"
  def vec_make(self, t: str, parts: list[str]) -> str: return f"({t}){{{{{', '.join(parts)}}}}}"
  def bitcast(self, x: str, src_t: str, t: str) -> str: return f"((union {{ {src_t} f; {t} t; }}){{ .f = {x} }}).t"
  def float_text(self, fv: float, dt: DType) -> str:
    """A float32/float64 constant (the caller parenthesizes a leading minus)."""
    suf = "" if dt == dtypes.float64 else "f"
    if math.isnan(fv): return f"__builtin_nan{suf}(\"\")"
    if math.isinf(fv): return f"{'-' if fv < 0 else ''}__builtin_inf{suf}()"
    return fv.hex() + suf
  def half_literal(self, fv: float) -> str: return f"(({self.types['half']}){self.float_text(fv, dtypes.float32)})"
  def half_widen(self, x: str) -> str: return f"((float){x})"
  def half_narrow(self, x: str) -> str: return f"(({self.types['half']})({x}))"
  def cast_to_half(self, x: str) -> str: return f"(({self.types['half']}){x})"   # x: a float, int or bool expression
  def bool_to_half(self, x: str) -> str: return self.cast_to_half(x)
  def half_nonzero(self, x: str) -> str: return f"((float){x} != 0)"
  def fbin(self, op: Ops, suf: str, a: str, b: str) -> str: return f"({a} {'+' if op is Ops.ADD else '*'} {b})"
  def funary(self, op: Ops, suf: str, a: str) -> str: return f"(1.0{suf} / {a})" if op is Ops.RECIP else f"__builtin_sqrt{suf}({a})"
  def barrier(self) -> str | None: return None
  def function(self, params: list[str]) -> list[str]: raise NotImplementedError

  # ---- types and constants -----------------------------------------------------------------
  def scalar_type(self, dt: DType) -> str:
    if dt.scalar() == dtypes.float16: self.uses_half = True
    return self.types[dt.scalar().name]

  def ctype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): raise ValueError(f"{self.name}: pointer dtype {dt!r} has no value type")
    if dt.count == 1: return self.scalar_type(dt)
    tname = f"rg_{dt.scalar().name}x{dt.count}"
    self.vtypes.setdefault(tname, self.vtype_decl(tname, self.scalar_type(dt.scalar()), dt.count))
    return tname

  def use(self, helper: str) -> str:
    stack = [helper]
    while stack:
      h = stack.pop()
      if h not in self.helpers: self.helpers.add(h); stack.extend(_HELPERS[h][0])
    coverage.path(f"c:{helper}")
    return helper

  def helper_texts(self) -> list[str]:
    out = []
    for h, (_, text) in _HELPERS.items():
      if h not in self.helpers: continue
      t = text if isinstance(text, str) else text.get(self.family)
      if t is not None: out.append(Template(t).substitute(self.subst))
    return out + list(self.generated.values())

  def literal(self, v: bool | int | float, dt: DType) -> str:
    if dt == dtypes.bool: return self.bools[bool(v)]
    if dtypes.is_int(dt):
      iv = int(v)
      if dt.bits == 64:
        s = f"{iv}ull" if dtypes.is_unsigned(dt) else f"{iv}ll" if iv != -2 ** 63 else "(-9223372036854775807ll-1)"
      elif dt.bits == 32: s = f"{iv}u" if dtypes.is_unsigned(dt) else str(iv) if iv != -2 ** 31 else "(-2147483647-1)"
      else: return f"(({self.scalar_type(dt)}){iv})"
      return f"({s})" if s.startswith("-") else s
    fv = float(v)
    if dt == dtypes.bfloat16:  # exactly representable, so the top half of the float32 bits (NaN: the canonical quiet one)
      bits = 0x7FC0 if math.isnan(fv) else struct.unpack("<I", struct.pack("<f", fv))[0] >> 16
      return f"((unsigned short)0x{bits:04x})"
    if dt == dtypes.float16: self.uses_half = True; return self.half_literal(fv)
    s = self.float_text(fv, dt)
    return f"({s})" if s.startswith("-") else s

  # ---- scalar ops ----------------------------------------------------------------------------
  def alu(self, op: Ops, sdt: DType, s: list[str]) -> str:
    """One lane of an ALU op on operands of scalar dtype `sdt` (WHERE: the dtype of its values)."""
    if (f := self.overrides.get(op)) is not None and (text := f(sdt, s)) is not None: return text   # a renderer's public hook
    if op is Ops.WHERE: return f"({s[0]} ? {s[1]} : {s[2]})"
    if op is Ops.CMPNE and not dtypes.is_float(sdt): return f"({s[0]} != {s[1]})"
    if op is Ops.CMPLT and not dtypes.is_float(sdt): return f"({s[0]} < {s[1]})"
    if sdt == dtypes.bool:
      bt = self.types["bool"]
      if op is Ops.MAX: return f"({bt})({s[0]} | {s[1]})" if self.bool_max_cast else f"({s[0]} | {s[1]})"
      return f"({bt})({s[0]} {({Ops.XOR: '^', Ops.OR: '|', Ops.AND: '&'})[op]} {s[1]})"
    if dtypes.is_int(sdt): return self.int_alu(op, sdt, s)
    return self.float_alu(op, sdt, s)

  def int_alu(self, op: Ops, dt: DType, s: list[str]) -> str:
    t = self.scalar_type(dt)
    u = "unsigned long long" if dt.bits == 64 else "unsigned int"  # wrap-around without signed overflow or int promotion
    if op is Ops.ADD: return f"(({t})(({u}){s[0]} + ({u}){s[1]}))"
    if op is Ops.MUL: return f"(({t})(({u}){s[0]} * ({u}){s[1]}))"
    if op is Ops.NEG: return f"(({t})(-({u}){s[0]}))"
    if op in (Ops.SHL, Ops.SHR) and self.total: s = [s[0], f"({s[1]} & {dt.bits - 1})"]   # no shift amount outside [0, bits)
    if op is Ops.SHL: return f"(({t})(({u}){s[0]} << {s[1]}))"
    if op is Ops.MAX: return f"(({t})({s[0]} > {s[1]} ? {s[0]} : {s[1]}))"
    if op in (Ops.IDIV, Ops.MOD) and self.total: return f"{self.total_divmod(op, dt)}({s[0]}, {s[1]})"
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
      return f"{self.builtin}fma{suf}({s[0]}, {s[1]}, {s[2]})"
    w = [self.widen(x, dt) for x in s]
    if op is Ops.CMPLT: return f"({w[0]} < {w[1]})"
    if op is Ops.CMPNE: return f"({w[0]} != {w[1]})"
    if op in (Ops.ADD, Ops.MUL): e = self.fbin(op, suf, w[0], w[1])
    elif op is Ops.NEG: e = f"(-{w[0]})"   # flips the sign bit, exact
    elif op in (Ops.RECIP, Ops.SQRT): e = self.funary(op, suf, w[0])
    elif op is Ops.MAX: e = f"{self.use('rg_maxd' if dt == dtypes.float64 else 'rg_maxf')}({w[0]}, {w[1]})"
    elif op in GroupOp.Transcendental:
      # native: libm / libdevice / ocml (float16/bfloat16 through float); not bit-exact across backends, checked within a ULP bound
      e = f"{self.builtin}{({Ops.EXP2: 'exp2', Ops.LOG2: 'log2', Ops.SIN: 'sin'})[op]}{suf}({w[0]})"
    else: raise ValueError(f"{self.name}: {op.name} is not defined on {dt!r}")
    return self.narrow(e, dt)

  def cast(self, x: str, src: DType, dst: DType) -> str:
    """One lane of CAST from scalar dtype src to scalar dtype dst."""
    if src == dst: return x
    t = self.scalar_type(dst)
    if dst == dtypes.bool:
      if src == dtypes.bfloat16: return f"(({x} & 0x7fff) != 0)"
      if src == dtypes.float16: return self.half_nonzero(x)
      return f"({x} != 0)"
    if src == dtypes.bool:
      if dst == dtypes.bfloat16: return f"((unsigned short)({x} ? 0x3f80 : 0))"
      if dst == dtypes.float16: return self.bool_to_half(x)
      return f"(({t}){x})"
    if dtypes.is_int(src):
      if dst == dtypes.bfloat16:  # must not round twice: ints wider than float's 24 bits go through round-to-odd
        if src.bits <= 16: return f"{self.use('rg_f2bf')}((float){x})"
        if src.bits == 32: return f"{self.use('rg_d2bf')}((double){x})"
        return f"{self.use('rg_d2bf')}({self.use('rg_u64_odd' if dtypes.is_unsigned(src) else 'rg_i64_odd')}({x}))"
      # ints that are not exact in float are beyond float16's range either way: through float is one rounding
      if dst == dtypes.float16: return self.cast_to_half(f"(float){x}")
      return f"(({t}){x})"
    # src is a float: widen 16-bit floats to float (exact) first
    w, wdt = self.widen(x, src), (dtypes.float32 if src in (dtypes.float16, dtypes.bfloat16) else src)
    if dtypes.is_int(dst) and self.total: return f"{self.total_f2i(wdt, dst)}({w})"
    if dtypes.is_int(dst) or dst == wdt: return f"(({t}){w})"   # truncation toward zero; out of range is UB
    if dst == dtypes.bfloat16: return f"{self.use('rg_d2bf')}({w})" if wdt == dtypes.float64 else f"{self.use('rg_f2bf')}({w})"
    if dst == dtypes.float16: return f"{self.use('rg_d2h')}({w})" if wdt == dtypes.float64 else self.cast_to_half(w)
    return f"(({t}){w})"  # float <-> double: the conversion rounds once (RNE) or is exact

  def total_divmod(self, op: Ops, dt: DType) -> str:
    """The helper computing IDIV or MOD of `dt` for every input: by 0 gives 0, MIN / -1 gives MIN (wraps), MIN % -1 gives 0."""
    coverage.path("c:total_divmod")
    name = f"rg_{'div' if op is Ops.IDIV else 'mod'}_{dt.name}"
    if name not in self.generated:
      t, sym = self.scalar_type(dt), "/" if op is Ops.IDIV else "%"
      u = "unsigned long long" if dt.bits == 64 else "unsigned int"
      minus1 = "" if dtypes.is_unsigned(dt) else f"if (b == -1) return {f'({t})(-({u})a)' if op is Ops.IDIV else '0'}; "
      self.generated[name] = f"{self.subst.get('fn', 'static inline')} {t} {name}({t} a, {t} b) {{ if (b == 0) return 0; {minus1}return ({t})(a {sym} b); }}"
    return name

  def total_f2i(self, src: DType, dst: DType) -> str:
    """The helper casting float32/float64 `src` to int `dst` for every input: truncation where it fits, else saturation, NaN -> 0."""
    coverage.path("c:total_f2i")
    name = f"rg_f2i_{src.name}_{dst.name}"
    if name not in self.generated:
      t, fs = self.scalar_type(dst), self.scalar_type(src)
      if dtypes.is_unsigned(dst): lo, hi, vmin, vmax = "d <= -1.0", f"d >= {float(2 ** dst.bits)!r}", "0", f"({t})~0ull"
      else:
        # below MIN: d <= MIN - 1 where that is a double (bits <= 32); for 64 bits no double lies in (MIN - 1, MIN)
        lo = f"d <= {float(-2 ** (dst.bits - 1) - 1)!r}" if dst.bits <= 32 else f"d < {float(-2 ** 63)!r}"
        hi, vmin, vmax = f"d >= {float(2 ** (dst.bits - 1))!r}", f"({t})(-{2 ** (dst.bits - 1) - 1}ll - 1)", f"({t}){2 ** (dst.bits - 1) - 1}ll"
      self.generated[name] = (f"{self.subst.get('fn', 'static inline')} {t} {name}({fs} x) {{ double d = x; "
                              f"if (d != d) return 0; if ({lo}) return {vmin}; if ({hi}) return {vmax}; return ({t})x; }}")
    return name

  # ---- lane-wise wrapper ---------------------------------------------------------------------
  def lanes(self, dt: DType, fn, srcs: tuple[UOp, ...]) -> str:
    """Apply a scalar renderer `fn(list of operand strings) -> str` to every lane of dtype dt."""
    if dt.count == 1: return fn([self.r[s] for s in srcs])
    coverage.path("c:lanes")
    return self.vec_make(self.ctype(dt), [fn([f"{self.r[s]}.v[{i}]" if s.dtype.count > 1 else self.r[s] for s in srcs]) for i in range(dt.count)])

  # ---- the program ---------------------------------------------------------------------------
  def render(self) -> str:
    decls, lines = self.parts()
    return "\n".join([*decls, *lines]) + "\n"

  def parts(self) -> tuple[list[str], list[str]]:
    """(the declarations the function needs: includes, vector types, helpers; the function's lines). Programs that go
    into one source (the fuzzer compiles many per compiler call) share equal declarations."""
    if not self.name_ok(self.name): raise ValueError(f"kernel name {self.name!r} is not {self.ident[0]}")
    verify_linear(self.uops)
    lines = self.function(self.params())
    return [*self.includes(), *self.vtypes.values(), *self.helper_texts()], lines

  @staticmethod
  def nest(header: str, lines: list[str]) -> list[str]:
    """`header {`, then the lines indented by the blocks they open and close, then the braces still open."""
    out, depth = [header], 1
    for ln in lines:
      if ln == "}": depth -= 1
      out.append("  " * depth + ln)
      if ln.endswith("{"): depth += 1
    return out + ["  " * d + "}" for d in range(depth - 1, -1, -1)]

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
      if not self.var_ok(name) or name == self.name:
        raise ValueError(f"{self.name}: variable name {name!r} is not {self.ident[1]} or clashes with a generated name")
      if name in names: raise ValueError(f"{self.name}: two DEFINE_VARs are called {name!r}")
      names.add(name)
      self.r[u] = name
      params.append(f"{self.scalar_type(u.dtype)} {name}")
    return params

  def local_decls(self, qualifier: str = "") -> list[str]:
    """Declarations of local memory: each DEFINE_LOCAL is an array `local<position>`."""
    out = []
    for i, u in enumerate(self.uops):
      if u.op is not Ops.DEFINE_LOCAL: continue
      base: DType = u.dtype.base  # type: ignore[attr-defined]
      self.r[u] = f"local{i}"
      out.append(f"{qualifier}{self.scalar_type(base.scalar())} local{i}[{u.dtype.size * base.count}];")  # type: ignore[attr-defined]
    return out

  def body(self) -> list[str]:
    return [ln for i, u in enumerate(self.uops) if (ln := self.stmt(i, u)) is not None]

  def stmt(self, i: int, u: UOp) -> str | None:
    """The line of one uop (None: it has no line of its own)."""
    op, dt, src = u.op, u.dtype, u.src
    if op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.DEFINE_LOCAL): return None
    if op is Ops.BARRIER: return self.barrier()
    if op is Ops.CONST: self.r[u] = self.literal(u.arg, dt); return None
    if op is Ops.RANGE:
      self.r[u] = f"ridx{i}"
      return f"for ({self.ctype(dt)} ridx{i} = 0; ridx{i} < {self.r[src[0]]}; ridx{i}++) {{"
    if op in (Ops.ENDRANGE, Ops.ENDIF): return "}"
    if op is Ops.IF: return f"if ({self.r[src[0]]}) {{"
    if op is Ops.DEFINE_ACC: return f"{self.decl(u, f'acc{i}', self.ctype(dt))} = {self.r[src[0]]};"
    if op is Ops.ASSIGN:
      self.r[u] = self.r[src[0]]
      return f"{self.r[src[0]]} = {self.r[src[1]]};"
    if op is Ops.LOAD: return self.load(i, u)
    if op is Ops.STORE: return self.store(u)
    if op is Ops.WMMA: return self.wmma(i, u, TENSOR_CORES[u.arg])
    return self.value(i, u)

  def wmma(self, i: int, u: UOp, tc: TensorCore) -> str:
    """The line of a WMMA (a dialect with tensor-core instructions overrides this)."""
    raise ValueError(f"uop {i} (WMMA {tc.name}) cannot be rendered to {self.dialect}")

  def decl(self, u: UOp, name: str, t: str) -> str:
    """Name value u and give the left-hand side of its definition."""
    self.r[u] = name
    return f"{t} {name}"

  def address(self, buf: UOp, idx: UOp) -> str:
    bc = buf.dtype.base.count  # type: ignore[attr-defined]
    return f"{self.r[buf]} + {self.r[idx]}" if bc == 1 else f"{self.r[buf]} + (long long){self.r[idx]} * {bc}"

  def load(self, i: int, u: UOp) -> str:
    lhs = self.decl(u, f"ld{i}", self.ctype(u.dtype))
    name = self.r[u]
    buf, idx, g, a = load_parts(u)   # a trailing BARRIER source only orders the load: the program order already does
    gate, alt = (self.r[g], self.r[a]) if g is not None and a is not None else (None, None)
    if u.dtype.count == 1:  # the conditional reads memory only where the gate is true
      mem = f"{self.r[buf]}[{self.r[idx]}]"
      return f"{lhs} = {gate} ? {mem} : {alt};" if gate else f"{lhs} = {mem};"
    copy = f"{self.memcpy}(&{name}, {self.address(buf, idx)}, sizeof({name}));"
    if gate: return f"{lhs} = {alt}; if ({gate}) {copy}"
    return copy if u in self.kept else f"{lhs}; {copy}"

  def store(self, u: UOp) -> str:
    buf, idx, val = u.src[:3]
    gate = f"if ({self.r[u.src[3]]}) " if len(u.src) == 4 else ""
    if val.dtype.count == 1: return f"{gate}{self.r[buf]}[{self.r[idx]}] = {self.r[val]};"
    # vector values are always named variables (constants are scalars), so they have an address
    return f"{gate}{self.memcpy}({self.address(buf, idx)}, &{self.r[val]}, sizeof({self.r[val]}));"

  def value(self, i: int, u: UOp) -> str:
    op, dt, src = u.op, u.dtype, u.src
    prefix = {Ops.VECTORIZE: "vec", Ops.GEP: "gep", Ops.CAST: "cast", Ops.BITCAST: "cast"}.get(op, "alu")
    t = self.ctype(dt)
    if op is Ops.VECTORIZE: e = self.vec_make(t, [self.r[s] for s in src])
    elif op is Ops.GEP: e = f"{self.r[src[0]]}.v[{u.arg[0]}]"
    elif op is Ops.CAST: e = self.lanes(dt, lambda s: self.cast(s[0], src[0].dtype.scalar(), dt.scalar()), src)
    elif op is Ops.BITCAST: e = self.bitcast(self.r[src[0]], self.ctype(src[0].dtype), t)
    elif op in GroupOp.ALU:
      sdt = (src[1] if op is Ops.WHERE else src[0]).dtype.scalar()
      if op in GroupOp.Transcendental and not dtypes.is_float(sdt): raise ValueError(f"uop {i}: {op.name} needs a float operand")
      e = self.lanes(dt, lambda s: self.alu(op, sdt, s), src)
    else: raise ValueError(f"uop {i} ({op.name}) cannot be rendered to {self.dialect}")
    return f"{self.decl(u, f'{prefix}{i}', t)} = {e};"


class _CProgram(CStyleProgram):
  """C: SPECIALs are loops around the body, BARRIERs and WMMAs split it into phases."""
  total = True
  subst = {"fn": "static inline", "half": "_Float16", "u_of_f": "unsigned int u; __builtin_memcpy(&u, &f, 4);",
           "u_of_r": "unsigned int u; __builtin_memcpy(&u, &r, 4);", "r_of_u": "__builtin_memcpy(&r, &u, 4);", "fabs": "__builtin_fabs",
           "d2h": "(_Float16)rg_d2f_odd(d)", "fma_h": "(double)a * (double)b, (double)c", "fma_bf": "(double)rg_bf2f(a) * (double)rg_bf2f(b)",
           "signf": "__builtin_signbit(a)"}

  def __init__(self, name: str, uops: list[UOp]):
    super().__init__(name, uops)
    self.arrays: dict[str, str] = {}   # array declarations of the kept values, by name
    self.array_of: dict[UOp, str] = {}   # the array of each kept value
    self.lsize = 1                     # work-items per workgroup
    self.sizes: dict[str, int] = {}    # size of each SPECIAL, by name

  def function(self, params: list[str]) -> list[str]:
    loops_g, loops_l, local_decls = self.launch()
    if any(u.op in (Ops.BARRIER, Ops.WMMA) for u in self.uops):
      body = self.phased(loops_l)
      loops_l, local_decls = [], [*local_decls, *self.arrays.values()]
    else: body = self.body()
    return self.nest(f"void {self.name}({', '.join(params) or 'void'}) {{", [*loops_g, *local_decls, *loops_l, *body])

  def launch(self) -> tuple[list[str], list[str], list[str]]:
    """Loops over workgroups, declarations of local memory, loops over work-items."""
    sizes: dict[str, int] = {}
    for i, u in enumerate(self.uops):
      if u.op is not Ops.SPECIAL: continue
      name, size = u.arg
      if sizes.setdefault(name, size) != size: raise ValueError(f"uop {i}: SPECIAL {name} has two sizes ({sizes[name]} and {size})")
      self.r[u] = name
    for d in "012":
      if f"gidx{d}" in sizes and f"idx{d}" in sizes: raise ValueError(f"{self.name}: dimension {d} has both gidx{d} and idx{d}")
    outer = [f"for (int {n} = 0; {n} < {sizes[n]}; {n}++) {{" for d in "210" for n in (f"gidx{d}", f"idx{d}") if n in sizes]
    inner = [f"for (int {n} = 0; {n} < {sizes[n]}; {n}++) {{" for d in "210" for n in (f"lidx{d}",) if n in sizes]
    self.sizes = sizes
    self.lsize = math.prod(sizes.get(f"lidx{d}", 1) for d in "012")
    return outer, inner, self.local_decls()

  def decl(self, u: UOp, name: str, t: str) -> str:
    """Name value u and give the left-hand side of its definition: a declaration, or for a value
    kept across a barrier the work-item's element of its array (declared once per workgroup)."""
    if u not in self.kept: return super().decl(u, name, t)
    self.arrays.setdefault(name, f"{t} {name}[{self.lsize}];")
    self.array_of[u] = name
    self.r[u] = f"{name}[rg_lid]"
    return self.r[u]

  # ---- barriers and WMMAs: the workgroup body in phases -------------------------------------------
  def phased(self, loops_l: list[str]) -> list[str]:
    """The workgroup body of a program with barriers or WMMAs (what goes inside the workgroup loops).

    Each BARRIER ends a phase; a phase is its own set of work-item loops, so all work-items finish
    it before any starts the next. A RANGE or IF containing a barrier ("hoisted") runs in the
    workgroup scope around the phases inside it: its end or condition must be provably uniform
    (built by ALU ops from constants, variables, workgroup ids and hoisted loop indices), and its
    index is one scalar. Those uniform values at the top level of the workgroup body are computed
    in the workgroup scope too. A per-work-item value (accumulators included) defined in one phase
    and used in another is kept in an array indexed by the flat work-item id `rg_lid`.

    A WMMA is a warp collective, so it cuts the body like a barrier: its fragments are kept, and between
    the phases a helper (`wmma_helper`) computes every warp's D from the fragment arrays into the WMMA's
    own array, which the next phase reads."""
    uops = self.uops
    lidx_dims = {n[-1] for n in self.sizes if n.startswith("lidx")}
    hoisted, uniform, kept = plan(self.name, uops, lidx_dims, "the C backend")
    self.kept |= kept
    lid = "0"
    for d in "210":
      if d in lidx_dims: lid = f"lidx{d}" if lid == "0" else f"lidx{d} + {self.sizes[f'lidx{d}']} * ({lid})"
    out: list[str] = []
    cur: list[str] = []
    def flush() -> None:
      if not cur: return
      out.extend(loops_l)
      if self.kept: out.append(f"int rg_lid = {lid};")
      out.extend(cur)
      out.extend("}" for _ in loops_l)
      cur.clear()
    for i, u in enumerate(uops):
      if u.op is Ops.BARRIER:
        flush()
        out.append(f"/* barrier (uop {i}) */")
        continue
      if u.op is Ops.WMMA:
        flush()
        tc = TENSOR_CORES[u.arg]
        self.decl(u, f"wmma{i}", self.ctype(u.dtype))
        frag = [self.array_of[s.src[0] if s.op is Ops.ASSIGN else s] for s in u.src]
        out.append(f"{self.wmma_helper(tc)}({self.lsize}, {', '.join(frag)}, {self.array_of[u]});   /* uop {i} */")
        continue
      wg_scope = u in hoisted or (u.op in (Ops.ENDRANGE, Ops.ENDIF) and u.src[0] in hoisted)
      if wg_scope: flush()
      if (ln := self.stmt(i, u)) is not None: (out if wg_scope or u in uniform else cur).append(ln)
    flush()
    return out

  def wmma_helper(self, tc: TensorCore) -> str:
    """The name of the helper that runs one WMMA of `tc` for every warp of a workgroup, made on first use.

    `helper(n, a, b, c, d)`: n work-items, a/b/c their fragment arrays, d the result's. Per warp, the matrices are
    gathered from the fragments through tables made from the layouts (for each matrix element, the flat fragment
    position lane * elems + e of the first lane holding it), then each element of D is the reference sum: c, plus each
    exact float product in order of k, one float rounding per add (the compiler is run without fp contraction)."""
    name = f"rg_wmma_{tc.name}"
    if name in self.generated: return name
    if tc.dtype_in not in (dtypes.float16, dtypes.bfloat16) or tc.dtype_out != dtypes.float32:
      raise ValueError(f"{self.name}: tensor core {tc.name} ({tc.dtype_in!r} -> {tc.dtype_out!r}) has no C emulation")
    M, N, K = tc.dims
    fa, fb, fc = (self.ctype(d) for d in tc.frag_dtypes)
    ea, eb, ec = tc.a.elems, tc.b.elems, tc.c.elems
    def table(own) -> str: return ", ".join(str(int(x)) for x in own.reshape(-1))
    ia, ib, ic = (table(lay.owners(tc.threads, shape)) for lay, shape in ((tc.a, (M, K)), (tc.b, (K, N)), (tc.c, (M, N))))
    def elem(arr: str, tab: str, e: int) -> str: return f"{arr}[w + {tab}[i] / {e}].v[{tab}[i] % {e}]"
    coverage.path("c:wmma")
    self.generated[name] = "\n".join([
      f"/* WMMA {tc.name}: D ({M}x{N}) = C + A ({M}x{K}) * B ({K}x{N}) for each warp of {tc.threads} work-items (refgrad/target.py) */",
      f"static void {name}(int n, const {fa}* a, const {fb}* b, const {fc}* c, {fc}* d) {{",
      f"  static const unsigned short ia[{M * K}] = {{{ia}}};",
      f"  static const unsigned short ib[{K * N}] = {{{ib}}};",
      f"  static const unsigned short ic[{M * N}] = {{{ic}}};",
      f"  for (int w = 0; w < n; w += {tc.threads}) {{",
      f"    float A[{M * K}], B[{K * N}];",
      f"    for (int i = 0; i < {M * K}; i++) A[i] = {self.widen(elem('a', 'ia', ea), tc.dtype_in)};",
      f"    for (int i = 0; i < {K * N}; i++) B[i] = {self.widen(elem('b', 'ib', eb), tc.dtype_in)};",
      f"    for (int i = 0; i < {M * N}; i++) {{",
      f"      float s = {elem('c', 'ic', ec)};",
      f"      for (int k = 0; k < {K}; k++) s = s + A[i / {N} * {K} + k] * B[k * {N} + i % {N}];",
      f"      {elem('d', 'ic', ec)} = s;",
      "    }",
      "  }",
      "}"])
    return name


class CRenderer(Renderer):
  """Linear program -> one C function (see the module docstring)."""
  device = "CPU"

  def __init__(self, native_transcendentals: bool | None = None, op_overrides: dict[Ops, Callable[[DType, list[str]], str | None]] | None = None):
    """op_overrides (public, docs/backends.md): op -> f(scalar dtype, operand C expressions) returning the C expression of
    one lane of that op, or None to keep the default rendering for that dtype."""
    if native_transcendentals is not None: self.native_transcendentals = native_transcendentals
    self.op_overrides = dict(op_overrides or {})

  def _program(self, name: str, uops: list[UOp]) -> _CProgram:
    prog = _CProgram(name, list(uops))
    if self.op_overrides: prog.overrides = self.op_overrides
    return prog

  def render(self, name: str, uops: list[UOp]) -> str:
    # EXP2/LOG2/SIN that reach the renderer are rendered natively whatever the flag says: the flag only
    # tells the pipeline whether to decompose them first, and a linear program means what it says
    return self._program(name, uops).render()

  def render_parts(self, name: str, uops: list[UOp]) -> tuple[list[str], list[str]]:
    """`render` in two parts, (declarations, function lines), so several programs can share one source."""
    return self._program(name, uops).parts()
