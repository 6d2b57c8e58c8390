"""Fuzzer throughput: checked cases per second (PYTHON reference + CPU + the cross-Opt check), and where the time goes.

  python -m bench.bench_fuzz [--cases N] [--workers K]

1. in this process, the small-kernel mix (tiny random programs, 0..4 random Opts, all three targets): seconds per
   checked case by stage, and the same programs compiled one `cc` call each vs all in one shared object;
2. the whole fuzzer (`Fuzzer`, K warm workers) on the small mix and on the default mix: cases/s.
Every run uses a fresh compile cache, so no compile is served from disk.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time


def _fresh_cache() -> None: os.environ["REFGRAD_CACHE"] = tempfile.mkdtemp(prefix="rg-bench-fuzz-")

def in_process(n: int) -> None:
  from fuzz.stream import GROUP, Stream, materialize
  from oracles import check
  _fresh_cache()
  s = Stream(11, ["CPU", "CUDA", "AMD"], mix="small")
  check.TIMES.clear()
  st = time.perf_counter()
  cases = [c for _ in range(max(1, n // GROUP)) for c in materialize(s.draw())]
  t_mat = time.perf_counter() - st
  res = []
  for i in range(0, len(cases), 32): res += check.check_cases(cases[i:i + 32], ["CPU"])
  total = time.perf_counter() - st
  done = sum(r.status in ("pass", "fail") for r in res)
  print(f"in-process, small mix: {done} checked cases in {total:.2f} s = {done / total:.1f} cases/s on one core")
  print(f"  {'stage':16s} {'ms/case':>8s} {'share':>6s}")
  stages = {"draw + Opt walks": t_mat, **check.TIMES}
  for k, v in sorted(stages.items(), key=lambda kv: -kv[1]):
    print(f"  {k:16s} {v / max(1, done) * 1e3:8.2f} {v / total:6.0%}")
  # what one shared object per compiler call buys: the same programs, one cc call each
  from oracles.astjson import ast_from_json
  from oracles.case import opt_from_json
  from refgrad.kernel import Kernel
  from refgrad.opt import apply_opts
  from refgrad.target import TARGETS
  progs = [check.lower(apply_opts(Kernel(ast_from_json(c.ast), "k", TARGETS[c.target]), [opt_from_json(o) for o in c.opts]), f"b{c.index}")
           for c in cases[:32]]
  _fresh_cache()
  st = time.perf_counter()
  check.CPUBatch(progs)
  one = time.perf_counter() - st
  _fresh_cache()
  st = time.perf_counter()
  for p in progs: check.CPUBatch([p])
  each = time.perf_counter() - st
  print(f"  compiling {len(progs)} programs: one cc call {one:.2f} s, one cc call per program {each:.2f} s ({each / one:.1f}x)")

def fuzzer(n: int, workers: int, mix: str) -> None:
  from fuzz.run import Fuzzer, Options
  from oracles.models import load_models
  _fresh_cache()
  f = Fuzzer(Options(seed=3, cases=n, workers=workers, devices=["CPU"], mix=mix, shrink=False, corpus=tempfile.mkdtemp(prefix="rg-bench-fuzz-out-")), load_models())
  f.run()
  s = f.stats
  print(f"Fuzzer, {mix:7s} mix, {workers} workers: {s.checked} checked cases in {s.elapsed:.1f} s = {s.rate:.1f} cases/s "
        f"({s.exact} bit-exact cross-Opt, {len(s.findings)} findings)")


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--cases", type=int, default=1024, help="cases per whole-fuzzer measurement (default 1024; the in-process one takes 256)")
  ap.add_argument("--workers", type=int, default=2, help="worker processes of the whole-fuzzer runs (default 2)")
  a = ap.parse_args()
  print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
  in_process(min(a.cases, 256))
  fuzzer(16, a.workers, "small")   # warm-up: starts the forkserver the workers are forked from
  for mix in ("small", "default"): fuzzer(a.cases, a.workers, mix)
  print(f"load average {os.getloadavg()[0]:.1f} at the end")
