"""The one IR: `Ops`, the immutable hash-consed `UOp`, and pattern rewriting (`UPat`,
`PatternMatcher`, `graph_rewrite`)."""
from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Callable, Iterable, Sequence
from enum import Enum, auto
from typing import Any

from refgrad import coverage
from refgrad.dtype import DType, dtypes


class Ops(Enum):
  # kernel structure
  SINK = auto(); NOOP = auto(); CONST = auto(); DEFINE_GLOBAL = auto(); DEFINE_LOCAL = auto()
  DEFINE_ACC = auto(); DEFINE_VAR = auto(); SPECIAL = auto(); RANGE = auto(); ENDRANGE = auto()
  IF = auto(); ENDIF = auto(); LOAD = auto(); STORE = auto(); ASSIGN = auto(); BARRIER = auto()
  VECTORIZE = auto(); GEP = auto(); WMMA = auto()
  # unary ALU
  NEG = auto(); RECIP = auto(); SQRT = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto()
  # binary ALU
  ADD = auto(); MUL = auto(); IDIV = auto(); MOD = auto(); MAX = auto(); CMPLT = auto()
  CMPNE = auto(); XOR = auto(); OR = auto(); AND = auto(); SHL = auto(); SHR = auto()
  # ternary ALU
  WHERE = auto(); MULACC = auto()
  # conversions
  CAST = auto(); BITCAST = auto()
  # tensor graph (refgrad/lazy.py): buffers, movement, reductions, copies; never in a linear program
  BUFFER = auto(); IOTA = auto(); RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto()
  FLIP = auto(); REDUCE_AXIS = auto(); COPY = auto(); CONTIGUOUS = auto(); DETACH = auto()
  # kernel AST (refgrad/kernel.py): a reduction over RANGEs, lowered to DEFINE_ACC/ASSIGN
  REDUCE = auto()

  def __repr__(self) -> str: return f"Ops.{self.name}"


class GroupOp:
  Unary = frozenset({Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN})
  Binary = frozenset({Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.XOR, Ops.OR,
                      Ops.AND, Ops.SHL, Ops.SHR})
  Ternary = frozenset({Ops.WHERE, Ops.MULACC})
  ALU = Unary | Binary | Ternary
  Transcendental = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.XOR, Ops.OR, Ops.AND})
  IntOnly = frozenset({Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR})   # XOR/OR/AND take ints and bool
  Bitwise = frozenset({Ops.XOR, Ops.OR, Ops.AND})
  FloatOnly = frozenset({Ops.RECIP, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN})
  Block = frozenset({Ops.RANGE, Ops.IF})                     # open a scope closed by ENDRANGE/ENDIF
  Defines = frozenset({Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_VAR, Ops.DEFINE_ACC})
  Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}


# ---------------------------------------------------------------------------------------------
# UOp

class _UOpCache(type):
  """Hash-consing: building a UOp equal to a live one returns the live one."""
  cache: weakref.WeakValueDictionary[tuple, UOp] = weakref.WeakValueDictionary()
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
    key = (op, dtype, tuple(id(s) for s in src), _argkey(arg))
    if (ret := _UOpCache.cache.get(key)) is not None: return ret
    ret = super().__call__(op, dtype, tuple(src), arg)
    _UOpCache.cache[key] = ret
    return ret

def _argkey(arg: Any) -> Any:
  # 0.0 == -0.0 and nan != nan in Python; consts must key on the exact value
  if isinstance(arg, float): return ("f", math.copysign(1.0, arg), arg if arg == arg else "nan")
  if isinstance(arg, tuple): return tuple(_argkey(a) for a in arg)
  return (type(arg).__name__, arg)


