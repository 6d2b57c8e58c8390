"""Ctrl-C at safe points: a loop that must not be interrupted halfway through a step (a GPU step on the host's thread,
a conformance run's bookkeeping) takes SIGINT as a mark and raises KeyboardInterrupt itself between steps. A
KeyboardInterrupt raised anywhere else can land in a weakref or GC callback, where Python prints it as "Exception
ignored" and drops it."""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def deferred() -> Iterator[list[int]]:
  """On the main thread, while Python's default SIGINT handler is installed, SIGINT only appends to the returned list
  (the caller checks it between steps and raises KeyboardInterrupt); elsewhere nothing changes."""
  pending: list[int] = []
  if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
    yield pending
    return
  signal.signal(signal.SIGINT, lambda *_: pending.append(1))
  try: yield pending
  finally: signal.signal(signal.SIGINT, signal.default_int_handler)
