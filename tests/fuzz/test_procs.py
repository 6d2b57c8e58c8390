"""oracles/procs.py: a worker ignores Ctrl-C from its first instruction (the forkserver preloads oracles/nointerrupt.py),
so a Ctrl-C while a worker is being started cannot print a KeyboardInterrupt traceback from multiprocessing's start-up."""
from __future__ import annotations

import signal
from multiprocessing.connection import Connection

from oracles.procs import Proc


def _first_thing(conn: Connection) -> None:
  conn.send(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)   # before the worker does anything of its own


def test_a_worker_starts_with_ctrl_c_ignored():
  for preload in ((), ("json",)):
    p = Proc(_first_thing, (), preload=preload)
    try:
      assert p.conn.poll(60), "the worker did not answer within 60 s"
      assert p.conn.recv() is True
    finally: p.stop()
  assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN   # the parent's own Ctrl-C is untouched