class UOp(metaclass=_UOpCache):
  __slots__ = ("__dict__", "__weakref__", "arg", "dtype", "op", "src")
  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any

  def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
    object.__setattr__(self, "op", op); object.__setattr__(self, "dtype", dtype)
    object.__setattr__(self, "src", src); object.__setattr__(self, "arg", arg)
  def __setattr__(self, name: str, value: Any) -> None:
    if name in ("op", "dtype", "src", "arg"): raise AttributeError("UOp is immutable")
    object.__setattr__(self, name, value)
  def __reduce__(self) -> Any: raise TypeError("UOps are not pickled; serialize linear programs with refgrad.program")
  # identity is structural thanks to hash-consing
  def __hash__(self) -> int: return id(self)
  def __eq__(self, other: object) -> bool: return self is other
  def __bool__(self) -> bool: raise TypeError("a UOp has no truth value; compare with `is` or use symbolic.simplify")

  def replace(self, **kwargs: Any) -> UOp:
    d = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg, **kwargs}
    return UOp(d["op"], d["dtype"], tuple(d["src"]), d["arg"])

  def __repr__(self) -> str: return _pretty(self)

  def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
    """self with each node in `mapping` replaced, in one pass (replacements are not substituted again)."""
    done: dict[UOp, UOp] = {}
    for u in self.toposort:
      if u in mapping: done[u] = mapping[u]
      else:
        src = tuple(done[s] for s in u.src)
        done[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
    return done[self]

  @functools.cached_property
  def toposort(self) -> dict[UOp, None]:
    """Every node reachable from self, each after its sources (iterative, no recursion limit)."""
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      u, visited = stack.pop()
      if u in out: continue
      if visited: out[u] = None
      else:
        stack.append((u, True))
        stack.extend((s, False) for s in reversed(u.src) if s not in out)
    return out

  # ---- constructors -------------------------------------------------------------------------
  @staticmethod
  def const(dtype: DType, value: Any) -> UOp:
    """A constant, held exactly as `dtype` holds it; vector dtypes broadcast the value."""
    if dtype.count > 1: return UOp(Ops.VECTORIZE, dtype, (UOp.const(dtype.scalar(), value),) * dtype.count)
    return UOp(Ops.CONST, dtype, (), dtypes.as_const(value, dtype))
  def const_like(self, value: Any) -> UOp: return UOp.const(self.dtype, value)
  @staticmethod
  def variable(name: str, vmin: int, vmax: int, dtype: DType = dtypes.int32) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, vmin, vmax))
  @staticmethod
  def range(end: UOp | int, axis: int, dtype: DType = dtypes.int32) -> UOp:
    """A loop index 0..end-1; `axis` orders nesting (lower opens first)."""
    return UOp(Ops.RANGE, dtype, (_as_uop(end, dtype),), axis)
  @staticmethod
  def special(name: str, size: int, dtype: DType = dtypes.int32) -> UOp:
    """A launch index: 'gidxN' (workgroup id), 'lidxN' (id in the workgroup) or 'idxN' (global id)."""
    return UOp(Ops.SPECIAL, dtype, (), (name, size))
  @staticmethod
  def define_global(idx: int, dtype: DType, size: int = -1) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), idx)
  def load(self, idx: UOp, gate: UOp | None = None, alt: Any = 0, dtype: DType | None = None) -> UOp:
    """Load from buffer self at element idx; with a gate, lanes where it is false get `alt`."""
    dt = dtype if dtype is not None else self.dtype.base  # type: ignore[attr-defined]
    if gate is None: return UOp(Ops.LOAD, dt, (self, idx))
    return UOp(Ops.LOAD, dt, (self, idx, gate, _as_uop(alt, dt)))
  def store(self, idx: UOp, val: UOp, gate: UOp | None = None) -> UOp:
    return UOp(Ops.STORE, dtypes.void, (self, idx, val) + ((gate,) if gate is not None else ()))
  def alu(self, op: Ops, *src: UOp | Any) -> UOp:
    dt = self.dtype
    if op is Ops.WHERE:  # constants take the dtype of the other value, not the condition's
      if (dt := next((s.dtype for s in src if isinstance(s, UOp)), None)) is None: raise TypeError("WHERE needs a UOp among its values")
    srcs = (self, *(_as_uop(s, dt) for s in src))
    return UOp(op, alu_dtype(op, *(s.dtype for s in srcs)), srcs)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))
  def gep(self, i: int) -> UOp: return UOp(Ops.GEP, self.dtype.scalar(), (self,), (i,))
  def where(self, a: UOp | Any, b: UOp | Any) -> UOp: return self.alu(Ops.WHERE, a, b)
  def sink(self, *more: UOp) -> UOp: return UOp(Ops.SINK, dtypes.void, (self, *more))

  # operators build ALU nodes; Python scalars become constants of self's dtype
  def __neg__(self) -> UOp: return self.alu(Ops.NEG)
  def __add__(self, x: UOp | Any) -> UOp: return self.alu(Ops.ADD, x)
  def __radd__(self, x: Any) -> UOp: return self.const_like(x).alu(Ops.ADD, self)
  def __sub__(self, x: UOp | Any) -> UOp: return self.alu(Ops.ADD, -_as_uop(x, self.dtype))
  def __rsub__(self, x: Any) -> UOp: return self.const_like(x).alu(Ops.ADD, -self)
  def __mul__(self, x: UOp | Any) -> UOp: return self.alu(Ops.MUL, x)
  def __rmul__(self, x: Any) -> UOp: return self.const_like(x).alu(Ops.MUL, self)
  def __floordiv__(self, x: UOp | Any) -> UOp: return self.alu(Ops.IDIV, x)  # C division (truncates)
  def __mod__(self, x: UOp | Any) -> UOp: return self.alu(Ops.MOD, x)       # C remainder
  def __truediv__(self, x: UOp | Any) -> UOp: return self.alu(Ops.MUL, _as_uop(x, self.dtype).alu(Ops.RECIP))
  def __lt__(self, x: UOp | Any) -> UOp: return self.alu(Ops.CMPLT, x)
  def __gt__(self, x: UOp | Any) -> UOp: return _as_uop(x, self.dtype).alu(Ops.CMPLT, self)
  def ne(self, x: UOp | Any) -> UOp: return self.alu(Ops.CMPNE, x)
  def eq(self, x: UOp | Any) -> UOp: return self.ne(x).alu(Ops.XOR, True)
  def __xor__(self, x: UOp | Any) -> UOp: return self.alu(Ops.XOR, x)
  def __or__(self, x: UOp | Any) -> UOp: return self.alu(Ops.OR, x)
  def __and__(self, x: UOp | Any) -> UOp: return self.alu(Ops.AND, x)
  def __lshift__(self, x: UOp | Any) -> UOp: return self.alu(Ops.SHL, x)
  def __rshift__(self, x: UOp | Any) -> UOp: return self.alu(Ops.SHR, x)
  def maximum(self, x: UOp | Any) -> UOp: return self.alu(Ops.MAX, x)

  # ---- tensor graph (refgrad/lazy.py) ------------------------------------------------------
  @functools.cached_property
  def shape(self) -> tuple[int, ...]:
    _sources_first(self, "shape")
    return shape_of(self)
  @functools.cached_property
  def device(self) -> str | None:
    _sources_first(self, "device")
    return device_of(self)

  # ---- integer bounds (for symbolic simplification and the spec) -----------------------------
  @property
  def vmin(self) -> int | float: return self._bounds[0]
  @property
  def vmax(self) -> int | float: return self._bounds[1]
  @functools.cached_property
  def _bounds(self) -> tuple[int | float, int | float]:
    if self.dtype.count == 1 and (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool): _sources_first(self, "_bounds")
    return bounds(self)


