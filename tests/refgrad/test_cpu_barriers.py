"""The C backend runs linear programs with local memory and BARRIERs bit for bit like the PYTHON device:
the workgroup body in phases split at each barrier, values that live across a barrier kept per work-item,
RANGEs and uniform IFs that contain barriers run around the phases. Hand-built programs, each run on CPU
and on PYTHON (checked mode: it reports races, so the barriers in these programs are needed and enough)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from refgrad.device import Buffer
from refgrad.dtype import DType, dtypes
from refgrad.program import Runner
from refgrad.renderer.cstyle import CRenderer
from refgrad.renderer.llvmir import LLVMRenderer
from refgrad.runtime.simt import UndefinedBehaviourError
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp

F, I = dtypes.float32, dtypes.int32


# ---- helpers ----------------------------------------------------------------------------------

def seq(*items: UOp) -> list[UOp]:
  """A linear program: constants first, then each item after whatever it needs that is not placed yet (a DEFINE_ACC
  needs only its init). Blocks are built by listing their RANGE/IF, the body's last uops and the ENDRANGE/ENDIF in order."""
  out: dict[UOp, None] = {}
  def walk(u: UOp, visit) -> None:
    if u in out: return
    for s in u.src[:1] if u.op is Ops.DEFINE_ACC else u.src: walk(s, visit)
    visit(u)
  for it in items: walk(it, lambda u: out.setdefault(u, None) if u.op is Ops.CONST else None)
  for it in items: walk(it, lambda u: out.setdefault(u, None))
  return list(out)

def local(dt: DType, n: int, name: str = "tmp") -> UOp: return UOp(Ops.DEFINE_LOCAL, dt.ptr(n, local=True), (), name)
def barrier(*after: UOp) -> UOp:
  """A BARRIER ordering `after`: the stores before it, or an ENDRANGE/ENDIF/BARRIER (stores inside a closed block are out
  of scope). Equal barriers would be one UOp, so every barrier of a program names something different."""
  return UOp(Ops.BARRIER, dtypes.void, after)
def end(block: UOp) -> UOp: return UOp(Ops.ENDRANGE if block.op is Ops.RANGE else Ops.ENDIF, dtypes.void, (block,))
def acc(init: UOp, *ranges: UOp, ident: int = 0) -> UOp: return UOp(Ops.DEFINE_ACC, init.dtype, (init, *ranges), (ident,))
def assign(a: UOp, v: UOp) -> UOp: return UOp(Ops.ASSIGN, a.dtype, (a, v))

def both(name: str, uops: list[UOp], bufs: list[tuple[np.ndarray, DType]], var_vals: dict[str, int] | None = None) -> list[np.ndarray]:
  """Run on CPU, LLVM (the host module's work-item phases, refgrad/renderer/llvmir_phases.py) and PYTHON with the same
  inputs (buffers in DEFINE_GLOBAL order); assert every buffer ends bit for bit the same on all; return the CPU's buffers."""
  res = {}
  for dev in ("CPU", "LLVM", "PYTHON"):
    bb = [Buffer.from_numpy(dev, np.ascontiguousarray(a), dt) for a, dt in bufs]
    Runner(name, uops, dev)(*bb, var_vals=var_vals)
    res[dev] = [b.numpy() for b in bb]
  for dev in ("CPU", "LLVM"):
    for k, ((_, dt), c, p) in enumerate(zip(bufs, res[dev], res["PYTHON"])):
      ok = np.asarray(semantics.same_bits(c, p, dt))
      assert c.shape == p.shape and ok.all(), f"{name}: buffer {k} differs between {dev} and PYTHON at {np.argwhere(~ok)[:3].tolist()}: {c} vs {p}"
  return res["CPU"]

def again(x: UOp, k: int) -> UOp:
  """x by another UOp: equal UOps are one node, so two loads of one address at different times need different indices."""
  return x + UOp.const(x.dtype, 0) * k

def enclosing(src: str, line: str) -> list[str]:
  """The headers of the C blocks open around the first line of src that is `line` (stripped)."""
  stack: list[str] = []
  for ln in (x.strip() for x in src.splitlines()):
    if ln == line: return stack
    if ln == "}": stack.pop()
    elif ln.endswith("{"): stack.append(ln)
  raise AssertionError(f"no line {line!r} in\n{src}")

