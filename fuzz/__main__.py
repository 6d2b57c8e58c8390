"""`python -m fuzz [options]`: the differential fuzzer; `python -m fuzz replay FILE|DIR`: re-check saved findings.

Exit status: 0 when nothing was found (replay: every case passes now), 1 on any finding (replay: a case still
fails), 2 on bad options."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fuzz.case import Finding, Result
from fuzz.run import Fuzzer, Options


class _Parser(argparse.ArgumentParser):
  def error(self, message: str) -> None:   # one clear line, exit 2
    print(f"{self.prog}: error: {message}", file=sys.stderr)
    sys.exit(2)

def _positive(kind: type, what: str):
  def parse(text: str):
    try: v = kind(text)
    except ValueError: raise argparse.ArgumentTypeError(f"{what} must be a {kind.__name__}, got {text!r}") from None
    if v <= 0: raise argparse.ArgumentTypeError(f"{what} must be > 0, got {text!r}")
    return v
  return parse

def _shard(text: str) -> tuple[int, int]:
  try: i, n = (int(x) for x in text.split("/"))
  except ValueError: raise argparse.ArgumentTypeError(f"--shard must be I/N (e.g. 0/4), got {text!r}") from None
  if not (n >= 1 and 0 <= i < n): raise argparse.ArgumentTypeError(f"--shard I/N needs 0 <= I < N, got {text!r}")
  return i, n

def _targets(text: str) -> list[str]:
  ts = [t.strip().upper() for t in text.split(",") if t.strip()]
  bad = [t for t in ts if t not in ("CPU", "CUDA", "AMD")]
  if bad or not ts: raise argparse.ArgumentTypeError(f"--targets takes a comma list of CPU, CUDA, AMD; got {text!r}")
  return list(dict.fromkeys(ts))


def parser() -> argparse.ArgumentParser:
  ap = _Parser(prog="python -m fuzz", description="Random kernels x random Opts on every backend, bit-exact against the PYTHON reference.")
  lim = ap.add_mutually_exclusive_group()
  lim.add_argument("--seconds", type=_positive(float, "--seconds"), help="stop drawing cases after this many seconds (default 60 unless --cases)")
  lim.add_argument("--cases", type=_positive(int, "--cases"), help="check this many cases (rounded up to whole groups of 8)")
  ap.add_argument("--workers", type=_positive(int, "--workers"), default=max(1, os.cpu_count() or 1), help="worker processes (default: CPU count)")
  ap.add_argument("--seed", type=int, default=0, help="seed of the case stream (default 0); same seed and options, same cases")
  ap.add_argument("--devices", help="comma list of devices compared with PYTHON (default: every device that can be constructed, MOCKGPU=1 set)")
  ap.add_argument("--targets", type=_targets, default=["CPU", "CUDA", "AMD"], help="comma list of targets kernels are optimized for (default CPU,CUDA,AMD)")
  ap.add_argument("--corpus", type=Path, default=Path(__file__).with_name("corpus"), help="directory findings are saved to (default fuzz/corpus)")
  ap.add_argument("--json", type=Path, help="write a JSON report here")
  ap.add_argument("--junit", type=Path, help="write a JUnit XML report here")
  ap.add_argument("--shard", type=_shard, default=(0, 1), help="I/N: check only slice I of N of the case stream (CI matrices)")
  ap.add_argument("--depth", type=int, choices=range(0, 9), default=4, metavar="D", help="longest random Opt walk, 0..8 (default 4)")
  ap.add_argument("--case-timeout", type=_positive(float, "--case-timeout"), default=60.0, help="seconds a case may take before it is a 'timeout' finding (default 60)")
  ap.add_argument("--mix", choices=["default", "small"], default="default", help="case mix: default, or small (tiny random programs only, as bench/bench_fuzz.py measures)")
  ap.add_argument("--no-shrink", action="store_true", help="save findings as found, without shrinking them")
  ap.add_argument("--preload", action="append", default=[], help="module every worker imports first (a plugin; repeatable)")
  ap.add_argument("--quiet", action="store_true", help="no live display, only the final summary")
  return ap


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv and argv[0] == "replay": return replay(argv[1:])
  args = parser().parse_args(argv)
  os.environ.setdefault("MOCKGPU", "1")   # mock GPUs join the run as devices
  import importlib
  for m in args.preload:
    try: importlib.import_module(m)
    except ImportError as e: return _fail(f"--preload {m}: {e}")
  from refgrad.device import Device
  notes: list[str] = []
  if args.devices is not None:
    names = [d.strip() for d in args.devices.split(",") if d.strip()]
    try: devices = [Device.canonicalize(d) for d in names]
    except KeyError as e: return _fail(f"--devices: {e.args[0]}")
  else: devices = [d for d in Device.names if d != "PYTHON"]
  usable = []
  for d in dict.fromkeys(devices):
    if d == "PYTHON": continue   # the reference itself
    try: Device[d]
    except Exception as e:
      notes.append(f"device {d} skipped: it cannot be constructed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
      continue
    usable.append(d)
  from fuzz.models import load_models
  opts = Options(seed=args.seed, seconds=args.seconds if args.seconds or args.cases else 60.0, cases=args.cases, workers=args.workers,
                 devices=usable, targets=args.targets, corpus=args.corpus, shard=args.shard, depth=args.depth,
                 case_timeout=args.case_timeout, shrink=not args.no_shrink, preload=args.preload, mix=args.mix)
  from rich.console import Console
  from rich.live import Live

  from fuzz import report
  console = Console(width=None if sys.stdout.isatty() else 160)   # a log file gets the whole table
  f = Fuzzer(opts, load_models())
  f.notes = notes
  if args.quiet or not console.is_terminal: f.run()
  else:
    with Live(report.summary(f), console=console, refresh_per_second=4, transient=True) as live:
      f.on_update = lambda fz: live.update(report.summary(fz))
      f.run()
  console.print(report.summary(f, final=True))
  if args.json: report.write_json(f, args.json)
  if args.junit: report.write_junit(f, args.junit)
  return 1 if f.stats.findings else 0


def replay(argv: list[str]) -> int:
  ap = _Parser(prog="python -m fuzz replay", description="Re-check saved findings (a file, or every *.json in a directory) in an isolated worker.")
  ap.add_argument("path", type=Path, help="a finding's JSON file, or a directory of them")
  ap.add_argument("--devices", help="comma list of devices (default: the device each finding names, when it is not PYTHON, plus CPU)")
  ap.add_argument("--case-timeout", type=_positive(float, "--case-timeout"), default=60.0, help="seconds a case may take (default 60)")
  ap.add_argument("--preload", action="append", default=[], help="module the worker imports first (repeatable)")
  args = ap.parse_args(argv)
  if not args.path.exists(): return _fail(f"{args.path}: no such file or directory")
  files = sorted(args.path.glob("*.json")) if args.path.is_dir() else [args.path]
  still = 0
  for p in files:
    try: fd = Finding.load(p)
    except ValueError as e: return _fail(str(e))
    r = replay_finding(fd, args.devices.split(",") if args.devices else None, args.case_timeout, args.preload)
    same = r.status == "fail" and r.signature() == (fd.oracle, fd.device)
    still += r.status == "fail"
    print(f"{p}: {'FAILS (same failure)' if same else 'FAILS (differently)' if r.status == 'fail' else r.status}"
          f"{': ' + r.oracle + ' on ' + r.device + ': ' + r.detail if r.status == 'fail' else ''}")
  return 1 if still else 0


def replay_finding(fd: Finding, devices: list[str] | None = None, case_timeout: float = 60.0, preload: list[str] | None = None,
                   env: dict[str, str] | None = None) -> Result:
  """Check a saved finding's case again in an isolated worker: its Result."""
  os.environ.setdefault("MOCKGPU", "1")
  devs = devices if devices is not None else list(dict.fromkeys(["CPU", *([fd.device] if fd.device not in ("PYTHON", "worker") else [])]))
  f = Fuzzer(Options(devices=devs, case_timeout=case_timeout, preload=preload or [], workers=1, env=env or {}), [])
  try: return f.check_one(fd.case)
  finally:
    if f._spare is not None: f._spare.stop()


def _fail(msg: str) -> int:
  print(f"python -m fuzz: error: {msg}", file=sys.stderr)
  return 2


if __name__ == "__main__":
  sys.exit(main())
