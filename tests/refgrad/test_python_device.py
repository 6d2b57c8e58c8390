"""The PYTHON device: the serialized program format, the SIMT executor and checked mode."""
import json
import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refgrad.device import Buffer, Device
from refgrad.dtype import DType, dtypes
from refgrad.program import ProgramSpec, Runner
from refgrad.renderer.serialize import PythonRenderer, SerializeError, decode_arg, encode_arg, parse, parse_program
from refgrad.runtime.ops_python import PythonAllocator
from refgrad.runtime.simt import ExecutionError, Memory, OutOfBoundsError, Program, UndefinedBehaviourError
from refgrad.uop import semantics
from refgrad.uop.linearize import linearize
from refgrad.uop.ops import GroupOp, Ops, UOp

# ---- helpers ----------------------------------------------------------------------------------

def g(i: int, dt: DType, size: int = -1) -> UOp: return UOp.define_global(i, dt, size)
def c(dt: DType, v) -> UOp: return UOp.const(dt, v)
def special(name: str, size: int) -> UOp: return UOp.special(name, size)

def mem(a: np.ndarray) -> Memory:
  m = Memory.zeros(a.nbytes)
  m.write(a)
  return m

def empty(n: int, dt: DType) -> Memory: return Memory.zeros(n * dt.itemsize)
def view(m: Memory, dt: DType) -> np.ndarray: return m.data.view(np.uint8 if dt == dtypes.bool else dt.np).copy() if dt != dtypes.bool else m.data != 0

def run(uops: list[UOp], bufs: list[Memory], gsz=None, lsz=None, vals=(), name: str = "k", **kw) -> None:
  """Run on the SIMT executor; the launch geometry defaults to the one the SPECIALs ask for."""
  spec = ProgramSpec.from_uops(name, uops, "PYTHON")
  Program(name, uops)(bufs, gsz or spec.global_size, lsz or spec.local_size, vals, **kw)

def random_values(dt: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  """Any bit pattern (floats: NaNs, infinities and denormals included)."""
  if dt == dtypes.bool: return rng.integers(0, 2, n).astype(np.bool_)
  return rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt.np)

def elementwise(op: Ops, out_dt: DType, in_dts: list[DType], n: int) -> list[UOp]:
  """out[i] = op(in0[i], in1[i], ...) over SPECIAL idx0."""
  outb = g(0, out_dt, n)
  i = special("idx0", n)
  ins = [g(k + 1, d, n) for k, d in enumerate(in_dts)]
  lds = [b.load(i) for b in ins]
  val = UOp(op, out_dt, tuple(lds))
  return [outb, i, *ins, *lds, val, outb.store(i, val)]

def no_ub_inputs(op: Ops, dt: DType, xs: list[np.ndarray]) -> list[np.ndarray]:
  """Replace operands that would be undefined behaviour with harmless ones."""
  if op in (Ops.IDIV, Ops.MOD):
    b = np.where(xs[1] == 0, 1, xs[1]).astype(dt.np)
    if not dtypes.is_unsigned(dt): b = np.where((xs[0] == dtypes.min(dt)) & (b == -1), 1, b).astype(dt.np)
    return [xs[0], b]
  if op in (Ops.SHL, Ops.SHR): return [xs[0], (xs[1].astype(np.int64) % dt.bits).astype(dt.np)]
  return xs

# ---- serialization ----------------------------------------------------------------------------

_DTS = [d for d in dtypes.all]

@st.composite
def programs(draw) -> list[UOp]:
  """Random (not necessarily meaningful) programs: many ops, dtypes, args; sources come first."""
  uops: list[UOp] = []
  for _ in range(draw(st.integers(1, 25))):
    kind = draw(st.sampled_from(["const", "global", "local", "special", "var", "alu", "vec", "range", "float_arg"]))
    dt = draw(st.sampled_from(_DTS))
    if kind == "const" or not uops:
      if dtypes.is_float(dt): v = draw(st.floats(allow_nan=True, allow_infinity=True, width=64))
      elif dt == dtypes.bool: v = draw(st.booleans())
      else: v = draw(st.integers(int(dtypes.min(dt)), int(dtypes.max(dt))))
      uops.append(UOp(Ops.CONST, dt, (), v))
    elif kind == "global": uops.append(g(draw(st.integers(0, 5)), dt.vec(draw(st.sampled_from([1, 2, 4]))), draw(st.integers(-1, 1 << 40))))
    elif kind == "local": uops.append(UOp(Ops.DEFINE_LOCAL, dt.ptr(draw(st.integers(1, 64)), local=True), (), f"temp{draw(st.integers(0, 3))}"))
    elif kind == "special": uops.append(special(draw(st.sampled_from(["gidx0", "lidx1", "idx2"])), draw(st.integers(1, 1 << 20))))
    elif kind == "var": uops.append(UOp.variable(draw(st.text("abcxyz_", min_size=1, max_size=4)), -3, draw(st.integers(0, 1 << 62))))
    elif kind == "alu":
      op = draw(st.sampled_from(sorted(GroupOp.ALU | {Ops.CAST, Ops.BITCAST}, key=lambda o: o.value)))
      n = 1 if op in GroupOp.Unary or op in (Ops.CAST, Ops.BITCAST) else 2 if op in GroupOp.Binary else 3
      uops.append(UOp(op, dt, tuple(draw(st.sampled_from(uops)) for _ in range(n))))
    elif kind == "vec":
      v = UOp(Ops.VECTORIZE, dt.vec(4), (draw(st.sampled_from(uops)),) * 4)
      uops.extend([v, UOp(Ops.GEP, v.dtype.scalar(), (v,), (draw(st.integers(0, 3)),))])
    elif kind == "range":
      end = c(dtypes.int64, draw(st.integers(1, 9)))
      r = UOp.range(end, draw(st.integers(0, 5)), dtypes.int64)
      acc = UOp(Ops.DEFINE_ACC, dtypes.int64, (end, r), (draw(st.integers(0, 3)),))   # refers forward to its RANGE
      uops.extend([end, acc, r, UOp(Ops.ENDRANGE, dtypes.void, (r,))])
    else: uops.append(UOp(Ops.NOOP, dt, (), (draw(st.floats(width=64)), (draw(st.text(max_size=3)), None, True), -0.0)))
  return list(dict.fromkeys(uops))   # a uop appears once

