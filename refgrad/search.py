"""BEAM search: choose a kernel's Opts by timing candidates on the device it will run on, with a persistent cache.

`beam_search(k, device, amt)` keeps the `amt` fastest kernels of each round; every Opt in `valid_opts` of every
kernel in the beam gives a candidate. Candidates are lowered and compiled (the C compiler runs in a small thread
pool; every UOp is built on the calling thread, because hash-consing is not thread-safe), then run a few times
on buffers the search allocates itself -- never the user's, since a kernel may overwrite what it reads -- and
timed by their best run. The search stops when a round does not beat the best kernel so far by MIN_GAIN, after
`max_rounds` rounds, or when `time_budget_s` has passed.

A candidate may win only if it computes what the starting kernel computes, on the same inputs, in every buffer
(so a candidate that clobbers an input loses too): ints and bools bit for bit (`semantics.same_bits`), floats
within a tolerance (`_rtol`; Opts may reorder a float reduction, docs/architecture.md). A candidate that cannot be
lowered, compiled or run (target limits, LinearizeError, CompileError, undefined behaviour on PYTHON) is skipped.
DEBUG>=2 prints each round and every skipped or wrong candidate.

Inputs are deterministic (seed 0): floats standard normal, ints and uints 1..3 (no division by zero, no
overflowing shifts, no MIN // -1 when a kernel divides or shifts by a loaded value), bools uniform. Those
inputs can still make a kernel undefined (e.g. dividing by a difference of loads): on a device other than
PYTHON such a kernel is first run once on PYTHON, which reports the undefined behaviour instead of letting the
CPU trap, and the search then leaves the kernel as it is.

`cached_beam(k, device, amt)` remembers the chosen Opts as JSON (never pickle) in
cache_dir()/"beam"/<key>.json; the key hashes `ast_key(k.ast)`, the Opts already applied, the device (without
":n"), the kernel's target and amt. IGNORE_BEAM_CACHE=1 skips reading the cache (the result is still written).
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from refgrad import knobs, program
from refgrad.codegen import to_linear
from refgrad.device import Buffer, CompileError, Device, cache_dir, cache_write, warn
from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.kernel import Kernel
from refgrad.opt import InvalidOptError, Opt, OptOps, apply_opt, apply_opts, valid_opts
from refgrad.program import Runner
from refgrad.renderer.serialize import SerializeError, encode_arg, encode_dtype
from refgrad.runtime.simt import ExecutionError, UndefinedBehaviourError
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp

RUNS = 3                 # timed runs per candidate; its time is the fastest
MIN_GAIN = 0.01          # a round must be 1% faster than the best so far to go on (timing noise is not progress)
MAX_ROUNDS = 16          # each round adds one Opt; the upcast and work-item limits end a search well before this
SLOW_CUTOFF = 5.0        # a candidate whose first run is this many times slower than the best is not run again
CACHE_FORMAT = "refgrad.beam/1"

# a candidate that fails in one of these ways is skipped; anything else is a bug and propagates
_SKIP = (ValueError, NotImplementedError, CompileError, UndefinedBehaviourError, ExecutionError)


def beam_width() -> int:
  """$BEAM: the beam width to search with (0: no search)."""
  return int(knobs.get("BEAM"))


# ---- the search ------------------------------------------------------------------------------------------------

@dataclass
class _Bench:
  """The search's own buffers, the data they are reset to before every run, and the starting kernel's results."""
  device: str
  bufs: list[Buffer]
  data: list[np.ndarray]
  ref: list[np.ndarray]


def beam_search(k: Kernel, device: str, amt: int, max_rounds: int = MAX_ROUNDS, time_budget_s: float | None = None) -> Kernel:
  """The fastest kernel found by a beam search of width `amt` from k (k itself when nothing beats it); the Opts
  it added are `result.applied[len(k.applied):]`. See the module docstring."""
  if amt < 1: raise ValueError(f"beam width must be >= 1, got {amt}")
  dev, start = Device.canonicalize(device), time.perf_counter()
  try:
    ref_runner = Runner.from_sink(k.name, k.lower(), dev)
    spec = ref_runner.spec
    if spec.vars or any(dt.size < 0 for _, dt in spec.globals): raise NotImplementedError("symbolic sizes or variables are not searched")
    data = [_input_data(dt, i) for i, dt in spec.globals]
    # a CPU traps on an integer division by zero: the PYTHON device reports it instead
    if dev.split(":")[0] != "PYTHON" and _may_trap(k.ast):
      _run_once(Runner.from_sink(k.name, k.lower(), "PYTHON"), _Bench("PYTHON", _alloc("PYTHON", spec.globals), data, []), read=False)
    bench = _Bench(dev, _alloc(dev, spec.globals), data, [])
    bench.ref, best_t = _run_candidate(ref_runner, bench, RUNS, None)
  except (*_SKIP, TypeError) as e:   # TypeError: a dtype the device does not support
    _debug(2, f"beam {k.name}: the starting kernel cannot be compiled or run on {dev} with the search's inputs, not searching: {_first_line(e)}")
    return k
  best, beam = k, [k]
  seen: set[UOp] = {k.lower()}
  _debug(2, f"beam {k.name} on {dev}: width {amt}, start {best_t * 1e6:10.2f} us")
  for rnd in range(max_rounds):
    cands: list[tuple[Kernel, UOp]] = []
    for bk in beam:
      for o in valid_opts(bk):
        try:
          nk = apply_opt(bk, o)
          sink = nk.lower()
        except _SKIP as e:
          _debug(2, f"beam {k.name}: skip {bk.applied + [o]}: {_first_line(e)}")
          continue
        if sink in seen: continue   # a program already timed (e.g. SWAP undone by SWAP)
        seen.add(sink)
        cands.append((nk, sink))
    runners = _compile_candidates(k.name, [s for _, s in cands], dev)
    timed: list[tuple[float, int, Kernel]] = []
    for i, ((nk, _), r) in enumerate(zip(cands, runners)):
      if isinstance(r, BaseException):
        _debug(2, f"beam {k.name}: skip {nk.applied}: {_first_line(r)}")
        continue
      try: outs, t = _run_candidate(r, bench, RUNS, best_t * SLOW_CUTOFF)
      except _SKIP as e:
        _debug(2, f"beam {k.name}: skip {nk.applied}: {_first_line(e)}")
        continue
      if (bad := _disagreement(outs, bench.ref, r.spec.globals)) is not None:
        _debug(2, f"beam {k.name}: WRONG RESULT, dropped {nk.applied}: {bad}")
        continue
      timed.append((t, i, nk))
    timed.sort(key=lambda x: (x[0], x[1]))   # ties go to the earlier candidate: beam order, then valid_opts order
    if not timed or timed[0][0] >= best_t * (1 - MIN_GAIN):
      _debug(2, f"beam {k.name} round {rnd + 1}: {len(cands)} candidates, no gain; best {best_t * 1e6:10.2f} us {best.applied}")
      break
    best_t, best = timed[0][0], timed[0][2]
    beam = [nk for _, _, nk in timed[:amt]]
    _debug(2, f"beam {k.name} round {rnd + 1}: {len(cands)} candidates, best {best_t * 1e6:10.2f} us {best.applied}")
    if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
      _debug(2, f"beam {k.name}: time budget of {time_budget_s} s spent")
      break
  _debug(2, f"beam {k.name}: chose {best.applied[len(k.applied):]} in {time.perf_counter() - start:.2f} s")
  return best


def _compile_candidates(name: str, sinks: list[UOp], device: str) -> list[Runner | BaseException]:
  """A Runner (or the error that stopped it) per kernel graph. With a compile cache (the CPU device), the sources
  are compiled in a thread pool first -- the compiler is a subprocess -- so building each Runner on this thread
  only loads the cached binary."""
  dev = Device[device]
  if dev.compiler.cachekey and not knobs.get("DISABLE_COMPILER_CACHE") and len(sinks) > 1:
    srcs = []
    for s in sinks:
      try: srcs.append(dev.renderer.render(name, to_linear(s, dev.renderer)))
      except _SKIP: pass   # reported when its Runner is built below
    with concurrent.futures.ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
      # a source that fails to compile fails again below, where the error is kept
      list(pool.map(lambda src: _try(dev.compiler.compile_cached, src), srcs))
  out: list[Runner | BaseException] = []
  for s in sinks:
    try: out.append(Runner.from_sink(name, s, device))
    except _SKIP as e: out.append(e)
  return out

def _run_candidate(r: Runner, bench: _Bench, runs: int, cutoff: float | None) -> tuple[list[np.ndarray], float]:
  """(every buffer after the first run, the fastest of `runs` runs); one run only when the first takes longer
  than `cutoff`."""
  outs, t = _run_once(r, bench, read=True)
  for _ in range(runs - 1):
    if cutoff is not None and t > cutoff: break
    t = min(t, _run_once(r, bench, read=False)[1])
  return outs, t

def _run_once(r: Runner, bench: _Bench, read: bool) -> tuple[list[np.ndarray], float]:
  """Reset the buffers (so every run sees the same inputs), launch once: (the buffers if `read`, seconds)."""
  for b, d in zip(bench.bufs, bench.data): b.copyin(d)
  # launched directly: Runner.__call__ checks what the search already guarantees and prints every launch at DEBUG>=2
  s = r.spec
  t = r.prg(*[b.handle for b in bench.bufs], global_size=s.global_size, local_size=s.local_size, vals=(), wait=True)
  return ([b.numpy() for b in bench.bufs] if read else []), float(t)


def _alloc(device: str, globals_: tuple[tuple[int, PtrDType], ...]) -> list[Buffer]:
  if [i for i, _ in globals_] != list(range(len(globals_))): raise ValueError(f"kernel buffers are not numbered 0..n-1: {globals_}")
  return [Buffer(device, dt.size, dt.base) for _, dt in globals_]

def _input_data(dt: PtrDType, i: int) -> np.ndarray:
  """Deterministic contents of buffer i (see the module docstring)."""
  d, n = dt.base.scalar(), dt.size * dt.base.count
  rng = np.random.default_rng([0, i])
  if dtypes.is_float(d): return semantics.round_float(rng.standard_normal(n), d)
  if d == dtypes.bool: return rng.integers(0, 2, n).astype(np.bool_)
  return rng.integers(1, 4, n).astype(d.np)

def _may_trap(ast: UOp) -> bool:
  """Whether the kernel divides by a value that is not a constant: undefined for zero, and a CPU traps on it."""
  return any(u.op in (Ops.IDIV, Ops.MOD) and u.src[1].op is not Ops.CONST for u in ast.toposort)


def _rtol(d: DType) -> float:
  """Float tolerance across Opts, relative to the largest finite magnitude of the reference buffer (at least 1):
  1e-5 for float32/float64 (the rule of tests/refgrad/test_opt.py; inputs are O(1)), 8 ulps at 1.0 for the
  narrower float16/bfloat16, whose reordered reductions differ by more."""
  eps = {dtypes.float16: 2.0 ** -10, dtypes.bfloat16: 2.0 ** -7}.get(d, 0.0)
  return max(1e-5, 8 * eps)

def _disagreement(outs: list[np.ndarray], ref: list[np.ndarray], globals_: tuple[tuple[int, PtrDType], ...]) -> str | None:
  """None when every buffer agrees with the reference, else what differs."""
  if len(outs) != len(ref): return f"{len(outs)} buffers, the starting kernel has {len(ref)}"
  for (i, dt), o, r in zip(globals_, outs, ref):
    d = dt.base.scalar()
    if o.shape != r.shape: return f"buffer {i} has shape {o.shape}, expected {r.shape}"
    same = semantics.same_bits(o, r, d)
    if dtypes.is_float(d):
      of, rf = semantics.to_float64(o, d), semantics.to_float64(r, d)
      fin = np.isfinite(rf)
      atol = _rtol(d) * max(1.0, float(np.abs(rf[fin]).max()) if fin.any() else 1.0)
      with np.errstate(invalid="ignore"): same = same | (np.abs(of - rf) <= atol)
    if not same.all():
      j = int(np.flatnonzero(~np.asarray(same).reshape(-1))[0])
      return f"buffer {i} differs at {j} of {same.size}: {o.reshape(-1)[j]!r}, expected {r.reshape(-1)[j]!r}"
  return None


# ---- the cache -------------------------------------------------------------------------------------------------

def ast_key(ast: UOp) -> str:
  """A deterministic text of a graph: one line per node in toposort order with its op, dtype, arg and the
  positions of its sources. Equal graphs give equal texts (in any process); different graphs different texts."""
  pos: dict[UOp, int] = {}
  lines = []
  for i, u in enumerate(ast.toposort):
    pos[u] = i
    lines.append(json.dumps([u.op.name, _dtype_text(u.dtype), [pos[s] for s in u.src], _arg_text(u.arg)], separators=(",", ":")))
  return "\n".join(lines)

def _dtype_text(dt: DType) -> str:
  try: return encode_dtype(dt)
  except SerializeError: return f"?{dt!r}"

def _arg_text(arg: Any) -> Any:
  if isinstance(arg, Enum): return {"enum": f"{type(arg).__name__}.{arg.name}"}   # e.g. a REDUCE's Ops.ADD
  if isinstance(arg, tuple): return {"t": [_arg_text(a) for a in arg]}
  try: return encode_arg(arg)
  except SerializeError: return {"repr": f"{type(arg).__qualname__}:{arg!r}"}

def cache_key(k: Kernel, device: str, amt: int) -> str:
  """sha256 of what a search's result depends on: the AST, the Opts already applied, the device without ':n',
  the target and the beam width."""
  tgt = getattr(getattr(k, "target", None), "name", None) or "CPU"
  parts = [CACHE_FORMAT, ast_key(k.ast), json.dumps([_opt_json(o) for o in k.applied]),
           Device.canonicalize(device).split(":")[0], tgt, str(amt)]
  return hashlib.sha256("\0".join(parts).encode()).hexdigest()

def cache_path(k: Kernel, device: str, amt: int) -> Path: return cache_dir(writable=False) / "beam" / f"{cache_key(k, device, amt)}.json"

def _opt_json(o: Opt) -> list[Any]: return [o.op.name, o.axis, o.arg]

def _opt_from_json(x: Any) -> Opt:
  if not (isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) and x[0] in OptOps.__members__
          and all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in x[1:])):
    raise ValueError(f"not an Opt [op name, axis, arg]: {x!r}")
  return Opt(OptOps[x[0]], x[1], x[2])

def _read_cache(path: Path, key: str) -> list[Opt] | None:
  """The cached Opts, or None when there is no entry; a file that cannot be read, is not an entry or is the entry
  of another key (swapped) is reported in one line and treated as missing (the search rewrites it)."""
  try: text = path.read_bytes()
  except (FileNotFoundError, NotADirectoryError): return None
  except OSError as e:
    warn(f"beam cache: cannot read {path} ({e.strerror or e}); searching again")
    return None
  try:
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or not isinstance(doc.get("opts"), list):
      raise ValueError(f"expected an object with \"format\": {CACHE_FORMAT!r} and a list \"opts\"")
    if doc.get("key") != key: raise ValueError("it is the entry of another kernel (its key differs)")
    return [_opt_from_json(x) for x in doc["opts"]]
  except ValueError as e:   # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
    warn(f"beam cache: {path} is corrupt ({_first_line(e)}); searching again")
    return None


def cached_beam(k: Kernel, device: str, amt: int) -> Kernel:
  """beam_search(k, device, amt) through the on-disk cache: a hit applies the cached Opts without timing anything;
  a miss, a corrupt entry or Opts that no longer apply search again and (over)write the entry."""
  # DISABLE_COMPILER_CACHE=1: no file is read or written
  key, use_disk = cache_key(k, device, amt), not knobs.get("DISABLE_COMPILER_CACHE")
  path = cache_path(k, device, amt)
  if use_disk and not knobs.get("IGNORE_BEAM_CACHE") and (opts := _read_cache(path, key)) is not None:
    try: return apply_opts(k, opts)
    except InvalidOptError as e: _debug(1, f"beam cache: {path} no longer applies ({_first_line(e)}); searching again")
  best = beam_search(k, device, amt)
  doc = {"format": CACHE_FORMAT, "key": key, "kernel": k.name, "device": Device.canonicalize(device).split(":")[0], "amt": amt,
         "opts": [_opt_json(o) for o in best.applied[len(k.applied):]]}
  if use_disk: cache_write(Path("beam") / path.name, (json.dumps(doc) + "\n").encode())
  return best


# ---- helpers ---------------------------------------------------------------------------------------------------

def _debug(level: int, msg: str) -> None:
  if program.DEBUG >= level: print(msg)

def _first_line(e: BaseException) -> str: return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

def _try(fn: Any, *args: Any) -> Any:
  try: return fn(*args)
  except Exception as e: return e   # raised again, and kept, when the Runner is built on the calling thread