def _sources_first(u: UOp, attr: str) -> None:
  """Compute the cached property `attr`, defined from the sources' own, on every node below u that lacks it first,
  sources before users: computed on demand it would recurse once per level of a deep graph (RecursionError past ~1000)."""
  if all(attr in s.__dict__ for s in u.src): return
  order: list[UOp] = []
  seen: set[UOp] = set()
  stack: list[tuple[UOp, bool]] = [(u, False)]
  while stack:
    x, ready = stack.pop()
    if ready: order.append(x)
    elif x not in seen:
      seen.add(x)
      stack.append((x, True))
      stack.extend((s, False) for s in x.src if attr not in s.__dict__ and s not in seen)
  for x in order[:-1]: getattr(x, attr)   # order ends with u itself

def _as_uop(x: UOp | Any, dtype: DType) -> UOp: return x if isinstance(x, UOp) else UOp.const(dtype, x)

def alu_dtype(op: Ops, *srcs: DType) -> DType:
  """Result dtype of an ALU op on operands of these dtypes (the spec checks the operands)."""
  if op in GroupOp.Comparison: return dtypes.bool.vec(srcs[0].count)
  if op is Ops.WHERE: return srcs[1]
  return srcs[0]

def _pretty(u: UOp, depth: int = 0) -> str:
  if depth > 3: return "..."
  args = f", arg={u.arg!r}" if u.arg is not None else ""
  srcs = ", ".join(_pretty(s, depth + 1) for s in u.src)
  return f"UOp({u.op!r}, {u.dtype!r}{args}" + (f", src=({srcs},))" if u.src else ")")


