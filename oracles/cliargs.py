"""What `python -m fuzz` and `python -m conformance` check before any work starts: a parser whose errors are one line
(exit 2), number types that refuse NaN, inf and negatives, paths the run will write to, the CPUs a run may use, and
the devices named on the command line. Each check answers with the one line to print, so a bad argument never costs a
run (or its findings and reports)."""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


class OneLineParser(argparse.ArgumentParser):
  def error(self, message: str) -> None:   # one clear line, exit 2 (argparse prints the whole usage first)
    print(f"{self.prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def positive(kind: type, what: str) -> Callable[[str], Any]:
  """An argparse type: a finite number > 0 (NaN, inf, 0 and negatives are refused)."""
  def parse(text: str) -> Any:
    try: v = kind(text)
    except ValueError: raise argparse.ArgumentTypeError(f"{what} must be {'an int' if kind is int else 'a number'}, got {text!r}") from None
    if not (math.isfinite(v) and v > 0): raise argparse.ArgumentTypeError(f"{what} must be > 0 and finite, got {text!r}")
    return v
  return parse

def seed(text: str) -> int:
  """An argparse type: a seed, an int >= 0 (numpy's seed sequences take no negatives)."""
  try: v = int(text)
  except ValueError: raise argparse.ArgumentTypeError(f"the seed must be an int >= 0, got {text!r}") from None
  if v < 0: raise argparse.ArgumentTypeError(f"the seed must be an int >= 0, got {text!r}")
  return v


def cpus() -> int:
  """The CPUs this process may run on."""
  try: return max(1, len(os.sched_getaffinity(0)))
  except AttributeError: return max(1, os.cpu_count() or 1)


def _dir_why(path: Path) -> str | None:
  if path.exists() and not path.is_dir(): return "exists and is not a directory"
  try:
    path.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=path, prefix=".write-probe.")
    os.close(fd)
    os.unlink(probe)
  except OSError as e: return f"cannot write there ({e.strerror or e})"
  return None

def dir_problem(path: Path, what: str) -> str | None:
  """None when files can be created in directory `path` (made when missing), else the one line saying why not."""
  return f"{what} {path}: {why}" if (why := _dir_why(path)) else None

def file_problem(path: Path | None, what: str) -> str | None:
  """None when a report can be written atomically to `path` (a temp file in its directory, then a rename), else why not."""
  if path is None: return None
  if path.is_dir(): return f"{what} {path}: is a directory, not a file"
  return f"{what} {path}: its directory {path.parent} {why}" if (why := _dir_why(path.parent)) else None


def device_problem(name: str, what: str = "") -> str | None:
  """None when device `name` can be constructed here, else the one line saying why not (the backend's own first line:
  e.g. the mock GPUs say to set MOCKGPU=1)."""
  # here, not at the top: `python -m conformance` imports this module before it checks the knobs refgrad reads when imported
  from refgrad.device import Device
  try: Device[name]
  except Exception as e:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{what + ': ' if what else ''}device {name} cannot be constructed ({type(e).__name__}: {first})"
  return None
