"""Worker processes. The reference worker draws cases and runs every oracle that needs no device under test (PYTHON,
the AST evaluator, the tensor-level oracles); it never builds a device under test. Each device under test runs in
workers of its own (`DeviceWorker`), which are sent the programs and PYTHON's results and answer with what the device
left in the buffers. So a backend that changes the floating-point state, crashes or hangs spoils only its own results:
the reference's bits come from a process no code under test was loaded in. Started with the forkserver method (spawn
where that is missing), so a worker never inherits the coordinator's threads or open state; each stays warm: the C
compiler cache, lowering caches and loaded libraries live as long as it does.

Reference worker messages (multiprocessing pipes): ("fuzz", [group specs]) and ("check", [case dicts]) answer
("ok", ([result dicts], [DeviceProg in wire form])) or ("error", traceback text), after any number of ("tick", None):
one more step done; ("materialize", [specs]) answers ("ok", [case dicts]); ("construct", [device]) answers ("ok", "")
when the device builds, else ("ok", the one line saying why not); ("probe", [case dict, regenerated]) answers ("ok",
[(DeviceProg, [Probe dicts])]): the case's probe programs with PYTHON's results (oracles/firstdiff.py).
Device worker: first ("ready", target | None) or ("broken", one line); then ("run", [DeviceProg]) answers ("compiled",
None) once the programs are built, ("done", (position, outcome)) per program in order (oracles/check.py
run_on_device; with coverage on, ("coverage", counts) just before the last), then ("ok", None); or ("error", traceback text)."""
from __future__ import annotations

import dataclasses
import importlib
import os
import signal
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from fuzz.stream import GROUP, materialize
from oracles import check, fpstate
from oracles.case import Case, Result
from oracles.check import prepare
from oracles.cliargs import device_problem
from oracles.firstdiff import reference_probes
from oracles.models import load_models
from oracles.procs import Proc
from refgrad import coverage

# the modules every worker needs: the forkserver imports them once, so each new worker starts warm
_PRELOAD = ("oracles.check", "fuzz.stream", "oracles.models")


def _start(config: dict[str, Any]) -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C reaches the whole process group: the coordinator stops the workers
  os.environ.update(config.get("env", {}))
  for m in config.get("preload", []): importlib.import_module(m)   # plugins (and tests' injected bugs) load in every worker


class _Counts:
  """A worker's coverage counts since the last take; the first take also names every rule and path (the denominators)."""
  named = False
  def take(self) -> dict[str, Any]:
    out = {**coverage.snapshot(), **({} if self.named else {"names": coverage.all_names()})}
    self.named = True
    return out


def worker_main(conn: Connection, config: dict[str, Any]) -> None:
  _start(config)
  # imported after the environment and the plugins are set up: refgrad reads its knobs at import
  models = load_models() if config.get("models", True) else []
  tick = lambda: conn.send(("tick", None))   # progress: the coordinator moves the job's deadline one case timeout on
  ast_eval = config.get("ast_eval", True)
  if config.get("coverage", True): coverage.enable()   # each fuzz job's last result carries its counts (fuzz/coverage.py)
  counts = _Counts()
  def answer(cases: list[Case], broken: list[Result]) -> None:
    results, progs = prepare(cases, ast_eval, tick)
    res = [*broken, *results]
    if res and coverage.rule_hits is not None:
      res[-1].coverage = counts.take()
    conn.send(("ok", ([dataclasses.asdict(r) for r in res], [p.wire() for p in progs])))
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
        answer(cases, broken)
      elif kind == "construct":   # ("ok", "") when the device builds here, else ("ok", the one line saying why not)
        conn.send(("ok", device_problem(payload[0]) or ""))
      elif kind == "materialize": conn.send(("ok", [c.to_json() for spec in payload for c in materialize(spec, models)]))
      elif kind == "probe":   # [case dict, regenerated]: its probe programs, run on PYTHON (oracles/firstdiff.py)
        conn.send(("ok", [(dp.wire(), [dataclasses.asdict(p) for p in probes]) for dp, probes in reference_probes(Case.from_json(payload[0]), payload[1])]))
      else: answer([Case.from_json(c) for c in payload], [])
    except Exception:
      conn.send(("error", traceback.format_exc()))


def device_main(conn: Connection, device: str, config: dict[str, Any]) -> None:
  _start(config)
  before = fpstate.probe()
  if (why := device_problem(device)) is not None:
    conn.send(("broken", why))
    return
  # a device whose construction changed the FP state: a finding with its first program (oracles/check.py fp_changes)
  if (fp := fpstate.changed(before, fpstate.probe())) is not None: check.fp_changes[device] = f"building the device: {fp}"
  conn.send(("ready", check.device_target(device)))
  if config.get("coverage", True): coverage.enable()   # what this device's compiles covered (C helpers): sent with each batch
  counts = _Counts()
  while True:
    try: msg = conn.recv()
    except EOFError: return
    if msg is None: return
    try:
      left = len(msg[1])
      def done(i: int, o: dict[str, Any]) -> None:
        nonlocal left
        left -= 1
        if left == 0 and coverage.rule_hits is not None:   # before the last outcome: the run may end as soon as that arrives
          conn.send(("coverage", counts.take()))
        conn.send(("done", (i, o)))
      check.run_on_device(device, msg[1], done, restore_fp=False, built=lambda: conn.send(("compiled", None)))
      conn.send(("ok", None))
    except Exception:
      conn.send(("error", traceback.format_exc()))


class Worker(Proc):
  """A reference worker process and its pipe."""
  def __init__(self, config: dict[str, Any]):
    super().__init__(worker_main, (config,), preload=_PRELOAD)
    self.job: Any = None
    self.started = 0.0
    self.deadline = 0.0

  def send(self, kind: str, payload: list[Any], timeout: float) -> None:
    self.job, self.started, self.deadline = (kind, payload), time.monotonic(), time.monotonic() + timeout
    self.conn.send((kind, payload))

  def exitcode_text(self) -> str:
    return self.exit_text() or "still running"


class DeviceWorker(Proc):
  """A worker process for one device under test, and the batch of programs it is running."""
  def __init__(self, device: str, config: dict[str, Any]):
    super().__init__(device_main, (device, config), preload=_PRELOAD)
    self.device = device
    self.ready = False
    self.target: str | None = None
    self.batch: list[Any] = []     # what was sent: the coordinator's (job, position, program) triples
    self.answered: set[int] = set()   # positions in the batch answered so far
    self.compiled = False
    self.deadline = time.monotonic()

  def send(self, batch: list[Any], timeout: float) -> None:
    self.batch, self.answered, self.compiled, self.deadline = batch, set(), False, time.monotonic() + timeout
    self.conn.send(("run", [p for _, _, p in batch]))

  def exitcode_text(self) -> str:
    return self.exit_text() or "still running"