# ---------------------------------------------------------------------------------------------
# pattern matching

class UPat:
  """A pattern over UOps. `op` may be one Ops or a set; `src` a tuple (in order), a list
  (matched in any permutation, for commutative ops) or one UPat (every source matches it);
  `name` captures the matched UOp for the rule's function; `dtype` may be one dtype or a set
  (matched by scalar type); `arg` must be equal when given."""
  __slots__ = ("allow_any_len", "arg", "dtypes", "name", "ops", "src")

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False):
    self.ops = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
    self.dtypes = None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
    self.src, self.arg, self.name, self.allow_any_len = src, arg, name, allow_any_len

  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
    return UPat(Ops.CONST, dtype, name=name)
  @staticmethod
  def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat: return UPat(Ops.CONST, dtype, arg=value)
  def __repr__(self) -> str: return f"UPat({self.ops}, {self.dtypes}, {self.src}, {self.arg!r}, {self.name!r})"

  def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    """All ways u matches, each as the captures (extending `store`)."""
    if self.ops is not None and u.op not in self.ops: return []
    if self.dtypes is not None and u.dtype not in self.dtypes and u.dtype.scalar() not in self.dtypes: return []
    if self.arg is not None and not _arg_eq(self.arg, u.arg): return []
    if self.name is not None:
      if self.name in store and store[self.name] is not u: return []
      store = {**store, self.name: u}
    if self.src is None: return [store]
    if isinstance(self.src, UPat):
      stores = [store]
      for s in u.src: stores = [r for st in stores for r in self.src.match(s, st)]
      return stores
    orders = _permutations(self.src) if isinstance(self.src, list) else [self.src]
    out: list[dict[str, UOp]] = []
    for pats in orders:
      if len(pats) != len(u.src) and not (self.allow_any_len and len(u.src) >= len(pats)): continue
      stores = [store]
      for p, s in zip(pats, u.src):
        stores = [r for st in stores for r in p.match(s, st)]
        if not stores: break
      out.extend(stores)
    return out

def _arg_eq(a: Any, b: Any) -> bool:
  if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool): return _argkey(a) == _argkey(float(b))
  return (type(a) is type(b) and a == b) or (isinstance(b, float) and isinstance(a, int) and not isinstance(a, bool) and a == b)

@functools.cache
def _perm_cache(n: int) -> list[tuple[int, ...]]:
  return list(itertools.permutations(range(n)))
def _permutations(pats: list[UPat]) -> list[tuple[UPat, ...]]: return [tuple(pats[i] for i in p) for p in _perm_cache(len(pats))]


Rule = Callable[..., UOp | None]

