"""Hand-written LLVM IR test kernels for gfx1100 (amdgpu_kernel): int and float ops of many dtypes, global loads and
stores, LDS with barriers, loops, branches. Each kernel reads `in` and writes `out` at its global work-item index, so
the same module serves the decoder comparison and the end-to-end runs."""
from __future__ import annotations

HEAD = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
declare float @llvm.fma.f32(float, float, float)
declare double @llvm.fma.f64(double, double, double)
declare float @llvm.sqrt.f32(float)
declare float @llvm.maxnum.f32(float, float)
declare float @llvm.minnum.f32(float, float)
declare float @llvm.trunc.f32(float)
declare float @llvm.floor.f32(float)
declare float @llvm.fabs.f32(float)
declare half @llvm.fma.f16(half, half, half)
declare i32 @llvm.smax.i32(i32, i32)
declare i32 @llvm.umin.i32(i32, i32)
declare i32 @llvm.ctpop.i32(i32)
declare i32 @llvm.ctlz.i32(i32, i1)
declare i32 @llvm.cttz.i32(i32, i1)
declare i32 @llvm.bitreverse.i32(i32)
declare half @llvm.sqrt.f16(half)
declare half @llvm.maxnum.f16(half, half)
declare half @llvm.minnum.f16(half, half)
declare double @llvm.sqrt.f64(double)
declare double @llvm.maxnum.f64(double, double)
declare double @llvm.floor.f64(double)
declare float @llvm.exp2.f32(float)
declare float @llvm.log2.f32(float)
declare float @llvm.sin.f32(float)
declare float @llvm.rint.f32(float)
declare float @llvm.ceil.f32(float)
declare float @llvm.copysign.f32(float, float)
declare float @llvm.minimum.f32(float, float)
declare float @llvm.maximum.f32(float, float)
declare i32 @llvm.umax.i32(i32, i32)
declare i32 @llvm.smin.i32(i32, i32)
declare i32 @llvm.abs.i32(i32, i1)
declare i32 @llvm.fshl.i32(i32, i32, i32)
declare i32 @llvm.uadd.sat.i32(i32, i32)
declare i16 @llvm.smax.i16(i16, i16)
"""
ATTRS = '"amdgpu-no-implicitarg-ptr" "amdgpu-no-dispatch-ptr" "amdgpu-no-queue-ptr" "amdgpu-no-dispatch-id" ' \
        '"amdgpu-no-workgroup-id-y" "amdgpu-no-workgroup-id-z" "amdgpu-no-workitem-id-y" "amdgpu-no-workitem-id-z" ' \
        '"amdgpu-flat-work-group-size"="1,256" "uniform-work-group-size"="true"'


def elementwise(name: str, t: str, body: str, tin: str | None = None, nin: int = 2) -> str:
  """out[i] = f(a[i], b[i]): `body` computes %r from %a, %b (both `tin`, default `t`)."""
  tin = tin or t
  loads = "\n".join(f"""  %p{c} = getelementptr {tin}, ptr addrspace(1) %in{c}, i32 %i
  %{c} = load {tin}, ptr addrspace(1) %p{c}""" for c in "ab"[:nin])
  params = ", ".join(f"ptr addrspace(1) %in{c}" for c in "ab"[:nin])
  return f"""
