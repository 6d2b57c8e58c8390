"""Issue 13 classes 1-3: undefined behaviour never kills the process (the CPU's C is total, the PYTHON device still reports
it), the compile and BEAM caches are never trusted blindly, and every knob parses one way."""
from __future__ import annotations

import ctypes
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from refgrad import Tensor, device, knobs, search
from refgrad.device import Buffer
from refgrad.dtype import DType, dtypes
from refgrad.kernel import Kernel
from refgrad.program import Runner
from refgrad.runtime import ops_cpu
from refgrad.runtime.ops_cpu import ClangCompiler, CPUProgram
from refgrad.runtime.simt import UndefinedBehaviourError
from refgrad.uop.ops import Ops, UOp


@pytest.fixture(autouse=True)
def _fresh_cache_state(monkeypatch, tmp_path):
  # each test starts with its own cache directory and no fallback from an earlier test
  monkeypatch.setattr(device, "_fallback", None)
  monkeypatch.setattr(device, "_checked_dirs", set())
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)


def _binary(name: str, op: Ops, dt: DType, dst: DType | None = None) -> list[UOp]:
  """out[i] = op(a[i], b[i]) over 1-element-per-lane buffers (a CAST when dst is given: out[i] = dst(a[i]))."""
  n = 8
  g = [UOp.define_global(i, (dst or dt) if i == 0 else dt, n) for i in range(3)]
  i = UOp.special("gidx0", n)
  a, b = g[1].load(i), g[2].load(i)
  val = a.cast(dst) if dst is not None else a.alu(op, b)
  st = g[0].store(i, val)
  return list(dict.fromkeys([*g, *(u for u in st.sink().toposort if u.op is not Ops.SINK)]))

def _run(uops: list[UOp], dev: str, a: np.ndarray, b: np.ndarray, out_dt: DType, name: str = "k") -> np.ndarray:
  bufs = [Buffer(dev, 8, out_dt), Buffer.from_numpy(dev, a), Buffer.from_numpy(dev, b)]
  Runner(name, uops, dev)(*bufs)
  return bufs[0].numpy()


# ---- class 1: undefined behaviour ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64])
@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD])
def test_cpu_integer_division_is_total(op, dt):
  lo = int(dtypes.min(dt))
  a = np.array([7, -7 if lo else 7, lo, lo, 5, 0, 100, lo], dt.np)
  b = np.array([0, 0, -1 if lo else 1, 0, 2, 0, -3 if lo else 3, 1], dt.np)
  got = _run(_binary("div", op, dt), "CPU", a, b, dt)   # SIGFPE killed the interpreter here before
  # defined lanes: C's truncating division; by 0 -> 0; MIN / -1 -> MIN, MIN % -1 -> 0
  want = []
  for x, y in zip(a.tolist(), b.tolist()):
    if y == 0: want.append(0)
    elif y == -1 and x == lo and lo: want.append(lo if op is Ops.IDIV else 0)
    else:
      q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
      want.append(q if op is Ops.IDIV else x - q * y)
  assert got.tolist() == want
  # the PYTHON device still reports the same program as undefined behaviour
  with pytest.raises(UndefinedBehaviourError, match="integer division by zero"):
    _run(_binary("div", op, dt), "PYTHON", a, b, dt)

@pytest.mark.parametrize("op", [Ops.SHL, Ops.SHR])
def test_cpu_shift_amounts_are_masked(op):
  a = np.array([1, -8, 3, 1, 5, 9, 1, 2], np.int32)
  b = np.array([33, -1, 1, 31, 64, 0, 2, 100], np.int32)
  got = _run(_binary("sh", op, dtypes.int32), "CPU", a, b, dtypes.int32)
  m = b & 31
  want = (a.astype(np.int64) << m).astype(np.uint64).astype(np.uint32).view(np.int32) if op is Ops.SHL else a >> m
  assert got.tolist() == want.tolist()
  ok = (b >= 0) & (b < 32)   # defined lanes agree with the reference
  ref = _run(_binary("sh", op, dtypes.int32), "PYTHON", np.where(ok, a, 0).astype(np.int32), np.where(ok, b, 0).astype(np.int32), dtypes.int32)
  assert got[ok].tolist() == ref[ok].tolist()

