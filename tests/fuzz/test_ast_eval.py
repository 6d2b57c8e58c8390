"""The AST evaluator (oracle ast-eval): a sample of output points agrees with the whole evaluation and finds a wrong
output; it evaluates the scheduler's kernel before symbolic simplification, so a rule broken in the shared symbolic
matcher (wrong in the scheduler and in lowering alike) is found and shrunk; boundary-dense inputs are what they say."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.values import cast_ties
from oracles import check
from oracles.ast_eval import eval_ast
from oracles.astjson import ast_from_json, ast_to_json
from oracles.case import Case
from oracles.inputs import ties, values
from oracles.models import load_models
from oracles.programs import kernels_of
from refgrad.dtype import dtypes
from refgrad.uop import semantics
from refgrad.uop.ops import Ops


def _model_kernels(n: int = 12):
  return [ast_from_json(k["ast"]) for k in load_models()[:n]]

def test_sampled_points_agree_with_the_whole_evaluation_and_find_a_wrong_output():
  for ast in _model_kernels():
    data = check.make_inputs(ast, {"seed": 3, "mode": "random"})
    whole = eval_ast(ast, dict(enumerate(data)))
    sampled = eval_ast(ast, dict(enumerate(data)), base=whole, rng=np.random.default_rng(0))
    stored = {st.src[0].arg for st in ast.src}
    for i in whole: assert semantics.same_bits(sampled[i], whole[i], _dt(ast, i)).all()
    wrong = {i: (b.view(np.uint8) ^ 1).view(b.dtype) if i in stored else b for i, b in whole.items()}   # every stored element off
    again = eval_ast(ast, dict(enumerate(data)), base=wrong, rng=np.random.default_rng(0))
    assert any(not np.array_equal(again[i].view(np.uint8), wrong[i].view(np.uint8)) for i in stored)

def _dt(ast, i):
  return next(u.dtype.base.scalar() for u in ast.toposort if u.op is Ops.DEFINE_GLOBAL and u.arg == i)

def test_long_reduction_evaluated_in_its_loop_order():
  rec = {"dtype": "float", "shape": [5, 3], "steps": [["long_sum", 0, 1, 0]], "kernel": 0}
  (name, ast), = kernels_of(rec)
  case = Case(0, name, ast_to_json(ast), "CPU", [], {"seed": 2, "mode": "random"}, "program", rec)
  assert check.check_cases([case], ["CPU"])[0].status == "pass"


_SHARED_RULE = """
import json
from tests.fuzz.inject import inject
inject("symbolic_float")   # the shared symbolic matcher reassociates float constant products
from oracles import check
from oracles.astjson import ast_to_json
from oracles.case import Case
from oracles.programs import kernels_of, raw_kernel_of
from fuzz.shrink import shrink
rec = {"dtype": "float", "shape": [7, 6], "steps": [["relu", 0, 0, 0], ["mul_const", 57, 1, 0], ["neg", 0, 0, 0]], "kernel": 0}
(name, ast), = kernels_of(rec)
def run(c): return check.check_cases([c], ["CPU"])[0]
case = Case(0, name, ast_to_json(ast), "CPU", [["UPCAST", 1, 2]], {"seed": 1, "mode": "random"}, "program", rec)
res = run(case)
small, sres = shrink(case, res, run) if res.status == "fail" else (case, res)
print(json.dumps({"raw": raw_kernel_of(rec, ast) is not None, "oracle": res.oracle, "status": res.status,
                  "shrunk_oracle": sres.oracle, "steps": [s[0] for s in small.recipe["steps"]]}))