def f32(rng: np.random.Generator, n: int) -> np.ndarray:
  return (rng.standard_normal(n) * 2.0 ** rng.integers(-10, 10, n)).astype(np.float32)


# ---- tests ------------------------------------------------------------------------------------

def test_workgroup_tree_reduction_through_local_memory():
  """sum of each workgroup's 16 values by halving steps, a barrier after each; gated stores in some steps and an IF in
  others; gi is computed before the first barrier and used after the last (kept per work-item)."""
  G, L = 5, 16
  a_in = f32(np.random.default_rng(1), G * L)
  a, out, out2 = UOp.define_global(0, F), UOp.define_global(1, F), UOp.define_global(2, F)
  g, l = UOp.special("gidx0", G), UOp.special("lidx0", L)
  tmp = local(F, L)
  gi = g * L + l
  items: list[UOp] = [a, out, out2, tmp, g, l, st := tmp.store(l, a.load(gi)), barrier(st)]
  for k, s in enumerate((8, 4, 2, 1)):
    cond = l < s
    if k % 2 == 0:   # gated: lanes >= s load the alternative and store nothing
      v = tmp.load(l, cond, 0.0) + tmp.load(l + s, cond, 0.0)
      items += [st := tmp.store(l, v, cond), barrier(st)]
    else:
      items += [cond, iff := UOp(Ops.IF, dtypes.void, (cond,)), tmp.store(l, tmp.load(again(l, k)) + tmp.load(l + s)), end(iff), barrier(end(iff))]
  items += [barrier(items[-1])]   # an empty phase between two barriers
  first = l.ne(0) ^ True
  items += [first, iff := UOp(Ops.IF, dtypes.void, (first,)), out.store(g, tmp.load(UOp.const(I, 0))), end(iff), out2.store(gi, tmp.load(again(l, 9)))]
  uops = seq(*items)
  assert sum(u.op is Ops.BARRIER for u in uops) == 6
  src = CRenderer().render("treesum", uops)
  assert f"int alu{uops.index(gi)}[{L}];" in src, "gi lives across barriers: one element per work-item"
  res = both("treesum", uops, [(a_in, F), (np.zeros(G, np.float32), F), (np.zeros(G * L, np.float32), F)])
  want = a_in.reshape(G, L).copy()
  for s in (8, 4, 2, 1): want[:, :s] = want[:, :s] + want[:, s:2 * s]   # float32 adds, in the kernel's order
  assert np.array_equal(res[1].view(np.uint32), want[:, 0].view(np.uint32))
  assert np.array_equal(res[2].reshape(G, L)[:, 0].view(np.uint32), want[:, 0].view(np.uint32))

def test_values_from_before_a_barrier_are_kept_per_work_item():
  """x (scalar), v (float4, vector load) and w (gated float4 load) are loaded before the barrier and used after it."""
  G, L = 3, 8
  f4 = F.vec(4)
  rng = np.random.default_rng(2)
  a_in, b_in = f32(rng, G * L), f32(rng, G * L * 4).reshape(G * L, 4)
  a, b, out, out4 = UOp.define_global(0, F), UOp.define_global(1, f4), UOp.define_global(2, F), UOp.define_global(3, f4)
  g, l = UOp.special("gidx0", G), UOp.special("lidx0", L)
  tmp = local(F, L)
  gi = g * L + l
  x = a.load(gi) * 3.0
  v = b.load(gi)
  odd = (l % 2).ne(0)
  w = b.load(gi, odd, UOp.const(f4, -1.0))
  st = tmp.store(l, a.load(gi))
  nxt = tmp.load((l + 1) % L)
  uops = seq(a, b, out, out4, tmp, g, l, x, v, w, st, barrier(st), out.store(gi, x + nxt), out4.store(gi, v + w))
  src = CRenderer().render("kept", uops)
  for u in (x, v, w): assert f"[{L}];" in next(ln for ln in src.splitlines() if f"{'alu' if u is x else 'ld'}{uops.index(u)}[" in ln)
  res = both("kept", uops, [(a_in, F), (b_in, f4), (np.zeros(G * L, np.float32), F), (np.zeros((G * L, 4), np.float32), f4)])
  rot = a_in.reshape(G, L)[:, [(i + 1) % L for i in range(L)]].reshape(-1)
  assert np.array_equal(res[2], a_in * np.float32(3) + rot)
  wv = np.where((np.arange(G * L) % L % 2 == 1)[:, None], b_in, np.float32(-1))
  assert np.array_equal(res[3], b_in + wv)

