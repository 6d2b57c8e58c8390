"""TinyJit (tinygrad's name and behaviour): capture the kernels a function launches, replay them without scheduling.

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor: ...   # a training step, an inference, anything that realizes tensors

- call 1 runs the function normally (kernels get compiled, lazily made state such as optimizer buffers gets realized);
- call 2 runs it again inside `refgrad.schedule.recording()`, which records every launch (runner + buffers) and copy it
  makes: the capture;
- call 3 and later do not call the function. The Tensor arguments are realized, their buffers take the place of the
  captured inputs' buffers, and the captured launches and copies run in order: no scheduling, no lowering, no compiling.
  Consecutive launches on a device with a graph executor (`Compiled.graph`; on NV and AMD an HCQGraph, refgrad/runtime/hcq.py)
  are one step of it: one prebuilt command buffer (a wait on the device timeline, the launches with memory barriers where
  one depends on another, a signal of the timeline) whose kernel-argument addresses and signal values are patched,
  submitted with one doorbell.

Inputs are the Tensor arguments, positional and keyword, and (as in tinygrad) the Tensors inside tuple, list and dict
arguments. A later call must match the capture: the same containers, Tensor shapes, dtypes and devices, and equal
non-Tensor arguments; anything else raises `JitError` naming the argument (e.g. `argument 0 ('xs')[1]`) and both
signatures (`reset()` forgets the capture: the next call runs the function, the one after captures again). The capture
computes again whatever an earlier call memoized from its inputs (the same tensor in calls 1 and 2 still captures the
launches), and gives separately made Tensor arguments that share one buffer (equal constants) their own copies. A
tensor passed twice at the capture must be passed twice later (the launches read one buffer for both); a Tensor
argument must not be memory the launches use besides their inputs (e.g. an output of an earlier call): both raise
`JitError`. A returned input (or a reshape of one) is the call's argument at each replay; a lazy result is realized.

Outputs: the returned structure (a Tensor, or tuples/lists/dicts holding them) is rebuilt at each replay with fresh Tensor
objects over the captured output buffers, as in tinygrad: **a returned tensor is valid until the next call** (the next call
writes the same memory); `.numpy()` it or `.contiguous().realize()` it to keep it. Intermediate buffers are allocated
once, at the capture, and reused by every replay.

State: a tensor that lives across calls and that the function reads and rebinds (`assign`, e.g. parameters and Adam's
moments in `optimizer.step()`) is found at the capture: its buffer before the call is read by the launches and its buffer
after it is written by them. Replays alternate the two buffers (read the current one, write the other, rebind the
tensor), so the updates chain across calls exactly as without the JIT, without copies. The function must realize what it
changes (optimizers' `step()` does). A tensor that lives across calls and that the function only reads (weights in an
inference) is read as it is at each replay: given new contents (`assign`, loaded weights) between calls, the replay reads
those. What a replay cannot see, as in tinygrad: Python side effects in the function (it is
not called), tensors made from host data inside the function (their values are the capture's), random numbers drawn
inside it (the capture's), a tensor object replaced by another one (e.g. `opt.lr = 0.1` makes a new tensor).

`JIT=0` calls the function every time (no capture); `JIT=2` replays launch by launch without HCQ command buffers.
"""
from __future__ import annotations

import functools
import inspect
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from refgrad import knobs, lazy, program, schedule
from refgrad.device import Buffer, Device, Graph, GraphLaunch
from refgrad.program import Runner
from refgrad.schedule import buffer_node, is_realized
from refgrad.tensor import Tensor, live_tensors
from refgrad.uop.ops import UOp

R = TypeVar("R")


class JitError(ValueError):
  """A TinyJit call that does not match what was captured (argument shapes, dtypes, devices or values), or that cannot be
  replayed (an input that aliases the JIT's own buffers)."""


def _mode() -> int: return knobs.get("JIT")   # 0 off, 1 on, 2 on without HCQ command buffers

_capturing = 0   # TinyJit captures in progress: a TinyJit called inside one runs its function (the outer one records the launches)


@dataclass(frozen=True)
class _TensorSig:
  """What a replay needs to match of a Tensor argument (kept instead of the tensor, which may go)."""
  shape: tuple[int, ...]
  dtype: Any
  device: str
  def __str__(self) -> str: return f"Tensor(shape={self.shape}, dtype={self.dtype!r}, device={self.device})"

def _sig(v: Any) -> Any: return _TensorSig(v.shape, v.dtype, v.device) if isinstance(v, Tensor) else v

def _describe(v: Any) -> str: return str(v) if isinstance(v, _TensorSig) else f"{type(v).__name__} {v!r}"

