"""The lifecycle of one worker process and its pipe, shared by the fuzzer's workers (fuzz/worker.py) and the conformance
suite's device workers (conformance/isolate.py): started with the forkserver method (spawn where that is missing), so a
worker never inherits the parent's threads or open state; stopped politely, killed when it must be, and its end told in
words for a report. A worker ignores Ctrl-C from birth (oracles/nointerrupt.py): the parent stops it."""
from __future__ import annotations

import multiprocessing as mp
import signal
from collections.abc import Callable
from typing import Any

NO_INTERRUPT = "oracles.nointerrupt"


class Proc:
  """A daemon process running target(conn, *args), and the parent's end of its pipe (`conn`).
  `preload`: modules the forkserver imports once, so each new worker starts warm (ignored under spawn). The forkserver
  is one per process and takes its preloads when it starts (the first Proc): nointerrupt always comes first."""
  def __init__(self, target: Callable[..., None], args: tuple[Any, ...], preload: tuple[str, ...] = ()):
    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    if ctx.get_start_method() == "forkserver": ctx.set_forkserver_preload([NO_INTERRUPT, *preload])
    self.conn, child = ctx.Pipe()
    self.proc = ctx.Process(target=target, args=(child, *args), daemon=True)
    self.proc.start()
    child.close()

  def kill(self) -> None:
    """End it now (a crash or a timeout) and close the pipe."""
    if self.proc.is_alive(): self.proc.kill()
    self.proc.join(5)
    self.conn.close()

  def stop(self) -> None:
    """Ask it to return (a None message), kill it if it has not within 2 s, and close the pipe."""
    try: self.conn.send(None)
    except (OSError, BrokenPipeError): pass
    self.proc.join(2)
    if self.proc.is_alive(): self.proc.kill()
    self.proc.join(2)
    self.conn.close()

  def exit_text(self) -> str | None:
    """How it ended ("killed by signal SIGSEGV", "exited with code 3"), None while it is still running."""
    c = self.proc.exitcode
    if c is None: return None
    if c < 0:
      try: return f"killed by signal {signal.Signals(-c).name}"
      except ValueError: return f"killed by signal {-c}"
    return f"exited with code {c}"


__all__ = ["Proc"]
