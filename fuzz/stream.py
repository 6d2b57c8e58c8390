"""The case stream: group specs drawn in order from the seed (cheap, in the coordinator), materialized into cases in
the workers.

Group g covers cases g*GROUP .. g*GROUP+GROUP-1: one kernel (a random program's, or a captured model kernel), one
target, one input set, and GROUP random walks of 0..depth valid Opts. A spec holds everything the walks need (the
seed is per case), so a case is a function of (seed, options, its index) alone: the same whatever the worker count,
shard or order of execution. Coverage steers the draws: the least-drawn (step, dtype) cells of random programs
(oracles/programs.py) and the least-hinted (target, Opt kind, dtype) cells, whose Opt kind a walk tries first; in an
unsharded --seconds run also the coverage feedback of fuzz/coverage.py (`boost`), which depends on timing.
`--shard I/N` keeps the groups with g % N == I (every shard draws the whole stream, so steering agrees).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from oracles.astjson import ast_from_json, ast_to_json
from oracles.case import Case, opt_to_json
from oracles.programs import RecipeStream, kernel_of
from refgrad.kernel import Kernel
from refgrad.opt import InvalidOptError, OptOps, apply_opt, candidate_opts, tc_candidates
from refgrad.target import TARGETS

GROUP = 8                       # cases per group (they share the unoptimized kernel's lowering and run)
OPT_KINDS = [o.name for o in OptOps]
MODEL_SHARE = 0.3               # groups drawn from the captured model kernels
EXACT_SHARE = 0.5               # groups with exact float inputs (bit-exact cross-Opt check)
MIXES = {"default": {}, "small": {"max_elements": 64, "max_steps": 3}}   # small: tiny random programs only (the throughput benchmark's mix)
TC_SHARE = 0.1                  # groups on a GPU target drawn from the model kernels a tensor core can take


class Stream:
  def __init__(self, seed: int, targets: list[str], depth: int = 4, models: list[dict[str, Any]] | None = None, mix: str = "default"):
    if mix not in MIXES: raise ValueError(f"mix {mix!r}: choose one of {', '.join(MIXES)}")
    self.seed, self.targets, self.depth, self.models = seed, targets, depth, (models or []) if mix == "default" else []
    self.recipes = RecipeStream(**MIXES[mix])
    self.hints: Counter[tuple[str, str, str]] = Counter()   # (target, Opt kind, dtype) hinted so far
    self.next_group = 0
    self.boost: Callable[[Any], float] = lambda choice: 1.0   # coverage feedback (fuzz/coverage.py); 1: the seed alone decides
    self.choices: dict[int, list[Any]] = {}                  # group -> the generator choices it made (credited with its novelty)
    self.dclass: dict[int, str] = {}                         # group -> the dtype of its Opt x target x dtype cells
    self.tc_models = [i for i, m in enumerate(self.models) if tc_candidates(Kernel(ast_from_json(m["ast"])))]

  def draw(self) -> dict[str, Any]:
    """The next group spec."""
    g = self.next_group
    self.next_group += 1
    rng = np.random.default_rng([self.seed, g, 0x5EED])
    tcount = Counter({t: 0 for t in self.targets}) + Counter(t for (t, _, _) in self.hints.elements())
    target = min(self.targets, key=lambda t: (tcount[t], self.targets.index(t)))   # round-robin over targets
    spec: dict[str, Any] = {"group": g, "seed": self.seed, "target": target, "depth": self.depth,
                            "mode": "exact" if rng.random() < EXACT_SHARE else "random", "input_seed": int(rng.integers(1 << 31))}
    if self.tc_models and TARGETS[target].tensor_cores and rng.random() < TC_SHARE:   # tensor cores need a half matmul
      spec["model"] = self.tc_models[int(rng.integers(len(self.tc_models)))]
    elif self.models and rng.random() < MODEL_SHARE: spec["model"] = int(rng.integers(len(self.models)))
    else: self.recipes.boost, spec["recipe"] = self.boost, self.recipes.draw(rng)
    dcls = spec["recipe"]["dtype"] if "recipe" in spec else "model"
    hints = []
    for _ in range(GROUP):   # the least-hinted Opt x target x dtype cell first (weighted by coverage feedback, when on)
      kind = min(OPT_KINDS, key=lambda k: (self.hints[(target, k, dcls)] / self.boost((target, k, dcls)), rng.random()))
      self.hints[(target, kind, dcls)] += 1
      hints.append(kind)
    spec["hints"] = hints
    self.choices[g] = [*(self.recipes.last_cells if "recipe" in spec else [("model", str(spec["model"]))]), *((target, k, dcls) for k in set(hints))]
    self.dclass[g] = dcls
    return spec


def materialize(spec: dict[str, Any], models: list[dict[str, Any]] | None = None) -> list[Case]:
  """The GROUP cases of a spec (empty when its program has no kernel)."""
  if "model" in spec:
    m = (models or [])[spec["model"]]
    name, ast, rows, source, recipe = f"{m['model']}/{m['name']}", ast_from_json(m["ast"]), m["ast"], "model", None
  else:
    if (kn := kernel_of(spec["recipe"])) is None: return []
    name, ast = kn
    rows, source, recipe = ast_to_json(ast), "program", spec["recipe"]
  k0 = Kernel(ast, name, TARGETS[spec["target"]])
  inputs = {"seed": spec["input_seed"], "mode": spec["mode"]}
  out = []
  for j in range(GROUP):
    index = spec["group"] * GROUP + j
    rng = np.random.default_rng([spec["seed"], index])
    opts = random_walk(k0, int(rng.integers(0, spec["depth"] + 1)), spec["hints"][j], rng)
    out.append(Case(index, name, rows, spec["target"], [opt_to_json(o) for o in opts], inputs, source, recipe))
  return out


def random_walk(k: Kernel, depth: int, hint: str, rng: np.random.Generator) -> list:
  """Up to `depth` Opts, each drawn uniformly from those that apply (the hinted kind first, when one applies)."""
  for _ in range(depth):
    cands = candidate_opts(k)
    order = list(rng.permutation(len(cands)))
    order.sort(key=lambda i: cands[i].op.name != hint)
    for i in order:
      try:
        k = apply_opt(k, cands[i])
        break
      except InvalidOptError: continue
    else: break
  return k.applied
