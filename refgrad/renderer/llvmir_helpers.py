"""LLVM IR helper functions of refgrad/renderer/llvmir.py: the conversions and the MAX that IR has no single instruction
for, each rounding or choosing bits exactly as the reference semantics (refgrad/uop/semantics.py) says. Emitted into a
module only when its program uses them (`internal`, `alwaysinline`: LLVM inlines them and drops the rest)."""
from __future__ import annotations

# name -> (helpers it calls, IR text). $T / $I / $Q (in HELPER_SUBST): the float type, its integer type, its quiet-NaN bit.
HELPERS: dict[str, tuple[tuple[str, ...], str]] = {
  "rg_bf2f": ((), """define internal float @rg_bf2f(i16 %b) alwaysinline {
  %w = zext i16 %b to i32
  %s = shl i32 %w, 16
  %f = bitcast i32 %s to float
  ret float %f
}"""),
  # float -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN of its sign
  "rg_f2bf": ((), """define internal i16 @rg_f2bf(float %f) alwaysinline {
  %u = bitcast float %f to i32
  %a = and i32 %u, 2147483647
  %nan = icmp ugt i32 %a, 2139095040
  %h = lshr i32 %u, 16
  %q = or i32 %h, 64
  %odd = and i32 %h, 1
  %r0 = add i32 %u, 32767
  %r1 = add i32 %r0, %odd
  %r = lshr i32 %r1, 16
  %v = select i1 %nan, i32 %q, i32 %r
  %t = trunc i32 %v to i16
  ret i16 %t
}"""),
  # float16 bits -> float, exact; with integer ops only (the host: without F16C, LLVM would call compiler-rt's __extendhfsf2,
  # which MCJIT cannot resolve). A NaN keeps its sign and payload and is made quiet, as x86's vcvtph2ps does.
  "rg_h2f": ((), """define internal float @rg_h2f(i16 %h) alwaysinline {
  %w = zext i16 %h to i32
  %sign = and i32 %w, 32768
  %s = shl i32 %sign, 16
  %e = lshr i32 %w, 10
  %ex = and i32 %e, 31
  %m = and i32 %w, 1023
  %ms = shl i32 %m, 13
  %eb = add i32 %ex, 112
  %ebs = shl i32 %eb, 23
  %n0 = or i32 %s, %ebs
  %norm = or i32 %n0, %ms
  %mnz = icmp ne i32 %m, 0
  %q = select i1 %mnz, i32 4194304, i32 0
  %i0 = or i32 %s, 2139095040
  %i1 = or i32 %i0, %ms
  %inf = or i32 %i1, %q
  %mf = uitofp i32 %m to float
  %sub = fmul float %mf, 0x3E70000000000000
  %subi = bitcast float %sub to i32
  %subs = or i32 %subi, %s
  %isinf = icmp eq i32 %ex, 31
  %iszero = icmp eq i32 %ex, 0
  %r0 = select i1 %isinf, i32 %inf, i32 %norm
  %r = select i1 %iszero, i32 %subs, i32 %r0
  %f = bitcast i32 %r to float
  ret float %f
}"""),
  # float -> float16 bits, round to nearest even (subnormals, overflow to inf); a NaN keeps its sign and the top of its
  # payload and is made quiet, as x86's vcvtps2ph does. Integer ops only (see rg_h2f).
  "rg_f2h": ((), """define internal i16 @rg_f2h(float %f) alwaysinline {
  %u = bitcast float %f to i32
  %a = and i32 %u, 2147483647
  %sh = lshr i32 %u, 16
  %sign = and i32 %sh, 32768
  %nanp = lshr i32 %a, 13
  %nanm = and i32 %nanp, 1023
  %nan0 = or i32 %sign, 32256
  %nan = or i32 %nan0, %nanm
  %inf = or i32 %sign, 31744
  %rb = sub i32 %a, 939524096
  %rodd0 = lshr i32 %rb, 13
  %rodd = and i32 %rodd0, 1
  %r0 = add i32 %rb, 4095
  %r1 = add i32 %r0, %rodd
  %r2 = lshr i32 %r1, 13
  %norm = or i32 %r2, %sign
  %mant = and i32 %a, 8388607
  %m = or i32 %mant, 8388608
  %e = lshr i32 %a, 23
  %sh0 = sub i32 126, %e
  %big = icmp ugt i32 %sh0, 31
  %shift = select i1 %big, i32 31, i32 %sh0
  %q = lshr i32 %m, %shift
  %one = shl i32 1, %shift
  %mask = sub i32 %one, 1
  %rem = and i32 %m, %mask
  %halfway = lshr i32 %one, 1
  %gt = icmp ugt i32 %rem, %halfway
  %eq = icmp eq i32 %rem, %halfway
  %qodd = trunc i32 %q to i1
  %tie = and i1 %eq, %qodd
  %up = or i1 %gt, %tie
  %inc = zext i1 %up to i32
  %qs = add i32 %q, %inc
  %subn = or i32 %qs, %sign
  %isnan = icmp ugt i32 %a, 2139095040
  %isinf = icmp uge i32 %a, 1199566848
  %isnorm = icmp uge i32 %a, 947912704
  %istiny = icmp ult i32 %a, 855638016
  %v0 = select i1 %istiny, i32 %sign, i32 %subn
  %v1 = select i1 %isnorm, i32 %norm, i32 %v0
  %v2 = select i1 %isinf, i32 %inf, i32 %v1
  %v3 = select i1 %isnan, i32 %nan, i32 %v2
  %t = trunc i32 %v3 to i16
  ret i16 %t
}"""),
  # double -> float rounded to odd: rounding that again to <= 22 bits equals one rounding of d
  "rg_d2f_odd": ((), """define internal float @rg_d2f_odd(double %d) alwaysinline {
  %r = fptrunc double %d to float
  %rd = fpext float %r to double
  %inexact = fcmp une double %rd, %d
  %notnan = fcmp ord double %d, %d
  %u = bitcast float %r to i32
  %low = and i32 %u, 1
  %even = icmp eq i32 %low, 0
  %c0 = and i1 %inexact, %notnan
  %c = and i1 %c0, %even
  %ar = call double @llvm.fabs.f64(double %rd)
  %ad = call double @llvm.fabs.f64(double %d)
  %up = fcmp olt double %ar, %ad
  %step = select i1 %up, i32 1, i32 -1
  %u2 = add i32 %u, %step
  %u3 = select i1 %c, i32 %u2, i32 %u
  %f = bitcast i32 %u3 to float
  ret float %f
}"""),
  # a + b rounded to odd: the TwoSum error says whether the sum was exact and which side the exact value is on
  "rg_add_odd": ((), """define internal double @rg_add_odd(double %a, double %b) alwaysinline {
  %s = fadd double %a, %b
  %bb = fsub double %s, %a
  %t1 = fsub double %s, %bb
  %t2 = fsub double %a, %t1
  %t3 = fsub double %b, %bb
  %e = fadd double %t2, %t3
  %u = bitcast double %s to i64
  %abs = and i64 %u, 9223372036854775807
  %fin = icmp ult i64 %abs, 9218868437227405312
  %nz = fcmp une double %e, 0.0
  %low = and i64 %u, 1
  %even = icmp eq i64 %low, 0
  %c0 = and i1 %nz, %fin
  %c = and i1 %c0, %even
  %ep = fcmp ogt double %e, 0.0
  %sp = fcmp ogt double %s, 0.0
  %same = icmp eq i1 %ep, %sp
  %step = select i1 %same, i64 1, i64 -1
  %u2 = add i64 %u, %step
  %u3 = select i1 %c, i64 %u2, i64 %u
  %r = bitcast i64 %u3 to double
  ret double %r
}"""),
  # int64/uint64 -> double rounded to odd: both halves are exact doubles
  "rg_i64_odd": (("rg_add_odd",), """define internal double @rg_i64_odd(i64 %x) alwaysinline {
  %hi = and i64 %x, -4294967296
  %lo = and i64 %x, 4294967295
  %h = sitofp i64 %hi to double
  %l = sitofp i64 %lo to double
  %r = call double @rg_add_odd(double %h, double %l)
  ret double %r
}"""),
  "rg_u64_odd": (("rg_add_odd",), """define internal double @rg_u64_odd(i64 %x) alwaysinline {
  %hi = and i64 %x, -4294967296
  %lo = and i64 %x, 4294967295
  %h = uitofp i64 %hi to double
  %l = uitofp i64 %lo to double
  %r = call double @rg_add_odd(double %h, double %l)
  ret double %r
}"""),
  # MAX: NaN if either is NaN, MAX(+0,-0) = MAX(-0,+0) = +0, so the result does not depend on operand order. The NaN is
  # a's (else b's), made quiet, by bit operations: what C's a + b gives on the CPU, and LLVM may not change its sign
  # (it may for the sign of a NaN an fadd makes, e.g. by folding fadd(fneg x, y) into fsub(y, x))
  "rg_max_float": ((), """define internal $T @rg_max_$T($T %a, $T %b) alwaysinline {
  %nan = fcmp uno $T %a, %b
  %an = fcmp uno $T %a, %a
  %ai = bitcast $T %a to $I
  %bi = bitcast $T %b to $I
  %qa = or $I %ai, $Q
  %qb = or $I %bi, $Q
  %qi = select i1 %an, $I %qa, $I %qb
  %sum = bitcast $I %qi to $T
  %eq = fcmp oeq $T %a, %b
  %neg = icmp slt $I %ai, 0
  %z = select i1 %neg, $T %b, $T %a
  %gt = fcmp ogt $T %a, %b
  %m = select i1 %gt, $T %a, $T %b
  %r1 = select i1 %eq, $T %z, $T %m
  %r = select i1 %nan, $T %sum, $T %r1
  ret $T %r
}"""),
}
HELPERS["rg_max_double"] = HELPERS["rg_max_float"]
# 1/x in double without a quotient or divisor near the range ends (gfx11's v_div_scale_f64 would rescale there): x = m*2^e
# with |m| in [0.5, 1), q = 1/|m| correctly rounded and r = 1 - |m|*q exact (fma; r's sign: the side of q the exact
# quotient is on), then q*2^-e, one rounding; a denormal result that q*2^-e puts exactly halfway between two denormals
# is rounded toward the exact quotient (ties-to-even only when r = 0). A NaN is returned quiet, the sign is x's.
HELPERS["rg_recip_f64"] = ((), """define internal double @rg_recip_f64(double %x) alwaysinline {
  %fr = call { double, i32 } @llvm.frexp.f64.i32(double %x)
  %m0 = extractvalue { double, i32 } %fr, 0
  %e = extractvalue { double, i32 } %fr, 1
  %m = call double @llvm.fabs.f64(double %m0)
  %q = fdiv double 1.0, %m
  %nm = fneg double %m
  %r = call double @llvm.fma.f64(double %nm, double %q, double 1.0)
  %ne = sub i32 0, %e
  %t = call double @llvm.ldexp.f64.i32(double %q, i32 %ne)
  %back = call double @llvm.ldexp.f64.i32(double %t, i32 %e)
  %diff = fsub double %back, %q
  %ad = call double @llvm.fabs.f64(double %diff)
  %he = sub i32 %e, 1075
  %h = call double @llvm.ldexp.f64.i32(double 1.0, i32 %he)
  %tie = fcmp oeq double %ad, %h
  %inexact = fcmp one double %r, 0.0
  %fixit = and i1 %tie, %inexact
  %up = fcmp ogt double %r, 0.0
  %nh = fneg double %h
  %step = select i1 %up, double %h, double %nh
  %q2 = fadd double %q, %step
  %t2 = call double @llvm.ldexp.f64.i32(double %q2, i32 %ne)
  %tf = select i1 %fixit, double %t2, double %t
  %res = call double @llvm.copysign.f64(double %tf, double %x)
  %xi = bitcast double %x to i64
  %qi = or i64 %xi, 2251799813685248
  %qn = bitcast i64 %qi to double
  %nan = fcmp uno double %x, %x
  %out = select i1 %nan, double %qn, double %res
  ret double %out
}""")
HELPER_SUBST = {"rg_max_float": {"T": "float", "I": "i32", "Q": str(1 << 22)}, "rg_max_double": {"T": "double", "I": "i64", "Q": str(1 << 51)}}
INTRINSICS = {"llvm.fabs.f64": "declare double @llvm.fabs.f64(double)",
              "llvm.frexp.f64.i32": "declare { double, i32 } @llvm.frexp.f64.i32(double)",
              "llvm.ldexp.f64.i32": "declare double @llvm.ldexp.f64.i32(double, i32)",
              "llvm.fma.f64": "declare double @llvm.fma.f64(double, double, double)",
              "llvm.copysign.f64": "declare double @llvm.copysign.f64(double, double)"}
HELPER_INTRINSICS = {"rg_d2f_odd": ("llvm.fabs.f64",),
                     "rg_recip_f64": ("llvm.fabs.f64", "llvm.frexp.f64.i32", "llvm.ldexp.f64.i32", "llvm.fma.f64", "llvm.copysign.f64")}