"""

def test_a_rule_shared_by_scheduler_and_lowering_is_found_and_shrunk():
  """Both the unoptimized and the optimized program run the same wrongly simplified code; only the evaluator of the
  unsimplified AST disagrees. In a child process: the injection changes module state and the simplify memo."""
  env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
  out = subprocess.run([sys.executable, "-c", _SHARED_RULE], capture_output=True, text=True, env=env, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got["raw"] and got["status"] == "fail" and got["oracle"] == "ast-eval", got
  assert got["shrunk_oracle"] == "ast-eval" and got["steps"] == ["mul_const"], got


@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64])
def test_fuzz_ties_sit_halfway_for_a_narrower_cast(d):
  x = ties(d, 400, np.random.default_rng(1))
  assert np.array_equal(semantics.to_float64(semantics.round_float(x, d), d), x)   # exact in d
  assert (np.abs(x - np.round(x)) == 0.5).any()                                       # integer ties
  narrower = [t for t in (dtypes.bfloat16, dtypes.float16, dtypes.float32) if dtypes.finfo(t)[1] < dtypes.finfo(d)[1]]
  for t in narrower:   # some are ties of t: rounding to t moves them by exactly half of t's step there
    r = semantics.to_float64(semantics.round_float(x, t), t)
    fin = np.isfinite(r) & (x != 0)
    gap = np.abs(x - r)[fin]
    step = np.exp2(np.floor(np.log2(np.abs(x[fin]))) - dtypes.finfo(t)[1])
    assert (gap == step / 2).any()

def test_fuzz_random_inputs_hold_nan_payloads_and_zero_pairs():
  v = values(dtypes.float32, 4000, "random", np.random.default_rng(0))
  bits = v.view(np.uint32)[np.isnan(v)]
  assert len(set(bits.tolist())) > 3                                        # many payloads and signs, not one NaN
  z = (v == 0)
  assert (z & np.signbit(v)).any() and (z & ~np.signbit(v)).any()
  i8 = values(dtypes.int8, 4000, "random", np.random.default_rng(0))
  for w in (-128, -127, 127, 126, 63, 64): assert (i8 == w).any()

@pytest.mark.parametrize("src, dst", [(dtypes.float32, dtypes.float16), (dtypes.float64, dtypes.float32), (dtypes.float32, dtypes.bfloat16),
                                      (dtypes.int32, dtypes.float32), (dtypes.int64, dtypes.float64), (dtypes.float32, dtypes.int8)])
def test_conformance_cast_ties_are_at_the_rounding_boundary(src, dst):
  x = cast_ties(src, dst, 90, np.random.default_rng(0))
  assert len(x) >= 60
  f = np.array(semantics.to_python(x, src), dtype=object)
  if dtypes.is_float(dst) and dtypes.is_float(src):
    ties_ = f[0::3].astype(np.float64)
    r = semantics.to_float64(semantics.round_float(ties_, dst), dst)
    down = semantics.to_float64(semantics.round_float(np.nextafter(ties_, 0), dst), dst)
    up = semantics.to_float64(semantics.round_float(np.nextafter(ties_, np.inf * np.sign(ties_)), dst), dst)
    assert (down != up).all() and ((r == down) | (r == up)).all()   # the tie sits exactly between dst's neighbours
  elif dtypes.is_float(dst):
    t = [int(v) for v in f[0::3]]
    assert all(bin(abs(v)).rstrip("0").count("1") >= 2 and len(bin(abs(v)).strip("0b").rstrip("0")) == dtypes.finfo(dst)[1] + 2 for v in t)
  else:
    assert all(abs(float(v) - round(float(v))) == 0.5 for v in f)


_LIFETIME = """
import json
from tests.fuzz.inject import inject
inject("lifetime")   # run_schedule frees an intermediate after its last write instead of its last read
from oracles import check
from oracles.astjson import ast_to_json
from oracles.case import Case
from oracles.programs import kernels_of
from fuzz.shrink import shrink
rec = {"dtype": "float", "shape": [8, 8], "steps": [["exp", 0, 0, 0], ["add", 0, 0, 0], ["neg", 0, 0, 0], ["mul", 0, 0, 1],
       ["flip", 1, 0, 0], ["sum", 0, 0, 0]], "kernel": 0}
(name, ast) = kernels_of(rec)[0]
def run(c): return check.check_cases([c], ["CPU"])[0]
case = Case(0, name, ast_to_json(ast), "CPU", [], {"seed": 0, "mode": "random"}, "program", rec)
res = run(case)
small, sres = shrink(case, res, run) if res.status == "fail" else (case, res)
print(json.dumps({"oracle": res.oracle, "status": res.status, "shrunk_oracle": sres.oracle, "steps": len(small.recipe["steps"]),
                  "shape": small.recipe["shape"], "first": res.first_diff, "first_alone": check._program_differs(
                    {**rec, "steps": rec["steps"][:res.first_diff["step"]]}, 0) if res.first_diff else "none"}))
"""

_REC_STEPS = ["exp", "add", "neg", "mul", "flip", "sum"]

def test_a_scheduler_lifetime_bug_is_found_by_the_program_oracle_and_shrunk():
  """Every kernel is right, so no kernel-level oracle can see it; the whole program with fusion off (each step its own
  kernel, intermediates reused) differs from the fused one."""
  env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
  out = subprocess.run([sys.executable, "-c", _LIFETIME], capture_output=True, text=True, env=env, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got["status"] == "fail" and got["oracle"] == "program" and got["shrunk_oracle"] == "program", got
  assert got["steps"] < 6 and got["shape"] != [8, 8], got
  # the finding names the first step whose realized output differs: the steps before it agree
  assert got["first"] and got["first"]["op"] == _REC_STEPS[got["first"]["step"]] and got["first"]["dtype"] == "float", got
  assert got["first_alone"] is None, got
