"""Launch-shape values kept across launches (emulators/nv/ptx/memo.py): the same bits as computing them, read-only
arrays a partial write copies first, a bounded store, and only launch-shape registers planned."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.nv.ptx import fast, memo
from emulators.nv.ptx.execute import STABLE_SPECIALS
from emulators.nv.ptx.parse import parse
from refgrad.device import Device
from tests.emulators.ptx.ptxkit import entry

RNG = np.random.default_rng(18)
N = 256
# index arithmetic of %tid only (%r1, %r2 and the loop's %r4..%r6), a divergent write into one of them (%r2 of the even
# lanes: a partial write into a kept read-only array), a loop run as arrays whose load is fused (its element indices
# kept), and a value loaded (%f2) that is never kept; out[t] = the sum, out[N + t] = %r2. BOUND: the loop's trips (a
# parameter %r9, or an immediate: then the trip count is kept with the induction variable's kept value)
SRC = entry(f"""
  mul.lo.s32 %r1, %r0, 3;
  add.s32 %r2, %r1, 7;
  and.b32 %r3, %r0, 1;
  setp.eq.s32 %p1, %r3, 1;
  @%p1 bra SKIP;
  add.s32 %r2, %r2, 100;
SKIP:
  mov.b32 %r4, 0;
  mov.b32 %f1, 0f00000000;
LOOP:
  add.s32 %r5, %r2, %r4;
  and.b32 %r6, %r5, 255;
  mul.wide.u32 %rd2, %r6, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.f32 %f2, [%rd3];
  add.rn.f32 %f1, %f1, %f2;
  add.s32 %r4, %r4, 1;
  setp.lt.s32 %p2, %r4, BOUND;
  @%p2 bra LOOP;
  mul.wide.u32 %rd4, %r0, 4;
  add.s64 %rd5, %rd0, %rd4;
  st.global.f32 [%rd5], %f1;
  st.global.u32 [%rd5+{4 * N}], %r2;""")


def run(trips: int, inp: np.ndarray, imm: bool = False) -> np.ndarray:
  src = SRC.replace("BOUND", str(trips) if imm else "%r9")
  return Device["NV"].run_ptx(src, "k", [np.zeros(2 * N, np.float32), inp, np.uint32(trips)], block=(N, 1, 1))[0]


@pytest.mark.parametrize("trips, imm", [(1, False), (20, False), (300, False), (20, True), (300, True)])
def test_kept_values_give_the_bits_computed(monkeypatch, trips, imm):
  inp = RNG.standard_normal(256).astype(np.float32)
  monkeypatch.setattr(memo, "enabled", False)
  want = run(trips, inp, imm)
  monkeypatch.setattr(fast, "enabled", False)
  assert run(trips, inp, imm).tobytes() == want.tobytes()   # (every instruction through its family handler)
  monkeypatch.setattr(fast, "enabled", True)
  monkeypatch.setattr(memo, "enabled", True)
  memo.clear()
  hits, stored = memo.counts
  for i in range(3):   # the first launch stores, the next ones take (the same inputs: a fresh buffer each, same values)
    assert run(trips, inp, imm).tobytes() == want.tobytes()
    if i == 0: first = memo.counts[0] - hits
  assert any(k[0] == "trips" for k in memo._store) == (imm and trips > 1)   # (1 trip: the loop is not offered to the fast path)
  assert memo.counts[1] > stored and memo.counts[0] - hits > 2 * first   # launches 2 and 3 took what launch 1 stored
  r2 = want[N:].view(np.int32)
  assert (r2 == 3 * np.arange(N) + 7 + 100 * (np.arange(N) % 2 == 0)).all()


def test_store_is_bounded(monkeypatch):
  inp = RNG.standard_normal(256).astype(np.float32)
  monkeypatch.setattr(memo, "enabled", False)
  want = run(40, inp)
  monkeypatch.setattr(memo, "enabled", True)
  monkeypatch.setattr(memo, "BUDGET", 3000)   # a few 1 KiB arrays: older ones dropped as new ones come
  memo.clear()
  for _ in range(3):
    assert run(40, inp).tobytes() == want.tobytes()
    assert 0 < memo._bytes <= 3000 and len(memo._store) > 0
  memo.clear()


def test_plan_keeps_launch_shape_registers_only():
  e = parse(SRC.replace("BOUND", "%r9")).entries["k"]
  planned = {e.instrs[i].text.strip() for i in memo.plan(e, STABLE_SPECIALS)}
  assert "add.s32 %r2, %r2, 100;" in planned and "and.b32 %r6, %r5, 255;" in planned and "mov.b32 %r4, 0;" in planned
  assert "add.s32 %r4, %r4, 1;" in planned and "mul.wide.u32 %rd2, %r6, 4;" in planned   # an induction variable from a constant
  # loaded, or from a parameter: never the same array twice; a special register's mov: its kept array already
  assert not any(t.startswith(("add.rn.f32", "setp.lt.s32 %p2", "add.s64", "ld.", "mov.u32 %r0")) for t in planned)
  assert "mov.b32 %f1, 0f00000000;" not in planned   # %f1 is also written by the add of loaded values


def test_read_only_results_are_copied_before_a_partial_write():
  a = np.arange(8, dtype=np.uint64)
  assert memo._freeze(a) and not a.flags.writeable and memo._frozen(a)
  v = np.arange(8, dtype=np.uint32).view(np.float32)
  assert memo._freeze(v) and memo._frozen(v) and not v.base.flags.writeable   # a typed view of a fresh array: both frozen
  assert not memo._freeze(np.arange(16, dtype=np.uint64)[::2])   # not all of its base: not kept


def test_a_stepped_loop_stops_trying(monkeypatch):
  """Stepped iteration by iteration, the loop's index instructions meet fresh operands every time: each gives up after
  GIVE_UP misses instead of storing one entry per iteration (and the bits stay those computed)."""
  from emulators.nv.ptx import loops
  inp = RNG.standard_normal(256).astype(np.float32)
  monkeypatch.setattr(loops, "enabled", False)
  monkeypatch.setattr(memo, "enabled", False)
  want = run(300, inp, True)
  monkeypatch.setattr(memo, "enabled", True)
  memo.clear()
  for _ in range(2): assert run(300, inp, True).tobytes() == want.tobytes()
  # per wrapped loop instruction (%r5, %r6, %rd2, %r4 and the compare of the induction variable) at most GIVE_UP + 1 entries
  assert len(memo._store) < 5 * (memo.GIVE_UP + 1) + 20
  memo.clear()