define amdgpu_kernel void @{name}(ptr addrspace(1) %out, {params}) #0 {{
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
{loads}
{body}
  %po = getelementptr {t}, ptr addrspace(1) %out, i32 %i
  store {t} %r, ptr addrspace(1) %po
  ret void
}}"""


# name -> (result type, input type, body)
ELEMENTWISE: dict[str, tuple[str, str, str]] = {
  "add_f32": ("float", "float", "%r = fadd float %a, %b"),
  "sub_f32": ("float", "float", "%r = fsub float %a, %b"),
  "mul_f32": ("float", "float", "%r = fmul float %a, %b"),
  "div_f32": ("float", "float", "%r = fdiv float %a, %b"),
  "fma_f32": ("float", "float", "%r = call float @llvm.fma.f32(float %a, float %b, float 3.0)"),
  "max_f32": ("float", "float", "%r = call float @llvm.maxnum.f32(float %a, float %b)"),
  "min_f32": ("float", "float", "%r = call float @llvm.minnum.f32(float %a, float %b)"),
  "sqrt_f32": ("float", "float", "%r = call float @llvm.sqrt.f32(float %a)"),
  "trunc_f32": ("float", "float", "%r = call float @llvm.trunc.f32(float %a)"),
  "floor_f32": ("float", "float", "%r = call float @llvm.floor.f32(float %a)"),
  "cmp_f32": ("float", "float", "%c = fcmp olt float %a, %b\n  %r = select i1 %c, float %a, float 0.5"),
  "neg_abs_f32": ("float", "float", "%x = call float @llvm.fabs.f32(float %a)\n  %y = fneg float %b\n  %r = fmul float %x, %y"),
  "add_f64": ("double", "double", "%r = fadd double %a, %b"),
  "mul_f64": ("double", "double", "%r = fmul double %a, %b"),
  "fma_f64": ("double", "double", "%r = call double @llvm.fma.f64(double %a, double %b, double 1.0)"),
  "div_f64": ("double", "double", "%r = fdiv double %a, %b"),
  "add_f16": ("half", "half", "%r = fadd half %a, %b"),
  "mul_f16": ("half", "half", "%r = fmul half %a, %b"),
  "fma_f16": ("half", "half", "%r = call half @llvm.fma.f16(half %a, half %b, half 2.0)"),
  "add_i32": ("i32", "i32", "%r = add i32 %a, %b"),
  "sub_i32": ("i32", "i32", "%r = sub i32 %a, %b"),
  "mul_i32": ("i32", "i32", "%r = mul i32 %a, %b"),
  "sdiv_i32": ("i32", "i32", "%r = sdiv i32 %a, %b"),
  "urem_i32": ("i32", "i32", "%r = urem i32 %a, %b"),
  "shl_i32": ("i32", "i32", "%s = and i32 %b, 31\n  %r = shl i32 %a, %s"),
  "ashr_i32": ("i32", "i32", "%s = and i32 %b, 31\n  %r = ashr i32 %a, %s"),
  "lshr_i32": ("i32", "i32", "%s = and i32 %b, 31\n  %r = lshr i32 %a, %s"),
  "bits_i32": ("i32", "i32", "%x = xor i32 %a, %b\n  %y = or i32 %x, 255\n  %r = and i32 %y, %b"),
  "max_i32": ("i32", "i32", "%r = call i32 @llvm.smax.i32(i32 %a, i32 %b)"),
  "umin_i32": ("i32", "i32", "%r = call i32 @llvm.umin.i32(i32 %a, i32 %b)"),
  "popc_i32": ("i32", "i32", "%x = call i32 @llvm.ctpop.i32(i32 %a)\n  %y = call i32 @llvm.ctlz.i32(i32 %b, i1 false)\n  %r = add i32 %x, %y"),
  "cmp_i32": ("i32", "i32", "%c = icmp slt i32 %a, %b\n  %r = select i1 %c, i32 %a, i32 7"),
  "add_i64": ("i64", "i64", "%r = add i64 %a, %b"),
  "mul_i64": ("i64", "i64", "%r = mul i64 %a, %b"),
  "shl_i64": ("i64", "i64", "%s = and i64 %b, 63\n  %r = shl i64 %a, %s"),
  "add_i16": ("i16", "i16", "%r = add i16 %a, %b"),
  "mul_i16": ("i16", "i16", "%r = mul i16 %a, %b"),
  "add_i8": ("i8", "i8", "%r = add i8 %a, %b"),
  "sext_i8": ("i32", "i8", "%x = sext i8 %a to i32\n  %y = zext i8 %b to i32\n  %r = add i32 %x, %y"),
  "cvt_f32_i32": ("float", "i32", "%x = sitofp i32 %a to float\n  %y = uitofp i32 %b to float\n  %r = fadd float %x, %y"),
  "cvt_i32_f32": ("i32", "float", "%x = fptosi float %a to i32\n  %y = fptoui float %b to i32\n  %r = add i32 %x, %y"),
  "cvt_f16_f32": ("half", "float", "%x = fptrunc float %a to half\n  %y = fptrunc float %b to half\n  %r = fadd half %x, %y"),
  "cvt_f32_f16": ("float", "half", "%x = fpext half %a to float\n  %y = fpext half %b to float\n  %r = fadd float %x, %y"),
  "cvt_f64_f32": ("double", "float", "%x = fpext float %a to double\n  %y = fpext float %b to double\n  %r = fadd double %x, %y"),
  "cvt_f32_f64": ("float", "double", "%x = fptrunc double %a to float\n  %y = fptrunc double %b to float\n  %r = fadd float %x, %y"),
  "cvt_f64_i32": ("double", "i32", "%x = sitofp i32 %a to double\n  %y = uitofp i32 %b to double\n  %r = fadd double %x, %y"),
  "bitcast_u8": ("float", "i8", "%x = uitofp i8 %a to float\n  %y = sitofp i8 %b to float\n  %r = fsub float %x, %y"),
  "sub_f16": ("half", "half", "%r = fsub half %a, %b"),
  "div_f16": ("half", "half", "%r = fdiv half %a, %b"),
  "max_f16": ("half", "half", "%r = call half @llvm.maxnum.f16(half %a, half %b)"),
  "min_f16": ("half", "half", "%r = call half @llvm.minnum.f16(half %a, half %b)"),
  "sqrt_f16": ("half", "half", "%r = call half @llvm.sqrt.f16(half %a)"),
  "cmp_f16": ("half", "half", "%c = fcmp ugt half %a, %b\n  %r = select i1 %c, half %a, half %b"),
  "sub_f64": ("double", "double", "%r = fsub double %a, %b"),
  "sqrt_f64": ("double", "double", "%r = call double @llvm.sqrt.f64(double %a)"),
  "max_f64": ("double", "double", "%r = call double @llvm.maxnum.f64(double %a, double %b)"),
  "floor_f64": ("double", "double", "%r = call double @llvm.floor.f64(double %a)"),
  "cmp_f64": ("double", "double", "%c = fcmp oge double %a, %b\n  %r = select i1 %c, double %a, double %b"),
  "exp2_f32": ("float", "float", "%r = call float @llvm.exp2.f32(float %a)"),
  "log2_f32": ("float", "float", "%r = call float @llvm.log2.f32(float %a)"),
  "sin_f32": ("float", "float", "%r = call float @llvm.sin.f32(float %a)"),
  "rint_ceil_f32": ("float", "float", "%x = call float @llvm.rint.f32(float %a)\n  %y = call float @llvm.ceil.f32(float %b)\n  %r = fadd float %x, %y"),
  "copysign_f32": ("float", "float", "%r = call float @llvm.copysign.f32(float %a, float %b)"),
  "minimum_f32": ("float", "float", "%r = call float @llvm.minimum.f32(float %a, float %b)"),
  "maximum_f32": ("float", "float", "%r = call float @llvm.maximum.f32(float %a, float %b)"),
  "une_f32": ("i32", "float", "%c = fcmp une float %a, %b\n  %r = zext i1 %c to i32"),
  "uno_f32": ("i32", "float", "%c = fcmp uno float %a, %b\n  %r = zext i1 %c to i32"),
  "udiv_i32": ("i32", "i32", "%r = udiv i32 %a, %b"),
  "srem_i32": ("i32", "i32", "%r = srem i32 %a, %b"),
  "umax_smin_i32": ("i32", "i32", "%x = call i32 @llvm.umax.i32(i32 %a, i32 %b)\n  %y = call i32 @llvm.smin.i32(i32 %a, i32 %b)\n  %r = xor i32 %x, %y"),
  "abs_i32": ("i32", "i32", "%r = call i32 @llvm.abs.i32(i32 %a, i1 false)"),
  "cttz_brev_i32": ("i32", "i32", "%x = call i32 @llvm.cttz.i32(i32 %a, i1 false)\n  %y = call i32 @llvm.bitreverse.i32(i32 %b)\n  %r = add i32 %x, %y"),
  "fshl_i32": ("i32", "i32", "%r = call i32 @llvm.fshl.i32(i32 %a, i32 %b, i32 %b)"),
  "uaddsat_i32": ("i32", "i32", "%r = call i32 @llvm.uadd.sat.i32(i32 %a, i32 %b)"),
  "cmp_u32": ("i32", "i32", "%c = icmp ule i32 %a, %b\n  %d = icmp eq i32 %a, 5\n  %e = or i1 %c, %d\n  %r = select i1 %e, i32 %a, i32 %b"),
  "sdiv_i64": ("i64", "i64", "%r = sdiv i64 %a, %b"),
  "urem_i64": ("i64", "i64", "%r = urem i64 %a, %b"),
  "lshr_i64": ("i64", "i64", "%s = and i64 %b, 63\n  %r = lshr i64 %a, %s"),
  "ashr_i64": ("i64", "i64", "%s = and i64 %b, 63\n  %r = ashr i64 %a, %s"),
  "cmp_i64": ("i64", "i64", "%c = icmp ult i64 %a, %b\n  %r = select i1 %c, i64 %a, i64 %b"),
  "max_i16": ("i16", "i16", "%r = call i16 @llvm.smax.i16(i16 %a, i16 %b)"),
  "shl_i16": ("i16", "i16", "%s = and i16 %b, 15\n  %r = shl i16 %a, %s"),
  "cmp_i16": ("i16", "i16", "%c = icmp slt i16 %a, %b\n  %r = select i1 %c, i16 %a, i16 %b"),
  "mul_i8": ("i8", "i8", "%r = mul i8 %a, %b"),
  "udiv_i8": ("i8", "i8", "%r = udiv i8 %a, %b"),
  "cvt_i32_f16": ("i32", "half", "%x = fptosi half %a to i32\n  %y = fptoui half %b to i32\n  %r = add i32 %x, %y"),
  "cvt_f16_i32": ("half", "i32", "%x = sitofp i32 %a to half\n  %y = uitofp i32 %b to half\n  %r = fadd half %x, %y"),
  "cvt_i32_f64": ("i32", "double", "%x = fptosi double %a to i32\n  %y = fptoui double %b to i32\n  %r = add i32 %x, %y"),
  "cvt_f32_i64": ("float", "i64", "%x = sitofp i64 %a to float\n  %y = uitofp i64 %b to float\n  %r = fadd float %x, %y"),
  "cvt_i64_f32": ("i64", "float", "%x = fptosi float %a to i64\n  %y = fptoui float %b to i64\n  %r = add i64 %x, %y"),
  "cvt_f64_i64": ("double", "i64", "%x = sitofp i64 %a to double\n  %r = fadd double %x, 1.0"),
  "cvt_f16_f64": ("half", "double", "%r = fptrunc double %a to half"),
  "bool_and": ("i8", "i8", "%x = icmp ne i8 %a, 0\n  %y = icmp ne i8 %b, 0\n  %z = and i1 %x, %y\n  %r = zext i1 %z to i8"),
}

LDS = """
@lds = internal addrspace(3) global [64 x float] undef, align 4
define amdgpu_kernel void @lds_reverse(ptr addrspace(1) %out, ptr addrspace(1) %a) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %v = load float, ptr addrspace(1) %pa
  %ps = getelementptr [64 x float], ptr addrspace(3) @lds, i32 0, i32 %l
  store float %v, ptr addrspace(3) %ps
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %rl = sub i32 63, %l
  %pr = getelementptr [64 x float], ptr addrspace(3) @lds, i32 0, i32 %rl
  %w = load float, ptr addrspace(3) %pr
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %w, ptr addrspace(1) %po
  ret void
}"""

LOOP = """
define amdgpu_kernel void @loop_sum(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %m = and i32 %l, 7
  %lim = add i32 %m, %n
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%k1, %loop]
  %acc = phi float [0.0, %entry], [%acc1, %loop]
  %j = add i32 %i, %k
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %j
  %v = load float, ptr addrspace(1) %pa
  %acc1 = fadd float %acc, %v
  %k1 = add i32 %k, 1
  %c = icmp slt i32 %k1, %lim
  br i1 %c, label %loop, label %done
