"""Hypothesis profiles for the whole suite. The default run is derandomized: every property test draws the same
examples on every run and machine (seeded from the test itself, no example database), so CI is not a coin flip on
a bug that only some seeds reach. `-m slow` runs, or REFGRAD_HYPOTHESIS=random, switch to the random profile to
explore new examples; a failure there is reproduced with the seed hypothesis prints and kept as an @example."""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("derandomized", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False, print_blob=True)
PROFILES = ("derandomized", "random")


def pytest_configure(config: pytest.Config) -> None:
  name = os.environ.get("REFGRAD_HYPOTHESIS") or ("random" if _selects_slow(config.getoption("markexpr", "") or "") else "derandomized")
  if name not in PROFILES: raise pytest.UsageError(f"REFGRAD_HYPOTHESIS={name!r}: choose one of {', '.join(PROFILES)}")
  settings.load_profile(name)

def _selects_slow(markexpr: str) -> bool:
  """Whether `-m EXPR` asks for the slow tests (`slow`, `slow or not slow`; not the default `not slow`)."""
  return "slow" in markexpr.replace("not slow", "")
