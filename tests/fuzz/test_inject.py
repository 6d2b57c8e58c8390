"""The whole fuzzer with worker processes: a broken piece injected into the workers is found, shrunk to a small case,
saved, and the saved case replays to the same failure; a segfaulting and a hanging backend are both recorded and the
run goes on; the same seed gives the same cases with any worker count, and shards split the stream."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzz.__main__ import replay_finding
from fuzz.run import Fuzzer, Options
from oracles.astjson import ast_to_json
from oracles.case import Case, Finding
from oracles.models import load_models
from refgrad import Tensor, dtypes, schedule

PRELOAD = ["tests.fuzz.inject"]


def _run(tmp_path, **kw):
  opts = Options(corpus=tmp_path, preload=PRELOAD, **{"devices": ["CPU"], "workers": 2, **kw})
  f = Fuzzer(opts, load_models())
  f.run()
  return f

@pytest.mark.parametrize("bug, cases, oracles", [
  ("unroll", 64, {"cross-opt"}),
  pytest.param("c_helper", 192, {"device"}, marks=pytest.mark.slow),
  pytest.param("render_cast", 640, {"device"}, marks=pytest.mark.slow),
  pytest.param("simt_max", 192, {"ast-eval", "device"}, marks=pytest.mark.slow),
  pytest.param("symbolic", 96, {"checked", "redzone", "ast-eval", "cross-opt"}, marks=pytest.mark.slow),
])
def test_injected_bug_found_shrunk_and_replayed(tmp_path, bug, cases, oracles):
  env = {"FUZZ_INJECT": bug}
  f = _run(tmp_path, cases=cases, env=env)
  assert f.stats.findings, f"{bug}: nothing found in {cases} cases"
  shrunk = [x for x in f.stats.findings if x["shrunk"]]
  assert shrunk and {x["oracle"] for x in shrunk} <= oracles, f.stats.findings
  fd = Finding.load(shrunk[0]["path"])
  assert fd.original is not None and len(fd.case.opts) <= max(1, len(fd.original.opts))
  if bug == "unroll": assert [o[0] for o in fd.case.opts] == ["UNROLL"]      # one Opt is all it takes
  if bug in ("c_helper", "render_cast"):   # a renderer bug in one op: the device findings name that op where found
    ops = {(x["first_diff"] or {}).get("op") for x in f.stats.findings if x["oracle"] == "device"} - {None}
    assert ops == {"c_helper": {"MAX"}, "render_cast": {"CAST"}}[bug], f.stats.findings
  if fd.case.recipe is not None:
    assert len(fd.case.recipe["steps"]) <= len(fd.original.recipe["steps"])
    assert sum(fd.case.recipe["shape"]) <= sum(fd.original.recipe["shape"])
  r = replay_finding(fd, preload=PRELOAD, env=env)
  assert r.status == "fail" and r.signature() == fd.signature(), r
  saved = json.loads(Path(shrunk[0]["path"]).read_text())   # bits, not hashes, and the command that reruns it
  assert saved["rerun"] == f"python -m fuzz replay {shrunk[0]['path']}" + ("" if fd.device == "PYTHON" else f" --devices {fd.device}")
  assert saved["values"] and saved["values"]["inputs"] and all(len(x) % 2 == 0 for x in saved["values"]["actual"])
  assert len({(x["oracle"], x["device"], x["dtype"], (x["first_diff"] or {}).get("op")) for x in f.stats.findings}) == len(f.stats.findings)   # one file per signature
  assert replay_finding(fd).status == "pass"      # without the bug, the case passes

def test_segfault_and_hang_are_findings_and_the_run_goes_on(tmp_path):
  """Each device runs in a worker of its own: a crash or hang is a finding of that device alone, and every other device
  still runs every program (the CPU the very programs SEGV crashed and HANG hung on) and agrees with PYTHON."""
  f = _run(tmp_path, cases=32, devices=["SEGV", "HANG", "CPU"], env={"FUZZ_INJECT": "segv+hang"}, case_timeout=4.0, shrink=False, targets=["CPU"])
  assert f.stats.by_oracle["crash"] >= 1 and f.stats.by_oracle["timeout"] >= 1, f.stats.findings
  assert f.stats.checked > f.stats.by_oracle["crash"] + f.stats.by_oracle["timeout"]   # other cases were checked
  assert f.stats.device_programs["CPU"] == f.stats.device_programs["SEGV"] == f.stats.device_programs["HANG"] > 0, f.stats.device_programs
  assert f.stats.by_device["CPU"] == 0 and f.stats.by_device["PYTHON"] == 0, f.stats.findings
  for x in f.stats.findings:
    fd = Finding.load(x["path"])
    assert fd.oracle == x["oracle"] and fd.device in ("SEGV", "HANG"), x   # the device that crashed or hung, not "worker"
    assert fd.values and fd.values["inputs"] and len(fd.values["inputs"]) == len(fd.values["dtypes"])   # the inputs as bits
    r = replay_finding(fd, case_timeout=4.0, preload=PRELOAD, env={"FUZZ_INJECT": "segv+hang"})
    assert r.status == "fail" and r.signature() == fd.signature(), (r, fd.signature())
  import json
  from xml.etree import ElementTree as ET

  from fuzz import report
  report.write_json(f, tmp_path / "r.json")
  report.write_junit(f, tmp_path / "r.xml")
  doc = json.loads((tmp_path / "r.json").read_text())
  assert doc["findings_by_oracle"] == dict(f.stats.by_oracle) and doc["checked"] == f.stats.checked
  suite = ET.parse(tmp_path / "r.xml").getroot().find("testsuite")
  assert int(suite.get("failures")) == len(f.stats.findings) == len(suite.findall("testcase/failure"))

def test_same_seed_same_cases_any_worker_count_and_shards(tmp_path):
  one = _run(tmp_path / "a", cases=32, workers=1, seed=5, shrink=False)
  two = _run(tmp_path / "b", cases=32, workers=3, seed=5, shrink=False)
  assert one.stats.case_keys == two.stats.case_keys and len(one.stats.case_keys) >= 24
  halves = [_run(tmp_path / f"s{i}", cases=16, workers=1, seed=5, shard=(i, 2), shrink=False) for i in range(2)]
  assert not set(halves[0].stats.case_keys) & set(halves[1].stats.case_keys)
  assert {**halves[0].stats.case_keys, **halves[1].stats.case_keys} == one.stats.case_keys

def test_a_hang_is_found_within_the_case_timeout_and_seconds_bound_the_run(tmp_path):
  """A hanging device costs one case timeout from the last progress, not a whole batch's; --seconds ends the whole run,
  shrinking and the isolation of a lost batch included (plus a grace of min(case timeout, 10%))."""
  import time
  st = time.monotonic()
  f = _run(tmp_path, seconds=15.0, devices=["HANG"], env={"FUZZ_INJECT": "hang"}, case_timeout=2.0, targets=["CPU"], workers=1)
  took = time.monotonic() - st
  assert f.stats.by_oracle["timeout"] >= 1 and all(x["device"] == "HANG" for x in f.stats.findings), f.stats.findings
  assert took < 15.0 + 1.5 + 10.0, took   # the limit, the grace, and worker start/stop on a loaded machine


@pytest.mark.parametrize("bug, tensor, op", [("c_helper", lambda: (Tensor.empty(4, 6) + 1).max(1) * 2, "MAX"),
                                             ("render_cast", lambda: (Tensor.empty(4, 6, dtype=dtypes.int8) * 3).cast(dtypes.int32) + 1, "CAST")])
def test_first_differing_op_is_named(tmp_path, bug, tensor, op):
  """A renderer bug in one op: the device finding names that op as where the first difference arises (a probe program
  stores every intermediate value, run on PYTHON and on the device), in the saved finding and in its signature."""
  items, _ = schedule.create_schedule([tensor().uop], "CPU")
  ast = [it.ast for it in items if it.ast is not None][-1]
  case = Case(0, "k", ast_to_json(ast), "CPU", [], {"seed": 1, "mode": "random"})
  env = {"FUZZ_INJECT": bug}
  f = Fuzzer(Options(corpus=tmp_path, preload=PRELOAD, devices=["CPU"], workers=1, env=env), [])
  try:
    r = f.check_one(case)
    assert r.status == "fail" and r.oracle == "device", r
    fd = f.first_diff(r)
  finally: f.close()
  assert fd is not None and fd["op"] == op and fd["dtype"] in {"MAX": ("float",), "CAST": ("int",)}[op], fd
  r.first_diff = fd
  assert r.signature() == ("device", "CPU", r.dtype, op)
  saved = Finding(case, r.oracle, r.device, r.detail, values=r.values, dtype=r.dtype, first_diff=fd).save(tmp_path)
  back = Finding.load(saved)
  assert back.first_diff == fd and back.signature() == r.signature()
  again = replay_finding(back, preload=PRELOAD, env=env)   # a replay finds the same first difference
  assert again.signature() == back.signature(), again
