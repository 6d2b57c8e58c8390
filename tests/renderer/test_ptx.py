"""refgrad's PTX renderer on hand-built linear programs: every ALU op x dtype, casts, bitcasts, constants, gated and vector
memory, loops with accumulators, locals + barriers and tensor cores. Each module is checked structurally (explicit .rn,
fma only for MULACC, no .approx), accepted by `ptxas -arch=sm_80` where ptxas is on PATH, and run on the mock NV's PTX
executor to the reference bits (the expected values are refgrad.uop.semantics', as in the CUDA renderer's tests)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from refgrad.dtype import DType, dtypes
from refgrad.renderer.ptx import PTXRenderer
from refgrad.runtime.driver import GPUFault
from refgrad.target import CUDA
from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, Ops, UOp
from tests.refgrad import test_cpu as cpu_tests
from tests.refgrad import test_gpu_renderers as tgr
from tests.refgrad.test_cpu_barriers import both
from tests.refgrad.test_wmma_render import _inputs as wmma_inputs
from tests.refgrad.test_wmma_render import _program as wmma_program
from tests.renderer.ptxrun import NO_PTXAS, PTXAS, nv_run, ptxas_ok

F = dtypes.float32
PROGRAMS = dict(tgr.PROGRAMS)
PROGRAMS["wmma_half"] = lambda: wmma_program(dtypes.float16, CUDA)
PROGRAMS["wmma_bf16"] = lambda: wmma_program(dtypes.bfloat16, CUDA)


def instrs(src: str) -> list[str]:
  """The instructions of the entry body (no declarations, labels or braces)."""
  body = src[src.index("{") + 1:src.rindex("}")]
  return [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith((".reg", ".shared")) and not ln.strip().endswith(":")]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_program_renders_one_entry_and_ptxas_accepts_it(name: str, tmp_path):
  src = PTXRenderer().render(name, PROGRAMS[name]())
  assert src.startswith(".version 8.0\n.target sm_80\n.address_size 64\n") and src.count(".visible .entry") == 1
  assert f".visible .entry {name}(" in src and src.count("{") == src.count("}")
  ops = [ln.split()[1 if ln.startswith("@") else 0] for ln in instrs(src)]
  # native transcendentals (only programs that keep EXP2/LOG2/SIN) are the .approx.f32 forms; nothing else is approximate
  # (double: the decomposition in basic ops)
  native = name.startswith("transc") and name != "transc_double"
  assert {o for o in ops if ".approx" in o} == ({"ex2.approx.f32", "lg2.approx.f32", "sin.approx.f32"} if native else set())
  for o in ops:   # every float add/mul/rcp/sqrt names its rounding (no default the hardware may change)
    if re.fullmatch(r"(add|mul|rcp|sqrt|fma)\.f(32|64)", o): raise AssertionError(f"{o} without a rounding modifier in {name}")
  if PTXAS is None: pytest.skip(NO_PTXAS)
  ptxas_ok(src, tmp_path)


def test_fma_only_for_mulacc_and_rounding_is_explicit():
  for dt in (F, dtypes.float64):
    t = "f32" if dt == F else "f64"
    src = PTXRenderer().render("k", tgr.mul_add_program(dt))
    body = instrs(src)
    assert not any(ln.startswith("fma") for ln in body), "a*b+c stays a mul and an add"
    assert sum(ln.startswith(f"mul.rn.{t}") for ln in body) >= 1 and sum(ln.startswith(f"add.rn.{t}") for ln in body) == 2
    src = PTXRenderer().render("k", tgr.alu_program(dt))
    for ins in (f"fma.rn.{t}", f"rcp.rn.{t}", f"sqrt.rn.{t}", f"setp.neu.{t}", f"setp.lt.{t}"): assert ins in src, ins
  assert "fma.rn.f16" in PTXRenderer().render("k", tgr.alu_program(dtypes.float16))
  assert "fma.rn.bf16" in PTXRenderer().render("k", tgr.alu_program(dtypes.bfloat16))


def vars_program() -> list[UOp]:
  """out[i] = a[i] * n where i < n (a variable in a gate and an operand): the device passes variables as int32."""
  nv, idx = UOp.variable("n", 0, 32), UOp.special("idx0", 32)
  g0, g1 = UOp.define_global(0, dtypes.int32), UOp.define_global(1, dtypes.int32)
  return tgr.lin(g1.store(idx, g0.load(idx) * nv, idx < nv))


def test_signature_launch_and_shared_memory():
  src = PTXRenderer().render("vars", vars_program())
  assert ".visible .entry vars(\n  .param .u64 data0,\n  .param .u64 data1,\n  .param .s32 n\n)" in src and "ld.param.s32" in src
  uops = tgr.locals_program()
  src = PTXRenderer().render("loc", uops)
  assert ".shared .align 16 .b8 local" in src and "bar.sync 0;" in src
  assert "%ctaid.x" in src and "%tid.x" in src and PTXRenderer().launch_dims(uops) == ((4, 1, 1), (64, 1, 1))
  src = PTXRenderer().render("k", tgr.alu_program(dtypes.int32, [Ops.ADD], n=1000))
  assert "setp.ge.u32" in src and "ret;" in src and PTXRenderer().launch_dims(tgr.alu_program(dtypes.int32, [Ops.ADD], n=1000)) == ((4, 1, 1), (256, 1, 1))


def test_vector_memory_uses_v4_when_aligned():
  src = PTXRenderer().render("vf4", tgr.float4_program())
  assert "ld.global.v4.f32" in src and "st.global.v4.f32" in src


# ---- run on the mock NV to the reference bits ----------------------------------------------------

@pytest.mark.parametrize("dt", dtypes.all, ids=lambda d: d.name)
def test_alu_ops_match_the_reference(dt: DType):
  a, b, c = tgr._alu_inputs(dt)
  n = len(a)
  cond = np.random.default_rng(2).integers(0, 2, n).astype(np.bool_)
  ops = tgr.ops_for(dt)
  outs = [np.zeros(n, (dtypes.bool if op in GroupOp.Comparison else dt).np) for op in ops]
  nv_run(f"alu_{dt.name}", tgr.alu_program(dt, n=n), [a, b, c, cond, *outs])
  for op, out in zip(ops, outs):
    srcs = [cond, a, b] if op is Ops.WHERE else [a, b, c][:3 if op is Ops.MULACC else 1 if op in GroupOp.Unary else 2]
    sdts = [dtypes.bool, dt, dt] if op is Ops.WHERE else [dt] * len(srcs)
    odt = dtypes.bool if op in GroupOp.Comparison else dt
    assert semantics.ub_check(op, odt, srcs, sdts) is None, f"test inputs of {op.name} must be free of UB"
    cpu_tests.assert_same(out, cpu_tests.ref(op, odt, srcs, sdts), odt, f"PTX {op.name} on {dt.name}", srcs)


@pytest.mark.parametrize("src", dtypes.all, ids=lambda d: d.name)
def test_casts_match_the_reference(src: DType):
  n = 512
  dsts = [d for d in dtypes.all if d != src]
  xs = [cpu_tests.cast_inputs(src, d, n, seed=src.priority * 31 + d.priority) for d in dsts]
  outs = [np.zeros(n, d.np) for d in dsts]
  nv_run(f"cast_{src.name}", tgr.cast_program(src), [*xs, *outs])
  for x, d, out in zip(xs, dsts, outs):
    assert semantics.ub_check(Ops.CAST, d, [x], [src]) is None
    cpu_tests.assert_same(out, cpu_tests.ref(Ops.CAST, d, [x], [src]), d, f"PTX CAST {src.name} -> {d.name}", [x])


def test_undefined_integer_cases_are_total_as_on_the_cpu():
  """IDIV/MOD by 0 give 0, MIN / -1 gives MIN and MIN % -1 gives 0; float -> int saturates with NaN -> 0 (the CPU's choices).
  The division is total when rendered unchecked; in checked mode (the default) a division by zero is reported."""
  ren = PTXRenderer(checked=False)
  for dt in (dtypes.int32, dtypes.int64, dtypes.int8, dtypes.uint32):
    lo = -2 ** (dt.bits - 1) if not dtypes.is_unsigned(dt) else 7
    a = np.array([lo, lo, 5, -7 if lo < 0 else 9], dt.np)
    b = np.array([-1 if lo < 0 else 1, 0, 0, 2], dt.np)
    outs = [np.zeros(4, dt.np) for _ in range(2)]
    bufs = [a, b, np.zeros(4, dt.np), np.zeros(4, np.bool_), *outs]
    nv_run("divmod", tgr.alu_program(dt, [Ops.IDIV, Ops.MOD], n=4), bufs, ren=ren)
    with pytest.raises(GPUFault, match="integer division by zero"): nv_run("divmod", tgr.alu_program(dt, [Ops.IDIV, Ops.MOD], n=4), bufs)
    want_div = [lo, 0, 0, -3] if lo < 0 else [7, 0, 0, 4]
    want_mod = [0, 0, 0, -1] if lo < 0 else [0, 0, 0, 1]
    assert outs[0].tolist() == want_div and outs[1].tolist() == want_mod, (dt, outs)
  x = np.array([np.nan, 1e10, -1e10, -3.7], np.float32)
  outs = [np.zeros(4, d.np) for d in (dtypes.int32, dtypes.uint8, dtypes.int8)]
  idx = UOp.special("idx0", 4)
  ld = UOp.define_global(0, F).load(idx)
  nv_run("f2i", tgr.lin(*(UOp.define_global(j + 1, d).store(idx, ld.cast(d)) for j, d in enumerate((dtypes.int32, dtypes.uint8, dtypes.int8)))),
         [x, *outs])
  assert [o.tolist() for o in outs] == [[0, 2 ** 31 - 1, -2 ** 31, -3], [0, 255, 0, 0], [0, 127, -128, -3]]


@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_bitcasts_keep_the_bits(size: int):
  prog = tgr.bitcast_program(size)
  pairs = [(u.src[0].dtype, u.dtype) for u in prog if u.op is Ops.BITCAST]
  rng = np.random.default_rng(size)
  xs = [rng.integers(0, 2, 100).astype(np.bool_) if s == dtypes.bool else
        rng.integers(0, 256, 100 * s.itemsize, dtype=np.uint8).view(s.np if s != dtypes.bfloat16 else np.uint16) for s, _ in pairs]
  outs = [np.zeros(100, d.np) for _, d in pairs]
  nv_run(f"bitcast{size}", prog, [*xs, *outs])
  for x, (s, d), o in zip(xs, pairs, outs): assert x.tobytes() == o.tobytes(), f"BITCAST {s.name} -> {d.name}"


@pytest.mark.parametrize("dt", [dtypes.float16.vec(2), dtypes.bfloat16.vec(2), dtypes.int8.vec(3), dtypes.uint64.vec(2), dtypes.bool.vec(3),
                                dtypes.float64.vec(2)], ids=lambda d: f"{d.scalar().name}{d.count}")
def test_small_vectors_match_the_reference(dt: DType):
  s, n = dt.scalar(), 200
  a, b, c = (np.resize(x, (n, dt.count)) for x in cpu_tests.operands(s, 3, seed=7, n_random=n * dt.count))
  if dtypes.is_int(s): b = (b.view(cpu_tests._UINT[s.itemsize]) % np.array(s.bits - 1, cpu_tests._UINT[s.itemsize])).astype(s.np)
  nvals = 3 if s == dtypes.bool else 4 if dtypes.is_float(s) else 5
  outs = [np.zeros((n, dt.count), s.np) for _ in range(nvals)] + [np.zeros((n, dt.count), np.bool_)]
  nv_run("vec", tgr.small_vector_program(dt), [a, b, c, *outs])
  if dtypes.is_float(s): want = [(Ops.ADD, [a, b]), (Ops.MULACC, [a, b, c]), (Ops.MAX, [a, b]), (Ops.SQRT, [a])]
  elif s == dtypes.bool: want = [(Ops.XOR, [a, b]), (Ops.AND, [a, b]), (Ops.MAX, [a, b])]
  else: want = [(Ops.ADD, [a, b]), (Ops.MUL, [a, b]), (Ops.SHL, [a, b]), (Ops.SHR, [a, b]), (Ops.NEG, [a])]
  for (op, srcs), out in zip(want, outs): cpu_tests.assert_same(out, cpu_tests.ref(op, dt, srcs, [dt] * len(srcs)), s, f"{op.name} {dt!r}", srcs)
  cpu_tests.assert_same(outs[-1], cpu_tests.ref(Ops.CMPNE, dtypes.bool.vec(dt.count), [a, b], [dt, dt]), dtypes.bool, "CMPNE")


def test_vectors_gates_loops_specials_and_constants(monkeypatch: pytest.MonkeyPatch, tmp_path):
  """The CUDA renderer's host-run checks (float4, gated loads/stores, RANGE + accumulators, 3-d launch indices, special
  constants), with the program run as refgrad's PTX on the mock NV instead."""
  monkeypatch.setattr(tgr, "host_run", lambda ren, name, uops, bufs, tmp: nv_run(name, uops, bufs))
  tgr.test_host_run_vectors_gates_loops_and_constants(tgr.RENDERERS[0], tmp_path)


