"""CUDA C and HIP C renderers on hand-built linear programs: every ALU op x dtype the spec allows, casts,
bitcasts, gated memory, vectors, locals + barriers, loops with accumulators, variables. The text is checked
structurally (signature, launch indices, barriers, shared memory, round-to-nearest intrinsics, no contractible
float a*b+c, fma for MULACC), the CUDA text is compiled with `nvcc --ptx` when nvcc is on PATH, both
dialects are run on the host through a small shim and compared with the reference bit for bit, and the
limits of each target are enforced with errors that name the uop."""
from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from refgrad.dtype import DType, dtypes
from refgrad.renderer import Renderer
from refgrad.renderer.gpu import CUDARenderer, GPURenderer, HIPRenderer
from refgrad.target import AMD, CPU, CUDA
from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import SpecError
from tests.refgrad import test_cpu as cpu_tests  # input generators and bit-exact comparison shared with the CPU backend's tests

i32, F = dtypes.int32, dtypes.float32
RENDERERS = [CUDARenderer(), HIPRenderer()]
RIDS = ["cuda", "hip"]


# ---- builders ---------------------------------------------------------------------------------

def lin(*stores: UOp, first: tuple[UOp, ...] = ()) -> list[UOp]:
  """A straight-line program (no blocks): `first`, then the stores' graph in dependency order."""
  return list(dict.fromkeys([*first, *(u for u in UOp(Ops.SINK, dtypes.void, stores).toposort if u.op is not Ops.SINK)]))

def ops_for(dt: DType) -> list[Ops]:
  if dt == dtypes.bool: return [Ops.XOR, Ops.OR, Ops.AND, Ops.CMPLT, Ops.CMPNE, Ops.MAX, Ops.WHERE]
  if dtypes.is_int(dt): return [Ops.ADD, Ops.MUL, Ops.NEG, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.XOR, Ops.OR, Ops.AND,
                                Ops.SHL, Ops.SHR, Ops.WHERE]
  return [Ops.ADD, Ops.MUL, Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.WHERE, Ops.MULACC]

def alu_program(dt: DType, ops: list[Ops] | None = None, n: int = 1000) -> list[UOp]:
  """Every op of `ops` (default: all the spec allows on dt) on loaded operands, each stored to its own buffer."""
  idx = UOp.special("idx0", n)
  a, b, c = (UOp.define_global(j, dt).load(idx) for j in range(3))
  cond = UOp.define_global(3, dtypes.bool).load(idx)
  stores = []
  for j, op in enumerate(ops or ops_for(dt)):
    srcs = (a,) if op in GroupOp.Unary else (cond, a, b) if op is Ops.WHERE else (a, b, c) if op is Ops.MULACC else (a, b)
    v = UOp(op, dtypes.bool if op in GroupOp.Comparison else dt, srcs)
    stores.append(UOp.define_global(4 + j, v.dtype).store(idx, v))
  return lin(*stores, first=tuple(x.src[0] for x in (a, b, c, cond)))

def mul_add_program(dt: DType) -> list[UOp]:
  """a*b+c as two ops: must stay two roundings (no contraction into an fma)."""
  idx = UOp.special("idx0", 64)
  a, b, c = (UOp.define_global(j, dt).load(idx) for j in range(3))
  return lin(UOp.define_global(3, dt).store(idx, a * b + c), UOp.define_global(4, dt).store(idx, c - a * b))

def cast_program(src: DType) -> list[UOp]:
  idx = UOp.special("idx0", 512)
  dsts = [d for d in dtypes.all if d != src]
  return lin(*(UOp.define_global(len(dsts) + j, d).store(idx, UOp.define_global(j, src).load(idx).cast(d)) for j, d in enumerate(dsts)))

def bitcast_program(size: int) -> list[UOp]:
  pairs = [(s, d) for s in dtypes.all for d in dtypes.all if s != d and s.itemsize == d.itemsize == size and dtypes.bool not in (s, d)]
  if size == 1: pairs.append((dtypes.bool, dtypes.uint8))
  idx = UOp.special("idx0", 100)
  return lin(*(UOp.define_global(len(pairs) + j, d).store(idx, UOp.define_global(j, s).load(idx).bitcast(d)) for j, (s, d) in enumerate(pairs)))

def transcendental_program(dt: DType) -> list[UOp]:
  idx = UOp.special("idx0", 100)
  ld = UOp.define_global(0, dt).load(idx)
  return lin(*(UOp.define_global(j + 1, dt).store(idx, UOp(op, dt, (ld,))) for j, op in enumerate((Ops.EXP2, Ops.LOG2, Ops.SIN))))

def constants_program() -> list[UOp]:
  """Special float constants of every float dtype, stored as they are."""
  idx = UOp.special("idx0", 1)
  stores = []
  for j, dt in enumerate(dtypes.floats):
    for k, v in enumerate((math.inf, -math.inf, math.nan, -0.0, 1.5, 2.0 ** -24 if dt != dtypes.bfloat16 else 2.0 ** -133)):
      stores.append(UOp.define_global(j, dt).store(idx + k, UOp.const(dt, v)))
  ints = [(dtypes.int64, -2 ** 63), (dtypes.uint64, 2 ** 64 - 1), (dtypes.int32, -2 ** 31), (dtypes.uint32, 2 ** 32 - 1), (dtypes.int8, -128),
          (dtypes.bool, True)]
  for j, (dt, v) in enumerate(ints): stores.append(UOp.define_global(4 + j, dt).store(idx, UOp.const(dt, v)))
  return lin(*stores)

def float4_program() -> list[UOp]:
  f4, n = F.vec(4), 300
  idx = UOp.special("idx0", n)
  ga, gb, gc = UOp.define_global(0, F), UOp.define_global(1, f4), UOp.define_global(2, F)
  va = ga.load(idx * 4, dtype=f4)                                   # 4 consecutive floats of a scalar buffer
  vb = gb.load(idx)                                                 # one element of a float4 buffer
  vc = UOp(Ops.VECTORIZE, f4, tuple(gc.load(idx * 4 + k) for k in range(4)))
  results = [va + vb, va * vb, va.maximum(vb), UOp(Ops.MULACC, f4, (va, vb, vc)), va.alu(Ops.RECIP), (va < vb).where(vc, va),
             va.cast(dtypes.float16.vec(4)), vb.cast(dtypes.bfloat16.vec(4)), va.bitcast(dtypes.uint32.vec(4)), vc.cast(dtypes.bool.vec(4))]
  stores = [UOp.define_global(3 + j, v.dtype.scalar()).store(idx * 4, v) for j, v in enumerate(results)]
  stores.append(UOp.define_global(3 + len(results), F).store(idx, (va + vb).gep(2)))
  stores.append(UOp.define_global(4 + len(results), f4).store(idx, UOp(Ops.MULACC, f4, (va, vb, vc))))
  return lin(*stores)