@pytest.mark.parametrize("dst", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint64])
@pytest.mark.parametrize("src", [dtypes.float32, dtypes.float64])
def test_cpu_float_to_int_saturates(src, dst):
  lo, hi = int(dtypes.min(dst)), int(dtypes.max(dst))
  a = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3.75, -3.75 if lo else 3.75, 0.5], src.np)
  got = _run(_binary("f2i", Ops.CAST, src, dst), "CPU", a, a, dst)
  assert got.tolist() == [0, hi, lo, hi, lo, 3, -3 if lo else 3, 0]
  with pytest.raises(UndefinedBehaviourError, match="float->int cast of NaN/inf"): _run(_binary("f2i", Ops.CAST, src, dst), "PYTHON", a, a, dst)

def test_cpu_float_to_int_edges_are_exact():
  # the last values that fit and the first that do not, for int32 from float64
  a = np.array([2147483647.9, 2147483648.0, -2147483648.9, -2147483649.0, -0.9, 0.0, 1.0, -1.0], np.float64)
  got = _run(_binary("f2i", Ops.CAST, dtypes.float64, dtypes.int32), "CPU", a, a, dtypes.int32)
  assert got.tolist() == [2147483647, 2147483647, -2147483648, -2147483648, 0, 0, 1, -1]