def test_int64_variable_is_a_64_bit_parameter_and_register(tmp_path):
  """The renderers' shared vars program: an int32 variable gates and scales, an int64 one (beyond 2^32) is added to the
  index in 64 bits. Its PTX takes `.param .s64 big` into a 64-bit register; the executor's results are the reference's."""
  uops = tgr.vars_program()
  src = PTXRenderer().render("vars64", uops)
  assert ".param .s32 n" in src and ".param .s64 big" in src and re.search(r"ld\.param\.s64 %rd\d+, \[big\];", src)
  n, big = 20, 2 ** 40 + 2 ** 31 + 5
  g0, g1, g2 = np.arange(32, dtype=np.int32), np.zeros(32, np.int32), np.zeros(32, np.int64)
  nv_run("vars64", uops, [g0, g1, g2], {"n": n, "big": big})
  i64 = dtypes.int64
  idx = np.arange(32, dtype=np.int64)
  want = semantics.evaluate(Ops.ADD, i64, [idx, np.full(32, big, np.int64)], [i64, i64])
  assert g2.tobytes() == want.tobytes() and g1.tolist() == [x * n if x < n else 0 for x in range(32)]
  with pytest.raises(ValueError, match=r"variable v is dtypes\.short; kernel variables are int32 or int64"):
    PTXRenderer().render("v16", tgr.lin(UOp.define_global(0, dtypes.int16).store(UOp.const(dtypes.int32, 0), UOp.variable("v", 0, 9, dtypes.int16))))
  if PTXAS is None: pytest.skip(NO_PTXAS)
  ptxas_ok(src, tmp_path)


