"""Coverage feedback (refgrad/coverage.py counters, fuzz/coverage.py steering) and views near 2^31 (the big_view step)."""
from __future__ import annotations

import numpy as np

from fuzz import report
from fuzz.coverage import MAX_BOOST, Coverage
from fuzz.run import Fuzzer, Options
from fuzz.stream import Stream, materialize
from oracles.case import Case
from oracles.check import check_cases
from oracles.np_interp import interp_differs
from oracles.programs import INDEX_LIMIT, big_view_geometry, build, kernel_of, limit_problem
from oracles.tensor_oracles import tensor_level
from refgrad import coverage, schedule
from refgrad.dtype import dtypes
from refgrad.uop.ops import Ops, UOp, graph_rewrite
from refgrad.uop.symbolic import symbolic

PRELOAD = ["tests.fuzz.inject"]


def _x_plus_0() -> UOp:
  x = UOp(Ops.DEFINE_VAR, dtypes.int, (), ("x", 0, 9))
  return x + UOp.const(dtypes.int, 0)

def test_rule_counter_is_off_by_default_and_counts_named_rules_when_enabled():
  assert coverage.rule_hits is None and coverage.path_hits is None   # a normal run pays one `is None` check per rewrite
  graph_rewrite(_x_plus_0(), symbolic)
  coverage.enable()
  try:
    graph_rewrite(_x_plus_0(), symbolic)
    snap = coverage.snapshot()
    assert snap["rules"] and all(n.startswith("refgrad.") and ":" in n for n in snap["rules"]), snap
    assert 0 < len(snap["rules"]) <= snap["rule_total"] and snap["path_total"] > 0
    assert coverage.snapshot()["rules"] == {}   # a snapshot clears the counts
    names = coverage.all_names()
    assert set(snap["rules"]) <= set(names["rules"]) and any(p.startswith("c:") for p in names["paths"]) and any(p.startswith("simt:") for p in names["paths"])
  finally: coverage.disable()

def test_novel_jobs_boost_the_choices_they_made():
  cov = Coverage()
  cov.add({"rules": {"a": 5, "b": 1}, "paths": {"simt:x": 1}, "names": {"rules": ["a", "b", "c"], "paths": ["simt:x", "c:y"]}}, ["common"])
  for _ in range(5): cov.add({"rules": {"a": 3}, "paths": {}}, ["common"])
  cov.add({"rules": {"c": 1}, "paths": {"c:y": 1}}, ["rare"])   # the first to fire c and emit y
  assert cov.boost("rare") > cov.boost("common") >= 1.0 and cov.boost("rare") <= MAX_BOOST and cov.boost("unseen") == 1.0
  j = cov.to_json()
  assert j["rules"]["fired"] == j["rules"]["total"] == 3 and j["rules"]["never"] == [] and j["paths"]["taken"] == 2

def test_stream_steering_is_off_for_cases_runs_and_shards_and_weights_recipe_cells():
  assert Fuzzer(Options(cases=8), []).stream.boost(("add", "int")) == 1.0
  assert Fuzzer(Options(seconds=5, shard=(0, 2)), []).stream.boost(("add", "int")) == 1.0
  f = Fuzzer(Options(seconds=5), [])
  assert f.stream.boost.__self__ is f.coverage   # type: ignore[attr-defined]
  # a strongly boosted cell is drawn more often than with no feedback
  def count(boost) -> int:
    s = Stream(3, ["CPU"])
    s.boost = boost
    return sum(step == "big_view" for _ in range(300) for step, *_ in s.draw().get("recipe", {"steps": []})["steps"])
  assert count(lambda c: 4.0 if c[0] == "big_view" else 1.0) > count(lambda c: 1.0)

