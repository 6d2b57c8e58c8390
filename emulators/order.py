"""Which queue runs next, and the two knobs of the mock GPUs.

MOCKGPU_ORDER: unset, "" or "rr" = round-robin over the queues with work; "seed:N" (N an integer >= 0) = the queues
are tried in an order shuffled by a generator seeded with N (and the device index), so one seed gives one
interleaving and other seeds others; the same generator orders the kernels of a queue's launches in flight
(emulators/inflight.py). MOCKGPU_HAZARDS: "1" (default) checks hazards, "0" turns the checker off.
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from refgrad import knobs


def order_knob(env: str | None = None) -> int | None:
  """None for round-robin, else the seed (from $MOCKGPU_ORDER, or `env`); a bad value is a KnobError naming the knob."""
  return knobs.get("MOCKGPU_ORDER") if env is None else knobs.parse("MOCKGPU_ORDER", env)

def hazards_knob(env: str | None = None) -> bool:
  """Whether the hazard checker runs (from $MOCKGPU_HAZARDS, or `env`)."""
  return knobs.get("MOCKGPU_HAZARDS") if env is None else knobs.parse("MOCKGPU_HAZARDS", env)


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