@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_serialize_round_trips_to_the_same_uops(uops):
  text = PythonRenderer().render("k", uops)
  json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} in {text}"))   # strict JSON: no NaN/Infinity tokens
  name, back = parse_program(text)
  assert name == "k" and len(back) == len(uops)
  assert all(a is b for a, b in zip(back, uops))
  assert parse(text.encode()) == back
  assert PythonRenderer().render("k", back) == text

@given(st.floats(allow_nan=False, width=64))
def test_float_args_are_exact(x):
  y = decode_arg(json.loads(json.dumps(encode_arg(x))))
  assert type(y) is float and struct.pack("<d", y) == struct.pack("<d", x)

def test_nan_args_keep_their_bits_and_tuples_stay_tuples():
  nan = struct.unpack("<d", struct.pack("<Q", 0xFFF4000000000123))[0]
  back = decode_arg(json.loads(json.dumps(encode_arg((nan, 1, ("a", -0.0, float("inf")))))))
  assert isinstance(back, tuple) and isinstance(back[2], tuple)
  assert struct.pack("<d", back[0]) == struct.pack("<d", nan)
  assert back[1:] == (1, ("a", -0.0, float("inf"))) and math.copysign(1, back[2][1]) == -1

def test_render_parse_render_is_stable():
  text = PythonRenderer().render("k", elementwise(Ops.ADD, dtypes.float16, [dtypes.float16] * 2, 7))
  uops = parse(text)
  assert [u.op for u in uops][-2:] == [Ops.ADD, Ops.STORE] and uops[0].dtype == dtypes.float16.ptr(7)
  assert PythonRenderer().render("k", uops) == text

@pytest.mark.parametrize("text, match", [
  ("not json", "bad JSON"),
  ('{"format": "other", "name": "k", "uops": []}', "format"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "float", [], 1.5]]}', r"entry 0 of program 'k'.*malformed arg 1\.5"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "int", [], 1], ["FROB", "int", [], null]]}', "entry 1.*unknown op 'FROB'"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "int", [], 1], ["NEG", "int", [1], null]]}', "entry 1.*positions of other entries"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "int", [], 1], ["NEG", "int", [2], null]]}', r"entry 1.*\(0\.\.1\)"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["NEG", "int", [1], null], ["NEG", "int", [0], null]]}', "sources form a cycle"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "quad", [], 1]]}', "entry 0.*unknown dtype name 'quad'"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "float.vec(1)", [], 1]]}', "entry 0.*vector count"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "float", [], {"f": NaN}]]}', "bare NaN"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "float", [], {"nan": "0x3ff0000000000000"}]]}', "entry 0.*not the bits of a float64 NaN"),
  ('{"format": "refgrad.linear/1", "name": "k", "uops": [["CONST", "float"]]}', r"entry 0.*expected \[op, dtype"),
])
def test_malformed_text_is_a_clear_error(text, match):
  with pytest.raises(SerializeError, match=match): parse(text)

def test_unrenderable_programs_name_the_uop():
  one = c(dtypes.int32, 1)
  with pytest.raises(SerializeError, match=r"uop 1 \(NOOP\): cannot serialize an arg of type Ops"):
    PythonRenderer().render("k", [one, UOp(Ops.NOOP, dtypes.void, (), ("x", Ops.ADD))])
  with pytest.raises(SerializeError, match=r"uop 0 \(NEG\): a source is not in the program"): PythonRenderer().render("k", [-one])
  with pytest.raises(SerializeError, match=r"uop 1 \(CONST\) appears twice"): PythonRenderer().render("k", [one, one])

# ---- execution vs the reference semantics ---------------------------------------------------

def _alu_cases() -> list[tuple[Ops, DType]]:
  out = []
  for op in sorted(GroupOp.ALU - {Ops.WHERE}, key=lambda o: o.value):
    for dt in dtypes.all:
      if op in GroupOp.IntOnly and not dtypes.is_int(dt): continue
      if (op in GroupOp.FloatOnly or op is Ops.MULACC) and not dtypes.is_float(dt): continue
      if op in GroupOp.Bitwise and dtypes.is_float(dt): continue
      if dt == dtypes.bool and op not in (Ops.XOR, Ops.OR, Ops.AND, Ops.CMPLT, Ops.CMPNE, Ops.MAX): continue
      out.append((op, dt))
  return out

@pytest.mark.parametrize("op, dt", _alu_cases(), ids=lambda x: getattr(x, "name", None))
def test_alu_matches_semantics(op, dt):
  n = 37
  nin = 1 if op in GroupOp.Unary else 2 if op in GroupOp.Binary else 3
  rng = np.random.default_rng(op.value * 100 + dtypes.all.index(dt))
  xs = no_ub_inputs(op, dt, [random_values(dt, n, rng) for _ in range(nin)])
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  out = empty(n, out_dt)
  run(elementwise(op, out_dt, [dt] * nin, n), [out, *map(mem, xs)])
  want = semantics.evaluate(op, out_dt, xs, [dt] * nin)
  assert semantics.same_bits(view(out, out_dt), want, out_dt).all()

@pytest.mark.parametrize("src, dst", [(dtypes.float32, dtypes.float16), (dtypes.float64, dtypes.bfloat16), (dtypes.int64, dtypes.float32),
                                      (dtypes.int32, dtypes.uint8), (dtypes.bool, dtypes.float32), (dtypes.float16, dtypes.bool),
                                      (dtypes.uint16, dtypes.int64), (dtypes.bfloat16, dtypes.float64)])
def test_cast_matches_semantics(src, dst):
  x = random_values(src, 50, np.random.default_rng(3))
  out = empty(50, dst)
  run(elementwise(Ops.CAST, dst, [src], 50), [out, mem(x)])
  assert semantics.same_bits(view(out, dst), semantics.evaluate(Ops.CAST, dst, [x], [src]), dst).all()

