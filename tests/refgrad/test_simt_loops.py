"""RANGE loops run as arrays (refgrad/runtime/simt_loops.py) and programs run as one generated function
(refgrad/runtime/simt_codegen.py) against the plain instruction loop interpreting every iteration: every result bit,
every definedness bit and every checked-mode report must be the same."""
from __future__ import annotations

import numpy as np
import pytest

from oracles.programs import RecipeStream, kernels_of
from refgrad.codegen import to_linear
from refgrad.device import Device
from refgrad.dtype import dtypes
from refgrad.kernel import Kernel
from refgrad.opt import InvalidOptError, apply_opt, candidate_opts
from refgrad.program import ProgramSpec
from refgrad.runtime.simt import Memory, Program
from refgrad.target import TARGETS
from refgrad.uop.ops import Ops, UOp


def _run(uops: list[UOp], spec: ProgramSpec, data: list[bytes], inits: list[np.ndarray | None], vector: bool, checked: bool,
         generate: bool = True) -> tuple:
  """(outcome, buffers' bytes, definedness bitmaps, origins) of one run; outcome is 'ok' or the error's type and text."""
  prg = Program("k", uops, verify=False, vector_loops=vector, generate_after=0 if generate else None)
  mems = [Memory(np.frombuffer(d, np.uint8).copy(), init) for d, init in zip(data, inits)]
  try:
    prg(mems, spec.global_size, spec.local_size, checked=checked)
    out = "ok"
  except Exception as e: out = f"{type(e).__name__}: {e}"
  return out, [m.data.tobytes() for m in mems], [None if m.bits is None else m.bits.tobytes() for m in mems], [m.origin for m in mems], prg


def _compare(uops: list[UOp], rng: np.random.Generator, undefined: bool) -> Program:
  spec = ProgramSpec.from_uops("k", uops, "PYTHON")
  sizes = [pdt.size * pdt.base.itemsize for _, pdt in spec.globals]
  data = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
  inits = [rng.random(n) < 0.97 if undefined and i > 0 else None for i, n in enumerate(sizes)]
  inits = [None if x is not None and x.all() else x for x in inits]
  for checked in (True, False):
    ref = _run(uops, spec, data, inits, False, checked, generate=False)
    for vector, generate in ((True, True), (False, True), (True, False)):
      a = _run(uops, spec, data, inits, vector, checked, generate)
      assert a[:4] == ref[:4], f"checked={checked} arrays={vector} generated={generate}: {a[0]!r} vs interpreted {ref[0]!r}"
      if generate: assert a[4]._fast is not None
  return a[4]


def _programs(seed: int, count: int) -> list[list[UOp]]:
  """Linear programs of random tensor programs (the fuzzer's recipes), each after a random walk of optimizations."""
  rng, stream, ren, out = np.random.default_rng(seed), RecipeStream(max_elements=256), Device["PYTHON"].renderer, []
  while len(out) < count:
    for name, ast in kernels_of(stream.draw(rng)):
      k = Kernel(ast, name, TARGETS["CPU"])
      for _ in range(int(rng.integers(0, 4))):
        cands = candidate_opts(k)
        if not cands: break
        try: k = apply_opt(k, cands[int(rng.integers(len(cands)))])
        except InvalidOptError: pass
      out.append(to_linear(k.lower(), ren))
  return out[:count]


@pytest.mark.parametrize("seed", range(4))
def test_random_programs_arrays_equal_interpreted(seed: int):
  progs = _programs(seed, 12)
  rng = np.random.default_rng(100 + seed)
  notes = []
  for uops in progs:
    notes += _compare(uops, rng, undefined=False).loop_notes.values()
  assert any(n == "arrays" for n in notes), f"no loop ran as arrays: {notes}"   # the comparison covered the fast path


@pytest.mark.parametrize("seed", range(2))
def test_random_programs_uninitialized_reads_report_the_same(seed: int):
  for uops in _programs(10 + seed, 10): _compare(uops, np.random.default_rng(200 + seed), undefined=True)


f32 = dtypes.float32

def _sum_loop(n: int, lanes: int, dt=f32, idx_off: int = 0) -> list[UOp]:
  per = n // lanes
  lane = UOp.special("idx0", lanes)
  r = UOp.range(per, 0)
  acc = UOp(Ops.DEFINE_ACC, dt, (UOp.const(dt, 0.0), r), (0,))
  red = UOp(Ops.ASSIGN, dt, (acc, acc + UOp.define_global(1, dt, n).load(lane * per + r + idx_off)))
  return to_linear(UOp.define_global(0, dt, lanes).store(lane, red).sink(), Device["PYTHON"].renderer)


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int32, dtypes.uint8])
@pytest.mark.parametrize("lanes", [1, 7])
def test_sum_loop_bits(dt, lanes: int):
  prg = _compare(_sum_loop(7 * 300, lanes, dt), np.random.default_rng(1), undefined=False)
  assert list(prg.loop_notes.values()) == ["arrays"]

