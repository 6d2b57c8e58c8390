"""The tensor-level oracles (oracles/np_interp.py, oracles/gradcheck.py): on refgrad as it is they find nothing on random
programs and compare most elements bit for bit; a shared symbolic rule broken (every device agrees) and a wrong
gradient rule are found, the gradient one by the fuzzer's own check and shrunk to a smaller program."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from oracles import np_interp, tensor_oracles
from oracles.gradcheck import grad_differs
from oracles.programs import RecipeStream
from refgrad.dtype import dtypes

ROOT = Path(__file__).resolve().parents[2]


def _recipes(seed: int, n: int):
  rs, rng = RecipeStream(), np.random.default_rng(seed)
  return [rs.draw(rng) for _ in range(n)]

def test_numpy_interpreter_agrees_with_refgrad_on_random_programs_mostly_bit_for_bit():
  exact = total = 0
  for i, rec in enumerate(_recipes(11, 60)):
    assert np_interp.interp_differs(rec, i) is None, rec
    try: run = np_interp.run_both(rec, i)
    except np_interp.NotModelled: continue
    exact, total = exact + int((run.value.e == 0).sum()), total + run.value.e.size
  assert total > 5000 and exact / total > 0.85, (exact, total)   # the bound is 0 (bits) almost everywhere

def test_interpreter_rounding_and_bounds():
  x = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 65520.0, 2.0 ** -25, -(2.0 ** -26)])
  assert np_interp.round_to(x, dtypes.float16).tolist() == [1.0, 1 + 2 * 2.0 ** -10, np.inf, 0.0, -0.0]   # ties to even, overflow, subnormal ties
  a = np_interp.V(np.array([1.0, 2.0]), np.zeros(2), dtypes.float32)
  s = np_interp.fsum(a, 0, False, dtypes.float32)
  assert s.v == 3.0 and 0 < s.e < 1e-5                                                     # a reordered sum carries a bound
  assert np_interp.compare(np.float32([3.0]), s) is None and np_interp.compare(np.float32([3.001]), s) is not None
  c = np_interp.lt(np_interp.V(np.array([1.0]), np.array([0.0]), dtypes.float32), s)
  assert c.e[0] == 0 and bool(c.v[0])                                                        # far from the bound: compared
  near = np_interp.lt(np_interp.V(np.array([3.0]), np.zeros(1), dtypes.float32), s)
  assert np.isinf(near.e[0])                                                                 # within it: not compared

def test_gradcheck_agrees_with_refgrad_on_random_programs():
  for i, rec in enumerate(_recipes(12, 30)):
    assert grad_differs(rec, i) is None, rec
  assert not tensor_oracles.skipped


_SHARED = """
import json, sys
from tests.fuzz.inject import inject
inject(sys.argv[1])
from oracles import check
from oracles.astjson import ast_to_json
from oracles.case import Case
from oracles.programs import kernels_of
from fuzz.shrink import shrink
rec, seed, opts = json.loads(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
(name, ast) = kernels_of(rec)[0]
def run(c): return check.check_cases([c], ["CPU"], ast_eval=False)[0]
case = Case(0, name, ast_to_json(ast), "CPU", opts, {"seed": seed, "mode": "random"}, "program", rec)
res = run(case)
small, sres = shrink(case, res, run) if res.status == "fail" else (case, res)
print(json.dumps({"oracle": res.oracle, "status": res.status, "shrunk_oracle": sres.oracle, "steps": [s[0] for s in small.recipe["steps"]],
                  "shape": small.recipe["shape"], "detail": res.detail}))
"""

def _inject_check(bug: str, rec: dict, seed: int, opts: list | None = None) -> dict:
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  out = subprocess.run([sys.executable, "-c", _SHARED, bug, json.dumps(rec), str(seed), json.dumps(opts or [])], capture_output=True, text=True,
                       env=env, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1])

def test_a_shared_symbolic_rule_is_found_by_the_numpy_interpreter():
  """symbolic_float is wrong in the scheduler and in lowering alike: with the kernel-level AST evaluator off, the
  numpy interpreter of the whole program still sees it."""
  rec = {"dtype": "float", "shape": [7, 6], "steps": [["relu", 0, 0, 0], ["mul_const", 57, 1, 0], ["neg", 0, 0, 0]], "kernel": 0}
  got = _inject_check("symbolic_float", rec, 1)
  assert got["status"] == "fail" and got["oracle"] == "numpy" and "bit for bit" in got["detail"], got
  assert got["shrunk_oracle"] == "numpy" and got["steps"] == ["mul_const"], got

def test_a_gradient_rule_bug_is_found_by_gradcheck_and_shrunk():
  rec = {"dtype": "float", "shape": [8, 6], "steps": [["exp", 0, 0, 0], ["mul", 0, 0, 1], ["flip", 1, 0, 0], ["sum", 0, 0, 0]], "kernel": 0}
  got = _inject_check("gradient", rec, tensor_oracles.GRAD_PHASE)   # the input seed of the groups gradcheck runs for
  assert got["status"] == "fail" and got["oracle"] == "grad" and "central difference" in got["detail"], got
  assert got["shrunk_oracle"] == "grad" and len(got["steps"]) < 4, got   # exp alone is enough: exp2(x * log2(e)) has a MUL

def test_integer_bounds_that_forget_wrap_around_are_found_by_the_numpy_interpreter():
  """symbolic_wrap: ((x & m) + c) < c folds to false when the bounds of the sum are not wrapped (oracles/programs.py
  wrap_cmp); the interpreter wraps as the dtype does."""
  rec = {"dtype": "uchar", "shape": [13], "steps": [["abs", 0, 0, 0], ["wrap_cmp", 1, 0, 0]], "kernel": 0}
  got = _inject_check("symbolic_wrap", rec, 1)
  assert got["status"] == "fail" and got["oracle"] == "numpy", got
  assert got["shrunk_oracle"] == "numpy" and got["steps"] == ["wrap_cmp"], got
