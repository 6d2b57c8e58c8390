"""The LLVM IR renderer and the LLVM device (llvmlite MCJIT on the host CPU): every ALU op x dtype, cast and bitcast bit
for bit like PYTHON; the inputs the reference calls undefined give what the CPU (C) backend gives (both are total);
the IR has no fast-math flags and fuses only MULACC; the AMD and NVPTX modules have the target's shape and compile
(PTX through ptxas when it is on PATH); and seeded renderer bugs are caught by the comparison with PYTHON."""
from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache

import llvmlite.binding as llvm
import numpy as np
import pytest

from conformance.suite import Case, all_cases, run_case
from conformance.values import random_values, special_values, without_ub
from refgrad.codegen import to_linear
from refgrad.device import Buffer
from refgrad.dtype import dtypes
from refgrad.program import Runner
from refgrad.renderer import llvmir, llvmir_helpers
from refgrad.renderer.llvmir import LLVMRenderer
from refgrad.runtime.amd_elf import load_code_object
from refgrad.runtime.ops_llvm import compile_object, init_llvm, optimized_module
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp
from tests.refgrad.test_cpu_barriers import F, barrier, local, seq

N = 64
CASES = [c for c in all_cases() if c.group != "native"]   # native transcendentals are checked in ULPs by conformance
FAST_MATH = re.compile(r"\b(fast|nnan|ninf|nsz|arcp|contract|afn|reassoc)\b")