@pytest.mark.parametrize("src, dst", [(dtypes.float32, dtypes.int32), (dtypes.float16, dtypes.bfloat16), (dtypes.uint64, dtypes.float64)])
def test_bitcast_keeps_bits(src, dst):
  x = random_values(src, 20, np.random.default_rng(4))
  out = empty(20, dst)
  run(elementwise(Ops.BITCAST, dst, [src], 20), [out, mem(x)])
  assert view(out, dst).tobytes() == x.tobytes()

def test_copies_keep_nan_bits():
  x = np.array([0x7FC00001, 0xFFBFFFFF, 0x7F800001, 0x00000001], np.uint32).view(np.float32)
  outb, inb, i = g(0, dtypes.float32, 4), g(1, dtypes.float32, 4), special("gidx0", 4)
  cond = i < c(dtypes.int32, 2)
  ld = inb.load(i)
  val = cond.where(ld, ld)
  out = empty(4, dtypes.float32)
  run([outb, inb, i, c(dtypes.int32, 2), cond, ld, val, outb.store(i, val)], [out, mem(x)], gsz=(4, 1, 1))
  assert out.data.tobytes() == x.tobytes()

def test_uniform_operands_broadcast():
  n = 10
  outb, inb, i = g(0, dtypes.int32, n), g(1, dtypes.int32, n), special("idx0", n)
  k = c(dtypes.int32, 7)
  ld = inb.load(i)
  a = UOp(Ops.MUL, dtypes.int32, (k, k))   # uniform
  v = ld + a
  x = np.arange(n, dtype=np.int32)
  out = empty(n, dtypes.int32)
  run([outb, inb, i, k, ld, a, v, outb.store(i, v)], [out, mem(x)], gsz=(n, 1, 1))
  assert (view(out, dtypes.int32) == x + 49).all()

def test_where_and_variables():
  n = 16
  outb, inb, i = g(0, dtypes.float32, n), g(1, dtypes.float32, n), special("idx0", n)
  var = UOp.variable("lim", 0, 100)
  ld = inb.load(i)
  cond = i < var
  neg = -ld
  v = cond.where(ld, neg)
  x = np.linspace(-3, 3, n).astype(np.float32)
  out = empty(n, dtypes.float32)
  run([outb, inb, i, var, ld, cond, neg, v, outb.store(i, v)], [out, mem(x)], gsz=(n, 1, 1), vals=(5,))
  assert (view(out, dtypes.float32) == np.where(np.arange(n) < 5, x, -x)).all()
  with pytest.raises(ExecutionError, match=r"variable lim=101 is outside \[0, 100\]"):
    run([outb, inb, i, var, ld, cond, neg, v, outb.store(i, v)], [out, mem(x)], gsz=(n, 1, 1), vals=(101,))