def test_vars_and_vector_accumulator():
  g0, g1 = np.arange(32, dtype=np.int32), np.zeros(32, np.int32)
  nv_run("vars", vars_program(), [g0, g1], {"n": 20})
  assert g1.tolist() == [x * 20 if x < 20 else 0 for x in range(32)]
  x, out = np.arange(40, dtype=np.float32).reshape(10, 4), np.zeros(4, np.float32)
  nv_run("vacc", tgr.vector_acc_program(), [x, out], {"n": 7})
  assert out.tolist() == (0.5 + x[:7].sum(axis=0)).tolist()


@pytest.mark.parametrize("dt", [F, dtypes.float16], ids=lambda d: d.name)
def test_locals_and_barriers(dt: DType):
  G, L = 4, 64
  a = (np.arange(G * L) * 1.5).astype(dt.np)
  out = np.zeros(G * L, dt.np)
  nv_run("loc", tgr.locals_program(G, L, dt), [a, out])
  assert out.tolist() == [a[g * L + (li + 1) % L] for g in range(G) for li in range(L)]
  a4, out4 = np.arange(8 * 32 * 4, dtype=np.float32), np.zeros(8 * 32 * 4, np.float32)
  nv_run("lvec", tgr.local_vector_program(), [a4, out4])
  want = a4.reshape(8, 32, 4)[:, ::-1, :].reshape(-1)
  assert np.array_equal(out4, want)


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_wmma_is_the_reference(dt: DType):
  """mma.sync m16n8k16 on the executor gives the bits of the plain (no tensor core) kernel on CPU and PYTHON."""
  uops = wmma_program(dt, CUDA)
  assert sum(u.op is Ops.WMMA for u in uops) == 1
  plain = both("plain", wmma_program(dt, CUDA, tc=False), wmma_inputs(dt))[0]
  bufs = [x.copy() for x, _ in wmma_inputs(dt)]
  src = nv_run("mm", uops, bufs)
  assert "mma.sync.aligned.m16n8k16.row.col.f32" in src
  assert np.array_equal(bufs[0].view(np.uint32), plain.view(np.uint32))


