"""`python -m fuzz [options]`: the differential fuzzer; `python -m fuzz replay FILE|DIR`: re-check saved findings.

Exit status: 0 when nothing was found (replay: every case passes now), 1 on any finding (replay: a case still
fails), 2 on bad options (one line, before any work starts; replay: also a finding file that cannot be read, after the
others were replayed), 130 when interrupted (Ctrl-C: the summary and reports of what was done are still written)."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.live import Live

from fuzz import report, runtime_level
from fuzz.merge import main as merge
from fuzz.run import CASE_TIMEOUT, DEFAULT_CORPUS, SHRINK_SECONDS, Fuzzer, Options
from fuzz.runtime_level import main as runtime_main
from fuzz.worker import Worker
from oracles.case import Finding, Result
from oracles.cliargs import OneLineParser, cpus, dir_problem, file_problem, positive, seed
from oracles.models import load_models
from refgrad.device import Device

_Parser = OneLineParser
_positive = positive

def _shard(text: str) -> tuple[int, int]:
  try: i, n = (int(x) for x in text.split("/"))
  except ValueError: raise argparse.ArgumentTypeError(f"--shard must be I/N (e.g. 0/4), got {text!r}") from None
  if not (n >= 1 and 0 <= i < n): raise argparse.ArgumentTypeError(f"--shard I/N needs 0 <= I < N, got {text!r}")
  return i, n

# the default mix also runs runtime-level workloads (fuzz/runtime_level.py): this share of a --seconds run's time, first;
# a --cases run: one workload per RUNTIME_EVERY kernel cases. --runtime-share 0 leaves them out.
RUNTIME_SHARE = 0.1
RUNTIME_EVERY = 64
RUNTIME_MIN_SECONDS = 3.0   # a shorter share is left out: one child process of 3 workloads takes a few seconds

def _share(text: str) -> float:
  try: x = float(text)
  except ValueError: x = -1.0
  if not 0.0 <= x < 1.0: raise argparse.ArgumentTypeError(f"--runtime-share takes a fraction in [0, 1), got {text!r}")
  return x

def _targets(text: str) -> list[str]:
  ts = [t.strip().upper() for t in text.split(",") if t.strip()]
  bad = [t for t in ts if t not in ("CPU", "CUDA", "AMD")]
  if bad or not ts: raise argparse.ArgumentTypeError(f"--targets takes a comma list of CPU, CUDA, AMD; got {text!r}")
  return list(dict.fromkeys(ts))


def _level(argv: list[str]) -> tuple[str, list[str]] | None:
  """`--level kernel|runtime` (default kernel: kernels, programs, gradients) and the other arguments; None after
  printing the error line."""
  if "--level" not in argv: return "kernel", argv
  i = argv.index("--level")
  if i + 1 >= len(argv) or argv[i + 1] not in ("kernel", "runtime"):
    print("python -m fuzz: error: --level takes kernel or runtime", file=sys.stderr)
    return None
  return argv[i + 1], argv[:i] + argv[i + 2:]


def parser() -> argparse.ArgumentParser:
  ap = _Parser(prog="python -m fuzz", description="Random kernels x random Opts on every backend, bit-exact against the PYTHON reference.")
  lim = ap.add_mutually_exclusive_group()
  lim.add_argument("--seconds", type=_positive(float, "--seconds"), help="the whole run's wall time, shrinking included (default 60 unless --cases)")
  lim.add_argument("--cases", type=_positive(int, "--cases"), help="check this many cases (rounded up to whole groups of 8)")
  ap.add_argument("--workers", type=_positive(int, "--workers"), default=cpus(), help="worker processes (default and most: the CPUs this process may use)")
  ap.add_argument("--seed", type=seed, default=0, help="seed of the case stream (default 0); same seed and options, same cases")
  ap.add_argument("--devices", help="comma list of devices compared with PYTHON (default: every device that can be constructed, MOCKGPU=1 set)")
  ap.add_argument("--targets", type=_targets, default=["CPU", "CUDA", "AMD"], help="comma list of targets kernels are optimized for (default CPU,CUDA,AMD)")
  ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help=f"directory findings are saved to (default ./{DEFAULT_CORPUS}, in the current directory)")
  ap.add_argument("--json", type=Path, help="write a JSON report here")
  ap.add_argument("--junit", type=Path, help="write a JUnit XML report here")
  ap.add_argument("--shard", type=_shard, default=(0, 1), help="I/N: check only slice I of N of the case stream (CI matrices)")
  ap.add_argument("--depth", type=int, choices=range(0, 9), default=4, metavar="D", help="longest random Opt walk, 0..8 (default 4)")
  ap.add_argument("--exclude", action="append", default=[], metavar="D", help="leave device D out of the default list (repeatable)")
  ap.add_argument("--case-timeout", type=_positive(float, "--case-timeout"), default=CASE_TIMEOUT,
                  help=f"seconds a case may take before it is a 'timeout' finding (default {CASE_TIMEOUT:g})")
  ap.add_argument("--shrink-seconds", type=_positive(float, "--shrink-seconds"), default=SHRINK_SECONDS,
                  help=f"the most seconds one finding's shrinking may take (default {SHRINK_SECONDS:g}; --seconds bounds the whole run, shrinking included)")
  ap.add_argument("--mix", choices=["default", "small"], default="default", help="case mix: default, or small (tiny random programs only, as bench/bench_fuzz.py measures)")
  ap.add_argument("--runtime-share", type=_share, default=RUNTIME_SHARE,
                  help=f"share of a --seconds run spent first on runtime-level workloads (default {RUNTIME_SHARE:g}; a --cases run: one per "
                       f"{RUNTIME_EVERY} cases; 0: none), findings in CORPUS/runtime")
  ap.add_argument("--no-shrink", action="store_true", help="save findings as found, without shrinking them")
  ap.add_argument("--preload", action="append", default=[], help="module every worker imports first (a plugin; repeatable)")
  ap.add_argument("--quiet", action="store_true", help="no live display, only the final summary")
  return ap


def main(argv: list[str] | None = None) -> int:
  try: return _main(sys.argv[1:] if argv is None else argv)
  except KeyboardInterrupt:   # Ctrl-C before or after the run (the run itself stops cleanly and reports: Fuzzer.run)
    print("python -m fuzz: interrupted", file=sys.stderr)
    return 130

def _main(argv: list[str]) -> int:
  if argv and argv[0] == "replay": return replay(argv[1:])
  if argv and argv[0] == "merge":
    return merge(argv[1:])
  if (level := _level(argv)) is None: return 2
  if level[0] == "runtime":   # random HCQ workloads on the mock GPUs against a host model (fuzz/runtime_level.py)
    return runtime_main(level[1])
  argv = level[1]
  args = parser().parse_args(argv)
  os.environ.setdefault("MOCKGPU", "1")   # mock GPUs join the run as devices
  if (why := _preload(args.preload)): return _fail(why)
  notes: list[str] = []
  if args.workers > (n := cpus()):
    notes.append(f"--workers {args.workers} capped at {n}, the CPUs this process may use")
    print(f"python -m fuzz: note: {notes[-1]}", file=sys.stderr)
    args.workers = n
  if (devices := _devices(args.devices, notes, args.exclude, args.preload)) is None: return 2
  # the reports first: checking --corpus makes the directory
  if (why := file_problem(args.json, "--json") or file_problem(args.junit, "--junit") or dir_problem(args.corpus, "--corpus")): return _fail(why)
  seconds = args.seconds if args.seconds or args.cases else 60.0
  rt = _runtime_part(args, seconds)
  if rt is not None and seconds is not None: seconds = max(1e-3, seconds - rt["seconds"])   # --seconds bounds both parts
  opts = Options(seed=args.seed, seconds=seconds, cases=args.cases, workers=args.workers,
                 devices=devices, targets=args.targets, corpus=args.corpus, shard=args.shard, depth=args.depth,
                 case_timeout=args.case_timeout, shrink=not args.no_shrink, preload=args.preload, mix=args.mix, shrink_seconds=args.shrink_seconds)
  console = Console(width=None if sys.stdout.isatty() else 160)   # a log file gets the whole table
  f = Fuzzer(opts, load_models())
  f.notes = notes
  f.runtime_level = rt
  if rt is not None:
    f.notes.append(f"runtime level (--runtime-share {args.runtime_share:g}): {rt['workloads']} workloads in {rt['seconds']} s, {len(rt['findings'])} findings"
                   + "".join(f"\n  runtime finding: {x.get('path', '')}: {x['detail'][:200]}" for x in rt["findings"]))
  if args.quiet or not console.is_terminal: f.run()
  else:
    with Live(report.summary(f), console=console, refresh_per_second=4, transient=True) as live:
      f.on_update = lambda fz: live.update(report.summary(fz))
      f.run()
  console.print(report.summary(f, final=True))
  if args.json: report.write_json(f, args.json)
  if args.junit: report.write_junit(f, args.junit)
  for x in f.stats.findings: console.print(f"rerun: {x['rerun']}", markup=False, highlight=False)
  return 130 if f.interrupted else 1 if f.stats.findings or (rt and rt["findings"]) or any(n.startswith("FAILED") for n in notes) else 0


def _runtime_part(args: argparse.Namespace, seconds: float | None) -> dict | None:
  """The default mix's runtime-level workloads (before the kernel level, which gets the rest of --seconds); None when off."""
  if args.runtime_share <= 0 or args.devices is not None or args.mix != "default": return None   # --devices names the kernel level's devices
  n = None if args.cases is None else args.cases // RUNTIME_EVERY
  if n == 0 or (n is None and seconds is not None and seconds * args.runtime_share < RUNTIME_MIN_SECONDS): return None
  return runtime_level.fuzz(args.seed, None if n is not None or seconds is None else seconds * args.runtime_share, n, args.corpus / "runtime",
                            args.preload, per_child=3, do_shrink=not args.no_shrink, quiet=True)


