"""Worker processes: each checks batches of cases in isolation (a segfault, abort or hang there is a finding, not the
end of the run). Started with the forkserver method (spawn where that is missing), so a worker never inherits the
coordinator's threads or open state; it stays warm: the C compiler cache, lowering caches and loaded libraries live
as long as it does.

Messages (multiprocessing pipes, plain dicts/lists): ("fuzz", [group specs]) and ("check", [case dicts]) answer
("ok", [result dicts]) or ("error", traceback text), after any number of ("tick", None): one more step done."""
from __future__ import annotations

import dataclasses
import importlib
import os
import signal
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from oracles.procs import Proc
from refgrad import coverage


def worker_main(conn: Connection, config: dict[str, Any]) -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C reaches the whole process group: the coordinator stops the workers
  os.environ.update(config.get("env", {}))
  for m in config.get("preload", []): importlib.import_module(m)
  from fuzz.stream import GROUP, materialize
  from oracles.case import Case, Result
  from oracles.check import check_cases
  from oracles.cliargs import device_problem
  from oracles.models import load_models
  models = load_models() if config.get("models", True) else []
  tick = lambda: conn.send(("tick", None))   # progress: the coordinator moves the job's deadline one case timeout on
  devices, ast_eval = config["devices"], config.get("ast_eval", True)
  if config.get("coverage", True): coverage.enable()   # each fuzz job's last result carries its counts (fuzz/coverage.py)
  names_sent = False
  while True:
    try: msg = conn.recv()
    except EOFError: return
    if msg is None: return
    kind, payload = msg
    try:
      if kind == "fuzz":
        coverage.reset()
        cases, broken = [], []
        for spec in payload:
          tick()
          try: cases += materialize(spec, models)
          except Exception as e:   # the program could not be built or scheduled: reported, not the end of the run
            broken.append(Result(spec["group"] * GROUP, "invalid", detail=f"group {spec['group']} could not be built: {type(e).__name__}: {e}"))
        res = [*broken, *check_cases(cases, devices, ast_eval, tick)]
        if res and coverage.rule_hits is not None:
          res[-1].coverage = {**coverage.snapshot(), **({} if names_sent else {"names": coverage.all_names()})}
          names_sent = True
        conn.send(("ok", [dataclasses.asdict(r) for r in res]))
        continue
      elif kind == "construct":   # ("ok", "") when the device builds here, else ("ok", the one line saying why not)
        conn.send(("ok", device_problem(payload[0]) or ""))
        continue
      elif kind == "materialize":
        conn.send(("ok", [c.to_json() for spec in payload for c in materialize(spec, models)]))
        continue
      else: cases = [Case.from_json(c) for c in payload]
      res = check_cases(cases, devices, ast_eval, tick)
      conn.send(("ok", [dataclasses.asdict(r) for r in res]))
    except Exception:
      conn.send(("error", traceback.format_exc()))


class Worker(Proc):
  """One worker process and its pipe."""
  def __init__(self, config: dict[str, Any]):
    super().__init__(worker_main, (config,), preload=("oracles.check", "fuzz.stream", "oracles.models"))  # warm starts
    self.job: Any = None
    self.started = 0.0
    self.deadline = 0.0

  def send(self, kind: str, payload: list[Any], timeout: float) -> None:
    self.job, self.started, self.deadline = (kind, payload), time.monotonic(), time.monotonic() + timeout
    self.conn.send((kind, payload))

  def exitcode_text(self) -> str:
    return self.exit_text() or "still running"
