"""The suite's cases (ALU op x dtype, cast matrix, bitcasts, transcendentals) and running them.

Every case is one elementwise kernel over a column of inputs: the dtype's special values in all
combinations plus seeded random bits, with inputs that would be undefined behaviour replaced. The
expected output is the reference semantics evaluated directly; a device passes a case when its
output matches bit for bit (NaNs of one dtype are all equal: their payload is unspecified). The
"native" group is the exception: each backend's own EXP2/LOG2/SIN, within `NATIVE_ULP_BOUND` ULPs of
the exact value (conformance/ulp.py).
"""
from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conformance.kernels import elementwise
from conformance.ulp import NATIVE_ULP_BOUND, beyond_sin_range, exact, native_inputs, sin_range_errors, ulp_errors
from conformance.values import cast_ties, operand_sets, without_ub
from refgrad.codegen import to_linear
from refgrad.device import Buffer, Device
from refgrad.dtype import DType, dtypes
from refgrad.program import Runner, precompile
from refgrad.uop import semantics
from refgrad.uop.decompositions import decompose_transcendentals
from refgrad.uop.evaluate import eval_graph
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import SpecError, verify_linear

N_RANDOM = 2000
N_TIES = 600        # rounding-boundary inputs per cast case


@dataclass
class Case:
  group: str                      # "alu" | "cast" | "bitcast" | "transcendental" | "native"
  op: Ops
  dtype: DType                    # the row/column dtype: operand dtype (alu), target (cast)
  src_dtypes: tuple[DType, ...]
  out_dtype: DType
  make_sink: Callable[[int], UOp] = field(repr=False)
  @property
  def name(self) -> str:
    if self.group in ("cast", "bitcast"): return f"{self.op.name} {self.src_dtypes[0].name}->{self.out_dtype.name}"
    return f"{self.op.name} {self.dtype.name}"

@dataclass
class Result:
  case: str
  group: str
  op: str
  dtype: str
  src_dtype: str
  device: str
  status: str                     # "pass" | "fail" | "error"
  lanes: int
  detail: str = ""
  max_ulp: float | None = None    # "native" cases: the largest error measured


def _alu_operands(op: Ops, dt: DType) -> tuple[DType, ...]:
  if op is Ops.WHERE: return (dtypes.bool, dt, dt)
  return (dt,) * (1 if op in GroupOp.Unary else 2 if op in GroupOp.Binary else 3)

def _valid(op: Ops, out: DType, srcs: tuple[DType, ...]) -> bool:
  """Whether the spec accepts op on these dtypes (the suite tests exactly what the spec allows)."""
  ins = [UOp(Ops.CONST, d, (), False if d == dtypes.bool else 0) for d in srcs]
  try: verify_linear([*dict.fromkeys(ins), UOp(op, out, tuple(ins))])
  except SpecError: return False
  return True

def all_cases() -> list[Case]:
  cases: list[Case] = []
  def add(group: str, op: Ops, dt: DType, srcs: tuple[DType, ...], out: DType) -> None:
    if _valid(op, out, srcs): cases.append(Case(group, op, dt, srcs, out, lambda n, op=op, out=out, srcs=srcs: elementwise(op, out, srcs, n)))
  for op in sorted(GroupOp.ALU - GroupOp.Transcendental, key=lambda o: o.value):
    for dt in dtypes.all:
      srcs = _alu_operands(op, dt)
      add("alu", op, dt, srcs, dtypes.bool if op in GroupOp.Comparison else dt)
  for src in dtypes.all:
    for dst in dtypes.all:
      if src != dst: add("cast", Ops.CAST, dst, (src,), dst)
      if src != dst and src.itemsize == dst.itemsize and dtypes.bool not in (src, dst): add("bitcast", Ops.BITCAST, dst, (src,), dst)
  for op in sorted(GroupOp.Transcendental, key=lambda o: o.value):
    for dt in dtypes.floats:
      cases.append(Case("transcendental", op, dt, (dt,), dt,
                        lambda n, op=op, dt=dt: decompose_transcendentals(elementwise(op, dt, (dt,), n))))
      cases.append(Case("native", op, dt, (dt,), dt, lambda n, op=op, dt=dt: elementwise(op, dt, (dt,), n)))
  return cases


def case_inputs(case: Case, seed: int = 0) -> tuple[list[np.ndarray], Any]:
  """(input columns, with UB lanes replaced by defined ones, and the expected output) for a case;
  for a native case the expected output is the exact value as float64 (hi, lo)."""
  if case.group == "native":
    x = native_inputs(case.op, case.dtype, N_RANDOM, seed + case.op.value)
    return [x], exact(case.op, x, case.dtype)
  cols = operand_sets(case.src_dtypes, N_RANDOM, seed + case.op.value * 131 + case.dtype.priority)
  if case.group == "cast":   # tie-dense: values at the cast's rounding boundaries (and one step either side)
    cols = [np.concatenate([cols[0], cast_ties(case.src_dtypes[0], case.out_dtype, N_TIES, np.random.default_rng(seed + 7))])]
  if case.group != "transcendental": cols = without_ub(case.op, case.out_dtype, cols, case.src_dtypes)
  if case.group == "transcendental":
    sink = case.make_sink(1)
    store = sink.src[0]
    leaves = {u: cols[0] for u in store.src[2].toposort if u.op is Ops.LOAD}
    return cols, eval_graph(store.src[2], leaves)
  return cols, semantics.evaluate(case.op, case.out_dtype, cols, case.src_dtypes)


