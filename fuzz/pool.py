"""The devices under test, one worker process each (fuzz/worker.py DeviceWorker), fed from a queue of programs per
device. A worker gets every program queued for it at once (up to MAX_BATCH: a C device compiles them in one compiler
call) and answers each in order, so when it dies or stops answering the program it was running is known: that program
gets a "crash" or "timeout" outcome on that device alone, the worker is replaced, and the programs after it are run
again in the new one. A death while the batch was still being compiled blames no one yet: the batch's programs are
then run one per batch. Every (job, position, device) submitted gets exactly one outcome."""
from __future__ import annotations

import time
from collections import deque
from multiprocessing.connection import wait
from typing import Any

from fuzz.worker import DeviceWorker

MAX_BATCH = 48          # programs a device worker is sent at once (one cc call compiles them: bounded, as it must finish within two case timeouts)
READY_TIMEOUT = 120.0   # seconds a new worker may take to start and build its device
START_MORE = 16         # programs waiting for a device whose workers are all busy: another worker starts (up to per_device)


class DevicePool:
  def __init__(self, devices: list[str], config: dict[str, Any], case_timeout: float, per_device: int = 1):
    self.devices, self.config, self.case_timeout, self.per_device = devices, config, case_timeout, per_device
    self.workers: dict[str, list[DeviceWorker]] = {d: [] for d in devices}   # up to per_device each: more while its queue is long
    self.queues: dict[str, deque[tuple[Any, int, Any, bool]]] = {d: deque() for d in devices}   # (job, position, program, alone)
    self.gone: dict[str, str] = {}    # device -> why it could not be built again (its programs fail with that)
    self.crashes = 0                  # workers lost to a crash or a hang
    self.coverage: list[dict[str, Any]] = []   # the device workers' coverage snapshots (refgrad/coverage.py), for the coordinator to take

  def submit(self, job: Any, progs: list[Any], devices: list[str] | None = None) -> None:
    for d in self.devices if devices is None else devices: self.queues[d].extend((job, i, p, False) for i, p in enumerate(progs))

  def busy(self) -> bool: return any(self.queues.values()) or any(w.batch for ws in self.workers.values() for w in ws)

  def waitables(self) -> list[Any]: return [x for ws in self.workers.values() for w in ws for x in (w.conn, w.proc.sentinel)]

  def wait(self, timeout: float) -> list[Any]: return wait(self.waitables(), timeout=timeout)

  def step(self, ready: list[Any]) -> list[tuple[Any, int, str, dict[str, Any]]]:
    """Read what the workers said (`ready`: from multiprocessing.connection.wait), replace the dead and the hung, and
    send each idle worker its next batch: the outcomes that arrived, as (job, position, device, outcome)."""
    out: list[tuple[Any, int, str, dict[str, Any]]] = []
    for d in self.devices:
      for w in list(self.workers[d]):
        if w.conn in ready or w.proc.sentinel in ready or (_waiting(w) and time.monotonic() > w.deadline): self._read(d, w, out)
      ws, q = self.workers[d], self.queues[d]
      if q and d in self.gone: self._fail_all(d, "crash", self.gone[d], out)
      elif q and (not ws or (len(ws) < self.per_device and len(q) >= START_MORE and all(_waiting(w) for w in ws))):
        w = DeviceWorker(d, self.config)
        w.deadline = time.monotonic() + READY_TIMEOUT
        ws.append(w)
      idle = [w for w in ws if w.ready and not w.batch]
      for k, w in enumerate(idle):
        if q: self._dispatch(d, w, -(-len(q) // (len(idle) - k)), out)   # the queue shared among the idle workers
    return out

  def _dispatch(self, d: str, w: DeviceWorker, most: int, out: list[Any]) -> None:
    q, batch = self.queues[d], []
    while q and len(batch) < min(most, MAX_BATCH):
      job, i, p, alone = q[0]
      if w.target is not None and p.target != w.target:   # another target's program: not this device's
        q.popleft()
        out.append((job, i, d, {"status": "skip"}))
        continue
      if alone and batch: break
      batch.append(q.popleft())
      if alone: break
    if batch: w.send([(job, i, p) for job, i, p, _ in batch], 2 * self.case_timeout)   # building the programs: up to two case timeouts

  def _read(self, d: str, w: DeviceWorker, out: list[Any]) -> None:
    try:
      while w.conn.poll():
        kind, payload = w.conn.recv()
        if kind == "ready":
          w.ready, w.target = True, payload
        elif kind == "broken":   # it was built before: a device that builds only sometimes fails the programs left
          self.gone[d] = payload
          self._lost(d, w, "crash", payload, out)
          self._fail_all(d, "crash", payload, out)
          return
        elif kind == "compiled": w.compiled = True
        elif kind == "done":
          i, o = payload
          job, pos, _ = w.batch[i]
          w.answered.add(i)
          out.append((job, pos, d, o))
        elif kind == "ok": w.batch, w.answered = [], set()
        elif kind == "coverage": self.coverage.append(payload)
        else: raise RuntimeError(f"the {d} worker failed outside any program (a fuzzer bug):\n{payload}")
        w.deadline = time.monotonic() + self.case_timeout   # progress: the next program gets a case timeout of its own
    except (EOFError, OSError): pass
    if w.proc.is_alive() and not (_waiting(w) and time.monotonic() > w.deadline): return
    timed_out = w.proc.is_alive()
    if not timed_out: w.proc.join(5)   # it died: wait for its exit status
    if not w.ready:
      why = (f"device {d} cannot be built again (no answer within {READY_TIMEOUT:g} s)" if timed_out
             else f"device {d} cannot be built again (its worker was {w.exitcode_text()} building it)")
      self.gone[d] = why
      self._lost(d, w, "crash", why, out)
      return
    self._lost(d, w, "timeout" if timed_out else "crash",
               f"no answer within {self.case_timeout:g} s" if timed_out else w.exitcode_text(), out)

  def _lost(self, d: str, w: DeviceWorker, oracle: str, text: str, out: list[Any]) -> None:
    """Worker w is dead or hung: the program it was running fails with `oracle`, the rest go back to the queue."""
    w.kill()
    self.workers[d].remove(w)
    rest = [k for k in range(len(w.batch)) if k not in w.answered]
    if not rest: return
    self.crashes += 1
    if w.compiled or len(rest) == 1:
      job, pos, _ = w.batch[rest[0]]
      out.append((job, pos, d, {"status": "fail", "oracle": oracle, "detail": f"the worker running this program on {d}: {text}"}))
      self.queues[d].extendleft(reversed([(*w.batch[k], False) for k in rest[1:]]))
    else: self.queues[d].extendleft(reversed([(*w.batch[k], True) for k in rest]))   # lost while building: one program per batch

  def _fail_all(self, d: str, oracle: str, why: str, out: list[Any]) -> None:
    while self.queues[d]:
      job, i, _, _ = self.queues[d].popleft()
      out.append((job, i, d, {"status": "fail", "oracle": oracle, "detail": why}))

  def drop(self) -> int:
    """Forget every program queued or running (the time limit): the workers running one are killed; how many there were."""
    n = sum(len(q) for q in self.queues.values())
    for q in self.queues.values(): q.clear()
    for ws in self.workers.values():
      for w in [w for w in ws if w.batch]:
        n += len(w.batch)
        w.kill()
        ws.remove(w)
    return n

  def close(self, kill: bool = False) -> None:
    for ws in self.workers.values():
      for w in ws: w.kill() if kill else w.stop()
      ws.clear()


def _waiting(w: DeviceWorker) -> bool: return bool(w.batch) or not w.ready   # an answer is due by w.deadline
