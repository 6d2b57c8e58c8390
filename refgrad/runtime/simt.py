"""The SIMT executor: runs a linear program over every lane of a launch at once, in numpy.

This is the reference execution model (docs/architecture.md, "The PYTHON device"), shared by the
PYTHON device and the mock GPUs, so it knows nothing of any allocator: buffers come in as
`Memory` (bytes plus which bytes were written).

- Lanes: prod(global_size) * prod(local_size), workgroup-major, dimension 0 fastest. Big launches
  run in batches of whole workgroups (a valid schedule: workgroups are independent).
- Values: one numpy array per live value in storage form (see refgrad/uop/semantics.py), shape
  (lanes,) or (1,) for uniform values (constants, variables, loop indices), with a trailing axis
  for vector dtypes. Arrays are never modified in place, so values may share them.
- Control flow: RANGE loops run in Python with all lanes together (their end must be the same
  on every active lane); IF/ENDIF push and pop an active-lane mask; an IF no lane takes is
  skipped. ASSIGN updates the accumulator on active lanes only.
- ALU, CAST and BITCAST go through `semantics.evaluate`: the executor *is* the definition.
- Memory: LOAD/STORE are gathers/scatters, bounds-checked always (`OutOfBoundsError`). Local
  memory is one region per workgroup; BARRIER ends a local-memory epoch.
- WMMA: the `threads` consecutive lanes of a workgroup (flat local id, dimension 0 fastest) form a
  warp. Every warp of the batch at once: fragments are gathered into whole matrices by index tables
  built from the tensor core's layouts, `semantics.wmma` computes D, and D is scattered back by C's
  layout. A workgroup size that is not a multiple of the warp is an error in unchecked mode too.
- Checked mode (default; CHECKED=0 turns it off) reports undefined behaviour as
  `UndefinedBehaviourError`: `semantics.ub_check` on active lanes, uses of uninitialized memory (the memcheck model: a
  value loaded from memory nothing has written is undefined on those lanes, ALU ops and stores carry that along, and it
  is reported when it decides a branch, a loop bound, an address, a gate or a divisor, naming the uop that loaded it;
  the host reading undefined bytes back is reported by the device's copyout),
  local-memory races (two lanes of a workgroup touching one address in one epoch, one writing),
  global write races (two lanes storing to one address in one launch), barriers reached by only
  part of a workgroup, WMMAs reached by only part of a warp, and WMMA replicas (lanes holding the
  same element of A or B) that give it different bits.
- Dispatch: from a program's second launch on, its instruction list runs as one generated Python function
  (simt_codegen: blocks as Python blocks, plain ALU ops and GEPs inline while no undefined value is in play, every
  other instruction through the same closure), with the same bits and reports as the instruction loop.
- A value's array is dropped after its last use (uses inside a loop keep values defined before
  the loop alive until the loop exits), so memory stays bounded.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from refgrad import coverage, knobs
from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.runtime import simt_codegen, simt_loops
from refgrad.runtime.simt_gather import gather, lane_form, residue
from refgrad.target import TENSOR_CORES
from refgrad.uop import semantics
from refgrad.uop.ops import GroupOp, Ops, UOp
from refgrad.uop.spec import load_parts

MAX_LANES = 1 << 22   # elements of a value per batch (lanes times the widest vector); bounds its memory (4M * 8 bytes)
_MAY_UB = frozenset({Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.CAST, Ops.BITCAST})   # the ALU/cast ops semantics.UNDEFINED lists


class ExecutionError(RuntimeError):
  """The program cannot run as launched (wrong buffers or geometry, a non-uniform loop bound)."""

class UndefinedBehaviourError(RuntimeError):
  """The program did something undefined; the message names the kernel, uop, thread and values."""

class OutOfBoundsError(UndefinedBehaviourError, IndexError):
  """A LOAD or STORE outside its buffer (reported in checked and unchecked mode)."""


def checked_default() -> bool:
  """Checked mode unless the environment says CHECKED=0."""
  return bool(knobs.get("CHECKED"))


class Memory:
  """A flat byte buffer and, when tracked, which bytes hold defined data.

  Definedness is a bitmap (`bits`: bit j of byte i is data byte 8i+j; 1/8 of the data's size), dropped (None) as soon as
  every byte is defined, so fully written memory costs nothing. A byte is defined once copied in by the host or stored
  by a kernel from a defined value; storing an undefined value (one loaded from undefined memory) makes it undefined
  again, and `origin` then says where the undefined value was first loaded (the memcheck model)."""
  __slots__ = ("bits", "data", "origin")

  def __init__(self, data: np.ndarray, init: np.ndarray | None = None):
    if data.dtype != np.uint8 or data.ndim != 1: raise TypeError(f"Memory needs a 1-D uint8 array, got {data.dtype} of shape {data.shape}")
    if init is not None and (init.dtype != np.bool_ or init.shape != data.shape):
      raise TypeError(f"Memory init must be a bool array of shape {data.shape}")
    self.data, self.origin = data, None
    self.bits: np.ndarray | None = None if init is None or init.all() else np.packbits(init, bitorder="little")
  @staticmethod
  def zeros(nbytes: int, track_init: bool = True) -> Memory:
    m = Memory(np.zeros(nbytes, np.uint8))
    if track_init and nbytes: m.bits = np.zeros((nbytes + 7) // 8, np.uint8)
    return m
  @property
  def nbytes(self) -> int: return self.data.nbytes
  @property
  def all_init(self) -> bool: return self.bits is None
  @property
  def init(self) -> np.ndarray | None:
    """Which bytes are defined, one bool per byte (None: all of them)."""
    return None if self.bits is None else np.unpackbits(self.bits, count=self.nbytes, bitorder="little").astype(np.bool_)
  def write(self, src: memoryview | bytes | np.ndarray, offset: int = 0) -> None:
    """Copy bytes in (host copy): they count as initialized."""
    b = np.ascontiguousarray(src).reshape(-1).view(np.uint8) if isinstance(src, np.ndarray) else np.frombuffer(src, np.uint8)
    if offset < 0 or offset + b.size > self.nbytes: raise ValueError(f"write of {b.size} bytes at offset {offset} outside {self.nbytes} bytes")
    self.data[offset:offset + b.size] = b
    self.mark_range(offset, offset + b.size, True)
    self.settle()
  def undefined_bytes(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Positions (from lo) of the undefined bytes in [lo, hi)."""
    hi = self.nbytes if hi is None else hi
    if self.bits is None or hi <= lo: return np.zeros(0, np.int64)
    a = lo >> 3
    ok = np.unpackbits(self.bits[a:(hi + 7) >> 3], bitorder="little")[lo - 8 * a:hi - 8 * a]
    return np.flatnonzero(ok == 0)

  # ---- the bitmap (used by the executor) ----------------------------------------------------------
  def mark_range(self, lo: int, hi: int, defined: bool) -> None:
    """Bytes [lo, hi) become defined or undefined."""
    if hi <= lo or (defined and self.bits is None): return
    if self.bits is None: self.bits = np.full((self.nbytes + 7) // 8, 255, np.uint8)
    bits, a, b = self.bits, lo >> 3, hi >> 3
    if a == b: _set_bits(bits, a, ((1 << (hi - lo)) - 1) << (lo & 7), defined)
    else:
      if lo & 7: _set_bits(bits, a, (0xFF << (lo & 7)) & 0xFF, defined); a += 1
      bits[a:b] = 255 if defined else 0
      if hi & 7: _set_bits(bits, b, (1 << (hi & 7)) - 1, defined)
  def mark_elems(self, e: np.ndarray, k: int, defined: bool) -> None:
    """Elements e (indices of k-byte elements, k in 1, 2, 4, 8) become defined or undefined."""
    if e.size == 0 or (defined and self.bits is None): return
    if self.bits is None: self.bits = np.full((self.nbytes + 7) // 8, 255, np.uint8)
    e = e.reshape(-1).astype(np.int64, copy=False)
    if k == 8: self.bits[e] = 255 if defined else 0
    else:
      pos = e * k
      m = (np.uint8((1 << k) - 1) << (pos & 7).astype(np.uint8)).astype(np.uint8)
      if defined: np.bitwise_or.at(self.bits, pos >> 3, m)
      else: np.bitwise_and.at(self.bits, pos >> 3, ~m)
  def elems_defined(self, e: np.ndarray, k: int) -> np.ndarray:
    """Whether each of the k-byte elements e is defined (bitmap present)."""
    assert self.bits is not None
    if k == 8: return self.bits[e] == 255
    pos = e.astype(np.int64, copy=False) * k
    m = np.uint8((1 << k) - 1)
    return ((self.bits[pos >> 3] >> (pos & 7).astype(np.uint8)) & m) == m
  def range_defined(self, lo: int, hi: int, k: int) -> np.ndarray:
    """Whether each k-byte element of [lo, hi) (element indices) is defined (bitmap present)."""
    assert self.bits is not None
    a, b = lo * k, hi * k
    ok = np.unpackbits(self.bits[a >> 3:(b + 7) >> 3], bitorder="little")[a & 7:(a & 7) + b - a]
    return ok.reshape(hi - lo, k).all(axis=1) if k > 1 else ok.astype(np.bool_)
  def settle(self) -> None:
    """Drop the bitmap when every byte is defined (called after a host copy and after each launch, not per store)."""
    bits, full, rem = self.bits, self.nbytes >> 3, self.nbytes & 7
    if bits is not None and bool((bits[:full] == 255).all()) and (not rem or (int(bits[full]) & ((1 << rem) - 1)) == (1 << rem) - 1):
      self.bits, self.origin = None, None
  def __repr__(self) -> str: return f"<Memory {self.nbytes} bytes{'' if self.bits is None else ', partly uninitialized'}>"

def check_host_read(mem: Memory, nbytes: int | None = None) -> None:
  """In checked mode, raise UndefinedBehaviourError when the host reads undefined bytes among mem's first nbytes (all)."""
  n = mem.nbytes if nbytes is None else nbytes
  if mem.bits is None or not checked_default() or not (bad := mem.undefined_bytes(0, n)).size: return
  why = f"undefined data was stored there after being loaded {mem.origin}" if mem.origin else "nothing has written them"
  raise UndefinedBehaviourError(f"read of uninitialized memory by the host: {bad.size} of the {n} bytes of the buffer are "
                                f"undefined, the first at byte {int(bad[0])} ({why})")

def _set_bits(bits: np.ndarray, i: int, mask: int, on: bool) -> None:
  bits[i] = (int(bits[i]) | mask) if on else (int(bits[i]) & ~mask & 0xFF)


# ---------------------------------------------------------------------------------------------
# launch geometry

def _check_dims(what: str, dims: Sequence[int]) -> tuple[int, int, int]:
  d = tuple(int(x) for x in dims)
  if len(d) != 3 or any(x < 1 for x in d): raise ExecutionError(f"{what} must be three sizes >= 1, got {tuple(dims)}")
  return d  # type: ignore[return-value]

def _coords(flat: int, dims: tuple[int, int, int]) -> tuple[int, int, int]:
  return flat % dims[0], flat // dims[0] % dims[1], flat // (dims[0] * dims[1])


class _State:
  """Everything one batch of workgroups needs while the instructions run."""
  __slots__ = ("active", "checked", "gmem", "gsz", "ident", "kernel", "lane0", "lanes_", "lmem", "loops", "ls", "lsz", "n", "readonly", "regs",
               "skipped", "specials", "stack", "stored", "undef", "wg0", "wg_", "writers")

  def __init__(self, kernel: str, gsz: tuple[int, int, int], lsz: tuple[int, int, int], wg0: int, wg1: int, checked: bool):
    self.kernel, self.gsz, self.lsz, self.checked = kernel, gsz, lsz, checked
    self.ls = math.prod(lsz)
    self.wg0, self.lane0, self.n = wg0, wg0 * self.ls, (wg1 - wg0) * self.ls
    self.active: np.ndarray | None = None      # None: every lane is active
    self.stack: list[np.ndarray | None] = []
    self.loops: dict[int, list[int]] = {}
    self.specials: dict[str, np.ndarray] = {}
    self.lanes_: np.ndarray | None = None
    self.wg_: np.ndarray | None = None
    self.ident: np.ndarray | None = None     # an array equal to the lane ids, when some SPECIAL is exactly that
    # slot -> (where its value is undefined: a bool array shaped like the value, where the undefined data was first loaded);
    # empty while nothing undefined has been loaded, so the common case pays one dict truth test per instruction
    self.undef: dict[int, tuple[np.ndarray, str]] = {}

  @property
  def lanes(self) -> np.ndarray:
    """Global lane ids of this batch (int32)."""
    if self.lanes_ is None: self.lanes_ = np.arange(self.lane0, self.lane0 + self.n, dtype=np.int32)
    return self.lanes_
  @property
  def wg(self) -> np.ndarray:
    """Workgroup of each lane, counted from the batch's first (int64, for local addressing)."""
    if self.wg_ is None: self.wg_ = np.arange(self.n, dtype=np.int64) // self.ls
    return self.wg_

  def special(self, name: str) -> np.ndarray:
    if (v := self.specials.get(name)) is not None: return v
    kind, d = name[:-1], int(name[-1])
    if kind == "idx": kind = "gidx" if self.lsz[d] == 1 else "lidx" if self.gsz[d] == 1 else "idx"   # idx = gidx*local + lidx
    nwg = self.n // self.ls
    if kind in ("gidx", "idx"):
      stride = math.prod(self.gsz[:d])
      g = np.arange(self.wg0, self.wg0 + nwg, dtype=np.int32)
      if stride > 1: g //= stride
      if self.gsz[d] * stride < math.prod(self.gsz): g %= self.gsz[d]
      if self.ls > 1: g = np.repeat(g, self.ls)
    if kind in ("lidx", "idx"):
      stride = math.prod(self.lsz[:d])
      l = np.arange(self.ls, dtype=np.int32)
      if stride > 1: l //= stride
      if self.lsz[d] * stride < self.ls: l %= self.lsz[d]
      if nwg > 1: l = np.tile(l, nwg)
    v = g if kind == "gidx" else l if kind == "lidx" else g * np.int32(self.lsz[d]) + l
    # with one-dimensional geometry these are the lane ids themselves: loads and stores indexed by them are slices
    if d == 0 and self.gsz[1:] == (1, 1) and self.lsz[1:] == (1, 1) and \
       (kind == "idx" or (kind == "gidx" and self.ls == 1) or (kind == "lidx" and self.gsz[0] == 1)): self.ident = v
    self.specials[name] = v
    return v

  def thread(self, row: int) -> str:
    """'gidx=(..) lidx=(..)' of the lane at position `row` of this batch."""
    lane = self.lane0 + row
    return f"thread gidx={_coords(lane // self.ls, self.gsz)} lidx={_coords(lane % self.ls, self.lsz)}"

  def rows(self, mask: np.ndarray) -> np.ndarray:
    """Positions of the true lanes of a (n,) or (1,) mask."""
    if mask.shape[0] == 1 and self.n > 1: return np.arange(self.n) if mask[0] else np.zeros(0, np.int64)
    return np.flatnonzero(mask)


def _val(x: np.ndarray, row: int, dt: DType) -> Any:
  """The Python value of one lane of an array (uniform arrays have one row)."""
  v = x[row if x.shape[0] > 1 else 0]
  vals = semantics.to_python(np.asarray(v).reshape(-1), dt.scalar())
  return vals[0] if dt.count == 1 else vals


# ---------------------------------------------------------------------------------------------
# the program

class Program:
  """A linear program prepared once (instruction list, liveness) and run with `__call__`."""

  def __init__(self, name: str, uops: Sequence[UOp], verify: bool = True, vector_loops: bool = True, generate_after: int | None = 1):
    # vector_loops: run qualifying RANGE loops as arrays (simt_loops); generate_after: once this many launches have run,
    # run through one generated function (simt_codegen) instead of the instruction loop (None: never). Generating costs
    # about what a small program's launch does, so a program launched once (a fuzz case) never pays for it. Either way
    # every result bit and report is the same.
    self.name, self.uops, self.vector_loops, self.generate_after = name, list(uops), vector_loops, generate_after
    self.launches = 0
    self._residues: dict[int, dict[UOp, int | None]] = {}   # modulus -> simt_gather.residue's memo
    self._forms: dict[UOp, Any] = {}                          # simt_gather.lane_form's memo
    # RANGE position -> how that loop runs: "arrays" or why it is interpreted (see simt_loops)
    self.loop_notes: dict[int, str] = {}
    self._users: dict[UOp, list[int]] | None = None   # simt_loops.users_of(uops), made for the first RANGE's plan
    if verify:
      from refgrad.uop.spec import verify_linear
      verify_linear(self.uops)
    self.globals: dict[int, tuple[int, PtrDType]] = {}   # arg -> (uop position, dtype)
    self.locals: dict[int, PtrDType] = {}                 # uop position -> dtype
    self.vars: list[tuple[int, UOp]] = []                 # (slot, DEFINE_VAR) in program order
    self.consts: list[tuple[int, np.ndarray]] = []
    self.specials: list[UOp] = []
    self.pos = {u: i for i, u in enumerate(self.uops)}
    for i, u in enumerate(self.uops):
      if u.op is Ops.DEFINE_GLOBAL:
        if u.arg in self.globals: raise ExecutionError(f"kernel {name}: uop {i} defines buffer {u.arg} a second time")
        self.globals[u.arg] = (i, u.dtype)
      elif u.op is Ops.DEFINE_LOCAL: self.locals[i] = u.dtype
      elif u.op is Ops.DEFINE_VAR: self.vars.append((i, u))
      elif u.op is Ops.CONST: self.consts.append((i, semantics.from_python([u.arg], u.dtype)))
      elif u.op is Ops.SPECIAL: self.specials.append(u)
      elif u.op in (Ops.SINK, Ops.NOOP): raise ExecutionError(f"kernel {name}: uop {i}: {u.op.name} does not belong in a linear program")
    self.stored_args = frozenset(u.src[0].arg for u in self.uops if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_GLOBAL)
    self.width = max((u.dtype.count for u in self.uops if not isinstance(u.dtype, PtrDType)), default=1)
    self.store_count = {a: sum(1 for u in self.uops if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_GLOBAL and u.src[0].arg == a) for a in self.stored_args}
    if sorted(self.globals) != list(range(len(self.globals))):
      raise ExecutionError(f"kernel {name}: buffer parameters must be numbered 0..n-1, got {sorted(self.globals)}")
    self._compile()

  def describe(self, i: int) -> str:
    u = self.uops[i]
    return f"uop {i} ({u.op.name} {u.dtype!r}{'' if u.arg is None else f', arg={u.arg!r}'})"

  # ---- compilation: one closure per executed uop, jump targets, and where each value dies ---------
  def _compile(self) -> None:
    uops, n = self.uops, len(self.uops)
    slot = list(range(n))
    for i, u in enumerate(uops):
      if u.op is Ops.ASSIGN: slot[i] = slot[self.pos[u.src[0]]]   # an ASSIGN's value is its accumulator
    # matching block ends, and the loops around every position
    end_of: dict[int, int] = {}
    open_blocks: list[int] = []
    loops_at: list[tuple[int, ...]] = []
    for i, u in enumerate(uops):
      if u.op in (Ops.ENDRANGE, Ops.ENDIF): end_of[open_blocks.pop()] = i
      loops_at.append(tuple(b for b in open_blocks if uops[b].op is Ops.RANGE))
      if u.op in GroupOp.Block: open_blocks.append(i)
    if open_blocks: raise ExecutionError(f"kernel {self.name}: {self.describe(open_blocks[-1])} is never closed")
    self._end_of = end_of
    # last use of each slot; a use inside a loop that does not contain the definition lasts to the loop's end
    defined: dict[int, int] = {}
    for i in range(n): defined.setdefault(slot[i], i)
    last: dict[int, int] = {s: d for s, d in defined.items()}
    for i, u in enumerate(uops):
      for s in u.src:
        sl = slot[self.pos[s]]
        p = i
        for r in loops_at[i]:
          if r > defined[sl]: p = max(p, end_of[r]); break   # outermost loop not containing the definition
        last[sl] = max(last[sl], p)
      if u.op is Ops.ASSIGN: last[slot[i]] = max(last[slot[i]], i)
    keep = {i for i, u in enumerate(uops) if u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL)}
    frees_at: dict[int, list[int]] = {}
    for s, p in last.items():
      if s not in keep: frees_at.setdefault(p, []).append(s)
    # instructions
    executed = [i for i, u in enumerate(uops) if i not in keep]
    pc_of = {i: k for k, i in enumerate(executed)}
    self.code: list[tuple[Callable[[_State], int | None], tuple[int, ...]]] = []
    for i in executed:
      skip_frees = tuple(s for p in range(i, end_of[i] + 1) for s in frees_at.get(p, ())) if i in end_of else ()
      after_end = pc_of[end_of[i]] + 1 if i in end_of else 0
      fn = self._instruction(i, slot, pc_of, after_end, skip_frees, tuple(frees_at.get(i, ())))
      # an ENDRANGE frees only when its loop exits; it does that itself
      self.code.append((fn, () if uops[i].op is Ops.ENDRANGE else tuple(frees_at.get(i, ()))))
    self.slot = slot
    self._executed_ops = [uops[i].op for i in executed]
    self._fast: Callable[[_State], None] | None = None

  def _instruction(self, i: int, slot: list[int], pc_of: dict[int, int], after_end: int, skip_frees: tuple[int, ...],
                   own_frees: tuple[int, ...]) -> Callable[[_State], int | None]:
    u, op, dt = self.uops[i], self.uops[i].op, self.uops[i].dtype
    src = [slot[self.pos[s]] for s in u.src]
    o = slot[i]
    if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
      sdts = tuple(s.dtype for s in u.src)
      fn, may_ub = semantics.op_fn(op, dt, sdts), op in _MAY_UB
      def alu(st: _State) -> None:
        r = st.regs
        xs = [r[a] for a in src]
        if st.undef:
          ins = [st.undef.get(a) for a in src]
          if any(x is not None for x in ins):
            if op in (Ops.IDIV, Ops.MOD) and ins[1] is not None: self._undef_use(st, i, "a divisor", ins[1])
            skip = _any_lanes(*(x[0] for x in ins if x is not None))
            if may_ub and st.checked: self._ub(st, i, op, dt, xs, sdts, skip)   # undefined lanes compute anything, silently
            r[o] = res = fn(xs)
            st.undef[o] = (_alu_undef(op, ins, xs, res), next(x[1] for x in ins if x is not None))
            return
          st.undef.pop(o, None)
        if may_ub and st.checked: self._ub(st, i, op, dt, xs, sdts)
        r[o] = fn(xs)
      alu.gen = ("alu", o, tuple(src), fn, may_ub, simt_codegen.plain_ufunc(op, dt, sdts))  # type: ignore[attr-defined]
      return alu
    if op is Ops.SPECIAL:
      name = u.arg[0]
      def special(st: _State) -> None: st.regs[o] = st.special(name)
      return special
    if op is Ops.LOAD or op is Ops.STORE: return _Access(self, i, src).run
    if op is Ops.WMMA: return _Wmma(self, i, src).run
    if op is Ops.VECTORIZE:
      def vectorize(st: _State) -> None:
        r = st.regs
        st.regs[o] = v = np.stack(np.broadcast_arrays(*[r[a] for a in src]), axis=-1)
        if st.undef:
          ins = [st.undef.get(a) for a in src]
          if any(x is not None for x in ins):
            ms = [np.zeros(r[a].shape, np.bool_) if x is None else x[0] for a, x in zip(src, ins)]
            st.undef[o] = (np.broadcast_to(np.stack(np.broadcast_arrays(*ms), axis=-1), v.shape), next(x[1] for x in ins if x is not None))
          else: st.undef.pop(o, None)
      return vectorize
    if op is Ops.GEP:
      a, k = src[0], u.arg[0]
      def gep(st: _State) -> None:
        # a contiguous copy: a component of a lane-wide vector is strided, and ALU ops on strided arrays cost more than the copy
        x = st.regs[a]
        st.regs[o] = x[..., k].copy() if x.shape[0] > 1 else x[..., k]
        if st.undef: _carry(st, o, a, lambda m: m[..., k])
      gep.gen = ("gep", o, a, k)  # type: ignore[attr-defined]
      return gep
    if op is Ops.DEFINE_ACC:
      a = src[0]
      def define_acc(st: _State) -> None:
        st.regs[o] = st.regs[a]
        if st.undef: _carry(st, o, a, lambda m: m)
      return define_acc
    if op is Ops.ASSIGN:
      a, vec = src[1], dt.count > 1
      def assign(st: _State) -> None:
        r, m = st.regs, st.active
        if st.undef and (a in st.undef or o in st.undef):
          ua, uo = st.undef.get(a), st.undef.get(o)
          ma = np.zeros(r[a].shape, np.bool_) if ua is None else ua[0]
          mo = np.zeros(r[o].shape, np.bool_) if uo is None else uo[0]
          new = ma if m is None else np.where(m[:, None] if vec else m, ma, mo)
          if new.any(): st.undef[o] = (new, (ua or uo)[1])  # type: ignore[index]
          else: st.undef.pop(o, None)
        r[o] = r[a] if m is None else np.where(m[:, None] if vec else m, r[a], r[o])
      return assign
    if op is Ops.IF:
      a = src[0]
      def if_(st: _State) -> int | None:
        c, m = st.regs[a], st.active
        if st.undef and a in st.undef: self._undef_use(st, i, "a branch", st.undef[a])
        new = c if m is None else c & m
        if not new.any():
          for s in skip_frees: st.regs[s] = None
          return after_end
        st.stack.append(m)
        st.active = None if new.all() and (new.shape[0] == st.n or m is None) else np.broadcast_to(new, (st.n,))
        return None
      return if_
    if op is Ops.ENDIF:
      def endif(st: _State) -> None: st.active = st.stack.pop()
      return endif
    if op is Ops.RANGE:
      a, npdt = src[0], dt.np
      if self.vector_loops and self._users is None: self._users = simt_loops.users_of(self.uops)
      lp = simt_loops.plan(self, i, self._end_of[i], slot, self._users) if self._users is not None else "vector_loops is off"
      self.loop_notes[i] = "arrays" if isinstance(lp, simt_loops.LoopPlan) else lp
      fast = lp if isinstance(lp, simt_loops.LoopPlan) else None
      def range_(st: _State) -> int | None:
        end = st.regs[a]
        if st.undef and a in st.undef: self._undef_use(st, i, "a loop bound", st.undef[a])
        if end.shape[0] > 1:
          e = end if st.active is None else end[st.active]
          if (e != e[0]).any():
            bad = int(np.flatnonzero((end != e[0]) & (True if st.active is None else st.active))[0])
            raise ExecutionError(f"kernel {self.name}: {self.describe(i)}: loop end is not uniform: {int(e[0])} on one lane, "
                                 f"{int(end[bad])} on {st.thread(bad)}")
          end = e
        stop = int(end[0])
        if stop <= 0 or (fast is not None and fast.run(st, stop)):
          for s in skip_frees: st.regs[s] = None
          return after_end
        st.loops[i] = [0, stop]
        st.regs[o] = np.zeros(1, npdt)
        return None
      return range_
    if op is Ops.ENDRANGE:
      r_i = self.pos[u.src[0]]
      ro, npdt, back = slot[r_i], u.src[0].dtype.np, pc_of[r_i] + 1
      def endrange(st: _State) -> int | None:
        lp = st.loops[r_i]
        lp[0] += 1
        if lp[0] < lp[1]:
          st.regs[ro] = np.array([lp[0]], npdt)
          return back
        for s in own_frees: st.regs[s] = None
        return None
      return endrange
    if op is Ops.BARRIER:
      def barrier(st: _State) -> None:
        if st.checked and st.active is not None:
          per_wg = st.active.reshape(-1, st.ls)
          split = per_wg.any(axis=1) & ~per_wg.all(axis=1)
          if split.any():
            w = int(np.flatnonzero(split)[0])
            row = w * st.ls + int(np.flatnonzero(~per_wg[w])[0])
            raise UndefinedBehaviourError(f"barrier reached by only part of a workgroup in kernel {self.name} at {self.describe(i)}: "
                                          f"{st.thread(row)} does not reach it while others of its workgroup do")
        for lm in st.lmem.values():
          if lm[2] is not None: lm[2].fill(-1); lm[3].fill(-1)
      return barrier
    raise ExecutionError(f"kernel {self.name}: {self.describe(i)}: the SIMT executor cannot run {op.name}")

  def _ub(self, st: _State, i: int, op: Ops, dt: DType, xs: list[np.ndarray], sdts: tuple[DType, ...], skip: np.ndarray | None = None) -> None:
    res = semantics.ub_check(op, dt, xs, sdts)
    if res is None: return
    reason, mask = res
    mask = np.asarray(mask, np.bool_)
    if mask.ndim > 1: mask = mask.reshape(mask.shape[0], -1).any(axis=1)
    if mask.ndim == 0: mask = mask.reshape(1)
    if st.active is not None: mask = mask & st.active
    if skip is not None: mask = mask & ~skip
    if not mask.any(): return
    rows = st.rows(mask)
    vals = ", ".join(repr(_val(x, int(rows[0]), d)) for x, d in zip(xs, sdts))
    raise UndefinedBehaviourError(f"{reason} in kernel {self.name} at {self.describe(i)}: {st.thread(int(rows[0]))} computes "
                                  f"{op.name}({vals})" + (f" ({len(rows)} lanes in all)" if len(rows) > 1 else ""))

  def _undef_use(self, st: _State, i: int, what: str, und: tuple[np.ndarray, str]) -> None:
    """Report an undefined value that decides `what` on an active lane (nothing when it does so on none)."""
    bad = _any_lanes(und[0])
    if st.active is not None: bad = bad & st.active
    if not bad.any(): return
    rows = st.rows(bad)
    raise UndefinedBehaviourError(f"read of uninitialized memory decides {what} in kernel {self.name} at {self.describe(i)}: {st.thread(int(rows[0]))} "
                                  f"uses a value loaded {und[1]}" + (f" ({len(rows)} lanes in all)" if len(rows) > 1 else ""))

  # ---- running --------------------------------------------------------------------------------
  def __call__(self, bufs: Sequence[Memory], global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), checked: bool | None = None, max_lanes: int = MAX_LANES) -> None:
    """Run one launch. `bufs` by DEFINE_GLOBAL index, `vals` for the DEFINE_VARs in program order."""
    chk = checked_default() if checked is None else checked
    if self.launches == self.generate_after: self._fast = simt_codegen.generate(self.name, self._executed_ops, self.code)
    self.launches += 1
    gsz, lsz = _check_dims("global_size", global_size), _check_dims("local_size", local_size)
    self._check_launch(bufs, gsz, lsz, vals)
    gmem: dict[int, tuple[Memory, np.ndarray, int, np.ndarray | None]] = {}
    written = [bufs[a].data for a in self.stored_args]
    readonly = {a for a in self.globals if not any(np.may_share_memory(bufs[a].data, w) for w in written)}
    for arg, (_, pdt) in self.globals.items():
      mem, sdt = bufs[arg], pdt.base.scalar()
      npdt = np.dtype(np.uint8) if sdt == dtypes.bool else sdt.np
      usable = mem.nbytes - mem.nbytes % npdt.itemsize
      view = mem.data[:usable].view(npdt)
      bound = pdt.size if pdt.size >= 0 else usable // pdt.base.itemsize
      gmem[arg] = (mem, view, bound, npdt.itemsize)
    var_vals = [semantics.from_python([v], u.dtype) for (_, u), v in zip(self.vars, vals)]
    writers: dict[tuple[int, int], np.ndarray] = {}
    skipped: dict[tuple[int, int], list[tuple[int, int]]] = {}
    stored: dict[int, Memory] = {}
    ls, nwg = math.prod(lsz), math.prod(gsz)
    per_batch = max(1, max_lanes // (ls * self.width))   # bounds the elements of a value, vectors included
    for wg0 in range(0, nwg, per_batch):
      st = _State(self.name, gsz, lsz, wg0, min(nwg, wg0 + per_batch), chk)
      st.gmem, st.writers, st.stored, st.readonly, st.skipped = gmem, writers, stored, readonly, skipped
      nwb = st.n // ls
      st.lmem = {}
      for p, pdt in self.locals.items():
        npdt = np.dtype(np.uint8) if pdt.base.scalar() == dtypes.bool else pdt.base.scalar().np
        cells = nwb * pdt.size * pdt.base.count
        trk = (np.full(cells, -1, np.int32), np.full(cells, -1, np.int32)) if chk else (None, None)
        st.lmem[p] = (np.zeros(cells, npdt), np.zeros(cells, np.bool_) if chk else None, *trk)
      regs: list[Any] = [None] * len(self.uops)
      for s, arr in self.consts: regs[s] = arr
      for (s, _), arr in zip(self.vars, var_vals): regs[s] = arr
      st.regs = regs
      with np.errstate(all="ignore"): self._run(st)   # undefined lanes may compute anything, silently
    for mem in stored.values(): mem.settle()

  def _run(self, st: _State) -> None:
    if self._fast is not None:
      coverage.path("simt:generated")
      return self._fast(st)
    coverage.path("simt:interpreted")
    code, regs = self.code, st.regs
    pc, end = 0, len(code)
    undef = st.undef
    while pc < end:
      fn, frees = code[pc]
      nxt = fn(st)
      if nxt is None:
        for s in frees: regs[s] = None
        if undef:
          for s in frees: undef.pop(s, None)
        pc += 1
      else: pc = nxt

  def _check_launch(self, bufs: Sequence[Memory], gsz: tuple[int, int, int], lsz: tuple[int, int, int], vals: Sequence[int]) -> None:
    where = f"kernel {self.name}"
    if len(bufs) != len(self.globals): raise ExecutionError(f"{where} takes {len(self.globals)} buffers, got {len(bufs)}")
    for arg, (_, pdt) in self.globals.items():
      if not isinstance(bufs[arg], Memory): raise ExecutionError(f"{where}: buffer {arg} is a {type(bufs[arg]).__name__}, not a simt.Memory")
      if pdt.size >= 0 and bufs[arg].nbytes < pdt.size * pdt.base.itemsize:
        raise ExecutionError(f"{where}: buffer {arg} has {bufs[arg].nbytes} bytes, the kernel declares {pdt.size} elements of {pdt.base!r}")
    if len(vals) != len(self.vars): raise ExecutionError(f"{where} takes {len(self.vars)} variable values, got {len(vals)}")
    for (_, u), v in zip(self.vars, vals):
      nm, lo, hi = u.arg
      if not isinstance(v, (int, np.integer)) or not lo <= v <= hi: raise ExecutionError(f"{where}: variable {nm}={v!r} is outside [{lo}, {hi}]")
    if math.prod(gsz) * math.prod(lsz) >= 2**31: raise ExecutionError(f"{where}: {math.prod(gsz) * math.prod(lsz)} lanes is too many")
    for u in self.specials:
      nm, size = u.arg
      kind, d = nm[:-1], int(nm[-1])
      have = gsz[d] if kind == "gidx" else lsz[d] if kind == "lidx" else gsz[d] * lsz[d]
      if have != size: raise ExecutionError(f"{where}: SPECIAL {nm} has size {size} but the launch gives {have} (global {gsz}, local {lsz})")


# ---------------------------------------------------------------------------------------------
# memory access

_SIMT_PATHS = ["simt:local", "simt:lane-range", "simt:strided-slice", "simt:distinct", "simt:generated", "simt:interpreted",
               *(f"simt:{m}-{d}{t}{v}" for m in ("uniform", "masked", "gather") for d in ("load", "store") for t in ("", "-tracked") for v in ("", "-vec")
                 if not (m == "uniform" and d == "store"))]
coverage.declare_paths(_SIMT_PATHS)   # the memory-access strategies and dispatch forms the fuzzer's coverage counts


class _Access:
  """One LOAD or STORE: lane selection (active lanes and gate), addresses, checks, gather/scatter."""

  def __init__(self, prg: Program, i: int, src: list[int]):
    self.prg, self.i = prg, i
    u = prg.uops[i]
    self.store = u.op is Ops.STORE
    buf = u.src[0]
    self.pdt: PtrDType = buf.dtype  # type: ignore[assignment]
    self.local = buf.op is Ops.DEFINE_LOCAL
    self.key = prg.pos[buf] if self.local else buf.arg
    self.idx = src[1]
    vdt = u.src[2].dtype if self.store else u.dtype
    self.vdt, self.bc, self.c = vdt, self.pdt.base.count, vdt.count
    # the first element's position modulo c, when the index expression proves it (a vector gather then skips checking it)
    pow2 = self.c > 1 and self.c & (self.c - 1) == 0
    ri = residue(u.src[1], self.c, prg._residues.setdefault(self.c, {})) if pow2 and not self.store else None
    self.residue = None if ri is None else ri * self.bc % self.c
    # a load whose index is periodic or blockwise in the lane id gathers its distinct places once (simt_gather.lane_form)
    form = lane_form(u.src[1], prg._forms) if not self.store and not self.local and vdt.scalar() != dtypes.bool else None
    self.form = (form[0], form[1], form[2].arg[0]) if isinstance(form, tuple) and form[0] != "lane" else None
    self.val = src[2] if self.store else -1
    # a LOAD may end with a BARRIER source (ordering only: the barrier has run by the time the load does)
    gated = len(src) == 4 if self.store else load_parts(u)[2] is not None
    self.gate = src[3 if self.store else 2] if gated else -1
    self.alt = src[3] if not self.store and gated else -1
    self.o = i   # a load's value lives in its own slot
    self.is_bool = vdt.scalar() == dtypes.bool
    self.bufname = f"{'local' if self.local else 'buffer'} {self.key if not self.local else buf.arg}"

  def where(self) -> str: return f"in kernel {self.prg.name} at {self.prg.describe(self.i)}"

  def run(self, st: _State) -> None:
    r = st.regs
    mask = st.active
    if st.undef:   # an undefined gate or address decides which memory is touched
      if self.gate >= 0 and self.gate in st.undef: self.prg._undef_use(st, self.i, "a gate", st.undef[self.gate])
      if self.idx in st.undef:
        u = st.undef[self.idx]
        if self.gate >= 0: u = (u[0] & r[self.gate], u[1])
        self.prg._undef_use(st, self.i, "an address", u)
    if self.gate >= 0:
      g = r[self.gate]
      mask = g if mask is None else (mask & g)
      if mask.shape[0] == 1: mask = None if mask[0] and st.active is None else np.broadcast_to(mask, (st.n,))
    idx = r[self.idx]
    if self.local:
      coverage.path("simt:local")
      return self._local(st, idx, mask)
    mem, view, bound, k = st.gmem[self.key]
    track = st.checked and mem.bits is not None
    # the common case: every lane active, the index is the lane id, one element per lane
    if mask is None and idx is st.ident and self.c == 1 and self.bc == 1:
      lo, hi = st.lane0, st.lane0 + st.n
      if lo < 0 or hi > bound: self._oob_check(st, None, idx, bound)
      coverage.path("simt:lane-range")
      return self._range(st, mem, view, lo, hi, k, idx, track)
    uniform = mask is None and idx.shape[0] == 1 and not self.store
    # every lane active and lane i touching the c elements right after lane i-1's (e.g. an upcast float4 access): a slice
    if mask is None and idx.shape[0] == st.n > 1 and (self.c % self.bc == 0):
      step, lo = self.c // self.bc, int(idx[0])
      if int(idx[-1]) - lo == step * (st.n - 1) and lo >= 0 and (np.diff(idx) == step).all():
        if (lo + step * st.n) * self.bc > bound * self.bc: self._oob_check(st, None, idx, bound)
        coverage.path("simt:strided-slice")
        return self._range(st, mem, view, lo * self.bc, (lo + step * st.n) * self.bc, k, idx, track)
    if self.form is not None and mask is None and not track and idx.shape[0] == st.n and \
       (ident := st.specials.get(self.form[2])) is not None and ident is st.ident and \
       (v := self._distinct(st, view, bound, idx)) is not None:
      coverage.path("simt:distinct")
      return self._loaded(st, v, None, idx, None, mem)
    rows = None if mask is None else np.flatnonzero(mask)
    if uniform: sel = idx
    else:
      sel = np.broadcast_to(idx, (st.n,)) if idx.shape[0] != st.n else idx
      if rows is not None: sel = sel[rows]
    if sel.size:
      lo, hi = _span(sel)
      if lo < 0 or hi * self.bc + self.c > bound * self.bc: self._oob_check(st, rows, sel, bound)
    coverage.path(f"simt:{'uniform' if uniform else 'masked' if rows is not None else 'gather'}-{'store' if self.store else 'load'}"
                  f"{'-tracked' if track else ''}{'-vec' if self.c > 1 else ''}")
    if not self.store and not track: return self._loaded(st, gather(view, sel, self.bc, self.c, self.residue), rows, sel, None, mem)
    e = sel.astype(np.int64) if self.bc == 1 else sel.astype(np.int64) * self.bc
    if self.c > 1: e = e[:, None] + np.arange(self.c)
    if self.store: return self._store(st, mem, view, e, rows, k)
    und = None
    if e.size and not (ok := mem.elems_defined(e, k)).all(): und = ~ok
    return self._loaded(st, gather(view, sel, self.bc, self.c, self.residue), rows, sel, und, mem)

  def _distinct(self, st: _State, view: np.ndarray, bound: int, idx: np.ndarray) -> np.ndarray | None:
    """The load of a lane-periodic (blockwise) index: its first period (each block's first lane) gathered, then tiled
    (repeated) to every lane; None when that does not pay or some index is out of bounds (the full path reports it)."""
    kind, k, n = self.form[0], self.form[1], st.n  # type: ignore[index]
    if kind == "period" and 4 * k <= n: sel = idx[:k]
    elif kind == "block" and k >= 4 and st.lane0 % k == 0: sel = idx[::k]
    else: return None
    lo, hi = _span(sel)
    if lo < 0 or hi * self.bc + self.c > bound * self.bc: return None
    v = gather(view, sel, self.bc, self.c, self.residue)
    if kind == "block": return np.repeat(v, k, axis=0)[:n] if n % k else np.repeat(v, k, axis=0)
    full = np.tile(v, (-(-n // k),) + (1,) * (v.ndim - 1))
    return full[:n] if n % k else full

  def _range(self, st: _State, mem: Memory, view: np.ndarray, lo: int, hi: int, k: int, idx: np.ndarray, track: bool) -> None:
    """A LOAD or STORE of the consecutive elements [lo, hi) of the buffer, lane by lane in order (c per lane)."""
    if self.store: return self._store_range(st, mem, view, lo, hi, st.regs[self.val], k)
    und = None
    shape = (st.n, self.c) if self.c > 1 else (st.n,)
    if track and not (ok := mem.range_defined(lo, hi, k)).all(): und = ~ok.reshape(shape)
    v = view[lo:hi].reshape(shape)
    # a view is safe when no store of this launch can change the memory behind it
    st.regs[self.o] = self._bool(st, v, None, idx, und) if self.is_bool else v if self.key in st.readonly else v.copy()
    self._set_undef(st, und, None, idx, mem)
    return None

  # ---- definedness ------------------------------------------------------------------------------
  def _set_undef(self, st: _State, und: np.ndarray | None, rows: np.ndarray | None, sel: np.ndarray, mem: Memory | None) -> None:
    """Record where the loaded value is undefined (`und`: per loaded lane, like the value) and where it was first loaded."""
    if und is None or not und.any(): st.undef.pop(self.o, None)
    else: st.undef[self.o] = (und, self._origin(st, und, rows, sel, mem))

  def _origin(self, st: _State, und: np.ndarray, rows: np.ndarray | None, sel: np.ndarray, mem: Memory | None) -> str:
    """Where an undefined value comes from: the first lane loading it here, or the load that put it into this memory."""
    if mem is not None and mem.origin: return mem.origin
    k = int(np.flatnonzero(_any_lanes(und))[0])
    row = k if rows is None else int(rows[k])
    ix = int(sel[k] if sel.shape[0] > 1 else sel[0])
    return f"{self.where()} by {st.thread(row)} from index {ix} of {self.bufname}, which nothing has written"

  def _value_undef(self, st: _State, rows: np.ndarray | None, shape: tuple[int, ...]) -> tuple[np.ndarray, str] | None:
    """Where the value a STORE writes is undefined, per stored lane (shaped like its element indices), or None."""
    if not st.undef or (u := st.undef.get(self.val)) is None: return None
    m = u[0]
    vshape = (st.n, self.c) if self.c > 1 else (st.n,)
    if m.shape[0] != st.n: m = np.broadcast_to(m, vshape)
    if rows is not None: m = m[rows]
    m = np.broadcast_to(m, shape)
    return (m, u[1]) if m.any() else None

  # ---- global stores ---------------------------------------------------------------------------
  def _store_range(self, st: _State, mem: Memory, view: np.ndarray, lo: int, hi: int, val: np.ndarray, k: int) -> None:
    """Lane i of the batch stores the c elements at lo + c*i (all lanes active)."""
    c = self.c
    if st.checked:
      wk = (id(mem), view.itemsize)
      if self.prg.store_count[self.key] == 1 and wk not in st.writers:
        # the only STORE to this buffer, each lane its own elements: its lanes cannot collide; remember the range in case
        # a masked run of the same STORE needs the writers later
        st.skipped.setdefault(wk, []).append((lo, hi, st.lane0, c))
      else:
        w = self._writer(st, mem, view)
        lanes = st.lanes if c == 1 else np.repeat(st.lanes, c)
        prev = w[lo:hi]
        clash = (prev >= 0) & (prev != lanes)
        if clash.any():
          j = int(np.flatnonzero(clash)[0])
          self._race(st, j // c, lo + j, int(prev[j]))
        w[lo:hi] = lanes
    if val.shape[0] != st.n: val = np.broadcast_to(val, (st.n, c) if c > 1 else (st.n,))
    view[lo:hi] = val.reshape(-1)
    st.stored[id(mem)] = mem
    vu = self._value_undef(st, None, (st.n, c) if c > 1 else (st.n,))
    if mem.bits is not None: mem.mark_range(lo * k, hi * k, True)
    if vu is not None and st.checked:
      mem.mark_elems(lo + np.flatnonzero(vu[0].reshape(-1)), k, False)
      mem.origin = mem.origin or vu[1]

  def _store(self, st: _State, mem: Memory, view: np.ndarray, e: np.ndarray, rows: np.ndarray | None, k: int) -> None:
    val = st.regs[self.val]
    n = st.n if rows is None else rows.size
    if n == 0: return
    vshape = (st.n, self.c) if self.c > 1 else (st.n,)
    if val.shape[0] != st.n: val = np.broadcast_to(val, vshape)
    if rows is not None: val = val[rows]
    if st.checked:
      w = self._writer(st, mem, view)
      lanes = st.lanes if rows is None else st.lanes[rows]
      if self.c > 1: lanes = np.broadcast_to(lanes[:, None], e.shape)
      prev = w[e]
      clash = (prev >= 0) & (prev != lanes)
      w[e] = lanes
      dup = w[e] != lanes
      if clash.any() or dup.any():
        k2 = np.flatnonzero((clash | dup).reshape(n, -1).any(axis=1))[0]
        j = int(np.flatnonzero((clash | dup).reshape(n, -1)[k2])[0])
        other = int(prev.reshape(n, -1)[k2, j]) if clash.reshape(n, -1)[k2, j] else int(w[e].reshape(n, -1)[k2, j])
        self._race(st, int(k2 if rows is None else rows[k2]), int(e.reshape(n, -1)[k2, j]), other)
    view[e] = val
    st.stored[id(mem)] = mem
    vu = self._value_undef(st, rows, e.shape)
    if mem.bits is not None: mem.mark_elems(e, k, True)
    if vu is not None and st.checked:
      mem.mark_elems(e[vu[0]], k, False)
      mem.origin = mem.origin or vu[1]

  def _writer(self, st: _State, mem: Memory, view: np.ndarray) -> np.ndarray:
    k = (id(mem), view.itemsize)
    if (w := st.writers.get(k)) is None:
      w = st.writers[k] = np.full(view.size, -1, np.int32)
      for lo, hi, lane0, c in st.skipped.pop(k, ()): w[lo:hi] = np.repeat(np.arange(lane0, lane0 + (hi - lo) // c, dtype=np.int32), c)
    return w

  # ---- local memory ----------------------------------------------------------------------------
  def _local(self, st: _State, idx: np.ndarray, mask: np.ndarray | None) -> None:
    data, init, writer, reader = st.lmem[self.key]
    size = self.pdt.size
    rows = None if mask is None else np.flatnonzero(mask)
    sel = np.broadcast_to(idx, (st.n,)) if idx.shape[0] != st.n else idx
    wg = st.wg
    if rows is not None: sel, wg = sel[rows], wg[rows]
    n = sel.shape[0]
    if n:
      lo, hi = _span(sel)
      if lo < 0 or hi * self.bc + self.c > size * self.bc: self._oob_check(st, rows, sel, size)
    e = wg * (size * self.bc) + sel.astype(np.int64) * self.bc
    if self.c > 1: e = e[:, None] + np.arange(self.c)
    lanes = st.lanes if rows is None else st.lanes[rows]
    if self.c > 1: lanes = np.broadcast_to(lanes[:, None], e.shape)
    if self.store:
      val = st.regs[self.val]
      vshape = (st.n, self.c) if self.c > 1 else (st.n,)
      if val.shape[0] != st.n: val = np.broadcast_to(val, vshape)
      if rows is not None: val = val[rows]
      if st.checked and n:
        pw, pr = writer[e], reader[e]
        wclash, rclash = (pw >= 0) & (pw != lanes), (pr != -1) & (pr != lanes)
        writer[e] = lanes
        dup = writer[e] != lanes   # another lane of this same STORE wrote the address
        if (bad := wclash | rclash | dup).any():
          k, j = self._first(bad, n)
          pick = lambda a: int(a.reshape(n, -1)[k, j])
          other, verb = (pick(pw), "writes") if pick(wclash) else (pick(pr), "reads") if pick(rclash) else (pick(writer[e]), "writes")
          self._local_race(st, rows, k, pick(e), "writes", other, verb)
        vu = self._value_undef(st, rows, e.shape)
        init[e] = True if vu is None else ~vu[0]
      data[e] = val
      return None
    und = None
    if st.checked and n:
      if not (ok := init[e]).all(): und = ~ok
      pw = writer[e]
      if (bad := (pw >= 0) & (pw != lanes)).any():
        k, j = self._first(bad, n)
        self._local_race(st, rows, k, int(e.reshape(n, -1)[k, j]), "reads", int(pw.reshape(n, -1)[k, j]), "writes")
      # remember the reader: its lane, or -2 once two different lanes have read the address
      pr = reader[e]
      new = np.where((pr == -1) | (pr == lanes), lanes, -2).astype(np.int32)
      reader[e] = new
      multi = reader[e] != new
      if multi.any(): reader[e[multi]] = -2
    return self._loaded(st, data[e], rows, sel, und, None)

  def _loaded(self, st: _State, v: np.ndarray, rows: np.ndarray | None, sel: np.ndarray, und: np.ndarray | None, mem: Memory | None) -> None:
    """Set the load's value: the gathered elements on the lanes that loaded, `alt` on the others (and where it is undefined)."""
    if self.is_bool: v = self._bool(st, v, rows, sel, und)
    if rows is None:
      st.regs[self.o] = v
      return self._set_undef(st, und, None, sel, mem)
    out = np.zeros((st.n, self.c) if self.c > 1 else st.n, v.dtype)
    if self.alt >= 0: out[...] = st.regs[self.alt]
    out[rows] = v
    st.regs[self.o] = out
    alt_u = st.undef.get(self.alt) if st.undef and self.alt >= 0 else None
    if und is None and alt_u is None: return self._set_undef(st, None, rows, sel, mem)
    full = np.zeros(out.shape, np.bool_)
    if alt_u is not None: full[...] = alt_u[0]
    full[rows] = False if und is None else und
    if not full.any(): return self._set_undef(st, None, rows, sel, mem)
    st.undef[self.o] = (full, self._origin(st, und, rows, sel, mem) if und is not None and und.any() else alt_u[1])  # type: ignore[index]
    return None

  def _bool(self, st: _State, v: np.ndarray, rows: np.ndarray | None, sel: np.ndarray, und: np.ndarray | None = None) -> np.ndarray:
    """Bytes of bool memory as bools; a byte other than 0 or 1 is not a bool (undefined, as in C). Undefined bytes are not checked."""
    if st.checked and (bad := (v > 1) if und is None else (v > 1) & ~und).any():
      b = bad.reshape(bad.shape[0], -1)
      k = int(np.flatnonzero(b.any(axis=1))[0])
      row = k if rows is None else int(rows[k])
      raise UndefinedBehaviourError(f"load of an invalid bool {self.where()}: {st.thread(row)} loads index {int(sel[k if sel.shape[0] > 1 else 0])} "
                                    f"of {self.bufname}, whose byte {int(v.reshape(b.shape)[k][b[k]][0])} is neither 0 nor 1")
    return v != 0

  @staticmethod
  def _first(bad: np.ndarray, n: int) -> tuple[int, int]:
    b = bad.reshape(n, -1)
    k = int(np.flatnonzero(b.any(axis=1))[0])
    return k, int(np.flatnonzero(b[k])[0])

  # ---- reports ---------------------------------------------------------------------------------
  def _oob_check(self, st: _State, rows: np.ndarray | None, sel: np.ndarray, bound: int) -> None:
    last = sel.astype(np.int64) * self.bc + self.c
    bad = (sel < 0) | (last > bound * self.bc)
    if bad.any(): self._oob(st, rows, sel, bound, bad)

  def _oob(self, st: _State, rows: np.ndarray | None, sel: np.ndarray, bound: int, bad: np.ndarray) -> None:
    k = int(np.flatnonzero(bad)[0])
    row = k if rows is None else int(rows[k])
    span = f" (a {self.vdt!r} access covers {self.c // self.bc} elements)" if self.c > self.bc else ""
    raise OutOfBoundsError(f"out-of-bounds {'STORE' if self.store else 'LOAD'} {self.where()}: {st.thread(row)} accesses index {int(sel[k])} "
                           f"of {self.bufname} with {bound} elements of {self.pdt.base!r}{span}"
                           + (f" ({int(bad.sum())} lanes in all)" if bad.sum() > 1 else ""))

  def _race(self, st: _State, row: int, elem: int, other_lane: int) -> None:
    ls = st.ls
    other = f"thread gidx={_coords(other_lane // ls, st.gsz)} lidx={_coords(other_lane % ls, st.lsz)}"
    raise UndefinedBehaviourError(f"global memory write race {self.where()}: {st.thread(row)} and {other} both store to index "
                                  f"{elem // self.bc} of {self.bufname} in one launch (the result would depend on their order)")

  def _local_race(self, st: _State, rows: np.ndarray | None, k: int, elem: int, verb: str, other_lane: int, other_verb: str) -> None:
    row = k if rows is None else int(rows[k])
    ls = st.ls
    other = f"thread gidx={_coords(other_lane // ls, st.gsz)} lidx={_coords(other_lane % ls, st.lsz)}" if other_lane >= 0 else "another lane"
    idx = elem % (self.pdt.size * self.bc) // self.bc
    raise UndefinedBehaviourError(f"local memory race {self.where()}: {st.thread(row)} {verb} index {idx} of {self.bufname} and {other} "
                                  f"{other_verb} it in the same barrier epoch (a BARRIER must separate them)")


# ---------------------------------------------------------------------------------------------
# tensor cores

class _Wmma:
  """One WMMA over every warp of a batch: gather fragments into (warps, M, K), (warps, K, N), (warps, M, N)
  matrices with index tables built once, one call of `semantics.wmma`, scatter D back by C's layout."""

  def __init__(self, prg: Program, i: int, src: list[int]):
    self.prg, self.i, self.src = prg, i, src
    tc = self.tc = TENSOR_CORES[prg.uops[i].arg]
    m, n, k = tc.dims
    t = tc.threads
    # per operand: (name, fragment elements, matrix shape, owner: matrix element -> flat fragment position (lane*elems + e)
    # of its first holder, at: flat fragment position -> flat matrix element, whether some element has several holders)
    self.operands: list[tuple[str, int, tuple[int, int], np.ndarray, np.ndarray, bool]] = []
    for nm, lay, shape in (("A", tc.a, (m, k)), ("B", tc.b, (k, n)), ("C", tc.c, (m, n))):
      tab = lay.table(t).reshape(-1, 2)
      owner, at = lay.owners(t, shape).reshape(-1), tab[:, 0] * shape[1] + tab[:, 1]
      self.operands.append((nm, lay.elems, shape, owner, at, tab.shape[0] > shape[0] * shape[1]))
    self.vec = prg.uops[i].dtype.count > 1

  def where(self) -> str: return f"in kernel {self.prg.name} at {self.prg.describe(self.i)}"

  def run(self, st: _State) -> None:
    t = self.tc.threads
    if st.ls % t: self._misfit(st)
    nw = st.n // t
    warps: np.ndarray | None = None   # the warps that run it, when not all of them
    if st.active is not None:
      per = st.active.reshape(nw, t)
      some = per.any(axis=1)
      if st.checked and (split := some & ~per.all(axis=1)).any(): self._divergent(st, per, int(np.flatnonzero(split)[0]))
      if not some.all(): warps = np.flatnonzero(some)
    nrun = nw if warps is None else warps.size
    mats = []
    for (nm, e, shape, owner, at, replicated), s in zip(self.operands, self.src):
      x = st.regs[s]
      # a uniform operand: every warp holds the same fragments, so one matrix serves them all
      if x.shape[0] == 1: f = np.tile(x.reshape(1, e), (1, t))
      else: f = x.reshape(nw, t * e) if warps is None else x.reshape(nw, t * e)[warps]
      mat = f[:, owner]
      if replicated and st.checked: self._replicas(st, nm, e, shape, owner, at, f, mat, warps)
      mats.append(mat.reshape(-1, *shape))
    d = semantics.wmma(mats[0], mats[1], mats[2], self.tc.dtype_in)
    e_c, at_c = self.operands[2][1], self.operands[2][4]
    frag = np.broadcast_to(d.reshape(d.shape[0], -1)[:, at_c], (nrun, t * e_c))
    if warps is None: out = frag.reshape(st.n, e_c)
    else:   # inactive warps get zeros
      out = np.zeros((nw, t * e_c), frag.dtype)
      out[warps] = frag
      out = out.reshape(st.n, e_c)
    st.regs[self.i] = out if self.vec else out.reshape(st.n)
    if st.undef:   # an undefined fragment element may reach any lane of its warp: the whole result counts as undefined
      ins = [u for x in self.src if (u := st.undef.get(x)) is not None]
      if ins: st.undef[self.i] = (np.ones(st.regs[self.i].shape, np.bool_), ins[0][1])
      else: st.undef.pop(self.i, None)

  # ---- reports ---------------------------------------------------------------------------------
  def _misfit(self, st: _State) -> None:
    t = self.tc.threads
    row = st.ls // t * t   # the first lane of the incomplete warp of the first workgroup
    msg = (f"{st.thread(row)} is in a warp of only {st.ls % t} lanes: the workgroup size {st.ls} (local {st.lsz}) is not a multiple "
           f"of the {t} lanes of {self.tc.name}")
    if st.checked: raise UndefinedBehaviourError(f"divergent WMMA {self.where()}: {msg}")
    raise ExecutionError(f"kernel {self.prg.name}: {self.prg.describe(self.i)} cannot run: {msg}")

  def _divergent(self, st: _State, per: np.ndarray, w: int) -> None:
    t = self.tc.threads
    row = w * t + int(np.flatnonzero(~per[w])[0])
    raise UndefinedBehaviourError(f"divergent WMMA {self.where()}: {st.thread(row)} does not reach it while others of its warp "
                                  f"(lanes {w * t % st.ls}..{w * t % st.ls + t - 1} of its workgroup) do; "
                                  f"{int((~per[w]).sum())} of its {t} lanes are inactive (every lane of a warp must reach a WMMA)")

  def _replicas(self, st: _State, nm: str, e: int, shape: tuple[int, int], owner: np.ndarray, at: np.ndarray, f: np.ndarray, mat: np.ndarray,
                warps: np.ndarray | None) -> None:
    """Every lane's fragment must equal, bit for bit, what the first holder of each element gives."""
    u = np.dtype(f"u{f.dtype.itemsize}")
    back = mat[:, at]
    bad = back.view(u) != f.view(u)
    if not bad.any(): return
    wi, p = (int(x[0]) for x in np.nonzero(bad))
    first = int(owner[at[p]])
    lane0 = (wi if warps is None else int(warps[wi])) * self.tc.threads
    r, c = divmod(int(at[p]), shape[1])
    hexa = lambda v: f"{int(v):#0{2 + 2 * u.itemsize}x}"
    nbad = int(bad.sum())
    raise UndefinedBehaviourError(f"WMMA replicas differ {self.where()}: {st.thread(lane0 + p // e)} gives element ({r}, {c}) of {nm} "
                                  f"(its fragment element {p % e}) the bits {hexa(f.view(u)[wi, p])}, but {st.thread(lane0 + first // e)} "
                                  f"(its fragment element {first % e}) gives {hexa(back.view(u)[wi, p])}"
                                  + (f" ({nbad} fragment elements in all)" if nbad > 1 else "") + " (replicas must hold the same bits)")


# ---- definedness of values (see Memory) -----------------------------------------------------------------------

def _any_lanes(*masks: np.ndarray) -> np.ndarray:
  """Per lane ((n,) or (1,)): whether any component of any mask is undefined."""
  out = None
  for m in masks:
    lm = m if m.ndim == 1 else m.reshape(m.shape[0], -1).any(axis=1)
    out = lm if out is None else out | lm
  assert out is not None
  return out

def _alu_undef(op: Ops, ins: list[tuple[np.ndarray, str] | None], xs: list[np.ndarray], res: np.ndarray) -> np.ndarray:
  """Where the result of an ALU op is undefined: where an operand it depends on is (WHERE: the condition, or the chosen value)."""
  ms = [np.zeros(x.shape, np.bool_) if u is None else u[0] for u, x in zip(ins, xs)]
  if op is Ops.WHERE: m = ms[0] | np.where(xs[0], ms[1], ms[2])
  elif all(x.shape[1:] == res.shape[1:] for x in xs): m = np.logical_or.reduce(np.broadcast_arrays(*ms)) if len(ms) > 1 else ms[0]
  else:   # the vector width changes (BITCAST): a lane is undefined if any of its source components is
    lm = _any_lanes(*ms)
    m = lm if res.ndim == 1 else np.broadcast_to(lm[:, None], (lm.shape[0], *res.shape[1:]))
  return np.broadcast_to(m, res.shape) if m.shape != res.shape else m

def _carry(st: _State, o: int, a: int, fn: Callable[[np.ndarray], np.ndarray]) -> None:
  """Slot o's value is fn of slot a's: so is where it is undefined."""
  if (u := st.undef.get(a)) is not None and (m := fn(u[0])).any(): st.undef[o] = (m, u[1])
  else: st.undef.pop(o, None)



def _span(sel: np.ndarray) -> tuple[int, int]:
  """(min, max) of the selected indices; one index (a uniform or single lane) without numpy reductions."""
  if sel.size == 1:
    v = int(sel.reshape(-1)[0])
    return v, v
  return int(sel.min()), int(sel.max())
