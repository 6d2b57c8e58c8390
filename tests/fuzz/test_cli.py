"""`python -m fuzz` and `python -m fuzz replay` on bad arguments (one line on stderr, exit 2, before any work starts),
on Ctrl-C (a clean stop with the summary, the --json report and the findings kept, exit 130), and on corpora that are
empty or hold a corrupt finding."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from oracles.astjson import ast_to_json
from oracles.case import Case, Finding
from oracles.cliargs import cpus
from refgrad import Tensor, schedule
from tests.cli import run_module, start_module


def _fuzz(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
  return run_module("fuzz", *args, env=env, timeout=timeout)

def _one_line_exit_2(r: subprocess.CompletedProcess, msg: str) -> None:
  assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, (r.returncode, r.stderr)
  assert "Traceback" not in r.stderr and "cases checked" not in r.stdout


@pytest.mark.parametrize("args, msg", [
  (["--seconds", "nan"], "--seconds must be > 0 and finite, got 'nan'"),
  (["--seconds", "inf"], "--seconds must be > 0 and finite, got 'inf'"),
  (["--seconds", "-5"], "--seconds must be > 0 and finite"),
  (["--case-timeout", "nan"], "--case-timeout must be > 0 and finite"),
  (["--workers", "0"], "--workers must be > 0 and finite"),
  (["--workers", "two"], "--workers must be an int"),
  (["--seed", "-1"], "the seed must be an int >= 0"),
  (["--devices", ","], "--devices takes a comma list"),
  (["--devices", "CPU,TPU"], "unknown device 'TPU'"),
  (["--preload", "no_such_module_here"], "--preload no_such_module_here: ModuleNotFoundError"),
  (["--corpus", "{file}"], "exists and is not a directory"),
  (["--corpus", "{file}/sub"], "cannot write there"),
  (["--json", "{dir}"], "--json {dir}: is a directory, not a file"),
  (["--junit", "{dir}"], "--junit {dir}: is a directory, not a file"),
  (["--json", "{file}/r.json"], "its directory {file} exists and is not a directory"),
])
def test_bad_argument_is_one_line_before_any_work(tmp_path, args, msg):
  (f := tmp_path / "a_file").write_text("x")
  (d := tmp_path / "a_dir").mkdir()
  fill = lambda s: s.format(file=f, dir=d)
  out = tmp_path / "out.json"
  r = _fuzz(*map(fill, args), *([] if "--json" in args else ["--json", str(out)]), "--cases", "8", "--corpus" if "--corpus" not in args else "--quiet",
            *([str(tmp_path / "corpus")] if "--corpus" not in args else []), timeout=60)
  _one_line_exit_2(r, fill(msg))
  assert not out.exists() and not (tmp_path / "corpus").exists()


def test_named_mock_gpu_without_mockgpu_is_an_error(tmp_path):
  """MOCKGPU=0 python -m fuzz --devices NV used to test nothing and exit 0."""
  r = _fuzz("--devices", "NV", "--cases", "8", "--corpus", str(tmp_path), env={"MOCKGPU": "0"}, timeout=60)
  _one_line_exit_2(r, "--devices: device NV cannot be constructed (RuntimeError: DEV=NV needs a GPU driver: set MOCKGPU=1")

def test_named_unconstructible_device_is_an_error(tmp_path):
  r = _fuzz("--preload", "tests.fuzz.inject", "--devices", "CPU,BROKEN", "--cases", "8", "--corpus", str(tmp_path),
            env={"FUZZ_INJECT": "unconstructible"}, timeout=60)
  _one_line_exit_2(r, "device BROKEN cannot be constructed (RuntimeError: no such hardware here)")


def test_ctrl_c_stops_cleanly_and_keeps_findings_summary_and_report(tmp_path):
  """SIGINT to the whole process group (as a terminal's Ctrl-C) after the first finding is on disk: exit 130, no
  traceback, the summary printed, the --json report written with what was done, the finding kept. --workers 100000
  is capped at the machine's CPUs, and says so."""
  corpus, report = tmp_path / "corpus", tmp_path / "r.json"
  p = start_module("fuzz", "--preload", "tests.fuzz.inject", "--workers", "100000", "--devices", "CPU", "--targets", "CPU",
                   "--seconds", "300", "--corpus", str(corpus), "--json", str(report), "--quiet", env={"FUZZ_INJECT": "unroll"})
  try:
    deadline = time.monotonic() + 150
    while not list(corpus.glob("*.json")) and time.monotonic() < deadline and p.poll() is None: time.sleep(0.2)
    assert list(corpus.glob("*.json")), "the injected bug was not found within 150 s"
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
  finally:
    if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
  assert p.returncode == 130, (p.returncode, err)
  assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
  assert f"--workers 100000 capped at {cpus()}" in err
  assert "cases checked" in out and "interrupted (Ctrl-C)" in out
  doc = json.loads(report.read_text())
  assert doc["interrupted"] is True and doc["workers"] == cpus() and doc["checked"] >= 1
  assert doc["findings"] and all(os.path.exists(x["path"]) for x in doc["findings"])
  assert {os.path.basename(x["path"]) for x in doc["findings"]} <= {q.name for q in corpus.glob("*.json")}


def test_replay_of_an_empty_directory_says_so(tmp_path):
  r = _fuzz("replay", str(tmp_path), timeout=60)
  _one_line_exit_2(r, "no findings (*.json) to replay")

def test_replay_bad_device_is_one_line(tmp_path):
  (tmp_path / "x.json").write_text("{}")
  r = _fuzz("replay", str(tmp_path), "--devices", "TPU", timeout=60)
  _one_line_exit_2(r, "unknown device 'TPU'")

def test_replay_bad_preload_is_one_line(tmp_path):
  (tmp_path / "x.json").write_text("{}")
  r = _fuzz("replay", str(tmp_path), "--preload", "no_such_module_here", timeout=60)
  _one_line_exit_2(r, "--preload no_such_module_here: ModuleNotFoundError")

def test_replay_goes_on_past_a_corrupt_finding(tmp_path):
  """One corrupt file is reported and the others are still replayed; the exit status says something was wrong."""
  items, _ = schedule.create_schedule([(Tensor.empty(3) + 1).uop], "CPU")
  ast = [it.ast for it in items if it.ast is not None][-1]
  good = Finding(Case(0, "k", ast_to_json(ast), "CPU", [["UPCAST", 0, 3]], {"seed": 1, "mode": "exact"}), "device", "CPU", "was wrong").save(tmp_path)
  (tmp_path / "a-corrupt.json").write_text('{"format": "refgrad.fuzz.finding/1", "oracle": ')
  (tmp_path / "z-corrupt.json").write_text("[]")
  r = _fuzz("replay", str(tmp_path), "--devices", "CPU", timeout=120)
  assert r.returncode == 2, r.stdout + r.stderr
  lines = r.stdout.splitlines()
  assert any(ln.startswith(f"{tmp_path / 'a-corrupt.json'}: UNREADABLE") for ln in lines)
  assert any(ln.startswith(f"{tmp_path / 'z-corrupt.json'}: UNREADABLE") for ln in lines)
  assert f"{good}: pass" in lines, r.stdout
  assert "3 files: 0 still fail, 1 pass, 2 could not be read" in lines
