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

Each renderer has a `target` (refgrad/target.py): CUDARenderer's is CUDA (sm_80 class), HIPRenderer's AMD
(gfx1100, RDNA3 wave32; a wave64 arch such as gfx942 gets a copy with warps of 64 and no tensor cores). A program
beyond the target's limits is refused with a ValueError naming the offending uop (`refgrad.target.check_limits`,
the rule emulation shares).

WMMA (tensor cores, the target's own only; another one is a ValueError naming the uop): CUDA's m16n8k16 cores are
inline PTX `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`, each pair of 16-bit fragment elements
packed into one 32-bit register in fragment order (a0 in the low half of the first); AMD's 16x16x16 cores are
`__builtin_amdgcn_wmma_f32_16x16x16_{f16,bf16}_w32` on the builtin's vector types (f16: _Float16 x 16, bf16: short x 16,
their bits; float x 8). The fragment layouts of refgrad/target.py are the hardware's, so the same program gives the
same matrix product. Real tensor cores do not round like the reference (semantics.wmma: one float32 rounding per
add, in order of k): they add products with wider, non-IEEE adders, so WMMA results on real hardware are close to
the reference but not bit-exact; every other op is.
"""
from __future__ import annotations

import dataclasses
import math
import re
import struct

from refgrad.dtype import DType, dtypes
from refgrad.renderer import Renderer
from refgrad.renderer.cstyle import CStyleProgram
from refgrad.target import AMD, CUDA, IDX_BLOCK_SIZE, TensorCore, launch_geometry
from refgrad.uop.ops import Ops, UOp
from refgrad.uop.spec import load_parts

_DIM = "xyz"

# $-placeholders of the shared helper texts (refgrad/renderer/cstyle.py) that are the same in CUDA and HIP
_GPU_SUBST = {"fn": "static __device__ __forceinline__", "u_of_f": "unsigned int u = __float_as_uint(f);",
              "u_of_r": "unsigned int u = __float_as_uint(r);", "r_of_u": "r = __uint_as_float(u);", "fabs": "fabs",
              "fma_bf": "RG_DMUL((double)rg_bf2f(a), (double)rg_bf2f(b))", "signf": "(__float_as_uint(a) >> 31)"}

def _subst(half: str, h2f: str, f2h: str, memcpy: str, dadd: str, dsub: str, dmul: str) -> dict[str, str]:
  """A dialect's placeholders: its half type, half<->float conversions, memcpy and unfused double add/sub/mul (of a, b)."""
  return {**_GPU_SUBST, "half": half, "memcpy": memcpy, "dadd": dadd, "dsub": dsub, "dmul": dmul, "d2h": f"{f2h}(rg_d2f_odd(d))",
          "fma_h": f"RG_DMUL((double){h2f}(a), (double){h2f}(b)), (double){h2f}(c)"}

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


