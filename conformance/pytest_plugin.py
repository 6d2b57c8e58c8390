"""pytest integration for a backend author's own CI: `pytest --refgrad-device NAME` collects the conformance cases and
the corpus replays on device NAME as pytest items (a `pytest11` entry point of refgrad; from a source tree without
installing, add `-p conformance.pytest_plugin`).

Items are named `refgrad/<device>/<group>/<case>` and marked `refgrad` and `refgrad_<group>` (`-m refgrad_alu`,
`-k "MUL and float"`); JUnit comes from pytest's own `--junitxml`, parallel runs from pytest-xdist (`-n 4`). As in
`python -m conformance`, the device runs in a worker process of its own (conformance/isolate.py) and the expected
values are computed in the pytest process, which never loads the backend (a corpus replay's come from a reference worker
that builds no device, and are judged here): a crash or hang fails its item (after
`--refgrad-timeout` seconds) and the next item gets a fresh worker. The plugin does nothing without --refgrad-device.

refgrad and the suite are imported inside the hooks that use them: pytest loads this plugin (a pytest11 entry point)
into every session of an environment refgrad is installed in, and a session without --refgrad-device must not pay for
importing refgrad nor fail on a bad refgrad knob (refgrad reads some, e.g. DEBUG, when imported).
"""
from __future__ import annotations

import os
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import pytest

GROUPS = ("alu", "cast", "bitcast", "transcendental", "native", "corpus")


def pytest_addoption(parser: Any) -> None:
  g = parser.getgroup("refgrad", "refgrad conformance (conformance/pytest_plugin.py)")
  g.addoption("--refgrad-device", action="append", default=[], metavar="NAME", help="collect refgrad's conformance cases and corpus replays on this device (repeatable)")
  g.addoption("--refgrad-corpus", type=Path, metavar="DIR", help="the saved fuzz findings replayed as items (default: refgrad's own regression corpus)")
  g.addoption("--refgrad-timeout", type=float, default=10.0, metavar="S", help="seconds one item may take on the device (default 10)")
  g.addoption("--refgrad-seed", type=int, default=0, metavar="S", help="seed of the conformance inputs (default 0)")


def pytest_configure(config: Any) -> None:
  config.addinivalue_line("markers", "refgrad: a refgrad conformance item (conformance/pytest_plugin.py)")
  for grp in GROUPS: config.addinivalue_line("markers", f"refgrad_{grp}: refgrad conformance items of the {grp} group")


class CaseFailed(Exception):
  """A conformance Result that is not a pass."""


class _Runner:
  """One worker per device for the session; the inputs and expected values are made here."""
  def __init__(self, config: Any):
    self.config, self.pools, self.broken, self.inputs = config, {}, {}, {}

  def run(self, device: str, kind: str, payload: Any, timeout: float) -> tuple[str, Any]:
    """("ok", output) or (error | crash | timeout | broken | fp-state, the line saying what happened)."""
    from conformance.isolate import Pool
    if device in self.broken: return "broken", self.broken[device]
    if device not in self.pools:
      if device.split(":")[0] in ("NV", "AMD"): os.environ.setdefault("MOCKGPU", "1")
      pool = Pool([device], 1, {k: os.environ[k] for k in ("MOCKGPU", "REFGRAD_CACHE") if k in os.environ})
      if (why := pool.start().get(device)) is not None:
        self.broken[device] = why
        return "broken", why
      self.pools[device] = pool
    pool = self.pools[device]
    w = pool.workers[device][0]
    if not w.ready and (why := pool._await_ready(w)) is not None: return "broken", why
    w.send(kind, payload, None, timeout)
    ready = wait([w.conn, w.proc.sentinel], timeout=timeout)
    if w.conn in ready:
      try:
        status, answer = w.conn.recv()
        w.job = None
        if status != "ok": return "error", answer
        out, fp = answer
        return ("fp-state", fp) if fp is not None else ("ok", out)
      except (EOFError, OSError): pass
    outcome = "timeout" if not ready else "crash"
    why = f"no answer within --refgrad-timeout {timeout:g} s; the worker was killed" if outcome == "timeout" else w.death()
    pool._replace(w)
    return outcome, why

  def close(self) -> None:
    for p in self.pools.values(): p.close()