class PatternMatcher:
  """An ordered list of (UPat, fn) rules. `rewrite(u)` returns the first non-None result of a rule
  whose pattern matches u, calling fn with the captures as keyword arguments (and `ctx=` when
  the function takes it)."""
  def __init__(self, rules: Sequence[tuple[UPat, Rule]]):
    self.rules = list(rules)
    coverage.register_rules(fn for _, fn in self.rules)
    self.by_op: dict[Ops, list[tuple[UPat, Rule, bool]]] = {}
    anyop: list[tuple[UPat, Rule, bool]] = []
    for p, fn in self.rules:
      entry = (p, fn, "ctx" in fn.__code__.co_varnames[:fn.__code__.co_argcount])
      if p.ops is None: anyop.append(entry)
      else:
        for o in p.ops: self.by_op.setdefault(o, []).append(entry)
    self.anyop = anyop
    if anyop:  # keep the declared order between op-specific and any-op rules
      order = {id(p): i for i, (p, _) in enumerate(self.rules)}
      for o in Ops: self.by_op[o] = sorted(self.by_op.get(o, []) + anyop, key=lambda e: order[id(e[0])])
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)

  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    for pat, fn, wants_ctx in self.by_op.get(u.op, ()):
      for captures in pat.match(u, {}):
        ret = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
        if ret is not None and ret is not u:
          if coverage.rule_hits is not None: coverage.rule_hits[fn] += 1   # off unless the fuzzer asks (refgrad/coverage.py)
          return ret
    return None


class NodeMemo:
  """A graph_rewrite memo kept on the nodes themselves (for rule sets whose result depends on the node alone)."""
  def __init__(self, key: str): self.key = key
  def __contains__(self, u: UOp) -> bool: return self.key in u.__dict__
  def __getitem__(self, u: UOp) -> UOp: return u.__dict__[self.key]
  def __setitem__(self, u: UOp, v: UOp) -> None: u.__dict__[self.key] = v


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, max_steps: int = 1_000_000, memo: Any = None) -> UOp:
  """Rewrite bottom-up to a fixed point: sources first, then the node, repeatedly, until no rule
  fires (a replacement is itself rewritten). Iterative, so deep graphs do not hit Python's
  recursion limit. `memo` (node -> result) may carry results across calls with the same rules."""
  done: Any = memo if memo is not None else {}
  stack: list[tuple[UOp, int, UOp | None]] = [(sink, 0, None)]
  steps = 0
  while stack:
    u, stage, r = stack.pop()
    if stage == 2:
      done[u] = done[r]  # type: ignore[index]
      continue
    if u in done: continue
    if stage == 0:
      stack.append((u, 1, None))
      stack.extend((s, 0, None) for s in reversed(u.src) if s not in done)
      continue
    new_src = tuple(done[s] for s in u.src)
    n = u if new_src == u.src else UOp(u.op, u.dtype, new_src, u.arg)
    steps += 1
    if steps > max_steps: raise RuntimeError(f"graph_rewrite did not converge in {max_steps} steps at {u}")
    if (r := pm.rewrite(n, ctx)) is None: done[u] = n
    elif r in done: done[u] = done[r]
    else: stack.extend([(u, 2, r), (r, 0, None)])
  return done[sink]


# ---- facts of a node computed from its sources alone: tensor-graph shape and device, integer bounds ------------------------

# Kernels index with int32 (RANGEs, flat offsets). So that no index can wrap, every axis, every buffer, every run of axes
# a reshape merges and every reduction stays within this many elements; beyond, the op that would need it raises.
MAX_ELEMENTS = 2**31 - 1

def too_big(what: str, n: int) -> ValueError:
  return ValueError(f"{what} has {n} elements, more than 2**31-1: refgrad indexes with int32 (split the work into smaller tensors)")

def shape_of(u: UOp) -> tuple[int, ...]:
  """The shape of a tensor-graph node (refgrad/lazy.py lists the ops), checked against MAX_ELEMENTS per axis."""
  s = _shape_of(u)
  for i, n in enumerate(s):
    if n > MAX_ELEMENTS: raise too_big(f"{u.op.name} of shape {s}: axis {i}", n)
  return s