class _GPUProgram(CStyleProgram):
  """CUDA/HIP (subclasses): one kernel, launch indices from blockIdx/threadIdx, `__shared__` locals, `__syncthreads()`."""
  family, bools, bool_max_cast, builtin = "gpu", ("false", "true"), True, ""
  ident = ("a usable identifier", "an identifier")
  prelude: tuple[str, ...] = ()  # lines before everything else

  def __init__(self, name: str, uops: list[UOp], renderer: GPURenderer):
    super().__init__(name, uops)
    self.ren = renderer
    self.dialect = type(renderer).__name__

  def name_ok(self, name: str) -> bool: return _ident_ok(name)
  def var_ok(self, name: str) -> bool: return _ident_ok(name)
  def includes(self) -> list[str]: return list(self.prelude)
  def vtype_decl(self, tname: str, elem: str, n: int) -> str: return f"struct {tname} {{ {elem} v[{n}]; }};"
  def vec_make(self, t: str, parts: list[str]) -> str: return f"{t}{{{{{', '.join(parts)}}}}}"
  def bitcast(self, x: str, src_t: str, t: str) -> str: return f"{self.use('rg_bitcast')}<{t}>({x})"
  def float_text(self, fv: float, dt: DType) -> str:
    if dt == dtypes.float64:
      if math.isnan(fv) or math.isinf(fv):
        return f"__longlong_as_double(0x{0x7FF8000000000000 if math.isnan(fv) else 0xFFF0000000000000 if fv < 0 else 0x7FF0000000000000:016x}ll)"
      return fv.hex()
    if math.isnan(fv) or math.isinf(fv): return f"__int_as_float(0x{0x7FC00000 if math.isnan(fv) else 0xFF800000 if fv < 0 else 0x7F800000:08x})"
    return fv.hex() + "f"
  def cast_to_half(self, x: str) -> str: return self.half_narrow(x)
  def bool_to_half(self, x: str) -> str: return self.half_narrow(f"({x} ? 1.0f : 0.0f)")
  def half_nonzero(self, x: str) -> str: return f"({self.half_widen(x)} != 0)"
  def barrier(self) -> str | None: return "__syncthreads();"

  def function(self, params: list[str]) -> list[str]:
    _, block, head = self.launch()
    return self.nest(f'extern "C" __global__ void __launch_bounds__({math.prod(block)}) {self.name}({", ".join(params)}) {{', [*head, *self.body()])

  def launch(self) -> tuple[tuple[int, int, int], tuple[int, int, int], list[str]]:
    """Grid and block (checked against the limits), then the lines that define the launch indices and local memory."""
    grid, block, specials = launch_geometry(self.uops, self.ren.target, self.ren.idx_block_size)
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
    return grid, block, [*head, *self.local_decls("__shared__ ")]

  def wmma(self, i: int, u: UOp, tc: TensorCore) -> str:
    # the launch check (`launch`, before the body) refused tensor cores the target lacks and partial warps
    a, b, c = (self.r[s] for s in u.src)
    return f"{self.decl(u, f'wmma{i}', self.ctype(u.dtype))} = {self.wmma_helper(i, tc)}({a}, {b}, {c});"

  def wmma_helper(self, i: int, tc: TensorCore) -> str:
    """The name of the device function `D = helper(a, b, c)` that runs the tensor core's instruction, made on first use."""
    name = f"rg_wmma_{tc.name}"
    if name in self.generated: return name
    if tc.dtype_in not in (dtypes.float16, dtypes.bfloat16) or tc.dtype_out != dtypes.float32:
      raise ValueError(f"uop {i} (WMMA {tc.name}): {tc.dtype_in!r} -> {tc.dtype_out!r} has no {self.dialect} instruction here")
    fa, fb, fc = (self.ctype(d) for d in tc.frag_dtypes)
    self.generated[name] = "\n".join([f"static __device__ __forceinline__ {fc} {name}({fa} a, {fb} b, {fc} c) {{",
                                       f"  {fc} d;", *self.wmma_body(i, tc), "  return d;", "}"])
    return name

  def wmma_body(self, i: int, tc: TensorCore) -> list[str]:
    """The lines that set `d` from the fragments `a`, `b`, `c` with the tensor core's instruction."""
    raise ValueError(f"uop {i} (WMMA {tc.name}): {self.dialect} has no tensor-core instruction for it")


def _multiple(u: UOp, memo: dict[UOp, int]) -> int:
  """A power of two the int value u is provably a multiple of (1 when nothing is known; wrap-around keeps it)."""
  if u in memo: return memo[u]
  m = 1
  if u.op is Ops.CONST and isinstance(u.arg, int): m = (u.arg & -u.arg) if u.arg else 1 << 30
  elif u.op is Ops.MUL: m = _multiple(u.src[0], memo) * _multiple(u.src[1], memo)
  elif u.op is Ops.ADD: m = min(_multiple(u.src[0], memo), _multiple(u.src[1], memo))
  elif u.op is Ops.SHL and u.src[1].op is Ops.CONST and isinstance(u.src[1].arg, int) and 0 <= u.src[1].arg < 31:
    m = _multiple(u.src[0], memo) << u.src[1].arg
  memo[u] = m = min(m, 1 << 30)
  return m


_WORD = {16: "uint4", 8: "uint2", 4: "unsigned int"}   # CUDA's aligned vector types by size: one ld/st.global.v4/.v2 of .b32