def _same(a: Any, b: Any) -> bool:
  """Two signatures give the same capture: Tensors by shape, dtype and device; other values by equality (identity when
  equality is not a plain bool, e.g. numpy arrays)."""
  if a is b: return True
  if type(a) is not type(b): return False
  try: return bool(a == b)
  except Exception: return False


def _buffer_of(t: Tensor) -> tuple[UOp, Buffer]:
  """The BUFFER node and memory of a realized tensor."""
  node = buffer_node(t.uop)
  return node, lazy.buffer_of[node]


@dataclass
class _State:
  """A tensor the function reads and rebinds: `nodes[i]`/`slots[i]` are its buffer before (0) and after (1) the capture."""
  ref: weakref.ref[Tensor]
  shape: tuple[int, ...]
  nodes: tuple[UOp, UOp]
  slots: tuple[int, int]
  latest: int = 1              # which of the two holds the tensor's value after the last call


@dataclass
class _Read:
  """A tensor that lives across calls and that the function only reads (e.g. weights in an inference): its buffer at the
  capture (`node`) is captured slot `slot`; a replay reads the tensor's memory of that moment, so `assign` between calls
  is seen."""
  ref: weakref.ref[Tensor]
  node: UOp
  slot: int


@dataclass
class _Out:
  """A returned Tensor: the slot of its buffer (None: not touched by the launches) and the node it had at the capture."""
  slot: int | None
  node: UOp
  shape: tuple[int, ...]
  device: str
  input: int | None = None     # a Tensor argument's memory (index among them): a replay returns that argument's


@dataclass
class _Plan:
  """What a replay runs: the captured buffers by slot, steps in order (a launch, a copy, or an HCQ command buffer)."""
  bufs: list[Buffer]
  steps: list[Any]
  inputs: list[int | None]                 # slot of each Tensor argument's buffer (None: the launches do not read it)
  states: list[_State]
  reads: list[_Read]
  outs: list[_Out]
  template: Any                            # the returned structure with _Out in place of Tensors
  own: set[int] = field(default_factory=set)   # id() of every captured buffer that is not an input
  aliases: list[tuple[str, str]] = field(default_factory=list)   # Tensor arguments sharing one buffer at the capture


class _Launch:
  __slots__ = ("prg", "runner", "slots")
  def __init__(self, runner: Runner, slots: list[int]):
    self.runner, self.prg, self.slots = runner, runner.prg, slots
  def __call__(self, cur: list[Buffer]) -> None:
    spec = self.runner.spec
    self.prg(*[cur[s].handle for s in self.slots], global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=False)
  def graph_launch(self) -> GraphLaunch:
    spec = self.runner.spec
    return GraphLaunch(self.prg, spec.name, spec.global_size, spec.local_size, tuple(self.slots))


class _Copy:
  __slots__ = ("dest", "src")
  def __init__(self, dest: int, src: int): self.dest, self.src = dest, src
  def __call__(self, cur: list[Buffer]) -> None: cur[self.dest].copyin(cur[self.src].numpy())