def test_buffer_access_follows_pointers_to_stores_and_loads():
  """The launcher's stored/loaded sets of a PTX entry (hazards, dropped work): from each ld.param through every instruction
  that writes a register, to the addresses of st/atom (stored) and ld (loaded), vector operands and labels included."""
  from refgrad.runtime import ptx_args
  src = PTXRenderer().render("vf4", tgr.float4_program())
  params, _ = ptx_args.entry_signature(src, "vf4")
  stored, loaded = ptx_args.buffer_access(src, "vf4", params)
  assert loaded == {0, 1, 2} and stored == set(range(3, len(params)))
  hand = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)
{
  .reg .b64 %rd<8>; .reg .b32 %r<4>; .reg .f32 %f<4>; .reg .pred %p<2>;
  ld.param.u64 %rd0, [a]; ld.param.u64 %rd1, [b]; ld.param.u64 %rd2, [c];
  mov.b64 %rd3, %rd0;
$LOOP: add.s64 %rd3, %rd3, 16;   // the pointer moves around a loop
  { .reg .b32 %t; ld.global.v2.f32 {%f0, %f1}, [%rd3+8]; }
  setp.lt.u64 %p0, %rd3, %rd1;
  @%p0 bra $LOOP;
  atom.global.add.f32 %f2, [%rd2], %f0;
  ret;
}"""
  hp, _ = ptx_args.entry_signature(hand, "k")
  assert ptx_args.buffer_access(hand, "k", hp) == ({2}, {0, 2})