def _runner(config: Any) -> _Runner:
  if not hasattr(config, "_refgrad_runner"): config._refgrad_runner = _Runner(config)
  return config._refgrad_runner


class ConformanceItem(pytest.Item):
  def __init__(self, *, device: str, kind: str, index: int | None = None, finding: Any = None, group: str, **kw: Any):
    super().__init__(**kw)
    self.device, self.kind, self.index, self.finding, self.group = device, kind, index, finding, group
    self.add_marker(pytest.mark.refgrad)
    self.add_marker(getattr(pytest.mark, f"refgrad_{group}"))

  def runtest(self) -> None:
    r = _runner(self.config)
    timeout = self.config.getoption("refgrad_timeout")
    if self.kind == "alu":
      from conformance.suite import all_cases, case_inputs, judge
      case = all_cases()[self.index]
      if self.index not in r.inputs: r.inputs[self.index] = case_inputs(case, self.config.getoption("refgrad_seed"))
      cols, want = r.inputs[self.index]
      status, out = r.run(self.device, "alu", (self.index, cols), timeout)
      if status != "ok": raise CaseFailed(f"{status}: {self.device} {case.name}: {out}")
      res = judge(case, self.device, cols, want, out)
      if res.status != "pass": raise CaseFailed(f"{res.status}: {self.device} {case.name}: {res.detail}")
      return
    from conformance.corpus import corpus_result
    name, fd = self.finding
    if isinstance(fd, str): raise CaseFailed(fd)
    from conformance.isolate import REFERENCE, oracle_results
    status, prep = r.run(REFERENCE, "prepare", [fd.case.to_json()], timeout * 6)   # the expected bits: a worker with no device under test
    if status != "ok": raise CaseFailed(f"{status}: {REFERENCE} {name}: {prep}")
    outcomes = None
    if self.device != "PYTHON":   # PYTHON's results are the reference's own
      status, outcomes = r.run(self.device, "programs", prep[1], timeout * 6)
      if status != "ok": raise CaseFailed(f"{status}: {self.device} {name}: {outcomes}")
    res = corpus_result(name, fd, self.device, oracle_results(prep, self.device, outcomes)[0])
    if res.status != "pass": raise CaseFailed(f"{res.status}: {self.device} {name}: {res.detail}")

  def repr_failure(self, excinfo: Any, style: Any = None) -> str:
    if isinstance(excinfo.value, CaseFailed):
      group = "corpus" if self.kind == "oracle" else self.group
      return f"{excinfo.value}\nrerun outside pytest: python -m conformance --device {self.device} --group {group} --case '{self.name.split('/', 1)[1]}'"
    return super().repr_failure(excinfo)

  def reportinfo(self) -> tuple[Any, int | None, str]: return self.path, None, f"refgrad {self.device} {self.name}"


@pytest.hookimpl(tryfirst=True)   # before -k / -m deselect
def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
  devices = config.getoption("refgrad_device")
  if not devices: return
  from conformance.corpus import corpus_findings
  from conformance.suite import all_cases
  from refgrad.device import Device
  try: devices = list(dict.fromkeys(Device.canonicalize(d) for d in devices))
  except KeyError as e: raise pytest.UsageError(f"--refgrad-device: {e.args[0]}") from None
  if (corpus := config.getoption("refgrad_corpus")) is not None and not corpus.is_dir(): raise pytest.UsageError(f"--refgrad-corpus {corpus}: not a directory")
  for d in devices:
    top = _Dir.from_parent(session, name=f"refgrad/{d}", path=session.path)
    for i, c in enumerate(all_cases()):
      items.append(ConformanceItem.from_parent(top, name=f"{c.group}/{c.name}", device=d, kind="alu", index=i, group=c.group))
    for name, fd in corpus_findings(config.getoption("refgrad_corpus")):
      items.append(ConformanceItem.from_parent(top, name=f"corpus/{name}", device=d, kind="oracle", finding=(name, fd), group="corpus"))


class _Dir(pytest.Collector):
  """The parent of one device's items (they are made at collection's end, not collected from files)."""
  def collect(self) -> list[Any]: return []


def pytest_unconfigure(config: Any) -> None:
  if hasattr(config, "_refgrad_runner"): config._refgrad_runner.close()
