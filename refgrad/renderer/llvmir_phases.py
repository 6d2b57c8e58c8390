"""Work-item phases of the LLVM host module: how a program with BARRIERs or WMMAs runs on one CPU thread.

The phase plan is the C renderer's (refgrad/renderer/phases.py, shared): inside the workgroup loops, each
BARRIER (or WMMA, a warp collective) ends a phase, and each phase is its own loop over the work-items, so every
work-item finishes one phase before any starts the next. A RANGE or IF with a barrier inside ("hoisted") runs in the
workgroup scope around its phases: its end or condition must be provably uniform. Uniform values at the top level are
computed in the workgroup scope. A per-work-item value (accumulators included) used in another phase than its own is
"kept": an array `[work-items x [lanes x T]]` indexed by the flat work-item id (lidx0 + s0 * (lidx1 + s1 * lidx2)).

A WMMA reads its fragments from those arrays between two phases and writes its own array (`wmma_helper`): per warp, the
matrices are gathered through tables made from the lane layouts (refgrad/target.py), and each element of D is the
reference sum: c, then + a*b for each k in order (the product is exact in float, each add rounds once).
"""
from __future__ import annotations

from refgrad.dtype import dtypes
from refgrad.renderer import phases
from refgrad.target import TensorCore
from refgrad.uop.ops import UOp


def plan(name: str, uops: list[UOp], lidx_dims: set[str]) -> tuple[set[UOp], set[UOp], set[UOp]]:
  """(hoisted blocks, uniform values, kept values): the shared phase plan (refgrad/renderer/phases.py), its errors
  naming the LLVM host module."""
  return phases.plan(name, uops, lidx_dims, "the LLVM host module")


def wmma_helper(tc: TensorCore) -> tuple[str, str]:
  """(name, IR text) of the function that runs one WMMA of `tc` for every warp of a workgroup:
  `void f(i32 n, ptr a, ptr b, ptr c, ptr d)`, n work-items, a/b/c/d arrays of [n x [elems x T]] fragments."""
  if tc.dtype_in not in (dtypes.float16, dtypes.bfloat16) or tc.dtype_out != dtypes.float32:
    raise ValueError(f"tensor core {tc.name} ({tc.dtype_in!r} -> {tc.dtype_out!r}) has no LLVM host emulation")
  M, N, K = tc.dims
  name = f"rg_wmma_{tc.name}"
  tin = "half" if tc.dtype_in == dtypes.float16 else "i16"
  # float16 widens through the host's integer helper rg_h2f (refgrad/renderer/llvmir_helpers.py: no libcalls)
  widen = ("call float @rg_h2f(i16 {x})" if tin == "half" else None)
  def table(lay, shape) -> str: return ", ".join(f"i32 {int(x)}" for x in lay.owners(tc.threads, shape).reshape(-1))
  ea, eb, ec = tc.a.elems, tc.b.elems, tc.c.elems
  def elem(arr: str, tab: str, n: int, e: int, idx: str, t: str, out: str) -> list[str]:
    # element idx of matrix `arr` in warp %w: fragment position w * e + table[idx]
    return [f"%{out}p = getelementptr [{n} x i32], ptr @{name}_{tab}, i32 0, i32 {idx}", f"%{out}o = load i32, ptr %{out}p",
            f"%{out}b = mul i32 %w, {e}", f"%{out}f = add i32 %{out}b, %{out}o", f"%{out}q = getelementptr {t}, ptr %{arr}, i32 %{out}f"]
  def wide(out: str) -> list[str]:
    if widen: return [f"%{out}x = load i16, ptr %{out}q", f"%{out}v = {widen.format(x=f'%{out}x')}"]
    return [f"%{out}x = load i16, ptr %{out}q", f"%{out}z = zext i16 %{out}x to i32", f"%{out}s = shl i32 %{out}z, 16",
            f"%{out}v = bitcast i32 %{out}s to float"]
  lines = [
    f"@{name}_ia = private unnamed_addr constant [{M * K} x i32] [{table(tc.a, (M, K))}]",
    f"@{name}_ib = private unnamed_addr constant [{K * N} x i32] [{table(tc.b, (K, N))}]",
    f"@{name}_ic = private unnamed_addr constant [{M * N} x i32] [{table(tc.c, (M, N))}]",
    f"define internal void @{name}(i32 %n, ptr %a, ptr %b, ptr %c, ptr %d) {{",
    "entry:", "  %wv = alloca i32", "  %iv = alloca i32", "  %kv = alloca i32", "  %sv = alloca float",
    "  store i32 0, ptr %wv", "  br label %wl",
    "wl:", "  %w = load i32, ptr %wv", "  %wc = icmp slt i32 %w, %n", "  br i1 %wc, label %wb, label %wd",
    "wb:", "  store i32 0, ptr %iv", "  br label %il",
    "il:", "  %i = load i32, ptr %iv", f"  %ic = icmp slt i32 %i, {M * N}", "  br i1 %ic, label %ib, label %id",
    "ib:", *("  " + x for x in elem("c", "ic", M * N, ec, "%i", "float", "c")), "  %cv = load float, ptr %cq", "  store float %cv, ptr %sv",
    f"  %m = udiv i32 %i, {N}", f"  %nn = urem i32 %i, {N}", "  store i32 0, ptr %kv", "  br label %kl",
    "kl:", "  %k = load i32, ptr %kv", f"  %kc = icmp slt i32 %k, {K}", "  br i1 %kc, label %kb, label %kd",
    "kb:", f"  %mk0 = mul i32 %m, {K}", "  %mk = add i32 %mk0, %k", f"  %kn0 = mul i32 %k, {N}", "  %kn = add i32 %kn0, %nn",
    *("  " + x for x in elem("a", "ia", M * K, ea, "%mk", tin, "a")), *("  " + x for x in wide("a")),
    *("  " + x for x in elem("b", "ib", K * N, eb, "%kn", tin, "b")), *("  " + x for x in wide("b")),
    "  %p = fmul float %av, %bv", "  %s0 = load float, ptr %sv", "  %s1 = fadd float %s0, %p", "  store float %s1, ptr %sv",
    "  %k1 = add i32 %k, 1", "  store i32 %k1, ptr %kv", "  br label %kl",
    "kd:", *("  " + x for x in elem("d", "ic", M * N, ec, "%i", "float", "d")), "  %sd = load float, ptr %sv", "  store float %sd, ptr %dq",
    "  %i1 = add i32 %i, 1", "  store i32 %i1, ptr %iv", "  br label %il",
    "id:", f"  %w1 = add i32 %w, {tc.threads}", "  store i32 %w1, ptr %wv", "  br label %wl",
    "wd:", "  ret void", "}"]
  return name, "\n".join(lines)


__all__ = ["plan", "wmma_helper"]
