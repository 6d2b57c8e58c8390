"""Each device under test runs in worker processes of its own; the expected values never come from a process that loaded code under test.

The parent process builds every case's inputs and expected outputs of the alu-style groups (pure numpy: refgrad's
reference semantics) and never loads a backend. The corpus and kernels groups need PYTHON's runs of the kernels: those
come from reference workers (`REFERENCE`), which build no device under test and load no --preload plugin; they run the
shared oracles' reference part (oracles/check.py prepare) once per case group, for all devices. A device worker builds
one device, runs the kernels or programs it is sent and returns the raw output; the parent compares bits (alu) or
judges the device's outcomes against the reference's programs (oracles/check.py merge). So a backend that switches the
process to flush-to-zero, crashes or hangs can only spoil its own results: a crash is a failed case naming device, op
and dtype (and the worker is replaced), a case that takes longer than the timeout is killed the same way, and the
floating-point control state (oracles/fpstate.py) is read before and after every backend call: a change is a finding
of its own (the "fp-state" row), after which the worker restores the default state so the device's later cases are
judged as they would run in a clean process. PYTHON as a device under test is judged by the reference's own results.

Messages (multiprocessing pipes): ("alu", (case index, input columns[, [(case index, lanes) of the cases it runs next]]))
-> ("ok", (output, fp change | None)) (a compiler that batches, nvcc, compiles the cases ahead in the same call);
to a reference worker ("prepare", [case dicts]) -> ("ok", (([result dicts], [DeviceProg in wire form]), fp change | None));
to a device worker ("programs", [DeviceProg in wire form]) -> ("ok", ([outcome dicts of run_on_device], fp change | None)).
The first message a worker sends is ("ready", fp change | None) or ("broken", one line): the device could not be built."""
from __future__ import annotations

import dataclasses
import importlib
import os
import signal
import time
import traceback
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any

from conformance.suite import all_cases, run_on_device
from oracles import fpstate
from oracles.case import Case
from oracles.case import Result as OracleResult
from oracles.check import merge, prepare
from oracles.check import run_on_device as run_programs
from oracles.procs import Proc
from refgrad import interrupts
from refgrad.device import Device

READY_TIMEOUT = 120.0    # seconds a worker may take to start and build its device (imports, a first compiler check)
REFERENCE = "reference"  # the pool's name for the reference workers: they build no device and load no plugin


def _worker(conn: Connection, device: str, env: dict[str, str], preload: tuple[str, ...] = ()) -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C goes to the parent, which stops the workers
  os.environ.update(env)
  before = fpstate.probe()
  try:
    if device != REFERENCE:
      for m in preload: importlib.import_module(m)   # --preload: plugins (or test injections) load in device workers only
      Device[device]
  except Exception as e:
    first = (str(e).splitlines() or [""])[0]
    conn.send(("broken", f"device {device} cannot be constructed ({type(e).__name__}: {first})"))
    return
  conn.send(("ready", _settle(before)))
  cases = all_cases()
  while True:
    try: msg = conn.recv()
    except EOFError: return
    if msg is None: return
    kind, payload = msg
    try:
      before = fpstate.probe()
      if kind == "alu":
        index, cols, *ahead = payload   # ahead (optional): [(case index, lanes)] this device runs next, compiled in one batch
        out: Any = run_on_device(cases[index], device, cols, [(cases[j], n) for j, n in (ahead[0] if ahead else ())])
      elif kind == "prepare":   # the reference's part, for every device at once
        results, progs = prepare([Case.from_json(c) for c in payload])
        out = ([dataclasses.asdict(r) for r in results], [p.wire() for p in progs])
      else:   # "programs": this device's runs of the reference's programs
        outcomes: list[dict[str, Any]] = [{}] * len(payload)
        run_programs(device, payload, outcomes.__setitem__, restore_fp=True)
        out = outcomes
      conn.send(("ok", (out, _settle(before))))
    except Exception as e:
      conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))

