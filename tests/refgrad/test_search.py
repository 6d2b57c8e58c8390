"""BEAM search (refgrad/search.py): the kernel it returns applies its Opts validly and computes what the unoptimized
kernel computes (ints exactly, floats within the tolerance of test_opt.py), on CPU and PYTHON; a wrong or failing
candidate never wins; the JSON cache is written, hit without timing anything, and rewritten when corrupt or stale;
ast_key is stable and distinguishes different kernels."""
from __future__ import annotations

import gc
import json
import shutil

import numpy as np
import pytest

from refgrad import Tensor, dtypes, program, schedule, search
from refgrad.device import Buffer
from refgrad.kernel import Kernel
from refgrad.lazy import buffer_of
from refgrad.opt import Opt, OptOps, apply_opt, apply_opts, valid_opts
from refgrad.program import Runner
from refgrad.uop.ops import Ops, UOp

# float tolerance across Opts, as in test_opt.py: within 1e-5 of the largest magnitude of the output (at least 1)
RTOL = 1e-5


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory) -> str:
  # one compile cache for the module (compiling is the slow part); each test gets an empty beam cache below
  return str(tmp_path_factory.mktemp("refgrad_cache"))

@pytest.fixture(autouse=True)
def _isolated_cache(cache_root, monkeypatch):
  shutil.rmtree(f"{cache_root}/beam", ignore_errors=True)
  monkeypatch.setenv("REFGRAD_CACHE", cache_root)
  monkeypatch.delenv("IGNORE_BEAM_CACHE", raising=False)
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  monkeypatch.delenv("EMULATE", raising=False)


def _item(t: Tensor) -> schedule.ScheduleItem:
  """The last kernel of t's schedule, with its input buffers computed (so it can run again on its own)."""
  items, done = schedule.create_schedule([t.uop], "CPU")
  schedule.run_schedule(items, set(done.values()))
  return [it for it in items if it.ast is not None][-1]

def _programs() -> dict[str, schedule.ScheduleItem]:
  rng = np.random.default_rng(0)
  f = lambda *s: Tensor(rng.standard_normal(s).astype(np.float32), device="CPU")
  i = lambda *s: Tensor(rng.integers(-50, 50, s).astype(np.int32), device="CPU")
  return {"matmul": _item(f(8, 6) @ f(6, 4)), "int_matmul": _item(i(6, 8) @ i(8, 5)), "sum_axis": _item(f(6, 7, 5).sum(1))}

@pytest.fixture(scope="module")
def programs() -> dict[str, schedule.ScheduleItem]: return _programs()

def _run(it: schedule.ScheduleItem, k: Kernel, device: str) -> np.ndarray:
  bufs = [Buffer(device, b.arg[2], b.dtype) for b in it.bufs]
  for dst, src in zip(bufs[1:], it.bufs[1:]): dst.copyin(buffer_of[src].numpy())
  Runner.from_sink("k", k.lower(), device)(*bufs)
  return bufs[0].numpy()

def _assert_same_result(it: schedule.ScheduleItem, k0: Kernel, k: Kernel, device: str) -> None:
  ref, out = _run(it, k0, device), _run(it, k, device)
  if dtypes.is_float(it.bufs[0].dtype): np.testing.assert_allclose(out, ref, rtol=0, atol=RTOL * max(1.0, float(np.abs(ref).max())), err_msg=str(k.applied))
  else: np.testing.assert_array_equal(out, ref, err_msg=str(k.applied))

def _limit_opts(monkeypatch, n: int) -> None:
  """Search only the first n valid Opts of each kernel: every code path runs, with few programs to compile."""
  monkeypatch.setattr(search, "valid_opts", lambda k: valid_opts(k)[:n])

def _count(monkeypatch, name: str) -> list[int]:
  calls = [0]
  real = getattr(search, name)
  def counted(*a, **kw):
    calls[0] += 1
    return real(*a, **kw)
  monkeypatch.setattr(search, name, counted)
  return calls

def _fake_clock(monkeypatch, cost) -> None:
  """Candidates are still compiled, run and checked, but timed by cost(the Opts of the kernel) instead of a clock."""
  applied_of: dict[int, tuple[Opt, ...]] = {}
  real_compile, real_run = search._compile_candidates, search._run_candidate
  def compile_(name, sinks, device):
    rs = real_compile(name, sinks, device)
    applied_of.update((id(r), tuple(lowered[s])) for s, r in zip(sinks, rs))
    return rs
  lowered: dict[UOp, list[Opt]] = {}
  real_apply = search.apply_opt
  def apply(k, o):
    nk = real_apply(k, o)
    lowered[nk.lower()] = nk.applied
    return nk
  def run(r, bench, runs, cutoff):
    outs, _ = real_run(r, bench, runs, cutoff)
    return outs, cost(applied_of.get(id(r), ()))
  monkeypatch.setattr(search, "_compile_candidates", compile_)
  monkeypatch.setattr(search, "_run_candidate", run)
  monkeypatch.setattr(search, "apply_opt", apply)