def test_special_coordinates_in_3d():
  gsz, lsz = (3, 2, 2), (2, 3, 1)
  nl = math.prod(gsz) * math.prod(lsz)
  names = ["gidx0", "gidx1", "gidx2", "lidx0", "lidx1", "idx0", "idx1"]
  sp = [special(nm, (gsz[int(nm[-1])] if nm[0] == "g" else lsz[int(nm[-1])] if nm[0] == "l" else gsz[int(nm[-1])] * lsz[int(nm[-1])]))
        for nm in names]
  lane_uop = sp[0] + sp[1] * 3 + sp[2] * 6   # workgroup id
  lane_uop = lane_uop * 6 + sp[3] + sp[4] * 2
  bufs = [g(k, dtypes.int32, nl) for k in range(len(names))]
  uops = [*bufs, *sp, *[u for u in lane_uop.toposort if u.op in (Ops.CONST, Ops.ADD, Ops.MUL)]]
  uops = list(dict.fromkeys(uops)) + [b.store(lane_uop, s) for b, s in zip(bufs, sp)]
  outs = [empty(nl, dtypes.int32) for _ in names]
  run(uops, outs, gsz=gsz, lsz=lsz)
  lane = np.arange(nl)
  wg, loc = lane // 6, lane % 6
  want = {"gidx0": wg % 3, "gidx1": wg // 3 % 2, "gidx2": wg // 6, "lidx0": loc % 2, "lidx1": loc // 2}
  want["idx0"], want["idx1"] = want["gidx0"] * 2 + want["lidx0"], want["gidx1"] * 3 + want["lidx1"]
  for nm, o in zip(names, outs): assert (view(o, dtypes.int32) == want[nm]).all(), nm

def test_launch_geometry_must_match_the_specials():
  uops = elementwise(Ops.NEG, dtypes.int32, [dtypes.int32], 8)
  with pytest.raises(ExecutionError, match=r"SPECIAL idx0 has size 8 but the launch gives 4"):
    run(uops, [empty(8, dtypes.int32), mem(np.zeros(8, np.int32))], gsz=(4, 1, 1))
  with pytest.raises(ExecutionError, match="takes 2 buffers, got 1"): run(uops, [empty(8, dtypes.int32)], gsz=(8, 1, 1))

# ---- control flow -----------------------------------------------------------------------------

def test_if_masks_lanes():
  n = 12
  outb, inb, i = g(0, dtypes.int32, n), g(1, dtypes.int32, n), special("idx0", n)
  five = c(dtypes.int32, 5)
  cond = i < five
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  ld = inb.load(i)
  dbl = ld * c(dtypes.int32, 2)
  st_ = outb.store(i, dbl)
  uops = [outb, inb, i, five, cond, iff, ld, c(dtypes.int32, 2), dbl, st_, UOp(Ops.ENDIF, dtypes.void, (iff,))]
  x = np.arange(n, dtype=np.int32) + 100
  out = mem(np.full(n, -1, np.int32))
  run(uops, [out, mem(x)], gsz=(n, 1, 1))
  assert (view(out, dtypes.int32) == np.where(np.arange(n) < 5, 2 * x, -1)).all()

def test_if_that_no_lane_takes_is_skipped_and_its_ub_ignored():
  n = 8
  outb, i = g(0, dtypes.int32, n), special("idx0", n)
  zero, neg = c(dtypes.int32, 0), c(dtypes.int32, -1)
  cond = i < zero
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  div = UOp(Ops.IDIV, dtypes.int32, (i, zero))
  uops = [outb, i, zero, neg, cond, iff, div, outb.store(i, div), UOp(Ops.ENDIF, dtypes.void, (iff,)), outb.store(i, neg)]
  out = empty(n, dtypes.int32)
  run(uops, [out], gsz=(n, 1, 1))
  assert (view(out, dtypes.int32) == -1).all()

def test_ub_on_inactive_lanes_is_not_reported():
  n = 8
  outb, inb, i = g(0, dtypes.int32, n), g(1, dtypes.int32, n), special("idx0", n)
  zero = c(dtypes.int32, 0)
  ld = inb.load(i)
  cond = ld.ne(zero)
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  q = UOp(Ops.IDIV, dtypes.int32, (c(dtypes.int32, 100), ld))
  uops = [outb, inb, i, zero, ld, cond, iff, c(dtypes.int32, 100), q, outb.store(i, q), UOp(Ops.ENDIF, dtypes.void, (iff,))]
  x = np.array([0, 1, 0, 3, 0, 5, 0, 7], np.int32)
  out = mem(np.zeros(n, np.int32))
  run(uops, [out, mem(x)], gsz=(n, 1, 1))
  assert view(out, dtypes.int32).tolist() == [0, 100, 0, 33, 0, 20, 0, 14]

def test_gated_load_and_store():
  n, m = 10, 6
  outb, inb, i = g(0, dtypes.float32, n), g(1, dtypes.float32, m), special("idx0", n)
  lim = c(dtypes.int32, m)
  gate = i < lim
  alt = c(dtypes.float32, -2.5)
  ld = inb.load(i, gate, -2.5)
  three = c(dtypes.int32, 3)
  sgate = three < i
  uops = [outb, inb, i, lim, gate, alt, ld, three, sgate, outb.store(i, ld, sgate)]
  x = np.arange(m, dtype=np.float32) + 0.5
  out = mem(np.zeros(n, np.float32))
  run(uops, [out, mem(x)], gsz=(n, 1, 1))
  assert view(out, dtypes.float32).tolist() == [0, 0, 0, 0, 4.5, 5.5, -2.5, -2.5, -2.5, -2.5]

def _row_sum(n: int, k: int, acc_dt: DType = dtypes.float32) -> list[UOp]:
  """out[i] = sum_j in[i*k + j] with DEFINE_ACC/ASSIGN in a RANGE loop."""
  outb, inb, i = g(0, acc_dt, n), g(1, acc_dt, n * k), special("gidx0", n)
  kc, zero = c(dtypes.int32, k), c(acc_dt, 0)
  r = UOp.range(kc, 0)
  acc = UOp(Ops.DEFINE_ACC, acc_dt, (zero, r), (0,))
  base = i * kc
  idx = base + r
  ld = inb.load(idx)
  add = acc + ld
  asg = UOp(Ops.ASSIGN, acc_dt, (acc, add))
  return [outb, inb, i, kc, zero, base, acc, r, idx, ld, add, asg, UOp(Ops.ENDRANGE, dtypes.void, (r,)), outb.store(i, asg)]

def test_loop_with_accumulator():
  n, k = 9, 7
  x = np.random.default_rng(5).standard_normal(n * k).astype(np.float32)
  out = empty(n, dtypes.float32)
  run(_row_sum(n, k), [out, mem(x)], gsz=(n, 1, 1))
  want = np.zeros(n, np.float32)
  for j in range(k): want = want + x.reshape(n, k)[:, j]   # sequential float32 adds, as the loop does
  assert view(out, dtypes.float32).tobytes() == want.tobytes()

def test_reduction_from_a_kernel_graph_through_the_pipeline():
  n, k = 5, 4
  outb, inb, i = g(0, dtypes.int32, n), g(1, dtypes.int32, n * k), special("gidx0", n)
  r = UOp.range(k, 0)
  acc = UOp(Ops.DEFINE_ACC, dtypes.int32, (c(dtypes.int32, 0), r), (0,))
  sink = outb.store(i, UOp(Ops.ASSIGN, dtypes.int32, (acc, acc + inb.load(i * k + r)))).sink()
  runner = Runner.from_sink("rsum", sink, "PYTHON")
  assert any(u.op is Ops.DEFINE_ACC for u in parse(runner.spec.src))
  x = np.arange(n * k, dtype=np.int32)
  out = Buffer("PYTHON", n, dtypes.int32)
  runner(out, Buffer.from_numpy("PYTHON", x))
  assert (out.numpy() == x.reshape(n, k).sum(1)).all()

def test_loop_in_batches_of_workgroups_gives_the_same_result():
  n, k = 50, 3
  x = np.arange(n * k, dtype=np.int32)
  outs = [empty(n, dtypes.int32), empty(n, dtypes.int32)]
  prg = Program("rowsum", _row_sum(n, k, dtypes.int32))
  prg([outs[0], mem(x)], (n, 1, 1))
  prg([outs[1], mem(x)], (n, 1, 1), max_lanes=7)
  assert (view(outs[0], dtypes.int32) == x.reshape(n, k).sum(1)).all() and outs[0].data.tobytes() == outs[1].data.tobytes()

def test_loop_bounds_from_a_variable_and_nested_loops():
  # out[0] = sum_{a < v} sum_{b < a} (a*10 + b), one lane
  outb, v = g(0, dtypes.int32, 1), UOp.variable("v", 0, 10)
  zero = c(dtypes.int32, 0)
  ra = UOp.range(v, 0)
  rb = UOp.range(ra, 1)
  acc = UOp(Ops.DEFINE_ACC, dtypes.int32, (zero, ra, rb), (0,))
  ten = c(dtypes.int32, 10)
  term = ra * ten + rb
  add = acc + term
  asg = UOp(Ops.ASSIGN, dtypes.int32, (acc, add))
  uops = [outb, v, zero, ten, acc, ra, rb, UOp(Ops.MUL, dtypes.int32, (ra, ten)), term, add, asg, UOp(Ops.ENDRANGE, dtypes.void, (rb,)),
          UOp(Ops.ENDRANGE, dtypes.void, (ra,)), outb.store(zero, asg)]
  for vv in (0, 1, 4):
    out = empty(1, dtypes.int32)
    run(uops, [out], vals=(vv,))
    assert int(view(out, dtypes.int32)[0]) == sum(a * 10 + b for a in range(vv) for b in range(a))

def test_non_uniform_loop_bound_is_an_error():
  n = 4
  outb, i = g(0, dtypes.int32, n), special("idx0", n)
  r = UOp.range(i, 0)
  uops = [outb, i, r, outb.store(i, r), UOp(Ops.ENDRANGE, dtypes.void, (r,))]
  with pytest.raises(ExecutionError, match=r"kernel k: uop 2 \(RANGE.*loop end is not uniform: 0 on one lane, 1 on thread gidx=\(1, 0, 0\)"):
    run(uops, [empty(n, dtypes.int32)], gsz=(n, 1, 1))

def test_value_from_before_a_loop_stays_alive_in_every_iteration():
  # x is defined before the loop and only used inside it: it must not be freed after the first iteration
  outb, inb = g(0, dtypes.int32, 4), g(1, dtypes.int32, 1)
  zero = c(dtypes.int32, 0)
  x = inb.load(zero)
  r = UOp.range(c(dtypes.int32, 4), 0)
  y = x + r
  uops = [outb, inb, zero, c(dtypes.int32, 4), x, r, y, outb.store(r, y), UOp(Ops.ENDRANGE, dtypes.void, (r,))]
  out = empty(4, dtypes.int32)
  prg = Program("k", uops)
  prg([out, mem(np.array([40], np.int32))])
  assert view(out, dtypes.int32).tolist() == [40, 41, 42, 43]
  # and it is freed once the loop is done: every computed value is dropped exactly once
  frees = [s for _, fr in prg.code for s in fr]
  assert sorted(frees) == sorted(set(frees)) and prg.slot[4] not in frees   # freed by the ENDRANGE on exit, not in the body

# ---- local memory and vectors -----------------------------------------------------------------

def _reverse_in_workgroups(ngroups: int, width: int, barrier: bool = True) -> list[UOp]:
  n = ngroups * width
  outb, inb = g(0, dtypes.float32, n), g(1, dtypes.float32, n)
  lg, ll = special("gidx0", ngroups), special("lidx0", width)
  tmp = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(width, local=True), (), "tmp")
  w = c(dtypes.int32, width)
  gi = lg * w + ll
  ld = inb.load(gi)
  st1 = tmp.store(ll, ld)
  bar = UOp(Ops.BARRIER, dtypes.void, (st1,))
  ri = c(dtypes.int32, width - 1) + -ll
  ld2 = tmp.load(ri)
  uops = [outb, inb, tmp, lg, ll, w, UOp(Ops.MUL, dtypes.int32, (lg, w)), gi, ld, st1, *([bar] if barrier else []),
          c(dtypes.int32, width - 1), -ll, ri, ld2, outb.store(gi, ld2)]
  return uops

