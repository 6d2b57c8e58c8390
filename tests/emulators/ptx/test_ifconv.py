"""Loop bodies with forward branches (nvcc's diamonds) run if-converted as whole arrays (emulators/nv/ptx/ifconv.py) and
give the bits, the definedness and the reports of the loop stepped one instruction at a time."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.nv.ptx import ifconv, loops
from emulators.nv.ptx.parse import parse
from refgrad.runtime.driver import GPUFault
from refgrad.runtime.simt import UndefinedBehaviourError
from tests.emulators.ptx.test_loops import SPECIAL, kernel, run

RNG = np.random.default_rng(23)


def _elem(c: str, x: str, d: str, tag: str, p: tuple[str, str, str, str], r: str) -> str:
  """nvcc's diamond for rg_maxf(c, x) -> d: NaN -> c + x, equal -> by c's sign bit, else the larger (blocks out of order)."""
  return f"""
  setp.nan.f32 {p[0]}, {c}, {x};
  @{p[0]} bra L_nan{tag};
  setp.eq.f32 {p[1]}, {c}, {x};
  @{p[1]} bra L_eq{tag};
  bra.uni L_gt{tag};
L_eq{tag}:
  mov.b32 {r}, {c};
  setp.lt.s32 {p[2]}, {r}, 0;
  selp.f32 {d}, {x}, {c}, {p[2]};
  bra.uni L_join{tag};
L_nan{tag}:
  add.f32 {d}, {c}, {x};
  bra.uni L_join{tag};
L_gt{tag}:
  setp.gt.f32 {p[3]}, {c}, {x};
  selp.f32 {d}, {c}, {x}, {p[3]};
L_join{tag}:"""


# nvcc -O3's rg_maxf reduction, unrolled twice: out[t] = max of in[t*n .. t*n + n - 1] (n even)
NVCC_MAX = kernel(f"""
  mul.lo.s32 %r1, %r0, %r9;
  mul.wide.s32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.f32 %f1, 0fFF800000;
  mov.u32 %r2, 0;
L_top:
  ld.global.f32 %f2, [%rd5];
  {_elem("%f1", "%f2", "%f3", "a", ("%p2", "%p3", "%p4", "%p5"), "%r3")}
  ld.global.f32 %f4, [%rd5+4];
  {_elem("%f3", "%f4", "%f1", "b", ("%p6", "%p7", "%p8", "%p9"), "%r4")}
  add.s64 %rd5, %rd5, 8;
  add.s32 %r2, %r2, 2;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  st.global.f32 [%rd3], %f1;
""", ".reg .pred %p<12>;")

# a triangle and a guarded instruction: a sum of the positive elements, and the last positive element's bits in %r5,
# written on that path only (lanes without one leave it as it was: never written, undefined)
TRIANGLE = kernel("""
  mul.lo.s32 %r1, %r0, %r9;
  mul.wide.s32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r2, 0;
L_top:
  ld.global.f32 %f2, [%rd5];
  setp.gtu.f32 %p2, %f2, 0f00000000;
  @!%p2 bra L_skip;
  mov.b32 %r5, %f2;
  add.rn.f32 %f1, %f1, %f2;
L_skip:
  setp.eq.f32 %p3, %f2, 0f3F800000;
  @%p3 mul.rn.f32 %f1, %f1, 0f40000000;
  add.s64 %rd5, %rd5, 4;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  STORE
