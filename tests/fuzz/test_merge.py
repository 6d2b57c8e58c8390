"""CI matrices: two shards' corpora merged by signature equal one unsharded run's; `python -m fuzz merge` on the CLI."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fuzz.merge import merge
from fuzz.run import Fuzzer, Options
from oracles.case import Finding
from oracles.models import load_models
from tests.cli import run_module

PRELOAD = ["tests.fuzz.inject"]

def _run(corpus, cases, **kw):
  corpus.mkdir(parents=True)   # as the CLI does before a run (a shard may find nothing)
  f = Fuzzer(Options(corpus=corpus, preload=PRELOAD, devices=["CPU"], workers=2, cases=cases, seed=2, shrink=False, env={"FUZZ_INJECT": "unroll"}, **kw),
             load_models())
  f.run()
  return f

@pytest.mark.slow   # three fuzz runs: about 2.5 minutes on a loaded 2-core machine
def test_two_shards_merged_equal_one_run(tmp_path):
  whole = _run(tmp_path / "whole", 32)
  shards = [_run(tmp_path / f"s{i}", 16, shard=(i, 2)) for i in range(2)]   # --cases counts a shard's own cases
  assert whole.stats.findings, "the injected bug was not found"
  assert {**shards[0].stats.case_keys, **shards[1].stats.case_keys} == whole.stats.case_keys
  merged, bad = merge([tmp_path / "s0", tmp_path / "s1"], tmp_path / "merged")
  assert not bad
  sigs = {(x["oracle"], x["device"], x["dtype"]) for x in whole.stats.findings}
  assert set(merged) == sigs
  total = lambda fds: sum(1 + fd.duplicates for fd in fds)
  assert total(merged.values()) == sum(whole.stats.by_oracle.values())   # every finding counted once: saved or as a duplicate
  r = run_module("fuzz", "merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "cli"), timeout=60)
  assert r.returncode == 0 and f"{len(sigs)} signatures from 2 directories" in r.stdout, r.stdout + r.stderr
  assert sorted(p.name for p in (tmp_path / "cli").glob("*.json")) == sorted(p.name for p in (tmp_path / "merged").glob("*.json"))

def test_merge_reports_an_unreadable_file(tmp_path):
  (tmp_path / "a").mkdir()
  (tmp_path / "a" / "junk.json").write_text("{}")
  r = run_module("fuzz", "merge", str(tmp_path / "a"), "--out", str(tmp_path / "o"), timeout=60)
  assert r.returncode == 2 and "UNREADABLE" in r.stdout and "not a fuzz finding" in r.stdout, r.stdout + r.stderr

def test_merge_keeps_the_smallest_of_each_signature_and_counts_the_rest(tmp_path):
  src = sorted((Path(__file__).parents[2] / "oracles" / "corpus").glob("*.json"))
  a, b = tmp_path / "a", tmp_path / "b"
  a.mkdir(); b.mkdir()
  for p in src: shutil.copy(p, a / p.name)
  big = Finding.load(src[0])   # the same signature again, with one Opt more: a duplicate, not the one kept
  big.case.opts = [*big.case.opts, ["UPCAST", 0, 4]]
  big.duplicates = 2
  big.save(b)
  merged, bad = merge([a, b], tmp_path / "out")
  want = {Finding.load(p).signature() for p in src}
  assert not bad and set(merged) == want and len(list((tmp_path / "out").glob("*.json"))) == len(want)
  kept = merged[big.signature()]
  same = [Finding.load(p) for p in src if Finding.load(p).signature() == big.signature()]
  assert kept.case.opts in [fd.case.opts for fd in same] and kept.case.opts != big.case.opts
  assert kept.duplicates == len(same) - 1 + 3   # the other files of its signature, the big one and the 2 it counted