def test_accumulators_and_a_range_containing_barriers():
  """for r < R: { tmp[l] = a[g, r, l]; BARRIER; s += tmp[(l + r) % L]; m = max over tmp (inner acc, reset each r);
  BARRIER; tmp2[l] = m; BARRIER; t += tmp2[L-1-l]; BARRIER }: s and t cross barriers inside the loop, r is uniform."""
  G, L, R = 3, 4, 5
  a_in = f32(np.random.default_rng(3), G * R * L)
  a, out = UOp.define_global(0, F), UOp.define_global(1, F)
  g, l = UOp.special("gidx0", G), UOp.special("lidx0", L)
  tmp, tmp2 = local(F, L, "tmp"), local(F, L, "tmp2")
  r, k = UOp.range(R, 0), UOp.range(L, 1)
  s, t, m = acc(UOp.const(F, 0.0), r), acc(UOp.const(F, 0.0), r, ident=1), acc(UOp.const(F, -math.inf), k, ident=2)
  st1 = tmp.store(l, a.load((g * R + r) * L + l))
  s2 = assign(s, s + tmp.load((l + r) % L))
  m2 = assign(m, m.maximum(tmp.load(k)))
  st2 = tmp2.store(l, m2)
  t2 = assign(t, t + tmp2.load((L - 1) + -l))
  uops = seq(a, out, tmp, tmp2, g, l, s, t, r, st1, barrier(st1), s2, m, k, m2, end(k), b2 := barrier(end(k)), st2, barrier(st2), t2, barrier(b2, t2), end(r),
             out.store(g * L + l, s * 1000.0 + t))
  res = both("accs", uops, [(a_in, F), (np.zeros(G * L, np.float32), F)])
  x = a_in.reshape(G, R, L)
  sw, tw = np.zeros((G, L), np.float32), np.zeros((G, L), np.float32)
  for rr in range(R):
    sw = sw + x[:, rr, [(i + rr) % L for i in range(L)]]
    tw = tw + x[:, rr].max(axis=1, keepdims=True)
  assert np.array_equal(res[1], (sw * np.float32(1000) + tw).reshape(-1))