def oracle_results(prepared: tuple[list[dict[str, Any]], list[Any]], device: str, outcomes: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
  """A device's oracle results (dicts of oracles.case.Result, one per case): the reference's answer to "prepare" with
  the device's outcomes of its programs judged in (None: PYTHON, whose results are the reference's own)."""
  results = [OracleResult(**r) for r in prepared[0]]
  if outcomes is not None: results = merge(results, prepared[1], {device: outcomes}, [device])
  return [dataclasses.asdict(r) for r in results]

def _settle(before: str) -> str | None:
  """The change of floating-point state since `before` (None: none), the default state restored after one."""
  if (why := fpstate.changed(before, fpstate.probe())) is None: return None
  return why + ("" if fpstate.restore() else "; it could not be restored (later cases of this device ran in that state)")


class DeviceWorker(Proc):
  """One worker process for one device, and the job it is running."""
  def __init__(self, device: str, env: dict[str, str], preload: tuple[str, ...] = ()):
    super().__init__(_worker, (device, env, preload))
    self.device, self.env = device, env
    self.job: Any = None            # what the parent needs to judge the answer
    self.deadline = time.monotonic() + READY_TIMEOUT
    self.ready = False

  def send(self, kind: str, payload: Any, job: Any, timeout: float) -> None:
    self.job, self.deadline = job, time.monotonic() + timeout
    self.conn.send((kind, payload))

  def death(self) -> str:
    """How the process ended, for a crash report."""
    self.proc.join(5)
    if (text := self.exit_text()) is None: return "it stopped answering"
    return f"the worker was {text}"


def wait_any(workers: list[DeviceWorker], timeout: float) -> list[Any]:
  return wait([x for w in workers for x in (w.conn, w.proc.sentinel)], timeout=timeout)


class Pool:
  """Workers per device; jobs are (device, kind, payload, info, timeout). `run` sends them and calls
  on_result(device, info, outcome, detail) with outcome "ok" (detail: the answer), "error" (a Python exception in the
  worker, its text), "crash" or "timeout" (why); a worker that crashed or timed out is replaced."""
  def __init__(self, devices: list[str], per_device: int, env: dict[str, str], preload: tuple[str, ...] = (), total: int = 0, reference: bool = False):
    self.env, self.per_device, self.preload = env, per_device, preload
    self.total = max(total, per_device * len(devices))   # workers at once: a device that is done hands its slot on
    self.workers: dict[str, list[DeviceWorker]] = {d: [] for d in [*devices, *([REFERENCE] if reference else [])]}
    self.gone: dict[str, str] = {}           # device -> why it cannot be built any more (jobs added for it fail with this)
    self.queues: dict[str, deque[Any]] = {}
    self.fp_notes: dict[str, str] = {}       # device -> the first FP-state change it caused
    self.interrupted = False

  def start(self) -> dict[str, str]:
    """Start one worker per device and wait until each has built its device: {device: why it cannot be built}."""
    broken: dict[str, str] = {}
    first = {d: DeviceWorker(d, self.env, self.preload) for d in self.workers}
    for d, w in first.items():
      if (why := self._await_ready(w)) is not None:
        broken[d] = why
        w.kill()
      else: self.workers[d].append(w)
    return broken

  def _await_ready(self, w: DeviceWorker) -> str | None:
    if not wait([w.conn, w.proc.sentinel], timeout=READY_TIMEOUT):
      return f"device {w.device} cannot be constructed (no answer within {READY_TIMEOUT:g} s)"
    try: kind, payload = w.conn.recv()
    except (EOFError, OSError): return f"device {w.device} cannot be constructed ({w.death()} while building it)"
    if kind == "broken": return payload
    w.ready = True
    if payload is not None: self.fp_notes.setdefault(w.device, f"building the device: {payload}")
    return None

  def add(self, job: tuple[str, str, Any, Any, float], on_result: Any) -> None:
    """A job for a running `run` (on_result may add the jobs that follow a reference worker's answer)."""
    if not self.workers.get(job[0]): on_result(job[0], job[3], "crash", self.gone.get(job[0], f"device {job[0]} has no worker"))
    else: self.queues.setdefault(job[0], deque()).append(job)

  def _reference_busy(self) -> bool:
    """Whether the reference workers still have jobs: the devices wait for theirs (their idle workers are kept)."""
    return bool(self.queues.get(REFERENCE)) or any(w.job is not None for w in self.workers.get(REFERENCE, ()))

  def run(self, jobs: list[tuple[str, str, Any, Any, float]], on_result: Any) -> None:
    self.queues = queues = {d: deque(j for j in jobs if j[0] == d) for d in self.workers if self.workers[d]}
    for d, ws in self.workers.items():
      while ws and len(ws) < min(self.per_device, len(queues.get(d, ()))): ws.append(DeviceWorker(d, self.env, self.preload))
    try:
      with interrupts.deferred() as ctrl_c:   # (taken between rounds: never lost in a callback halfway through one)
        while not ctrl_c:
          live = [w for ws in self.workers.values() for w in ws]
          for w in live:
            if w.ready and w.job is None and queues[w.device]:
              _, kind, payload, info, timeout = queues[w.device].popleft()
              w.send(kind, payload, info, timeout)
          self._rebalance(live, queues)
          live = [w for ws in self.workers.values() for w in ws]
          busy = [w for w in live if w.job is not None or not w.ready]
          if not busy: break
          ready = wait_any(busy, 0.25)
          for w in busy: self._poll(w, ready, on_result)
      if ctrl_c: raise KeyboardInterrupt
    except KeyboardInterrupt:
      self.interrupted = True

  def _rebalance(self, live: list[DeviceWorker], queues: dict[str, Any]) -> None:
    """A device with no cases left stops its idle workers; their slots start workers for the device with the most cases
    waiting (a slow compiler such as nvcc then gets the CPUs the fast devices are done with)."""
    hold = self._reference_busy()
    for w in live:
      if w.ready and w.job is None and not queues[w.device] and not (hold and w.device != REFERENCE and len(self.workers[w.device]) == 1):
        w.stop()
        self.workers[w.device].remove(w)
    n = sum(len(ws) for ws in self.workers.values())
    while n < self.total:
      d = max(queues, key=lambda d: len(queues[d]) - len(self.workers[d]))
      if not self.workers[d] or len(queues[d]) <= len(self.workers[d]): return
      self.workers[d].append(DeviceWorker(d, self.env, self.preload))
      n += 1

  def _poll(self, w: DeviceWorker, ready: list[Any], on_result: Any) -> None:
    if w.conn in ready:
      try: kind, payload = w.conn.recv()
      except (EOFError, OSError): kind, payload = "died", None
      if kind == "ready":
        w.ready = True
        if payload is not None: self.fp_notes.setdefault(w.device, f"building the device: {payload}")
        return
      if kind == "broken":   # it was built before: a device that builds only sometimes fails the cases left
        self._give_up(w, payload, on_result)
        return
      if kind in ("ok", "error"):
        job, w.job = w.job, None
        if kind == "ok":
          out, fp = payload
          if fp is not None: self.fp_notes.setdefault(w.device, f"{job_name(job)}: {fp}")
          on_result(w.device, job, "ok", out)
        else: on_result(w.device, job, "error", payload)
        return
    if w.conn in ready or w.proc.sentinel in ready:
      if not w.ready: return self._give_up(w, f"device {w.device}: a new worker died building it ({w.death()})", on_result)
      if w.job is not None: on_result(w.device, w.job, "crash", w.death())
      self._replace(w)
    elif time.monotonic() > w.deadline:
      if w.job is not None: on_result(w.device, w.job, "timeout", "")
      self._replace(w)

  def _give_up(self, w: DeviceWorker, why: str, on_result: Any) -> None:
    """The device cannot be built again: the cases left for it fail with why."""
    w.kill()
    self.workers[w.device].remove(w)
    if not self.workers[w.device]:
      self.gone[w.device] = why
      while self.queues[w.device]: on_result(w.device, self.queues[w.device].popleft()[3], "crash", why)

  def _replace(self, w: DeviceWorker) -> None:
    w.kill()
    ws = self.workers[w.device]
    ws[ws.index(w)] = DeviceWorker(w.device, self.env, self.preload)

  def close(self) -> None:
    for ws in self.workers.values():
      for w in ws: w.kill() if self.interrupted else w.stop()


def job_name(job: Any) -> str: return str(job[0]) if isinstance(job, tuple) else str(job)   # jobs' info is (label, ...)
