"""The foundation's promise: for every ALU op x dtype, every cast and bitcast, and the decomposed
transcendentals, the CPU backend and the PYTHON device produce the same bits as the reference
semantics evaluated directly (NaNs of one dtype compare equal: their payload is unspecified)."""
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.suite import Case, all_cases
from conformance.values import random_values, special_values, without_ub
from refgrad.device import Buffer
from refgrad.dtype import DType
from refgrad.program import Runner
from refgrad.uop import semantics
from refgrad.uop.evaluate import eval_graph
from refgrad.uop.ops import Ops

N = 24
CASES = [c for c in all_cases() if c.group != "native"]   # native transcendentals are not bit-exact: conformance measures them in ULPs

@cache
def _runner(case_name: str, device: str) -> Runner:
  case = next(c for c in CASES if c.name == case_name)
  return Runner.from_sink(f"agree_{case.op.name.lower()}", case.make_sink(N), device)

def _column(dt: DType):
  specials = special_values(dt)
  one = st.one_of(st.sampled_from(range(len(specials))).map(lambda i: specials[i:i + 1]),
                  st.integers(0, 2**32 - 1).map(lambda s: random_values(dt, 1, np.random.default_rng(s))))
  return st.lists(one, min_size=N, max_size=N).map(np.concatenate)

def _expected(case: Case, cols: list[np.ndarray]) -> np.ndarray:
  if case.group != "transcendental": return semantics.evaluate(case.op, case.out_dtype, cols, case.src_dtypes)
  val = case.make_sink(N).src[0].src[2]
  return eval_graph(val, {u: cols[0] for u in val.toposort if u.op is Ops.LOAD})

def _run(case: Case, device: str, cols: list[np.ndarray]) -> np.ndarray:
  out = Buffer(device, N, case.out_dtype)
  _runner(case.name, device)(out, *(Buffer.from_numpy(device, c, d) for c, d in zip(cols, case.src_dtypes)))
  return out.numpy()

@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.group}-{c.name.replace(' ', '-')}")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_cpu_python_reference_agree(case: Case, data):
  cols = [data.draw(_column(d), label=f"in{k}") for k, d in enumerate(case.src_dtypes)]
  if case.group != "transcendental": cols = without_ub(case.op, case.out_dtype, cols, case.src_dtypes)
  want = _expected(case, cols)
  got_py, got_cpu = _run(case, "PYTHON", cols), _run(case, "CPU", cols)
  for name, got in (("PYTHON", got_py), ("CPU", got_cpu)):
    bad = np.flatnonzero(~semantics.same_bits(got, want, case.out_dtype))
    assert bad.size == 0, (f"{name} differs from the reference on {case.name} at lane {bad[0]}: inputs "
                           f"{[semantics.to_python(c[bad[0]:bad[0] + 1], d) for c, d in zip(cols, case.src_dtypes)]} "
                           f"got {semantics.to_python(got[bad[:1]], case.out_dtype)} want {semantics.to_python(want[bad[:1]], case.out_dtype)}")

def test_every_op_and_dtype_is_covered():
  covered = {(c.op, c.dtype) for c in CASES if c.group == "alu"}
  from refgrad.dtype import dtypes
  from refgrad.uop.ops import GroupOp
  for op in GroupOp.ALU - GroupOp.Transcendental:
    assert any((op, d) in covered for d in dtypes.all), op
  assert {(c.op, c.dtype) for c in CASES if c.group == "transcendental"} == {(o, d) for o in GroupOp.Transcendental for d in dtypes.floats}
  assert sum(c.group == "cast" for c in CASES) == len(dtypes.all) * (len(dtypes.all) - 1)
  for d in dtypes.all:   # each dtype has its arithmetic
    assert (Ops.ADD, d) in covered or d.name == "bool"