def _forbid_timing(monkeypatch) -> None:
  def boom(*a, **kw): raise AssertionError("the search ran although the cache should have answered")
  monkeypatch.setattr(search, "_compile_candidates", boom)
  monkeypatch.setattr(search, "_run_candidate", boom)


# ---- the search -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
@pytest.mark.parametrize("name", ["matmul", "int_matmul"])
def test_beam_result_is_valid_and_computes_the_same(programs, monkeypatch, device, name):
  # compiling C is the slow part: on CPU one round of 4 candidates
  _limit_opts(monkeypatch, 4 if device == "CPU" else 6)
  rounds = 1 if device == "CPU" else 2
  runs = _count(monkeypatch, "_run_candidate")
  it = programs[name]
  k0 = Kernel(it.ast, "k")
  k = search.beam_search(k0, device, 2, max_rounds=rounds)
  assert runs[0] > 3                                          # the start and several candidates were timed
  assert k0.applied == [] and len(k.applied) <= rounds        # one Opt per round at most; k0 untouched
  assert apply_opts(k0, k.applied).lower() is k.lower()       # the Opts apply, in order, and give this program
  _assert_same_result(it, k0, k, device)

def test_the_fastest_wins_ties_go_to_the_first_opt_and_no_gain_stops(programs, monkeypatch, capsys):
  # a fake clock (tests never assert on real timings): every candidate with one Opt takes 0.5 s, the start 1 s,
  # anything longer 0.6 s; so round 1 ties, round 2 gains nothing and the search stops
  k0 = Kernel(programs["sum_axis"].ast, "k")
  _limit_opts(monkeypatch, 4)
  _fake_clock(monkeypatch, lambda applied: {0: 1.0, 1: 0.5}.get(len(applied), 0.6))
  monkeypatch.setattr(program, "DEBUG", 2)
  k = search.beam_search(k0, "PYTHON", 2)
  assert k.applied == valid_opts(k0)[:1]
  out = capsys.readouterr().out
  assert "round 2:" in out and "no gain" in out and "round 3:" not in out

def test_the_beam_keeps_amt_kernels(programs, monkeypatch):
  # the second-best Opt of round 1 leads to the best kernel of round 2: found with amt=2, not with amt=1
  k0 = Kernel(programs["matmul"].ast, "k")
  first, second = valid_opts(k0)[:2]
  def cost(applied):
    if not applied: return 1.0
    if len(applied) == 1: return {first: 0.5, second: 0.6}.get(applied[0], 0.9)
    return 0.1 if applied[0] == second else 0.8
  _limit_opts(monkeypatch, 3)
  _fake_clock(monkeypatch, cost)
  assert search.beam_search(k0, "PYTHON", 1, max_rounds=2).applied == [first]
  k = search.beam_search(k0, "PYTHON", 2, max_rounds=2)
  assert len(k.applied) == 2 and k.applied[0] == second

def test_rounds_are_reported(programs, monkeypatch, capsys):
  monkeypatch.setattr(program, "DEBUG", 2)
  search.beam_search(Kernel(programs["sum_axis"].ast, "k"), "PYTHON", 2, max_rounds=1)
  out = capsys.readouterr().out
  assert "beam k on PYTHON: width 2" in out and "round 1:" in out and "chose" in out

def test_time_budget_ends_the_search(programs, monkeypatch, capsys):
  _limit_opts(monkeypatch, 3)
  _fake_clock(monkeypatch, lambda applied: 1.0 / (1 + len(applied)))   # every round gains
  monkeypatch.setattr(program, "DEBUG", 2)
  k = search.beam_search(Kernel(programs["matmul"].ast, "k"), "PYTHON", 2, time_budget_s=0)
  assert len(k.applied) == 1 and "time budget" in capsys.readouterr().out

def test_beam_width_from_env(monkeypatch):
  monkeypatch.setenv("BEAM", "3")
  assert search.beam_width() == 3
  monkeypatch.delenv("BEAM")
  assert search.beam_width() == 0

def test_width_must_be_positive(programs):
  with pytest.raises(ValueError, match="beam width must be >= 1"): search.beam_search(Kernel(programs["matmul"].ast, "k"), "PYTHON", 0)