def _kernel(case: Case, device: str, n: int) -> tuple[str, list[UOp]]:
  """The case's kernel over n lanes: (its name, its linear program for the device)."""
  name = f"conf_{case.group}_{case.op.name.lower()}_{case.src_dtypes[0].name}_{case.out_dtype.name}"
  # native cases keep EXP2/LOG2/SIN as they are, whatever the renderer would ask for
  return name, to_linear(case.make_sink(n), Device[device].renderer, decompose=False if case.group == "native" else None)

_precompiled: set[tuple[str, str, int]] = set()   # (group, name, lanes) of the cases this process compiled ahead

def run_on_device(case: Case, device: str, cols: list[np.ndarray], ahead: Sequence[tuple[Case, int]] = ()) -> np.ndarray:
  """The case's kernel on `device` over the input columns: its raw output (in the device's worker process). `ahead`: the
  cases (and their lanes) this device runs next; a compiler that batches (nvcc) compiles them with this one in one call."""
  n = len(cols[0])
  # a case not compiled ahead yet starts a batch: it and those of the cases ahead that are not either (the batches follow
  # the device's case order, so a worker's cases each find theirs in the cache, or start the next batch)
  todo = [(c, m) for c, m in [(case, n), *ahead] if (c.group, c.name, m) not in _precompiled]
  if todo and todo[0][0] is case and len(todo) > 1 and getattr(Device[device].compiler, "batches", False):
    kernels = []
    for c, m in todo:
      _precompiled.add((c.group, c.name, m))
      try: kernels.append(_kernel(c, device, m))
      except Exception: continue   # lowering it again when it runs raises the same error, where it is reported
    precompile(device, kernels)
  name, linear = _kernel(case, device, n)
  runner = Runner(name, linear, device)
  out = Buffer(device, n, case.out_dtype)
  runner(out, *(Buffer.from_numpy(device, c, d) for c, d in zip(cols, case.src_dtypes)))
  return out.numpy()

def result_of(case: Case, device: str, status: str, lanes: int = 0, detail: str = "", max_ulp: float | None = None) -> Result:
  return Result(case.name, case.group, case.op.name, case.out_dtype.name if case.group != "alu" else case.dtype.name,
                case.src_dtypes[0].name, device, status, lanes, detail, max_ulp)

def _bits(a: np.ndarray, i: int, dt: DType) -> str:
  """Lane i as its bits in hex, with its value: 0x3f800000 (1.0)."""
  raw = np.ascontiguousarray(a[i:i + 1]).view(np.uint8).tobytes()[::-1].hex()
  return f"0x{raw} ({semantics.to_python(a[i:i + 1], dt)[0]!r})"

def judge(case: Case, device: str, cols: list[np.ndarray], want: Any, got: np.ndarray) -> Result:
  """The Result of a device's output `got` against the expected `want` (computed without any backend loaded)."""
  n = len(cols[0])
  if case.group == "native":
    beyond = beyond_sin_range(case.op, cols[0], case.dtype)
    err = sin_range_errors(ulp_errors(got, want, case.out_dtype), beyond, got, case.out_dtype)
    worst = int(np.argmax(err))
    rule = f"; {int(beyond.sum())} inputs beyond SIN_RANGE: a finite value in [-1, 1]" if beyond.any() else ""
    detail = f"max {err[worst]:.3g} ULP at input {_bits(cols[0], worst, case.dtype)} (bound {NATIVE_ULP_BOUND}{rule})"
    return result_of(case, device, "pass" if err[worst] <= NATIVE_ULP_BOUND else "fail", n, detail, float(err[worst]))
  ok = semantics.same_bits(got, want, case.out_dtype)
  if ok.all(): return result_of(case, device, "pass", n)
  bad = np.flatnonzero(~ok)[:5]
  rows = [f"lane {i}: inputs {', '.join(_bits(c, i, d) for c, d in zip(cols, case.src_dtypes))} "
          f"got {_bits(got, i, case.out_dtype)} want {_bits(want, i, case.out_dtype)}" for i in bad]
  return result_of(case, device, "fail", n, f"{int((~ok).sum())} of {n} lanes differ; " + "; ".join(rows))

def run_case(case: Case, device: str, seed: int = 0) -> Result:
  """A case on a device in this process (no isolation: the CLI runs devices in workers, conformance/isolate.py)."""
  try:
    cols, want = case_inputs(case, seed)
    got = run_on_device(case, device, cols)
  except Exception as e:  # a backend that crashes on a case fails that case, not the suite
    return result_of(case, device, "error", 0, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
  return judge(case, device, cols, want, got)