def small_vector_program(dt: DType) -> list[UOp]:
  s = dt.scalar()
  idx = UOp.special("idx0", 200)
  va, vb, vc = (UOp.define_global(j, dt).load(idx) for j in range(3))
  if dtypes.is_float(s): vals = [va + vb, UOp(Ops.MULACC, dt, (va, vb, vc)), va.maximum(vb), va.alu(Ops.SQRT)]
  elif s == dtypes.bool: vals = [va ^ vb, va & vb, va.maximum(vb)]
  else: vals = [va + vb, va * vb, va << vb, va >> vb, -va]
  stores = [UOp.define_global(3 + j, dt).store(idx, v) for j, v in enumerate(vals)]
  stores.append(UOp.define_global(3 + len(vals), dtypes.bool.vec(dt.count)).store(idx, va.ne(vb)))
  return lin(*stores, first=tuple(x.src[0] for x in (va, vb, vc)))

def gated_program() -> list[UOp]:
  n, valid, off = 64, 40, 24
  idx = UOp.special("idx0", n)
  gate = idx < valid
  ga, g_out, g_gated = UOp.define_global(0, i32, valid + off), UOp.define_global(1, i32), UOp.define_global(2, i32)
  ld = ga.load(idx + off, gate, alt=-5)
  f4 = F.vec(4)
  gv, gv_out = UOp.define_global(3, F, 4 * valid), UOp.define_global(4, F)
  vld = gv.load(idx * 4, gate, UOp.const(f4, 2.5), dtype=f4)
  return lin(g_out.store(idx, ld), g_gated.store(idx, ld * 2, gate), gv_out.store(idx * 4, vld), gv_out.store(idx * 4 + 256, vld, gate))

def vars_program() -> list[UOp]:
  n = 32
  nv, big = UOp.variable("n", 0, n), UOp.variable("big", 0, 2 ** 62, dtypes.int64)
  idx = UOp.special("idx0", n)
  g0, g1, g2 = UOp.define_global(0, i32), UOp.define_global(1, i32), UOp.define_global(2, dtypes.int64)
  return lin(g1.store(idx, g0.load(idx) * nv, idx < nv), g2.store(idx, idx.cast(dtypes.int64) + big))

def reduce_program() -> list[UOp]:
  """out[row] = sum of a row (RANGE + DEFINE_ACC/ASSIGN); nested: max over j of a reduction over k."""
  rows, K, J = 6, 37, 3
  ga, g_sum, g_max = UOp.define_global(0, F), UOp.define_global(1, F), UOp.define_global(2, F)
  row = UOp.special("idx0", rows)
  r = UOp.range(K, 1)
  acc = UOp(Ops.DEFINE_ACC, F, (UOp.const(F, 0.0), r), (0,))
  kc = UOp.const(i32, K)
  base = row * kc
  addr = base + r
  ld = ga.load(addr)
  new = acc + ld
  asg = UOp(Ops.ASSIGN, F, (acc, new))
  st_sum = g_sum.store(row, asg)
  j, r2 = UOp.range(J, 2), UOp.range(K, 3)
  ninf = UOp.const(F, -math.inf)
  acc2 = UOp(Ops.DEFINE_ACC, F, (ninf, r2), (1,))
  jf = j.cast(F)
  addr2 = base + r2
  ld2 = ga.load(addr2)
  prod = ld2 * jf
  mx = acc2.maximum(prod)
  asg2 = UOp(Ops.ASSIGN, F, (acc2, mx))
  jc = UOp.const(i32, J)
  rj = row * jc
  o_idx = rj + j
  uops = [ga, g_sum, g_max, row, UOp.const(F, 0.0), kc, base, acc, r.src[0], r, addr, ld, new, asg, UOp(Ops.ENDRANGE, dtypes.void, (r,)), st_sum,
          ninf, jc, j, acc2, r2, jf, addr2, ld2, prod, mx, asg2, UOp(Ops.ENDRANGE, dtypes.void, (r2,)), rj, o_idx, g_max.store(o_idx, asg2),
          UOp(Ops.ENDRANGE, dtypes.void, (j,))]
  return list(dict.fromkeys(uops))

def vector_acc_program() -> list[UOp]:
  f4 = F.vec(4)
  ga, gout = UOp.define_global(0, f4), UOp.define_global(1, f4)
  nv = UOp.variable("n", 1, 20)
  r = UOp(Ops.RANGE, i32, (nv,), 0)
  init = UOp.const(f4.scalar(), 0.5)
  vinit = UOp(Ops.VECTORIZE, f4, (init,) * 4)
  acc = UOp(Ops.DEFINE_ACC, f4, (vinit, r), (0,))
  ld = ga.load(r)
  asg = UOp(Ops.ASSIGN, f4, (acc, acc + ld))
  zero = UOp.const(i32, 0)
  return [ga, gout, nv, init, vinit, acc, r, ld, acc + ld, asg, UOp(Ops.ENDRANGE, dtypes.void, (r,)), zero, gout.store(zero, asg)]

specials_program = cpu_tests.specials_program

def locals_program(G: int = 4, L: int = 64, dt: DType = F, extra_local: int = 0) -> list[UOp]:
  """Each workgroup stages its slice in local memory, waits at a barrier, then reads its neighbour's element."""
  gi, li = UOp.special("gidx0", G), UOp.special("lidx0", L)
  loc = UOp(Ops.DEFINE_LOCAL, dt.ptr(L, local=True), (), "temp0")
  ga, gout = UOp.define_global(0, dt), UOp.define_global(1, dt)
  gid = gi * L + li
  st_local = loc.store(li, ga.load(gid))
  uops = lin(st_local)
  if extra_local: uops.insert(0, UOp(Ops.DEFINE_LOCAL, dtypes.uint8.ptr(extra_local, local=True), (), "temp1"))
  bar = UOp(Ops.BARRIER, dtypes.void, (st_local,))
  nb = (li + 1) % L
  st_out = gout.store(gid, loc.load(nb))
  return [*uops, bar, *[u for u in lin(st_out) if u not in set(uops)]]

def local_vector_program() -> list[UOp]:
  """A float4 local buffer and two barriers (write, sync, read back reversed, sync, write again)."""
  f4 = F.vec(4)
  gi, li = UOp.special("gidx0", 8), UOp.special("lidx0", 32)
  loc = UOp(Ops.DEFINE_LOCAL, f4.ptr(32, local=True), (), "temp0")
  ga, gout = UOp.define_global(0, F), UOp.define_global(1, F)
  gid = gi * 32 + li
  v = ga.load(gid * 4, dtype=f4)
  st1 = loc.store(li, v)
  uops = lin(st1)
  b1 = UOp(Ops.BARRIER, dtypes.void, (st1,))
  back = loc.load(31 - li)
  st2 = gout.store(gid * 4, back)
  uops2 = [*uops, b1, *[u for u in lin(st2) if u not in set(uops)]]
  b2 = UOp(Ops.BARRIER, dtypes.void, (st2,))
  st3 = loc.store(li, back * back)
  return [*uops2, b2, *[u for u in lin(st3) if u not in set(uops2)]]

