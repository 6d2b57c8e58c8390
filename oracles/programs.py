"""Random tensor programs: recipes drawn from a seed (steered by coverage), built with the Tensor API and scheduled
into kernels.

A recipe is plain JSON: {"dtype", "shape", "steps": [[step name, r0, r1, r2], ...], "kernel": r}. Drawing a recipe is
cheap and needs no tensors, so the coordinator draws every case in order (the same stream whatever the worker count)
and counts coverage as it goes; the random ints r0..r2 are read modulo what the current shape allows when the
recipe is built. A step that does not apply to the tensor it meets (a dtype an op does not take, say) is skipped,
the same way every time. The kernel a recipe stands for is one of its schedule's kernels (index r modulo their
number).
"""
from __future__ import annotations

import functools
import json
import math
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from oracles.inputs import values
from refgrad import Tensor, schedule
from refgrad.dtype import DType, dtypes
from refgrad.lazy import SPLIT_REDUCE
from refgrad.uop import semantics, symbolic
from refgrad.uop.ops import Ops

DTYPES = [d.name for d in dtypes.all]
SIZES = [1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 17, 32]   # odd and prime sizes included
MAX_ELEMENTS = 2048


def _dt(name: str) -> DType: return next(d for d in dtypes.all if d.name == name)
def _is_float(name: str) -> bool: return dtypes.is_float(_dt(name))

# ---- steps: name -> (which dtypes it is drawn for, how it applies) ----------------------------------------------
# each function takes (tensor, [r0, r1, r2], new_input(shape, dtype)) and returns a tensor

def _other(t: Any, r: list[int], new: Callable) -> Any:
  """The second operand of a binary step: a new input of the same shape and dtype, or the tensor flipped."""
  return new(t.shape, t.dtype) if r[2] % 2 else t.flip(r[1] % t.ndim)

def _axis(t: Any, r: int) -> int: return r % t.ndim

def _shift(t: Any, r: list[int]) -> Any: return r[1] % (8 * t.dtype.itemsize)

