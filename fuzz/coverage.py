"""Coverage feedback, coordinator side: what the workers' counters (refgrad/coverage.py) saw, summed over the run, and
the steering it gives the case stream.

Each fuzz job comes back with the rules that fired, the C-renderer helpers emitted and the PYTHON (SIMT) paths taken
while its groups were built and checked. A job whose counts include rules or paths seen rarely so far is novel; the
novelty is credited to the generator's choices its groups made (the (step, dtype) cells of their random programs and
the (target, Opt kind, dtype) cells they hinted), and the stream weights those choices up, the way coverage-guided
fuzzers keep inputs that reached new code. The counts depend on timing (which worker ran what, with which caches
warm), so steering by them is only on where the run's cases need not be a function of the seed alone: a --seconds run
that is not sharded. A --cases run or a shard draws the seed-determined stream (steered by the coordinator's own counts).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

EMA = 0.3           # weight of a job's novelty in its cells' running score
MAX_BOOST = 4.0     # the most a cell's weight is multiplied by


class Coverage:
  def __init__(self) -> None:
    self.rules: Counter[str] = Counter()        # rule name -> times it fired, all workers
    self.paths: Counter[str] = Counter()        # "c:helper" / "simt:path" -> times taken
    self.rule_names: set[str] = set()           # every rule a worker knows (the denominator)
    self.path_names: set[str] = set()
    self.cells: Counter[tuple[str, str, str]] = Counter()   # (target, Opt kind, dtype) reached by a checked case
    self.score: dict[Any, float] = {}           # generator choice -> running novelty of the jobs that made it
    self._total = 0.0                           # sum of the scores (boost is asked hundreds of times per group drawn)

  def add(self, snap: dict[str, Any], choices: list[Any]) -> float:
    """Count a job's snapshot; credit its novelty to the choices its groups made. Returns the novelty."""
    novelty = sum(1.0 / (1 + self.rules[r]) for r in snap.get("rules", {})) + sum(1.0 / (1 + self.paths[p]) for p in snap.get("paths", {}))
    self.rules.update(snap.get("rules", {}))
    self.paths.update(snap.get("paths", {}))
    names = snap.get("names") or {}
    self.rule_names.update(names.get("rules", ()), snap.get("rules", {}))
    self.path_names.update(names.get("paths", ()), snap.get("paths", {}))
    for c in set(choices):
      old = self.score.get(c)
      self.score[c] = new = novelty if old is None else (1 - EMA) * old + EMA * novelty
      self._total += new - (old or 0.0)
    return novelty

  def boost(self, choice: Any) -> float:
    """How much to weight a choice: 1 for an average (or unseen) one, up to MAX_BOOST for the most novel."""
    if choice not in self.score: return 1.0
    mean = self._total / len(self.score)
    return 1.0 if mean <= 0 else min(MAX_BOOST, max(1.0, self.score[choice] / mean))

  def to_json(self) -> dict[str, Any]:
    fired = set(self.rules)
    return {"rules": {"fired": len(fired), "total": len(self.rule_names), "hits": dict(sorted(self.rules.items())),
                      "never": sorted(self.rule_names - fired)},
            "paths": {"taken": len(self.paths), "total": len(self.path_names), "hits": dict(sorted(self.paths.items())),
                      "never": sorted(self.path_names - set(self.paths))},
            "cells": {f"{t}/{k}/{d}": n for (t, k, d), n in sorted(self.cells.items())}}

  def line(self, cells_total: int) -> str:
    """The summary's coverage line."""
    c = sum(n.startswith("c:") for n in self.path_names)
    s = sum(n.startswith("simt:") for n in self.path_names)
    return (f"rule coverage: {len(self.rules)} of {len(self.rule_names)} rewrite rules fired; C helpers {sum(p.startswith('c:') for p in self.paths)} "
            f"of {c}; SIMT paths {sum(p.startswith('simt:') for p in self.paths)} of {s}; Opt x target x dtype cells reached "
            f"{len(self.cells)} of {cells_total}")