PROGRAMS: dict[str, Callable[[], list[UOp]]] = {
  **{f"alu_{d.name}": (lambda d=d: alu_program(d)) for d in dtypes.all},
  **{f"muladd_{d.name}": (lambda d=d: mul_add_program(d)) for d in dtypes.floats},
  **{f"cast_{d.name}": (lambda d=d: cast_program(d)) for d in dtypes.all},
  **{f"bitcast{s}": (lambda s=s: bitcast_program(s)) for s in (1, 2, 4, 8)},
  **{f"transc_{d.name}": (lambda d=d: transcendental_program(d)) for d in dtypes.floats},
  **{f"vec_{d.scalar().name}{d.count}": (lambda d=d: small_vector_program(d))
     for d in (dtypes.float16.vec(2), dtypes.bfloat16.vec(2), dtypes.int8.vec(3), dtypes.uint64.vec(2), dtypes.bool.vec(3), dtypes.float64.vec(2))},
  "consts": constants_program, "vec_float4": float4_program, "gated": gated_program, "vars": vars_program, "reduce": reduce_program,
  "vacc": vector_acc_program, "specials": specials_program, "locals": locals_program, "locals_half": lambda: locals_program(dt=dtypes.float16),
  "local_vec": local_vector_program,
}

def body(src: str) -> list[str]:
  """The kernel's lines (after the signature), stripped."""
  lines = src.splitlines()
  at = next(i for i, ln in enumerate(lines) if ln.startswith('extern "C"'))
  return [ln.strip() for ln in lines[at + 1:]]

_FLOAT_VALUE = re.compile(r"^(float|double|__half|_Float16|rg_(float|double|half)x\d+) alu\d+ = ")


# ---- every program renders; the signature and launch ------------------------------------------

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_program_renders_one_kernel(ren: GPURenderer, name: str):
  src = ren.render(name, PROGRAMS[name]())
  sigs = [ln for ln in src.splitlines() if "__global__" in ln]
  assert len(sigs) == 1 and sigs[0].startswith('extern "C" __global__ void __launch_bounds__(') and f") {name}(" in sigs[0], sigs
  assert src.count("{") == src.count("}"), "unbalanced braces"
  if isinstance(ren, HIPRenderer):
    assert src.startswith("#include <hip/hip_runtime.h>\n#pragma clang fp contract(off)\n")
    assert "__half" not in src and "_rn(" not in src.replace("_rn(a, b)", ""), "HIP uses _Float16 and plain operators"
  else:
    assert "hip" not in src and "_Float16" not in src and "#pragma" not in src
    # no float ADD/MUL is a bare operator nvcc could contract with a neighbour into an fma
    bad = [ln for ln in body(src) if _FLOAT_VALUE.match(ln) and re.search(r" [+*] ", ln)]
    assert not bad, bad

def test_every_non_transcendental_alu_op_is_covered():
  assert set().union(*(ops_for(d) for d in dtypes.all)) == GroupOp.ALU - GroupOp.Transcendental

def test_renderer_interface_and_targets():
  for r, dev in ((CUDARenderer(), "NV"), (HIPRenderer(), "AMD")):
    assert isinstance(r, Renderer) and r.device == dev and r.native_transcendentals is False
  assert CUDARenderer(native_transcendentals=True).native_transcendentals is True
  assert Renderer.target is CPU and not hasattr(CUDARenderer(), "limits")
  c = CUDARenderer().target
  assert (c.max_threads_per_block, c.max_block_dims, c.max_grid_dims, c.shared_memory_per_block, c.warp_size) == \
    (1024, (1024, 1024, 64), (2 ** 31 - 1, 65535, 65535), 48 * 1024, 32) and c is CUDA and c.name == "CUDA"
  h = HIPRenderer().target
  assert (h.max_threads_per_block, h.shared_memory_per_block, h.warp_size) == (1024, 64 * 1024, 32) and h is AMD and HIPRenderer().arch == "gfx1100"
  # wave64 (GCN/CDNA): AMD's limits with warps of 64 and no tensor cores; RDNA without WMMA (gfx10) and CUDA before sm_80 have none either
  w64 = HIPRenderer("gfx90a").target
  assert w64.warp_size == 64 and w64.tensor_cores == () and w64.shared_memory_per_block == AMD.shared_memory_per_block and w64.name == "AMD"
  assert HIPRenderer("gfx1100").target is AMD and HIPRenderer("gfx1030").target.tensor_cores == () and HIPRenderer("gfx1030").target.warp_size == 32
  assert CUDARenderer("sm_75").target.tensor_cores == () and CUDARenderer("sm_90").target is CUDA
  with pytest.raises(ValueError, match="sm_XX"): CUDARenderer("compute_80x")
  with pytest.raises(ValueError, match="gfxNNN"): HIPRenderer("sm_80")

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_signature_buffers_then_variables(ren: GPURenderer):
  src = ren.render("vars", vars_program())
  assert 'extern "C" __global__ void __launch_bounds__(32) vars(int* data0, int* data1, long long* data2, int n, long long big) {' in src
  half = ren.render("h", alu_program(dtypes.float16, [Ops.ADD]))
  assert f"vars({'__half' if isinstance(ren, CUDARenderer) else '_Float16'}* data0" in half.replace("h(", "vars(")
  bf = ren.render("b", alu_program(dtypes.bfloat16, [Ops.ADD]))
  assert "b(unsigned short* data0, unsigned short* data1, unsigned short* data2, bool* data3, unsigned short* data4)" in bf

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_gidx_lidx_map_to_block_and_thread_indices(ren: GPURenderer):
  uops = specials_program()
  src = ren.render("specials", uops)
  lines = body(src)
  for d, ax in enumerate("xyz"):
    assert f"const int gidx{d} = (int)blockIdx.{ax};" in lines and f"const int lidx{d} = (int)threadIdx.{ax};" in lines
  assert "__launch_bounds__(8)" in src and "if (" in src and "blockDim" not in src
  assert ren.launch_dims(uops) == ((3, 2, 2), (4, 2, 1))

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_idx_is_a_guarded_global_index(ren: GPURenderer):
  src = ren.render("k", alu_program(i32, [Ops.ADD], n=1000))
  lines = body(src)
  at = lines.index("const unsigned int idx0_u = blockIdx.x * blockDim.x + threadIdx.x;")
  assert lines[at + 1:at + 3] == ["if (idx0_u >= 1000u) return;", "const int idx0 = (int)idx0_u;"]
  assert "__launch_bounds__(256)" in src
  assert ren.launch_dims(alu_program(i32, [Ops.ADD], n=1000)) == ((4, 1, 1), (256, 1, 1))
  assert ren.launch_dims(alu_program(i32, [Ops.ADD], n=100)) == ((1, 1, 1), (100, 1, 1))
  idx1 = UOp.special("idx1", 70000)
  g = UOp.define_global(0, i32)
  with pytest.raises(ValueError, match=r"uop 1 \(SPECIAL idx1, size 70000\): 70000 workgroups in dimension y exceed .*65535"):
    ren.render("k", lin(g.store(idx1, idx1)))