done:
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %acc1, ptr addrspace(1) %po
  ret void
}"""

BRANCH = """
define amdgpu_kernel void @branch(ptr addrspace(1) %out, ptr addrspace(1) %a) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %v = load i32, ptr addrspace(1) %pa
  %c = icmp sgt i32 %v, 10
  br i1 %c, label %big, label %small
big:
  %x = mul i32 %v, 3
  br label %done
small:
  %y = sub i32 100, %v
  %pb = getelementptr i32, ptr addrspace(1) %out, i32 %y
  br label %done
done:
  %r = phi i32 [%x, %big], [%y, %small]
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %po
  ret void
}"""

GUARD = """
define amdgpu_kernel void @guarded(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %c = icmp slt i32 %i, %n
  br i1 %c, label %body, label %done
body:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %v = load float, ptr addrspace(1) %pa
  %w = fmul float %v, 2.0
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %w, ptr addrspace(1) %po
  br label %done
done:
  ret void
}"""


WMMA = """
declare <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16(<16 x half>, <16 x half>, <8 x float>)
declare <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.bf16(<16 x i16>, <16 x i16>, <8 x float>)
""" + "".join(f"""
define amdgpu_kernel void @wmma_{n}(ptr addrspace(1) %d, ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c) #0 {{
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %pa = getelementptr <16 x {t}>, ptr addrspace(1) %a, i32 %l
  %va = load <16 x {t}>, ptr addrspace(1) %pa
  %pb = getelementptr <16 x {t}>, ptr addrspace(1) %b, i32 %l
  %vb = load <16 x {t}>, ptr addrspace(1) %pb
  %pc = getelementptr <8 x float>, ptr addrspace(1) %c, i32 %l
  %vc = load <8 x float>, ptr addrspace(1) %pc
  %r = call <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.{n}(<16 x {t}> %va, <16 x {t}> %vb, <8 x float> %vc)
  %pd = getelementptr <8 x float>, ptr addrspace(1) %d, i32 %l
  store <8 x float> %r, ptr addrspace(1) %pd
  ret void
}}""" for n, t in (("f16", "half"), ("bf16", "i16")))


DOT4 = """
declare i32 @llvm.amdgcn.sudot4(i1, i32, i1, i32, i32, i1)
declare i32 @llvm.amdgcn.udot4(i32, i32, i32, i1)
""" + "".join(f"""
define amdgpu_kernel void @dot4_{n}(ptr addrspace(1) %out, ptr addrspace(1) %a, ptr addrspace(1) %b) #0 {{
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %l
  %va = load i32, ptr addrspace(1) %pa
  %pb = getelementptr i32, ptr addrspace(1) %b, i32 %l
  %vb = load i32, ptr addrspace(1) %pb
  %r = call i32 {call}
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %l
  store i32 %r, ptr addrspace(1) %po
  ret void
}}""" for n, call in (("ss", "@llvm.amdgcn.sudot4(i1 true, i32 %va, i1 true, i32 %vb, i32 %l, i1 false)"),
                      ("su", "@llvm.amdgcn.sudot4(i1 true, i32 %va, i1 false, i32 %vb, i32 %l, i1 false)"),
                      ("uu", "@llvm.amdgcn.udot4(i32 %va, i32 %vb, i32 %l, i1 false)")))


IDS = """
declare i32 @llvm.amdgcn.workitem.id.y()
declare i32 @llvm.amdgcn.workitem.id.z()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare i32 @llvm.amdgcn.workgroup.id.z()
define amdgpu_kernel void @ids3d(ptr addrspace(1) %out) #1 {
  %lx = call i32 @llvm.amdgcn.workitem.id.x()
  %ly = call i32 @llvm.amdgcn.workitem.id.y()
  %lz = call i32 @llvm.amdgcn.workitem.id.z()
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %gz = call i32 @llvm.amdgcn.workgroup.id.z()
  %f = mul i32 %lz, 3
  %f1 = add i32 %f, %ly
  %f2 = mul i32 %f1, 5
  %flat = add i32 %f2, %lx
  %g1 = mul i32 %gz, 2
  %g2 = add i32 %g1, %gy
  %g3 = mul i32 %g2, 2
  %grp = add i32 %g3, %gx
  %base = mul i32 %grp, 30
  %i = add i32 %base, %flat
  %v1 = shl i32 %gx, 24
  %v2 = shl i32 %gy, 20
  %v3 = shl i32 %gz, 16
  %v4 = shl i32 %lz, 8
  %v5 = shl i32 %ly, 4
  %a = or i32 %v1, %v2
  %b = or i32 %a, %v3
  %c = or i32 %b, %v4
  %d = or i32 %c, %v5
  %e = or i32 %d, %lx
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %e, ptr addrspace(1) %po
  ret void
}
"""


def _loop_big(n: int = 16) -> str:
  """A loop whose body is a few cache lines long: LLVM brackets it with s_set_inst_prefetch_distance."""
  body = "\n".join(f"  %x{j + 1} = fmul float %x{j}, %v\n  %y{j + 1} = fadd float %y{j}, %x{j + 1}" for j in range(n))
  return f"""