class _CUDAProgram(_GPUProgram):
  """Vector LOAD/STORE of a global buffer at an index provably a multiple of the lane count (the buffers' bases are
  aligned, as refgrad's PTX renderer also assumes) copy through an aligned word type (uint4 / uint2 / unsigned int):
  nvcc then emits one vector access instead of a byte per byte memcpy (4 ld.u8 + 3 prmt per float). Any other index keeps
  the memcpy, which assumes no alignment. The bits are the same either way."""
  types = {**CStyleProgram.types, "bool": "bool", "half": "__half"}

  def aligned_word(self, buf: UOp, idx: UOp, dt: DType) -> str | None:
    """The word type for a vector access of dt at buf[idx], or None where alignment is not proved."""
    base: DType = buf.dtype.base   # type: ignore[attr-defined]
    word = _WORD.get(dt.itemsize)
    if word is None or dt.count < 2 or base.count != 1 or buf.op is not Ops.DEFINE_GLOBAL: return None
    if not hasattr(self, "_mult"): self._mult: dict[UOp, int] = {}
    return word if _multiple(idx, self._mult) % dt.count == 0 else None

  def load(self, i: int, u: UOp) -> str:
    buf, idx, g, a = load_parts(u)
    word = self.aligned_word(buf, idx, u.dtype)
    if word is None: return super().load(i, u)
    lhs = self.decl(u, f"ld{i}", self.ctype(u.dtype))
    name = self.r[u]
    copy = f"{{ {word} w_ = *(const {word}*)({self.address(buf, idx)}); memcpy(&{name}, &w_, sizeof({name})); }}"
    if g is not None and a is not None: return f"{lhs} = {self.r[a]}; if ({self.r[g]}) {copy}"
    return copy if u in self.kept else f"{lhs}; {copy}"

  def store(self, u: UOp) -> str:
    buf, idx, val = u.src[:3]
    word = self.aligned_word(buf, idx, val.dtype)
    if word is None: return super().store(u)
    gate = f"if ({self.r[u.src[3]]}) " if len(u.src) == 4 else ""
    return f"{gate}{{ {word} w_; memcpy(&w_, &{self.r[val]}, sizeof(w_)); *({word}*)({self.address(buf, idx)}) = w_; }}"
  memcpy = "memcpy"
  subst = _subst("__half", "__half2float", "__float2half_rn", memcpy, "__dadd_rn(a, b)", "__dsub_rn(a, b)", "__dmul_rn(a, b)")
  def includes(self) -> list[str]: return ["#include <cuda_fp16.h>"] if self.uses_half else []   # only __half needs a header
  def half_widen(self, x: str) -> str: self.uses_half = True; return f"__half2float({x})"
  def half_narrow(self, x: str) -> str: self.uses_half = True; return f"__float2half_rn({x})"
  def half_literal(self, fv: float) -> str:
    return f"__ushort_as_half((unsigned short)0x{0x7E00 if math.isnan(fv) else struct.unpack('<H', struct.pack('<e', fv))[0]:04x})"
  # the _rn intrinsics round once and are never contracted into an fma by nvcc, whatever --fmad says
  def fbin(self, op: Ops, suf: str, a: str, b: str) -> str:
    return f"__{'d' if suf == '' else 'f'}{'add' if op is Ops.ADD else 'mul'}_rn({a}, {b})"
  def funary(self, op: Ops, suf: str, a: str) -> str:
    return f"__{'d' if suf == '' else 'f'}{'rcp' if op is Ops.RECIP else 'sqrt'}_rn({a})"

  def wmma_body(self, i: int, tc: TensorCore) -> list[str]:
    # one mma.sync per warp; 16-bit fragment elements packed in pairs into 32-bit registers, the first in the low half
    M, N, K = tc.dims
    half = tc.dtype_in == dtypes.float16
    ty = "f16" if half else "bf16"
    def bits(x: str) -> str: return f"(unsigned int){'__half_as_ushort(' + x + ')' if half else x}"
    def regs(x: str, n: int) -> list[str]: return [f"{bits(f'{x}.v[{j}]')} | ({bits(f'{x}.v[{j + 1}]')} << 16)" for j in range(0, n, 2)]
    ra, rb = regs("a", tc.a.elems), regs("b", tc.b.elems)
    nc = tc.c.elems
    ops, k = [], 0
    for n in (nc, len(ra), len(rb), nc): ops.append("{" + ", ".join(f"%{k + j}" for j in range(n)) + "}"); k += n
    q = '"'
    return [f'  asm volatile("mma.sync.aligned.m{M}n{N}k{K}.row.col.f32.{ty}.{ty}.f32 {", ".join(ops)};"',
            f'    : {", ".join(f"{q}=f{q}(d.v[{j}])" for j in range(nc))}',
            f'    : {", ".join(f"{q}r{q}({r})" for r in ra + rb)},',
            f'      {", ".join(f"{q}f{q}(c.v[{j}])" for j in range(nc))});']


