"""TinyJit on the default device of each frontend variant (CPU, PYTHON, PYTHON emulating CUDA/AMD, the mock NV GPU): a
training step with momentum SGD and a batch-norm layer replays bit for bit like the eager step, without scheduling."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from refgrad import Tensor, TinyJit, nn
from refgrad import schedule as sched
from refgrad.nn.optim import SGD
from refgrad.nn.state import get_parameters

sched_calls = [0]   # create_schedule calls (counted by the test)


def _train(jit: bool, steps: int, schedules: list[int] | None = None) -> tuple[list[bytes], list[bytes]]:
  Tensor.manual_seed(3)
  l1, bn, l2 = nn.Linear(12, 8), nn.BatchNorm(8), nn.Linear(8, 3)
  opt = SGD(get_parameters([l1, bn, l2]), lr=0.05, momentum=0.9, nesterov=True)
  def step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    with Tensor.train():
      opt.zero_grad()
      out = l2(bn(l1(x)).relu())
      loss = ((out - y) ** 2).mean()
      loss.backward()
      Tensor.realize_all(loss, out, *opt.schedule_step())
    return loss, out
  f = TinyJit(step) if jit else step
  rng = np.random.default_rng(5)
  losses = []
  for _ in range(steps):
    before = sched_calls[0]
    loss, out = f(Tensor(rng.standard_normal((6, 12)).astype(np.float32)), Tensor(rng.standard_normal((6, 3)).astype(np.float32)))
    if schedules is not None: schedules.append(sched_calls[0] - before)
    losses.append(loss.numpy().tobytes() + out.numpy().tobytes())
  return losses, [p.numpy().tobytes() for p in get_parameters([l1, bn, l2])]


def test_training_step_replays_bit_for_bit(monkeypatch: pytest.MonkeyPatch):
  real = sched.create_schedule
  def counted(*a: Any, **k: Any) -> Any:
    sched_calls[0] += 1
    return real(*a, **k)
  monkeypatch.setattr(sched, "create_schedule", counted)
  want = _train(False, 4)
  schedules: list[int] = []
  got = _train(True, 4, schedules)
  assert got == want
  assert schedules[0] > 0 and schedules[1] > 0 and schedules[2:] == [0, 0]   # the first call and the capture schedule, replays do not