# ---- float ops: round-to-nearest, no contraction, fma only for MULACC ----------------------------

@pytest.mark.parametrize("dt", [F, dtypes.float64], ids=lambda d: d.name)
def test_cuda_float_ops_use_rn_intrinsics(dt: DType):
  src = CUDARenderer().render("k", alu_program(dt))
  p = "f" if dt == F else "d"
  for fn in ("add", "mul", "rcp", "sqrt"): assert f"__{p}{fn}_rn(" in src, fn
  assert f"{'fmaf' if dt == F else 'fma'}(ld" in src and ("rg_maxf(" if dt == F else "rg_maxd(") in src
  src = CUDARenderer().render("k", mul_add_program(dt))
  muls, adds = (ln for ln in body(src) if f"__{p}mul_rn(" in ln), [ln for ln in body(src) if f"__{p}add_rn(" in ln]
  assert next(muls) and len(adds) == 2 and "fma" not in src, "a*b+c stays a MUL and an ADD"

def test_hip_float_ops_are_plain_operators_without_contraction():
  src = HIPRenderer().render("k", alu_program(F))
  assert "#pragma clang fp contract(off)" in src
  assert "(ld" in src and re.search(r"\(ld\d+ \+ ld\d+\)", src) and re.search(r"\(ld\d+ \* ld\d+\)", src)
  assert re.search(r"\(1\.0f / ld\d+\)", src) and "__builtin_sqrtf(ld" in src and "fmaf(ld" in src
  src64 = HIPRenderer().render("k", alu_program(dtypes.float64))
  assert re.search(r"\(1\.0 / ld\d+\)", src64) and "__builtin_sqrt(ld" in src64 and "fma(ld" in src64

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_16bit_floats_compute_in_float_and_fma_rounds_once(ren: GPURenderer):
  cuda = isinstance(ren, CUDARenderer)
  h = ren.render("k", alu_program(dtypes.float16))
  widen, narrow = ("__half2float(", "__float2half_rn(") if cuda else ("((float)", "((_Float16)(")
  assert widen in h and narrow in h and "rg_fma_h(ld" in h and "rg_add_odd" in h and "rg_d2f_odd" in h
  assert ("#include <cuda_fp16.h>" in h) == cuda
  b = ren.render("k", alu_program(dtypes.bfloat16))
  assert "rg_bf2f(" in b and "rg_f2bf(" in b and "rg_fma_bf(ld" in b and "cuda_fp16" not in b
  dmul = "__dmul_rn(a, b)" if cuda else "((a) * (b))"
  assert f"#define RG_DMUL(a, b) {dmul}" in b
  small = ren.render("k", alu_program(dtypes.bfloat16, [Ops.MUL]))
  assert "rg_add_odd" not in small and "rg_maxf" not in small and "RG_D" not in small, "helpers appear only when used"

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_integer_ops_wrap_in_unsigned_types(ren: GPURenderer):
  src = re.sub(r"ld\d+", "x", ren.render("k", alu_program(dtypes.int8)))
  for e in ("((signed char)((unsigned int)x + (unsigned int)x))", "((signed char)((unsigned int)x * (unsigned int)x))",
            "((signed char)(-(unsigned int)x))", "((signed char)((unsigned int)x << x))", "((signed char)(x >> x))", "((signed char)(x / x))",
            "((signed char)(x % x))", "((signed char)(x > x ? x : x))", "(x < x)", "(x != x)"):
    assert "signed char alu" in src and e in src, e
  assert "((long long)((unsigned long long)x + (unsigned long long)x))" in re.sub(r"ld\d+", "x", ren.render("k", alu_program(dtypes.int64)))
  assert "(unsigned long long)x << x" in re.sub(r"ld\d+", "x", ren.render("k", alu_program(dtypes.uint64)))
  assert "(bool)(x | x)" in re.sub(r"ld\d+", "x", ren.render("k", alu_program(dtypes.bool)))

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_native_transcendentals_are_accurate_library_calls(ren: GPURenderer):
  for dt in dtypes.floats:
    src = ren.render("k", transcendental_program(dt))
    suf = "" if dt == dtypes.float64 else "f"
    assert all(f"{fn}{suf}(" in src for fn in ("exp2", "log2", "sin")), dt
    assert not re.search(r"__(exp|exp2|log|log2|sin)f\(", src), "no fast-math intrinsics"


# ---- casts, bitcasts, constants ---------------------------------------------------------------

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_casts_that_could_round_twice_go_through_round_to_odd(ren: GPURenderer):
  cuda = isinstance(ren, CUDARenderer)
  i64 = ren.render("k", cast_program(dtypes.int64))
  assert "rg_d2bf(rg_i64_odd(ld" in i64 and ("__float2half_rn((float)ld" if cuda else "((_Float16)((float)ld") in i64
  assert "rg_d2bf(rg_u64_odd(ld" in ren.render("k", cast_program(dtypes.uint64))
  assert "rg_d2bf((double)ld" in ren.render("k", cast_program(i32))
  f64 = ren.render("k", cast_program(dtypes.float64))
  assert "rg_d2bf(ld" in f64 and "rg_d2h(ld" in f64 and "((float)ld" in f64 and "((long long)ld" in f64 and re.search(r"\(ld\d+ != 0\)", f64)
  bf = ren.render("k", cast_program(dtypes.bfloat16))
  assert re.search(r"\(\(ld\d+ & 0x7fff\) != 0\)", bf) and "((double)rg_bf2f(ld" in bf
  b = ren.render("k", cast_program(dtypes.bool))
  assert "((unsigned short)(ld" in b and "? 0x3f80 : 0))" in b

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_bitcasts_copy_bytes(ren: GPURenderer):
  src = ren.render("k", bitcast_program(4))
  assert "rg_bitcast<float>(ld" in src and "rg_bitcast<unsigned int>(ld" in src
  assert ("memcpy(&t, &f, sizeof(T))" if isinstance(ren, CUDARenderer) else "__builtin_memcpy(&t, &f, sizeof(T))") in src
  assert "rg_bitcast<rg_uintx4>(ld" in ren.render("k", float4_program())