def _add_to_output(k: Kernel, c: float | int) -> Kernel:
  """k computing the wrong thing: c is added to every stored value."""
  st = k.ast.src[0]
  k = k.copy()
  k.ast = k.ast.replace(src=(st.replace(src=(st.src[0], st.src[1], st.src[2] + UOp.const(st.src[2].dtype, c), *st.src[3:])),))
  return k

def _has_const(r: Runner, c: float | int) -> bool: return any(u.op is Ops.CONST and u.arg == c for u in r.spec.uops)

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_a_wrong_candidate_never_wins(programs, monkeypatch, capsys, device):
  """Every candidate of the first Opt computes a wrong result and reports itself as infinitely fast: it is dropped."""
  _limit_opts(monkeypatch, 3)
  k0 = Kernel(programs["matmul"].ast, "k")
  bad = valid_opts(k0)[0]
  real_apply, real_run = search.apply_opt, search._run_candidate
  monkeypatch.setattr(search, "apply_opt", lambda k, o: _add_to_output(real_apply(k, o), 12345.0) if o == bad else real_apply(k, o))
  ran_bad = [0]
  def run(r, bench, runs, cutoff):
    outs, t = real_run(r, bench, runs, cutoff)
    if _has_const(r, 12345.0):
      ran_bad[0] += 1
      return outs, 0.0
    return outs, t
  monkeypatch.setattr(search, "_run_candidate", run)
  monkeypatch.setattr(program, "DEBUG", 2)
  k = search.beam_search(k0, device, 2, max_rounds=1 if device == "CPU" else 2)
  assert ran_bad[0] >= 1, "the wrong candidate was never run"
  assert bad not in k.applied
  assert "WRONG RESULT, dropped" in capsys.readouterr().out
  _assert_same_result(programs["matmul"], k0, k, device)

