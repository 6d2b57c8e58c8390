"""Runtime-level fuzzing (`python -m fuzz --level runtime`): random HCQ workloads on the mock NV and AMD GPUs against a
host model of the same work.

A workload (drawn from a seed, plain JSON) is a list of operations on a few live tensors: make a tensor from host data
on a device (a copy in), elementwise ops and sums (launches), moves between two GPUs and the host (copies, signals and
waits between queues and devices), `realize` without reading back (work left in flight), in-place `assign` (a buffer
written while earlier work may still read it), read-backs (a copy out: the compared point), injected faults (an integer
division by zero: the read must raise GPUFault, and the device must go on giving right answers), and TinyJit functions
captured and replayed with fresh inputs and with state given new contents between calls. Values are small integers
held in float32, kept within +-1000 (every sum and product is exact), so the model (numpy) gives the bits whatever the
order of the work; a difference, a hazard report (MOCKGPU_HAZARDS=1), an unexpected error, a missing fault or a hang
is a finding.

Workloads run in child processes, each with its own `MOCKGPU_ORDER=seed:N` (the mock GPUs' seeded interleaving of
ready queues and of overlapping launches), since the knobs are read when a device opens. Findings are saved as JSON
(`runtime-<hash>.json` in the corpus directory, default ./fuzz-corpus/runtime/, atomically) and shrunk by dropping operations.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fuzz.run import DEFAULT_CORPUS
from oracles.cliargs import OneLineParser, dir_problem, positive, seed
from refgrad import Tensor, TinyJit
from refgrad.device import Device, write_atomic
from refgrad.runtime.driver import GPUFault

DEVICES = ["NV", "NV:1", "AMD", "AMD:1"]
HOSTS = ["CPU", "PYTHON"]
LENGTHS = [1, 3, 16, 33, 100, 257]
BOUND = 1000.0
FORMAT = "refgrad.fuzz.runtime/1"
OPS = ["new", "unary", "bin", "sum", "move", "realize", "read", "assign", "fault", "jit", "fma"]
WEIGHTS = [2, 3, 4, 1, 3, 2, 3, 2, 0.4, 0.6, 1.5]


# ---- drawing a workload -------------------------------------------------------------------------------------------

def draw(seed: int, n_ops: int = 24, devices: list[str] | None = None) -> list[list[Any]]:
  """A workload: [op, args...] rows; register numbers are resolved modulo the live registers when it runs."""
  rng = np.random.default_rng(seed)
  devs = devices or DEVICES
  p = np.array(WEIGHTS) / sum(WEIGHTS)
  ops: list[list[Any]] = [["new", devs[int(rng.integers(len(devs)))], LENGTHS[int(rng.integers(len(LENGTHS)))], int(rng.integers(1 << 30))]]
  for _ in range(n_ops):
    op = OPS[int(rng.choice(len(OPS), p=p))]
    r = [int(x) for x in rng.integers(0, 1 << 16, 3)]
    if op == "new": ops.append([op, devs[r[0] % len(devs)], LENGTHS[r[1] % len(LENGTHS)], int(rng.integers(1 << 30))])
    elif op == "move": ops.append([op, r[0], (devs + HOSTS)[r[1] % (len(devs) + len(HOSTS))]])
    elif op in ("fault", "jit"): ops.append([op, devs[r[0] % len(devs)], r[1], int(rng.integers(1 << 30))])
    else: ops.append([op, *r])
  return ops


# ---- running one against the model ---------------------------------------------------------------------------------

_UNARY = [("x+1", lambda x: x + 1, lambda x: x + 1), ("x*2", lambda x: x * 2, lambda x: x * 2), ("-x", lambda x: -x, lambda x: -x),
          ("relu", lambda x: x.relu(), lambda x: np.maximum(x, 0)), ("x*x", lambda x: x * x, lambda x: x * x)]
_BIN = [("+", lambda a, b: a + b, lambda a, b: a + b), ("-", lambda a, b: a - b, lambda a, b: a - b), ("*", lambda a, b: a * b, lambda a, b: a * b),
        ("max", lambda a, b: a.maximum(b), np.maximum), ("where", lambda a, b: (a < b).where(a, b), lambda a, b: np.where(a < b, a, b))]

def _clip(t: Any) -> Any: return t.maximum(-BOUND).minimum(BOUND)
def _mclip(x: np.ndarray) -> np.ndarray: return np.clip(x, -BOUND, BOUND).astype(np.float32)

def _host(n: int, seed: int) -> np.ndarray: return np.random.default_rng(seed).integers(-9, 10, n).astype(np.float32)


class RuntimeFinding(Exception):
  pass


def run(ops: list[list[Any]]) -> dict[str, Any]:
  """Run a workload on refgrad (MOCKGPU=1; the order knob as the environment says) and the model side by side.
  Returns {"status": "pass"} or {"status": "fail", "step": i, "detail": ...}."""
  regs: list[tuple[Any, np.ndarray]] = []
  def pick(r: int, n: int | None = None) -> int | None:
    idx = [i for i, (_, m) in enumerate(regs) if n is None or m.size == n]
    return idx[r % len(idx)] if idx else None
  def sync_all() -> None:
    for d in {Device.canonicalize(t.device) for t, _ in regs}: Device[d].synchronize()
  step = -1
  try:
    for step, (op, *a) in enumerate(ops):  # noqa: B007  (step names the failing operation)
      if op == "new":
        h = _host(a[1], a[2])
        regs.append((Tensor(h, device=a[0]), h))
        continue
      if not regs: continue
      if op == "unary":
        i = pick(a[0])
        _, f, g = _UNARY[a[1] % len(_UNARY)]
        regs[i] = (_clip(f(regs[i][0])), _mclip(g(regs[i][1])))
      elif op == "bin":
        i = pick(a[0])
        j = pick(a[1], regs[i][1].size)
        t, m = regs[i]
        u, mu = regs[j]
        if u.device != t.device: u = u.to(t.device)
        _, f, g = _BIN[a[2] % len(_BIN)]
        regs.append((_clip(f(t, u)), _mclip(g(m, mu))))
      elif op == "fma":   # three inputs and an output: more kernel arguments (their offsets in the argument area)
        i = pick(a[0])
        j, k = pick(a[1], regs[i][1].size), pick(a[2], regs[i][1].size)
        t, m = regs[i]
        us = [u if u.device == t.device else u.to(t.device) for u in (regs[j][0], regs[k][0])]
        regs.append((_clip(t * us[0] + us[1] * 3), _mclip(m * regs[j][1] + regs[k][1] * 3)))
      elif op == "sum":
        i = pick(a[0])
        t, m = regs[i]
        regs.append(((t.sum() * (1.0 / 256)).reshape(1), np.array([np.float32(m.sum()) * np.float32(1 / 256)], np.float32)))   # exact: a power of two
      elif op == "move":
        i = pick(a[0])
        regs[i] = (regs[i][0].to(a[1]), regs[i][1])
      elif op == "realize":
        regs[pick(a[0])][0].realize()
      elif op == "read":
        i = pick(a[0])
        got = regs[i][0].numpy()
        if got.tobytes() != regs[i][1].tobytes():
          j = int(np.argmax(got.reshape(-1) != regs[i][1].reshape(-1)))
          raise RuntimeFinding(f"read of a tensor of {regs[i][1].size} on {regs[i][0].device}: element {j} is {got.reshape(-1)[j]!r}, the model's {regs[i][1][j]!r}")
      elif op == "assign":
        i = pick(a[0])
        j = pick(a[1], regs[i][1].size)
        t, m = regs[i]
        u, mu = regs[j]
        if u.device != t.device: u = u.to(t.device)
        t.assign(_clip(t + u)).realize()
        regs[i] = (t, _mclip(m + mu))
      elif op == "fault":
        sync_all()   # nothing of the model's in flight behind the fault (a fault drops the work queued behind it)
        n = 1 + a[1] % 40
        x = Tensor(np.arange(1, n + 1, dtype=np.int32), device=a[0])
        z = np.ones(n, np.int32)
        z[a[2] % n] = 0
        r = ((x // Tensor(z, device=a[0])).contiguous() * 3).sum().realize()   # queued, not waited for
        hb = _host(n, a[2])
        behind = (Tensor(hb, device=a[0]) * 2 + 1).realize()                       # queued behind the faulting work
        try:
          r.item()
          raise RuntimeFinding(f"an integer division by zero on {a[0]} gave no GPUFault")
        except GPUFault: pass
        try: got = behind.numpy()   # dropped work must raise when read, naming the fault; never give wrong values silently
        except GPUFault: got = None
        except RuntimeError as e:
          if "dropped by the GPU fault" not in str(e): raise
          got = None
        if got is not None and got.tobytes() != (hb * 2 + 1).tobytes():
          raise RuntimeFinding(f"work queued behind a fault on {a[0]} was read without an error and is wrong: {got[:4]!r}...")
      elif op == "jit":
        _jit(a[0], a[1], a[2])
  except RuntimeFinding as e: return {"status": "fail", "step": step, "detail": str(e)}
  except Exception as e:
    return {"status": "fail", "step": step, "detail": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:400]}"}
  return {"status": "pass"}


def _jit(device: str, r: int, seed: int) -> None:
  """A TinyJit function of an input and a state tensor it rebinds (w.assign(w + x), then an output from x and w),
  called 5 times with fresh inputs; the state also gets new contents from outside before some calls (weights loaded);
  every output and the state compared with the model at once (an output is valid until the next call)."""
  rng = np.random.default_rng(seed)
  n = LENGTHS[r % len(LENGTHS)]
  k1, k2 = _UNARY[r % len(_UNARY)], _BIN[(r >> 3) % len(_BIN)]
  w_host = _host(n, seed + 1)
  w = Tensor(w_host, device=device).realize()
  @TinyJit
  def f(x: Tensor) -> Tensor:
    w.assign(_clip(w + x)).realize()
    return _clip(k2[1](_clip(k1[1](x)), w)).realize()
  for call in range(5):
    if call and rng.random() < 0.3:
      w_host = _host(n, seed + 10 + call)
      w.assign(Tensor(w_host, device=device)).realize()
    xh = _host(n, seed + 100 + call)
    got = f(Tensor(xh, device=device)).numpy()
    w_host = _mclip(w_host + xh)
    want = _mclip(k2[2](_mclip(k1[2](xh)), w_host))
    for what, g, m in (("output", got, want), ("state", w.numpy(), w_host)):
      if g.tobytes() != m.tobytes():
        j = int(np.argmax(g.reshape(-1) != m.reshape(-1)))
        raise RuntimeFinding(f"TinyJit call {call} ({k1[0]} then {k2[0]} with state, {n} elements on {device}): {what} element {j} is {g[j]!r}, the model's {m[j]!r}")


# ---- child processes, findings, shrinking --------------------------------------------------------------------------

def _child_env(order: int, preload: list[str], env: dict[str, str] | None) -> dict[str, str]:
  root = str(Path(__file__).resolve().parents[1])
  e = {**os.environ, **(env or {}), "MOCKGPU": "1", "MOCKGPU_HAZARDS": "1", "MOCKGPU_ORDER": f"seed:{order}",
       "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""), "FUZZ_RUNTIME_PRELOAD": ",".join(preload)}
  return e

def run_in_child(workloads: list[list[list[Any]]], order: int, preload: list[str] | None = None, env: dict[str, str] | None = None,
                 timeout: float = 120.0) -> list[dict[str, Any]]:
  """Run workloads in one fresh process under MOCKGPU_ORDER=seed:<order>; a crash or hang fails the workload it was in
  (the rest are not run)."""
  proc = subprocess.run([sys.executable, "-m", "fuzz.runtime_level", "--child"], input=json.dumps(workloads), capture_output=True, text=True,
                        env=_child_env(order, preload or [], env), timeout=None if timeout is None else timeout * max(1, len(workloads)))
  out = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
  if len(out) < len(workloads):
    why = f"the child process died (exit {proc.returncode}): {(proc.stderr.strip().splitlines() or [''])[-1][:300]}"
    out.append({"status": "fail", "step": -1, "detail": why})
  return out

def _child_main() -> int:
  for m in filter(None, os.environ.get("FUZZ_RUNTIME_PRELOAD", "").split(",")): importlib.import_module(m)
  for w in json.loads(sys.stdin.read()):
    print(json.dumps(run(w)), flush=True)
  return 0


def shrink(ops: list[list[Any]], order: int, detail: str, preload: list[str], env: dict[str, str] | None, budget: int = 8) -> list[list[Any]]:
  """Drop operations while the workload still fails: each round tries every removal of `chunk` operations in ONE
  child (a process start and the compiles are most of the cost) and keeps the first failing one; chunks halve when
  none fails. At most `budget` child runs; the result is re-checked in a fresh child (candidates run after a failing
  one might fail only because of it), falling back to the last one that failed on its own."""
  cur, good, runs = list(ops), list(ops), 0
  chunk = max(1, len(cur) // 2)
  while runs < budget and len(cur) > 1:
    cands = [cur[:i] + cur[i + chunk:] for i in range(1, len(cur), chunk)]   # the first "new" stays
    res = run_in_child(cands, order, preload, env)
    runs += 1
    hit = next((c for c, r in zip(cands, res) if r["status"] == "fail"), None)
    if hit is not None: cur = hit
    elif chunk == 1: break
    else: chunk = max(1, chunk // 2)
    if hit is not None and runs % 3 == 0 and runs < budget:
      runs += 1
      if run_in_child([cur], order, preload, env)[0]["status"] == "fail": good = cur
      else: cur = good
  if cur is not good and run_in_child([cur], order, preload, env)[0]["status"] == "fail": good = cur
  return good


def save(corpus: Path, finding: dict[str, Any]) -> Path:
  body = json.dumps(finding, indent=1, sort_keys=True)
  path = corpus / f"runtime-{hashlib.sha256(json.dumps(finding['workload']).encode()).hexdigest()[:12]}.json"
  corpus.mkdir(parents=True, exist_ok=True)
  write_atomic(path, body.encode())
  return path

def load(path: Path) -> dict[str, Any]:
  doc = json.loads(Path(path).read_text())
  if doc.get("format") != FORMAT or not isinstance(doc.get("workload"), list) or not isinstance(doc.get("order"), int):
    raise ValueError(f"{path}: not a runtime finding ({FORMAT} with a workload list and an int order)")
  return doc


def fuzz(seed: int = 0, seconds: float | None = 60.0, cases: int | None = None, corpus: Path | None = None, preload: list[str] | None = None,
         env: dict[str, str] | None = None, per_child: int = 6, do_shrink: bool = True, quiet: bool = False) -> dict[str, Any]:
  """The runtime-level run: batches of workloads, each batch in a child with its own order seed. Returns a summary."""
  t0 = time.monotonic()
  done, findings, k = 0, [], 0
  shrunk_kinds: set[str] = set()   # one finding of each kind (the detail's first word: GPUHazard, TinyJit, ...) is shrunk
  preload = preload or []
  while (cases is None or done < cases) and (seconds is None or time.monotonic() - t0 < seconds):
    n = per_child if cases is None else min(per_child, cases - done)
    batch = [draw(seed * 1_000_003 + k * per_child + i) for i in range(n)]
    order = seed * 7919 + k
    res = run_in_child(batch, order, preload, env)
    for w, r in zip(batch, res):
      done += 1
      if r["status"] != "fail": continue
      f = {"format": FORMAT, "oracle": "runtime", "order": order, "workload": w, "detail": r["detail"], "step": r["step"],
           "seconds": round(time.monotonic() - t0, 2)}
      if do_shrink and (kind := r["detail"].split(":")[0].split(" ")[0]) not in shrunk_kinds:
        shrunk_kinds.add(kind)
        f["shrunk"] = shrink(w, order, r["detail"], preload, env)
      if corpus is not None: f["path"] = str(save(corpus, f))
      findings.append(f)
      if not quiet: print(f"runtime finding ({len(f.get('shrunk', w))} ops, order seed:{order}): {r['detail']}", flush=True)
    k += 1
  summary = {"workloads": done, "findings": findings, "seconds": round(time.monotonic() - t0, 1)}
  if not quiet: print(f"runtime level: {done} workloads in {summary['seconds']} s, {len(findings)} findings")
  return summary


def main(argv: list[str]) -> int:
  """`python -m fuzz --level runtime [--seconds S | --cases N] [--seed N] [--corpus DIR] [--no-shrink] [--preload M]`;
  `python -m fuzz --level runtime --replay FILE`."""
  ap = OneLineParser(prog="python -m fuzz --level runtime", description="Random HCQ workloads on the mock GPUs against a host model.")
  lim = ap.add_mutually_exclusive_group()
  lim.add_argument("--seconds", type=positive(float, "--seconds"))
  lim.add_argument("--cases", type=positive(int, "--cases"))
  ap.add_argument("--seed", type=seed, default=0)
  ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS / "runtime",
                  help=f"directory runtime findings are saved to (default ./{DEFAULT_CORPUS}/runtime, in the current directory: apart from the kernel findings `replay` reads)")
  ap.add_argument("--no-shrink", action="store_true")
  ap.add_argument("--preload", action="append", default=[])
  ap.add_argument("--quiet", action="store_true")
  ap.add_argument("--replay", type=Path, help="re-run a saved runtime finding (its shrunk workload) under its order: exit 1 if it still fails")
  args = ap.parse_args(argv)
  if args.replay is not None:
    try: doc = load(args.replay)
    except (OSError, ValueError) as e:
      print(f"python -m fuzz: error: {e}", file=sys.stderr)
      return 2
    r = run_in_child([doc.get("shrunk") or doc["workload"]], doc["order"], args.preload)[0]
    print(f"{args.replay}: {r['status']}" + (f" ({r['detail']})" if r["status"] == "fail" else ""))
    return 1 if r["status"] == "fail" else 0
  if (why := dir_problem(args.corpus, "--corpus")):
    print(f"python -m fuzz: error: {why}", file=sys.stderr)
    return 2
  _ = argparse
  s = fuzz(args.seed, args.seconds if args.seconds or args.cases else 60.0, args.cases, args.corpus, args.preload, do_shrink=not args.no_shrink, quiet=args.quiet)
  return 1 if s["findings"] else 0


if __name__ == "__main__":
  if sys.argv[1:] == ["--child"]: sys.exit(_child_main())
  sys.exit(main(sys.argv[1:]))
