"""The CPU backend (C renderer + cc + ctypes) against the reference semantics, bit for bit, on
hand-built linear programs: every ALU op and cast for every dtype, bitcasts, vectors, gated memory,
variables, loops with accumulators, launch indices, local memory, and the compiler plumbing."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from refgrad.device import Buffer, CompileError
from refgrad.dtype import DType, dtypes
from refgrad.program import Runner
from refgrad.renderer import Renderer
from refgrad.renderer.cstyle import CRenderer
from refgrad.runtime.ops_cpu import ClangCompiler, CPUProgram, make_device
from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import SpecError

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
i32 = dtypes.int32


# ---- helpers ----------------------------------------------------------------------------------

def lin(*stores: UOp, first: tuple[UOp, ...] = ()) -> list[UOp]:
  """A straight-line program (no blocks): `first` (e.g. buffers nothing reads), then the stores' graph in dependency order."""
  return list(dict.fromkeys([*first, *(u for u in UOp(Ops.SINK, dtypes.void, stores).toposort if u.op is not Ops.SINK)]))

def cpu(arr: np.ndarray, dt: DType) -> Buffer: return Buffer.from_numpy("CPU", np.ascontiguousarray(arr), dt)

def run(name: str, uops: list[UOp], *bufs: Buffer, var_vals: dict[str, int] | None = None) -> None:
  Runner(name, uops, "CPU")(*bufs, var_vals=var_vals)

def from_bits(bits: np.ndarray | list[int], dt: DType) -> np.ndarray:
  return np.asarray(bits, dtype=np.uint64).astype(_UINT[dt.itemsize]).view(dt.np)

def wrap(values: list[int] | np.ndarray, dt: DType) -> np.ndarray:
  """Python ints -> storage of an int dtype, keeping the low bits (two's complement)."""
  return np.array([int(v) % 2 ** dt.bits for v in values], dtype=np.uint64).astype(_UINT[dt.itemsize]).view(dt.np)

