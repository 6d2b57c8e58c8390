"""The SIMT executor: LOADs ordered after a BARRIER, and WMMA (tensor cores) with its checked-mode reports."""
import time

import numpy as np
import pytest

from refgrad.device import Buffer
from refgrad.dtype import DType, dtypes
from refgrad.program import Runner
from refgrad.runtime import simt
from refgrad.runtime.simt import ExecutionError, Memory, Program, UndefinedBehaviourError
from refgrad.target import TENSOR_CORES, Layout, TensorCore
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp
from refgrad.uop.spec import SpecError, verify_linear

I32 = dtypes.int32

def g(i: int, dt: DType, size: int = -1) -> UOp: return UOp.define_global(i, dt, size)
def c(dt: DType, v) -> UOp: return UOp.const(dt, v)

def mem(a: np.ndarray) -> Memory:
  m = Memory.zeros(a.nbytes)
  m.write(a)
  return m

def view(m: Memory, np_dt) -> np.ndarray: return m.data.view(np_dt).copy()

def straight(*stores: UOp) -> list[UOp]:
  """A linear program without blocks: every node of the stores' graph, each after its sources."""
  return [u for u in UOp.sink(*stores).toposort if u.op is not Ops.SINK]

# ---- LOAD after a BARRIER ---------------------------------------------------------------------

def _rotate(n: int, barrier: bool, gated: bool) -> list[UOp]:
  """out[l] = in[(l+1) % n] of the workgroup, through local memory; with `gated`, lanes l >= n-2 take -1."""
  outb, inb, l = g(0, dtypes.float32, 2 * n), g(1, dtypes.float32, 2 * n), UOp.special("lidx0", n)
  gr = UOp.special("gidx0", 2)
  tmp = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(n, local=True), (), "tmp")
  gi = gr * n + l
  st = tmp.store(l, inb.load(gi))
  nxt = (l + 1) % n
  bar = (UOp(Ops.BARRIER, dtypes.void, (st,)),) if barrier else ()
  if gated: ld = UOp(Ops.LOAD, dtypes.float32, (tmp, nxt, l < n - 2, c(dtypes.float32, -1.0), *bar))
  else: ld = UOp(Ops.LOAD, dtypes.float32, (tmp, nxt, *bar))
  return straight(st, outb.store(gi, ld))   # the local store first, then the load (after the barrier, if any)

@pytest.mark.parametrize("gated", [False, True])
def test_load_after_a_barrier_reads_other_work_items_stores(gated):
  n = 8
  prog = _rotate(n, True, gated)
  ld = next(u for u in prog if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_LOCAL)
  assert ld.src[-1].op is Ops.BARRIER and len(ld.src) == (5 if gated else 3)
  x = np.arange(2 * n, dtype=np.float32) + 0.5
  out = Memory.zeros(2 * n * 4)
  Program("rot", prog)([out, mem(x)], (2, 1, 1), (n, 1, 1))
  want = np.roll(x.reshape(2, n), -1, axis=1)
  if gated: want[:, n - 2:] = -1
  assert view(out, np.float32).tolist() == want.reshape(-1).tolist()

@pytest.mark.parametrize("gated", [False, True])
def test_load_without_the_barrier_is_a_local_race(gated):
  n = 8
  prog = _rotate(n, False, gated)
  assert not any(u.op is Ops.BARRIER for u in prog)
  with pytest.raises(UndefinedBehaviourError, match=r"^local memory race in kernel rot at uop \d+ \(LOAD.*lidx=\(0, 0, 0\) reads index 1 "
                                                    r"of local tmp and thread gidx=\(0, 0, 0\) lidx=\(1, 0, 0\) writes it"):
    Program("rot", prog)([Memory.zeros(2 * n * 4), mem(np.zeros(2 * n, np.float32))], (2, 1, 1), (n, 1, 1))

# ---- WMMA programs ------------------------------------------------------------------------------

def lane_offset(lay: Layout, lane: UOp, cols: int) -> UOp:
  """row * cols + col of fragment element 0 of `lane`, as int arithmetic on the lane id (the lane bits of the layout)."""
  def part(bits) -> UOp:
    terms = [((lane >> b) & 1) * (1 << j) for j, (s, b) in enumerate(bits) if s == "l"]
    out = c(I32, 0)
    for t in terms: out = out + t
    return out
  return part(lay.rows) * cols + part(lay.cols)

def elem_offset(lay: Layout, e: int, cols: int) -> int:
  """What fragment element e adds to element 0's position (the element bits of the layout)."""
  r, col = lay.coords(0, e)
  return r * cols + col