def test_sum_loop_in_order_not_pairwise():
  """Float sums whose result depends on the order: the arrays path must give the sequential fold's bits."""
  uops = _sum_loop(4, 1)
  spec = ProgramSpec.from_uops("k", uops, "PYTHON")
  x = np.array([1e8, 1.0, -1e8, 1.0], np.float32)
  want = np.float32(0)
  for v in x: want = np.float32(want + v)
  res = _run(uops, spec, [bytes(4), x.tobytes()], [None, None], True, True)
  assert res[0] == "ok" and np.frombuffer(res[1][0], np.float32)[0] == want == np.float32(1.0)

def test_out_of_bounds_in_loop_reports_like_interpreter():
  uops = _sum_loop(64, 4, idx_off=3)   # the last lane's last iterations read past the end
  spec = ProgramSpec.from_uops("k", uops, "PYTHON")
  data = [bytes(16), np.arange(64, dtype=np.float32).tobytes()]
  a, b = _run(uops, spec, data, [None, None], True, True), _run(uops, spec, data, [None, None], False, True, generate=False)
  assert a[0] == b[0] and "OutOfBounds" in a[0]

def test_loop_with_store_is_interpreted_and_says_why():
  r = UOp.range(8, 0)
  b = UOp.define_global(0, f32, 8)
  uops = to_linear(b.store(r, UOp.define_global(1, f32, 8).load(r) * 2.0).end(r).sink() if hasattr(UOp, "end") else
                   UOp(Ops.SINK, dtypes.void, (b.store(r, UOp.define_global(1, f32, 8).load(r) * 2.0),)), Device["PYTHON"].renderer)
  prg = Program("k", uops)
  assert any("STORE" in n for n in prg.loop_notes.values()), prg.loop_notes


def test_wrapping_index_step_is_not_taken_for_a_stride():
  """idx = (r * 65536) * 65536 + lane: the plan proves a step of 2**32 per iteration, but in int32 every product wraps to
  0, so every iteration loads element `lane`; the strided shortcut must not apply and the bits must be the interpreter's."""
  lanes, n = 4, 16
  lane = UOp.special("idx0", lanes)
  r = UOp.range(5, 0)
  acc = UOp(Ops.DEFINE_ACC, f32, (UOp.const(f32, 0.0), r), (0,))
  idx = r * UOp.const(dtypes.int32, 65536) * UOp.const(dtypes.int32, 65536) + lane
  red = UOp(Ops.ASSIGN, f32, (acc, acc + UOp.define_global(1, f32, n).load(idx)))
  uops = to_linear(UOp.define_global(0, f32, lanes).store(lane, red).sink(), Device["PYTHON"].renderer)
  spec = ProgramSpec.from_uops("k", uops, "PYTHON")
  x = np.arange(1, n + 1, dtype=np.float32) / 3
  data = [bytes(4 * lanes), x.tobytes()]
  a, b = _run(uops, spec, data, [None, None], True, True), _run(uops, spec, data, [None, None], False, True, generate=False)
  assert a[4].loop_notes and list(a[4].loop_notes.values()) == ["arrays"]
  want = np.zeros(lanes, np.float32)
  for _ in range(5): want = (want + x[:lanes]).astype(np.float32)
  assert a[:4] == b[:4] and a[0] == "ok" and np.frombuffer(a[1][0], np.float32).tobytes() == want.tobytes()


def test_generated_function_is_used_and_deep_nests_keep_the_loop():
  from refgrad.runtime import simt_codegen
  uops = _sum_loop(64, 4)
  spec = ProgramSpec.from_uops("k", uops, "PYTHON")
  prg = Program("k", uops)
  mems = [Memory.zeros(4 * 4), Memory(np.ones(64 * 4, np.uint8))]
  prg(mems, spec.global_size, spec.local_size)
  assert prg._fast is None   # generated from the second launch on
  prg(mems, spec.global_size, spec.local_size)
  assert prg._fast is not None and Program("k", uops, generate_after=None)._fast is None
  # a program nesting more loops than Python's block limit allows is run by the instruction loop, with the same result
  b = UOp.define_global(0, f32, 1)
  rs = [UOp.range(1, k) for k in range(simt_codegen.MAX_LOOP_DEPTH + 1)]
  acc = UOp(Ops.DEFINE_ACC, f32, (UOp.const(f32, 0.0), *rs), (0,))
  red = UOp(Ops.ASSIGN, f32, (acc, acc + UOp.const(f32, 1.5)))
  deep = to_linear(b.store(UOp.const(dtypes.int32, 0), red).sink(), Device["PYTHON"].renderer)
  assert sum(u.op is Ops.RANGE for u in deep) == simt_codegen.MAX_LOOP_DEPTH + 1
  prg = Program("k", deep, vector_loops=False, generate_after=0)
  m = [Memory.zeros(4)]
  prg(m)
  assert prg._fast is None
  assert np.frombuffer(m[0].data, np.float32)[0] == 1.5