def test_failing_candidates_are_skipped(programs, monkeypatch, capsys):
  """A candidate whose lowering raises, and one that is undefined on PYTHON (divides by zero), are skipped."""
  k0 = Kernel(programs["int_matmul"].ast, "k")
  opts = valid_opts(k0)
  bad_lower, bad_ub = opts[0], opts[1]
  real_apply = search.apply_opt
  def apply(k, o):
    nk = real_apply(k, o)
    if o == bad_lower:
      def fail(): raise ValueError("too many work-items for the target")
      nk.lower = fail
    if o == bad_ub:
      st = nk.ast.src[0]
      nk.ast = nk.ast.replace(src=(st.replace(src=(st.src[0], st.src[1], st.src[2] // UOp.const(dtypes.int32, 0))),))
    return nk
  monkeypatch.setattr(search, "apply_opt", apply)
  monkeypatch.setattr(search, "valid_opts", lambda k: [o for o in valid_opts(k) if o in (bad_lower, bad_ub)])
  monkeypatch.setattr(program, "DEBUG", 2)
  k = search.beam_search(k0, "PYTHON", 2, max_rounds=2)
  assert k is k0                  # both candidates were skipped, so nothing beat the start
  out = capsys.readouterr().out
  assert f"skip [{bad_lower}]: ValueError: too many work-items" in out and f"skip [{bad_ub}]: UndefinedBehaviourError" in out

def test_kernel_undefined_on_the_search_inputs_is_left_alone(monkeypatch):
  # the divisor b - c is 0 somewhere for inputs in 1..3: the PYTHON device finds it before the CPU would trap
  rng = np.random.default_rng(1)
  a, b, c = (Tensor(rng.integers(1, 9, (4, 4)).astype(np.int32), device="CPU") for _ in range(3))
  items, _ = schedule.create_schedule([a._alu(Ops.IDIV, b - c).uop], "CPU")
  k0 = Kernel(items[-1].ast, "k")
  runs = _count(monkeypatch, "_run_candidate")
  assert search.beam_search(k0, "CPU", 2) is k0
  assert runs[0] == 0


# ---- the cache ------------------------------------------------------------------------------------------------

def test_cache_is_written_and_hit_without_timing(programs, monkeypatch, cache_root):
  _limit_opts(monkeypatch, 3)
  _fake_clock(monkeypatch, lambda applied: 0.5 if applied else 1.0)   # one round gains, the next does not
  k0 = Kernel(programs["sum_axis"].ast, "k")
  k1 = search.cached_beam(k0, "PYTHON", 2)
  path = search.cache_path(k0, "PYTHON", 2)
  assert path.parent == search.cache_dir() / "beam" and str(path).startswith(cache_root)
  doc = json.loads(path.read_text())
  assert doc["format"] == search.CACHE_FORMAT and doc["opts"] == [[o.op.name, o.axis, o.arg] for o in k1.applied]
  assert k1.applied, "the search found nothing to cache"
  _forbid_timing(monkeypatch)
  k2 = search.cached_beam(k0, "PYTHON", 2)
  assert k2.applied == k1.applied and k2.lower() is k1.lower()
  assert search.cached_beam(k0, "PYTHON:1", 2).applied == k1.applied    # the device number is not part of the key

@pytest.mark.parametrize("content", [b"{not json", b'{"format": "refgrad.beam/1", "opts": [["WARP", 0, 2]]}', b"[]", b"\xff\xfe"])
def test_corrupt_cache_file_is_rewritten(programs, monkeypatch, capsys, content):
  _limit_opts(monkeypatch, 3)
  k0 = Kernel(programs["sum_axis"].ast, "k")
  path = search.cache_path(k0, "PYTHON", 2)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(content)
  monkeypatch.setattr(program, "DEBUG", 1)
  runs = _count(monkeypatch, "_run_candidate")
  k = search.cached_beam(k0, "PYTHON", 2)
  assert runs[0] > 0 and "corrupt" in capsys.readouterr().err
  assert json.loads(path.read_text())["opts"] == [[o.op.name, o.axis, o.arg] for o in k.applied]

@pytest.mark.parametrize("case", ["stale", "ignored"])
def test_stale_or_ignored_cache_entry_searches_again(programs, monkeypatch, case: str):
  """An entry whose Opts no longer apply (no output axis 7) is searched again, and so is any entry under
  IGNORE_BEAM_CACHE=1; the new result is written either way."""
  _limit_opts(monkeypatch, 3)
  k0 = Kernel(programs["sum_axis"].ast, "k")
  path = search.cache_path(k0, "PYTHON", 2)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"format": search.CACHE_FORMAT, "opts": [["UPCAST", 7, 2]] if case == "stale" else []}))
  if case == "ignored": monkeypatch.setenv("IGNORE_BEAM_CACHE", "1")
  runs = _count(monkeypatch, "_run_candidate")
  k = search.cached_beam(k0, "PYTHON", 2)
  assert runs[0] > 0 and Opt(OptOps.UPCAST, 7, 2) not in k.applied
  assert json.loads(path.read_text())["opts"] == [[o.op.name, o.axis, o.arg] for o in k.applied]


def test_cached_opts_continue_from_applied_opts(programs, monkeypatch):
  k0 = apply_opt(Kernel(programs["matmul"].ast, "k"), Opt(OptOps.UPCAST, 0, 2))
  _limit_opts(monkeypatch, 3)
  k1 = search.cached_beam(k0, "PYTHON", 2)
  assert k1.applied[:1] == k0.applied
  assert search.cache_path(k0, "PYTHON", 2) != search.cache_path(Kernel(programs["matmul"].ast, "k"), "PYTHON", 2)
  _forbid_timing(monkeypatch)
  assert search.cached_beam(k0, "PYTHON", 2).lower() is k1.lower()


def _matmul_ast(n: int, dtype=np.float32, scale: float = 1.0) -> UOp:
  t = Tensor(np.ones((4, 3), dtype), device="CPU") @ Tensor(np.ones((3, n), dtype), device="CPU")
  items, _ = schedule.create_schedule([(t * scale).uop], "CPU")
  return items[-1].ast

def test_ast_key_is_stable_and_distinguishes_kernels():
  text = search.ast_key(_matmul_ast(5))
  gc.collect()   # the graph is built again from scratch
  assert search.ast_key(_matmul_ast(5)) == text
  keys = {text, search.ast_key(_matmul_ast(6)), search.ast_key(_matmul_ast(5, np.int32)), search.ast_key(_matmul_ast(5, scale=2.0)),
          search.ast_key(_matmul_ast(5, scale=-0.0)), search.ast_key(_matmul_ast(5, scale=0.0))}
  assert len(keys) == 6
  x = Tensor(np.ones((4, 3), np.float32), device="CPU")
  sum_ast, max_ast = (schedule.create_schedule([t.uop], "CPU")[0][-1].ast for t in (x.sum(1), x.max(1)))
  assert search.ast_key(sum_ast) != search.ast_key(max_ast)     # only the REDUCE's arg differs

def test_cache_key_depends_on_device_width_and_target():
  k = Kernel(_matmul_ast(5), "k")
  key = search.cache_key(k, "CPU", 2)
  assert key == search.cache_key(Kernel(_matmul_ast(5), "other_name"), "CPU:0", 2)
  assert len({key, search.cache_key(k, "PYTHON", 2), search.cache_key(k, "CPU", 3)}) == 3
  if hasattr(k, "target"):
    from refgrad.target import CUDA
    kc = k.copy()
    kc.target = CUDA
    assert search.cache_key(kc, "CPU", 2) != key