class TinyJit(Generic[R]):
  """Decorator: the first call runs `fxn`, the second captures the launches it makes, later calls replay them (see the
  module docstring). `reset()` forgets the capture. `captured` is the number of launches a replay makes (None before)."""
  def __init__(self, fxn: Callable[..., R]):
    self.fxn = fxn
    functools.update_wrapper(self, fxn)   # type: ignore[arg-type]
    self.name = getattr(fxn, "__qualname__", repr(fxn))
    try: self._params = list(inspect.signature(fxn).parameters.values())
    except (TypeError, ValueError): self._params = []
    self.reset()

  def reset(self) -> None:
    """Forget the capture (and its buffers): the next call runs the function, the one after captures again."""
    self.cnt = 0
    self._plan: _Plan | None = None
    self._sig: list[tuple[str, Any]] = []   # (name, _sig) of each argument at the capture

  @property
  def captured(self) -> int | None:
    if self._plan is None: return None
    return sum(len(s) if isinstance(s, Graph) else isinstance(s, _Launch) for s in self._plan.steps)

  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    return self if obj is None else functools.partial(self.__call__, obj)   # a decorated method: `self` is argument 0

  def _named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, value) of every argument: positional ones by parameter name where the signature gives one."""
    out = []
    for i, a in enumerate(args):
      p = self._params[i] if i < len(self._params) else None
      named = p is not None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
      out.append((f"argument {i} ({p.name!r})" if named and p is not None else f"argument {i}", a))
    out.extend((f"argument {k!r}", v) for k, v in sorted(kwargs.items()))
    return [leaf for name, v in out for leaf in _flatten(name, v)]

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    # JIT=0, or inside another TinyJit's capture (the outer one records these launches): a plain call
    if _mode() == 0 or _capturing: return self.fxn(*args, **kwargs)
    named = self._named(args, kwargs)
    if self.cnt >= 2:
      assert self._plan is not None
      return self._replay(named)
    _realize([v for _, v in named if isinstance(v, Tensor)])
    if self.cnt == 0:
      ret = self.fxn(*args, **kwargs)
      self.cnt = 1
      return ret
    ret = self._capture(args, kwargs, named)
    self.cnt = 2
    return ret

  # ---- capture ----------------------------------------------------------------------------------------------------
  def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], named: list[tuple[str, Any]]) -> R:
    tensors = [v for _, v in named if isinstance(v, Tensor)]
    _unshare(tensors)
    before = {id(t): (weakref.ref(t), buffer_node(t.uop)) for t in live_tensors() if is_realized(t.uop)}
    hidden = _forget_derived(tensors)
    known = set(schedule.realized.keys())
    global _capturing
    _capturing += 1
    try:
      with schedule.recording() as log:
        ret = self.fxn(*args, **kwargs)
        outs = _leaves(ret)
        _realize(outs)
    finally:
      _capturing -= 1
      schedule.realized.update(hidden)

    slot_of: dict[int, int] = {}
    bufs: list[Buffer] = []
    def slot(b: Buffer) -> int:
      if id(b) not in slot_of:
        slot_of[id(b)] = len(bufs)
        bufs.append(b)
      return slot_of[id(b)]
    items = [(step.runner, [slot(b) for b in step.bufs]) for step in log]
    for r, _ in items:
      if r is not None and r.spec.vars: raise JitError(f"{self.name}: kernel {r.spec.name} takes variables, which TinyJit does not replay")
    written = {ss[0] for _, ss in items}
    read = {s for _, ss in items for s in ss[1:]}

    inputs = []
    for name, v in named:
      if not isinstance(v, Tensor): continue
      s = slot_of.get(id(_buffer_of(v)[1]))
      if s is not None and s in written:
        raise JitError(f"{self.name}: {name} is written by the function's kernels; TinyJit inputs must be read only")
      inputs.append(s)

    states: list[_State] = []
    for t in live_tensors():
      if not is_realized(t.uop): continue
      y, by = _buffer_of(t)
      sy = slot_of.get(id(by))
      if sy is None or sy not in written or (ent := before.get(id(t))) is None or ent[0]() is not t: continue
      x = ent[1]
      sx = slot_of.get(id(lazy.buffer_of[x]))
      if x is y or sx is None or sx not in read or sx in inputs: continue
      states.append(_State(weakref.ref(t), t.shape, (x, y), (sx, sy)))
    stated = {s for st in states for s in st.slots}
    reads: list[_Read] = []
    for t in live_tensors():
      if not is_realized(t.uop) or (ent := before.get(id(t))) is None or ent[0]() is not t: continue
      node, b = _buffer_of(t)
      s = slot_of.get(id(b))
      if s is None or s in written or s in inputs or s in stated or node is not ent[1]: continue
      reads.append(_Read(weakref.ref(t), node, s))

    input_of = {id(_buffer_of(t)[1]): i for i, t in reversed(list(enumerate(tensors)))}
    out_list: list[_Out] = []
    def out(t: Tensor) -> _Out:
      node, b = _buffer_of(t)
      out_list.append(o := _Out(slot_of.get(id(b)), node, t.shape, t.device, input_of.get(id(b))))
      return o
    template = _map_leaves(ret, out)
    # the launches' buffers are the JIT's from now on (replays write them): no memoized result made in the capture may
    # point there (a later `x*2` outside the JIT would read a replay's value), and a returned tensor reads its buffer
    written_bufs = {id(bufs[s]) for s in written}
    for t in outs:
      if id(_buffer_of(t)[1]) in written_bufs: t.rebind(lazy.reshape(buffer_node(t.uop), t.shape))
    for u in [u for u, b in schedule.realized.items() if u not in known and id(lazy.buffer_of.get(b)) in written_bufs]:
      del schedule.realized[u]

    # consecutive launches on one device become one step of that device's graph executor where it has one (JIT=2: never)
    runs: list[Any] = []
    for r, ss in items:
      if r is None: runs.append(_Copy(ss[0], ss[1]))
      elif runs and isinstance(runs[-1], list) and runs[-1][0].runner.device == r.device: runs[-1].append(_Launch(r, ss))
      else: runs.append([_Launch(r, ss)])
    steps: list[Any] = []
    for run in runs:
      if not isinstance(run, list): steps.append(run)
      elif _mode() != 2 and (g := Device[run[0].runner.device].graph([ln.graph_launch() for ln in run], bufs)) is not None: steps.append(g)
      else: steps.extend(run)
    own = {id(b) for i, b in enumerate(bufs) if i not in inputs}
    self._plan = _Plan(bufs, steps, inputs, states, reads, out_list, template, own, _aliases(named))
    self._sig = [(name, _sig(v)) for name, v in named]
    return ret

  # ---- replay -----------------------------------------------------------------------------------------------------
  def _check(self, named: list[tuple[str, Any]]) -> None:
    if [n for n, _ in named] != [n for n, _ in self._sig]:
      raise JitError(f"{self.name}: called with {', '.join(n for n, _ in named) or 'no arguments'} but captured with "
                     f"{', '.join(n for n, _ in self._sig) or 'no arguments'}; call .reset() to capture again")
    for (name, v), (_, c) in zip(named, self._sig):
      if not _same(sv := _sig(v), c):
        raise JitError(f"{self.name}: {name} is {_describe(sv)} but the captured call had {_describe(c)}; a TinyJit replays "
                       "one signature: call .reset() or use another TinyJit for this one")

  def _replay(self, named: list[tuple[str, Any]]) -> Any:
    self._check(named)
    plan = self._plan
    assert plan is not None
    tensors = [v for _, v in named if isinstance(v, Tensor)]
    _realize(tensors)
    # inputs are read only, so arguments may share memory now that did not at the capture; not the reverse: the launches
    # read one buffer for both
    now = set(_aliases(named))
    if split := [p for p in plan.aliases if p not in now]:
      raise JitError(f"{self.name}: {_pairs(split)} were one buffer at the capture (the same tensor) and are not now: the launches read one buffer for both; pass the same tensor in both places, "
                     "or call .reset() and capture with distinct tensors")
    st0 = time.perf_counter()
    cur = list(plan.bufs)
    nodes: dict[int, UOp] = {}
    for (name, t), s in zip(((n, v) for n, v in named if isinstance(v, Tensor)), plan.inputs):
      node, b = _buffer_of(t)
      if id(b) in plan.own:
        raise JitError(f"{self.name}: {name} holds memory the captured launches use besides their inputs (an output of an "
                       "earlier call, or a tensor the function reads or updates): pass a copy, e.g. t.contiguous().realize()")
      if s is not None: cur[s] = b
      nodes[id(b)] = node
    for st in plan.states:
      if (t := st.ref()) is not None: _realize([t])   # given new lazy contents since the last call: computed now, read below
      node = buffer_node(t.uop) if t is not None else st.nodes[st.latest]
      if node is st.nodes[0] or node is st.nodes[1]:
        rd = 0 if node is st.nodes[0] else 1
        cur[st.slots[0]], cur[st.slots[1]] = lazy.buffer_of[node], lazy.buffer_of[st.nodes[1 - rd]]
        st.latest = 1 - rd
      else:   # the tensor was given other memory since (e.g. loaded weights): read that, write the capture's
        cur[st.slots[0]], cur[st.slots[1]] = lazy.buffer_of[node], lazy.buffer_of[st.nodes[1]]
        st.latest = 1
      nodes[id(cur[st.slots[1]])] = st.nodes[st.latest]
    self._bind_reads(plan, cur, nodes)
    for step in plan.steps: step(cur)
    if program.DEBUG >= 2:
      for d in {b.device for b in cur}: Device[d].synchronize()
      print(f"jit {self.name}: replayed {self.captured} launches in {len(plan.steps)} steps, {(time.perf_counter() - st0) * 1e3:.3f} ms")
    for st in plan.states:
      if (t := st.ref()) is not None: t.uop = lazy.reshape(st.nodes[st.latest], st.shape)

    def rebuild(o: _Out) -> Tensor:
      if o.input is not None: node = buffer_node(tensors[o.input].uop)
      elif o.slot is None or cur[o.slot] is plan.bufs[o.slot]: node = o.node
      else: node = nodes[id(cur[o.slot])]
      return Tensor(lazy.reshape(node, o.shape), o.device)
    return _map_leaves(plan.template, rebuild, _Out)


  def _bind_reads(self, plan: _Plan, cur: list[Buffer], nodes: dict[int, UOp]) -> None:
    """The read-only tensors' memory of now in place of the capture's (a tensor given new contents since is read)."""
    for rd in plan.reads:
      if (t := rd.ref()) is None: continue   # gone: nothing can have changed it
      _realize([t])
      node, b = _buffer_of(t)
      if node is rd.node: continue
      cap = plan.bufs[rd.slot]
      what = f"{self.name}: a tensor the function reads (shape {t.shape}, {t.dtype}) was given new contents since the capture"
      if (b.size, b.dtype, b.device) != (cap.size, cap.dtype, cap.device):
        raise JitError(f"{what}, in memory of another size, dtype or device ({b.size} x {b.dtype} on {b.device}, captured "
                       f"{cap.size} x {cap.dtype} on {cap.device}); call .reset() to capture again")
      if id(b) in plan.own or (cur[rd.slot] is not cap and cur[rd.slot] is not b):
        raise JitError(f"{what}, and that memory is also used by the captured launches in another role (or by another "
                       "tensor the function reads): pass it as an argument, or .assign a copy (t.contiguous().realize())")
      cur[rd.slot], nodes[id(b)] = b, node


def _aliases(named: list[tuple[str, Any]]) -> list[tuple[str, str]]:
  """Pairs (first name, other name) of Tensor arguments whose memory is one buffer."""
  first: dict[int, str] = {}
  out = []
  for name, v in named:
    if not isinstance(v, Tensor): continue
    b = id(_buffer_of(v)[1])
    if b in first: out.append((first[b], name))
    else: first[b] = name
  return out

def _pairs(al: list[tuple[str, str]]) -> str: return "; ".join(f"{a} and {b}" for a, b in al) or "none"


def _flatten(name: str, v: Any) -> list[tuple[str, Any]]:
  """(name, leaf) of every value inside tuples, lists and dicts (as tinygrad, Tensors in them are inputs too); an empty
  container is a leaf of its own, and each container's type is part of the signature."""
  if isinstance(v, (tuple, list)) and v: items = [(f"{name}[{i}]", x) for i, x in enumerate(v)]
  elif isinstance(v, dict) and v: items = [(f"{name}[{k!r}]", x) for k, x in v.items()]
  else: return [(name, v)]
  return [(f"{name} ({type(v).__name__})", _Container(type(v), len(v)))] + [leaf for n, x in items for leaf in _flatten(n, x)]