def special_values(dt: DType) -> np.ndarray:
  if dt == dtypes.bool: return np.array([False, True])
  if dtypes.is_int(dt):
    lo, hi = int(dtypes.min(dt)), int(dtypes.max(dt))
    return wrap([0, 1, 2, 3, 7, 100, -1, -2, -7, -100, lo, lo + 1, hi, hi - 1, hi // 2, lo // 2, hi // 3], dt)
  e, m = dtypes.finfo(dt)
  tiny, sub = 2.0 ** (2 - 2 ** (e - 1)), 2.0 ** (2 - 2 ** (e - 1) - m)
  big = dtypes.max_finite(dt)
  vals = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, -2.5, 3.0, 1 / 3, -7.25, big, -big, tiny, -tiny, sub, -sub, tiny - sub, 2.0 ** -m + 1,
          math.inf, -math.inf, math.nan]
  x = semantics.round_float(np.array(vals, np.float64), dt)
  expo, quiet, sign = ((1 << e) - 1) << m, 1 << (m - 1), 1 << (dt.itemsize * 8 - 1)
  return np.concatenate([x, from_bits([expo | 1, sign | expo | quiet | 5], dt)])  # a signalling NaN, a negative quiet NaN with payload

def random_values(dt: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  if dt == dtypes.bool: return rng.integers(0, 2, n).astype(np.bool_)
  if dtypes.is_int(dt):
    raw = rng.integers(0, 2 ** (dt.bits - 1), n, dtype=np.uint64) * 2 + rng.integers(0, 2, n, dtype=np.uint64)
    small = wrap(rng.integers(-60, 60, n), dt)
    return np.where(rng.random(n) < 0.5, raw.astype(_UINT[dt.itemsize]).view(dt.np), small)
  raw = from_bits(rng.integers(0, 2 ** (dt.bits - 1), n, dtype=np.uint64) * 2 + rng.integers(0, 2, n, dtype=np.uint64), dt)
  moderate = semantics.round_float(rng.standard_normal(n) * 2.0 ** rng.integers(-12, 13, n), dt)
  return np.where(rng.random(n) < 0.4, raw, moderate)

def operands(dt: DType, nargs: int, seed: int, n_random: int = 1500) -> list[np.ndarray]:
  """Every pair of special values, then random tuples."""
  rng = np.random.default_rng(seed)
  s = special_values(dt)
  k = len(s)
  cols = [np.concatenate([np.repeat(s, k), random_values(dt, n_random, rng)]), np.concatenate([np.tile(s, k), random_values(dt, n_random, rng)])]
  for _ in range(nargs - 2): cols.append(np.concatenate([s[rng.integers(0, k, k * k)], random_values(dt, n_random, rng)]))
  return cols[:nargs] if nargs > 1 else [np.concatenate([s, random_values(dt, n_random, rng)])]

def assert_same(got: np.ndarray, want: np.ndarray, dt: DType, what: str, inputs: list[np.ndarray] = ()) -> None:
  ok = np.asarray(semantics.same_bits(got, want, dt))
  assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
  if not ok.all():
    bad = np.argwhere(~ok)[0]
    lane = tuple(bad)
    ins = [x[lane[:x.ndim]] if x.ndim else x for x in inputs]
    raise AssertionError(f"{what}: {(~ok).sum()} lanes differ, first at {lane}: inputs {ins} got {got[lane]!r} want {want[lane]!r}")

def ref(op: Ops, dt: DType, srcs: list[np.ndarray], sdts: list[DType]) -> np.ndarray:
  return np.asarray(semantics.evaluate(op, dt, srcs, sdts))

def ulps(got: np.ndarray, want: np.ndarray, dt: DType) -> np.ndarray:
  """Distance in units in the last place (consecutive floats are 1 apart, +0 and -0 are 0 apart); NaN vs NaN is 0."""
  w = dt.itemsize * 8
  def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = x.view(_UINT[dt.itemsize]).astype(np.uint64)
    return u >> np.uint64(w - 1), (u & np.uint64((1 << (w - 1)) - 1)).astype(np.int64)
  (sg, mg), (sw, mw) = split(got), split(want)
  d = np.where(sg == sw, np.abs(mg - mw).astype(np.float64), mg.astype(np.float64) + mw.astype(np.float64))
  with np.errstate(invalid="ignore"): gn, wn = np.isnan(semantics.to_float64(got, dt)), np.isnan(semantics.to_float64(want, dt))
  return np.where(gn & wn, 0, np.where(gn | wn, np.inf, d))


# ---- every ALU op on every dtype --------------------------------------------------------------

def ops_for(dt: DType) -> list[Ops]:
  if dt == dtypes.bool: return [Ops.XOR, Ops.OR, Ops.AND, Ops.CMPLT, Ops.CMPNE, Ops.MAX, Ops.WHERE]
  if dtypes.is_int(dt): return [Ops.ADD, Ops.MUL, Ops.NEG, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.XOR, Ops.OR, Ops.AND,
                                Ops.SHL, Ops.SHR, Ops.WHERE]
  return [Ops.ADD, Ops.MUL, Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.WHERE, Ops.MULACC]

def test_every_non_transcendental_alu_op_is_covered():
  assert set().union(*(ops_for(d) for d in dtypes.all)) == GroupOp.ALU - GroupOp.Transcendental

def fma_traps(dt: DType, n: int, rng: np.random.Generator) -> list[np.ndarray]:
  """MULACC inputs where a*b is exactly halfway between two values of dt and c is a tiny nudge that a float64
  sum would lose: a*b+c rounded twice (in float64, then to dt) lands on the wrong side."""
  p = dtypes.finfo(dt)[1] + 1
  k = (p + 2) // 2
  a, b = rng.integers(2 ** (k - 1), 2 ** k, (2, 8 * n)) | 1
  keep = (a * b >= 2 ** p) & (a * b < 2 ** (p + 1))
  a, b = a[keep][:n].astype(np.float64), b[keep][:n].astype(np.float64)
  s = 2.0 ** rng.integers(-8, 8, len(a))
  c = np.where(rng.random(len(a)) < 0.5, 1.0, -1.0) * 2.0 ** (p - 60) * s * s  # far below float64's last bit of a*b
  return [semantics.round_float(v, dt) for v in (a * s, b * s, c)]

@pytest.mark.parametrize("dt", dtypes.all, ids=lambda d: d.name)
def test_alu_ops(dt: DType):
  a, b, c = operands(dt, 3, seed=dt.priority)
  if dt in (dtypes.float32, dtypes.bfloat16):  # float16 has no such inputs: float64 holds its a*b+c exactly
    ta, tb, tc = fma_traps(dt, 300, np.random.default_rng(1))
    naive = semantics.round_float(semantics.to_float64(ta, dt) * semantics.to_float64(tb, dt) + semantics.to_float64(tc, dt), dt)
    assert not semantics.same_bits(naive, ref(Ops.MULACC, dt, [ta, tb, tc], [dt] * 3), dt).all(), "the traps must trap"
    a, b, c = np.concatenate([a, ta]), np.concatenate([b, tb]), np.concatenate([c, tc])
  n = len(a)
  cond = np.random.default_rng(2).integers(0, 2, n).astype(np.bool_)
  bdiv, bsh = b.copy(), b
  if dtypes.is_int(dt):  # keep IDIV/MOD and shifts clear of undefined behaviour
    bdiv[bdiv == 0] = 1
    if not dtypes.is_unsigned(dt): bdiv[(a == dtypes.min(dt)) & (bdiv == -1)] = 1
    bsh = (b.view(_UINT[dt.itemsize]) % np.array(dt.bits, _UINT[dt.itemsize])).astype(dt.np)
  ins = {"a": a, "b": b, "bdiv": bdiv, "bsh": bsh, "c": c, "cond": cond}
  idx = UOp.special("idx0", n)
  bufs = [UOp.define_global(j, dtypes.bool if k == "cond" else dt) for j, k in enumerate(ins)]
  loads = {k: b.load(idx) for k, b in zip(ins, bufs)}
  ops = ops_for(dt)
  args: dict[Ops, list[str]] = {op: (["a"] if op in GroupOp.Unary else ["cond", "a", "b"] if op is Ops.WHERE else ["a", "b", "c"]
                                    if op is Ops.MULACC else ["a", "bdiv"] if op in (Ops.IDIV, Ops.MOD) else ["a", "bsh"]
                                    if op in (Ops.SHL, Ops.SHR) else ["a", "b"]) for op in ops}
  stores, outs = [], []
  for j, op in enumerate(ops):
    odt = dtypes.bool if op in GroupOp.Comparison else dt
    v = UOp(op, odt, tuple(loads[k] for k in args[op]))
    g = UOp.define_global(len(ins) + j, odt)
    stores.append(g.store(idx, v)); outs.append(Buffer("CPU", n, odt))
  run(f"alu_{dt.name}", lin(*stores, first=tuple(bufs)), *(cpu(x, dtypes.bool if k == "cond" else dt) for k, x in ins.items()), *outs)
  for op, out in zip(ops, outs):
    srcs = [ins[k] for k in args[op]]
    sdts = [dtypes.bool if k == "cond" else dt for k in args[op]]
    odt = dtypes.bool if op in GroupOp.Comparison else dt
    assert semantics.ub_check(op, odt, srcs, sdts) is None, f"test inputs of {op.name} must be free of UB"
    assert_same(out.numpy(), ref(op, odt, srcs, sdts), odt, f"{op.name} on {dt.name}", srcs)


# ---- casts and bitcasts -----------------------------------------------------------------------

def tie_values(src: DType, dst: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  """Values of src at and right next to the midpoints between neighbouring values of float dst."""
  if not dtypes.is_float(dst) or src.bits <= 8 or (dtypes.is_float(src) and dtypes.finfo(src)[1] <= dtypes.finfo(dst)[1]): return src.np.type(0)[None][:0]
  if dtypes.is_int(src):
    out = []
    for k in range(dtypes.finfo(dst)[1] + 2, src.bits - (0 if dtypes.is_unsigned(src) else 1)):
      for m in (dtypes.finfo(dst)[1] + 1,):
        mid = 2 ** k + 2 ** (k - m) + int(rng.integers(0, 2)) * 2 ** (k - m + 1)
        out += [mid - 1, mid, mid + 1, -mid - 1, -mid, -mid + 1]
    return wrap(out, src)
  u = rng.integers(0, 2 ** (dst.bits - 1) - 2 ** dtypes.finfo(dst)[1] - 1, n, dtype=np.uint64)  # finite, positive, not the max
  lo = semantics.to_float64(from_bits(u, dst), dst)
  hi = semantics.to_float64(from_bits(u + 1, dst), dst)
  mid = semantics.round_float((lo + hi) / 2 * np.where(rng.random(n) < 0.5, 1, -1), src)
  inf = src.np.type(np.inf) if src != dtypes.bfloat16 else None
  if inf is None: return mid
  return np.concatenate([mid, np.nextafter(mid, inf), np.nextafter(mid, -inf)])

def cast_inputs(src: DType, dst: DType, n: int, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  parts = [special_values(src), tie_values(src, dst, n // 8, rng)]
  if dtypes.is_float(src) and dtypes.is_int(dst):
    # values across the target's range and its edges; out-of-range/NaN/inf lanes (undefined behaviour) become 0
    lo, hi = float(dtypes.min(dst)), float(dtypes.max(dst))
    parts += [semantics.round_float(np.array([lo, hi, lo - 0.75, hi + 0.75, -0.99, 0.99, -0.0]), src),
              semantics.round_float(rng.uniform(lo - 2, hi + 2, n // 4), src)]
  x = np.resize(np.concatenate([*parts, random_values(src, n, rng)]), n)
  if dtypes.is_float(src) and dtypes.is_int(dst):
    with np.errstate(invalid="ignore"):
      f = semantics.to_float64(x, src)
      t = np.trunc(f)
      ok = np.isfinite(f) & (t >= lo) & (t < hi + 1 if dst.bits < 64 else t < 2.0 ** dst.bits / (1 if dtypes.is_unsigned(dst) else 2))
    x = np.where(ok, x, np.zeros_like(x))
  return np.resize(x, n)

@pytest.mark.parametrize("src", dtypes.all, ids=lambda d: d.name)
def test_casts(src: DType):
  n = 1024
  dsts = [d for d in dtypes.all if d != src]
  xs = [cast_inputs(src, d, n, seed=src.priority * 31 + d.priority) for d in dsts]
  idx = UOp.special("idx0", n)
  stores = [UOp.define_global(len(dsts) + j, d).store(idx, UOp.define_global(j, src).load(idx).cast(d)) for j, d in enumerate(dsts)]
  outs = [Buffer("CPU", n, d) for d in dsts]
  run(f"cast_{src.name}", lin(*stores), *(cpu(x, src) for x in xs), *outs)
  for x, d, out in zip(xs, dsts, outs):
    assert semantics.ub_check(Ops.CAST, d, [x], [src]) is None, f"cast inputs {src.name}->{d.name} must be free of UB"
    assert_same(out.numpy(), ref(Ops.CAST, d, [x], [src]), d, f"CAST {src.name} -> {d.name}", [x])

def test_cast_ties_are_exercised():
  """int64 -> bfloat16 just above midpoints: one rounding, not two (through float64 or float32 these round to even)."""
  x = wrap([2 ** 60 + 2 ** 52 + 1, 2 ** 24 + 2 ** 16 + 1], dtypes.int64)
  want = [2 ** 60 + 2 ** 53, 2 ** 24 + 2 ** 17]
  idx = UOp.special("idx0", 2)
  g_in, g_out = UOp.define_global(0, dtypes.int64), UOp.define_global(1, dtypes.bfloat16)
  out = Buffer("CPU", 2, dtypes.bfloat16)
  run("cast_tie", lin(g_out.store(idx, g_in.load(idx).cast(dtypes.bfloat16))), cpu(x, dtypes.int64), out)
  assert semantics.to_float64(out.numpy(), dtypes.bfloat16).tolist() == want

def bitcast_pairs() -> list[tuple[DType, DType]]:
  return [(s, d) for s in dtypes.all for d in dtypes.all if s != d and s.itemsize == d.itemsize and dtypes.bool not in (s, d)]

@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_bitcasts_keep_bits(size: int):
  pairs = [(s, d) for s, d in bitcast_pairs() if s.itemsize == size] + ([(dtypes.bool, dtypes.uint8)] if size == 1 else [])
  n = 512
  rng = np.random.default_rng(size)
  xs = []
  for s, _ in pairs:
    raw = special_values(s) if s == dtypes.bool else np.concatenate([special_values(s), random_values(s, n, rng)])
    xs.append(np.resize(raw, n))
  idx = UOp.special("idx0", n)
  stores = [UOp.define_global(len(pairs) + j, d).store(idx, UOp.define_global(j, s).load(idx).bitcast(d)) for j, (s, d) in enumerate(pairs)]
  outs = [Buffer("CPU", n, d) for _, d in pairs]
  run(f"bitcast{size}", lin(*stores), *(cpu(x, s) for x, (s, _) in zip(xs, pairs)), *outs)
  for x, (s, d), out in zip(xs, pairs, outs):
    got = out.numpy()
    assert np.array_equal(got.view(np.uint8), x.view(np.uint8)), f"BITCAST {s.name} -> {d.name} changed bits"
    assert np.array_equal(got.view(np.uint8), ref(Ops.BITCAST, d, [x], [s]).view(np.uint8)), f"BITCAST {s.name} -> {d.name}"


# ---- native transcendentals: libm, within a ULP bound of the reference ------------------------

@pytest.mark.parametrize("dt", dtypes.floats, ids=lambda d: d.name)
def test_native_transcendentals(dt: DType):
  rng = np.random.default_rng(7)
  if dt.itemsize == 2: x = np.arange(2 ** 16, dtype=np.uint16).view(dt.np)  # every value
  else:
    x = np.concatenate([special_values(dt), random_values(dt, 3000, rng), semantics.round_float(rng.uniform(-200, 200, 3000), dt),
                        semantics.round_float(rng.uniform(-1e5, 1e5, 2000), dt), semantics.round_float(2.0 ** rng.uniform(-1000, 1000, 2000), dt)])
  n = len(x)
  idx = UOp.special("idx0", n)
  ld = UOp.define_global(0, dt).load(idx)
  ops = [Ops.EXP2, Ops.LOG2, Ops.SIN]
  uops = lin(*(UOp.define_global(j + 1, dt).store(idx, UOp(op, dt, (ld,))) for j, op in enumerate(ops)))
  outs = [Buffer("CPU", n, dt) for _ in ops]
  run(f"transc_{dt.name}", uops, cpu(x, dt), *outs)
  for op, out in zip(ops, outs):
    d = ulps(out.numpy(), ref(op, dt, [x], [dt]), dt)
    worst = int(np.argmax(d))
    assert d[worst] <= 1, f"native {op.name} on {dt.name}: {d[worst]} ulps at input {x[worst]!r}"


# ---- vectors ----------------------------------------------------------------------------------

def test_float4_ops_loads_and_stores():
  f4, n = dtypes.float32.vec(4), 300
  rng = np.random.default_rng(3)
  a, b, c = (np.resize(np.concatenate([special_values(dtypes.float32), random_values(dtypes.float32, 4 * n, rng)]), (n, 4)) for _ in range(3))
  b = b[::-1].copy()
  idx = UOp.special("idx0", n)
  ga, gb, gc = UOp.define_global(0, dtypes.float32), UOp.define_global(1, f4), UOp.define_global(2, dtypes.float32)
  va = ga.load(idx * 4, dtype=f4)                                   # 4 consecutive floats of a scalar buffer
  vb = gb.load(idx)                                                 # one element of a float4 buffer
  vc = UOp(Ops.VECTORIZE, f4, tuple(gc.load(idx * 4 + k) for k in range(4)))
  results = {"add": va + vb, "mul": va * vb, "max": va.maximum(vb), "fma": UOp(Ops.MULACC, f4, (va, vb, vc)), "recip": va.alu(Ops.RECIP),
             "lt": va < vb, "where": (va < vb).where(vc, va), "half": va.cast(dtypes.float16.vec(4)), "bf": vb.cast(dtypes.bfloat16.vec(4)),
             "bits": va.bitcast(dtypes.uint32.vec(4)), "int": vc.cast(dtypes.bool.vec(4))}
  stores, outs = [], {}
  for j, (k, v) in enumerate(results.items()):
    g = UOp.define_global(3 + j, v.dtype.scalar())
    stores.append(g.store(idx * 4, v)); outs[k] = Buffer("CPU", 4 * n, v.dtype.scalar())
  gep = UOp.define_global(3 + len(results), dtypes.float32)
  stores.append(gep.store(idx, (va + vb).gep(2)))
  outs["gep"] = Buffer("CPU", n, dtypes.float32)
  vstore = UOp.define_global(4 + len(results), f4)
  stores.append(vstore.store(idx, UOp(Ops.MULACC, f4, (va, vb, vc))))
  outs["vstore"] = Buffer("CPU", n, f4)
  run("vec_f4", lin(*stores), cpu(a, dtypes.float32), cpu(b, f4), cpu(c, dtypes.float32), *outs.values())
  F = dtypes.float32
  want = {"add": ref(Ops.ADD, f4, [a, b], [f4, f4]), "mul": ref(Ops.MUL, f4, [a, b], [f4, f4]), "max": ref(Ops.MAX, f4, [a, b], [f4, f4]),
          "fma": ref(Ops.MULACC, f4, [a, b, c], [f4] * 3), "recip": ref(Ops.RECIP, f4, [a], [f4]), "lt": ref(Ops.CMPLT, dtypes.bool.vec(4), [a, b], [f4, f4])}
  want["where"] = ref(Ops.WHERE, f4, [want["lt"], c, a], [dtypes.bool.vec(4), f4, f4])
  want["half"] = ref(Ops.CAST, dtypes.float16.vec(4), [a], [f4])
  want["bf"] = ref(Ops.CAST, dtypes.bfloat16.vec(4), [b], [f4])
  want["bits"] = ref(Ops.BITCAST, dtypes.uint32.vec(4), [a], [f4])
  want["int"] = ref(Ops.CAST, dtypes.bool.vec(4), [c], [f4])
  want["gep"] = want["add"][:, 2]
  want["vstore"] = want["fma"]
  for k, w in want.items():
    dt = results[k].dtype.scalar() if k in results else F
    assert_same(outs[k].numpy().reshape(w.shape), w, dt, f"float4 {k}", [a, b, c])

@pytest.mark.parametrize("dt", [dtypes.float16.vec(2), dtypes.bfloat16.vec(2), dtypes.int8.vec(3), dtypes.uint64.vec(2), dtypes.bool.vec(3)], ids=repr)
def test_small_vectors(dt: DType):
  s, n, w = dt.scalar(), 200, dt.count
  rng = np.random.default_rng(dt.count + dt.priority)
  a, b, c = (np.resize(np.concatenate([special_values(s), random_values(s, n * w, rng)]), (n, w)) for _ in range(3))
  b = b[::-1].copy()
  idx = UOp.special("idx0", n)
  va, vb, vc = (UOp.define_global(j, dt).load(idx) for j in range(3))
  if dtypes.is_float(s): ops = {Ops.ADD: (va, vb), Ops.MULACC: (va, vb, vc), Ops.MAX: (va, vb), Ops.SQRT: (va,)}
  elif s == dtypes.bool: ops = {Ops.XOR: (va, vb), Ops.AND: (va, vb), Ops.MAX: (va, vb)}
  else:
    b = (b.view(_UINT[s.itemsize]) % np.array(s.bits, _UINT[s.itemsize])).astype(s.np)
    ops = {Ops.ADD: (va, vb), Ops.MUL: (va, vb), Ops.SHL: (va, vb), Ops.SHR: (va, vb), Ops.NEG: (va,)}
  stores, outs = [], []
  for j, (op, srcs) in enumerate(ops.items()):
    stores.append(UOp.define_global(3 + j, dt).store(idx, UOp(op, dt, srcs))); outs.append(Buffer("CPU", n, dt))
  stores.append(UOp.define_global(3 + len(ops), dtypes.bool.vec(w)).store(idx, va.ne(vb))); outs.append(Buffer("CPU", n, dtypes.bool.vec(w)))
  run(f"vec_{s.name}{w}", lin(*stores, first=tuple(x.src[0] for x in (va, vb, vc))), cpu(a, dt), cpu(b, dt), cpu(c, dt), *outs)
  cols = {va: a, vb: b, vc: c}
  for (op, srcs), out in zip(ops.items(), outs):
    assert_same(out.numpy(), ref(op, dt, [cols[x] for x in srcs], [dt] * len(srcs)), s, f"{op.name} on {dt!r}", [a, b])
  assert_same(outs[-1].numpy(), ref(Ops.CMPNE, dtypes.bool.vec(w), [a, b], [dt, dt]), dtypes.bool, f"CMPNE on {dt!r}")


# ---- memory, variables, control flow ----------------------------------------------------------

def test_gated_loads_and_stores_touch_no_memory_when_off():
  n, valid, off = 64, 40, 24
  a = np.arange(valid + off, dtype=np.int32) * 3
  idx = UOp.special("idx0", n)
  gate = idx < valid
  ga, g_out, g_gated = UOp.define_global(0, i32, valid + off), UOp.define_global(1, i32), UOp.define_global(2, i32)
  ld = ga.load(idx + off, gate, alt=-5)                             # lanes past `valid` would read out of bounds
  f4 = dtypes.float32.vec(4)
  gv, gv_out = UOp.define_global(3, dtypes.float32, 4 * valid), UOp.define_global(4, dtypes.float32)
  vld = gv.load(idx * 4, gate, UOp.const(f4, 2.5), dtype=f4)
  uops = lin(g_out.store(idx, ld), g_gated.store(idx, ld * 2, gate), gv_out.store(idx * 4, vld))
  out, gated, vout = Buffer("CPU", n, i32), cpu(np.full(n, 77, np.int32), i32), Buffer("CPU", 4 * n, dtypes.float32)
  vin = np.arange(4 * valid, dtype=np.float32)
  run("gated", uops, cpu(a, i32), out, gated, cpu(vin, dtypes.float32), vout)
  want = np.where(np.arange(n) < valid, a[np.minimum(np.arange(n) + off, valid + off - 1)], -5)
  assert np.array_equal(out.numpy(), want)
  assert np.array_equal(gated.numpy(), np.where(np.arange(n) < valid, want * 2, 77))
  assert np.array_equal(vout.numpy(), np.concatenate([vin, np.full(4 * (n - valid), 2.5, np.float32)]))

def test_define_var_parameters_follow_the_buffers():
  n = 32
  nv, big = UOp.variable("n", 0, n), UOp.variable("big", 0, 2 ** 62, dtypes.int64)
  idx = UOp.special("idx0", n)
  g0, g1, g2 = UOp.define_global(0, i32), UOp.define_global(1, i32), UOp.define_global(2, dtypes.int64)
  uops = lin(g1.store(idx, g0.load(idx) * nv, idx < nv), g2.store(idx, idx.cast(dtypes.int64) + big))
  src = CRenderer().render("vars", uops)
  assert "void vars(int* data0, int* data1, long long* data2, int n, long long big)" in src
  a = np.arange(n, dtype=np.int32)
  for nval, bval in ((5, 2 ** 40 + 3), (n, 0)):
    out, out64 = cpu(np.full(n, -1, np.int32), i32), Buffer("CPU", n, dtypes.int64)
    run("vars", uops, cpu(a, i32), out, out64, var_vals={"n": nval, "big": bval})
    assert np.array_equal(out.numpy(), np.where(a < nval, a * nval, -1))
    assert np.array_equal(out64.numpy(), np.arange(n, dtype=np.int64) + bval)

def test_range_loops_with_accumulators():
  """out[row] = sum of a row in order (float32 rounding after every add); out2[row*J+j] = max over a row of a*j."""
  rows, K, J = 6, 37, 3
  rng = np.random.default_rng(5)
  a = semantics.round_float(rng.standard_normal(rows * K) * 2.0 ** rng.integers(-20, 20, rows * K), dtypes.float32)
  F = dtypes.float32
  ga, g_sum, g_max = UOp.define_global(0, F), UOp.define_global(1, F), UOp.define_global(2, F)
  row = UOp.special("idx0", rows)
  r = UOp.range(K, 1)
  acc = UOp(Ops.DEFINE_ACC, F, (UOp.const(F, 0.0), r), (0,))
  c0 = UOp.const(F, 0.0)
  kc = UOp.const(i32, K)
  base = row * kc
  addr = base + r
  ld = ga.load(addr)
  new = acc + ld
  asg = UOp(Ops.ASSIGN, F, (acc, new))
  end = UOp(Ops.ENDRANGE, dtypes.void, (r,))
  st_sum = g_sum.store(row, asg)
  # nested: the inner accumulator is reset on every iteration of the outer loop
  j = UOp.range(J, 2)
  r2 = UOp.range(K, 3)
  ninf = UOp.const(F, -math.inf)
  acc2 = UOp(Ops.DEFINE_ACC, F, (ninf, r2), (1,))
  jf = j.cast(F)
  addr2 = base + r2
  ld2 = ga.load(addr2)
  prod = ld2 * jf
  mx = acc2.maximum(prod)
  asg2 = UOp(Ops.ASSIGN, F, (acc2, mx))
  end2 = UOp(Ops.ENDRANGE, dtypes.void, (r2,))
  jc = UOp.const(i32, J)
  rj = row * jc
  o_idx = rj + j
  st_max = g_max.store(o_idx, asg2)
  end_j = UOp(Ops.ENDRANGE, dtypes.void, (j,))
  uops = [ga, g_sum, g_max, row, c0, kc, base, acc, r.src[0], r, addr, ld, new, asg, end, st_sum,
          ninf, UOp.const(i32, J), j, acc2, r2, jf, addr2, ld2, prod, mx, asg2, end2, jc, rj, o_idx, st_max, end_j]
  uops = list(dict.fromkeys(uops))
  out_sum, out_max = Buffer("CPU", rows, F), Buffer("CPU", rows * J, F)
  run("reduce", uops, cpu(a, F), out_sum, out_max)
  m = a.reshape(rows, K)
  want = np.zeros(rows, np.float32)
  for k in range(K): want = ref(Ops.ADD, F, [want, m[:, k]], [F, F])
  assert_same(out_sum.numpy(), want, F, "sum over a RANGE")
  wmax = np.full((rows, J), -np.inf, np.float32)
  for jj in range(J):
    for k in range(K): wmax[:, jj] = ref(Ops.MAX, F, [wmax[:, jj], ref(Ops.MUL, F, [m[:, k], np.float32(jj)], [F, F])], [F, F])
  assert_same(out_max.numpy(), wmax.reshape(-1), F, "max in nested RANGEs")

def test_vector_accumulator_over_a_symbolic_range():
  """acc (float4) += a[r] for r < n, n a kernel variable; stored once after the loop."""
  f4, F = dtypes.float32.vec(4), dtypes.float32
  rng = np.random.default_rng(11)
  a = semantics.round_float(rng.standard_normal((20, 4)) * 1000, F)
  ga, gout = UOp.define_global(0, f4), UOp.define_global(1, f4)
  nv = UOp.variable("n", 1, 20)
  r = UOp(Ops.RANGE, dtypes.int32, (nv,), 0)
  zero = UOp.const(f4, 0.5)
  acc = UOp(Ops.DEFINE_ACC, f4, (zero, r), (0,))
  ld = ga.load(r)
  asg = UOp(Ops.ASSIGN, f4, (acc, acc + ld))
  uops = [ga, gout, nv, *lin(zero), acc, r, ld, acc + ld, asg, UOp(Ops.ENDRANGE, dtypes.void, (r,)), UOp.const(i32, 0), gout.store(UOp.const(i32, 0), asg)]
  for n in (1, 13, 20):
    out = Buffer("CPU", 1, f4)
    run("vacc", uops, cpu(a, f4), out, var_vals={"n": n})
    want = np.full((1, 4), 0.5, np.float32)
    for k in range(n): want = ref(Ops.ADD, f4, [want, a[k:k + 1]], [f4, f4])
    assert_same(out.numpy(), want, F, f"float4 accumulator over {n} iterations")

def specials_program(gs: tuple[int, int, int] = (3, 2, 2), ls: tuple[int, int, int] = (4, 2, 1)) -> list[UOp]:
  """gidx/lidx in 3 dims: out[global id] = its coordinates packed, written only inside an IF (not at global id 5)."""
  g = [UOp.special(f"gidx{d}", gs[d]) for d in range(3)]
  lx = [UOp.special(f"lidx{d}", ls[d]) for d in range(3)]
  gid = [g[d] * ls[d] + lx[d] for d in range(3)]
  dims = [gs[d] * ls[d] for d in range(3)]
  flat = (gid[2] * dims[1] + gid[1]) * dims[0] + gid[0]
  code = g[0] * 1000 + g[1] * 100 + g[2] * 10 + lx[0] + lx[1] * 10000 + lx[2] * 100000
  out = UOp.define_global(0, i32)
  cond = flat.ne(5)
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  st = out.store(flat, code)
  head = [out, *lin(cond)]
  return [*head, iff, *[u for u in lin(st) if u not in set(head)], UOp(Ops.ENDIF, dtypes.void, (iff,))]

def test_if_block_and_specials():
  gs, ls = (3, 2, 2), (4, 2, 1)
  uops = specials_program(gs, ls)
  dims = [gs[d] * ls[d] for d in range(3)]
  n = math.prod(dims)
  buf = cpu(np.full(n, -1, np.int32), i32)
  run("specials", uops, buf)
  gz, gy, gx, lz, ly, lxx = np.meshgrid(*(np.arange(s) for s in (gs[2], gs[1], gs[0], ls[2], ls[1], ls[0])), indexing="ij")
  fl = (((gz * ls[2] + lz) * dims[1] + gy * ls[1] + ly) * dims[0] + gx * ls[0] + lxx).reshape(-1)
  want = np.full(n, -1, np.int32)
  want[fl] = (gx * 1000 + gy * 100 + gz * 10 + lxx + ly * 10000 + lz * 100000).reshape(-1)
  want[5] = -1
  assert np.array_equal(buf.numpy(), want)

def test_idx_special_and_aliased_buffers():
  n = 100
  idx = UOp.special("idx0", n)
  g0, g1 = UOp.define_global(0, dtypes.uint8), UOp.define_global(1, dtypes.uint8)
  a = np.arange(n, dtype=np.uint8) * 7
  b = cpu(a, dtypes.uint8)
  run("inplace", lin(g1.store(idx, g0.load(idx) * 3 + 1)), b, b)   # data0 and data1 are the same memory
  assert np.array_equal(b.numpy(), (a * 3 + 1).astype(np.uint8))

def test_define_local_without_barrier():
  G, L = 4, 8
  a = np.arange(G * L, dtype=np.float32) + 0.5
  gi, li = UOp.special("gidx0", G), UOp.special("lidx0", L)
  loc = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(L, local=True), (), "temp0")
  ga, gout = UOp.define_global(0, dtypes.float32), UOp.define_global(1, dtypes.float32)
  gid = gi * L + li
  st_local = loc.store(li, ga.load(gid) * 2.0)
  st_out = gout.store(gid, loc.load(li) + 1.0)
  uops = lin(st_local)
  uops += [u for u in lin(st_out) if u not in set(uops)]
  src = CRenderer().render("locals", uops)
  lines = [ln.strip() for ln in src.splitlines()]
  at = {k: next(i for i, ln in enumerate(lines) if ln.startswith(k)) for k in ("for (int gidx0", "float local", "for (int lidx0")}
  assert at["for (int gidx0"] < at["float local"] < at["for (int lidx0"], src
  out = Buffer("CPU", G * L, dtypes.float32)
  run("locals", uops, cpu(a, dtypes.float32), out)
  assert np.array_equal(out.numpy(), a * 2 + 1)


# ---- renderer and compiler plumbing -----------------------------------------------------------

def test_renderer_interface_and_small_sources():
  r = make_device("CPU").renderer
  assert isinstance(r, Renderer) and r.device == "CPU" and r.native_transcendentals is False  # decomposed unless NATIVE_TRANSCENDENTALS=1
  assert CRenderer(native_transcendentals=True).native_transcendentals is True
  idx = UOp.special("idx0", 4)
  g0, g1 = UOp.define_global(0, i32), UOp.define_global(1, dtypes.bfloat16)
  src = r.render("small", lin(g0.store(idx, g0.load(idx) + 1)))
  assert "static" not in src and "typedef" not in src, "helpers and vector types must only appear when used"
  src_bf = r.render("bf", lin(g1.store(idx, g1.load(idx) * g1.load(idx))))
  assert "rg_f2bf" in src_bf and "rg_maxf" not in src_bf and "rg_fma" not in src_bf

def test_unsupported_and_bad_programs_fail_clearly():
  idx = UOp.special("idx0", 4)
  g0 = UOp.define_global(0, i32)
  st = g0.store(idx, idx)
  assert "/* barrier" in CRenderer().render("k", [*lin(st), UOp(Ops.BARRIER, dtypes.void, (st,))])   # barriers: test_cpu_barriers.py
  with pytest.raises(SpecError, match=r"WMMA dtypes.float, arg=None\): takes 3 sources, got 0"): CRenderer().render("k", [*lin(st), UOp(Ops.WMMA, dtypes.float32, (), None)])
  for bad in ("1bad", "sinf", "data0", "int"):
    with pytest.raises(ValueError, match=f"kernel name '{bad}'"): CRenderer().render(bad, lin(st))
  v = UOp.variable("data0", 0, 4)
  with pytest.raises(ValueError, match="variable name 'data0'"): CRenderer().render("k", lin(g0.store(idx, idx + v)))
  with pytest.raises(SpecError, match="not defined before"): CRenderer().render("k", [st, *lin(st)[:-1]])

def test_compile_cache_hits_on_second_compile(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  cc = ClangCompiler()
  assert cc.path in cc.cachekey and "-ffp-contract=off" in cc.cachekey and "-fwrapv" in cc.cachekey
  calls = []
  real = cc.compile
  monkeypatch.setattr(cc, "compile", lambda src: calls.append(src) or real(src))
  src = "int answer(void) { return 42; }\n"
  lib1 = cc.compile_cached(src)
  lib2 = cc.compile_cached(src)
  assert len(calls) == 1 and lib1 == lib2 and list((tmp_path / "compiled").rglob("*"))
  prg = CPUProgram("answer", lib2)
  prg.fxn.restype = ctypes.c_int
  assert prg.fxn() == 42
  cc.compile_cached(src + "/* changed */\n")
  assert len(calls) == 2

def test_compile_error_names_the_source_and_the_diagnostic():
  with pytest.raises(CompileError) as e: ClangCompiler().compile("void broken(int* data0) { data0[0] = undeclared_thing; }\n")
  msg = str(e.value)
  assert "undeclared_thing" in msg and "error" in msg and "   1 | void broken" in msg

def test_runner_reports_time_and_missing_function():
  idx = UOp.special("idx0", 8)
  g0 = UOp.define_global(0, i32)
  r = Runner("timed", lin(g0.store(idx, idx)), "CPU")
  b = Buffer("CPU", 8, i32)
  t = r(b)
  assert isinstance(t, float) and t >= 0 and b.numpy().tolist() == list(range(8))
  with pytest.raises(ValueError, match="no function 'other'"): CPUProgram("other", r.lib)