def _inputs(case: Case, ub: bool) -> list[np.ndarray]:
  """Half edge values, half random bits per operand; without the reference's undefined inputs unless `ub`."""
  rng = np.random.default_rng(7)
  cols = []
  for d in case.src_dtypes:
    sv = special_values(d)
    cols.append(np.concatenate([sv[rng.integers(0, len(sv), N // 2)], random_values(d, N - N // 2, rng)]))
  return cols if ub or case.group == "transcendental" else without_ub(case.op, case.out_dtype, cols, case.src_dtypes)

def _run(case: Case, device: str, cols: list[np.ndarray]) -> np.ndarray:
  n = len(cols[0])
  out = Buffer(device, n, case.out_dtype)
  Runner.from_sink(f"llvm_{case.op.name.lower()}", case.make_sink(n), device)(out, *(Buffer.from_numpy(device, c, d) for c, d in zip(cols, case.src_dtypes)))
  return out.numpy()

def _differ(case: Case, device: str, ref: str, ub: bool = False) -> list[int]:
  cols = _inputs(case, ub)
  got, want = _run(case, device, cols), _run(case, ref, cols)
  return np.flatnonzero(~np.asarray(semantics.same_bits(got, want, case.out_dtype))).tolist()


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.group}-{c.name.replace(' ', '-')}")
def test_llvm_matches_python(case: Case):
  bad = _differ(case, "LLVM", "PYTHON")
  assert not bad, f"LLVM differs from PYTHON on {case.name} at lanes {bad[:5]}"

# the undefined cases of the reference: integer division by 0 and MIN / -1, shift amounts >= width, float -> int of
# NaN / out of range. Both CPU backends make them total the same way (refgrad/renderer/cstyle.py, llvmir.py).
UB_CASES = [c for c in CASES if (c.group == "alu" and c.op in (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR))
            or (c.group == "cast" and dtypes.is_float(c.src_dtypes[0]) and dtypes.is_int(c.out_dtype))]

@pytest.mark.parametrize("case", UB_CASES, ids=lambda c: c.name.replace(" ", "-"))
def test_undefined_inputs_match_the_c_backend(case: Case):
  bad = _differ(case, "LLVM", "CPU", ub=True)
  assert not bad, f"LLVM differs from CPU on {case.name} (undefined inputs included) at lanes {bad[:5]}"

def test_every_op_and_cast_is_covered():
  assert {c.op for c in CASES if c.group == "alu"} >= {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.MULACC, Ops.WHERE, Ops.SHR, Ops.RECIP, Ops.SQRT}
  assert sum(c.group == "cast" for c in CASES) == len(dtypes.all) * (len(dtypes.all) - 1)
  assert len(UB_CASES) > 40


# ---- the IR ---------------------------------------------------------------------------------------------

@cache
def _case(name: str) -> Case: return next(c for c in CASES if c.name == name)

def _ir(name: str, target: str) -> str:
  ren = LLVMRenderer(target)
  return ren.render("k", to_linear(_case(name).make_sink(N), ren))

@pytest.mark.parametrize("target", list(llvmir.TARGETS))
def test_no_fast_math_and_only_mulacc_fuses(target: str):
  for name in ("ADD float", "MUL double", "RECIP half", "SQRT float", "MAX bfloat16"):
    src = _ir(name, target)
    assert not FAST_MATH.search(src), f"{name} on {target}: a fast-math flag in\n{src}"
    assert "llvm.fma" not in src and "fmuladd" not in src
  assert "call float @llvm.fma.f32" in _ir("MULACC float", target) and "call double @llvm.fma.f64" in _ir("MULACC double", target)
  assert "@rg_add_odd" in _ir("MULACC half", target) and "llvm.fma" not in _ir("MULACC half", target)

def _barrier_program(L: int = 16) -> list[UOp]:
  """Reverse each workgroup's L values through local memory (a store, a barrier, a load)."""
  G = 2
  a, out = UOp.define_global(0, F), UOp.define_global(1, F)
  g, l = UOp.special("gidx0", G), UOp.special("lidx0", L)
  tmp = local(F, L)
  st = tmp.store(l, a.load(g * L + l))
  return seq(a, out, tmp, g, l, st, barrier(st), out.store(g * L + l, tmp.load((l * -1) + (L - 1))))

def test_barrier_program_runs_on_llvm():
  x = np.arange(32, dtype=np.float32)
  res = {}
  for dev in ("LLVM", "PYTHON"):
    a, out = Buffer.from_numpy(dev, x), Buffer(dev, 32, dtypes.float32)
    Runner("rev", _barrier_program(), dev)(a, out)
    res[dev] = out.numpy()
  assert np.array_equal(res["LLVM"], x.reshape(2, 16)[:, ::-1].reshape(-1)) and np.array_equal(res["LLVM"], res["PYTHON"])

def test_amd_module_shape_and_code_object():
  src = LLVMRenderer("amdgcn").render("rev", _barrier_program(64))   # two waves: one alone would need no s_barrier
  for want in ("define amdgpu_kernel void @rev(ptr addrspace(1) %data0, ptr addrspace(1) %data1)", "internal addrspace(3) global [64 x float]",
               'fence syncscope("workgroup") release', "call void @llvm.amdgcn.s.barrier()", 'fence syncscope("workgroup") acquire',
               "@llvm.amdgcn.workitem.id.x()", "@llvm.amdgcn.workgroup.id.x()", '"amdgpu-flat-work-group-size"="1,64"', '"amdgpu-no-implicitarg-ptr"'):
    assert want in src, want
  init_llvm()
  tm = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu="gfx1100", features="+wavefrontsize32", opt=2, reloc="pic")
  asm = tm.emit_assembly(optimized_module(src, tm, "test"))
  assert "s_barrier" in asm and "ds_store_b32" in asm and "ds_load_b32" in asm
  co = load_code_object(compile_object(src, tm, "test"), "rev")
  assert co.kd.group_segment == 256 and co.kd.kernarg_size == 16 and co.kd.properties == (1 << 3) | (1 << 10)

def test_nvptx_module_passes_ptxas(tmp_path):
  init_llvm()
  tm = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(cpu="sm_80", features="+ptx80", opt=2)
  srcs = {"rev": LLVMRenderer("nvptx").render("rev", _barrier_program())} | {f"k{i}": _ir(n, "nvptx").replace("@k(", f"@k{i}(")
                                                                           for i, n in enumerate(("MULACC half", "CAST double->bfloat16", "IDIV long", "MAX float"))}
  for name, src in srcs.items():
    ptx = tm.emit_assembly(optimized_module(src, tm, "test"))
    assert f".entry {name}(" in ptx
    if name == "rev": assert "bar.sync" in ptx and ".shared" in ptx
    if shutil.which("ptxas") is None: continue
    (tmp_path / f"{name}.ptx").write_text(ptx)
    r = subprocess.run(["ptxas", "-arch=sm_80", str(tmp_path / f"{name}.ptx"), "-o", str(tmp_path / f"{name}.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, f"ptxas rejected the PTX of {name}:\n{r.stderr}\n{ptx}"
  if shutil.which("ptxas") is None: pytest.skip("ptxas is not on PATH: the PTX was made but not assembled")

def test_bad_programs_name_what_is_wrong():
  with pytest.raises(ValueError, match="not an identifier"): LLVMRenderer().render("1k", _barrier_program())
  with pytest.raises(ValueError, match="unknown LLVM target 'x86'"): LLVMRenderer("x86")


# ---- injected renderer bugs: the comparison with PYTHON catches each ------------------------------------------

def _naive_max(mp: pytest.MonkeyPatch) -> None:
  mp.setitem(llvmir_helpers.HELPERS, "rg_max_float", ((), """define internal $T @rg_max_$T($T %a, $T %b) alwaysinline {
  %gt = fcmp ogt $T %a, %b
  %r = select i1 %gt, $T %a, $T %b
  ret $T %r
}"""))

def _logical_shr(mp: pytest.MonkeyPatch) -> None:
  orig = llvmir._Program.int_alu
  def int_alu(self, op, dt, s):
    if op is Ops.SHR: return self.emit(f"lshr {self.vt(dt)} {s[0]}, {self.emit(f'and {self.vt(dt)} {s[1]}, {dt.itemsize * 8 - 1}')}")
    return orig(self, op, dt, s)
  mp.setattr(llvmir._Program, "int_alu", int_alu)

def _truncating_bf16(mp: pytest.MonkeyPatch) -> None:
  mp.setitem(llvmir_helpers.HELPERS, "rg_f2bf", ((), """define internal i16 @rg_f2bf(float %f) alwaysinline {
  %u = bitcast float %f to i32
  %h = lshr i32 %u, 16
  %t = trunc i32 %h to i16
  ret i16 %t
}"""))

def _fused_mul_add(mp: pytest.MonkeyPatch) -> None:   # MULACC of float32 as a*b+c rounded twice
  orig = llvmir._Program.float_alu
  def float_alu(self, op, dt, s):
    if op is Ops.MULACC and dt == dtypes.float32: return self.emit(f"fadd float {self.emit(f'fmul float {s[0]}, {s[1]}')}, {s[2]}")
    return orig(self, op, dt, s)
  mp.setattr(llvmir._Program, "float_alu", float_alu)

INJECTIONS = {"max_ignores_nan": (_naive_max, "MAX float"), "shr_logical": (_logical_shr, "SHR int"),
              "bf16_truncates": (_truncating_bf16, "CAST float->bfloat16"), "mulacc_unfused": (_fused_mul_add, "MULACC float")}

@pytest.mark.parametrize("bug", list(INJECTIONS))
def test_seeded_renderer_bug_is_caught(bug: str, monkeypatch: pytest.MonkeyPatch):
  inject, name = INJECTIONS[bug]
  assert not _differ(_case(name), "LLVM", "PYTHON") and run_case(_case(name), "LLVM").status == "pass"
  inject(monkeypatch)
  assert _differ(_case(name), "LLVM", "PYTHON"), f"the injected bug {bug} went unnoticed on {name}"
  r = run_case(_case(name), "LLVM")   # conformance's own case
  assert r.status == "fail" and "lanes differ" in r.detail, r


def test_amd_wmma_is_one_instruction_per_wave():
  from refgrad.target import AMD
  from tests.refgrad.test_wmma_render import _program
  init_llvm()
  tm = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu="gfx1100", features="+wavefrontsize32", opt=2, reloc="pic")
  for dt, kind in ((dtypes.float16, "f16"), (dtypes.bfloat16, "bf16")):
    src = LLVMRenderer("amdgcn").render("mm", _program(dt, AMD))
    assert f"@llvm.amdgcn.wmma.f32.16x16x16.{kind}." in src
    asm = tm.emit_assembly(optimized_module(src, tm, "test"))
    assert f"v_wmma_f32_16x16x16_{kind}" in asm
  with pytest.raises(ValueError, match=r"uop \d+ \(WMMA AMD_16x16x16_half_float\): CUDA has no tensor core"):
    LLVMRenderer("nvptx").render("mm", _program(dtypes.float16, AMD))


def _cast_run(name: str, x: np.ndarray, device: str) -> np.ndarray:
  case = _case(name)
  out = Buffer(device, len(x), case.out_dtype)
  Runner.from_sink("llvm_cast", case.make_sink(len(x)), device)(out, Buffer.from_numpy(device, x, case.src_dtypes[0]))
  return out.numpy()

def test_float16_conversions_exhaustively():
  """The host module converts float16 with integer helpers (rg_h2f / rg_f2h): every half, and floats at, next to and
  between every pair of neighbouring halves (the ties), against PYTHON (same_bits) and the CPU's bytes (NaN payloads too)."""
  h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
  f = h.astype(np.float32)
  fin = f[np.isfinite(f)]
  s = np.sort(np.unique(fin))
  mid = ((s[:-1].astype(np.float64) + s[1:]) / 2).astype(np.float32)   # exact in float32: the ties
  near = np.concatenate([fin, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)),
                         np.float32([65520, -65520, 65519.996, 2.0 ** -25, -(2.0 ** -25), 2.0 ** -26, 1e30, np.nan, -np.inf]),
                         np.random.default_rng(3).integers(0, 2**32, 4096, dtype=np.uint32).view(np.float32)])
  for name, x in (("CAST half->float", h), ("CAST float->half", near.astype(np.float32))):
    got, py, cpu = (_cast_run(name, x, d) for d in ("LLVM", "PYTHON", "CPU"))
    bad = np.flatnonzero(~np.asarray(semantics.same_bits(got, py, _case(name).out_dtype)))
    assert not bad.size, f"{name}: LLVM differs from PYTHON for {x[bad[:5]]}: {got[bad[:5]]} vs {py[bad[:5]]}"
    assert got.tobytes() == cpu.tobytes(), f"{name}: LLVM and CPU bytes differ (NaN payloads?)"

def test_no_half_libcalls_without_f16c():
  """A host without F16C would make LLVM call compiler-rt's __extendhfsf2 / __truncsfhf2 for half conversions, which MCJIT
  cannot resolve (a jump to nowhere): the host module must not need them."""
  init_llvm()
  feats = llvm.get_host_cpu_features()
  if "f16c" not in feats: pytest.skip("not an x86 host: its half conversions are instructions either way")
  for f in list(feats):
    if "f16" in f or "avx512" in f or f in ("avx", "avx2", "fma", "fma4", "xop", "amx-fp16"): feats[f] = False
  tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(cpu="x86-64", features=feats.flatten(), opt=2, reloc="pic")
  for name in ("CAST double->half", "CAST half->float", "ADD half", "MULACC half", "MAX half", "NEG half", "CAST half->bool", "CAST bool->half",
               "CMPLT half", "CAST long->half", "WHERE half"):
    asm = tm.emit_assembly(optimized_module(_ir(name, "host"), tm, "test"))
    assert not re.search(r"__(extend|trunc)[a-z]*hf", asm), f"{name} needs a half conversion libcall:\n{asm}"
