"""Shrinking a failing case to a small one that fails the same way (same oracle, same device).

In turn, while something gets smaller: fewer Opts (delta debugging over the list: drop halves, quarters, ... then
single Opts), smaller Opt sizes, for generated programs fewer steps and smaller shapes (the recipe is rebuilt and
rescheduled), then simpler inputs ("simple" mode: small ints and plain floats). Every candidate is checked by the
caller's `check` (an isolated worker in the fuzzer), so crashes and hangs shrink too. Bounded by MAX_CHECKS and a deadline.
"""
from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from oracles.astjson import ast_to_json
from oracles.case import Case, Result
from oracles.programs import SIZES, kernel_of

MAX_CHECKS = 120


def shrink(case: Case, result: Result, check: Callable[[Case], Result], deadline: float = math.inf) -> tuple[Case, Result]:
  """(the smallest case found that fails like `result`, its result); no new check starts after `deadline` (monotonic).
  Like: the same oracle, device and dtype (the first differing op is found for the case kept, after shrinking)."""
  want = result.signature()[:3]
  best, best_r = case, result
  left = [MAX_CHECKS]
  def fails(c: Case) -> Result | None:
    if left[0] <= 0 or time.monotonic() >= deadline: return None
    left[0] -= 1
    r = check(c)
    return r if r.status == "fail" and r.signature()[:3] == want else None
  progress = True
  while progress and left[0] > 0:
    progress = False
    for cand in _candidates(best):
      if (r := fails(cand)) is not None:
        best, best_r, progress = cand, r, True
        break
  return best, best_r


def _candidates(c: Case) -> Iterator[Case]:
  """Smaller variants of c, the most promising first."""
  opts = c.opts
  n = len(opts)
  chunk = max(1, n // 2)
  while chunk >= 1 and n:   # delta debugging: remove each chunk of the Opt list
    for s in range(0, n, chunk): yield _with(c, opts=opts[:s] + opts[s + chunk:])
    if chunk == 1: break
    chunk //= 2
  for i, (op, axis, arg) in enumerate(opts):   # smaller Opt sizes
    for a in (2, 3, 4):
      if isinstance(arg, int) and arg > a and op in ("UPCAST", "UNROLL", "LOCAL", "GROUP", "GROUPTOP", "PADTO"):
        yield _with(c, opts=opts[:i] + [[op, axis, a]] + opts[i + 1:])
  if c.recipe is not None:
    steps = c.recipe["steps"]
    for i in reversed(range(len(steps))):   # fewer ops
      if (k := _rebuilt(c, {**c.recipe, "steps": steps[:i] + steps[i + 1:]})) is not None: yield k
    shape = c.recipe["shape"]
    for i, s in enumerate(shape):           # smaller shapes (and fewer dimensions)
      for smaller in [x for x in SIZES if x < s][-2:]:
        if (k := _rebuilt(c, {**c.recipe, "shape": shape[:i] + [smaller] + shape[i + 1:]})) is not None: yield k
      if len(shape) > 1 and (k := _rebuilt(c, {**c.recipe, "shape": shape[:i] + shape[i + 1:]})) is not None: yield k
  if c.inputs["mode"] != "simple": yield _with(c, inputs={"seed": c.inputs["seed"], "mode": "simple"})
  if c.inputs["seed"] != 0: yield _with(c, inputs={**c.inputs, "seed": 0})


def _with(c: Case, **kw: Any) -> Case:
  d = copy.deepcopy(c.to_json())
  d.update(kw)
  return Case.from_json(d)

def _rebuilt(c: Case, recipe: dict[str, Any]) -> Case | None:
  try: kn = kernel_of(recipe)
  except Exception: return None
  if kn is None: return None
  rows = ast_to_json(kn[1])
  if rows == c.ast and recipe.get("shape") == c.recipe.get("shape") and recipe["steps"] == c.recipe["steps"]: return None  # type: ignore[union-attr]
  return _with(c, kernel=kn[0], ast=rows, recipe=recipe)