def test_constants_keep_their_bits():
  c = CUDARenderer().render("k", constants_program())
  for s in ("__int_as_float(0x7f800000)", "__int_as_float(0xff800000)", "__int_as_float(0x7fc00000)", "(-0x0.0p+0f)", "0x1.8000000000000p+0f",
            "__longlong_as_double(0xfff0000000000000ll)", "__longlong_as_double(0x7ff8000000000000ll)", "(-0x0.0p+0)",
            "__ushort_as_half((unsigned short)0x8000)", "__ushort_as_half((unsigned short)0x7c00)", "__ushort_as_half((unsigned short)0x0001)",
            "((unsigned short)0xff80)", "((unsigned short)0x7fc0)", "((unsigned short)0x0001)",
            "(-9223372036854775807ll-1)", "18446744073709551615ull", "(-2147483647-1)", "4294967295u", "((signed char)-128)", "= true;"):
    assert s in c, s
  h = HIPRenderer().render("k", constants_program())
  assert "((_Float16)__int_as_float(0xff800000))" in h and "((_Float16)-0x0.0p+0f)" in h and "((_Float16)0x1.0000000000000p-24f)" in h


# ---- memory, vectors, control flow -------------------------------------------------------------

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_gated_loads_and_stores(ren: GPURenderer):
  lines = body(ren.render("gated", gated_program()))
  assert any(re.fullmatch(r"int ld\d+ = alu\d+ \? data0\[alu\d+\] : \(-5\);", ln) for ln in lines), lines
  assert any(re.fullmatch(r"if \(alu\d+\) data2\[idx0\] = alu\d+;", ln) for ln in lines), lines
  if isinstance(ren, CUDARenderer):   # index idx * 4 (+ 256): aligned, so one uint4 access
    assert any(re.fullmatch(r"rg_floatx4 ld(\d+) = vec\d+; if \(alu\d+\) \{ uint4 w_ = \*\(const uint4\*\)\(data3 \+ alu\d+\); "
                            r"memcpy\(&ld\1, &w_, sizeof\(ld\1\)\); \}", ln) for ln in lines), lines
    assert any(re.fullmatch(r"if \(alu\d+\) \{ uint4 w_; memcpy\(&w_, &ld\d+, sizeof\(w_\)\); \*\(uint4\*\)\(data4 \+ alu\d+\) = w_; \}", ln)
               for ln in lines), lines
    return
  mc = "__builtin_memcpy"
  assert any(re.fullmatch(rf"rg_floatx4 ld(\d+) = vec\d+; if \(alu\d+\) {mc}\(&ld\1, data3 \+ alu\d+, sizeof\(ld\1\)\);", ln) for ln in lines), lines
  assert any(re.fullmatch(rf"if \(alu\d+\) {mc}\(data4 \+ alu\d+, &ld\d+, sizeof\(ld\d+\)\);", ln) for ln in lines), lines


def test_cuda_vector_access_without_proven_alignment_keeps_memcpy():
  """An index not provably a multiple of the lane count (idx * 4 + 2) may be unaligned: the byte-wise memcpy stays."""
  f4 = F.vec(4)
  idx = UOp.special("idx0", 16)
  gv, gout = UOp.define_global(0, F, 4 * 16 + 2), UOp.define_global(1, F)
  v = gv.load(idx * 4 + 2, dtype=f4)
  lines = body(CUDARenderer().render("unal", lin(gout.store(idx * 4 + 2, v), gout.store(idx * 4 + 128, v))))
  assert any(re.fullmatch(r"rg_floatx4 ld(\d+); memcpy\(&ld\1, data0 \+ alu\d+, sizeof\(ld\1\)\);", ln) for ln in lines), lines
  assert any(re.fullmatch(r"memcpy\(data1 \+ alu\d+, &ld\d+, sizeof\(ld\d+\)\);", ln) for ln in lines), lines
  assert any(re.fullmatch(r"\{ uint4 w_; memcpy\(&w_, &ld\d+, sizeof\(w_\)\); \*\(uint4\*\)\(data1 \+ alu\d+\) = w_; \}", ln) for ln in lines), lines

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_vectors_are_structs_of_arrays(ren: GPURenderer):
  src = ren.render("vec_float4", float4_program())
  assert "struct rg_floatx4 { float v[4]; };" in src and "struct rg_boolx4 { bool v[4]; };" in src
  assert re.search(r"rg_floatx4 vec\d+ = rg_floatx4\{\{ld\d+, ld\d+, ld\d+, ld\d+\}\};", src)
  assert re.search(r"float gep\d+ = alu\d+\.v\[2\];", src)
  assert re.search(r"rg_floatx4 alu\d+ = rg_floatx4\{\{fmaf\(ld\d+\.v\[0\], ld\d+\.v\[0\], vec\d+\.v\[0\]\), ", src)
  assert re.search(r"(memcpy|__builtin_memcpy)\(data14 \+ \(long long\)idx0 \* 4, &alu\d+, sizeof\(alu\d+\)\);", src), "float4 elements"
  if isinstance(ren, CUDARenderer):   # at a multiple of 4: one aligned uint4 load
    assert re.search(r"\{ uint4 w_ = \*\(const uint4\*\)\(data0 \+ alu\d+\); memcpy\(&ld\d+, &w_, sizeof\(ld\d+\)\); \}", src), "4 floats"
  else: assert re.search(r"__builtin_memcpy\(&ld\d+, data0 \+ alu\d+, sizeof\(ld\d+\)\);", src), "4 floats of a float buffer"
  src2 = ren.render("vacc", vector_acc_program())
  assert re.search(r"rg_floatx4 acc\d+ = vec\d+;", src2) and re.search(r"memcpy\(data1 \+ \(long long\)0 \* 4, &acc\d+, sizeof\(acc\d+\)\);", src2)

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_ranges_and_accumulators(ren: GPURenderer):
  lines = body(ren.render("reduce", reduce_program()))
  fors = [ln for ln in lines if ln.startswith("for (int ridx")]
  assert [re.search(r"< (\d+);", f).group(1) for f in fors] == ["37", "3", "37"]
  accs = [ln for ln in lines if re.fullmatch(r"float acc\d+ = .*;", ln)]
  assert len(accs) == 2 and "(0x0.0p+0f)" not in accs[0] and accs[0].endswith("= 0x0.0p+0f;") and "0xff800000" in accs[1]
  assert lines.index(accs[1]) > lines.index(fors[1]), "the inner accumulator is reset on every iteration of the outer loop"
  assert sum(ln == "}" for ln in lines) == 4  # three loops and the kernel

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_locals_are_shared_arrays_and_barriers_sync_threads(ren: GPURenderer):
  uops = locals_program()
  lines = body(ren.render("locals", uops))
  shared = [ln for ln in lines if ln.startswith("__shared__")]
  assert len(shared) == 1 and re.fullmatch(r"__shared__ float local\d+\[64\];", shared[0])
  assert lines.count("__syncthreads();") == sum(u.op is Ops.BARRIER for u in uops) == 1
  at = lines.index("__syncthreads();")
  assert any("local" in ln and "] = ld" in ln for ln in lines[:at]) and any(re.search(r"= local\d+\[", ln) for ln in lines[at:])
  assert ren.launch_dims(uops) == ((4, 1, 1), (64, 1, 1))
  lv = body(ren.render("lv", local_vector_program()))
  assert lv.count("__syncthreads();") == 2 and any(re.fullmatch(r"__shared__ float local\d+\[128\];", ln) for ln in lv)
  half = "__half" if isinstance(ren, CUDARenderer) else "_Float16"
  assert any(re.fullmatch(rf"__shared__ {half} local\d+\[64\];", ln) for ln in body(ren.render("lh", locals_program(dt=dtypes.float16))))