def test_reverse_within_workgroups_through_local_memory():
  x = np.arange(24, dtype=np.float32)
  out = empty(24, dtypes.float32)
  run(_reverse_in_workgroups(3, 8), [out, mem(x)], gsz=(3, 1, 1), lsz=(8, 1, 1))
  assert (view(out, dtypes.float32) == x.reshape(3, 8)[:, ::-1].reshape(-1)).all()

def test_vector_loads_alu_gep_vectorize_and_stores():
  n = 5
  outb, inb, i = g(0, dtypes.float32, 4 * n), g(1, dtypes.float32, 4 * n), special("idx0", n)
  four = c(dtypes.int32, 4)
  base = i * four
  v = inb.load(base, dtype=dtypes.float32.vec(4))
  vv = v * v
  gs = [vv.gep(k) for k in range(4)]
  sw = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), (gs[3], gs[2], gs[1], gs[0]))
  one = c(dtypes.float32, 1.0)
  ones = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), (one,) * 4)
  res = sw + ones
  uops = [outb, inb, i, four, base, v, vv, *gs, sw, one, ones, res, outb.store(base, res)]
  x = np.arange(4 * n, dtype=np.float32)
  out = empty(4 * n, dtypes.float32)
  run(uops, [out, mem(x)], gsz=(n, 1, 1))
  assert (view(out, dtypes.float32) == ((x * x).reshape(n, 4)[:, ::-1] + 1).reshape(-1)).all()

def test_vector_buffers_and_bool_memory_through_the_device():
  n = 6
  outb, inb, i = g(0, dtypes.int16.vec(2), n), g(1, dtypes.bool, 2 * n), special("idx0", n)
  two = c(dtypes.int32, 2)
  j = i * two
  bv = inb.load(j, dtype=dtypes.bool.vec(2))
  iv = bv.cast(dtypes.int16.vec(2))
  uops = [outb, inb, i, two, j, bv, iv, outb.store(i, iv)]
  x = np.random.default_rng(2).integers(0, 2, 2 * n).astype(np.bool_)
  out = Buffer("PYTHON", n, dtypes.int16.vec(2))
  Runner("tobits", uops, "PYTHON")(out, Buffer.from_numpy("PYTHON", x))
  assert (out.numpy() == x.reshape(n, 2).astype(np.int16)).all()

# ---- the device ---------------------------------------------------------------------------------

def test_device_runs_mad_and_reports_time():
  n = 1000
  uops = elementwise(Ops.MULACC, dtypes.float32, [dtypes.float32] * 3, n)
  rng = np.random.default_rng(7)
  xs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
  out = Buffer("PYTHON", n, dtypes.float32)
  r = Runner("mad", uops, "PYTHON")
  t = r(out, *(Buffer.from_numpy("PYTHON", x) for x in xs))
  assert isinstance(t, float) and t >= 0
  assert semantics.same_bits(out.numpy(), semantics.evaluate(Ops.MULACC, dtypes.float32, xs, [dtypes.float32] * 3), dtypes.float32).all()
  dev = Device["PYTHON"]
  assert not dev.renderer.native_transcendentals and dev.compiler.compile(r.spec.src) == r.spec.src.encode()

