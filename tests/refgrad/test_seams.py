"""The declared interfaces between scheduler, JIT and runtime (docs/architecture.md, "Seams"): the recording context,
compiling a kernel with given Opts, a device's graph executor and the driver's host_observed."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad import Tensor, schedule
from refgrad.device import Buffer, Device
from refgrad.lazy import buffer_of
from refgrad.opt import InvalidOptError, Opt, OptOps
from refgrad.runtime.driver import Driver


def _sum_kernel() -> schedule.ScheduleItem:
  t = Tensor(np.arange(64 * 16, dtype=np.float32).reshape(64, 16)).realize().sum(1)
  items, _ = schedule.create_schedule([t.uop], "CPU")
  (it,) = [i for i in items if i.ast is not None]
  return it


def test_recording_sees_every_launch_with_its_opts_and_nests() -> None:
  x = Tensor(np.ones((8, 8), np.float32)).realize()
  with schedule.recording() as outer:
    (x + 1).realize()
    with schedule.recording() as inner: (x * 3).sum().realize()
  assert len(inner) >= 1 and all(s.runner is not None and s.ast is not None and s.opts == s.runner.opts for s in inner)
  assert len(outer) == 1 + len(inner) and outer[1:] == inner   # an open outer block records what the inner one does
  assert all(isinstance(b, Buffer) for s in outer for b in s.bufs) and outer[0].bufs[0].size == 64
  with schedule.recording() as after: pass
  assert after == []


def test_recording_records_copies() -> None:
  x = Tensor(np.arange(4, dtype=np.int32), device="PYTHON").realize()
  with schedule.recording() as log: y = x.to("CPU").realize()
  copies = [s for s in log if s.runner is None]
  assert len(copies) == 1 and copies[0].ast is None and len(copies[0].bufs) == 2 and copies[0].device == "CPU"
  assert y.tolist() == [0, 1, 2, 3]


def test_get_runner_with_given_opts_ignores_the_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
  it = _sum_kernel()
  opts = (Opt(OptOps.UPCAST, 0, 4),)
  r = schedule.get_runner(it.ast, "CPU", it.name, opts=opts)
  assert r.opts == opts
  monkeypatch.setenv("NOOPT", "1")   # the knobs choose only when no Opts are given
  assert schedule.get_runner(it.ast, "CPU", it.name, opts=opts) is r
  assert schedule.get_runner(it.ast, "CPU", it.name).opts == ()
  assert schedule.get_runner(it.ast, "CPU", it.name, opts=()).opts == ()
  # the given Opts compute the same values as the unoptimized kernel
  outs = []
  for rr in (r, schedule.get_runner(it.ast, "CPU", it.name, opts=())):
    bufs = [Buffer("CPU", b.arg[2], b.dtype) if b not in buffer_of else buffer_of[b] for b in it.bufs]
    rr(*bufs)
    outs.append(bufs[0].numpy())
  assert np.array_equal(outs[0], outs[1]) and outs[0][0] == sum(range(16))


def test_get_runner_rejects_an_opt_that_does_not_apply() -> None:
  it = _sum_kernel()
  with pytest.raises(InvalidOptError):
    schedule.get_runner(it.ast, "CPU", it.name, opts=(Opt(OptOps.UPCAST, 7, 4),))


def test_devices_without_a_graph_executor_say_so() -> None:
  assert Device["CPU"].graph([], []) is None and Device["PYTHON"].graph([], []) is None


def test_host_observed_is_part_of_the_driver_interface() -> None:
  assert "host_observed" in vars(Driver)
  class Minimal(Driver):   # a driver that implements only the abstract methods keeps the default (a no-op)
    device = "X:0"
    def alloc(self, size, host_visible=False): raise NotImplementedError
    def free(self, m): pass
    def create_queue(self, engine, entries=1024): raise NotImplementedError
    def ring_doorbell(self, token): pass
    def read_timer(self): return 0
    def poll(self): return False
    def describe(self): return ""
    def recover(self, queue): pass
  assert Minimal().host_observed(0x1000) is None
