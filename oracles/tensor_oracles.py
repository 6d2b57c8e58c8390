"""The tensor-level oracles of a case's program, run by oracles/check.py for groups with a recipe:

  numpy  every group: the whole program on refgrad against the numpy interpreter (oracles/np_interp.py); on PYTHON, and
         on the CPU (compiled, default Opts) for one group in 4 (input seed 3 mod 4);
  limits groups whose program has a big_view step: the element limit at its edge (oracles/programs.py limit_problem);
  grad   one group in GRAD_EVERY (input seed = GRAD_PHASE mod GRAD_EVERY, so not the groups of the "program"
         oracle): refgrad's gradients against float64 central differences (oracles/gradcheck.py).

A failure of the interpreter itself (a corner it does not model, an error in its own code) is never a finding: the
recipe is skipped and counted in `skipped`, which tests watch."""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

from oracles.gradcheck import grad_differs
from oracles.np_interp import interp_differs
from oracles.programs import limit_problem

GRAD_EVERY, GRAD_PHASE = 2, 1
skipped: Counter[str] = Counter()
_passed: set[str] = set()


def tensor_level(recipe: dict[str, Any], seed: int) -> tuple[str, str] | None:
  """(oracle, detail) of the first tensor-level oracle that fails on the recipe with this input seed, else None."""
  numpy = lambda r, s: interp_differs(r, s, "CPU" if s % 4 == 3 else "PYTHON")
  todo = [("numpy", numpy)] + ([("grad", grad_differs)] if seed % GRAD_EVERY == GRAD_PHASE else [])
  if any(name == "big_view" for name, *_ in recipe["steps"]): todo.append(("limits", lambda r, s: limit_problem(r)))
  for name, fn in todo:
    key = json.dumps([name, recipe, seed], sort_keys=True)
    if key in _passed: continue
    try: bad = fn(recipe, seed)
    except Exception as e:   # the interpreter's own limits: not a finding
      skipped[f"{name}: {type(e).__name__}"] += 1
      continue
    if bad is not None: return name, bad
    _passed.add(key)
  return None
