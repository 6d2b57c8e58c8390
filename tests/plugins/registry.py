"""Registering test backends the way a pip-installed plugin does: a *.dist-info directory with an entry_points.txt,
on PYTHONPATH, so `python -m conformance` / `python -m fuzz` and their worker processes all find the same entry points."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).parents[2]
BAD = {"FASTCPU": "tests.plugins.bad_backends:fast_cpu", "SEGV": "tests.plugins.bad_backends:segfault_cpu",
       "HANG": "tests.plugins.bad_backends:hang_cpu", "RAISES": "tests.plugins.bad_backends:raising",
       "WRONGTYPE": "tests.plugins.bad_backends:wrong_type",
       "BROKEN": "tests.conformance.broken_device"}

def install(directory: Path, entries: dict[str, str] | None = None, name: str = "refgrad_test_plugins") -> dict[str, str]:
  """Write the entry points into `directory` (a site directory of its own); the environment that puts it on PYTHONPATH."""
  info = directory / f"{name}-0.0.dist-info"
  info.mkdir(parents=True, exist_ok=True)
  (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0\n")
  lines = "".join(f"{k} = {v}\n" for k, v in (BAD if entries is None else entries).items())
  (info / "entry_points.txt").write_text(f"[refgrad.devices]\n{lines}")
  return {"PYTHONPATH": os.pathsep.join([str(directory), str(ROOT), os.environ.get("PYTHONPATH", "")])}