def test_compile_rejects_a_bad_program_and_runtime_checks_the_name():
  dev = Device["PYTHON"]
  with pytest.raises(SerializeError, match="PYTHON compile: entry 0"):
    dev.compiler.compile('{"format": "refgrad.linear/1", "name": "k", "uops": [["NOPE", "int", [], null]]}')
  lib = dev.compiler.compile(dev.renderer.render("k", elementwise(Ops.NEG, dtypes.int8, [dtypes.int8], 3)))
  with pytest.raises(ValueError, match="named 'k', not 'j'"): dev.runtime("j", lib)

# ---- checked mode: undefined behaviour -------------------------------------------------------------

def _ub_kernel(op: Ops, dt: DType, a: int | float, b: int | float | None, out_dt: DType | None = None):
  n = 6
  out_dt = out_dt or dt
  srcs = [dt] if b is None else [dt, dt]
  xs = [np.full(n, 1, dt.np) for _ in srcs]
  xs[0][3] = a
  if b is not None: xs[1][:] = 1; xs[1][3] = b
  return elementwise(op, out_dt, srcs, n), [empty(n, out_dt), *map(mem, xs)], xs, srcs, out_dt

@pytest.mark.parametrize("op, dt, a, b, out_dt, vals", [
  (Ops.IDIV, dtypes.int32, 7, 0, None, "IDIV(7, 0)"),
  (Ops.MOD, dtypes.uint8, 7, 0, None, "MOD(7, 0)"),
  (Ops.IDIV, dtypes.int32, -2**31, -1, None, "IDIV(-2147483648, -1)"),
  (Ops.MOD, dtypes.int64, -2**63, -1, None, "MOD(-9223372036854775808, -1)"),
  (Ops.SHL, dtypes.int32, 1, 32, None, "SHL(1, 32)"),
  (Ops.SHR, dtypes.int16, 1, -1, None, "SHR(1, -1)"),
  (Ops.CAST, dtypes.float32, float("nan"), None, dtypes.int32, "CAST(nan)"),
  (Ops.CAST, dtypes.float32, float("-inf"), None, dtypes.uint16, "CAST(-inf)"),
  (Ops.CAST, dtypes.float64, 300.0, None, dtypes.int8, "CAST(300.0)"),
])
def test_ub_is_reported_with_kernel_uop_thread_and_values(op, dt, a, b, out_dt, vals):
  uops, bufs, xs, srcs, out_dt = _ub_kernel(op, dt, a, b, out_dt)
  reason, _ = semantics.ub_check(op, out_dt, xs, srcs)
  with pytest.raises(UndefinedBehaviourError) as e: run(uops, bufs, gsz=(6, 1, 1), name="ubk")
  msg = str(e.value)
  assert reason in msg and "kernel ubk" in msg and f"uop {len(srcs) * 2 + 2} ({op.name}" in msg
  assert "thread gidx=(3, 0, 0) lidx=(0, 0, 0)" in msg and vals in msg
  run(uops, bufs, gsz=(6, 1, 1), name="ubk", checked=False)   # unchecked: some value, no report

def test_invalid_bools_are_ub():
  uops, bufs, xs, srcs, _ = _ub_kernel(Ops.BITCAST, dtypes.uint8, 2, None, dtypes.bool)
  reason, _ = semantics.ub_check(Ops.BITCAST, dtypes.bool, xs, srcs)
  with pytest.raises(UndefinedBehaviourError, match=rf"{reason} in kernel k at uop 4 \(BITCAST.*gidx=\(3, 0, 0\).*BITCAST\(2\)"): run(uops, bufs)
  outb, inb, i = g(0, dtypes.bool, 4), g(1, dtypes.bool, 4), special("idx0", 4)
  ld = inb.load(i)
  with pytest.raises(UndefinedBehaviourError, match=r"load of an invalid bool .*gidx=\(2, 0, 0\).*index 2 of buffer 1, whose byte 7"):
    run([outb, inb, i, ld, outb.store(i, ld)], [empty(4, dtypes.bool), mem(np.array([0, 1, 7, 1], np.uint8))])

def test_checked_env_off_turns_ub_checks_off(monkeypatch):
  uops, bufs, *_ = _ub_kernel(Ops.IDIV, dtypes.int32, 7, 0)
  monkeypatch.setenv("CHECKED", "0")
  run(uops, bufs, gsz=(6, 1, 1))
  monkeypatch.setenv("CHECKED", "1")
  with pytest.raises(UndefinedBehaviourError, match="IDIV"): run(uops, bufs, gsz=(6, 1, 1))

def test_out_of_bounds_load_is_always_an_error():
  n = 8
  outb, inb, i = g(0, dtypes.float32, n), g(1, dtypes.float32, 6), special("idx0", n)
  ld = inb.load(i)
  uops = [outb, inb, i, ld, outb.store(i, ld)]
  for checked in (True, False):
    with pytest.raises(OutOfBoundsError, match=r"out-of-bounds LOAD in kernel oob at uop 3 \(LOAD.*thread gidx=\(6, 0, 0\).*index 6 of buffer 1 "
                                                r"with 6 elements of dtypes.float \(2 lanes in all\)"):
      run(uops, [empty(n, dtypes.float32), mem(np.zeros(6, np.float32))], gsz=(n, 1, 1), name="oob", checked=checked)

def test_out_of_bounds_store_and_vector_overhang():
  outb, i = g(0, dtypes.int32, 4), special("gidx0", 2)
  three = c(dtypes.int32, 3)
  j = i * three
  v = UOp(Ops.VECTORIZE, dtypes.int32.vec(2), (i, i))
  uops = [outb, i, three, j, v, outb.store(j, v)]
  with pytest.raises(OutOfBoundsError, match=r"out-of-bounds STORE .*thread gidx=\(1, 0, 0\).*index 3 of buffer 0 with 4 elements.*covers 2 elements"):
    run(uops, [empty(4, dtypes.int32)], gsz=(2, 1, 1), checked=False)
  with pytest.raises(OutOfBoundsError, match=r"index -1 of buffer 0"):
    run([outb, i, neg := c(dtypes.int32, -1), outb.store(neg, i)], [empty(4, dtypes.int32)], gsz=(2, 1, 1))

