"""The coordinator: draws the case stream, keeps K warm workers busy, isolates crashes and hangs, records findings
(atomically, before moving on), shrinks them, and keeps the statistics the display and reports show."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from fuzz.coverage import Coverage
from fuzz.pool import DevicePool
from fuzz.shrink import shrink
from fuzz.stream import GROUP, Stream
from fuzz.worker import Worker
from oracles.case import Case, Finding, Result
from oracles.check import DeviceProg, input_values, merge
from oracles.firstdiff import Probe, locate

DEFAULT_CORPUS = Path("fuzz-corpus")   # findings go to the current directory, never into the installed package
GROUPS_PER_JOB = 1          # groups a reference worker checks per message: small, so little work is in flight when --seconds ends the run (a device worker takes every program queued for it at once: its compiles stay batched)
SHRINK_SECONDS = 30.0       # default --shrink-seconds: the most a finding's shrinking may take
MAX_PROBES = 4              # device failures per (device, dtype) whose first differing op is looked for (oracles/firstdiff.py: seconds each)
CASE_TIMEOUT = 30.0         # default --case-timeout: a case runs in milliseconds, but one C compile of a large decomposed kernel takes up to ~15 s on 2 loaded cores (a step sends no progress while cc runs); a hang is found within this


@dataclass
class Options:
  seed: int = 0
  seconds: float | None = None
  cases: int | None = None
  workers: int = 2
  devices: list[str] = field(default_factory=list)
  targets: list[str] = field(default_factory=lambda: ["CPU", "CUDA", "AMD"])
  corpus: Path = field(default_factory=lambda: DEFAULT_CORPUS)
  shard: tuple[int, int] = (0, 1)
  depth: int = 4
  case_timeout: float = CASE_TIMEOUT
  shrink: bool = True
  ast_eval: bool = True
  preload: list[str] = field(default_factory=list)   # modules every worker imports first (plugins; tests inject bugs this way)
  models: bool = True
  env: dict[str, str] = field(default_factory=dict)   # extra environment of the workers
  shrink_seconds: float = SHRINK_SECONDS
  mix: str = "default"


@dataclass
class Stats:
  started: float = field(default_factory=time.monotonic)
  checked: int = 0                      # cases whose oracles all ran (pass or fail)
  exact: int = 0                        # of those, bit-exact cross-Opt checks
  ub: int = 0                           # cases whose inputs were undefined behaviour twice (not findings)
  regenerated: int = 0                  # cases whose inputs were undefined behaviour once and were regenerated
  invalid: int = 0
  by_target: Counter[str] = field(default_factory=Counter)
  by_oracle: Counter[str] = field(default_factory=Counter)
  by_device: Counter[str] = field(default_factory=Counter)
  opt_cov: Counter[tuple[str, str]] = field(default_factory=Counter)       # (target, Opt kind) exercised
  op_cov: Counter[tuple[str, str]] = field(default_factory=Counter)        # (step, dtype) drawn
  crashes: int = 0
  device_programs: Counter[str] = field(default_factory=Counter)   # programs each device under test ran (its target's)
  case_keys: dict[int, str] = field(default_factory=dict)     # index -> Case.key(), every case checked or skipped
  findings: list[dict[str, Any]] = field(default_factory=list)
  @property
  def elapsed(self) -> float: return time.monotonic() - self.started
  @property
  def rate(self) -> float: return self.checked / max(1e-9, self.elapsed)


def worker_config(opts: Options) -> dict[str, Any]:
  # the mock GPUs run a seeded interleaving (overlapping launches, README "Ordering inside a queue"); one fixed seed so a
  # finding's replay (a new worker, same config) runs the same way
  return {"env": {"MOCKGPU": "1", "MOCKGPU_ORDER": "seed:0", **({"REFGRAD_CACHE": os.environ["REFGRAD_CACHE"]} if "REFGRAD_CACHE" in os.environ else {}), **opts.env},
          "preload": opts.preload, "ast_eval": opts.ast_eval, "models": opts.models}


@dataclass
class _Job:
  """A reference job's Results and programs, waiting for every device's outcome of every program."""
  results: list[Result]
  progs: list[DeviceProg]
  outcomes: dict[str, list[dict[str, Any]]]   # device -> outcome per program
  left: int                                   # outcomes still to come


class Fuzzer:
  def __init__(self, opts: Options, models: list[dict[str, Any]], on_update: Callable[[Fuzzer], None] | None = None):
    self.opts, self.models, self.on_update = opts, models, on_update
    self.stats = Stats()
    self.stream = Stream(opts.seed, opts.targets, opts.depth, models, opts.mix)
    self.config = worker_config(opts)
    self.coverage = Coverage()
    self.runtime_level: dict[str, Any] | None = None   # the default mix's runtime-level part (fuzz/__main__.py), when it ran
    if opts.cases is None and opts.shard == (0, 1): self.stream.boost = self.coverage.boost   # timing-dependent: fuzz/coverage.py
    self._spare: Worker | None = None                # check_one's reference worker
    self._spare_pool: DevicePool | None = None       # check_one's device workers
    self.pool = DevicePool(opts.devices, self.config, opts.case_timeout, per_device=max(1, opts.workers))
    self.jobs: dict[int, _Job] = {}                  # reference jobs done, waiting for the devices' outcomes
    self._job_keys = 0
    self._probed: Counter[tuple[str, str]] = Counter()   # (device, dtype) -> device failures whose first differing op was looked for
    self.saved: dict[tuple[str, str, str, str], tuple[dict[str, Any], Finding]] = {}   # signature -> (its report entry, its saved finding)
    self.notes: list[str] = []
    self.drawn = 0
    self.interrupted = False        # Ctrl-C stopped the run: what was done is kept and reported
    self._shielded = False          # saving a finding: a Ctrl-C then waits until it is on disk and counted

  # ---- the case stream ---------------------------------------------------------------------------------------
  def _next_specs(self, n: int) -> list[dict[str, Any]]:
    i, k = self.opts.shard
    out = []
    while len(out) < n and not self._enough_drawn():
      spec = self.stream.draw()
      if "recipe" in spec:
        for name, *_ in spec["recipe"]["steps"]: self.stats.op_cov[(name, spec["recipe"]["dtype"])] += 1
      if spec["group"] % k == i: out.append(spec); self.drawn += GROUP
    return out

  def _enough_drawn(self) -> bool:
    return (self.opts.cases is not None and self.drawn >= self.opts.cases) or self._time_up()

  def _time_up(self) -> bool: return self.opts.seconds is not None and self.stats.elapsed >= self.opts.seconds
  def _past_end(self) -> bool:   # a grace of one case timeout past --seconds for the jobs in flight
    return self.opts.seconds is not None and self.stats.elapsed >= self.opts.seconds + min(self.opts.case_timeout, 0.1 * self.opts.seconds)

  # ---- the run -----------------------------------------------------------------------------------------------
  def run(self) -> Stats:
    """Check the case stream until the limit. Ctrl-C (SIGINT) stops it cleanly: the cases in flight are dropped, a
    finding being shrunk is kept as found, `interrupted` is set, and the stats of what was done are returned."""
    self.drawn = 0
    workers: list[Worker] = []
    with self._on_sigint():
      try:
        workers += [Worker(self.config) for _ in range(max(1, self.opts.workers))]
        self._loop(workers)
      except KeyboardInterrupt: self.interrupted = True
      finally:
        self._shielded = True   # a second Ctrl-C must not cut the cleanup short
        for w in workers: w.kill() if self.interrupted else w.stop()
        self.pool.close(kill=self.interrupted)
        self.stats.crashes += self.pool.crashes
        self.close()
        self._shielded = False
    if self.interrupted: self.notes.append(f"interrupted (Ctrl-C) after {self.stats.elapsed:.1f} s: the counts and findings are those of the cases finished")
    return self.stats

  @contextlib.contextmanager
  def _on_sigint(self):
    if threading.current_thread() is not threading.main_thread(): yield; return   # only the main thread gets signals
    def handler(signum: int, frame: Any) -> None:
      self.interrupted = True
      if not self._shielded: raise KeyboardInterrupt
    old = signal.signal(signal.SIGINT, handler)
    try: yield
    finally: signal.signal(signal.SIGINT, old)

  @contextlib.contextmanager
  def _shield(self):
    """Defer a Ctrl-C to the end of the block (a finding saved and counted together), then stop."""
    self._shielded = True
    try: yield
    finally:
      self._shielded = False
    if self.interrupted: raise KeyboardInterrupt

  def _loop(self, workers: list[Worker]) -> None:
    if self.interrupted: raise KeyboardInterrupt
    pool = self.pool
    while True:
      for w in workers:   # the reference runs ahead of the devices by a bounded number of jobs
        if w.job is None and len(self.jobs) < len(workers) and (specs := self._next_specs(GROUPS_PER_JOB)):
          w.send("fuzz", specs, self.opts.case_timeout * 2)   # each step done (a tick) moves the deadline one case timeout on
      busy = [w for w in workers if w.job is not None]
      if not busy and not self.jobs: break
      if self._past_end():   # --seconds bounds the whole run: the jobs still running are dropped
        for w in busy:
          w.kill()
          workers[workers.index(w)] = Worker(self.config)
        pool.drop()
        self.notes.append(f"the time limit (--seconds {self.opts.seconds:g}) ended the run: {len(busy) + len(self.jobs)} job(s) in flight were dropped")
        self.jobs.clear()
        break
      ready = wait([x for w in busy for x in (w.conn, w.proc.sentinel)] + pool.waitables(), timeout=0.25)
      for w in busy:
        if w.conn in ready:
          try:
            status, payload = w.conn.recv()
            while status == "tick" and w.conn.poll():
              status, payload = w.conn.recv()
          except (EOFError, OSError): status, payload = "died", None
          if status == "tick":
            w.deadline = time.monotonic() + self.opts.case_timeout
            continue
          if status == "ok":
            results = [Result(**r) for r in payload[0]]
            self._credit(w.job, results)
            w.job = None
            self._to_devices(results, payload[1])
            continue
          if status == "error":
            w.job = None
            raise RuntimeError(f"a fuzz worker failed outside any case (a fuzzer bug):\n{payload}")
        if w.conn in ready or w.proc.sentinel in ready or time.monotonic() > w.deadline:
          job, why = w.job, ("crash" if w.conn in ready or w.proc.sentinel in ready else "timeout")
          w.kill()
          workers[workers.index(w)] = Worker(self.config)
          self.stats.crashes += 1
          self._isolate(job, why)
      for job, pos, dev, outcome in pool.step(ready): self._outcome(job, pos, dev, outcome)
      while pool.coverage: self.coverage.add(pool.coverage.pop(), [])   # a device batch mixes jobs: counted, credited to no choice
      if self.on_update: self.on_update(self)

  def _credit(self, job: Any, results: list[Result]) -> None:
    """Coverage feedback: a fuzz job's reference worker sends its counts on the job's last Result (fuzz/worker.py)."""
    if results and results[-1].coverage and job is not None and job[0] == "fuzz":
      self.coverage.add(results[-1].coverage, [c for spec in job[1] for c in self.stream.choices.get(spec["group"], [])])

  def _to_devices(self, results: list[Result], progs: list[DeviceProg]) -> None:
    """A reference job is done: its programs go to every device's queue (its Results wait for their outcomes)."""
    job = _Job(results, progs, {d: [{}] * len(progs) for d in self.opts.devices}, len(progs) * len(self.opts.devices))
    if job.left == 0: return self._take(merge(results, progs, job.outcomes, self.opts.devices))
    self._job_keys += 1
    self.jobs[self._job_keys] = job
    self.pool.submit(self._job_keys, progs)

  def _outcome(self, key: int, pos: int, dev: str, outcome: dict[str, Any]) -> None:
    if (job := self.jobs.get(key)) is None: return
    job.outcomes[dev][pos] = outcome
    if outcome["status"] != "skip": self.stats.device_programs[dev] += 1
    job.left -= 1
    if job.left == 0:
      del self.jobs[key]
      self._take(merge(job.results, job.progs, job.outcomes, self.opts.devices))

  def _take(self, results: list[Result]) -> None:
    for r in results:
      self.stats.case_keys[r.index] = r.key
      self.stats.regenerated += r.regenerated
      if r.status in ("pass", "fail"):
        self.stats.checked += 1
        self.stats.exact += r.exact
        self.stats.by_target[r.target] += 1
        for k in r.opt_kinds: self.stats.opt_cov[(r.target, k)] += 1
        for k in r.opt_kinds or ["none"]: self.coverage.cells[(r.target, k, self.stream.dclass.get(r.index // GROUP, "?"))] += 1
      elif r.status == "ub": self.stats.ub += 1
      else:
        self.stats.invalid += 1
        if "could not be built" in r.detail and len(self.notes) < 20: self.notes.append(r.detail[:300])
      if r.status == "fail": self._record(r)

  # ---- crashes and hangs: find the case, in a fresh worker each time ------------------------------------------
  def _isolate(self, job: Any, why: str) -> None:
    kind, payload = job
    if kind == "fuzz":
      w = Worker(self.config)
      try:
        w.send("materialize", payload, self.opts.case_timeout)
        st, cases = w.conn.recv() if w.conn.poll(self.opts.case_timeout) else ("timeout", None)
      except (EOFError, OSError) as e: st, cases = "died", repr(e)
      finally: w.stop()
      if st != "ok": raise RuntimeError(f"cannot rebuild the cases of a {why}ed job: {cases}")
      cases = [Case.from_json(c) for c in cases]
    else: cases = [Case.from_json(c) for c in payload]
    dead_groups: set[str] = set()
    for k, c in enumerate(cases):
      if self._past_end():   # --seconds bounds the whole run: the cases not yet checked alone are dropped
        self.notes.append(f"the time limit (--seconds {self.opts.seconds:g}) ended the isolation of a job lost to a {why}: {len(cases) - k} case(s) not checked")
        break
      if c.group_key() in dead_groups:
        self.stats.invalid += 1
        self.stats.case_keys[c.index] = c.key()
        continue
      r = self.check_one(c)
      self._take([r])
      if r.oracle in ("crash", "timeout"): dead_groups.add(c.group_key())

  def check_one(self, c: Case) -> Result:
    """Check one case in the spare workers (a reference worker and one per device): a crash or hang of the reference
    worker is a finding on PYTHON, one of a device's worker a finding on that device."""
    if self._spare is None or not self._spare.proc.is_alive(): self._spare = Worker(self.config)
    got, why = self._check_in(self._spare, c)
    if got is None:
      self._spare = None
      self.stats.crashes += 1
      return Result(c.index, "fail", why[0], "PYTHON", f"the reference worker checking this case: {why[1]}", target=c.target,
                    opt_kinds=sorted({o[0] for o in c.opts}), case=c.to_json(), key=c.key())
    results, progs = got
    return merge(results, progs, self._spare_outcomes(progs, self.opts.devices), self.opts.devices)[0]

  def _spare_outcomes(self, progs: list[DeviceProg], devices: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every device's outcome of every program, from the spare device workers (waiting for them)."""
    outcomes: dict[str, list[dict[str, Any]]] = {d: [{}] * len(progs) for d in devices}
    if not progs or not devices: return outcomes
    if self._spare_pool is None: self._spare_pool = DevicePool(self.opts.devices, self.config, self.opts.case_timeout)
    pool, key = self._spare_pool, object()
    pool.submit(key, progs, devices)
    ready: list[Any] = []
    while True:
      for k, pos, dev, o in pool.step(ready):
        if k is key: outcomes[dev][pos] = o
      if not pool.busy(): break
      ready = pool.wait(0.25)
    self.stats.crashes += pool.crashes
    pool.crashes = 0
    pool.coverage.clear()   # replays and shrinking: not what the run drew
    return outcomes

  def first_diff(self, r: Result) -> dict[str, Any] | None:
    """For a "device" failure: the first UOp of its program whose value differs on the device (oracles/firstdiff.py),
    found with probe programs run on PYTHON in the spare reference worker and on the device in its spare worker; None where
    none is found (or the time limit is reached)."""
    if r.oracle != "device" or r.case is None or self._time_up(): return None
    if self._spare is None or not self._spare.proc.is_alive(): self._spare = Worker(self.config)
    got, _ = self._ask(self._spare, "probe", [r.case, r.regenerated])
    if got is None:
      self._spare = None
      return None
    for dp, probes in got:
      outcome = self._spare_outcomes([dp], [r.device])[r.device][0]
      if (fd := locate([Probe(**p) for p in probes], dp, outcome)) is not None: return fd
    return None

  def _check_in(self, w: Worker, c: Case) -> tuple[tuple[list[Result], list[DeviceProg]] | None, tuple[str, str]]:
    """((its Results, its programs), _) when reference worker w answers; (None, (crash | timeout, what happened)) when it
    dies or hangs (it is killed)."""
    got, why = self._ask(w, "check", [c.to_json()])
    return (None if got is None else ([Result(**r) for r in got[0]], got[1])), why

  def _ask(self, w: Worker, kind: str, payload: list[Any]) -> tuple[Any, tuple[str, str]]:
    """(its answer, _) when reference worker w answers; (None, (crash | timeout, what happened)) when it dies or hangs."""
    w.send(kind, payload, self.opts.case_timeout)
    st = "tick"
    while st == "tick":   # each step done gives the case another timeout
      ready = wait([w.conn, w.proc.sentinel], timeout=self.opts.case_timeout)
      if w.conn not in ready: break
      try: st, payload = w.conn.recv()
      except (EOFError, OSError): break
    if st != "tick":
      w.job = None
      if st == "ok": return payload, ("", "")
      raise RuntimeError(f"a fuzz worker failed outside any case (a fuzzer bug):\n{payload}")
    timed_out = not ready
    if not timed_out: w.proc.join(5)   # it died: wait for its exit status (a forkserver child reports it through a pipe)
    text = w.exitcode_text() if not timed_out else f"no answer within {self.opts.case_timeout:g} s"
    w.kill()
    return None, ("timeout" if timed_out else "crash", text)

  def close(self) -> None:
    """Stop the spare workers (check_one's)."""
    if self._spare is not None: self._spare.kill() if self.interrupted else self._spare.stop()
    if self._spare_pool is not None: self._spare_pool.close(kill=self.interrupted)
    self._spare = self._spare_pool = None

  # ---- findings ----------------------------------------------------------------------------------------------
  def _record(self, r: Result) -> None:
    """Save a finding, one file per signature (oracle, device, dtype, first differing op): the first of a signature is
    saved at once and shrunk (within --shrink-seconds and the run's time); later ones are counted in that file, not
    saved again. The first differing op of a device failure is looked for while fewer than MAX_PROBES findings of its
    device and dtype were (then it counts with the others of its device and dtype whose op was not looked for)."""
    assert r.case is not None
    case = Case.from_json(r.case)
    if r.oracle == "device" and self._probed[(r.device, r.dtype)] < MAX_PROBES:
      self._probed[(r.device, r.dtype)] += 1
      r.first_diff = self.first_diff(r)
    sig = r.signature()
    self.stats.by_oracle[r.oracle] += 1
    self.stats.by_device[r.device] += 1
    if (known := self.saved.get(sig)) is not None:
      entry, fd = known
      with self._shield():
        fd.duplicates += 1
        entry["duplicates"] = fd.duplicates
        fd.save(Path(entry["path"]).parent)
      return
    f = Finding(case, r.oracle, r.device, r.detail, r.expected, r.actual, values=_values(case, r), dtype=r.dtype, first_diff=r.first_diff)
    with self._shield():
      first = f.save(self.opts.corpus)          # on disk before anything else happens
      entry = {"oracle": r.oracle, "device": r.device, "dtype": r.dtype, "first_diff": r.first_diff, "detail": r.detail, "path": str(first), "index": r.index,
               "shrunk": False, "duplicates": 0, "rerun": f.rerun(first)}
      self.stats.findings.append(entry)
      self.saved[sig] = (entry, f)
    deadline = time.monotonic() + self.opts.shrink_seconds
    if self.opts.seconds is not None: deadline = min(deadline, self.stats.started + self.opts.seconds)
    if self.opts.shrink and time.monotonic() < deadline:
      small, res = shrink(case, r, self.check_one, deadline)
      if small is case: return
      if r.first_diff is not None: res.first_diff = self.first_diff(res) or r.first_diff   # the shrunk program's own, where found
      g = Finding(small, res.oracle, res.device, res.detail, res.expected, res.actual, original=case, values=_values(small, res), dtype=res.dtype,
                  duplicates=f.duplicates, first_diff=res.first_diff)
      with self._shield():
        path = g.save(self.opts.corpus)
        if path != first: first.unlink(missing_ok=True)
        entry.update(path=str(path), shrunk=True, detail=res.detail, opts=len(small.opts), rerun=g.rerun(path), first_diff=res.first_diff)
        self.saved[sig] = (entry, g)


def _values(case: Case, r: Result) -> dict[str, Any] | None:
  """A finding's values as bits: the check's own, or for a crash or hang (no outputs) the inputs, made here (no backend
  is loaded in the coordinator)."""
  if r.values is not None: return r.values
  try: return input_values(case)
  except Exception as e: return {"dtypes": [], "inputs": [], "expected": [], "actual": [], "error": [f"{type(e).__name__}: {e}"]}