define amdgpu_kernel void @loop_big(ptr addrspace(1) %out, ptr addrspace(1) %a, i32 %n) #0 {{
entry:
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%k1, %loop]
  %x0 = phi float [1.0, %entry], [%x{n}, %loop]
  %y0 = phi float [0.0, %entry], [%y{n}, %loop]
  %j = add i32 %l, %k
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %j
  %v = load float, ptr addrspace(1) %pa
{body}
  %k1 = add i32 %k, 1
  %c = icmp slt i32 %k1, %n
  br i1 %c, label %loop, label %done
done:
  %po = getelementptr float, ptr addrspace(1) %out, i32 %l
  store float %y{n}, ptr addrspace(1) %po
  ret void
}}"""


LOOP_BIG = _loop_big()


ATTRS_3D = '"amdgpu-no-implicitarg-ptr" "amdgpu-no-dispatch-ptr" "amdgpu-no-queue-ptr" "amdgpu-no-dispatch-id" ' \
           '"amdgpu-flat-work-group-size"="1,256" "uniform-work-group-size"="true"'


def module(*bodies: str) -> str: return HEAD + "\n".join(bodies) + f"\nattributes #0 = {{ {ATTRS} }}\nattributes #1 = {{ {ATTRS_3D} }}\n"


def elementwise_module() -> str:
  return module(*(elementwise(n, t, b, tin) for n, (t, tin, b) in ELEMENTWISE.items()))


def control_module() -> str: return module(LDS, LOOP, BRANCH, GUARD, WMMA, LOOP_BIG, DOT4, IDS)