def _reshape(t: Any, r: list[int], new: Callable) -> Any:
  if t.ndim >= 2 and r[0] % 2: return t.reshape(t.shape[0] * t.shape[1], *t.shape[2:])
  n = t.shape[-1]
  f = next((d for d in (2, 3, 5, 7) if n % d == 0 and n > d), None)
  return t.reshape(*t.shape[:-1], f, n // f) if f and t.ndim < 4 else t.reshape(-1)

def _matmul(t: Any, r: list[int], new: Callable) -> Any:
  a = t if t.ndim >= 2 else t.reshape(1, -1)
  w = new((a.shape[-1], SIZES[r[0] % 9]), a.dtype)
  return a.matmul(w, dtype=dtypes.float32) if a.dtype in (dtypes.float16, dtypes.bfloat16) and r[1] % 2 else a @ w

def _conv(t: Any, r: list[int], new: Callable) -> Any:
  x = t.reshape(1, 1, *t.shape[-2:]) if t.ndim >= 2 else t.reshape(1, 1, 1, -1)
  x = x.reshape(1, 1, *x.shape[-2:])
  k = 1 + r[0] % min(3, *x.shape[-2:])
  return x.conv2d(new((1 + r[1] % 3, 1, k, k if x.shape[-1] >= k else 1), x.dtype), padding=r[2] % 2)

def _gather(t: Any, r: list[int], new: Callable) -> Any:
  ax = _axis(t, r[0])
  idx = Tensor(np.random.default_rng(r[1]).integers(0, t.shape[ax], t.shape).astype(np.int32), device=t.device)
  return t.gather(ax, idx)

def _pad(t: Any, r: list[int], new: Callable) -> Any:
  return t.pad([(r[0] % 3, r[1] % 3) if i == _axis(t, r[2]) else (0, 0) for i in range(t.ndim)])

def _shrink(t: Any, r: list[int], new: Callable) -> Any:
  ax = _axis(t, r[2])
  n = t.shape[ax]
  lo = r[0] % max(1, n // 2)
  hi = n - r[1] % max(1, (n - lo) // 2)
  return t.shrink([(lo, hi) if i == ax else None for i in range(t.ndim)])

def _cast(t: Any, r: list[int], new: Callable) -> Any: return t.cast(_dt(DTYPES[r[0] % len(DTYPES)]))

def _bitcast(t: Any, r: list[int], new: Callable) -> Any:
  same = [d for d in dtypes.all if d.itemsize == t.dtype.itemsize and d != dtypes.bool]
  return t.bitcast(same[r[0] % len(same)])

def _const(t: Any, r: int) -> Any:
  """A boundary-dense scalar of t's dtype: small values, the dtype's extremes and halfway points (wrap-around in
  ints; rounding ties and the float16 range edge in floats)."""
  d = t.dtype
  if dtypes.is_float(d): return [0.5, -1.5, 2.0, 3.0, 1e-3, 65504.0, -0.0, 0.1, 2.5, -2.0 ** -20][r % 10]
  lo, hi = dtypes.min(d), dtypes.max(d)
  return [1, 2, 3, 7, 100 % (hi + 1), hi, lo, hi // 2 + 1, -1 if lo < 0 else hi - 1, 1 << (d.bits - 2)][r % 10]

def _const_chain(t: Any, r: list[int], mul: bool) -> Any:
  """t + c or t * c, sometimes followed by a second constant (the chains constant-folding rules reassociate) or, for
  ints, a division by a small constant (fixed-point scaling: (x*c1)//c2 wraps before it divides)."""
  out = t * _const(t, r[0]) if mul else t + _const(t, r[0])
  if r[1] % 3 == 1: out = out * _const(t, r[0] >> 4) if mul else out + _const(t, r[0] >> 4)
  elif r[1] % 3 == 2 and mul and not dtypes.is_float(t.dtype): out = out // (1 + (r[0] >> 4) % 8)
  return out

def _pad_value(t: Any, r: list[int], new: Callable) -> Any:
  """Padding with a value that is not 0 (a gated load's alternative), or a reflecting/circular mode."""
  ax = _axis(t, r[2])
  amt = [(1 + r[0] % 2, r[1] % 3) if i == ax else (0, 0) for i in range(t.ndim)]
  mode = ("constant", "constant", "reflect", "replicate", "circular")[r[1] % 5]
  if mode != "constant": return t.pad(amt, mode=mode)
  return t.pad(amt, value=True if t.dtype == dtypes.bool else _const(t, r[0] >> 3))

def _long_sum(t: Any, r: list[int], new: Callable) -> Any:
  """A full reduction of at least lazy.SPLIT_REDUCE elements (the two-stage path), the input repeated by an expand."""
  n = t.numel()
  rep = -(-SPLIT_REDUCE // n) + r[0] % 3
  flat = t.reshape(1, n).expand(rep, n)
  return flat.max() if r[1] % 3 == 0 else flat.sum()

def _wrap_cmp(t: Any, r: list[int], new: Callable) -> Any:
  """((t & m) + c) < c with m + c past the dtype's max: true exactly where the sum wrapped around. Integer bounds that
  forget wrap-around fold it to false (the symbolic_wrap injection); small inputs (1..3) wrap for some elements."""
  hi = dtypes.max(t.dtype)
  m, c = hi >> 1, hi - r[0] % 3
  return ((t & m) + c) < c

def bit_test_masks(r: list[int]) -> tuple[int, int]:
  """(m, m2) of the bit_test step: a low-bit mask 1..7 and a single bit 1, 2 or 4."""
  return 1 + r[0] % 7, 1 << (r[0] >> 3) % 3

def _bit_test(t: Any, r: list[int], new: Callable) -> Any:
  """Flag and parity tests of masked bits, selecting between two values: where((t & m) == 0, t, t + 1) ^
  where((t & m2) < 1, t, ~t). On unsigned values symbolic bounds t & m to [0, m], and folds a comparison its bounds
  decide: a bound off by one (the symbolic_and injection: t & m >= 1) folds both tests to false."""
  m, m2 = bit_test_masks(r)
  return ((t & m) == 0).where(t, t + 1) ^ ((t & m2) < 1).where(t, ~t)

def divmod_constants(d: DType, r: list[int]) -> tuple[int, int, int, int]:
  """(c1, n, c2, c3) of the divmod_join step on dtype d: all positive. The constants are equal for one draw in 2 (the
  case the join rules are for), else drawn apart; for one draw in 4, c1*n passes d's max (the overflow the rules'
  guard excludes)."""
  c1 = 2 + r[0] % 7
  c2, c3 = (c1, c1) if (r[0] >> 3) % 2 == 0 else (1 + (r[0] >> 4) % 9, 2 + (r[0] >> 8) % 7)
  n = 2 + (r[0] >> 12) % 5 if r[1] % 4 else dtypes.max(d) // c1 + 1
  return c1, n, c2, c3

def _divmod_join(t: Any, r: list[int], new: Callable) -> Any:
  """Integer index-style arithmetic with C division (idiv, fmod), the shapes symbolic's join and split rules rewrite:
  (t/c1)*c2 + t%c3, ((t/c1)%n)*c2 + t%c3, (t*c2 + t%c3) / c1 and % c1, on equal and unequal constants and values of
  both signs, joined by xor (a change in any one shows in the result). A rule applied where its guard fails (unequal
  constants, overflow) gives other bits than the AST evaluator and the numpy interpreter."""
  c1, n, c2, c3 = divmod_constants(t.dtype, r)
  s = t * c2 + t.fmod(c3)
  return (t.idiv(c1) * c2 + t.fmod(c3)) ^ (t.idiv(c1).fmod(n) * c2 + t.fmod(c3)) ^ s.idiv(c1) ^ s.fmod(c1)

INDEX_LIMIT = 2**31 - 1   # refgrad indexes with int32: every axis, merged run and buffer stays within this many elements

def big_view_geometry(n: int, r: list[int]) -> tuple[int, int, int, int]:
  """(rep, total, lo, hi) of the big_view step on n elements: the input repeated rep times as one axis of rep*n
  elements, padded to `total` elements (for one draw in 3: up to 3 short of, or exactly at, INDEX_LIMIT), of which the
  window [lo, hi) of at most 64 is kept: it ends at the last element, or up to two periods of the input before it, and
  holds at least one element of the input (not only padding)."""
  short = r[0] % 4
  rep = (INDEX_LIMIT - short) // n
  total = INDEX_LIMIT - short if r[2] % 3 == 2 else rep * n
  w = 1 + r[1] % min(64, total)
  lo = max(0, min(total - w - (r[1] >> 6) % (2 * n + 1), rep * n - 1))
  return rep, total, lo, min(total, lo + w)

def _big_view(t: Any, r: list[int], new: Callable) -> Any:
  """A small window of a view of about 2^31 elements (t repeated by a stride-0 expand, merged by a reshape, maybe padded
  with a non-zero value and flipped): the kernel's index arithmetic comes within a few elements of int32's wrap-around
  while it reads only t's few elements and writes only the window's."""
  n = t.numel()
  rep, total, lo, hi = big_view_geometry(n, r)
  flat = t.reshape(1, n).expand(rep, n).reshape(rep * n)
  if total > rep * n: flat = flat.pad([(0, total - rep * n)], value=True if t.dtype == dtypes.bool else _const(t, r[0] >> 2))
  v = flat.shrink([(lo, hi)])
  return v.flip(0) if r[2] % 2 else v

def limit_problem(recipe: dict[str, Any]) -> str | None:
  """Oracle "limits", for recipes with a big_view step: refgrad's documented element limit at its edge. Each big_view's
  whole view realized (`total` elements, up to exactly 2^31-1) must schedule, and a realized tensor of 2^31 elements
  (no axis past the limit) must be refused with a ValueError naming 2**31-1. Scheduling allocates nothing."""
  for name, *r in recipe["steps"]:
    if name != "big_view": continue
    total = big_view_geometry(1, r)[1]
    try: schedule.create_schedule([Tensor.empty(1).reshape(1, 1).expand(1, total).contiguous().uop], "CPU")
    except ValueError as e: return f"a realized tensor of {total} elements (within 2**31-1) is refused: {e}"
    try: schedule.create_schedule([Tensor.empty(1).reshape(1, 1).expand(2, 2**30).contiguous().uop], "CPU")
    except ValueError as e:
      if "2**31-1" not in str(e): return f"a realized tensor of 2**31 elements is refused without naming the limit: {e}"
    else: return "a realized tensor of shape (2, 2**30), 2**31 elements, is scheduled: its int32 indices wrap"
    return None
  return None

_F, _I, _B = "f", "i", "b"   # float, int (signed and unsigned), bool
STEPS: dict[str, tuple[str, Callable[[Any, list[int], Callable], Any]]] = {
  "neg": (_F + _I, lambda t, r, n: -t), "abs": (_F + _I, lambda t, r, n: t.abs()), "relu": (_F + _I, lambda t, r, n: t.relu()),
  "exp": (_F, lambda t, r, n: t.exp()), "log": (_F, lambda t, r, n: t.log()), "sqrt": (_F, lambda t, r, n: t.sqrt()),
  "sin": (_F, lambda t, r, n: t.sin()), "recip": (_F, lambda t, r, n: t.reciprocal()), "sigmoid": (_F, lambda t, r, n: t.sigmoid()),
  "floor": (_F, lambda t, r, n: t.floor()), "square": (_F + _I, lambda t, r, n: t * t),
  "add": (_F + _I, lambda t, r, n: t + _other(t, r, n)), "sub": (_F + _I, lambda t, r, n: t - _other(t, r, n)),
  "mul": (_F + _I, lambda t, r, n: t * _other(t, r, n)), "div": (_F, lambda t, r, n: t / _other(t, r, n)),
  "idiv_const": (_I, lambda t, r, n: t // (1 + r[0] % 7)), "mod_const": (_I, lambda t, r, n: t % (1 + r[0] % 7)),
  "idiv": (_I, lambda t, r, n: t // _other(t, r, n)),
  "maximum": (_F + _I + _B, lambda t, r, n: t.maximum(_other(t, r, n))), "minimum": (_F + _I, lambda t, r, n: t.minimum(_other(t, r, n))),
  "lt": (_F + _I + _B, lambda t, r, n: t < _other(t, r, n)), "eq": (_F + _I + _B, lambda t, r, n: t == _other(t, r, n)),
  "where": (_F + _I + _B, lambda t, r, n: (_other(t, r, n) > t).where(t, _other(t, [r[0], r[1] + 1, r[2] + 1], n))),
  "and": (_I + _B, lambda t, r, n: t & _other(t, r, n)), "or": (_I + _B, lambda t, r, n: t | _other(t, r, n)),
  "xor": (_I + _B, lambda t, r, n: t ^ _other(t, r, n)), "not": (_I + _B, lambda t, r, n: ~t),
  "shl": (_I, lambda t, r, n: t << _shift(t, r)), "shr": (_I, lambda t, r, n: t >> _shift(t, r)),
  "cast": (_F + _I + _B, _cast), "bitcast": (_F + _I, _bitcast),
  "sum": (_F + _I, lambda t, r, n: t.sum(_axis(t, r[0]), keepdim=bool(r[1] % 2))), "max": (_F + _I, lambda t, r, n: t.max(_axis(t, r[0]))),
  "min": (_F + _I, lambda t, r, n: t.min(_axis(t, r[0]))), "prod": (_F + _I, lambda t, r, n: t.prod(_axis(t, r[0]))),
  "mean": (_F, lambda t, r, n: t.mean(_axis(t, r[0]))), "argmax": (_F + _I, lambda t, r, n: t.argmax(_axis(t, r[0]))),
  "cumsum": (_F + _I, lambda t, r, n: t.cumsum(_axis(t, r[0]))),
  "permute": (_F + _I + _B, lambda t, r, n: t.permute(tuple(np.random.default_rng(r[0]).permutation(t.ndim).tolist()))),
  "reshape": (_F + _I + _B, _reshape), "pad": (_F + _I + _B, _pad), "shrink": (_F + _I + _B, _shrink),
  "flip": (_F + _I + _B, lambda t, r, n: t.flip(_axis(t, r[0]))),
  "expand": (_F + _I + _B, lambda t, r, n: t.reshape(1, *t.shape).expand(1 + r[0] % 3, *t.shape)),
  "matmul": (_F + _I, _matmul), "conv2d": (_F, _conv), "gather": (_F + _I + _B, _gather),
  "contiguous": (_F + _I + _B, lambda t, r, n: t.contiguous()),
  "add_const": (_F + _I, lambda t, r, n: _const_chain(t, r, False)), "mul_const": (_F + _I, lambda t, r, n: _const_chain(t, r, True)),
  "lt_const": (_F + _I, lambda t, r, n: t < _const(t, r[0])), "pad_value": (_F + _I + _B, _pad_value), "long_sum": (_F + _I, _long_sum),
  "wrap_cmp": (_I, _wrap_cmp), "big_view": (_F + _I + _B, _big_view), "divmod_join": (_I, _divmod_join),
  "bit_test": (_I, _bit_test),
}

RARE = {"long_sum": 0.05}   # steps whose kernels are slow to check (a 16k-step reduction on PYTHON): drawn this much less often

def _kind(dtype: str) -> str: return _B if dtype == "bool" else _F if _is_float(dtype) else _I


class RecipeStream:
  """Draws recipes one after another; each draw favours the (step, dtype) cells drawn least so far, so generation
  moves toward what has not been exercised. Deterministic: the same sequence of calls gives the same recipes."""
  def __init__(self, max_elements: int = MAX_ELEMENTS, max_steps: int = 5) -> None:
    self.coverage: Counter[tuple[str, str]] = Counter()
    self.max_elements, self.max_steps = max_elements, max_steps
    self.boost: Callable[[tuple[str, str]], float] = lambda cell: 1.0   # coverage feedback's weight of a cell (fuzz/coverage.py)
    self.last_cells: list[tuple[str, str]] = []                        # the (step, dtype) cells of the last draw

  def draw(self, rng: np.random.Generator) -> dict[str, Any]:
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    ndim = int(rng.integers(1, 4))
    shape = [SIZES[int(rng.integers(len(SIZES)))] for _ in range(ndim)]
    while math.prod(shape) > self.max_elements: shape[int(np.argmax(shape))] //= 2
    steps = []
    cur = dtype
    self.last_cells = []
    for _ in range(int(rng.integers(1, self.max_steps + 1))):
      names = [s for s, (kinds, _) in STEPS.items() if _kind(cur) in kinds]
      w = np.array([RARE.get(s, 1.0) * self.boost((s, cur)) / (1 + self.coverage[(s, cur)]) for s in names])
      name = names[int(rng.choice(len(names), p=w / w.sum()))]
      self.coverage[(name, cur)] += 1
      self.last_cells.append((name, cur))
      r = [int(x) for x in rng.integers(0, 1 << 16, 3)]
      steps.append([name, *r])
      if name in ("lt", "eq", "lt_const", "wrap_cmp"): cur = "bool"
      elif name == "cast": cur = DTYPES[r[0] % len(DTYPES)]
      elif name in ("mean", "exp", "log", "sqrt", "sin", "recip", "sigmoid", "div") and not _is_float(cur): cur = "float"
      elif name == "argmax": cur = "int"
    return {"dtype": dtype, "shape": shape, "steps": steps, "kernel": int(rng.integers(1 << 16))}


def build(recipe: dict[str, Any], new: Callable | None = None, realize_each: bool = False) -> Any:
  """The recipe's tensor (lazy; nothing is run). Inputs are empty tensors (the fuzzer fills every kernel buffer
  itself) unless `new(shape, dtype)` makes them; `realize_each`: every step's result is its own kernel (fusion off)."""
  def empty(shape: tuple[int, ...], dt: DType) -> Tensor: return Tensor.empty(*shape, dtype=dt, device="CPU")
  new = new or empty
  t = new(tuple(recipe["shape"]), _dt(recipe["dtype"]))
  for name, *r in recipe["steps"]:
    if name not in STEPS: raise ValueError(f"unknown recipe step {name!r}")
    try: nt = STEPS[name][1](t, r, new)
    except (TypeError, ValueError, AssertionError, IndexError, ZeroDivisionError): continue   # does not apply here
    if nt.numel() == 0 or nt.numel() > 4 * MAX_ELEMENTS: continue
    t = nt.contiguous() if realize_each else nt
  return t

@functools.lru_cache(maxsize=256)
def _kernels(recipe_text: str) -> tuple[tuple[str, Any], ...]:
  t = build(json.loads(recipe_text))
  items, _ = schedule.create_schedule([t.uop], "CPU")
  return tuple((it.name, it.ast) for it in items if it.ast is not None)

def kernels_of(recipe: dict[str, Any]) -> list[tuple[str, Any]]:
  """(name, AST) of every kernel the recipe's schedule runs."""
  return list(_kernels(json.dumps(recipe, sort_keys=True)))

def kernel_of(recipe: dict[str, Any]) -> tuple[str, Any] | None:
  """The kernel the recipe stands for, or None when its schedule has none (a program of constants, say)."""
  ks = kernels_of(recipe)
  return ks[recipe["kernel"] % len(ks)] if ks else None


# ---- the same kernels before symbolic simplification (the AST evaluator's independent input) ------------------------

@functools.lru_cache(maxsize=64)
def _raw_kernels(recipe_text: str) -> tuple[Any, ...]:
  with symbolic.unsimplified(): return tuple(ast for _, ast in _kernels.__wrapped__(recipe_text))   # uncached: _kernels' cache holds simplified ASTs

def raw_kernel_of(recipe: dict[str, Any], ast: Any) -> Any | None:
  """The recipe's kernel as the scheduler builds it before simplification, when it reads and writes the same buffers
  (number, dtype and size) as `ast`, the simplified kernel the case checks; else None."""
  text = json.dumps(recipe, sort_keys=True)
  try: raws = _raw_kernels(text)
  except Exception: return None   # the unsimplified graph may not schedule (it is only an oracle's input)
  if len(raws) != len(_kernels(text)) or not raws: return None
  raw = raws[recipe["kernel"] % len(raws)]
  def bufs(a: Any) -> list[Any]: return sorted({u.arg: u.dtype for u in a.toposort if u.op is Ops.DEFINE_GLOBAL}.items())
  return raw if bufs(raw) == bufs(ast) else None


# ---- the whole program, fused and unfused (oracle "program") ------------------------------------------------------

def run_program(recipe: dict[str, Any], seed: int, realize_each: bool, device: str = "PYTHON") -> np.ndarray:
  """The recipe run on `device` with NOOPT=1 on seeded "simple" inputs (oracles/inputs.py): the result's storage bits."""
  rng = np.random.default_rng(seed)
  def new(shape: tuple[int, ...], dt: DType) -> Any:
    n = math.prod(shape)
    if dt == dtypes.bfloat16:   # no numpy bfloat16: float32 values that bfloat16 holds exactly, then a cast
      return Tensor(semantics.to_float64(values(dt, n, "simple", rng), dt).astype(np.float32).reshape(shape), device=device).cast(dt)
    return Tensor(values(dt, n, "simple", rng).reshape(shape), device=device, dtype=dt)
  old = os.environ.get("NOOPT")
  os.environ["NOOPT"] = "1"
  try: out = build(recipe, new, realize_each).numpy()
  finally:
    if old is None: os.environ.pop("NOOPT", None)
    else: os.environ["NOOPT"] = old
  return np.ascontiguousarray(out)