@dataclass(frozen=True)
class _Container:
  """A tuple, list or dict argument's place in the signature (its leaves follow it)."""
  kind: type
  n: int


def _unshare(tensors: list[Tensor]) -> None:
  """Give each distinct Tensor argument its own memory for the capture: separately made tensors may share one buffer
  (equal constants are realized once), and launches captured reading one buffer for two arguments could not take two
  different ones later. The same Tensor object twice stays one buffer (a later call must pass one tensor there too)."""
  seen: dict[int, int] = {}
  for t in tensors:
    b = _buffer_of(t)[1]
    if seen.setdefault(id(b), id(t)) == id(t): continue
    node = lazy.new_buffer(t.device, b.size, b.dtype)
    lazy.buffer_of[node].copyin(b.numpy())
    t.rebind(lazy.reshape(node, t.shape))
    seen[id(lazy.buffer_of[node])] = id(t)


def _forget_derived(tensors: list[Tensor]) -> dict[UOp, UOp]:
  """Hide every result memoized in schedule.realized that was computed from these tensors (e.g. `x*2` of the same `x` in
  the previous call), so that the capture launches the kernels computing them again; returns what it hid."""
  roots = {t.uop for t in tensors} | {buffer_node(t.uop) for t in tensors}
  hidden = {}
  for u, b in list(schedule.realized.items()):
    if u not in roots and any(s in roots for s in u.toposort): hidden[u] = b
  for u in hidden: del schedule.realized[u]
  return hidden


def _realize(ts: list[Tensor]) -> None:
  if todo := [t for t in ts if not is_realized(t.uop)]: Tensor.realize_all(*todo)


def _leaves(x: Any) -> list[Tensor]:
  out: list[Tensor] = []
  _map_leaves(x, lambda t: out.append(t) or t)
  return out

def _map_leaves(x: Any, f: Callable[[Any], Any], kind: type = Tensor) -> Any:
  """x with every `kind` leaf inside tuples, lists and dict values replaced by f(leaf)."""
  if isinstance(x, kind): return f(x)
  if isinstance(x, (tuple, list)): return type(x)(_map_leaves(v, f, kind) for v in x)
  if isinstance(x, dict): return {k: _map_leaves(v, f, kind) for k, v in x.items()}
  return x


__all__ = ["JitError", "TinyJit"]
