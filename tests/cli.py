"""Running a project entry point (`python -m fuzz`, `python -m conformance`) as a subprocess, the way a user does."""
from __future__ import annotations

import os
import subprocess
import sys


def run_module(module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
  """`python -m module args...` with captured text output, never raising on a nonzero exit; env adds to (or overrides) os.environ."""
  return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, check=False, timeout=timeout,
                        env={**os.environ, **(env or {})})

def start_module(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
  """`python -m module args...` started in its own process group (so a test can send it a terminal's Ctrl-C), text pipes on stdout/stderr."""
  return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          env={**os.environ, **(env or {})})