# ---- limits and bad programs -------------------------------------------------------------------

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_local_size_limits_name_the_uop(ren: GPURenderer):
  with pytest.raises(ValueError, match=rf"uop \d+ \(SPECIAL lidx0, size 2048\): 2048 work-items in dimension x exceed {ren.target.name}'s 1024"):
    ren.render("k", specials_program(ls=(2048, 1, 1)))
  with pytest.raises(ValueError, match=r"\(SPECIAL lidx\d, size \d+\): 2048 work-items per workgroup \(64x32x1\) exceed .*1024"):
    ren.render("k", specials_program(ls=(64, 32, 1)))
  z = specials_program(ls=(2, 2, 128))
  if isinstance(ren, CUDARenderer):
    with pytest.raises(ValueError, match=r"SPECIAL lidx2, size 128\): 128 work-items in dimension z exceed CUDA's 64"): ren.render("k", z)
  else: assert "__launch_bounds__(512)" in ren.render("k", z)
  assert "__launch_bounds__(1024)" in ren.render("k", specials_program(ls=(32, 32, 1)))
  with pytest.raises(ValueError, match=r"SPECIAL gidx1, size 65536\): 65536 workgroups in dimension y exceed"):
    ren.render("k", specials_program(gs=(1, 65536, 1)))

def test_shared_memory_limits_name_the_uop():
  cuda_max, hip_max = CUDA.shared_memory_per_block, AMD.shared_memory_per_block
  ok = locals_program(L=64, extra_local=cuda_max - 64 * 4)   # exactly 48 KiB
  CUDARenderer().render("k", ok)
  over = locals_program(L=64, extra_local=cuda_max - 64 * 4 + 1)
  with pytest.raises(ValueError, match=r"uop \d+ \(DEFINE_LOCAL temp0, dtypes.float.ptr\(64, local=True\)\): local memory of the program reaches "
                                       rf"{cuda_max + 4} bytes, over CUDA's {cuda_max} bytes per workgroup"):
    CUDARenderer().render("k", over)
  assert "__shared__ unsigned char" in HIPRenderer().render("k", over)
  with pytest.raises(ValueError, match=rf"DEFINE_LOCAL temp1.*over AMD's {hip_max} bytes"):
    HIPRenderer().render("k", locals_program(L=64, extra_local=hip_max + 1))

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_bad_programs_fail_clearly(ren: GPURenderer):
  idx = UOp.special("idx0", 4)
  g0 = UOp.define_global(0, i32)
  st = g0.store(idx, idx)
  with pytest.raises(SpecError, match="WMMA"): ren.render("k", [*lin(st), UOp(Ops.WMMA, F, (), None)])
  for bad in ("1bad", "sinf", "data0", "int", "class", "threadIdx", "rg_x", "__x", "float4", "uint3", "dim3", "max"):
    with pytest.raises(ValueError, match=f"kernel name '{bad}'"): ren.render(bad, lin(st))
  with pytest.raises(ValueError, match="variable name 'data0'"): ren.render("k", lin(g0.store(idx, idx + UOp.variable("data0", 0, 4))))
  with pytest.raises(SpecError, match="not defined before"): ren.render("k", [st, *lin(st)[:-1]])
  li = UOp.special("lidx0", 4)
  with pytest.raises(ValueError, match=r"SPECIAL idx0, size 4\): an idxD launch has no workgroups, so it cannot be mixed with lidx0"):
    ren.render("k", lin(g0.store(idx + li, idx)))
  loc = UOp(Ops.DEFINE_LOCAL, i32.ptr(4, local=True), (), "temp0")
  with pytest.raises(ValueError, match=r"uop 0 \(DEFINE_LOCAL\): local memory and barriers need a gidx/lidx launch"):
    ren.render("k", lin(loc.store(idx, idx), first=(loc,)))
  s2 = UOp.special("lidx0", 8)
  with pytest.raises(ValueError, match="SPECIAL lidx0 has two sizes"): ren.render("k", lin(g0.store(li, s2)))


# ---- nvcc --------------------------------------------------------------------------------------

def _ptx(name: str, src: str, tmp) -> tuple[str, str | None]:
  path = tmp / f"{name}.cu"
  path.write_text(src)
  r = subprocess.run(["nvcc", "--ptx", "-arch=sm_80", str(path), "-o", str(tmp / f"{name}.ptx")], capture_output=True, text=True, timeout=300)
  if r.returncode != 0: return name, f"{r.stdout}\n{r.stderr}"
  return name, None

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: this test compiles the CUDA renderer's output with it")
def test_cuda_text_compiles_with_nvcc(tmp_path):
  srcs = {name: CUDARenderer().render(name, build()) for name, build in PROGRAMS.items()}
  with ThreadPoolExecutor(8) as pool: results = list(pool.map(lambda kv: _ptx(kv[0], kv[1], tmp_path), srcs.items()))
  failed = {n: e for n, e in results if e is not None}
  assert not failed, "\n".join(f"--- {n} ---\n{e}\n{srcs[n]}" for n, e in failed.items())
  ptx = {n: (tmp_path / f"{n}.ptx").read_text() for n in srcs}
  assert all(f".entry {n}(" in p for n, p in ptx.items()), "extern \"C\": the entry keeps its name"
  # nvcc's default --fmad=true would contract a*b+c: the _rn intrinsics must keep MUL and ADD apart
  for n in ("muladd_float", "muladd_double", "muladd_half", "muladd_bfloat16", "reduce", "cast_long", "alu_long"):
    assert "fma." not in ptx[n], f"{n}: contracted into an fma"
  assert "mul.rn.f32" in ptx["muladd_float"] and "add.rn.f32" in ptx["muladd_float"] and "mul.rn.f64" in ptx["muladd_double"]
  assert "fma.rn.f32" in ptx["alu_float"] and "fma.rn.f64" in ptx["alu_double"], "MULACC is a real fma"
  assert "bar.sync" in ptx["locals"] and ".shared" in ptx["locals"] and "bar.sync" not in ptx["alu_float"]
  assert "sqrt.rn.f32" in ptx["alu_float"] and "rcp.rn.f32" in ptx["alu_float"] and "sqrt.rn.f64" in ptx["alu_double"]
  assert "sqrt.approx" not in ptx["alu_float"] and "ex2.approx.ftz" not in ptx["transc_float"], "no approximate or flush-to-zero math"


