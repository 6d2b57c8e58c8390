"""Symbolic simplification is exact: simplified expressions equal the originals on every input."""
import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from refgrad.dtype import dtypes
from refgrad.uop import semantics
from refgrad.uop.evaluate import eval_graph
from refgrad.uop.ops import Ops, UOp
from refgrad.uop.symbolic import simplify

i32 = dtypes.int32
X, Y = UOp.variable("x", -7, 9), UOp.variable("y", 0, 5)


def _all_values(e: UOp) -> np.ndarray:
  xs, ys = zip(*itertools.product(range(X.arg[1], X.arg[2] + 1), range(Y.arg[1], Y.arg[2] + 1)))
  return eval_graph(e, {X: np.array(xs, np.int32), Y: np.array(ys, np.int32)})

@st.composite
def int_expr(draw, depth: int = 0) -> UOp:
  if depth > 3 or draw(st.integers(0, 3)) == 0:
    return draw(st.sampled_from([X, Y, UOp.const(i32, draw(st.integers(-4, 12)))]))
  a, b = draw(int_expr(depth + 1)), draw(int_expr(depth + 1))
  op = draw(st.sampled_from(["add", "mul", "div", "mod", "max", "lt", "where"]))
  if op == "add": return a + b
  if op == "mul": return a * b
  if op == "max": return a.maximum(b)
  if op == "lt": return (a < b).where(a, b)
  if op == "where": return (a.ne(b)).where(b, a + 1)
  c = UOp.const(i32, draw(st.integers(1, 8)))   # positive constant divisors: never UB
  return a // c if op == "div" else a % c

@settings(max_examples=300, deadline=None)
@given(int_expr())
def test_simplify_is_exact(e: UOp):
  s = simplify(e)
  assert (_all_values(s) == _all_values(e)).all(), f"{e} simplified to {s}"

@settings(max_examples=300, deadline=None)
@given(int_expr())
def test_bounds_contain_every_value(e: UOp):
  v = _all_values(e)
  assert e.vmin <= v.min() and v.max() <= e.vmax

def test_rules_fire():
  assert simplify(X + 0) is X
  assert simplify(X * 1) is X
  assert simplify((X + 2) + 3) is X + 5
  assert simplify(Y % 6) is Y and simplify(Y // 6).arg == 0
  assert simplify((Y * 4) // 2) is Y * 2
  assert simplify(Y < 6).arg is True and simplify(Y < 0).arg is False
  assert simplify(UOp.const(i32, 6) * 7).arg == 42
  assert simplify(UOp.const(dtypes.int8, 100) + 100).arg == -56   # folding wraps like the hardware

def test_float_rules_keep_ieee():
  f = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("f", 0, 0))
  assert simplify(f + 0.0) is f + 0.0          # -0 + 0 = +0: not an identity
  assert simplify(f * 1.0) is f
  assert simplify(f * 0.0) is f * 0.0          # nan * 0 = nan: not an identity

def test_division_by_zero_is_not_folded():
  assert simplify(UOp.const(i32, 1) // 0).op is Ops.IDIV   # UB stays visible to the checked run

def test_fold_uses_reference_semantics():
  for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
    a, b = UOp.const(dt, 1.0), UOp.const(dt, 3.0)
    got = simplify(a * b.alu(Ops.RECIP))
    want = semantics.evaluate(Ops.MUL, dt, [semantics.from_python([1.0], dt),
                                            semantics.evaluate(Ops.RECIP, dt, [semantics.from_python([3.0], dt)], [dt])], [dt, dt])
    assert semantics.same_bits(semantics.from_python([got.arg], dt), want, dt).all()

def test_eval_graph_reports_undefined_behaviour_when_asked():
  e = UOp.const(i32, 7) // X
  xs = np.array([1, 0], np.int32)
  assert eval_graph(e, {X: xs[:1]}, check_ub=True).tolist() == [7]
  import pytest
  with pytest.raises(ValueError, match="integer division by zero"): eval_graph(e, {X: xs}, check_ub=True)