def wmma_program(tc: TensorCore, groups: int = 2, warps: int = 2, a_lane_copies: bool = False, if_cond=None, lanes: int | None = None) -> list[UOp]:
  """d[w] = c[w] + a[w] @ b[w] for the warp w = gidx0 * warps + lidx1 of each workgroup, through one WMMA.
  Fragments are loaded by the layouts (element e of lane l at a.coords(l, e)) and D is stored by C's layout.
  a_lane_copies: lanes >= 16 load A from a second copy that follows the first (to give replicas other bits).
  if_cond(lane) -> bool UOp: the WMMA and the stores run inside IF(cond)."""
  m, n, k = tc.dims
  fa, fb, fc = tc.frag_dtypes
  nw = groups * warps
  ab, bb = g(0, tc.dtype_in, nw * m * k * (2 if a_lane_copies else 1)), g(1, tc.dtype_in, nw * k * n)
  cb, db = g(2, dtypes.float32, nw * m * n), g(3, dtypes.float32, nw * m * n)
  lane = UOp.special("lidx0", lanes or tc.threads)
  w = UOp.special("gidx0", groups) * warps + UOp.special("lidx1", warps)
  a_base = w * (m * k) + lane_offset(tc.a, lane, k)
  if a_lane_copies: a_base = a_base + (lane >> 4) * (nw * m * k)
  def frag(buf: UOp, base: UOp, lay: Layout, cols: int, fdt: DType) -> UOp:
    return UOp(Ops.VECTORIZE, fdt, tuple(buf.load(base + elem_offset(lay, e, cols)) for e in range(lay.elems)))
  a = frag(ab, a_base, tc.a, k, fa)
  b = frag(bb, w * (k * n) + lane_offset(tc.b, lane, n), tc.b, n, fb)
  d_base = w * (m * n) + lane_offset(tc.c, lane, n)
  cf = frag(cb, d_base, tc.c, n, fc)
  d = UOp(Ops.WMMA, fc, (a, b, cf), tc.name)
  stores = [db.store(d_base + elem_offset(tc.c, e, n), d.gep(e)) for e in range(tc.c.elems)]
  if if_cond is None: return straight(*stores)
  # everything the WMMA does not depend on runs before the IF; the WMMA and the stores inside it
  cond = if_cond(lane)
  pre = straight(db, a, b, cf, *[s.src[1] for s in stores], cond)
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  return pre + [iff, d, *[s.src[2] for s in stores], *stores, UOp(Ops.ENDIF, dtypes.void, (iff,))]