def test_a_fuzz_run_reports_rule_helper_path_and_cell_coverage(tmp_path):
  f = Fuzzer(Options(cases=16, workers=1, devices=["CPU"], targets=["CPU"], corpus=tmp_path, shrink=False), [])
  f.run()
  j = report.to_json(f)["coverage"]
  assert 0 < j["rules"]["fired"] <= j["rules"]["total"] and len(j["rules"]["never"]) == j["rules"]["total"] - j["rules"]["fired"]
  assert j["paths"]["taken"] > 0 and any(p.startswith("c:") for p in j["paths"]["hits"]) and any(p.startswith("simt:") for p in j["paths"]["hits"])
  assert j["cells"] and all(k.startswith("CPU/") for k in j["cells"]) and j["cells_total"] >= len(j["cells"])
  assert "rule coverage:" in f.coverage.line(j["cells_total"])


def test_big_view_indexes_near_int32_wrap_and_matches_the_numpy_model():
  seen_limit = False
  for k, (dt, shape, r) in enumerate([("int", [3, 5], [0, 5, 2]), ("float", [7], [1, 130, 1]), ("char", [1], [0, 3, 2]),
                                      ("bool", [4], [4, 194, 5]), ("ushort", [2, 3], [2, 9, 0]), ("int", [5], [0, 60, 2])]):
    rec = {"dtype": dt, "shape": shape, "steps": [["big_view", *r]], "kernel": 0}
    n = int(np.prod(shape))
    rep, total, lo, hi = big_view_geometry(n, r)
    assert total <= INDEX_LIMIT and lo < rep * n and hi <= total and hi - lo <= 64
    seen_limit |= total == INDEX_LIMIT and hi == total
    assert build(rec).shape == (hi - lo,)
    _, ast = kernel_of(rec)
    if n > 1: assert max(u.arg for u in ast.toposort if u.op is Ops.CONST and isinstance(u.arg, int) and not isinstance(u.arg, bool)) >= INDEX_LIMIT - 200   # (n = 1: x % 1 folds away)
    assert interp_differs(rec, 3 + k, "PYTHON") is None
  assert seen_limit   # a window ending exactly at the 2^31-1 element limit

def _big_view_case(index: int) -> Case:
  rec = {"dtype": "int", "shape": [5], "steps": [["big_view", 0, 60, 2]], "kernel": 0}   # lanes 57, 58: x + c + 5 > int max
  spec = {"group": index // 8, "seed": 1, "target": "CPU", "depth": 0, "mode": "random", "input_seed": 12, "recipe": rec, "hints": ["UPCAST"] * 8}
  return materialize(spec)[0]

def test_a_rule_that_wraps_only_near_2_31_is_found_by_the_big_view_step():
  """index_wrap (tests/fuzz/inject.py) is sound for every index below 2^31 - n: only a view of about 2^31 elements shows it."""
  c = _big_view_case(0)
  assert [r.status for r in check_cases([c], ["CPU"])] == ["pass"]
  f = Fuzzer(Options(devices=["CPU"], preload=PRELOAD, env={"FUZZ_INJECT": "index_wrap"}, workers=1), [])
  try: r = f.check_one(c)
  finally:
    if f._spare is not None: f._spare.stop()
  assert r.status == "fail" and r.oracle in ("checked", "ast-eval", "device"), r

def test_limits_oracle_finds_an_element_limit_off_by_one(monkeypatch):
  """The scheduler's int32 limit one short (2^31-2: a real mutant that survived every oracle)."""
  rec = {"dtype": "char", "shape": [1], "steps": [["big_view", 0, 3, 2]], "kernel": 0}   # a view of exactly 2^31-1 elements
  assert limit_problem(rec) is None and tensor_level(rec, 5) is None
  monkeypatch.setattr(schedule, "_MAX_ELEMENTS", 2**31 - 2)
  assert "is refused" in (limit_problem(rec) or "") and (tensor_level(rec, 6) or ("",))[0] == "limits"   # (a new seed: passes are remembered)
  monkeypatch.setattr(schedule, "_MAX_ELEMENTS", 2**31)   # one past: the buffer's own check (refgrad/lazy.py) still refuses, naming the limit
  assert limit_problem(rec) is None