def _preload(modules: list[str]) -> str | None:
  """Import the --preload plugins here first: one that fails is one line now, not a crash in every worker."""
  for m in modules:
    try: importlib.import_module(m)
    except Exception as e: return f"--preload {m}: {type(e).__name__}: {e}"
  return None


# registered devices left out of the default device list (named with --devices, they are fuzzed), and why. None now:
# NV_NVCC is in since its kernels compile in one nvcc call per worker batch (Compiler.compile_batch), about 20% of a
# cold default run's time (README "Throughput")
NOT_BY_DEFAULT: dict[str, str] = {}

def _devices(text: str | None, notes: list[str], exclude: list[str], preload: list[str]) -> list[str] | None:
  """The devices compared with PYTHON: those named (each must be constructible: a bad one is one line, None), or by
  default every registered one but the excluded; one of those that cannot be constructed is a loud FAILED line (in the
  notes and on stderr; the run's exit status is 1). Devices are built in a worker process, never in this one."""
  for why in Device.refused.values(): print(f"python -m fuzz: REFUSED: {why}", file=sys.stderr)
  try: excluded = {Device.canonicalize(d) for d in exclude}
  except KeyError as e:
    _fail(f"--exclude: {e.args[0]}")
    return None
  if text is not None:
    names = [d.strip() for d in text.split(",") if d.strip()]
    if not names:
      _fail(f"--devices takes a comma list of devices, got {text!r}")
      return None
    try: devices = [d for d in dict.fromkeys(Device.canonicalize(d) for d in names) if d != "PYTHON"]   # PYTHON is the reference itself
    except KeyError as e:
      _fail(f"--devices: {e.args[0]}")
      return None
    for why in construct_problems(devices, preload).values():
      _fail(f"--devices: {why}")
      return None
    return devices
  left_out = {d: why for d in Device.names if d not in excluded and (why := Device.unavailable(d) or Device.duplicate(d))}
  candidates = [d for d in Device.names if d != "PYTHON" and d not in excluded and d not in NOT_BY_DEFAULT and d not in left_out]
  notes += [f"device {d} is not in the default list: {NOT_BY_DEFAULT[d]}" for d in NOT_BY_DEFAULT if d in Device.names and d not in excluded]
  notes += [f"device {d} is left out: {why}" for d, why in left_out.items()]
  problems = construct_problems(candidates, preload)
  for d, why in problems.items():
    notes.append(f"FAILED: {why} (leave it out with --exclude {d})")
    print(f"python -m fuzz: {notes[-1]}", file=sys.stderr)
  return [d for d in candidates if d not in problems]