def _host_read(m: Memory) -> np.ndarray:
  out = np.empty(m.nbytes, np.uint8)
  PythonAllocator().copyout(memoryview(out), m)
  return out

def test_read_of_uninitialized_global_memory():
  """The memcheck model: copying undefined data is not an error; the host reading it back is, naming the load it came from."""
  outb, inb, i = g(0, dtypes.float32, 4), g(1, dtypes.float32, 4), special("idx0", 4)
  ld = inb.load(i)
  uops = [outb, inb, i, ld, outb.store(i, ld)]
  out = empty(4, dtypes.float32)
  run(uops, [out, empty(4, dtypes.float32)], gsz=(4, 1, 1))
  with pytest.raises(UndefinedBehaviourError, match=r"read of uninitialized memory by the host: 16 of the 16 bytes .* first at byte 0 \(undefined data "
                                                    r"was stored there after being loaded in kernel k at uop 3 \(LOAD.*gidx=\(0, 0, 0\).*index 0 of buffer 1"):
    _host_read(out)
  with pytest.raises(UndefinedBehaviourError, match="nothing has written them"): _host_read(empty(4, dtypes.float32))
  # a store of defined data initializes: after out is written it may be read
  src, out = mem(np.ones(4, np.float32)), empty(4, dtypes.float32)
  run(uops, [out, src], gsz=(4, 1, 1))
  assert out.all_init and _host_read(out).view(np.float32).tolist() == [1.0] * 4
  partial = Memory.zeros(16)
  partial.write(np.ones(2, np.float32))
  out = empty(4, dtypes.float32)
  run(uops, [out, partial], gsz=(4, 1, 1))
  assert out.undefined_bytes().tolist() == list(range(8, 16))
  with pytest.raises(UndefinedBehaviourError, match="index 2 of buffer 1"): _host_read(out)

@pytest.mark.parametrize("use", ["address", "branch", "divisor", "gate", "loop bound"])
def test_uninitialized_value_reported_where_it_decides_something(use):
  outb, inb, i = g(0, dtypes.int32, 4), g(1, dtypes.int32, 4), special("idx0", 4)
  ld = inb.load(i)
  one = c(dtypes.int32, 1)
  if use == "address": body = [ld, outb.store(ld, i)]
  elif use == "divisor": body = [one, q := one.alu(Ops.IDIV, ld), outb.store(i, q)]
  elif use == "gate": body = [zero := c(dtypes.int32, 0), cond := ld.alu(Ops.CMPLT, zero), outb.store(i, i, cond)]
  elif use == "branch":
    zero = c(dtypes.int32, 0)
    cond = ld.alu(Ops.CMPLT, zero)
    iff = UOp(Ops.IF, dtypes.void, (cond,))
    body = [zero, cond, iff, outb.store(i, i), UOp(Ops.ENDIF, dtypes.void, (iff,))]
  else:
    rng = UOp.range(ld, 0)
    body = [rng, outb.store(i, rng), UOp(Ops.ENDRANGE, dtypes.void, (rng,))]
  uops = list(dict.fromkeys([outb, inb, i, ld, *body]))
  with pytest.raises(UndefinedBehaviourError, match=rf"read of uninitialized memory decides an? {use} in kernel k at uop \d+ .*uses a value loaded "
                                                    r"in kernel k at uop 3 \(LOAD.*from index 0 of buffer 1, which nothing has written \(4 lanes in all\)"):
    run(uops, [empty(4, dtypes.int32), empty(4, dtypes.int32)], gsz=(4, 1, 1))
  good = [1, 2, 3, 0] if use == "address" else [2, 2, 2, 2]   # a permutation for the stores, a uniform loop bound
  run(uops, [empty(4, dtypes.int32), mem(np.array(good, np.int32))], gsz=(4, 1, 1))   # defined: runs
  run(uops, [empty(4, dtypes.int32), empty(4, dtypes.int32)], gsz=(4, 1, 1), checked=False)

def test_undefined_lanes_overwritten_by_where_are_not_reported():
  # out = where(i < 2, 7, in[i]): lanes 0-1 never use the undefined input, lanes 2-3 copy it
  outb, inb, i = g(0, dtypes.int32, 4), g(1, dtypes.int32, 4), special("idx0", 4)
  two, seven = c(dtypes.int32, 2), c(dtypes.int32, 7)
  ld = inb.load(i)
  cond = i.alu(Ops.CMPLT, two)
  val = cond.where(seven, ld)
  out = empty(4, dtypes.int32)
  run([outb, inb, i, two, seven, ld, cond, val, outb.store(i, val)], [out, empty(4, dtypes.int32)], gsz=(4, 1, 1))
  assert out.undefined_bytes().tolist() == list(range(8, 16))
  partial = mem(np.arange(4, dtype=np.int32))
  run([outb, inb, i, two, seven, ld, cond, val, outb.store(i, val)], [partial, empty(4, dtypes.int32)], gsz=(4, 1, 1))   # stores undefined over defined
  assert not partial.all_init and partial.undefined_bytes().tolist() == list(range(8, 16))

def test_read_of_uninitialized_local_memory():
  outb, i = g(0, dtypes.int32, 4), special("lidx0", 4)
  tmp = UOp(Ops.DEFINE_LOCAL, dtypes.int32.ptr(4, local=True), (), "tmp")
  ld = tmp.load(i)
  uops = [outb, tmp, i, ld, outb.store(ld, i)]   # the undefined value is an address
  with pytest.raises(UndefinedBehaviourError, match=r"read of uninitialized memory decides an address.*uop 3 \(LOAD.*index 0 of local tmp"):
    run(uops, [empty(4, dtypes.int32)], lsz=(4, 1, 1))

def test_local_memory_race_without_a_barrier():
  with pytest.raises(UndefinedBehaviourError, match=r"local memory race in kernel k at uop 13 \(LOAD.*thread gidx=\(0, 0, 0\) lidx=\(0, 0, 0\) reads "
                                                    r"index 7 of local tmp and thread gidx=\(0, 0, 0\) lidx=\(7, 0, 0\) writes it in the same barrier epoch"):
    run(_reverse_in_workgroups(2, 8, barrier=False), [empty(16, dtypes.float32), mem(np.zeros(16, np.float32))], gsz=(2, 1, 1), lsz=(8, 1, 1))
  run(_reverse_in_workgroups(2, 8, barrier=False), [empty(16, dtypes.float32), mem(np.zeros(16, np.float32))], gsz=(2, 1, 1), lsz=(8, 1, 1),
      checked=False)