def test_tensor_integer_division_by_zero_does_not_kill_cpu():
  a, b = Tensor(np.array([7, -7, 3], np.int32), device="CPU"), Tensor(np.array([0, 0, 2], np.int32), device="CPU")
  assert (a // b).tolist() == [0, 0, 1] and (a % b).tolist() == [0, 0, 1]
  with pytest.raises(UndefinedBehaviourError, match="integer division by zero"):
    (Tensor(np.array([7, -7, 3], np.int32), device="PYTHON") // Tensor(np.array([0, 0, 2], np.int32), device="PYTHON")).numpy()

@pytest.mark.parametrize("fn", [lambda t: t // 0, lambda t: t % 0, lambda t: t.idiv(0), lambda t: 5 // t.mul(0).cast(dtypes.int32) * 0 + t // 0])
def test_literal_zero_divisor_raises_when_the_graph_is_built(fn):
  with pytest.raises(ZeroDivisionError, match="integer division or modulo by zero"): fn(Tensor([1, 2, 3]))

def test_float_division_by_literal_zero_is_ieee():
  assert (Tensor([1.0, -1.0]) / 0).tolist() == [float("inf"), float("-inf")]


# ---- class 2: caches -------------------------------------------------------------------------------------------------

_SRC = "int answer_{n}(void) {{ return {n}; }}\n"

def _entry(cc: ClangCompiler, src: str) -> Path:
  key = hashlib.sha256(f"{device.COMPILED_FORMAT}\0{cc.cachekey}\0{src}".encode()).hexdigest()
  return device.cache_dir() / "compiled" / key[:2] / key

def _call(lib: bytes, n: int) -> int:
  import ctypes
  p = CPUProgram(f"answer_{n}", lib)
  p.fxn.restype = ctypes.c_int
  return p.fxn()

@pytest.mark.parametrize("damage", ["truncated", "garbage", "swapped", "headerless", "flipped"])
def test_damaged_compile_cache_entry_is_detected_and_recompiled(damage, capfd):
  cc = ClangCompiler()
  src, other = _SRC.format(n=41), _SRC.format(n=42)
  good = cc.compile_cached(src)
  path = _entry(cc, src)
  data = path.read_bytes()
  if damage == "truncated": path.write_bytes(data[:len(data) // 2])
  elif damage == "garbage": path.write_bytes(b"\x7fELF garbage" * 10)
  elif damage == "swapped":
    cc.compile_cached(other)
    path.write_bytes(_entry(cc, other).read_bytes())   # another kernel's complete, valid entry
  elif damage == "headerless": path.write_bytes(good)  # a bare binary (the format before digests)
  else: path.write_bytes(data[:-10] + bytes(b ^ 0xFF for b in data[-10:]))
  capfd.readouterr()
  lib = cc.compile_cached(src)
  err = capfd.readouterr().err
  assert f"refgrad: warning: compile cache entry {path} is damaged" in err and "recompiling" in err and err.count("\n") == 1
  assert _call(lib, 41) == 41
  assert cc.compile_cached(src) == lib and capfd.readouterr().err == ""   # rewritten: the next read is clean

def test_damaged_loadable_library_is_rewritten_not_loaded(capfd):
  cc = ClangCompiler()
  lib = cc.compile(_SRC.format(n=43))
  so = device.cache_dir() / "cpu_lib" / f"{hashlib.sha256(lib).hexdigest()}.so"
  so.parent.mkdir(parents=True)
  so.write_bytes(lib[:len(lib) // 3])   # loading this one killed the process with SIGBUS
  assert _call(lib, 43) == 43
  assert "is damaged" in capfd.readouterr().err and so.read_bytes() == lib

def test_unwritable_cache_dir_falls_back_to_a_private_temp_dir(tmp_path, monkeypatch, capfd):
  blocker = tmp_path / "file"
  blocker.write_text("a file, not a directory")
  monkeypatch.setenv("REFGRAD_CACHE", str(blocker / "cache"))
  cc = ClangCompiler()
  lib = cc.compile_cached(_SRC.format(n=44))
  assert _call(lib, 44) == 44
  err = capfd.readouterr().err
  assert f"refgrad: warning: cache directory {blocker / 'cache'} is not usable" in err and "private temporary" in err
  assert err.count("\n") == 1   # once per process
  fb = device.cache_dir()
  assert fb != blocker / "cache" and (fb.stat().st_mode & 0o077) == 0 and list((fb / "compiled").rglob("*"))

def test_failed_write_falls_back(monkeypatch, capfd):
  real = device.write_atomic
  def full(path: Path, data: bytes) -> None:
    if device._fallback is None: raise OSError(28, "No space left on device")
    real(path, data)
  monkeypatch.setattr(device, "write_atomic", full)
  lib = ClangCompiler().compile_cached(_SRC.format(n=45))
  assert _call(lib, 45) == 45 and "No space left on device" in capfd.readouterr().err

def test_cache_directory_deleted_under_a_running_process(tmp_path, monkeypatch, capfd):
  """The cache directory removed (another process cleaning it) between the check of a library and its dlopen, and
  between two compiles: the library is written again and loaded, never `cannot open shared object file`."""
  real, opened = ctypes.CDLL, []
  def racing(path: str, *a, **k):
    if not opened: shutil.rmtree(tmp_path / "cache")
    opened.append(path)
    return real(path, *a, **k)
  monkeypatch.setattr(ops_cpu.ctypes, "CDLL", racing)
  lib = ClangCompiler().compile_cached(_SRC.format(n=48))
  assert _call(lib, 48) == 48 and len(opened) == 2
  assert "cannot load" in capfd.readouterr().err and Path(opened[1]).read_bytes() == lib
  shutil.rmtree(tmp_path / "cache")
  assert _call(ClangCompiler().compile_cached(_SRC.format(n=49)), 49) == 49   # compile cache gone as well: compiled again
  shutil.rmtree(tmp_path / "cache")
  assert _call(lib, 48) == 48   # a library already loaded once, its file gone: written and loaded again

def test_disable_compiler_cache_never_touches_the_disk(tmp_path, monkeypatch):
  cache = tmp_path / "cache"
  monkeypatch.setenv("DISABLE_COMPILER_CACHE", "1")
  lib = ClangCompiler().compile_cached(_SRC.format(n=46))
  assert _call(lib, 46) == 46
  k = Kernel(_sum_ast(), "k")
  monkeypatch.setattr(search, "beam_search", lambda k, dev, amt: k)
  search.cached_beam(k, "CPU", 2)
  assert not cache.exists()

def test_disable_compiler_cache_zero_keeps_the_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("DISABLE_COMPILER_CACHE", "0")   # used to disable it as well
  ClangCompiler().compile_cached(_SRC.format(n=47))
  assert list((tmp_path / "cache" / "compiled").rglob("*"))

def _sum_ast() -> UOp:
  g0, g1 = UOp.define_global(0, dtypes.float32, 4), UOp.define_global(1, dtypes.float32, 16)
  i = UOp.range(4, 0)
  r = UOp.range(4, 1)
  red = UOp(Ops.REDUCE, dtypes.float32, (g1.load(i * 4 + r), r), Ops.ADD)
  return g0.store(i, red).sink()

def test_swapped_beam_entry_is_detected(monkeypatch, capfd):
  k = Kernel(_sum_ast(), "k")
  searched = []
  monkeypatch.setattr(search, "beam_search", lambda k, dev, amt: searched.append(1) or k)
  path = search.cache_path(k, "CPU", 2)
  search.cached_beam(k, "CPU", 2)
  doc = json.loads(path.read_text())
  assert doc["key"] == path.stem
  doc["key"] = "0" * 64   # the entry of another kernel, copied over this one
  path.write_text(json.dumps(doc))
  search.cached_beam(k, "CPU", 2)
  assert len(searched) == 2 and "another kernel" in capfd.readouterr().err
  search.cached_beam(k, "CPU", 2)
  assert len(searched) == 2   # rewritten and hit


# ---- class 3: knobs -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,value,allowed", [
  ("DEBUG", "junk", "an integer >= 0"), ("DEBUG", "-1", "an integer >= 0"), ("NOOPT", "true", "0 or 1"), ("BEAM", "2.5", "an integer >= 0"),
  ("CHECKED", "yes", "0 or 1"), ("DISABLE_COMPILER_CACHE", "2", "0 or 1"), ("EMULATE", "junk", "CUDA or AMD"), ("EMULATE", "CPU", "CUDA or AMD"),
  ("DEV", "a b", "a device name such as CPU or PYTHON (optionally NAME:n)"), ("NATIVE_TRANSCENDENTALS", "on", "0 or 1"), ("IGNORE_BEAM_CACHE", "y", "0 or 1")])
def test_junk_knob_values_are_rejected_naming_the_variable(monkeypatch, name, value, allowed):
  monkeypatch.setenv(name, value)
  with pytest.raises(knobs.KnobError) as e: knobs.get(name)
  assert str(e.value) == f"{name}={value!r} is not allowed: {name} takes {allowed}" and e.value.knob == name

@pytest.mark.parametrize("name,value,want", [("DEBUG", " 2 ", 2), ("NOOPT", "1", True), ("NOOPT", "", False), ("EMULATE", "cuda", "CUDA"),
                                             ("BEAM", "0", 0), ("CHECKED", "0", False), ("DEV", "python", "python")])
def test_knob_values_parse(monkeypatch, name, value, want):
  monkeypatch.setenv(name, value)
  assert knobs.get(name) == want

def test_empty_refgrad_cache_is_the_default_not_the_current_directory(monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", "")
  assert device.cache_dir(writable=False) == Path.home() / ".cache" / "refgrad"
  monkeypatch.setenv("REFGRAD_CACHE", "~/x")
  assert device.cache_dir(writable=False) == Path.home() / "x"

def test_unknown_dev_names_the_variable(monkeypatch):
  monkeypatch.setenv("DEV", "NOPE")
  with pytest.raises(knobs.KnobError, match="DEV='NOPE' is not allowed: unknown device 'NOPE'"): Tensor([1.0])

def test_knobs_table_lists_every_knob():
  t = knobs.table()
  assert all(f"`{k}`" in t for k in ("DEV", "EMULATE", "NOOPT", "BEAM", "DEBUG", "CHECKED", "REFGRAD_CACHE", "DISABLE_COMPILER_CACHE"))

@pytest.mark.parametrize("env", [{"EMULATE": "junk"}, {"DEBUG": "junk"}, {"DEV": "NOPE"}])
def test_conformance_reports_a_bad_knob_in_one_line(env):
  import os
  r = subprocess.run([sys.executable, "-m", "conformance", "--device", "CPU", "--group", "bitcast"], capture_output=True, text=True,
                     env={**os.environ, **env}, cwd=Path(__file__).resolve().parents[2], timeout=120)
  name = next(iter(env))
  assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith(f"error: {name}=") and r.stderr.count("\n") == 1, r.stderr


# ---- class 5: sizes beyond int32 (error paths only: nothing here allocates the huge tensor) ---------------------------------

_BIG = 2**31 + 16

@pytest.mark.parametrize("make,what", [
  (lambda: Tensor(np.broadcast_to(np.int8(1), (_BIG,))), "a buffer of 2147483664 elements"),   # a numpy view of one byte
  (lambda: Tensor.empty(_BIG), "a buffer of dtypes.float has 2147483664 elements"),
  (lambda: Tensor.empty(2**16, 2**16), "a buffer of dtypes.float has 4294967296 elements"),
  (lambda: Tensor.arange(2**31 + 5, dtype=dtypes.int64), "IOTA of shape (2147483653,): axis 0 has 2147483653 elements"),
  (lambda: Tensor.ones(_BIG, dtype=dtypes.int8), "axis 0 has 2147483664 elements"),
  (lambda: Tensor.ones(2**16, 2**16, dtype=dtypes.int8).sum(), "a reduction over axes (0, 1) of shape (65536, 65536) has 4294967296 elements"),
  (lambda: Tensor.ones(2**16, 2**16, dtype=dtypes.int8).reshape(-1), "a run of merged axes has 4294967296 elements"),
  (lambda: Tensor.ones(2**16, 1).expand(2**16, 2**16).realize(), "more than 2**31-1 elements"),
  (lambda: Tensor.ones(2**31 - 1).pad(((0, 17),)), "axis 0 has 2147483664 elements"),
])
def test_sizes_beyond_int32_raise_at_the_op(make, what):
  # before: wrapped indices (a sum of 2**31+16 ones gave 2147483794, arange(2**31+5)[-1] gave -2147483644) or a segfault
  with pytest.raises(ValueError, match="more than 2\\*\\*31-1") as e: make()
  assert what in str(e.value)

def test_large_but_indexable_graphs_still_build():
  # the intermediate of a big matmul (m, n, k) is never indexed flat: fine; so is a per-row sum of a 2**32-element broadcast
  assert (Tensor.ones(2048, 2048) @ Tensor.ones(2048, 2048)).shape == (2048, 2048)
  assert Tensor.ones(2**16, 2**16, dtype=dtypes.int8).sum(axis=1).shape == (2**16,)
  assert Tensor.ones(4, 2**30).reshape(2, 2, 2**30).shape == (2, 2, 2**30)


# ---- class 8: newcomer papercuts ------------------------------------------------------------------------------------

_ROOT = Path(__file__).resolve().parents[2]

@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_docs_link_only_to_files_in_the_repository(doc):
  import re
  text = (_ROOT / doc).read_text()
  targets = re.findall(r"\]\(([^)#]+)\)", text) + re.findall(r"`(\.\./[^`]+)`", text)
  assert "../shared" not in text
  for t in targets:
    if "://" in t: continue
    path = ((_ROOT / doc).parent / t).resolve()
    assert path.is_relative_to(_ROOT) and path.exists(), f"{doc} links to {t}, which a clone does not have"

def test_readme_says_how_to_install_tox_and_seeds_its_snippet():
  text = (_ROOT / "README.md").read_text()
  assert "pip install 'tox>=4'" in text and "Tensor.manual_seed(" in text.split("## Tensors")[1].split("```")[1]

def test_every_cli_option_has_help():
  import ast
  files = [_ROOT / "conformance" / "__main__.py", *sorted((_ROOT / "examples").glob("*.py")), *sorted((_ROOT / "bench").glob("*.py"))]
  calls = [(f.name, n) for f in files for n in ast.walk(ast.parse(f.read_text()))
           if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"]
  assert len(calls) >= 10
  missing = [f"{name}:{n.lineno}" for name, n in calls if not any(k.arg == "help" for k in n.keywords)]
  assert not missing, f"options without help text: {missing}"
  r = subprocess.run([sys.executable, "-m", "conformance", "--help"], capture_output=True, text=True, cwd=_ROOT, timeout=120)
  assert r.returncode == 0 and "seed of the random inputs" in r.stdout