def _shape_of(u: UOp) -> tuple[int, ...]:
  op, a = u.op, u.arg
  if op is Ops.BUFFER: return (a[2],)
  if op is Ops.CONST: return ()
  if op is Ops.IOTA: return (a,)
  if op in (Ops.RESHAPE, Ops.EXPAND): return a
  s = u.src[0].shape
  if op is Ops.PERMUTE: return tuple(s[i] for i in a)
  if op is Ops.PAD: return tuple(n + b + e for n, (b, e) in zip(s, a))
  if op is Ops.SHRINK: return tuple(e - b for b, e in a)
  if op is Ops.REDUCE_AXIS: return tuple(1 if i in a[1] else n for i, n in enumerate(s))
  if op in GroupOp.Elementwise or op in (Ops.FLIP, Ops.COPY, Ops.CONTIGUOUS, Ops.DETACH): return s
  raise TypeError(f"{op.name} is not a tensor-graph op")

def device_of(u: UOp) -> str | None:
  """Where a tensor-graph node lives: its buffer's or copy's device, else its sources' (None for constants)."""
  if u.op is Ops.BUFFER: return u.arg[1]
  if u.op is Ops.COPY: return u.arg
  for s in u.src:
    if (d := s.device) is not None: return d
  return None


def bounds(u: UOp) -> tuple[int | float, int | float]:
  """(min, max) that u can take, for scalar ints and bools; (-inf, inf) for what is not tracked."""
  dt = u.dtype
  if dt.count > 1 or not (dtypes.is_int(dt) or dt == dtypes.bool): return (-math.inf, math.inf)
  lo_t, hi_t = dtypes.min(dt), dtypes.max(dt)
  r = bounds_unclamped(u)
  if r is None or r[0] < lo_t or r[1] > hi_t or r[0] > r[1]: return (lo_t, hi_t)  # could wrap: no information
  return r

def bounds_unclamped(u: UOp) -> tuple[int, int] | None:
  """(min, max) by interval arithmetic, or None where not tracked; may lie outside the dtype (a wrap), unlike `bounds`."""
  op, s = u.op, u.src
  if op is Ops.CONST: return (u.arg, u.arg)
  if op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2])
  if op is Ops.SPECIAL: return (0, u.arg[1] - 1)
  if op is Ops.RANGE: return (0, s[0].vmax - 1) if s[0].vmax >= 1 else None
  if op is Ops.CAST and (dtypes.is_int(s[0].dtype) or s[0].dtype == dtypes.bool) and s[0].dtype.count == 1: return (s[0].vmin, s[0].vmax)
  if op not in GroupOp.ALU: return None
  v = [(x.vmin, x.vmax) for x in s]
  if op is Ops.ADD: return (v[0][0] + v[1][0], v[0][1] + v[1][1])
  if op is Ops.NEG: return (-v[0][1], -v[0][0])
  if op is Ops.MUL:
    c = [a * b for a in v[0] for b in v[1]]
    return (min(c), max(c))
  if op is Ops.MAX: return (max(v[0][0], v[1][0]), max(v[0][1], v[1][1]))
  if op is Ops.WHERE: return (min(v[1][0], v[2][0]), max(v[1][1], v[2][1]))
  if op is Ops.IDIV and v[1][0] > 0:  # C division by a positive divisor is monotone in the dividend
    return (_cdiv(v[0][0], v[1][0 if v[0][0] < 0 else 1]), _cdiv(v[0][1], v[1][1 if v[0][1] < 0 else 0]))
  if op is Ops.MOD and v[1][0] > 0:
    if v[0][0] >= 0: return (0, min(v[0][1], v[1][1] - 1))
    return (max(v[0][0], -(v[1][1] - 1)), min(max(v[0][1], 0), v[1][1] - 1))
  if op is Ops.AND and v[0][0] >= 0 and v[1][0] >= 0: return (0, min(v[0][1], v[1][1]))
  if op is Ops.SHR and v[0][0] >= 0 and v[1][0] >= 0 and v[1][1] < u.dtype.bits: return (v[0][0] >> v[1][1], v[0][1] >> v[1][0])
  if op in GroupOp.Comparison:
    a, b = v
    if op is Ops.CMPLT: return (int(a[1] < b[0]), int(a[0] < b[1]))
    return (int(a[1] < b[0] or b[1] < a[0]), int(not (a[0] == a[1] == b[0] == b[1])))
  return None

def _cdiv(a: int, b: int) -> int: return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
