"""Basic blocks of RDNA3 code as generated Python: the straight-line run of instructions from a PC to the next branch,
s_endpgm, s_barrier or EXEC write becomes one function, built once per (code bytes, VGPR count) and entry PC, that runs
the whole run for every wave of the dispatch at once. Operands, register views, constants and modifiers are resolved
when the block is built, so a VALU instruction costs its row of ops.VALU (called, never restated; looked up in its
table when the block runs, so a changed row takes effect) and one masked write, or one call where the row is a numpy
ufunc writing its destination itself (every lane on; else computed whole and copied to the enabled lanes).

The SGPRs and VGPR dwords a block reads before writing them and those it writes are listed (Block.sreads etc.) for
loops.py, which runs a one-block loop's iterations as one batch; in loop mode (`accs`) the v_add_f32 adds into an
accumulator only record their other operand (m.acc).

Inline: the VALU rows of ops.VALU in VOP1/VOP2/VOP3/VOPC encodings with 32/64-bit operands, v_cmp (ops.FCMP/ICMP),
v_cndmask_b32, the carry ops (execute.carry_op), VOPD pairs, the SALU rows of ops.SALU, SOPC/SOPK compares and ops
(execute.sopc_scc/sopk_op), V_DIV_SCALE/V_DIV_FMAS (alu.div_scale/div_fmas), whole-dword global loads
(Machine.load_dwords) and stores (Machine.store_dwords). Lane masks a block computes stay in it
as [n, 32] bool and are written to their SGPRs before anything reads the registers. Every other instruction of the run
is a call of its execute.HANDLERS row (the interpreter's own code); an instruction neither covers ends the run, and the
interpreter steps it.

A block runs only when every wave of the dispatch is at its entry PC (lockstep, so no wave's order changes) and EXEC is
the same through it (an EXEC write ends it). Checked mode: the VGPR dwords the block reads before writing them must hold
defined values in every enabled lane (one test at entry); then every value it computes is defined in those lanes too,
and the dwords it writes are marked so (before each handler call and at the end). Where that test fails the interpreter
steps the instructions instead, tracking definedness lane by lane and naming the first undefined read as it does; where
a global load in the block gives undefined lanes (bytes nothing wrote), the block ends after the load and the
interpreter steps the rest (Machine.stop_block). Blocks run only while no SGPR bit or SCC is undefined (Machine.clean),
and a scalar load that loads undefined bytes ends its block the same way."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulators.amd.rdna3 import alu as A
from emulators.amd.rdna3 import execute as E
from emulators.amd.rdna3 import lanes as M
from emulators.amd.rdna3 import ops as X
from emulators.amd.rdna3.decode import T16, WIDTH, Inst, branch_target, flat_offset, vopd_dsty
from emulators.amd.rdna3.opcodes import VOP3B

VCC, EXEC = 106, 126
MAX_INSTS = 400   # instructions per block (a long straight line is split; the next block starts where this one ends)
TERMINATORS = frozenset({"s_endpgm", "s_barrier", *E.BRANCH_COND})
HANDLED = frozenset({"SOP1", "SOP2", "SOPC", "SOPK", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOPD", "DS", "FLAT"})


@dataclass
class Block:
  fn: Any                   # fn(machine, idx) -> bool: False when the checked-mode entry test failed (nothing ran)
  insts: list[Inst]         # the instructions it runs (by position: a fault names insts[k])
  source: str               # the generated code (for reading and tests)
  vreads: frozenset[int] = frozenset()    # VGPR dwords read before the block writes them
  vwritten: frozenset[int] = frozenset()  # VGPR dwords it writes
  sreads: frozenset[int] = frozenset()    # SGPRs read before the block writes them (valid unless opaque)
  swritten: frozenset[int] = frozenset()  # SGPRs it writes (valid unless opaque)
  opaque: bool = False      # a handler runs in it whose SGPR and memory effects are not listed (no loop runs)
  lanewise: bool = False    # only inline VALU work (no handler but SMEM): no lane reads another's value or its own
                            # disabled lanes (a loop batch may then compute every lane: Machine.unmasked)
  lreads: frozenset[int] = frozenset()   # SGPRs read as lane masks that the block did not compute
  sall: frozenset[int] = frozenset()     # SGPRs read as scalars (anywhere in the block)
  maskw: frozenset[int] = frozenset()    # SGPRs whose last write in the block is a lane mask (v_cmp, carry out)
  maskever: frozenset[int] = frozenset() # SGPRs the block writes a lane mask to (at any point)
  nrec: tuple[tuple[int, int], ...] = ()   # loop mode: (accumulator, its records per run) (loops.py sizes its fold buffer)


def _exec_writer(i: Inst) -> bool:
  """Whether i may write EXEC (s126/s127): it ends its block, so EXEC is constant inside one."""
  f, n = i.f, i.op.name
  if i.fmt in ("SOP1", "SOP2", "SOPK"):
    d = f.get("sdst", 0)
    return n in X.SAVEEXEC or "wrexec" in n or d in (EXEC, EXEC + 1) or (WIDTH.get(i.op.dst, 1) == 2 and d + 1 == EXEC)
  if i.fmt == "SMEM": return f["sdata"] <= EXEC + 1 and f["sdata"] + WIDTH.get(i.op.dst, 1) > EXEC
  if n.startswith("v_cmpx"): return True
  if i.fmt == "VOP3":
    if f.get("sdst") in (EXEC, EXEC + 1): return True
    if n.startswith(("v_cmp", "v_readlane", "v_readfirstlane")) and f["vdst"] in (EXEC - 1, EXEC, EXEC + 1): return True
  if i.fmt == "VOP1" and n == "v_readfirstlane_b32" and f["vdst"] in (EXEC, EXEC + 1): return True
  return False


def _dwords(code: int, t: str) -> list[int]:
  """The VGPR dwords a source operand reads (none for SGPRs and constants)."""
  if code < 256: return []
  r = code - 256
  if t in T16: return [r & 0x7F]
  return list(range(r, r + WIDTH.get(t, 1)))


def _handler_rw(i: Inst) -> tuple[list[int], list[int]] | None:
  """(VGPR dwords read, VGPR dwords written) of an instruction run by its handler in a block; None: not in blocks.
  Reads may be too many and writes too few (more dwords tested at entry), never the reverse."""
  f, n = i.f, i.op.name
  if i.fmt in ("SOP1", "SOP2", "SOPC", "SOPK", "SMEM"): return [], []
  if i.fmt in ("VOP1", "VOP2", "VOPC", "VOP3"):
    if n.startswith(("v_readlane", "v_writelane", "v_swap")) or n == "v_nop": return None
    reads = [d for c, t, _ in E._srcs(None, i, None, None) if t != "m" for d in _dwords(c, t)]
    if n.startswith("v_cmp") or n == "v_readfirstlane_b32" or i.op.dst in T16: return reads, []
    return reads, _dwords(256 + f.get("vdst", 0), i.op.dst)
  if i.fmt == "DS":
    nm = n
    if f["gds"]: return None
    reads = [f["addr"]]
    def nd(nb: int) -> list[int]: return list(range(-(-nb // 4)))
    if nm in E.DS_LOAD: return reads, [f["vdst"] + k for k in nd(E.DS_LOAD[nm][0])]
    if nm in E.DS_STORE: return reads + [f["data0"] + k for k in nd(E.DS_STORE[nm])], []
    if nm in E.DS_2ADDR:
      nb = E.DS_2ADDR[nm][0]
      if "load" in nm: return reads, [f["vdst"] + k for k in nd(2 * nb)]
      return reads + [f["data0"] + k for k in nd(nb)] + [f["data1"] + k for k in nd(nb)], []
    return None
  if i.fmt == "FLAT":
    if f["seg"] not in (0, 2): return None
    nm = n.split("_", 1)[1]
    reads = [f["addr"]] if f["saddr"] not in (124, 125) and f["seg"] == 2 else [f["addr"], f["addr"] + 1]
    if nm in E.FLAT_LOAD:
      nb, _, d16 = E.FLAT_LOAD[nm]
      return reads, [] if d16 or nb < 4 else [f["vdst"] + k for k in range(-(-nb // 4))]
    if nm in E.FLAT_STORE:
      nb, d16 = E.FLAT_STORE[nm]
      return reads + [f["data"] + k for k in range(max(1, -(-nb // 4)))], []
    return None
  return None


def _handler_sgprs(i: Inst) -> tuple[list[int], list[int]] | None:
  """(SGPRs read, SGPRs written) of an instruction run by its handler in a block (SCC and EXEC aside: EXEC writers end
  blocks); None where they are not listed here (the block is then opaque: no loop batch runs it)."""
  f, n = i.f, i.op.name
  if i.fmt == "SMEM":   # the base pair and SOFFSET read, the data written
    return [f["sbase"] << 1, (f["sbase"] << 1) + 1] + ([f["soffset"]] if f["soffset"] < 128 else []), list(range(f["sdata"], f["sdata"] + WIDTH[i.op.dst]))
  if i.fmt not in ("VOP1", "VOP2", "VOP3", "VOPC") or n.startswith(("v_cmpx", "v_readlane", "v_writelane")): return None
  reads = [c + k for c, t, _ in E._srcs(None, i, None, None) if c < 128 for k in range(1 if t == "m" else WIDTH.get(t, 1))]
  if i.fmt == "VOPC": return reads, [VCC]
  if n.startswith("v_cmp") or n == "v_readfirstlane_b32": return reads, [f["vdst"]]
  return reads, [f["sdst"]] if n in VOP3B else []


class _Gen:
  """The generated source of one block: entry bindings (register views, constants) and the statements."""
  def __init__(self, m: Any):
    self.m, self.nv = m, m.nv
    self.binds: dict[str, str] = {}   # name -> expression evaluated once at block entry
    self.consts: dict[str, Any] = {}  # name -> object in the function's globals
    self.lines: list[str] = []
    self.reads: list[int] = []        # VGPR dwords read before the block wrote them (tested at entry in checked mode)
    self.written: set[int] = set()
    self.pending: set[int] = set()    # written inline since the last definedness mark
    self.masks: dict[int, str] = {}   # SGPR -> the local holding its lanes as [n, 32] bool (a v_cmp/carry result of this block)
    self.dirty: set[int] = set()      # SGPRs whose mask is only in its local so far
    self.pairs: dict[int, str] = {}   # VGPR r -> the local holding v[r:r+2] as uint64 (valid until either is written)
    self.sreads: list[int] = []       # SGPRs read before the block wrote them
    self.swritten: set[int] = set()
    self.opaque = False
    self.lanewise = True
    self.lreads: set[int] = set()
    self.sall: set[int] = set()
    self.maskw: set[int] = set()
    self.maskever: set[int] = set()
    # loop mode (loops.py): accumulator VGPRs whose v_add_f32 chain is recorded (m.acc[r]) instead of computed; any other
    # read or write of them makes the block unusable (bad)
    self.accs: frozenset[int] = frozenset()
    self.bad: set[int] = set()        # the accumulators read or written otherwise
    self.nrec: dict[int, int] = {}    # accumulator -> the adds recorded into it
    # the line of the last direct SALU instruction's SCC write and the line count after that instruction (_salu_direct):
    # where the next line is the next instruction's `k =` and that instruction writes SCC without reading it, the write is dead
    self.scc_line, self.scc_after = -1, -1

  def const(self, obj: Any, hint: str) -> str:
    name = f"{hint}{len(self.consts)}"
    self.consts[name] = obj
    return name

  def read(self, dws: list[int]) -> None:
    self.bad |= self.accs.intersection(dws)
    self.reads += [d for d in dws if d not in self.written and d not in self.reads]

  def write(self, dws: list[int], inline: bool) -> None:
    self.bad |= self.accs.intersection(dws)
    self.written.update(dws)
    for d in dws:
      self.pairs.pop(d, None)
      self.pairs.pop(d - 1, None)
    if inline: self.pending.update(dws)

  def flush(self) -> None:
    """Mark the dwords written inline since the last mark as defined in the enabled lanes (checked mode)."""
    if not self.pending: return
    self.lines.append(f"if vinit is not None: mark(m, vinit, {tuple(runs(sorted(self.pending)))!r}, L, L3)")
    self.pending.clear()

  # ---- operands ----
  def vreg(self, r: int, t: str) -> str:
    """A typed view of VGPR r (32-bit types), bound at entry."""
    dt = np.dtype(A.NP[t])
    name = f"v{r}_{dt.char}"
    self.binds[name] = f"v[:, {r}, :]" + ("" if dt == np.uint32 else f".view({self.const(dt, 'T')})")
    return name

  def src(self, code: int, t: str, lit: int | None) -> str | None:
    """The expression of a source operand as the typed array the rows take; None where the block cannot inline it."""
    w = WIDTH.get(t, 1)
    if t in T16 or t in ("p16", "x16", "m") or w > 2: return None
    dt = np.dtype(A.NP[t])
    if code >= 256:
      r = code - 256
      if r + w > self.nv: return None   # the handler names the VGPR beyond RSRC1.VGPRS
      self.read(list(range(r, r + w)))
      if w == 1: return self.vreg(r, t)
      if (p := self.pairs.get(r)) is None:   # made once until either dword is written (f64 operands are often read again)
        p = self.pairs[r] = f"p{r}"
        self.lines.append(f"{p} = pair(v, {r})")
      return f"{p}.view({self.const(dt, 'T')})"
    if code < 128 and code != 124:
      if code + w > 128: return None
      self.sync(range(code, code + w))   # a mask this block computed, read as a scalar operand
      self.sread(range(code, code + w))
      name = f"s{code}_{w}_{dt.char}"
      self.binds[name] = f"s[:, {code}:{code + w}]" + (".view(U64)" if w == 2 else "") + \
        ("" if dt in (np.uint32, np.uint64) else f".view({self.const(dt, 'T')})")
      return name
    if code == 124: bits = 0
    elif 128 <= code <= 248 or code == 255:
      if code == 255 and lit is None: return None
      try: bits = self.m.const(code, t, lit, None)
      except M.WaveFault: return None
    else: return None
    raw = np.array([[bits if w == 2 else bits & 0xFFFFFFFF]], np.uint64 if w == 2 else np.uint32)
    return self.const(raw.view(dt), "K")

  def save(self) -> tuple:
    return list(self.reads), dict(self.binds), len(self.lines), set(self.dirty), dict(self.pairs)

  def restore(self, saved: tuple) -> None:
    """Forget what generating an instruction that is then left to its handler added."""
    self.reads, self.binds, n, self.dirty, self.pairs = saved[0], saved[1], saved[2], saved[3], saved[4]
    del self.lines[n:]

  def sread(self, codes: Any, lane: bool = False) -> None:
    codes = [c for c in codes if c != 124]
    (self.lreads if lane else self.sall).update(codes)
    self.sreads += [c for c in codes if c not in self.swritten and c not in self.sreads]

  def swrite(self, codes: Any) -> None:
    codes = [c for c in codes if c != 124]
    self.swritten.update(codes)
    self.maskw.difference_update(codes)

  def setmask(self, code: int, expr: str) -> None:
    """SGPR `code` = the lane mask of the bool [n, 32] expr (disabled lanes 0), written back by `sync` when needed."""
    self.lines.append(f"c{code} = {expr}")
    self.dirty.add(code)
    self.swrite([code])
    if code != 124:   # NULL is written (as the handlers do) but reads as 0
      self.masks[code] = f"c{code}"
      self.maskw.add(code)
      self.maskever.add(code)

  def sync(self, codes: Any = None) -> None:
    """Write the lane masks not yet in their SGPRs (all, or those among codes) before something reads the registers."""
    for c in sorted(self.dirty if codes is None else self.dirty & set(codes)):
      self.lines.append(f"s[:, {c}] = tomask(c{c} & L)")
      self.dirty.discard(c)

  def lanes(self, code: int) -> str:
    """SGPR `code` as lanes: the v_cmp result this block computed for it, or unpacked from the register."""
    if code == 124: return "False"   # NULL reads as 0: no lane
    if code not in self.masks: self.sread([code], lane=True)
    return self.masks.get(code, f"tolanes(s[:, {code}])")

  def ssrc(self, code: int, t: str, lit: int | None) -> str | None:
    """A scalar source as uint64 per wave [n] (Machine.sreg), None where the block cannot inline it."""
    w = WIDTH.get(t, 1)
    if w > 2: return None
    if code < 128 and code != 124:
      if code + w > 128: return None
      self.sync(range(code, code + w))
      self.sread(range(code, code + w))
      return f"s[:, {code}].astype(U64)" if w == 1 else f"s[:, {code}:{code + 2}].view(U64)[:, 0].astype(U64)"
    if code == 124 or 128 <= code <= 248 or (code == 255 and lit is not None):
      try: val = 0 if code == 124 else self.m.const(code, t, lit, None)
      except M.WaveFault: return None
      name = f"k{code}_{val}"
      self.binds[name] = f"np.full(len(idx), {val}, U64)"
      return name
    return None

  def mods(self, i: Inst, x: str, k: int, t: str) -> str:
    """VOP3 abs/neg of a float operand (execute._mods)."""
    if i.fmt != "VOP3" or t[0] != "f" or i.op.name in VOP3B: return x
    if (i.f["abs"] >> k) & 1: x = f"np.abs({x})"
    if (i.f["neg"] >> k) & 1: x = f"np.negative({x})"
    return x

  def store(self, r: int, t: str, val: str, known_int: bool = False) -> bool:
    """Write a typed result to VGPR r (and r+1) in the enabled lanes (untyped: wrapped to the register's bits)."""
    w = WIDTH.get(t, 1)
    if t in T16 or w > 2 or r + w > self.nv: return False
    dt = np.dtype(A.NP[t])
    if w == 1:
      if dt.kind == "f": self.lines.append(f"np.copyto({self.vreg(r, t)}, {val}, casting='unsafe', where=W)")
      elif known_int: self.lines.append(f"np.copyto({self.vreg(r, 'b32')}, {val}, casting='unsafe', where=W)")
      else: self.lines += [f"r = {val}", "intres(r)", f"np.copyto({self.vreg(r, 'b32')}, r, casting='unsafe', where=W)"]
    else:
      self.lines.append(f"p{r} = store64(full, L, v, {r}, {val}, {self.const(dt, 'T')})")
    self.write(list(range(r, r + w)), True)
    if w == 2: self.pairs[r] = f"p{r}"   # the pair as stored (store64 returns it): no pair() for a read of it
    return True


# ---- runtime helpers the generated code calls ----
def _store(full: bool, lanes: np.ndarray, dst: np.ndarray, val: Any) -> None:
  """dst[enabled lanes] = val, cast to dst's type (a float result rounds once, an integer wraps: lanes.untyped)."""
  val = np.asarray(val)
  if dst.dtype.kind != "f" and val.dtype.kind == "f": raise M.WaveFault(f"internal: a float result for a {dst.dtype} destination")
  if full: np.copyto(dst, val, casting="unsafe")
  else: np.copyto(dst, val, casting="unsafe", where=lanes)


def _store64(full: bool, lanes: np.ndarray, v: np.ndarray, r: int, val: Any, dt: np.dtype) -> np.ndarray:
  """VGPRs r, r+1 = the 64-bit values in the enabled lanes; returns the pair as it now is (uint64 per lane, as _pair
  reads it): the stored bits themselves when every lane is on and they have the registers' shape."""
  val = np.asarray(val)
  if dt.kind != "f" and val.dtype.kind == "f": raise M.WaveFault(f"internal: a float result for a {dt} destination")
  bits = val.astype(dt, copy=False).view(np.uint64) if dt.kind == "f" else val.astype(np.int64 if val.dtype.kind == "i" else np.uint64).astype(np.uint64)
  _store(full, lanes, v[:, r, :], bits)   # the unsafe cast to uint32 keeps the low dword
  _store(full, lanes, v[:, r + 1, :], bits >> np.uint64(32))
  # (never a register's memory: a 64-bit result is computed apart; pair arrays are only read, so sharing one is harmless)
  return bits if full and bits.shape == lanes.shape else _pair(v, r)


def runs(regs: Any) -> list[tuple[int, int]]:
  """Sorted registers as runs [a, b) of consecutive ones (slices of the register file: no gather or scatter of rows)."""
  runs: list[tuple[int, int]] = []
  for r in regs:
    if runs and runs[-1][1] == r: runs[-1] = (runs[-1][0], r + 1)
    else: runs.append((r, r + 1))
  return runs


def defined_rows(vinit: np.ndarray, runs: Any, lanes: np.ndarray, every: bool) -> bool:
  """Checked mode: VGPRs [a, b) of each run hold defined values in every enabled lane (`every`: all lanes are)."""
  if every: return all(bool(vinit[:, a:b, :].all()) for a, b in runs)
  off = ~lanes[:, None, :]
  return all(bool((vinit[:, a:b, :] | off).all()) for a, b in runs)


def mark_rows(vinit: np.ndarray, runs: Any, l3: np.ndarray, every: bool) -> None:
  """Checked mode: VGPRs [a, b) of each run now hold defined values in the enabled lanes (l3: [n, 1, 32]; `every`: all
  lanes are, one fill of the register-major rows; else or-ed with the lanes)."""
  for a, b in runs:
    if every: vinit[:, a:b, :] = True
    else: vinit[:, a:b, :] |= l3


def _defined(m: Any, vinit: np.ndarray, runs: tuple[tuple[int, int], ...], lanes: np.ndarray) -> bool:
  """A block's entry test (checked mode): its VGPRs read before written defined in every enabled lane."""
  return defined_rows(vinit, runs, lanes, m.all_on(lanes))


def _mark(m: Any, vinit: np.ndarray, runs: tuple[tuple[int, int], ...], lanes: np.ndarray, l3: np.ndarray) -> None:
  mark_rows(vinit, runs, l3, m.all_on(lanes))


def _select(c: np.ndarray, a: Any, b: Any, out: np.ndarray) -> None:
  """out = a where c else b, for uint32 operands (registers or constants) and a bool lane mask c the shape of out: as
  bits, b ^ ((a ^ b) & (0 - c)) (4 passes of plain integer ufuncs; np.where with a mixed mask branches per lane, twice
  as slow on 16,384 lanes). out may be a or b (each pass reads a lane before writing it)."""
  m = c.astype(np.uint32)
  np.negative(m, out=m)   # 0 or all ones
  np.bitwise_and(np.bitwise_xor(a, b), m, out=m)
  np.bitwise_xor(m, b, out=out)


def _intres(r: Any) -> None:
  if r.dtype.kind == "f": raise M.WaveFault(f"internal: a float result ({r.dtype}) for an integer destination")


def _pair(v: np.ndarray, r: int) -> np.ndarray:
  """VGPRs r, r+1 as one uint64 per lane (r the low dword): the two dwords side by side, read as little-endian uint64."""
  out = np.empty((v.shape[0], v.shape[2], 2), "<u4")
  out[..., 0] = v[:, r, :]
  out[..., 1] = v[:, r + 1, :]
  return out.view("<u8")[..., 0]



# ---- instructions inline ----
def _valu_inline(g: _Gen, i: Inst) -> bool:
  """Generate one VALU instruction inline; False where it is left to its handler (nothing generated)."""
  o, f, n = i.op, i.f, i.op.name
  if i.fmt == "VOPD": return _vopd_inline(g, i)
  if i.fmt not in ("VOP1", "VOP2", "VOPC", "VOP3"): return False
  saved = g.save()
  def undo() -> bool:
    g.restore(saved)
    return False
  if n.startswith("v_cmp_"):
    srcs = E._srcs(None, i, None, None)
    if len(srcs) != 2: return False
    dst = VCC if i.fmt == "VOPC" else f["vdst"]
    if dst >= 128: return False
    args = [g.src(c, t, i.literal) for c, t, _ in srcs]
    if None in args: return undo()
    args = [g.mods(i, a, k, t) for k, (a, (_, t, _)) in enumerate(zip(args, srcs))]
    g.setmask(dst, f"{_compare_row(n)}({args[0]}, {args[1]})")
    return True
  if n == "v_cndmask_b32":
    srcs = E._srcs(None, i, None, None)
    sel_code = srcs[2][0]
    if sel_code >= 128: return False
    a, b = g.src(srcs[0][0], "b32", i.literal), g.src(srcs[1][0], "b32", i.literal)
    if a is None or b is None: return undo()
    ab = []
    for k, x in ((0, a), (1, b)):
      if i.fmt == "VOP3" and (f["abs"] >> k) & 1: x = f"({x} & np.uint32(0x7FFFFFFF))"
      if i.fmt == "VOP3" and (f["neg"] >> k) & 1: x = f"({x} ^ np.uint32(0x80000000))"
      ab.append(x)
    cond, vd = g.lanes(sel_code), f["vdst"]
    if cond == "False" or vd >= g.nv:   # NULL as the condition (every lane src0), or a VGPR past the allocation: the store's way
      if not g.store(vd, "b32", f"np.where({cond}, {ab[1]}, {ab[0]})", True): return undo()   # of two uint32s
      return True
    # every lane on: a branchless select straight into the register (np.where with a lane mask costs 2x); else where + copy
    dst = g.vreg(vd, "b32")
    g.lines.append(f"select({cond}, {ab[1]}, {ab[0]}, {dst}) if full else np.copyto({dst}, np.where({cond}, {ab[1]}, {ab[0]}), casting='unsafe', where=L)")
    g.write([vd], True)
    return True
  if n in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"):
    if i.fmt == "VOP3" and f["clamp"]: return False
    srcs = E._srcs(None, i, None, None)
    cout = f["sdst"] if i.fmt == "VOP3" else VCC
    if cout >= 128: return False
    a, b = g.src(srcs[0][0], srcs[0][1], i.literal), g.src(srcs[1][0], srcs[1][1], i.literal)
    cin = "None"
    if "_ci_" in n:
      if srcs[2][0] >= 128: return undo()
      cin = g.lanes(srcs[2][0])
    if a is None or b is None: return undo()
    g.lines.append(f"q, qc = E.carry_op({n!r}, {a}, {b}, {cin})")
    if not g.store(f["vdst"], "u32", "q", True): return undo()
    g.setmask(cout, "qc")
    return True
  if n in ("v_div_scale_f32", "v_div_scale_f64", "v_div_fmas_f32", "v_div_fmas_f64") and not (g.accs and f.get("vdst") in g.accs):
    return _div_inline(g, i) or undo()
  if g.accs and f.get("vdst") in g.accs and not n.startswith(("v_cmp", "v_readfirstlane")):
    srcs = E._srcs(None, i, None, None)
    plain = i.fmt == "VOP2" or (i.fmt == "VOP3" and not (f["abs"] or f["neg"] or f["clamp"] or f["omod"]))
    if n != "v_add_f32" or not plain or len(srcs) != 2: return _bad(g, f["vdst"])
    return _record(g, f["vdst"], srcs[0][0], srcs[1][0], i.literal)
  if n.startswith(E.VALU_OWN) or n not in X.VALU: return False
  if i.fmt == "VOP3" and n in VOP3B: return False
  if i.fmt == "VOP3" and o.dst[0] != "f" and f.get("clamp"): return False
  srcs = E._srcs(None, i, None, None)
  args = [g.src(c, t, i.literal) for c, t, _ in srcs]
  if None in args: return undo()
  args = [g.mods(i, a, k, t) for k, (a, (_, t, _)) in enumerate(zip(args, srcs))]
  row = X.VALU[n]
  finish = o.dst[0] == "f" and i.fmt == "VOP3" and (f["omod"] or f["clamp"])
  vd = f.get("vdst", 0)
  if _in_place(row, [t for _, t, _ in srcs], o.dst) and not finish and vd < g.nv:
    g.lines.append(_in_place_line(f"X.VALU[{n!r}]", args, g.vreg(vd, o.dst)))
    g.write([vd], True)
    return True
  val = f"X.VALU[{n!r}]({', '.join(args)})"
  if finish:
    val = f"finish({g.const(i, 'I')}, np.asarray({val}).astype({g.const(np.dtype(A.NP[o.dst]), 'T')}), {o.dst!r})"
  narrow = n in NARROW and vd < g.nv and o.dst in ("u32", "b32") and all(t in ("u32", "b32") for _, t, _ in srcs)
  at = len(g.lines)
  if not g.store(f.get("vdst", 0), o.dst, val): return undo()
  if narrow:   # the row's own uint32 form while the row is the table's (a changed row runs as written: the lines after else)
    dst, expr = g.vreg(vd, "b32"), NARROW[n][1]
    g.lines[at:] = [f"if X.VALU[{n!r}] is {g.const(NARROW[n][0], 'N')}: " + expr.format(*args, o=f", out={dst}") +
                    f" if full else np.copyto({dst}, {expr.format(*args, o='')}, casting='unsafe', where=L)",
                    "else:", *[f"  {ln}" for ln in g.lines[at:]]]
  return True


# VALU rows that widen to int64 (or compute in uint32 and are copied) whose result's low 32 bits (all a register keeps:
# clamp, which needs the wide result, is left to the handler) one uint32 ufunc chain gives, wrapping as the register does:
# name -> (the row as ops.VALU holds it, the chain; {o}: the out= of its last call)
NARROW: dict[str, tuple[Any, str]] = {n: (X.VALU[n], e) for n, e in {
  "v_add_nc_u32": "np.add({0}, {1}{o})", "v_sub_nc_u32": "np.subtract({0}, {1}{o})", "v_subrev_nc_u32": "np.subtract({1}, {0}{o})",
  "v_add3_u32": "np.add(np.add({0}, {1}), {2}{o})",
  "v_lshl_add_u32": "np.add(np.left_shift({0}, np.bitwise_and({1}, SHIFT5)), {2}{o})",
  "v_lshl_or_b32": "np.bitwise_or(np.left_shift({0}, np.bitwise_and({1}, SHIFT5)), {2}{o})",
  "v_lshlrev_b32": "np.left_shift({1}, np.bitwise_and({0}, SHIFT5){o})", "v_lshrrev_b32": "np.right_shift({1}, np.bitwise_and({0}, SHIFT5){o})",
}.items()}


def _div_inline(g: _Gen, i: Inst) -> bool:
  """V_DIV_SCALE (the result and its VCC lane mask, disabled lanes' operands read as 1) and V_DIV_FMAS (with the VCC
  lanes, modifiers, clamp/omod) as execute.valu runs them (A.div_scale, A.div_fmas)."""
  o, f, n = i.op, i.f, i.op.name
  srcs = E._srcs(None, i, None, None)
  if len(srcs) != 3: return False
  args = [g.src(c, t, i.literal) for c, t, _ in srcs]
  if None in args: return False
  if n.startswith("v_div_scale"):
    if f["sdst"] >= 128: return False
    g.lines.append(f"r, q = divscale(full, L, {', '.join(args)})")   # VOP3B: no modifiers (execute._mods)
    if not g.store(f["vdst"], o.dst, "r"): return False
    g.setmask(f["sdst"], "q")
    return True
  args = [g.mods(i, a, k, t) for k, (a, (_, t, _)) in enumerate(zip(args, srcs))]
  val = f"A.div_fmas({', '.join(args)}, {g.lanes(VCC)} & L)"
  if i.fmt == "VOP3" and (f["omod"] or f["clamp"]):
    val = f"finish({g.const(i, 'I')}, np.asarray({val}).astype({g.const(np.dtype(A.NP[o.dst]), 'T')}), {o.dst!r})"
  return g.store(f["vdst"], o.dst, val)


def _div_scale(full: bool, lanes: np.ndarray, *vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """A.div_scale on the operands as [n, 32] lanes, the disabled lanes' read as 1 (execute.valu's V_DIV_SCALE)."""
  vals = tuple(np.broadcast_to(v, lanes.shape) if full else np.where(lanes, v, v.dtype.type(1)) for v in vals)
  return A.div_scale(*vals)


def _bad(g: _Gen, r: int) -> bool:
  g.bad.add(r)
  return False


def _record(g: _Gen, r: int, c0: int, c1: int, lit: int | None) -> bool:
  """Loop mode: v_add_f32 v[r], a, b with v[r] an accumulator: record (which operand is the accumulator, the other
  operand in every lane) for loops.py, which adds the records in iteration order with the row's accumulate."""
  if (c0 == 256 + r) == (c1 == 256 + r): return _bad(g, r)
  form, x = (0, c1) if c0 == 256 + r else (1, c0)
  xe = g.src(x, "f32", lit)
  if xe is None: return _bad(g, r)
  g.reads += [r] if r not in g.reads else []   # read before written: tested at entry in checked mode
  g.lines.append(f"m.acc[{r}].add({form}, {xe}, L.shape)")   # the operand in every lane (loops.Records, loops.FoldBuffer)
  g.nrec[r] = g.nrec.get(r, 0) + 1
  return True


def _compare_row(n: str) -> str:
  """ops.compare's choice for v_cmp_<c>_<t>, as an expression looked up when the block runs (a changed row is used)."""
  c, t = n.split("_")[2:4]
  if c == "class": return "A.cls_class"
  return f"X.{'FCMP' if t[0] == 'f' else 'ICMP'}[{c!r}]"


def _in_place(row: Any, srcs: list[str], dst: str) -> bool:
  """Whether a row is a numpy ufunc computing in its operands' 32-bit type, which it can write to the destination
  register's lanes itself (out=, where=: the disabled lanes keep their values): one call instead of compute and copy."""
  return isinstance(row, np.ufunc) and row.nin == len(srcs) and WIDTH.get(dst, 1) == 1 and dst not in T16 and all(t == dst for t in srcs)


def _in_place_line(row: str, args: list[str], dst: str) -> str:
  """The row writing its result into dst itself when every lane is on; else computed whole and copied to the enabled
  lanes, as the interpreter does (a ufunc with where= may take a commutative op's operands in the other order, and so
  the other NaN's payload when both are NaNs: numpy 2.4, a broadcast first operand and a lane mask)."""
  a = ", ".join(args)
  return f"{row}({a}, out={dst}) if full else np.copyto({dst}, {row}({a}), casting='unsafe', where=L)"


def _vopd_inline(g: _Gen, i: Inst) -> bool:
  """Both halves of a VOPD pair read their sources, then both write (execute.vopd / _vopd_half)."""
  f = i.f
  saved = g.save()
  halves = []
  nacc = 0   # halves recorded as accumulator adds (loop mode): they write no register
  for name, d, s0, s1 in zip(i.op.name.split("::"), (f["vdstx"], vopd_dsty(i)), (f["src0x"], f["src0y"]), (f["vsrc1x"], f["vsrc1y"])):
    if d in g.accs:
      if name != "v_dual_add_f32" or not _record(g, d, s0, 256 + s1, i.literal): return _bad(g, d)
      nacc += 1
      continue
    if name == "v_dual_cndmask_b32":
      a, b = g.src(s0, "b32", i.literal), g.src(256 + s1, "b32", None)
      if a is None or b is None: break
      halves.append((d, "b32", f"np.where({g.lanes(VCC)}, {b}, {a})", None, {s0 - 256, s1}))
      continue
    base = E.VOPD_FN.get(name)
    if base is None: break
    t = E.VOPD_TYPES.get(base, "f32")
    a = g.src(s0, t, i.literal)
    args = [a]
    if base != "v_mov_b32":
      b = g.src(256 + s1, t, None)
      k = g.const(np.float32(np.uint32(i.literal or 0).view(np.float32)), "K")
      if base == "v_fmac_f32": args = [a, b, g.src(256 + d, t, None)]
      elif base == "v_fmamk_f32": args = [a, k, b]
      elif base == "v_fmaak_f32": args = [a, b, k]
      else: args = [a, b]
    if None in args: break
    row = f"X.VALU[{base!r}]"
    r = f"{row}({', '.join(args)})"
    inplace = _in_place_line(row, args, g.vreg(d, t)) if _in_place(X.VALU[base], [t] * len(args), t) else None
    # a mov's result is its source register's view: copied, as the other half may write that register first
    halves.append((d, t, f"np.array({r}, {g.const(np.dtype(A.NP[t]), 'T')})" if base == "v_mov_b32" else r, inplace,
                   {s0 - 256, s1} | ({d} if base == "v_fmac_f32" else set())))
  if len(halves) + nacc != 2 or any(h[0] + 1 > g.nv for h in halves):
    g.restore(saved)
    return False
  if len(halves) == 1: g.store(halves[0][0], halves[0][1], halves[0][2])
  if len(halves) < 2: return True
  (dx, tx, ex, ix, _), (dy, ty, ey, iy, ry) = halves
  if ix is not None and dx not in ry and dx != dy:   # X writes first, in place: Y does not read its destination
    g.lines.append(ix)
    g.write([dx], True)
    if iy is not None:
      g.lines.append(iy)
      g.write([dy], True)
    else: g.store(dy, ty, ey)
  elif iy is not None and dx != dy:   # X's result aside, Y in place, then X's
    g.lines.append(f"rx = {ex}")
    g.lines.append(iy)
    g.write([dy], True)
    g.store(dx, tx, "rx")
  else:
    g.lines += [f"rx = {ex}", f"ry = {ey}"]
    g.store(dx, tx, "rx")
    g.store(dy, ty, "ry")
  return True


def _load_inline(g: _Gen, i: Inst) -> bool:
  """A FLAT/GLOBAL load of whole dwords: the address as execute.flat forms it, then Machine.load_dwords; where that
  declines (unaligned, several mappings, a fault, undefined bytes) the handler runs the instruction and names any fault."""
  f = i.f
  nm = i.op.name.split("_", 1)[1]
  if f["seg"] not in (0, 2) or nm not in E.FLAT_LOAD: return False
  nb, _, d16 = E.FLAT_LOAD[nm]
  nd = nb // 4
  if d16 or nb < 4 or nb % 4 or f["vdst"] + nd > g.nv: return False
  saddr = f["saddr"] not in (124, 125) and f["seg"] == 2
  if saddr and f["saddr"] + 2 > 128: return False
  g.read([f["addr"]] if saddr else [f["addr"], f["addr"] + 1])
  if saddr: g.sread([f["saddr"], f["saddr"] + 1])
  g.flush()
  g.sync()
  if saddr: addr = f"s[:, {f['saddr']}:{f['saddr'] + 2}].view(U64) + v[:, {f['addr']}, :].astype(U64)"
  else:   # the VGPR pair as uint64, computed once while neither dword is written (loads at several offsets of one base)
    if (addr := g.pairs.get(f["addr"])) is None:
      addr = g.pairs[f["addr"]] = f"p{f['addr']}"
      g.lines.append(f"{addr} = pair(v, {f['addr']})")
  off = flat_offset(i)
  # + OFFSET modulo 2^64 (execute.flat adds it in int64 and wraps back: the same bits)
  # a VGPR pair base: load_dwords adds the offset itself (and keeps the base's address facts for its next offset)
  call = f"m.load_dwords(idx, None, {nd}, L, {f['vdst']}, {addr}, {off % (1 << 64)})" if not saddr else f"m.load_dwords(idx, a, {nd}, L, {f['vdst']})"
  g.lines += ([f"a = {addr}" if not off else f"a = {addr} + U64({off % (1 << 64)})"] if saddr else []) + [
              f"if not {call}:",
              f"  {g.const(E.flat, 'H')}(m, {g.const(i, 'I')}, idx)",
              f"  {_undef_stop(g, f['vdst'], nd)}"]
  g.write(list(range(f["vdst"], f["vdst"] + nd)), False)
  return True


def _flat_inline(g: _Gen, i: Inst) -> bool: return _load_inline(g, i) or _store_inline(g, i)


def _store_inline(g: _Gen, i: Inst) -> bool:
  """A FLAT/GLOBAL store of whole dwords: the address as for a load (_load_inline), then Machine.store_dwords; where that
  declines (unaligned, several mappings, a fault, undefined lanes in checked mode) the handler runs the instruction. A
  store's memory effect is not listed: the block is opaque (no loop batch runs it) and not lane-wise."""
  f = i.f
  nm = i.op.name.split("_", 1)[1]
  if f["seg"] not in (0, 2) or nm not in E.FLAT_STORE: return False
  nb, d16 = E.FLAT_STORE[nm]
  nd = nb // 4
  if d16 or nb < 4 or nb % 4 or f["data"] + nd > g.nv: return False
  saddr = f["saddr"] not in (124, 125) and f["seg"] == 2
  if saddr and f["saddr"] + 2 > 128: return False
  g.read(([f["addr"]] if saddr else [f["addr"], f["addr"] + 1]) + list(range(f["data"], f["data"] + nd)))
  if saddr: g.sread([f["saddr"], f["saddr"] + 1])
  g.opaque, g.lanewise = True, False
  g.flush()
  g.sync()
  if saddr: addr = f"s[:, {f['saddr']}:{f['saddr'] + 2}].view(U64) + v[:, {f['addr']}, :].astype(U64)"
  else:
    if (addr := g.pairs.get(f["addr"])) is None:
      addr = g.pairs[f["addr"]] = f"p{f['addr']}"
      g.lines.append(f"{addr} = pair(v, {f['addr']})")
  off = flat_offset(i)
  g.lines += [f"a = {addr}" if not off else f"a = {addr} + U64({off % (1 << 64)})",
              f"if not m.store_dwords(idx, a, {nd}, L, {f['data']}): {g.const(E.flat, 'H')}(m, {g.const(i, 'I')}, idx)"]
  return True


def _undef_stop(g: _Gen, vdst: int, nd: int) -> str:
  """After a global load's handler: where it loaded undefined bytes (checked mode) the block ends there and the
  interpreter steps the rest, tracking definedness lane by lane (what the block computes is marked defined)."""
  d = str(vdst) if nd == 1 else g.const(np.arange(vdst, vdst + nd), "R")
  return f"if vinit is not None and not (vinit[:, {d}, :] | ~L{'' if nd == 1 else '3'}).all(): return m.stop_block(INSTS, k)"


# ---- scalar instructions inline ----
SOP1_OWN = ("s_and_not0_wrexec_b32", "s_and_not1_wrexec_b32", "s_cmov_b32", "s_cmov_b64", "s_bitset", "s_getpc_b64")


# 32-bit SALU rows computed on the uint32 SGPR columns themselves (no uint64 round trip): name -> (result, SCC or None: SCC
# untouched, whether SCC is read); A, B the sources, r the result, sc32 SCC as uint32. Bits as ops.SALU's rows (the uint32 wrap
# is their `& M32`); SCC: unsigned carry/borrow, signed overflow from the sign bits, or the result != 0
# (test_fast_paths.py: every row against ops.SALU and sopk_op on edge and random operands)
SALU32: dict[str, tuple[str, str | None, bool]] = {
  "s_add_u32": ("A + B", "r < A", False), "s_sub_u32": ("A - B", "B > A", False),
  "s_addc_u32": ("A + B + sc32", "(r < A) | ((r == A) & scc)", True),
  "s_add_i32": ("A + B", "((A ^ r) & (B ^ r)) > SMAX32", False), "s_sub_i32": ("A - B", "((A ^ B) & (A ^ r)) > SMAX32", False),
  "s_and_b32": ("A & B", "r != 0", False), "s_or_b32": ("A | B", "r != 0", False), "s_xor_b32": ("A ^ B", "r != 0", False),
  "s_and_not1_b32": ("A & ~B", "r != 0", False), "s_or_not1_b32": ("A | ~B", "r != 0", False),
  "s_lshl_b32": ("A << (B & SHIFT5)", "r != 0", False), "s_lshr_b32": ("A >> (B & SHIFT5)", "r != 0", False),
  "s_ashr_i32": ("(A.view(INT32) >> (B & SHIFT5).view(INT32)).view(UINT32)", "r != 0", False),
  "s_mul_i32": ("A * B", None, False), "s_mov_b32": ("A", None, False), "s_addk_i32": ("A + B", "((A ^ r) & (B ^ r)) > SMAX32", False),
}


def _salu_direct(g: _Gen, i: Inst) -> bool:
  """A SALU32 row inline on the SGPR columns: every source one dword (an SGPR, or a constant as a uint32 scalar), the
  destination one SGPR. Its SCC write is dropped where the instruction right after it overwrites SCC without reading it."""
  o, f, n = i.op, i.f, i.op.name
  if n not in SALU32 or i.fmt not in ("SOP2", "SOP1", "SOPK") or WIDTH.get(o.dst, 1) != 1: return False
  d = f["sdst"]
  if d >= 128: return False
  follows = g.scc_after == len(g.lines) - 1   # nothing emitted since the last direct instruction but this one's `k =`
  if i.fmt == "SOPK":
    if d == 124: return False
    ks = f["simm16"] - (1 << 16) if f["simm16"] & 0x8000 else f["simm16"]
    codes: list[int | None] = [d, None]
    consts = [0, ks & 0xFFFFFFFF]
  else:
    codes, consts = [], []
    for c, t in zip((f["ssrc0"], f["ssrc1"]) if i.fmt == "SOP2" else (f["ssrc0"],), o.srcs):
      if WIDTH.get(t, 1) != 1: return False
      if c < 128 and c != 124: codes.append(c); consts.append(0)
      elif c == 124 or 128 <= c <= 248 or (c == 255 and i.literal is not None):
        try: val = 0 if c == 124 else g.m.const(c, t, i.literal, None)
        except M.WaveFault: return False
        if not isinstance(val, (int, np.integer)): return False
        codes.append(None); consts.append(int(val) & 0xFFFFFFFF)
      else: return False
  res, scc_expr, reads_scc = SALU32[n]
  srcs = []
  for c, k in zip(codes, consts):
    if c is None: srcs.append(g.const(np.uint32(k), "K"))
    else:
      g.sync([c])
      g.sread([c])
      srcs.append(f"s[:, {c}]")
  ex = {"A": srcs[0], "B": srcs[1] if len(srcs) > 1 else ""}
  def sub(e: str) -> str: return re.sub(r"\b[AB]\b", lambda mt: ex[mt.group()], e)
  if reads_scc: g.lines.append("sc32 = scc.astype(UINT32)")
  g.lines.append(f"r = {sub(res)}")
  if scc_expr is not None:
    if follows and not reads_scc and g.scc_line >= 0: g.lines[g.scc_line] = "pass   # (SCC: overwritten by the next instruction)"
    g.lines.append(f"scc[:] = {sub(scc_expr)}")
    g.scc_line = len(g.lines) - 1
  elif not follows: g.scc_line = -1   # SCC untouched: a pending SCC write stays droppable only across direct instructions
  if d != 124:
    g.lines.append(f"s[:, {d}] = r")
    g.swrite([d])
    g.masks.pop(d, None)
    g.dirty.discard(d)
  g.scc_after = len(g.lines)
  return True


def _salu_inline(g: _Gen, i: Inst) -> bool:
  """SOP2/SOP1 rows of ops.SALU, SOPC compares (execute.sopc_scc) and SOPK ops (execute.sopk_op) inline, per wave."""
  if _salu_direct(g, i): return True
  o, f, n = i.op, i.f, i.op.name
  saved = g.save()
  if i.fmt == "SOP2" and n in X.SALU: srcs, call = [(f["ssrc0"], o.srcs[0]), (f["ssrc1"], o.srcs[1])], f"X.SALU[{n!r}]"
  elif i.fmt == "SOP1" and n in X.SALU and n not in X.SAVEEXEC and not n.startswith(SOP1_OWN):
    srcs, call = [(f["ssrc0"], o.srcs[0])], f"X.SALU[{n!r}]"
  elif i.fmt == "SOPC": srcs, call = [(f["ssrc0"], o.srcs[0]), (f["ssrc1"], o.srcs[1])], None
  elif i.fmt == "SOPK" and (n in E.SOPK_READS or n.startswith("s_cmpk_")): srcs, call = [(f["sdst"], "b32")], None
  else: return False
  args = [g.ssrc(c, t, i.literal) for c, t in srcs]
  if None in args:
    g.restore(saved)
    return False
  if i.fmt == "SOPC":
    g.lines.append(f"scc[:] = E.sopc_scc({n!r}, {args[0]}, {args[1]})")
    return True
  if i.fmt == "SOPK": g.lines.append(f"r, sc = E.sopk_op({n!r}, {args[0]}, {f['simm16']})")
  else: g.lines.append(f"r, sc = {call}({', '.join(args)}, {'scc.astype(U64)' if n in X.SALU_SCC else 'None'})")   # SCC converted only where read
  d, w = f["sdst"], WIDTH.get(o.dst, 1)
  if n.startswith("s_cmpk_"): w = 0
  elif d != 124 and (d >= 128 or d + w > 128):
    g.restore(saved)
    return False
  if w and d != 124:
    g.lines.append(f"swrite(s, {d}, {w}, r)")
    g.swrite(range(d, d + w))
    for c in range(d, d + w):
      g.masks.pop(c, None)
      g.dirty.discard(c)
  g.lines.append("if sc is not None: scc[:] = sc")
  return True


_U64, _S32 = np.dtype(np.uint64), np.uint64(32)


def _swrite(s: np.ndarray, d: int, w: int, r: Any) -> None:
  """SGPRs d.. = r (uint64 per wave) as Machine.swrite writes them. A uint64 array is stored by assignment: numpy's cast
  to uint32 keeps the low 32 bits, the `& 0xFFFFFFFF` of the general path (one call per dword instead of four)."""
  if r is None: return
  if type(r) is np.ndarray and r.dtype == _U64:
    s[:, d] = r
    if w == 2: s[:, d + 1] = r >> _S32
    if w <= 2: return
  val = np.asarray(r, np.uint64)
  for k in range(w): s[:, d + k] = ((val >> np.uint64(32 * k)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _bind_lines(binds: dict[str, str], pc: int) -> list[str]:
  """The entry bindings (register views, per-wave constants): made once per dispatch (Machine.bound) and unpacked."""
  if not binds: return []
  names, exprs = ", ".join(binds) + ",", ", ".join(binds.values()) + ","
  return [f"  bv = m.bound.get({pc})",
          f"  if bv is None: bv = m.bound[{pc}] = ({exprs})",
          f"  {names} = bv"]


def build(m: Any, pc: int, accs: frozenset[int] = frozenset(), bad: set[int] | None = None, skip: frozenset[int] = frozenset(),
          stop: int | None = None, inner: bool = False) -> Block | None:
  """The block from pc (None: the interpreter steps the instruction at pc). accs: loop mode (loops.py), the accumulator
  VGPRs whose v_add_f32 chain is recorded; None where another instruction reads or writes one of them (added to bad).
  skip: PCs left out as if they were s_nop (a loop's part: loops.py `Split`); stop: the PC it ends before. inner: a
  run between two runs of the same block (a split loop's carried part, loops._carried): no checked-mode entry test and
  no lane masks or definedness written at its end (the run before tested the same reads, the run after writes them);
  EXEC's lanes as the run before found them, float errors ignored by the caller."""
  g = _Gen(m)
  g.accs = accs
  insts: list[Inst] = []
  body: list[str] = []
  at = pc
  end: str | None = None
  visited: set[int] = set()   # the PCs walked (no-ops included): where a branch back may land
  while len(insts) < MAX_INSTS and at != stop:
    visited.add(at)
    try: i = m.inst(at)
    except M.WaveFault: break   # undecodable: the interpreter faults when a wave gets there
    if (i.fmt == "SOPP" and i.op.name in E.NOPS) or at in skip:
      at += i.size
      continue
    k = len(insts)
    if i.fmt == "SOPP":
      if i.op.name not in TERMINATORS: break
      # a branch back into this block (a loop whose head is not the block's entry: the code before the loop ran into
      # it): the block ends at the loop's head instead, so the loop is a block of its own (a one-block loop for
      # loops.py, its first iteration included)
      if stop is None and i.op.name in E.BRANCH_COND and pc < (t := branch_target(i)) <= i.pc and t in visited:
        return build(m, pc, accs, bad, skip, stop=t, inner=inner)
      insts.append(i)
      g.flush()
      g.sync()
      g.lines += [f"k = {k}   # {i.text}", f"m.pc[:] = {i.pc}", f"sopp(m, {g.const(i, 'I')}, idx)"]   # the branch's own PC: a not-taken one goes on from there
      end = "terminated"
      break
    if i.fmt not in HANDLED: break
    insts.append(i)
    g.lines.append(f"k = {k}   # {i.text}")
    inline = _salu_inline if i.fmt in ("SOP1", "SOP2", "SOPC", "SOPK") else _flat_inline if i.fmt == "FLAT" else _valu_inline
    if not inline(g, i):
      rw = _handler_rw(i)
      if rw is None:
        insts.pop()
        g.lines.pop()
        break
      g.read(rw[0])
      srw = _handler_sgprs(i)
      if srw is None: g.opaque = True
      else: g.sread(srw[0])
      if i.fmt != "SMEM": g.lanewise = False
      g.flush()
      g.sync()
      g.lines.append(f"{g.const(E.HANDLERS[i.fmt], 'H')}(m, {g.const(i, 'I')}, idx)")
      if i.fmt == "FLAT" and i.op.name.split("_", 1)[1] in E.FLAT_LOAD and i.f["vdst"] < g.nv:
        g.lines.append(_undef_stop(g, i.f["vdst"], 1))   # a sub-dword load (whole dwords load inline)
      if i.fmt == "DS" and rw[1] and max(rw[1]) < g.nv:   # an LDS load of bytes stored from undefined lanes
        g.lines.append(_undef_stop(g, rw[1][0], len(rw[1])) if rw[1] == list(range(rw[1][0], rw[1][0] + len(rw[1]))) else
                       "if vinit is not None: return m.stop_block(INSTS, k)")
      if i.fmt == "SMEM": g.lines.append("if m.sdirty and not m.clean(): return m.stop_block(INSTS, k)")   # undefined SGPRs loaded
      g.masks.clear()   # it may write any SGPR
      g.pairs.clear()   # and VGPRs beyond those _handler_rw names
      g.write(rw[1], False)
      if srw is not None: g.swrite(srw[1])
    at = i.pc + i.size
    if _exec_writer(i): break
  if g.bad and bad is not None: bad |= g.bad
  if not insts or g.bad: return None
  if not inner:
    g.flush()
    g.sync()
  if end is None: body.append(f"m.pc[:] = {at}")
  tested = sorted(r for r in g.reads if r < g.nv)   # a VGPR beyond the allocation: its handler names it when run
  reads = tuple(runs(tested))
  src = ["def block(m, idx):",
         "  s, v, vinit, scc = m.s, m.v, m.vinit, m.scc",
         # an inner run: EXEC as the run before it left it (no instruction between them writes EXEC: loops._carried)
         "  L = m._lanes if m._lanes is not None else m.exec_mask(idx)" if inner else "  L = m.exec_mask(idx)",
         "  full = m.all_on(L) or m.unmasked   # unmasked: a loop batch computing the disabled lanes too (loops.py)",
         *([] if inner else [f"  if vinit is not None and (not defined(m, vinit, {reads!r}, L) or not m.clean()): return False"]),
         "  L3 = L[:, None, :]",
         "  W = True if full else L   # where= of the masked writes",
         *_bind_lines(g.binds, pc),
         "  k = 0",
         "  try:",
         # (an inner run's caller has float errors ignored already)
         "    if True:" if inner else "    with np.errstate(all='ignore'):",
         *[f"      {ln}" for ln in g.lines + body],
         "  except BaseException:",
         "    m._fault_inst = INSTS[k]",
         "    raise",
         "  return True"]
  text = "\n".join(src)
  ns = dict(RUNTIME, **g.consts, INSTS=insts, sopp=E.sopp, finish=E._finish_float)
  exec(compile(text, f"<rdna3 block at 0x{pc:x}>", "exec"), ns)
  return Block(ns["block"], insts, text, frozenset(g.reads), frozenset(g.written), frozenset(g.sreads), frozenset(g.swritten), g.opaque, g.lanewise,
               frozenset(g.lreads), frozenset(g.sall), frozenset(g.maskw), frozenset(g.maskever), tuple(sorted(g.nrec.items())))


RUNTIME = {"np": np, "U64": np.uint64, "UINT32": np.uint32, "INT32": np.int32, "SMAX32": np.uint32(0x7FFFFFFF), "SHIFT5": np.uint32(31), "divscale": _div_scale, "store": _store, "store64": _store64, "pair": _pair, "intres": _intres, "mark": _mark, "defined": _defined, "select": _select, "X": X, "E": E, "A": A, "swrite": _swrite, "tomask": M.lanes_to_mask,
           "tolanes": M.mask_to_lanes, "WaveFault": M.WaveFault}
