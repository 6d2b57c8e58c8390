"""Coverage counters for the fuzzer's feedback: which PatternMatcher rules fired, which C-renderer helpers were emitted
and which PYTHON (SIMT) execution paths ran. Off by default: every hook is one module-global `is None` check, so a
normal run pays nothing measurable; `python -m fuzz` workers call `enable()` and read `snapshot()` after each job.

Names are stable across processes (a rule is its function's module, first line and qualified name), so counts from
different workers add up."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

rule_hits: Counter[Callable[..., Any]] | None = None   # rule function -> times it returned a replacement
path_hits: Counter[str] | None = None                  # "family:name" -> times that helper or path was taken
RULES: dict[Callable[..., Any], None] = {}             # every rule function a PatternMatcher was built with, in order
PATHS: dict[str, None] = {}                            # every helper/path name declared by the code that counts it


def rule_name(fn: Callable[..., Any]) -> str:
  code = fn.__code__
  return f"{fn.__module__}:{code.co_firstlineno}:{fn.__qualname__}"

def register_rules(fns: Iterable[Callable[..., Any]]) -> None:
  for fn in fns: RULES.setdefault(fn, None)

def declare_paths(names: Iterable[str]) -> None:
  """The paths a module may count, so the total is known before any of them ran."""
  for n in names: PATHS.setdefault(n, None)

def path(name: str) -> None:
  if path_hits is not None: path_hits[name] += 1

def enable() -> None:
  global rule_hits, path_hits
  rule_hits, path_hits = Counter(), Counter()

def disable() -> None:
  global rule_hits, path_hits
  rule_hits = path_hits = None

def reset() -> None:
  if rule_hits is not None and path_hits is not None:
    rule_hits.clear()
    path_hits.clear()

def snapshot(clear: bool = True) -> dict[str, Any]:
  """{"rules": {name: hits}, "paths": {name: hits}, "rule_total": n, "path_total": m}: what was counted since the last
  reset (empty when disabled), plus the totals known in this process."""
  out = {"rules": {rule_name(f): n for f, n in (rule_hits or {}).items()}, "paths": dict(path_hits or {}),
         "rule_total": len({rule_name(f) for f in RULES}), "path_total": len(PATHS)}
  if clear: reset()
  return out

def all_names() -> dict[str, list[str]]:
  """Every rule and path name known in this process (the denominators of the coverage report)."""
  return {"rules": sorted({rule_name(f) for f in RULES}), "paths": sorted(PATHS)}
