"""UOp hash-consing, pattern matching and graph rewriting."""
import pytest

from refgrad.dtype import dtypes
from refgrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite


def test_hash_consing_identity():
  a = UOp.variable("a", 0, 10)
  assert (a + 1) is (a + 1)
  assert (a + 1) is not (a + 2)
  assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
  nan = float("nan")
  assert UOp.const(dtypes.float32, nan) is UOp.const(dtypes.float32, nan)

def test_uop_immutable_and_not_pickled():
  import pickle
  a = UOp.variable("a", 0, 10)
  with pytest.raises(AttributeError): a.op = Ops.ADD  # type: ignore[misc]
  with pytest.raises(TypeError): pickle.dumps(a)
  with pytest.raises(TypeError): bool(a)

def test_const_wraps_ints():
  assert UOp.const(dtypes.int8, 200).arg == -56
  assert UOp.const(dtypes.uint8, -1).arg == 255
  assert UOp.const(dtypes.bool, 3).arg is True

def test_upat_commutative_and_names():
  x = UOp.variable("x", 0, 10)
  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("y"), UPat.cvar("c")]), lambda y, c: y if c.arg == 0 else None)])
  assert pm.rewrite(x + 0) is x
  assert pm.rewrite(UOp.const(dtypes.int32, 0) + x) is x
  assert pm.rewrite(x + 1) is None
  same = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a"))), lambda a: a * 2)])
  assert same.rewrite(x + x) is x * 2
  assert same.rewrite(x + 1) is None

def test_upat_dtype_and_ctx():
  x = UOp.variable("x", 0, 10)
  seen = []
  pm = PatternMatcher([(UPat(Ops.ADD, dtype=dtypes.int64), lambda: None),
                       (UPat(Ops.ADD, name="u"), lambda ctx, u: seen.append(ctx) or None)])
  assert pm.rewrite(x + 1, ctx="here") is None and seen == ["here"]

def test_graph_rewrite_fixed_point_and_deep_graph():
  x = UOp.variable("x", 0, 10)
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("c1"))), UPat.cvar("c2"))),
                        lambda a, c1, c2: a + (c1.arg + c2.arg))])
  e = x
  for _ in range(3000): e = e + 1   # deep: no recursion limit
  assert graph_rewrite(e, pm) is x + 3000

def test_graph_rewrite_reports_nonconvergence():
  x = UOp.variable("x", 0, 10)
  flip = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: b + a if a is not b else None)])
  with pytest.raises(RuntimeError, match="did not converge"): graph_rewrite(x + 1, flip, max_steps=100)