# ---- the rendered text, run on the host: its logic against the reference, bit for bit ----------
# A small shim maps the CUDA/HIP names onto C++ on the CPU (the _rn intrinsics are IEEE round-to-nearest
# ops, __half is _Float16) and a driver loops over blocks and threads. This checks what the renderer
# decides (integer wrap-around, casts, helpers, MAX, MULACC, gating, vectors), not the GPU's arithmetic.

_SHIM = r"""
#include <cstring>
#include <cmath>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
struct rg_dim3 { unsigned int x, y, z; };
static rg_dim3 blockIdx, threadIdx, blockDim, gridDim;
typedef _Float16 __half;
struct alignas(16) uint4 { unsigned int x, y, z, w; };   // CUDA's aligned vector types (the renderer's aligned vector access)
struct alignas(8) uint2 { unsigned int x, y; };
template <typename T, typename F> static inline T rg_pun(F f) { T t; std::memcpy(&t, &f, sizeof(T)); return t; }
static inline unsigned int __float_as_uint(float f) { return rg_pun<unsigned int>(f); }
static inline float __uint_as_float(unsigned int u) { return rg_pun<float>(u); }
static inline float __int_as_float(int u) { return rg_pun<float>(u); }
static inline long long __double_as_longlong(double d) { return rg_pun<long long>(d); }
static inline double __longlong_as_double(long long u) { return rg_pun<double>(u); }
static inline __half __ushort_as_half(unsigned short u) { return rg_pun<__half>(u); }
static inline float __half2float(__half h) { return (float)h; }
static inline __half __float2half_rn(float f) { return (__half)f; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __drcp_rn(double a) { return 1.0 / a; }
static inline double __dsqrt_rn(double a) { return std::sqrt(a); }
using std::memcpy;
"""

def host_run(ren: GPURenderer, name: str, uops: list[UOp], bufs: list[np.ndarray], tmp) -> None:
  """Compile the rendered kernel for the CPU with the shim, run every thread of its launch, write results into `bufs`."""
  src = ren.render(name, uops)
  src = "\n".join(ln for ln in src.splitlines() if not ln.startswith("#include"))
  sig = next(ln for ln in src.splitlines() if ln.startswith('extern "C"'))
  params = sig[sig.index(f" {name}(") + len(name) + 2:sig.rindex(") {")]
  args = ", ".join(p.split()[-1] for p in params.split(", "))
  (gx, gy, gz), (bx, by, bz) = ren.launch_dims(uops)
  driver = f"""extern "C" void rg_run({params}) {{
  gridDim = {{{gx}u, {gy}u, {gz}u}}; blockDim = {{{bx}u, {by}u, {bz}u}};
  for (unsigned int z = 0; z < {gz}u * {bz}u; z++) for (unsigned int y = 0; y < {gy}u * {by}u; y++) for (unsigned int x = 0; x < {gx}u * {bx}u; x++) {{
    blockIdx = {{x / {bx}u, y / {by}u, z / {bz}u}}; threadIdx = {{x % {bx}u, y % {by}u, z % {bz}u}};
    {name}({args});
  }}
}}"""
  (tmp / f"{name}.cpp").write_text(_SHIM + src + driver)
  so = tmp / f"{name}.so"
  cmd = [shutil.which("g++") or "c++", "-O1", "-std=c++17", "-fwrapv", "-ffp-contract=off", "-fno-fast-math", "-Wno-unknown-pragmas",
         "-shared", "-fPIC", str(tmp / f"{name}.cpp"), "-o", str(so)]
  r = subprocess.run(cmd, capture_output=True, text=True)
  assert r.returncode == 0, f"host compile of {name} failed:\n{r.stderr}"
  ctypes.CDLL(str(so)).rg_run(*(b.ctypes.data_as(ctypes.c_void_p) for b in bufs))

def _alu_inputs(dt: DType) -> list[np.ndarray]:
  a, b, c = cpu_tests.operands(dt, 3, seed=dt.priority, n_random=600)
  if dt in (F, dtypes.bfloat16):  # MULACC inputs where a*b+c rounded twice is wrong
    ta, tb, tc = cpu_tests.fma_traps(dt, 200, np.random.default_rng(1))
    a, b, c = np.concatenate([a, ta]), np.concatenate([b, tb]), np.concatenate([c, tc])
  if dtypes.is_int(dt):  # keep IDIV/MOD and shifts clear of undefined behaviour: b is a shift amount and never 0 or -1
    b = (b.view(cpu_tests._UINT[dt.itemsize]) % np.array(dt.bits - 1, cpu_tests._UINT[dt.itemsize])).astype(dt.np) + dt.np.type(1)
  return [a, b, c]

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
@pytest.mark.parametrize("dt", dtypes.all, ids=lambda d: d.name)
def test_host_run_alu_ops_match_the_reference(ren: GPURenderer, dt: DType, tmp_path):
  a, b, c = _alu_inputs(dt)
  n = len(a)
  cond = np.random.default_rng(2).integers(0, 2, n).astype(np.bool_)
  ops = ops_for(dt)
  outs = [np.zeros(n, (dtypes.bool if op in GroupOp.Comparison else dt).np) for op in ops]
  host_run(ren, f"alu_{dt.name}", alu_program(dt, n=n), [a, b, c, cond, *outs], tmp_path)
  for op, out in zip(ops, outs):
    srcs, sdts = ([cond, a, b], [dtypes.bool, dt, dt]) if op is Ops.WHERE else ([a, b, c][:3 if op is Ops.MULACC else 1 if op in GroupOp.Unary else 2], None)
    sdts = sdts or [dt] * len(srcs)
    odt = dtypes.bool if op in GroupOp.Comparison else dt
    assert semantics.ub_check(op, odt, srcs, sdts) is None, f"test inputs of {op.name} must be free of UB"
    cpu_tests.assert_same(out, cpu_tests.ref(op, odt, srcs, sdts), odt, f"{type(ren).__name__} {op.name} on {dt.name}", srcs)

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
@pytest.mark.parametrize("src", dtypes.all, ids=lambda d: d.name)
def test_host_run_casts_match_the_reference(ren: GPURenderer, src: DType, tmp_path):
  n = 512
  dsts = [d for d in dtypes.all if d != src]
  xs = [cpu_tests.cast_inputs(src, d, n, seed=src.priority * 31 + d.priority) for d in dsts]
  outs = [np.zeros(n, d.np) for d in dsts]
  host_run(ren, f"cast_{src.name}", cast_program(src), [*xs, *outs], tmp_path)
  for x, d, out in zip(xs, dsts, outs):
    assert semantics.ub_check(Ops.CAST, d, [x], [src]) is None
    cpu_tests.assert_same(out, cpu_tests.ref(Ops.CAST, d, [x], [src]), d, f"{type(ren).__name__} CAST {src.name} -> {d.name}", [x])