def random_inputs(tc: TensorCore, nw: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """A (nw, M, K), B (nw, K, N) in storage form and C (nw, M, N) float32, over many binades so float32 rounding matters."""
  m, n, k = tc.dims
  def wide(shape, lo: int, hi: int) -> np.ndarray: return rng.standard_normal(shape) * np.exp2(rng.integers(lo, hi, shape))
  def as_in(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16) if tc.dtype_in == dtypes.float16 else semantics.f32_to_bf16(x.astype(np.float32))
  return as_in(wide((nw, m, k), -8, 8)), as_in(wide((nw, k, n), -8, 8)), wide((nw, m, n), -12, 16).astype(np.float32)

def to_f64(x: np.ndarray, dt: DType) -> np.ndarray: return semantics.to_float64(x, dt)

def run_wmma(tc: TensorCore, prog: list[UOp], a: np.ndarray, b: np.ndarray, cm: np.ndarray, groups: int, warps: int, **kw) -> np.ndarray:
  d = Memory.zeros(cm.nbytes)
  Program("mm", prog)([mem(a), mem(b), mem(cm), d], (groups, 1, 1), (tc.threads, warps, 1), **kw)
  return view(d, np.float32).reshape(cm.shape)

TCS = sorted(TENSOR_CORES)

@pytest.mark.parametrize("name", TCS)
def test_wmma_matches_the_reference_bit_for_bit(name):
  tc = TENSOR_CORES[name]
  groups, warps = 2, 2
  a, b, cm = random_inputs(tc, groups * warps, np.random.default_rng(sum(map(ord, name))))
  got = run_wmma(tc, wmma_program(tc, groups, warps), a, b, cm, groups, warps)
  want = semantics.wmma(a, b, cm, tc.dtype_in)
  assert got.tobytes() == want.tobytes()
  # and it is a matmul: within the error bound of K float32 adds, but not the float64 result rounded once
  a64, b64 = to_f64(a, tc.dtype_in), to_f64(b, tc.dtype_in)
  exact = cm.astype(np.float64) + a64 @ b64
  bound = (tc.dims[2] + 1) * 2.0 ** -24 * (np.abs(cm) + np.abs(a64) @ np.abs(b64))
  assert (np.abs(got - exact) <= bound).all()
  assert (got != exact.astype(np.float32)).any()

@pytest.mark.parametrize("name", TCS)
def test_wmma_through_the_python_device(name):
  tc = TENSOR_CORES[name]
  a, b, cm = random_inputs(tc, 4, np.random.default_rng(3))
  prog = wmma_program(tc, 2, 2)
  bufs = [Buffer.from_numpy("PYTHON", x.reshape(-1), dt) for x, dt in ((a, tc.dtype_in), (b, tc.dtype_in), (cm, dtypes.float32))]
  out = Buffer("PYTHON", cm.size, dtypes.float32)
  Runner("mm", prog, "PYTHON")(*bufs, out)
  assert out.numpy().tobytes() == semantics.wmma(a, b, cm, tc.dtype_in).tobytes()

@pytest.mark.parametrize("name", TCS)
def test_wmma_with_uniform_fragments(name):
  # C from a constant and A, B constant vectors: uniform operands broadcast to every lane of every warp
  tc = TENSOR_CORES[name]
  m, n, k = tc.dims
  fa, fb, fc = tc.frag_dtypes
  va, vb = [float(e + 1) for e in range(tc.a.elems)], [0.5 * (e - 1) for e in range(tc.b.elems)]
  a = UOp(Ops.VECTORIZE, fa, tuple(c(tc.dtype_in, v) for v in va))
  b = UOp(Ops.VECTORIZE, fb, tuple(c(tc.dtype_in, v) for v in vb))
  lane, db = UOp.special("lidx0", tc.threads), g(0, dtypes.float32, 2 * m * n)
  base = UOp.special("gidx0", 2) * (m * n) + lane_offset(tc.c, lane, n)
  d = UOp(Ops.WMMA, fc, (a, b, c(fc, 0.25)), tc.name)
  prog = straight(*[db.store(base + elem_offset(tc.c, e, n), d.gep(e)) for e in range(tc.c.elems)])
  out = Memory.zeros(2 * m * n * 4)
  Program("mm", prog)([out], (2, 1, 1), (tc.threads, 1, 1))
  def mat(lay: Layout, vals: list[float], shape) -> np.ndarray:
    own = lay.owners(tc.threads, shape) % lay.elems   # every lane holds the same vector: element (r, c) is vals[its e]
    return semantics.from_python([vals[e] for e in own.reshape(-1)], tc.dtype_in).reshape(shape)
  want = semantics.wmma(mat(tc.a, va, (m, k)), mat(tc.b, vb, (k, n)), np.full((m, n), 0.25, np.float32), tc.dtype_in)
  got = view(out, np.float32).reshape(2, m, n)
  assert got[0].tobytes() == got[1].tobytes() == want.tobytes()

def test_warp_uniform_if_runs_only_the_warps_that_take_it():
  tc = TENSOR_CORES["CUDA_m16n8k16_half_float"]
  groups, warps = 2, 2
  a, b, cm = random_inputs(tc, 4, np.random.default_rng(11))
  prog = wmma_program(tc, groups, warps, if_cond=lambda lane: UOp.special("lidx1", warps) < 1)
  got = run_wmma(tc, prog, a, b, cm, groups, warps)
  want = semantics.wmma(a, b, cm, tc.dtype_in)
  assert got[0::2].tobytes() == want[0::2].tobytes()
  assert not got[1::2].any()   # the second warp of each workgroup skipped the stores

# ---- checked mode -------------------------------------------------------------------------------

def test_divergent_wmma_is_reported():
  tc = TENSOR_CORES["CUDA_m16n8k16_half_float"]
  a, b, cm = random_inputs(tc, 4, np.random.default_rng(1))
  prog = wmma_program(tc, if_cond=lambda lane: lane < 16)
  with pytest.raises(UndefinedBehaviourError, match=r"^divergent WMMA in kernel mm at uop \d+ \(WMMA .*arg='CUDA_m16n8k16_half_float'\): "
                                                    r"thread gidx=\(0, 0, 0\) lidx=\(16, 0, 0\) does not reach it while others of its warp"):
    run_wmma(tc, prog, a, b, cm, 2, 2)
  # unchecked, it runs: lanes 0..15 (rows 0..3 and 8..11 of D) store their fragments, the inactive lanes store nothing
  got = run_wmma(tc, prog, a, b, cm, 2, 2, checked=False)
  ran = np.array([r % 8 < 4 for r in range(16)])
  assert got[:, ran].tobytes() == semantics.wmma(a, b, cm, tc.dtype_in)[:, ran].tobytes()
  assert not got[:, ~ran].any()

@pytest.mark.parametrize("checked", [True, False])
def test_workgroup_not_a_multiple_of_the_warp(checked):
  tc = TENSOR_CORES["AMD_16x16x16_half_float"]
  a, b, cm = random_inputs(tc, 2, np.random.default_rng(2))
  prog = wmma_program(tc, 2, 1, lanes=16)
  err, key = (UndefinedBehaviourError, "^divergent WMMA in kernel mm at") if checked else (ExecutionError, "^kernel mm: uop")
  with pytest.raises(err, match=key + r".*thread gidx=\(0, 0, 0\) lidx=\(0, 0, 0\) is in a warp of only 16 lanes: the workgroup size 16"):
    Program("mm", prog)([mem(a), mem(b), mem(cm), Memory.zeros(cm.nbytes)], (2, 1, 1), (16, 1, 1), checked=checked)

@pytest.mark.parametrize("second", ["other", "negzero", "same"])
def test_amd_replicas_must_agree(second):
  tc = TENSOR_CORES["AMD_16x16x16_half_float"]
  groups, warps = 2, 1
  a, b, cm = random_inputs(tc, 2, np.random.default_rng(4))
  a[0, 0, 0], a[1, 3, 5] = 0.0, 1.5
  a2 = a.copy()   # what lanes 16..31 load
  if second == "other": a2[1, 3, 5] = 2.5
  if second == "negzero": a2[0, 0, 0] = -0.0   # equal values, different bits
  prog = wmma_program(tc, groups, warps, a_lane_copies=True)
  run = lambda **kw: run_wmma(tc, prog, np.concatenate([a, a2]), b, cm, groups, warps, **kw)
  if second == "same":
    assert run().tobytes() == semantics.wmma(a, b, cm, tc.dtype_in).tobytes()
    return
  g_, r, col, bits = (1, 3, 5, "0x4100") if second == "other" else (0, 0, 0, "0x8000")
  first = "0x3e00" if second == "other" else "0x0000"
  with pytest.raises(UndefinedBehaviourError, match=rf"^WMMA replicas differ in kernel mm at uop \d+ \(WMMA .*\): thread gidx=\({g_}, 0, 0\) "
                                                    rf"lidx=\({16 + r}, 0, 0\) gives element \({r}, {col}\) of A \(its fragment element {col}\) the "
                                                    rf"bits {bits}, but thread gidx=\({g_}, 0, 0\) lidx=\({r}, 0, 0\) .* gives {first} "
                                                    r"\(replicas must hold the same bits\)$"):
    run()
  run(checked=False)   # unchecked: no report

def test_wrong_fragment_dtype_is_refused_by_the_spec():
  tc = TENSOR_CORES["CUDA_m16n8k16_bfloat16_float"]
  prog = wmma_program(tc, 1, 1)
  wm = next(u for u in prog if u.op is Ops.WMMA)
  a = wm.src[0]
  bad_a = UOp(Ops.VECTORIZE, dtypes.float16.vec(8), tuple(x.cast(dtypes.float16) for x in a.src))
  bad = UOp(Ops.WMMA, wm.dtype, (bad_a, *wm.src[1:]), wm.arg)
  sub = {wm: bad}
  prog2 = straight(*[u.substitute(sub) for u in prog if u.op is Ops.STORE])
  with pytest.raises(SpecError, match=r"uop \d+ \(WMMA dtypes.float.vec\(4\).*CUDA_m16n8k16_bfloat16_float takes fragments "
                                      r"\(dtypes.bfloat16.vec\(8\)"):
    verify_linear(prog2)
  with pytest.raises(SpecError, match="takes fragments"):
    Program("mm", prog2)

def test_many_warps_run_as_one_vectorized_wmma(monkeypatch):
  tc = TENSOR_CORES["AMD_16x16x16_bfloat16_float"]
  groups, warps = 64, 4
  a, b, cm = random_inputs(tc, groups * warps, np.random.default_rng(9))
  calls = []
  real = semantics.wmma
  def counting(a_, b_, c_, dt):
    calls.append(a_.shape)
    return real(a_, b_, c_, dt)
  monkeypatch.setattr(simt.semantics, "wmma", counting)
  prog = wmma_program(tc, groups, warps)
  t0 = time.perf_counter()
  got = run_wmma(tc, prog, a, b, cm, groups, warps)
  print(f"{groups} workgroups of {warps} warps: {time.perf_counter() - t0:.3f} s")
  assert calls == [(groups * warps, 16, 16)]   # one call for all 256 warps: no Python loop per warp or lane
  assert got.tobytes() == real(a, b, cm, tc.dtype_in).tobytes()
