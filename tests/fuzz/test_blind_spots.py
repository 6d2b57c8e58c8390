"""Blind spots a mutation sample found (issue 18), each closed in the oracles users run and shown here with an injected
bug of the same kind (tests/fuzz/inject.py):

  symbolic_join  a divmod join rule applied with unequal constants: the fuzzer's divmod_join step and conformance's
                 divmod programs, seen by the AST evaluator (before simplification) and the numpy interpreter
  gradient_drop  backward() loses gradients (zeros): conformance's gradient programs, against central differences
  symbolic_and   bounds of x & y off by one (>= 1): the fuzzer's bit_test step and conformance's bit_test programs
  fuse_pad_ub    x // y fused under a pad (the padded lanes divide by 0): the program oracle, fused vs unfused, now
                 reports undefined behaviour that only the fused program has
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.opt_kernels import PROGRAMS
from fuzz.run import Fuzzer, Options
from oracles.gradcheck import DIFFERENTIABLE
from oracles.models import load_models
from oracles.programs import _is_float
from oracles.tensor_oracles import GRAD_EVERY, GRAD_PHASE

ROOT = Path(__file__).resolve().parents[2]

_CONFORMANCE = """
import json, sys
from tests.fuzz.inject import inject
inject(sys.argv[1])
from conformance.opt_kernels import kernel_case_name, kernel_cases
from oracles.check import check_cases
cases = [c for c in kernel_cases() if c.kernel.startswith("program")]
print(json.dumps({kernel_case_name(c): [r.status, r.oracle] for c, r in zip(cases, check_cases(cases, []))}))
"""

def _conformance_programs(bug: str) -> dict[str, list[str]]:
  """status and oracle of each of conformance's whole-program cases (kernels group) with `bug` injected ("" none)."""
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  code = _CONFORMANCE if bug else _CONFORMANCE.replace("inject(sys.argv[1])", "")
  out = subprocess.run([sys.executable, "-c", code, bug], capture_output=True, text=True, env=env, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1])

def test_conformance_programs_pass_on_refgrad_as_it_is():
  got = _conformance_programs("")
  assert len(got) >= 10 and all(s == "pass" for s, _ in got.values()), got

@pytest.mark.parametrize("bug, oracles, at_least", [
  ("symbolic_join", {"ast-eval"}, 2),     # the unequal-constant and overflow divmod programs
  ("gradient_drop", {"grad"}, 5),         # every gradient program
  ("fuse_pad_ub", {"program"}, 2),        # both pad programs
  ("symbolic_and", {"ast-eval", "numpy"}, 3),   # the bit_test programs
])
def test_conformance_programs_find_the_bug(bug, oracles, at_least):
  got = _conformance_programs(bug)
  failed = {k: v for k, v in got.items() if v[0] == "fail"}
  assert len(failed) >= at_least and {o for _, o in failed.values()} <= oracles, got


def test_divmod_rule_bug_found_by_the_fuzzer_within_a_bounded_number_of_cases(tmp_path):
  """Seed 1 draws a divmod_join step early: found (ast-eval or numpy) and shrunk within 40 cases (seeds 2, 3, 5-9 do not
  draw it that soon: one program group in 30 or so has it)."""
  f = Fuzzer(Options(corpus=tmp_path, preload=["tests.fuzz.inject"], devices=["CPU"], workers=2, cases=40, seed=1, targets=["CPU"],
                     env={"FUZZ_INJECT": "symbolic_join"}), load_models())
  f.run()
  found = [x for x in f.stats.findings if x["oracle"] in ("ast-eval", "numpy")]
  assert found and found[0]["shrunk"], f.stats.findings



def test_conformance_gradient_programs_cover_every_differentiable_step():
  graded = {s[0] for rec, seed in PROGRAMS if seed % GRAD_EVERY == GRAD_PHASE and _is_float(rec["dtype"]) for s in rec["steps"]}
  assert DIFFERENTIABLE <= graded, DIFFERENTIABLE - graded