@pytest.mark.parametrize("ren", RENDERERS, ids=RIDS)
def test_host_run_vectors_gates_loops_and_constants(ren: GPURenderer, tmp_path):
  rng = np.random.default_rng(3)
  # float4: vector loads from scalar and vector buffers, lane-wise ops, vector stores
  n, f4 = 300, F.vec(4)
  a, b, c = (np.resize(np.concatenate([cpu_tests.special_values(F), cpu_tests.random_values(F, 4 * n, rng)]), (n, 4)) for _ in range(3))
  b = b[::-1].copy()
  outs = [np.zeros((n, 4), d) for d in (np.float32, np.float32, np.float32, np.float32, np.float32, np.float32, np.float16, np.uint16, np.uint32,
                                         np.bool_)] + [np.zeros(n, np.float32), np.zeros((n, 4), np.float32)]
  host_run(ren, "vf4", float4_program(), [a, b, c, *outs], tmp_path)
  want_fma = cpu_tests.ref(Ops.MULACC, f4, [a, b, c], [f4] * 3)
  lt = cpu_tests.ref(Ops.CMPLT, dtypes.bool.vec(4), [a, b], [f4, f4])
  for got, want, dt in ((outs[0], cpu_tests.ref(Ops.ADD, f4, [a, b], [f4, f4]), F), (outs[2], cpu_tests.ref(Ops.MAX, f4, [a, b], [f4, f4]), F),
                        (outs[3], want_fma, F), (outs[5], cpu_tests.ref(Ops.WHERE, f4, [lt, c, a], [dtypes.bool.vec(4), f4, f4]), F),
                        (outs[6], cpu_tests.ref(Ops.CAST, dtypes.float16.vec(4), [a], [f4]), dtypes.float16),
                        (outs[7], cpu_tests.ref(Ops.CAST, dtypes.bfloat16.vec(4), [b], [f4]), dtypes.bfloat16),
                        (outs[8], a.view(np.uint32), dtypes.uint32), (outs[11], want_fma, F)):
    cpu_tests.assert_same(got, want, dt, "float4")
  # gated loads and stores: lanes past `valid` read nothing and take alt, gated stores write nothing
  valid, off = 40, 24
  ga = np.arange(valid + off, dtype=np.int32) * 3
  o1, o2 = np.zeros(64, np.int32), np.full(64, 77, np.int32)
  vin, vout = np.arange(4 * valid, dtype=np.float32), np.full(4 * 64 + 256, -1, np.float32)
  host_run(ren, "gated", gated_program(), [ga, o1, o2, vin, vout], tmp_path)
  want = np.where(np.arange(64) < valid, ga[np.minimum(np.arange(64) + off, valid + off - 1)], -5)
  assert np.array_equal(o1, want) and np.array_equal(o2, np.where(np.arange(64) < valid, want * 2, 77))
  assert np.array_equal(vout[:256], np.concatenate([vin, np.full(4 * (64 - valid), 2.5, np.float32)]))
  assert np.array_equal(vout[256:256 + 4 * valid], vin) and (vout[256 + 4 * valid:] == -1).all(), "gated-off vector stores write nothing"
  # loops with accumulators: a float32 sum in order, and a max nested in another loop
  rows, K, J = 6, 37, 3
  x = semantics.round_float(rng.standard_normal(rows * K) * 2.0 ** rng.integers(-20, 20, rows * K), F)
  s_out, m_out = np.zeros(rows, np.float32), np.zeros(rows * J, np.float32)
  host_run(ren, "reduce", reduce_program(), [x, s_out, m_out], tmp_path)
  m = x.reshape(rows, K)
  ws = np.zeros(rows, np.float32)
  for k in range(K): ws = cpu_tests.ref(Ops.ADD, F, [ws, m[:, k]], [F, F])
  cpu_tests.assert_same(s_out, ws, F, "sum over a RANGE")
  assert np.array_equal(m_out.reshape(rows, J), np.stack([np.max(m * np.float32(j), axis=1) for j in range(J)], axis=1))
  # launch indices in three dimensions, inside an IF
  gs, ls = (3, 2, 2), (4, 2, 1)
  buf = np.full(math.prod(gs) * math.prod(ls), -1, np.int32)
  host_run(ren, "specials", specials_program(gs, ls), [buf], tmp_path)
  gz, gy, gx, lz, ly, lx = np.meshgrid(*(np.arange(v) for v in (gs[2], gs[1], gs[0], ls[2], ls[1], ls[0])), indexing="ij")
  dims = [gs[d] * ls[d] for d in range(3)]
  fl = (((gz * ls[2] + lz) * dims[1] + gy * ls[1] + ly) * dims[0] + gx * ls[0] + lx).reshape(-1)
  want = np.full(len(buf), -1, np.int32)
  want[fl] = (gx * 1000 + gy * 100 + gz * 10 + lx + ly * 10000 + lz * 100000).reshape(-1)
  want[5] = -1
  assert np.array_equal(buf, want)
  # constants keep their bits
  outs = [np.zeros(6, d.np) for d in dtypes.floats] + [np.zeros(1, d.np) for d in (dtypes.int64, dtypes.uint64, i32, dtypes.uint32, dtypes.int8,
                                                                                   dtypes.bool)]
  host_run(ren, "consts", constants_program(), outs, tmp_path)
  for dt, o in zip(dtypes.floats, outs):
    f = semantics.to_float64(o, dt)
    tiny = 2.0 ** -24 if dt != dtypes.bfloat16 else 2.0 ** -133
    assert f[0] == math.inf and f[1] == -math.inf and math.isnan(f[2]) and f[3] == 0 and math.copysign(1, f[3]) < 0 and f[4] == 1.5 and f[5] == tiny
  assert [int(o[0]) for o in outs[4:]] == [-2 ** 63, 2 ** 64 - 1, -2 ** 31, 2 ** 32 - 1, -128, 1]