def test_tiled_matmul_staged_through_local_memory():
  """C = A @ B with T x T workgroups (2-D local ids) and a RANGE over K tiles: stage both tiles, BARRIER, an inner
  per-work-item RANGE of multiply-adds, BARRIER."""
  M, N, K, T = 8, 12, 16, 4
  rng = np.random.default_rng(4)
  A, B = f32(rng, M * K), f32(rng, K * N)
  ga, gb, gc = UOp.define_global(0, F), UOp.define_global(1, F), UOp.define_global(2, F)
  gx, gy = UOp.special("gidx0", N // T), UOp.special("gidx1", M // T)
  lx, ly = UOp.special("lidx0", T), UOp.special("lidx1", T)
  As, Bs = local(F, T * T, "As"), local(F, T * T, "Bs")
  row, col = gy * T + ly, gx * T + lx
  kt, k = UOp.range(K // T, 0), UOp.range(T, 1)
  c = acc(UOp.const(F, 0.0), kt, k)
  sa = As.store(ly * T + lx, ga.load(row * K + kt * T + lx))
  sb = Bs.store(ly * T + lx, gb.load((kt * T + ly) * N + col))
  upd = assign(c, c + As.load(ly * T + k) * Bs.load(k * T + lx))
  uops = seq(ga, gb, gc, As, Bs, gx, gy, lx, ly, row, col, c, kt, sa, sb, barrier(sa, sb), k, upd, end(k), barrier(end(k)), end(kt), gc.store(row * N + col, c))
  src = CRenderer().render("matmul", uops)
  # phases: acc init | stage tiles | multiply-adds | store (the empty one after the last barrier has no loops)
  assert src.count("for (int lidx1 = 0;") == 4 and f"float acc{uops.index(c)}[{T * T}];" in src and "int rg_lid = lidx0 + 4 * (lidx1);" in src
  res = both("matmul", uops, [(A, F), (B, F), (np.zeros(M * N, np.float32), F)])
  want = np.zeros((M, N), np.float32)
  Am, Bm = A.reshape(M, K), B.reshape(K, N)
  for kk in range(K): want = want + Am[:, kk:kk + 1] * Bm[kk:kk + 1, :]
  assert np.array_equal(res[2].reshape(M, N).view(np.uint32), want.view(np.uint32))

@pytest.mark.parametrize("gs,ls", [((2, 3, 1), (4, 2, 1)), ((2, 1, 2), (2, 3, 2)), ((1, 1, 1), (1, 2, 3))])
def test_multi_dimensional_local_sizes(gs: tuple[int, int, int], ls: tuple[int, int, int]):
  """tmp[flat local id] = global id; BARRIER; read back at the local id with every coordinate mirrored."""
  gid = [UOp.special(f"gidx{d}", gs[d]) for d in range(3) if gs[d] > 1]
  lid = [UOp.special(f"lidx{d}", ls[d]) for d in range(3)]
  gsz = [gs[d] for d in range(3) if gs[d] > 1]
  n_wg, n_l = math.prod(gs), math.prod(ls)
  out = UOp.define_global(0, I)
  tmp = local(I, n_l)
  wg = UOp.const(I, 0)
  for gd, sz in zip(reversed(gid), reversed(gsz)): wg = wg * sz + gd
  flat = (lid[2] * ls[1] + lid[1]) * ls[0] + lid[0]
  mirrored = ((ls[2] - 1 + -lid[2]) * ls[1] + (ls[1] - 1 + -lid[1])) * ls[0] + (ls[0] - 1 + -lid[0])
  gflat = wg * n_l + flat
  st = tmp.store(flat, gflat * 7)
  uops = seq(out, tmp, *gid, *lid, st, barrier(st), out.store(gflat, tmp.load(mirrored)))
  res = both("dims", uops, [(np.full(n_wg * n_l, -1, np.int32), I)])
  want = (np.arange(n_wg * n_l).reshape(n_wg, n_l)[:, ::-1] * 7).reshape(-1)
  assert np.array_equal(res[0], want)

def test_barrier_inside_uniform_ifs():
  """IFs on a variable, on a workgroup id and on a hoisted loop index, each containing barriers, nested in a RANGE."""
  G, L, R = 4, 4, 3
  out = UOp.define_global(0, I)
  n = UOp.variable("n", 0, 10)
  g, l = UOp.special("gidx0", G), UOp.special("lidx0", L)
  tmp = local(I, L)
  r = UOp.range(R, 0)
  tot = acc(UOp.const(I, 0), r)
  c1 = g < n                              # uniform: a variable and a workgroup id
  c2 = (r * 2 + g).ne(3)                   # uniform: the hoisted loop's index
  mine = g * 100 + r * 10 + l
  st = tmp.store(l, mine)
  upd = assign(tot, tot + tmp.load((L - 1) + -l) * (r + 1))
  uops = seq(out, tmp, g, l, tot, r, c1, if1 := UOp(Ops.IF, dtypes.void, (c1,)), c2, if2 := UOp(Ops.IF, dtypes.void, (c2,)),
             st, barrier(st), upd, barrier(upd), end(if2), end(if1), end(r), out.store(g * L + l, tot))
  src = CRenderer().render("uniform_if", uops)
  for c in (c1, c2): assert not any("lidx" in h for h in enclosing(src, f"if (alu{uops.index(c)}) {{")), "the IFs run outside the phase loops"
  for nv in (0, 2, 4):
    res = both("uniform_if", uops, [(np.full(G * L, -1, np.int32), I)], var_vals={"n": nv})
    want = np.zeros((G, L), np.int64)
    for gg in range(G):
      for rr in range(R):
        if gg < nv and rr * 2 + gg != 3: want[gg] += (gg * 100 + rr * 10 + np.arange(L)[::-1]) * (rr + 1)
    assert np.array_equal(res[0], want.reshape(-1)), nv

def test_workgroups_of_one_work_item_and_several_workgroups():
  """No lidx at all: every workgroup is one work-item, the phases run one after the other."""
  G = 6
  a_in = np.arange(G * 3, dtype=np.int32) * 5 - 7
  a, out = UOp.define_global(0, I), UOp.define_global(1, I)
  g = UOp.special("gidx0", G)
  tmp = local(I, 3)
  r = UOp.range(3, 0)
  st = tmp.store(r, a.load(g * 3 + r))
  x = g * 2
  uops = seq(a, out, tmp, g, x, r, st, end(r), barrier(end(r)), out.store(g, tmp.load(UOp.const(I, 0)) + tmp.load(UOp.const(I, 2)) + x))
  res = both("solo", uops, [(a_in, I), (np.zeros(G, np.int32), I)])
  assert np.array_equal(res[1], a_in.reshape(G, 3)[:, 0] + a_in.reshape(G, 3)[:, 2] + np.arange(G) * 2)

def test_barrier_in_a_non_uniform_if_is_refused_by_both():
  out, l = UOp.define_global(0, I), UOp.special("lidx0", 4)
  tmp = local(I, 4)
  cond = l < 2
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  uops = seq(out, tmp, l, cond, iff, st := tmp.store(l, l), barrier(st), end(iff), out.store(l, l))
  for ren in (CRenderer(), LLVMRenderer()):
    with pytest.raises(ValueError, match=rf"uop {uops.index(iff)} \(IF\): barrier \(uop {uops.index(iff) + 2}\) inside a non-uniform IF: uop {uops.index(cond)} \(CMPLT\)"):
      ren.render("divergent", uops)
  # the reference reports it as undefined behaviour when it happens
  with pytest.raises(UndefinedBehaviourError, match="barrier reached by only part of a workgroup"):
    Runner("divergent", uops, "PYTHON")(Buffer.from_numpy("PYTHON", np.zeros(4, np.int32), I))
  # a condition that is uniform in fact but not provably so (a loaded value) is refused too, and so is such a loop end
  a = UOp.define_global(1, I)
  c2 = a.load(UOp.const(I, 0)).ne(0)
  if2 = UOp(Ops.IF, dtypes.void, (c2,))
  r = UOp.range(a.load(UOp.const(I, 1)), 0)
  for ren in (CRenderer(), LLVMRenderer()):
    with pytest.raises(ValueError, match="inside a non-uniform IF"):
      ren.render("loaded_if", seq(out, a, tmp, l, c2, if2, st, barrier(st), end(if2), out.store(l, l)))
    with pytest.raises(ValueError, match=r"inside a RANGE whose end is not provably uniform: uop \d+ \(LOAD\)"):
      ren.render("loaded_range", seq(out, a, tmp, l, r, st2 := tmp.store(l, r), barrier(st2), end(r), out.store(l, l)))

@pytest.mark.parametrize("vec", [False, True], ids=["scalar", "float4"])
def test_loads_carrying_their_barrier(vec: bool):
  """LOADs of local memory with the BARRIER they follow as a last source (ordering only), gated and not: the same bits on
  CPU and PYTHON, and the same C text as without that source (the program order already puts the load after the barrier)."""
  G, L = 3, 8
  dt = F.vec(4) if vec else F
  n = 4 if vec else 1
  rng = np.random.default_rng(7)
  a_in = f32(rng, G * L * n)
  a, out, out2 = UOp.define_global(0, F), UOp.define_global(1, F), UOp.define_global(2, F)
  g, l = UOp.special("gidx0", G), UOp.special("lidx0", L)
  tmp = local(F, L * n)
  gi = g * L + l
  x = a.load(gi * n, dtype=dt) * 2.0           # loaded before the barrier, used after it: kept per work-item
  st = tmp.store(l * n, a.load(gi * n, dtype=dt))
  bar = barrier(st)
  nxt, gate, alt = ((l + 3) % L) * n, (l % 3).ne(0), UOp.const(dt, -1.0) if vec else UOp.const(F, -1.0)
  def loads(b: tuple[UOp, ...]) -> list[UOp]:
    ld = UOp(Ops.LOAD, dt, (tmp, nxt, *b))
    gl = UOp(Ops.LOAD, dt, (tmp, nxt, gate, alt, *b))
    return seq(a, out, out2, tmp, g, l, x, st, bar, out.store(gi * n, ld + x), out2.store(gi * n, gl))
  uops, plain = loads((bar,)), loads(())
  assert [len(u.src) for u in uops if u.op is Ops.LOAD and u.src[0] is tmp] == [3, 5]
  assert [u.op for u in uops] == [u.op for u in plain], "the same positions with and without the ordering source"
  src = CRenderer().render("barrier_loads", uops)
  assert src == CRenderer().render("barrier_loads", plain)
  assert src.count("for (int lidx0 = 0;") == 2 and f"[{L}];" in src, "two phases, x kept across the barrier"
  res = both("barrier_loads", uops, [(a_in, F), (np.zeros(G * L * n, np.float32), F), (np.zeros(G * L * n, np.float32), F)])
  ai = a_in.reshape(G, L, n)
  rot = ai[:, [(i + 3) % L for i in range(L)]]
  assert np.array_equal(res[1].reshape(G, L, n), rot + ai * np.float32(2))
  assert np.array_equal(res[2].reshape(G, L, n), np.where((np.arange(L) % 3 != 0)[None, :, None], rot, np.float32(-1)))

def test_programs_without_barriers_render_as_before():
  g, l = UOp.special("gidx0", 3), UOp.special("lidx0", 4)
  a, out = UOp.define_global(0, F), UOp.define_global(1, F)
  tmp = local(F, 4)
  gi = g * 4 + l
  r = UOp.range(2, 0)
  s = acc(UOp.const(F, 0.0), r)
  ld = tmp.load(l)
  uops = [a, out, tmp, g, l, UOp.const(I, 4), g * 4, gi, a.load(gi), tmp.store(l, a.load(gi)), UOp.const(F, 0.0), s, r.src[0], r, ld, s + ld,
          asg := assign(s, s + ld), end(r), out.store(gi, asg)]
  # the text the renderer gave before it knew barriers (cached binaries are keyed by it)
  assert CRenderer().render("nobarrier", uops) == """void nobarrier(float* data0, float* data1) {
  for (int gidx0 = 0; gidx0 < 3; gidx0++) {
    float local2[4];
    for (int lidx0 = 0; lidx0 < 4; lidx0++) {
      int alu6 = ((int)((unsigned int)gidx0 * (unsigned int)4));
      int alu7 = ((int)((unsigned int)alu6 + (unsigned int)lidx0));
      float ld8 = data0[alu7];
      local2[lidx0] = ld8;
      float acc11 = 0x0.0p+0f;
      for (int ridx13 = 0; ridx13 < 2; ridx13++) {
        float ld14 = local2[lidx0];
        float alu15 = (acc11 + ld14);
        acc11 = alu15;
      }
      data1[alu7] = acc11;
    }
  }
}
"""

@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ls=hst.tuples(hst.integers(1, 4), hst.integers(1, 3), hst.integers(1, 2)), ng=hst.integers(1, 3), rounds=hst.integers(0, 3),
       seed=hst.integers(0, 2**32 - 1))
def test_random_exchanges_between_work_items(ls: tuple[int, int, int], ng: int, rounds: int, seed: int):
  """for r < rounds: { tmp[l] = v; BARRIER; v = v * 3 + tmp[perm[r, l]]; BARRIER } with v an int32 accumulator and perm a
  random permutation per round (read from global memory): any work-item reads any other's value."""
  n_l = math.prod(ls)
  rng = np.random.default_rng(seed)
  perm = np.concatenate([rng.permutation(n_l) for _ in range(rounds)] + [np.zeros(1, np.int64)]).astype(np.int32)
  start = rng.integers(-2**31, 2**31, ng * n_l, dtype=np.int64).astype(np.int32)
  pb, inb, out = UOp.define_global(0, I), UOp.define_global(1, I), UOp.define_global(2, I)
  g, lid = UOp.special("gidx0", ng), [UOp.special(f"lidx{d}", ls[d]) for d in range(3)]
  flat = (lid[2] * ls[1] + lid[1]) * ls[0] + lid[0]
  gi = g * n_l + flat
  tmp = local(I, n_l)
  r = UOp.range(rounds, 0)
  v = acc(inb.load(gi), r)
  st1 = tmp.store(flat, v)
  upd = assign(v, v * 3 + tmp.load(pb.load(r * n_l + flat)))
  uops = seq(pb, inb, out, tmp, g, *lid, v, r, st1, barrier(st1), upd, barrier(upd), end(r), out.store(gi, v))
  res = both("exchange", uops, [(perm, I), (start, I), (np.zeros(ng * n_l, np.int32), I)])
  want = start.reshape(ng, n_l).astype(np.int64)
  for k in range(rounds): want = (want * 3 + want[:, perm[k * n_l:(k + 1) * n_l]]) % 2**32
  assert np.array_equal(res[2], want.reshape(-1).astype(np.uint32).view(np.int32))