""")


def _data(size: int, specials: bool = True) -> np.ndarray:
  d = np.resize(np.concatenate([SPECIAL if specials else SPECIAL[:0], RNG.standard_normal(300).astype(np.float32) * 3, [1.0, 1.0, 0.5]]), size)
  RNG.shuffle(d)
  return d.astype(np.float32)


def _outcome(src: str, *args, **kw) -> bytes | str:
  try: return run(src, *args, **kw).tobytes()
  except (GPUFault, UndefinedBehaviourError) as ex: return str(ex)


def _both(monkeypatch, src: str, *args, **kw) -> tuple[bytes | str, bytes | str, int]:
  """(if-converted, stepped, fast-path runs taken)."""
  taken = []
  orig = loops.run
  def counting(*a, **k):
    r = orig(*a, **k)
    taken.append(r is not None)
    return r
  monkeypatch.setattr(loops, "run", counting)
  monkeypatch.setattr(loops, "enabled", True)
  a = _outcome(src, *args, **kw)
  monkeypatch.setattr(loops, "enabled", False)
  b = _outcome(src, *args, **kw)
  return a, b, sum(taken)


def test_nvcc_diamonds_plan_as_masked_region():
  e = parse(NVCC_MAX).entries["k"]
  (P,) = loops.plans(e).values()
  assert P.blocks is not None and P.ifc_ops is not None and len(P.blocks.branches) == 10
  texts = {e.instrs[i].op for i, _ in P.region}
  assert "ld" not in texts and "bra" in texts   # the loads stay whole-array; every branch became a mask


@pytest.mark.parametrize("nthreads, n", [(24, 40), (5, 2), (128, 64)])
def test_nvcc_max_matches_stepped(monkeypatch, nthreads, n):
  data = _data(nthreads * n)
  a, b, taken = _both(monkeypatch, NVCC_MAX, nthreads, data, n)
  assert taken == 1 and a == b
  with np.errstate(invalid="ignore"):
    want = data.reshape(nthreads, n)
  got = np.frombuffer(a, np.float32)
  assert (np.isnan(got) == np.isnan(want).any(axis=1)).all()   # a NaN anywhere wins (the order decides which)
  ok = ~np.isnan(got)
  assert (got[ok] == want[ok].max(axis=1)).all()


def test_nvcc_max_signed_zeros_and_chunks(monkeypatch):
  monkeypatch.setattr(loops, "CHUNK_ELEMS", 64)   # several chunks
  data = RNG.choice(np.array([0.0, -0.0, -1.0, 1e-45, -1e-45], np.float32), 9 * 30)
  a, b, taken = _both(monkeypatch, NVCC_MAX, 9, data, 30)
  assert taken == 1 and a == b


@pytest.mark.parametrize("store", ["st.global.f32 [%rd3], %f1;", "st.global.b32 [%rd3], %r5;"], ids=["sum", "partial"])
def test_triangle_and_guarded_instruction_match_stepped(monkeypatch, store):
  src = TRIANGLE.replace("STORE", store)
  data = _data(16 * 20)
  a, b, taken = _both(monkeypatch, src, 16, data, 20)
  assert taken == 1 and a == b


def test_register_written_on_one_path_stays_undefined_elsewhere(monkeypatch):
  """Lanes that never take the path storing %r5 store an undefined value: reported the same way, for the same lanes."""
  src = TRIANGLE.replace("STORE", "st.global.b32 [%rd3], %r5;")
  data = -np.abs(_data(16 * 6, specials=False)) - 1   # no positive element: nobody writes %r5
  data[3 * 6 + 2] = 5.0                             # but thread 3
  a, b, taken = _both(monkeypatch, src, 16, data, 6)
  assert taken == 1 and a == b
  assert isinstance(a, str) and "60 of the 64 bytes" in a   # all but thread 3's four


def test_disabled_if_conversion_steps_loop_with_branches(monkeypatch):
  monkeypatch.setattr(ifconv, "enabled", False)
  assert not loops.plans(parse(NVCC_MAX).entries["k"])


def test_branch_region_with_load_or_store_is_not_converted():
  load = NVCC_MAX.replace("  mov.b32 %r3, %f1;", "  ld.global.b32 %r3, [%rd5];")
  store = NVCC_MAX.replace("  mov.b32 %r3, %f1;", "  st.global.b32 [%rd5], %r3;")
  for src in (load, store):
    assert not loops.plans(parse(src).entries["k"])


@pytest.mark.parametrize("nthreads, n", [(24, 40), (128, 64), (3, 2)])
def test_nvcc_max_chain_folds_like_rows_and_steps(monkeypatch, nthreads, n):
  """The diamonds fold as the renderer's MAX (first NaN met, quieted; -0 below +0): the same bits as the masked rows and
  the stepped loop, NaN payloads and signed zeros included."""
  (P,) = loops.plans(parse(NVCC_MAX).entries["k"]).values()
  assert P.ifc_fold == ("%f1", ["%f2", "%f4"], True)
  data = _data(nthreads * n, specials=False)
  data[RNG.integers(0, data.size, 4)] = [-0.0, 0.0, np.inf, -np.inf]
  bits = data.reshape(nthreads, n).view(np.uint32)
  nans = [0x7FC00001, 0xFFC00002, 0x7F800003, 0xFF800004]   # payloads, quiet and signalling: one per lane (two met in a lane: below)
  for lane in range(0, nthreads, 2): bits[lane, RNG.integers(0, n)] = nans[lane // 2 % 4]
  out = []
  for fold in (True, False):
    monkeypatch.setattr(loops, "fold_enabled", fold)
    a, b, taken = _both(monkeypatch, NVCC_MAX, nthreads, data, n)
    assert taken == 1 and a == b
    out.append(a)
  assert out[0] == out[1]


def test_diamond_temporaries_read_after_the_loop_do_not_fold():
  """A register written on one path (%r3) is read after the loop: only the masked rows give its value there."""
  src = NVCC_MAX.replace("  st.global.f32 [%rd3], %f1;", "  st.global.f32 [%rd3], %f1;\n  st.global.b32 [%rd3], %r3;")
  (P,) = loops.plans(parse(src).entries["k"]).values()
  assert P.ifc_ops is not None and P.ifc_fold is None


def test_two_different_nans_in_a_lane_are_not_folded(monkeypatch):
  """Which NaN `add` keeps when two meet depends on numpy's loop (array length): the chunk runs row by row then, as the
  steps compute it, so the fold and the rows agree."""
  data = np.ones((24, 40), np.float32)
  data.view(np.uint32)[20, [0, 17]] = [0x7FC00001, 0x7FC00000]
  out = []
  for fold in (True, False):
    monkeypatch.setattr(loops, "fold_enabled", fold)
    out.append(run(NVCC_MAX, 24, data.reshape(-1), 40).tobytes())
  assert out[0] == out[1]


def test_chain_value_read_after_the_loop_runs_the_last_row(monkeypatch):
  """%f3 (the first diamond's result) is read after the loop: every row but the last folds, the last runs as rows."""
  src = NVCC_MAX.replace("  st.global.f32 [%rd3], %f1;", "  st.global.f32 [%rd3], %f3;")
  (P,) = loops.plans(parse(src).entries["k"]).values()
  assert P.ifc_fold == ("%f1", ["%f2", "%f4"], False)
  data = _data(24 * 40)
  a, b, taken = _both(monkeypatch, src, 24, data, 40)
  assert taken == 1 and a == b


def test_guarded_increment_is_not_an_induction(monkeypatch):
  """`@p add.s32 r, r, 1` and an increment skipped by a branch count the positive elements: not induction variables."""
  guarded = kernel("""
  mul.lo.s32 %r1, %r0, %r9;
  mul.wide.s32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.u32 %r5, 0;
  mov.u32 %r6, 0;
  mov.u32 %r2, 0;
L_top:
  ld.global.f32 %f2, [%rd5];
  setp.gt.f32 %p2, %f2, 0f00000000;
  @%p2 add.s32 %r5, %r5, 1;
  @%p2 bra L_skip;
  add.s32 %r6, %r6, 3;
L_skip:
  add.s64 %rd5, %rd5, 4;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  mul.lo.s32 %r7, %r6, 256;
  add.s32 %r5, %r5, %r7;
  st.global.u32 [%rd3], %r5;
""")
  (P,) = loops.plans(parse(guarded).entries["k"]).values()
  assert set(P.inductions) == {"%r2", "%rd5"} and P.ifc_ops is not None
  data = _data(16 * 30, specials=False)
  a, b, taken = _both(monkeypatch, guarded, 16, data, 30, out=np.uint32)
  assert taken == 1 and a == b
  want = (data.reshape(16, 30) > 0).sum(axis=1) + 256 * 3 * (data.reshape(16, 30) <= 0).sum(axis=1)
  assert (np.frombuffer(a, np.uint32) == want).all()


def test_rendered_max_with_a_partly_undefined_carried_value_reports_as_stepped(monkeypatch):
  """The renderer's MAX region (rows.py) starting from a value defined on some lanes only: the same report as stepped."""
  from tests.emulators.ptx.test_loops import MAX_NAN as MAX
  src = MAX.replace("  mov.f32 %f1, 0fFF800000;", "  setp.lt.u32 %p3, %r0, 5;\n  @%p3 mov.f32 %f1, 0fFF800000;")
  a, b, _ = _both(monkeypatch, src, 16, _data(16 * 20, specials=False), 20)
  assert a == b and isinstance(a, str) and "44 of the 64 bytes" in a   # threads 5..15 store an undefined maximum
