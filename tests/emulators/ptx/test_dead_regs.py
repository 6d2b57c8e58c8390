"""Registers dropped after their last reader (emulators/nv/ptx/run.py `_dead_after`, uniform mode only): never one a
loop reads again, nor one lanes at other PCs still need; results equal those with nothing dropped."""
from __future__ import annotations

import importlib

import numpy as np

from emulators.nv.ptx import loops
from emulators.nv.ptx.parse import parse
from tests.emulators.ptx.test_loops import kernel, run

R = importlib.import_module("emulators.nv.ptx.run")   # (the package's `run` is the function)

# a value computed before a loop, last read inside it (stepped: the loop has a store), then a straight tail; a branch
# that diverges on odd threads
SRC = kernel("""
  mul.lo.s32 %r1, %r0, 3;
  add.s32 %r3, %r1, 7;
  mov.u32 %r2, 0;
  mov.u32 %r4, 0;
L_top:
  add.s32 %r4, %r4, %r3;
  st.global.u32 [%rd3], %r4;
  add.s32 %r2, %r2, 1;
  setp.lt.s32 %p1, %r2, %r9;
  @%p1 bra L_top;
  and.b32 %r5, %r0, 1;
  setp.eq.s32 %p2, %r5, 1;
  mul.lo.s32 %r6, %r4, 5;
  @%p2 bra L_odd;
  add.s32 %r6, %r6, %r1;
L_odd:
  add.s32 %r7, %r6, %r5;
  st.global.u32 [%rd3], %r7;
""")


def test_dead_registers_are_never_read_again(monkeypatch):
  e = parse(SRC).entries["k"]
  dead = R._dead_after(e)
  where = {r: i for i, regs in enumerate(dead) for r in regs}
  loop = next(i for i, ins in enumerate(e.instrs) if ins.op == "bra" and ins.pred is not None and e.labels[ins.args[0].value] < i)
  assert "%r3" not in where   # last read inside the loop: kept
  assert where["%r1"] > loop and where["%r6"] > where["%r1"]
  out = []
  for lanes in (1, 1 << 30):
    monkeypatch.setattr(R, "DROP_LANES", lanes)
    for on in (True, False):
      monkeypatch.setattr(loops, "enabled", on)
      out.append(run(SRC, 64, np.zeros(1, np.float32), 5, out=np.uint32).tobytes())
  assert len(set(out)) == 1
  t = np.arange(64)
  acc = 5 * (3 * t + 7)
  want = np.where(t & 1, acc * 5, acc * 5 + 3 * t) + (t & 1)
  assert (np.frombuffer(out[0], np.uint32) == want).all()