def construct_problems(devices: list[str], preload: list[str]) -> dict[str, str]:
  """{device: the one line saying why it cannot be constructed}, each tried in a worker process of its own."""
  ws = {d: Worker({"env": {"MOCKGPU": os.environ.get("MOCKGPU", "1")}, "devices": [], "models": False, "preload": preload}) for d in devices}
  out = {}
  for d, w in ws.items():
    w.send("construct", [d], 120)
    try: st, why = w.conn.recv() if w.conn.poll(120) else ("timeout", f"device {d} cannot be constructed (no answer within 120 s)")
    except (EOFError, OSError):
      w.proc.join(5)
      st, why = "died", f"device {d} cannot be constructed (the worker building it {w.exitcode_text()})"
    if st != "ok" or why: out[d] = why
    w.kill() if st != "ok" else w.stop()
  return out


def replay(argv: list[str]) -> int:
  ap = _Parser(prog="python -m fuzz replay", description="Re-check saved findings (a file, or every *.json in a directory) in an isolated worker.")
  ap.add_argument("path", type=Path, help="a finding's JSON file, or a directory of them")
  ap.add_argument("--devices", help="comma list of devices (default: the device each finding names, when it is not PYTHON, plus CPU)")
  ap.add_argument("--case-timeout", type=_positive(float, "--case-timeout"), default=CASE_TIMEOUT, help=f"seconds a case may take (default {CASE_TIMEOUT:g})")
  ap.add_argument("--preload", action="append", default=[], help="module the worker imports first (repeatable)")
  args = ap.parse_args(argv)
  if not args.path.exists(): return _fail(f"{args.path}: no such file or directory")
  files = sorted(args.path.glob("*.json")) if args.path.is_dir() else [args.path]
  if not files: return _fail(f"{args.path}: no findings (*.json) to replay in this directory")
  os.environ.setdefault("MOCKGPU", "1")
  if (why := _preload(args.preload)): return _fail(why)
  devices = None
  if args.devices is not None and (devices := _devices(args.devices, [], [], args.preload)) is None: return 2
  still, unreadable = 0, 0
  for p in files:
    try: fd = Finding.load(p)
    except ValueError as e:   # one bad file is reported; the others are still replayed
      print(f"{p}: UNREADABLE: {e}")
      unreadable += 1
      continue
    r = replay_finding(fd, devices, args.case_timeout, args.preload)
    same = r.status == "fail" and r.signature()[:2] == fd.signature()[:2] and fd.dtype in ("", r.dtype)
    still += r.status == "fail"
    print(f"{p}: {'FAILS (same failure)' if same else 'FAILS (differently)' if r.status == 'fail' else r.status}"
          f"{': ' + r.oracle + ' on ' + r.device + ': ' + r.detail if r.status == 'fail' else ''}"
          f"{'; first difference: ' + report.first_diff_text(r.first_diff) if r.first_diff else ''}")
  if len(files) > 1 or unreadable:
    print(f"{len(files)} files: {still} still fail, {len(files) - still - unreadable} pass, {unreadable} could not be read")
  return 2 if unreadable else 1 if still else 0


def replay_finding(fd: Finding, devices: list[str] | None = None, case_timeout: float = CASE_TIMEOUT, preload: list[str] | None = None,
                   env: dict[str, str] | None = None) -> Result:
  """Check a saved finding's case again in an isolated worker: its Result."""
  os.environ.setdefault("MOCKGPU", "1")
  named = [d for d in fd.device.split("+") if d not in ("PYTHON", "worker", "")]   # "A+B": it failed only with both in one worker
  devs = devices if devices is not None else list(dict.fromkeys(["CPU", *named]))
  f = Fuzzer(Options(devices=devs, case_timeout=case_timeout, preload=preload or [], workers=1, env=env or {}), [])
  try:
    r = f.check_one(fd.case)
    if r.status == "fail" and r.oracle == "device": r.first_diff = f.first_diff(r)
    return r
  finally: f.close()


def _fail(msg: str) -> int:
  print(f"python -m fuzz: error: {msg}", file=sys.stderr)
  return 2


if __name__ == "__main__":
  sys.exit(main())
