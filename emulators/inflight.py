"""The launches of one queue that have started and not finished (README "Ordering inside a queue").

A launch starts in order and stays in flight, possibly overlapping the next launches of its queue, until an ordering
command of that queue retires it (which commands order is each architecture's table: emulators/nv/host.py,
emulators/amd/pm4.py). The hazard checker sees every in-flight launch as its own participant (`Hazards.launch`).

Execution: under round-robin order a launch's kernel runs when it starts (in flight for the checker only). Under
MOCKGPU_ORDER=seed:N its kernel is deferred and the kernels in flight run in an order shuffled by the seed when
they complete: at an ordering command, at a release of the launch itself, or when the queue finishes the submission
(GP entry / indirect buffer) or runs dry. So a dependency with no ordering command between the launches can see a
stale input under some seeds, as on hardware, and the result changes, not only the report.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


class InFlight:
  def __init__(self, dev: Any, pid: int):
    self.dev, self.pid = dev, pid
    self.pending: list[Callable[[], None]] = []   # kernels started but not run yet (seeded orders only)

  def start(self) -> int:
    """A launch starts: its number within the queue (for the hazard checker)."""
    return self.dev.hz.launch(self.pid)

  def run(self, body: Callable[[], None], now: bool = False) -> None:
    """Run the launch's kernel now (round-robin, or `now`: its own release follows) or when the launches complete."""
    if now or self.dev.order.rng is None: body()
    else: self.pending.append(body)

  def complete(self) -> None:
    """The kernels in flight run, in the seeded order; the hazard checker still sees them unordered."""
    if not self.pending: return
    todo, self.pending = self.pending, []
    if len(todo) > 1: self.dev.order.rng.shuffle(todo)
    for body in todo: body()

  def retire(self) -> None:
    """An ordering command: everything started before it finishes first."""
    self.complete()
    self.dev.hz.retire(self.pid)

  def drop(self) -> None:
    """The queue was stopped (a fault, then recover): kernels not run yet are dropped with the rest of its work."""
    self.pending.clear()
    self.dev.hz.retire(self.pid)