class _HIPProgram(_GPUProgram):
  # C's spelling of half conversions and literals, plain float operators (the pragma forbids contraction; division and
  # sqrt are correctly rounded in HIP's default mode)
  prelude = ("#include <hip/hip_runtime.h>", "#pragma clang fp contract(off)")
  types = {**CStyleProgram.types, "bool": "bool"}
  memcpy = "__builtin_memcpy"
  subst = _subst("_Float16", "(float)", "(_Float16)", memcpy, "((a) + (b))", "((a) - (b))", "((a) * (b))")

  def wmma_body(self, i: int, tc: TensorCore) -> list[str]:
    # one v_wmma per wave (gfx11); the fragment structs and the builtin's vectors hold the same elements in the same
    # order, so the bytes are copied
    M, N, K = tc.dims
    half = tc.dtype_in == dtypes.float16
    el = "_Float16" if half else "short"   # the builtin takes bfloat16 as the bits in shorts
    return [f"  typedef {el} va_t __attribute__((ext_vector_type({tc.a.elems})));",
            f"  typedef {el} vb_t __attribute__((ext_vector_type({tc.b.elems})));",
            f"  typedef float vc_t __attribute__((ext_vector_type({tc.c.elems})));",
            "  va_t va; vb_t vb; vc_t vc;",
            "  __builtin_memcpy(&va, &a, sizeof(va)); __builtin_memcpy(&vb, &b, sizeof(vb)); __builtin_memcpy(&vc, &c, sizeof(vc));",
            f"  vc_t vd = __builtin_amdgcn_wmma_f32_{M}x{N}x{K}_{'f16' if half else 'bf16'}_w{tc.threads}(va, vb, vc);",
            "  __builtin_memcpy(&d, &vd, sizeof(d));"]


class GPURenderer(Renderer):
  """Shared by CUDARenderer and HIPRenderer: the target, the launch geometry, the program class."""
  idx_block_size: int = IDX_BLOCK_SIZE   # work-items per block along x for idxD launches (programs without workgroups)
  _program: type[_GPUProgram]

  def __init__(self, native_transcendentals: bool | None = None):
    if native_transcendentals is not None: self.native_transcendentals = native_transcendentals

  def launch_dims(self, uops: list[UOp]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid in workgroups, block in work-items) to launch the rendered kernel with; checked against the limits.
    The rendered text also runs correctly under any other launch whose block fits __launch_bounds__ and that covers
    each idxD size (e.g. ProgramSpec's: grid = the sizes, block = 1)."""
    grid, block, _ = launch_geometry(list(uops), self.target, self.idx_block_size)
    return grid, block

  def render(self, name: str, uops: list[UOp]) -> str:
    # EXP2/LOG2/SIN that reach the renderer are rendered natively; the flag only tells the pipeline whether to decompose first
    return self._program(name, list(uops), self).render()

  def render_parts(self, name: str, uops: list[UOp]) -> tuple[list[str], list[str]]:
    """`render` in two parts, (declarations, function lines), so several kernels can share one source (batched nvcc)."""
    return self._program(name, list(uops), self).parts()


class CUDARenderer(GPURenderer):
  """Linear program -> CUDA C (compiles with `nvcc --ptx -arch=sm_XX` or NVRTC; see the module docstring)."""
  device, target, _program = "NV", CUDA, _CUDAProgram

  def __init__(self, arch: str = "sm_80", native_transcendentals: bool | None = None):
    super().__init__(native_transcendentals)
    if not (m := re.fullmatch(r"sm_(\d+)[af]?", arch)): raise ValueError(f"CUDA arch {arch!r} is not of the form sm_XX")
    self.arch = arch
    # mma.sync m16n8k16 (f16 and bf16) needs sm_80: an older arch has no tensor cores for this renderer
    if int(m.group(1)) < 80: self.target = dataclasses.replace(CUDA, tensor_cores=())


class HIPRenderer(GPURenderer):
  """Linear program -> HIP C (hipcc/hiprtc with `-ffp-contract=off`; see the module docstring)."""
  device, target, _program = "AMD", AMD, _HIPProgram

  def __init__(self, arch: str = "gfx1100", native_transcendentals: bool | None = None):
    super().__init__(native_transcendentals)
    if not re.fullmatch(r"gfx[0-9a-f]+", arch): raise ValueError(f"AMD arch {arch!r} is not of the form gfxNNN")
    self.arch = arch
    # RDNA (gfx10xx and later: four digits) runs HIP compute as wave32 by default, GCN/CDNA (gfx9xx and older) as wave64;
    # the wave32 16x16x16 WMMA builtins are RDNA3's (gfx11xx)
    if len(arch) < 7: self.target = dataclasses.replace(AMD, warp_size=64, tensor_cores=())
    elif not arch.startswith("gfx11"): self.target = dataclasses.replace(AMD, tensor_cores=())
