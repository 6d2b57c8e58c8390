"""Which queue runs next, and the two knobs of the mock GPUs.

MOCKGPU_ORDER: unset, "" or "rr" = round-robin over the queues with work; "seed:N" (N an integer >= 0) = the queues
are tried in an order shuffled by a generator seeded with N (and the device index), so one seed gives one
interleaving and other seeds others. MOCKGPU_HAZARDS: "1" (default) checks hazards, "0" turns the checker off.
"""
from __future__ import annotations

import os
import random
from collections.abc import Sequence


def order_knob(env: str | None = None) -> int | None:
  """None for round-robin, else the seed; anything else is a ValueError naming MOCKGPU_ORDER."""
  v = (os.environ.get("MOCKGPU_ORDER", "") if env is None else env).strip()
  if v in ("", "rr"): return None
  head, _, n = v.partition(":")
  if head == "seed" and n.isdigit(): return int(n)
  raise ValueError(f"MOCKGPU_ORDER={v!r} is not understood: use 'seed:N' (N an integer >= 0) for a seeded interleaving of the "
                   "mock GPU's queues, or leave it unset (or 'rr') for round-robin")

def hazards_knob(env: str | None = None) -> bool:
  v = (os.environ.get("MOCKGPU_HAZARDS", "1") if env is None else env).strip()
  if v in ("1", ""): return True
  if v == "0": return False
  raise ValueError(f"MOCKGPU_HAZARDS={v!r} is not understood: '1' (the default) checks the mock GPU for memory hazards between queues, "
                   "'0' turns the checker off")


class Order:
  """The order in which the queues are offered a step on each poll."""
  def __init__(self, seed: int | None, index: int):
    self.seed = seed
    self.rng = random.Random(seed * 1000003 + index) if seed is not None else None
    self.next = 0

  def arrange(self, n: int) -> Sequence[int]:
    if self.rng is not None:
      order = list(range(n))
      self.rng.shuffle(order)
      return order
    s = self.next % n if n else 0
    return [*range(s, n), *range(s)]

  def ran(self, i: int) -> None:
    """Queue i made progress: round-robin starts after it next time."""
    self.next = i + 1