def test_local_write_write_race():
  outb, i = g(0, dtypes.int32, 1), special("lidx0", 4)
  tmp = UOp(Ops.DEFINE_LOCAL, dtypes.int32.ptr(2, local=True), (), "tmp")
  zero = c(dtypes.int32, 0)
  with pytest.raises(UndefinedBehaviourError, match=r"local memory race.*lidx=\(\d, 0, 0\) writes index 0 of local tmp and thread .* writes it"):
    run([outb, tmp, i, zero, tmp.store(zero, i)], [empty(1, dtypes.int32)], lsz=(4, 1, 1))

def test_local_write_after_read_race_and_the_barrier_that_fixes_it():
  # tmp[l] = l; BARRIER; x = tmp[(l+1) % 4]; [BARRIER;] tmp[l] = x
  outb, l = g(0, dtypes.int32, 4), special("lidx0", 4)
  tmp = UOp(Ops.DEFINE_LOCAL, dtypes.int32.ptr(4, local=True), (), "tmp")
  one, four = c(dtypes.int32, 1), c(dtypes.int32, 4)
  s1 = tmp.store(l, l)
  b1 = UOp(Ops.BARRIER, dtypes.void, (s1,))
  nxt = (l + one) % four
  x = tmp.load(nxt)
  b2 = UOp(Ops.BARRIER, dtypes.void, ())
  def prog(extra): return [outb, tmp, l, one, four, s1, b1, l + one, nxt, x, *extra, s2 := tmp.store(l, x), UOp(Ops.BARRIER, dtypes.void, (s2,)),
                           y := tmp.load(l), outb.store(l, y)]
  with pytest.raises(UndefinedBehaviourError, match=r"local memory race.*uop 10 \(STORE.*lidx=\(0, 0, 0\) writes index 0 of local tmp and thread "
                                                    r"gidx=\(0, 0, 0\) lidx=\(3, 0, 0\) reads it"):
    run(prog([]), [empty(4, dtypes.int32)])
  out = empty(4, dtypes.int32)
  run(prog([b2]), [out])
  assert view(out, dtypes.int32).tolist() == [1, 2, 3, 0]

def test_global_write_race():
  outb, i = g(0, dtypes.int32, 4), special("idx0", 8)
  two = c(dtypes.int32, 2)
  j = UOp(Ops.IDIV, dtypes.int32, (i, two))
  with pytest.raises(UndefinedBehaviourError, match=r"global memory write race in kernel k at uop 4 \(STORE.*thread gidx=\(\d, 0, 0\).*"
                                                    r"both store to index \d of buffer 0"):
    run([outb, i, two, j, outb.store(j, i)], [empty(4, dtypes.int32)], gsz=(8, 1, 1))
  # the same across batches of workgroups, and across two stores
  with pytest.raises(UndefinedBehaviourError, match="global memory write race"):
    run([outb, i, two, j, outb.store(j, i)], [empty(4, dtypes.int32)], gsz=(8, 1, 1), max_lanes=1)
  k, zero = special("idx0", 4), c(dtypes.int32, 0)
  with pytest.raises(UndefinedBehaviourError, match=r"global memory write race.*uop 4 \(STORE"):
    run([outb, k, zero, outb.store(k, k), outb.store(zero, k)], [empty(4, dtypes.int32)], gsz=(4, 1, 1))
  # one lane storing to its address in every loop iteration is no race
  r = UOp.range(c(dtypes.int32, 3), 0)
  out = empty(4, dtypes.int32)
  run([outb, k, c(dtypes.int32, 3), r, kr := k + r, outb.store(k, kr), UOp(Ops.ENDRANGE, dtypes.void, (r,))], [out], gsz=(4, 1, 1))
  assert view(out, dtypes.int32).tolist() == [2, 3, 4, 5]

def test_barrier_in_divergent_control_flow():
  outb, i = g(0, dtypes.int32, 4), special("lidx0", 4)
  two = c(dtypes.int32, 2)
  cond = i < two
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  bar = UOp(Ops.BARRIER, dtypes.void, ())
  uops = [outb, i, two, cond, iff, bar, UOp(Ops.ENDIF, dtypes.void, (iff,)), outb.store(i, i)]
  with pytest.raises(UndefinedBehaviourError, match=r"barrier reached by only part of a workgroup.*lidx=\(2, 0, 0\)"):
    run(uops, [empty(4, dtypes.int32)], lsz=(4, 1, 1))


def test_loaded_values_do_not_change_when_memory_is_stored_later():
  # x = a[i]; for r < 2: { a'[i] = x + 1; acc += x }; out[i] = acc -- where a' is a itself or a second handle to a
  n, f = 16, dtypes.float32
  idx, r = UOp.special("idx0", n), UOp.range(2, 0)
  a0, out, a2 = UOp.define_global(0, f, n), UOp.define_global(1, f, n), UOp.define_global(2, f, n)
  for src in (a0, a2):
    x = src.load(idx)
    acc = UOp(Ops.DEFINE_ACC, f, (UOp.const(f, 0.0), r), (0,))
    red = UOp(Ops.ASSIGN, f, (acc, acc + (x + (r * 0).cast(f))))   # x + 0.0, inside the loop
    st = a0.store(idx + r * 0, x + 1.0)   # inside the loop (not simplified: linearized directly)
    sink = UOp(Ops.SINK, dtypes.void, (st, out.store(idx, red)))
    data = np.arange(n, dtype=np.float32)
    a, o = Buffer.from_numpy("PYTHON", data), Buffer("PYTHON", n, f)
    Runner("alias", linearize(sink), "PYTHON")(*((a, o) if src is a0 else (a, o, a)))
    assert (o.numpy() == 2 * data).all() and (a.numpy() == data + 1).all()
