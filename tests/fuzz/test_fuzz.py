"""The fuzzer's parts: JSON forms checked on read, the case stream's determinism, the oracles on injected bugs
(in-process, a bounded number of cases each), exactness of "exact" inputs, the CLI's option errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fuzz.stream import GROUP, Stream, materialize
from oracles.astjson import ast_from_json, ast_to_json
from oracles.case import Case, Finding
from oracles.check import check_cases
from oracles.inputs import cross_opt_rules, exact_reductions, nan_views, values
from oracles.models import load_models
from refgrad import Tensor, dtypes, schedule
from refgrad.renderer.serialize import SerializeError
from tests.fuzz import inject


def _ast(t: Tensor):
  items, _ = schedule.create_schedule([t.uop], "CPU")
  return [it.ast for it in items if it.ast is not None][-1]

def test_ast_json_round_trip_and_errors():
  a = _ast((Tensor.empty(4, 6) * 2).max(1))
  rows = json.loads(json.dumps(ast_to_json(a)))
  assert ast_from_json(rows) is a
  with pytest.raises(SerializeError, match="row 1"): ast_from_json([rows[0], ["NOPE", "int", [], None], *rows[2:]])
  with pytest.raises(SerializeError, match="earlier rows"): ast_from_json([[*rows[0][:2], [5], rows[0][3]]])

def test_finding_json_is_checked_on_read(tmp_path):
  c = Case(3, "k", ast_to_json(_ast(Tensor.empty(3) + 1)), "CPU", [["UPCAST", 0, 3]], {"seed": 1, "mode": "exact"})
  p = Finding(c, "device", "CPU", "differs").save(tmp_path)
  back = Finding.load(p)
  assert back.case == c and back.oracle == "device"
  bad = json.loads(p.read_text())
  bad["case"]["opts"] = [["FOLD", 0, 1]]
  p.write_text(json.dumps(bad))
  with pytest.raises(ValueError, match="not an Opt"): Finding.load(p)
  p.write_text("{")
  with pytest.raises(ValueError, match="not a fuzz finding"): Finding.load(p)
  fd = {"op": "MAX", "dtype": "float", "uop_index": 14, "element": 2}   # where the first difference arises: kept, and in the signature
  p = Finding(c, "device", "CPU", "differs", dtype="float", first_diff=fd).save(tmp_path)
  assert Finding.load(p).first_diff == fd and Finding.load(p).signature() == ("device", "CPU", "float", "MAX")
  bad = json.loads(p.read_text())
  bad["first_diff"] = {"op": "MAX", "dtype": "float"}
  p.write_text(json.dumps(bad))
  with pytest.raises(ValueError, match="first_diff"): Finding.load(p)

def test_model_kernels_load():
  ks = load_models()
  assert {"mlp_adam", "convnet", "attention", "layernorm", "embedding", "pooling", "argmax", "cumsum"} <= {k["model"] for k in ks}

def test_stream_is_deterministic_in_any_order():
  models = load_models()
  s1, s2 = Stream(7, ["CPU", "CUDA"], models=models), Stream(7, ["CPU", "CUDA"], models=models)
  specs = [s1.draw() for _ in range(6)]
  assert specs == [s2.draw() for _ in range(6)]
  a = [c.key() for s in specs for c in materialize(s, models)]
  b = [c.key() for s in reversed(specs) for c in reversed(materialize(s, models))]
  assert sorted(a) == sorted(b) and len(set(a)) == len(a) == 6 * GROUP - GROUP * sum(not materialize(s, models) for s in specs)

def test_specials_and_exact_inputs():
  rng = np.random.default_rng(0)
  f = values(dtypes.float32, 4000, "random", rng)
  assert np.isnan(f).any() and np.isinf(f).any() and (np.signbit(f) & (f == 0)).any() and ((f != 0) & (np.abs(f) < 1.2e-38)).any()
  i = values(dtypes.int8, 4000, "random", rng)
  assert i.min() == -128 and i.max() == 127
  e = values(dtypes.float32, 4000, "exact", rng)
  fin = e[np.isfinite(e)]
  assert (fin * 4 == np.round(fin * 4)).all() and np.abs(fin).max() <= 8
  assert exact_reductions(_ast(Tensor.empty(8, 16).sum(1)))
  assert exact_reductions(_ast(Tensor.empty(8, 16) @ Tensor.empty(16, 4)))
  assert not exact_reductions(_ast(Tensor.empty(8, 16).exp().sum(1)))                       # exp is not exact
  t = Tensor.empty(8, 4096)
  assert not exact_reductions(_ast((t * t * t).sum(1)))   # cubes (grain 2^-6, up to 512) summed 4096 times outgrow float32's 24 bits

@pytest.mark.parametrize("bug", ["c_helper", "unroll", "simt_max", "symbolic"])
def test_injected_bug_is_found_in_process(bug, monkeypatch):
  """Each broken piece is reported within 24 groups (192 cases) of seed 0 (checked in this process; the worker
  pipeline, shrinking and replay are tested in test_inject.py)."""
  state = {}
  if bug == "c_helper":
    from refgrad.renderer import cstyle
    monkeypatch.setitem(cstyle._HELPERS, "rg_maxf", cstyle._HELPERS["rg_maxf"])
  elif bug == "unroll":
    from refgrad import kernel
    monkeypatch.setattr(kernel, "_expand_unroll", kernel._expand_unroll)
  elif bug == "simt_max":
    from refgrad.runtime import simt
    monkeypatch.setattr(simt, "semantics", simt.semantics)
  elif bug == "symbolic":
    from refgrad import codegen
    monkeypatch.setattr(codegen, "symbolic", codegen.symbolic)
  inject.inject(bug)
  models = load_models()
  s = Stream(0, ["CPU", "CUDA", "AMD"], models=models)
  for _ in range(24):
    fails = [r for r in check_cases(materialize(s.draw(), models), ["CPU"]) if r.status == "fail"]
    if fails:
      state["found"] = fails[0]
      break
  assert "found" in state, f"{bug} not found in 192 cases"
  # simt_max breaks only the interpreter's MAX: loops the PYTHON device runs as arrays (simt_loops) keep the reference's,
  # so the bug may also show as optimized and unoptimized programs disagreeing on PYTHON (cross-opt)
  want = {"c_helper": {"device"}, "unroll": {"cross-opt"}, "simt_max": {"ast-eval", "device", "cross-opt"}, "symbolic": {"checked", "redzone", "ast-eval", "cross-opt"}}[bug]
  assert state["found"].oracle in want, state["found"]

def test_clean_cases_pass():
  models = load_models()
  s = Stream(1, ["CPU", "CUDA", "AMD"], models=models)
  rs = [r for _ in range(4) for r in check_cases(materialize(s.draw(), models), ["CPU"])]
  assert rs and all(r.status in ("pass", "ub", "invalid") for r in rs), [r.detail for r in rs if r.status == "fail"]
  assert sum(r.status == "pass" for r in rs) >= len(rs) // 2

@pytest.mark.parametrize("args, msg", [(["--seconds", "0"], "--seconds must be > 0"), (["--shard", "3/2"], "0 <= I < N"),
                                       (["--targets", "CPU,TPU"], "--targets takes"), (["--devices", "NOPE"], "unknown device"),
                                       (["--seconds", "1", "--cases", "8"], "not allowed with")])
def test_bad_options_give_one_clear_line(args, msg):
  r = subprocess.run([sys.executable, "-m", "fuzz", *args], capture_output=True, text=True, check=False)
  assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

def test_cross_opt_rules():
  """What may be compared across Opts: bits where no reordered float sum is involved, a tolerance for float arithmetic
  on sums, nothing for a bool or int made from a reordered float sum (a comparison may flip; the fuzzer once
  reported that as a bug: oracles/corpus/cross-opt-34b4bb72e90b19aa.json)."""
  x = Tensor.empty(3, 8, dtype=dtypes.float16)
  assert cross_opt_rules(_ast(x.cumsum(1) == x.flip(1)), "random") == {0: "skip"}
  assert cross_opt_rules(_ast(x.sum(1) * 2 + 1), "random") == {0: "tolerance"}
  assert cross_opt_rules(_ast(x.sum(1).exp()), "random") == {0: "skip"}
  assert cross_opt_rules(_ast(x.sum(1)), "exact") == {0: "exact"}
  assert cross_opt_rules(_ast(x.max(1) < 0), "random") == {0: "exact"}       # MAX is exact in any order
  assert cross_opt_rules(_ast(Tensor.empty(4, 5, dtype=dtypes.int32).sum(1)), "random") == {0: "exact"}

def test_default_device_that_cannot_be_constructed_is_a_failure_line(tmp_path):
  """By default every registered device that can be constructed is compared (MOCKGPU=0 here: the mock GPUs cannot,
  nor can BROKEN); each one that cannot is a FAILED line and exit 1, never a silent pass; a device named in --devices
  must be constructible (tests/fuzz/test_cli.py)."""
  r = subprocess.run([sys.executable, "-m", "fuzz", "--preload", "tests.fuzz.inject", "--cases", "8", "--workers", "1",
                      "--targets", "CPU", "--corpus", str(tmp_path), "--json", str(tmp_path / "r.json")],
                     capture_output=True, text=True, check=False, env={**os.environ, "FUZZ_INJECT": "unconstructible", "MOCKGPU": "0"}, timeout=300)
  assert r.returncode == 1, r.stdout + r.stderr
  doc = json.loads((tmp_path / "r.json").read_text())
  assert doc["devices"] == ["CPU", "LLVM"] and doc["checked"] >= 1 and not doc["findings"]
  for d, why in (("BROKEN", "RuntimeError: no such hardware here"), ("NV", "set MOCKGPU=1"), ("AMD", "set MOCKGPU=1")):
    assert any(n.startswith(f"FAILED: device {d} cannot be constructed") and why in n for n in doc["notes"]), doc["notes"]
    assert f"python -m fuzz: FAILED: device {d} cannot be constructed" in r.stderr

def test_nan_views():
  """A BITCAST of a computed float exposes the unspecified sign and payload of a NaN it may hold: such a buffer is
  compared as the float dtype (all NaNs equal), or not at all when its bits go on into other ops (the fuzzer reported
  a NaN sign flipped by GROUP as a bug: oracles/corpus/cross-opt-01ee35ddd240a080.json)."""
  x = Tensor.empty(4, 4, dtype=dtypes.float64)
  assert nan_views(_ast((x @ x).bitcast(dtypes.int64))) == {0: dtypes.float64}
  assert nan_views(_ast((x @ x).bitcast(dtypes.int64) + 1)) == {0: None}
  assert nan_views(_ast(x.bitcast(dtypes.int64) + 1)) == {}          # loaded bits are the input's own
