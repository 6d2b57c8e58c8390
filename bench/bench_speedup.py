"""PYTHON / CPU time of this checkout against another one, side by side, measured in one sitting.

  python -m bench.bench_speedup --before /path/to/other/checkout [--rounds 3] [--reps 3]

Runs the programs of bench_tensor and the kernels of bench_kernels in a fresh process per checkout and round (rounds
alternate between the checkouts, so a load spike on this machine hits both), keeps each figure's best time, and prints
PYTHON ms, CPU ms and PYTHON / CPU for both checkouts. Without --before it measures this checkout only.
Times are the process's CPU time (`time.process_time`), not wall time, unless --wall: on a machine shared with other
jobs, wall time counts the moments this process waits for a core (load averages of 5-14 made wall-time figures swing
by 3x); CPU time does not. Both devices run in this one thread, so for them the two measure the same work.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

# runs inside the measured checkout (cwd and PYTHONPATH): one JSON object {figure: [python s, cpu s]} on the last line
_CHILD = r"""
import json, sys, time
from bench import bench_kernels as bk, bench_tensor as bt
reps, n = int(sys.argv[1]), int(sys.argv[2])
if sys.argv[3] == "cpu": time.perf_counter = time.process_time   # the benches time with perf_counter
out = {}
for name, (prog, shapes) in bt.PROGRAMS.items():
  out[name] = [bt.bench(prog, shapes, d, reps) for d in ("PYTHON", "CPU")]
for title, name, sink, n_in, n_out, k in (("a*b+c", "muladd", bk.muladd(n), n, n, 3), ("sum loop (1 lane)", "sum1", bk.sum_loop(n, 1), n, 1, 1),
                                          ("sum 1000 lanes x loop", "sum1000", bk.sum_loop(n, 1000), n, 1000, 1)):
  out["kernel " + title] = [bk.bench(name, sink, n_in, n_out, k, d, reps) for d in ("PYTHON", "CPU")]
print(json.dumps(out))
"""


def measure(root: str, reps: int, n: int, clock: str) -> dict[str, list[float]]:
  env = {**os.environ, "PYTHONPATH": root, "REFGRAD_CACHE": os.path.join(tempfile.gettempdir(), f"rg-bench-speedup-{abs(hash(root))}")}
  r = subprocess.run([sys.executable, "-c", _CHILD, str(reps), str(n), clock], cwd=root, env=env, capture_output=True, text=True)
  if r.returncode != 0: raise RuntimeError(f"benchmark run in {root} failed:\n{r.stderr[-3000:]}")
  return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--before", help="root of the checkout to compare against (e.g. a `git worktree` of main)")
  ap.add_argument("--rounds", type=int, default=3, help="fresh processes per checkout, alternating; best time kept (default 3)")
  ap.add_argument("--reps", type=int, default=3, help="timed runs per figure and process (default 3)")
  ap.add_argument("-n", type=int, default=1_000_000, help="elements of the bench_kernels kernels (default 1,000,000)")
  ap.add_argument("--wall", action="store_true", help="time wall-clock (perf_counter) instead of the process's CPU time")
  a = ap.parse_args()
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  roots = {"after": here} if a.before is None else {"before": os.path.abspath(a.before), "after": here}
  best: dict[str, dict[str, list[float]]] = {k: {} for k in roots}
  for _ in range(a.rounds):
    for k, root in roots.items():
      for fig, ts in measure(root, a.reps, a.n, "wall" if a.wall else "cpu").items():
        old = best[k].get(fig)
        best[k][fig] = ts if old is None else [min(x, y) for x, y in zip(old, ts)]
  print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; best of {a.rounds} rounds x {a.reps} runs; "
        f"{'wall' if a.wall else 'process CPU'} time")
  head = f"{'program':28s}" + "".join(f" {k + ' PY ms':>15s} {k + ' CPU ms':>15s} {k + ' PY/CPU':>14s}" for k in roots)
  print(head)
  for fig in best["after"]:
    row = f"{fig:28s}"
    for k in roots:
      py, cpu = best[k].get(fig, [float("nan")] * 2)
      row += f" {py * 1e3:15.2f} {cpu * 1e3:15.3f} {py / cpu:13.1f}x"
    print(row)


if __name__ == "__main__":
  main()
