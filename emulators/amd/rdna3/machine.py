"""The RDNA3 wave machine: every wave of a dispatch at once, as numpy arrays (SGPRs [waves, 128], VGPRs [waves, n, 32
lanes] register-major in memory, SCC, PC, EXEC = s126). Waves run in lockstep by PC: each step executes the instruction at the lowest PC among
the waves that can run, for all waves at that PC together. s_barrier holds a wave until every live wave of its workgroup
arrives; LDS is one byte array per workgroup; global memory goes through the mock VM (unmapped = MMU fault).

Initial state (AMDGPUUsage "Initial Kernel Execution State", docs/hw/amd_code_object.md): s0.. = USER_DATA_0..
(RSRC2.USER_SGPR of them), then the workgroup ids X, Y, Z for each RSRC2.TGID_*_EN, then workgroup info for TG_SIZE_EN;
v0 = work-item ids packed x | y << 10 | z << 20; EXEC = the lanes that exist.

Checked mode reports out-of-bounds LDS, reads of LDS never written, divergent barriers (a workgroup where some
waves wait at s_barrier while others ended), each naming the kernel, PC, instruction and lane. Memory follows the PYTHON
device's memcheck model (refgrad/runtime/simt.py): a load of global or scratch bytes nothing wrote gives VGPR lanes
marked undefined (`vinit`, per dword; a scalar load: undefined SGPR bits, `sundef`), VALU ops carry that along, v_cmp
and the carries keep undefined lanes as undefined bits of their lane masks (v_cndmask then follows its condition, as a
WHERE does), SALU ops carry undefined bits (SCC: `sccundef`), and a store of undefined lanes makes the bytes it writes
undefined (global memory, scratch, LDS; the host reading global bytes back is reported by copyout, naming the first
load: `undef_origin`). An undefined value is reported where it decides something: an address (a VGPR or SGPR), a
branch (SCC, VCC), EXEC (the lanes that run on), or where v_readlane/v_readfirstlane move it to an SGPR (a VGPR never
written counts as undefined: LLVM moves `undef` values around)."""
from __future__ import annotations

from typing import Any

import numpy as np

from emulators.amd.rdna3 import blocks, loops
from emulators.amd.rdna3.decode import T16, WIDTH, DecodeError, Inst, decode_one
from emulators.amd.rdna3.execute import HANDLERS, NOPS
from emulators.amd.rdna3.lanes import LANE_BITS, LANES, U32, U64, WaveFault

MAX_STEPS = 4_000_000   # instruction steps (each for every wave at that PC) per dispatch before it is reported as a hang
DECODED: dict[bytes, dict[int, Inst]] = {}   # code bytes -> PC -> instruction (the most recent 256 programs)
BLOCKS: dict[tuple[bytes, int], dict[int, blocks.Block | None]] = {}   # (code bytes, VGPR count) -> entry PC -> block
# (RSRC2, grid, block) -> a dispatch's initial state that depends only on them (`_launch`): read-only, copied per dispatch
LAUNCH: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]] = {}


def float_consts(t: str) -> dict[int, int]:
  """Inline float constants 240..248 as the bits of type t (1/(2*pi) per ISA guide's table of inline constants)."""
  npt = {"f16": np.float16, "f64": np.float64}.get(t, np.float32)
  raw = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}[npt]
  vals = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
  out = {k: int(np.array(v, npt).view(raw)) for k, v in vals.items()}
  out[248] = {np.float16: 0x3118, np.float32: 0x3E22F983, np.float64: 0x3FC45F306DC9C882}[npt]
  return out


FCONST = {w: float_consts(w) for w in ("f16", "f32", "f64")}


class Machine:
  use_blocks = True   # run basic blocks (blocks.py) where they apply; False: the interpreter alone (tests compare the two)
  use_loops = True    # run one-block loops as batches of iterations (loops.py); False: block by block
  unmasked = False    # blocks write every lane (a loop batch's copy, a split loop's carried part: loops.py)

  def __init__(self, vm: Any, pgm: int, name: str, rsrc1: int, rsrc2: int, user: list[int], grid: tuple[int, int, int],
               block: tuple[int, int, int], lds_bytes: int, checked: bool, private_bytes: int = 0):
    self.vm, self.pgm, self.name, self.checked = vm, pgm, name, checked
    self.grid, self.block = grid, block
    r = vm.find(pgm)
    if r is None: raise WaveFault(f"the program at 0x{pgm:x} is not mapped", "mmu", pgm)
    self.code = r.mem.data[pgm - r.va:].tobytes()
    # decoded instructions by PC, shared by every dispatch of the same code bytes (decoding is pure)
    if (insts := DECODED.get(self.code)) is None:
      if len(DECODED) >= 256: DECODED.pop(next(iter(DECODED)))
      insts = DECODED[self.code] = {}
    self.insts: dict[int, Inst] = insts
    G = grid[0] * grid[1] * grid[2]
    key = (rsrc2, tuple(grid), tuple(block))
    if (launch := LAUNCH.get(key)) is None:
      if len(LAUNCH) >= 256: LAUNCH.pop(next(iter(LAUNCH)))
      launch = LAUNCH[key] = _launch(rsrc2, *key[1:])
    wg, s0, v0, exists, nuser = launch
    W = self.W = len(wg)
    self.wg = wg.copy()
    nv = ((rsrc1 & 0x3F) + 1) * 8            # RSRC1.VGPRS: granules of 8 VGPRs in wave32 (gfx11)
    self.nv = nv
    if (blks := BLOCKS.get((self.code, nv))) is None:
      if len(BLOCKS) >= 256: BLOCKS.pop(next(iter(BLOCKS)))
      blks = BLOCKS[(self.code, nv)] = {}
    self.blocks: dict[int, blocks.Block | None] = blks
    self._fault_inst: Inst | None = None   # the instruction a block was running when it raised
    self.bound: dict[int, tuple] = {}      # block entry PC -> its register views and constants for this dispatch
    self._stepped: set[int] = set()        # PCs inside a block whose entry test failed: stepped, no block built from them
    self._noloop: set[int] = set()         # loop entry PCs whose batch was refused in this dispatch (loops.py)
    self.undef_origin: str | None = None   # checked mode: where this dispatch first loaded undefined global bytes
    self.s = s0.copy()
    # register-major in memory ([VGPR, wave, lane], seen as [wave, VGPR, lane]): one register of every wave, what an
    # instruction reads and writes, is one contiguous array (an op over 512 waves ~5x faster than with a 128-byte row per wave)
    self.v = np.zeros((nv, W, LANES), U32).transpose(1, 0, 2)
    self.vinit = np.zeros((nv, W, LANES), np.bool_).transpose(1, 0, 2) if checked else None
    self.scc = np.zeros(W, np.bool_)
    # checked mode: the undefined bits of each SGPR (a lane mask from a compare of undefined lanes, a scalar load of
    # undefined bytes) and whether SCC is undefined; `sdirty`: some may be set (blocks run only while none is)
    self.sundef = np.zeros((W, 128), U32) if checked else None
    self.sccundef = np.zeros(W, np.bool_) if checked else None
    self.sdirty = False
    self.pc = np.zeros(W, np.int64)
    self.done = np.zeros(W, np.bool_)
    self.bar = np.zeros(W, np.bool_)
    self.lds = np.zeros((G, max(lds_bytes, 0)), np.uint8)
    self.ldsinit = np.zeros((G, max(lds_bytes, 0)), np.bool_) if checked else None
    self.ldsundef = np.zeros((G, max(lds_bytes, 0)), np.bool_) if checked else None   # bytes stored from undefined lanes
    # scratch: each lane's private bytes (SCRATCH_* addresses are per lane), never shared, so no base address is modelled
    self.priv = np.zeros((W, LANES, private_bytes), np.uint8)
    self.privinit = np.zeros((W, LANES, private_bytes), np.bool_) if checked else None
    # the initial state: the workgroup ids, EXEC and v0 of the launch shape, then the user SGPRs
    self.s[:, :nuser] = np.array(user[:nuser], U32)
    self.v[:, 0, :] = v0
    if checked: self.vinit[:, 0, :] = exists
    self.steps = 0
    self.batches = 0   # loop batches run (loops.py)
    self._map: tuple[np.ndarray, np.ndarray] | None = None
    self._amemo: tuple | None = None   # load_dwords: the last base address array's facts (see there)
    self.track: list[list[np.ndarray]] | None = None   # while a VALU op reads: the definedness of its VGPR sources
    # the step's waves: `idx` as the handlers get it, and how the register files are indexed for it (a slice, so a view
    # and no gather, when every wave is at that PC: the common case in straight-line code)
    self._idx: np.ndarray | None = None
    self._ix: Any = None
    self._lanes: np.ndarray | None = None   # the step's EXEC lanes (exec_mask's last answer) and whether all are on
    self._lanes_all = False
    # global memory this dispatch touched, for the hazard checker: mapping VA -> [lowest read, end of reads, lowest
    # write, end of writes] (the kernarg segment's mapping left out, as the serialized-image path leaves it out)
    self.touched: dict[int, list[int]] = {}
    ka = vm.find(user[0] | user[1] << 32) if nuser >= 2 else None
    self._kernarg_va = ka.va if ka is not None else None

  # ---- the scheduler ----
  def run(self) -> None:
    every = np.arange(self.W)   # the step's waves when all are at one PC (the same object each time: see `ix`)
    far = np.iinfo(np.int64).max
    while True:
      can = ~(self.done | self.bar)
      if not can.any():
        if self.done.all(): return
        self._release()
        continue
      pcs = np.where(can, self.pc, far)
      pc0 = int(pcs.min())
      at = pcs == pc0
      idx = every if at.all() else np.flatnonzero(at)
      self._idx, self._ix, self._lanes = idx, slice(None) if idx is every else idx, None
      self.steps += 1
      if self.steps > MAX_STEPS: raise WaveFault(f"kernel {self.name}: more than {MAX_STEPS} instruction steps (a hang?) at PC 0x{pc0:x}")
      i = self.inst(pc0)
      self._fault_inst = None
      try:
        # every wave at one PC: the block from there, when it has one (blocks.py); else this one instruction
        if idx is every and self.use_blocks and pc0 not in self._stepped and (b := self.block_at(pc0)) is not None:
          lp = loops.loop_at(self, pc0, b) if self.use_loops and pc0 not in self._noloop else None
          # a loop over waves with few enabled lanes: its first iteration and the batch on the lanes packed (loops.py)
          if lp is not None and (got := loops.first_packed(self, lp, b)):
            if got == 2: self._noloop.add(pc0)
            continue
          # or the whole loop as one batch from its first iteration, where its scalar work predicts it
          if lp is not None and not lp.failed and loops.from_start(self, lp, pc0, b): continue
          if lp is not None and lp.failed and (got := loops.split_from_start(self, lp, pc0, b)):
            if got == 1: continue
            self._noloop.add(pc0)   # undone: block by block from here (as after a refused batch)
            lp = None
          prev = loops.before(self, lp) if lp is not None else None
          if b.fn(self, idx):
            self.steps += len(b.insts) - 1
            # a one-block loop: the iterations after this one as one batch (loops.py); a refused batch is not retried
            if lp is not None and (self.pc == pc0).all() and not loops.run(self, lp, prev): self._noloop.add(pc0)
          else:   # checked mode: an undefined VGPR read: the interpreter steps this block's instructions (no block from inside it)
            self._stepped.update(j.pc for j in b.insts[1:])
            self.execute(i, idx)
        else: self.execute(i, idx)
      except WaveFault as f:
        i = self._fault_inst or i
        f.what = f"kernel {self.name}: PC 0x{i.pc:x} ({i.text}): {f.what}"
        raise
      except (ValueError, FloatingPointError) as e:
        i = self._fault_inst or i
        raise WaveFault(f"kernel {self.name}: PC 0x{i.pc:x} ({i.text}): {e}") from None
      except (IndexError, KeyError, TypeError, OverflowError) as e:   # an encoding the handlers do not model (e.g. a register out of range)
        i = self._fault_inst or i
        raise WaveFault(f"kernel {self.name}: PC 0x{i.pc:x} ({i.text}): the emulator cannot execute this instruction "
                        f"({type(e).__name__}: {e})") from None

  def _release(self) -> None:
    """Every runnable wave waits at a barrier: release each workgroup whose live waves all arrived."""
    waiting = self.bar & ~self.done
    for g in np.unique(self.wg[waiting]):
      m = self.wg == g
      if self.checked and (self.done[m]).any() and not self.done[m].all():
        w = int(np.flatnonzero(m & self.done)[0])
        raise WaveFault(f"kernel {self.name}: divergent barrier: in workgroup {g}, wave {w} ended while others wait at s_barrier "
                        f"(PC 0x{int(self.pc[np.flatnonzero(m & self.bar)[0]]) - 4:x})")
      self.bar[m] = False

  def block_at(self, pc: int) -> blocks.Block | None:
    if pc not in self.blocks: self.blocks[pc] = blocks.build(self, pc)
    return self.blocks[pc]

  def stop_block(self, insts: list[Inst], k: int) -> bool:
    """Checked mode: a global load, instruction k of a block, gave undefined lanes; the block ends there (the load's
    handler set the PC past it) and its remaining instructions are stepped in this dispatch, tracking definedness."""
    self._stepped.update(j.pc for j in insts[k + 1:])
    return True

  def inst(self, pc: int) -> Inst:
    if (i := self.insts.get(pc)) is None:
      try: i = self.insts[pc] = decode_one(self.code, pc, f"kernel {self.name}: ")
      except DecodeError as e: raise WaveFault(e.what) from None
    return i

  # ---- operands ----
  def ix(self, idx: np.ndarray) -> Any:
    """How to index the per-wave arrays for waves idx: a slice when idx is the step's waves and they are all waves."""
    return self._ix if idx is self._idx else idx

  def exec_mask(self, idx: np.ndarray) -> np.ndarray:
    """[n, 32] bool: the lanes EXEC enables (remembered for the step while EXEC is unchanged: `all_on`)."""
    ix = self.ix(idx)
    ex = self.s[ix, 126]
    if self._lanes is not None and idx is self._idx and np.array_equal(ex, self._exec): return self._lanes
    lanes = (ex[:, None] & LANE_BITS) != 0
    if idx is self._idx: self._lanes, self._exec, self._lanes_all = lanes, ex.copy(), bool(lanes.all())
    return lanes

  def all_on(self, lanes: np.ndarray) -> bool: return lanes is self._lanes and self._lanes_all

  def sreg(self, idx: np.ndarray, code: int, t: str, lit: int | None) -> np.ndarray:
    """A scalar operand as uint64 per wave [n] (64-bit types read a register pair)."""
    w = WIDTH.get(t, 1)
    n = len(idx)
    if code < 128:
      if code == 124: return np.zeros(n, U64)
      ix = self.ix(idx)
      lo = self.s[ix, code].astype(U64)
      if w == 2: lo |= self.s[ix, code + 1].astype(U64) << U64(32)
      return lo
    return np.full(n, self.const(code, t, lit, idx), U64) if code not in (251, 252, 253) else self._cond(code, idx)

  def _cond(self, code: int, idx: np.ndarray) -> np.ndarray:
    if code == 253: return self.scc[idx].astype(U64)
    if code == 251: return (self.s[idx, 106] == 0).astype(U64)
    return (self.s[idx, 126] == 0).astype(U64)

  def strack(self) -> bool:
    """Whether SGPR/SCC definedness is tracked (checked mode; not on a loop batch's copy, which keeps none: loops.py)."""
    return self.vinit is not None and self.sundef is not None

  def sund(self, idx: np.ndarray, code: int, t: str) -> np.ndarray | None:
    """The undefined bits of a scalar operand as uint64 per wave [n] (None: all defined, or not tracked)."""
    if not self.sdirty or not self.strack(): return None
    w = WIDTH.get(t, 1)
    ix = self.ix(idx)
    if code < 128 and code != 124:
      u = self.sundef[ix, code].astype(U64)
      if w == 2 and code + 1 < 128: u |= self.sundef[ix, code + 1].astype(U64) << U64(32)
    elif code == 253: u = np.where(self.sccundef[ix], U64(0xFFFFFFFFFFFFFFFF if w == 2 else 0xFFFFFFFF), U64(0))
    elif code == 251: u = np.where(self.sundef[ix, 106] != 0, U64(1), U64(0))   # VCCZ
    else: return None
    return u if u.any() else None

  def sset(self, idx: np.ndarray, code: int, w: int, undef: np.ndarray | None) -> None:
    """SGPRs code.. (w dwords) were written: their undefined bits become `undef` (uint64 per wave; None: none)."""
    if not self.strack() or code >= 128: return
    ix = self.ix(idx)
    if undef is None or not np.any(undef):
      if self.sdirty: self.sundef[ix, code:code + w] = 0
      return
    undef = np.broadcast_to(np.asarray(undef).astype(U64), (len(idx),))
    if code == 126: self.sreport(idx, "EXEC (the lanes that run on: control flow)", undef, True)
    for k in range(w): self.sundef[ix, code + k] = ((undef >> U64(32 * k)) & U64(0xFFFFFFFF)).astype(U32)
    self.sdirty = True

  def scc_set(self, idx: np.ndarray, undef: np.ndarray | None) -> None:
    """SCC was written: whether it is undefined (bool per wave; None: defined)."""
    if not self.strack(): return
    if undef is None or not np.any(undef):
      if self.sdirty: self.sccundef[self.ix(idx)] = False
      return
    self.sccundef[self.ix(idx)] = undef
    self.sdirty = True

  def sreport(self, idx: np.ndarray, what: str, undef: np.ndarray | None, mask: bool = False) -> None:
    """Report an undefined scalar value (bits per wave) that decides `what` (an address, a branch); mask: the value is a
    lane mask (the first undefined lane is named)."""
    if undef is None or not np.any(undef): return
    undef = np.broadcast_to(undef, (len(idx),))
    w = int(np.flatnonzero(undef)[0])
    u = int(undef[w])
    who = f"lane {(u & -u).bit_length() - 1} of wave {int(idx[w])}" if mask else f"wave {int(idx[w])}"
    raise WaveFault(f"{who}: an undefined value (loaded from memory nothing wrote, or computed from one) decides {what}")

  def clean(self) -> bool:
    """No SGPR bit and no SCC is undefined (resets `sdirty` when that is found so); blocks run only then."""
    if not self.sdirty: return True
    if self.sundef.any() or self.sccundef.any(): return False
    self.sdirty = False
    return True

  def const(self, code: int, t: str, lit: int | None, idx: np.ndarray) -> int:
    w = WIDTH.get(t, 1)
    bits = 64 if w == 2 else 16 if t in T16 else 32
    mask = (1 << bits) - 1
    if 128 <= code <= 192: return code - 128
    if 193 <= code <= 208: return (192 - code) & mask
    if 240 <= code <= 248:
      ft = "f64" if bits == 64 else "f16" if bits == 16 else "f32"
      return FCONST[ft][code]
    if code == 255:
      assert lit is not None
      if bits == 64: return (lit << 32) if t == "f64" else (lit | (0xFFFFFFFF00000000 if t == "i64" and lit >> 31 else 0))
      return lit & mask
    raise WaveFault(f"source operand {code} ({'an unsupported special register'}) is not emulated")

  def vsrc(self, idx: np.ndarray, code: int, t: str, lit: int | None, hi: int | None = None, lanes: np.ndarray | None = None) -> np.ndarray:
    """A vector-instruction source as raw bits: uint64 (64-bit), uint32 or uint16, shape [n, 32] or [n, 1]."""
    w = WIDTH.get(t, 1)
    if code >= 256:
      r = code - 256
      if t in T16:
        if hi is None: r, hi = r & 0x7F, r >> 7
      self._vcheck(idx, r, w, lanes)
      ix = self.ix(idx)
      v = self.v[ix, r, :]
      if w == 2: return v.astype(U64) | (self.v[ix, r + 1, :].astype(U64) << U64(32))
      if t in T16: return ((v >> U32(16 * hi)) & U32(0xFFFF)).astype(np.uint16)
      return v
    s = self.sreg(idx, code, t, lit)[:, None]
    if self.track is not None and (u := self.sund(idx, code, t)) is not None:
      self.track.append([np.broadcast_to((u == 0)[:, None], (len(idx), LANES))] * w)
    if t in T16:
      sh = 16 if (hi and code < 128) else 0
      return ((s >> U64(sh)) & U64(0xFFFF)).astype(np.uint16)
    return s if w == 2 else (s & U64(0xFFFFFFFF)).astype(U32)

  def _vcheck(self, idx: np.ndarray, r: int, w: int, lanes: np.ndarray | None) -> None:
    if r + w > self.nv: raise WaveFault(f"reads v{r + w - 1}, beyond the {self.nv} VGPRs RSRC1.VGPRS allocates")
    if self.vinit is None: return
    ix = self.ix(idx)
    if self.track is not None:   # a VALU op: definedness flows to its result instead (see execute.valu)
      self.track.append([self.vinit[ix, r + k, :].copy() for k in range(w)])
      return
    act = self.exec_mask(idx) if lanes is None else lanes
    for k in range(w):
      d = self.vinit[ix, r + k, :]
      if self.all_on(act) and d.all(): continue
      bad = act & ~d
      if bad.any():
        wi, lane = map(int, np.argwhere(bad)[0])
        raise WaveFault(f"lane {lane} of wave {int(idx[wi])} reads v{r + k}, which holds no defined value (never written, or computed from such a value: uninitialized VGPR)")

  def vwrite(self, idx: np.ndarray, r: int, t: str, val: np.ndarray, lanes: np.ndarray, hi: int | None = None,
             defined: list[np.ndarray] | None = None) -> None:
    """Write raw bits to VGPR r (and r+1 for 64-bit types) in the enabled lanes; `defined`: per dword, which lanes'
    values are defined (checked mode; default all)."""
    w = WIDTH.get(t, 1)
    if t in T16 and hi is None: r, hi = r & 0x7F, r >> 7
    if r + w > self.nv: raise WaveFault(f"writes v{r + w - 1}, beyond the {self.nv} VGPRs RSRC1.VGPRS allocates")
    if np.shape(val) != (len(idx), LANES): val = np.broadcast_to(val, (len(idx), LANES))
    ix, full = self.ix(idx), self.all_on(lanes)
    if t in T16:
      old = self.v[ix, r, :]
      sh = U32(16 * hi)
      new = (old & ~(U32(0xFFFF) << sh)) | ((val.astype(U32) & U32(0xFFFF)) << sh)
      self.v[ix, r, :] = new if full else np.where(lanes, new, old)
      if self.vinit is not None: self._mark(ix, r, lanes, full, None if defined is None else defined[0])
      return
    for k in range(w):
      part = (val.astype(U64) >> U64(32 * k)).astype(U32) if w > 1 else val.astype(U32)
      self.v[ix, r + k, :] = part if full else np.where(lanes, part, self.v[ix, r + k, :])
      if self.vinit is not None: self._mark(ix, r + k, lanes, full, None if defined is None else defined[min(k, len(defined) - 1)])

  def _mark(self, ix: Any, r: int, lanes: np.ndarray, full: bool, defined: np.ndarray | None) -> None:
    if defined is None: self.vinit[ix, r, :] = True if full else self.vinit[ix, r, :] | lanes
    else: self.vinit[ix, r, :] = defined if full else np.where(lanes, defined, self.vinit[ix, r, :])

  def swrite(self, idx: np.ndarray, code: int, t: str, val: np.ndarray, undef: np.ndarray | None = None) -> None:
    if code == 124: return
    w = WIDTH.get(t, 1)
    if code >= 128 or code + w > 128: raise WaveFault(f"writes scalar register {code}, which is not writable")
    val = np.asarray(val).astype(U64)
    ix = self.ix(idx)
    for k in range(w): self.s[ix, code + k] = ((val >> U64(32 * k)) & U64(0xFFFFFFFF)).astype(U32)
    self.sset(idx, code, w, undef)

  # ---- execution ----
  def execute(self, i: Inst, idx: np.ndarray) -> None:
    h = HANDLERS.get(i.fmt)
    if h is None: raise WaveFault(f"{i.fmt} instructions are not emulated")
    h(self, i, idx)

  def advance(self, i: Inst, idx: np.ndarray) -> None:
    """To the next instruction, past any that do nothing here (s_waitcnt, s_delay_alu, s_nop, ...: execute.NOPS), which
    would otherwise each cost a scheduler step."""
    if (nxt := i.extra.get("next")) is None:
      nxt = i.pc + i.size
      try:
        while (j := self.inst(nxt)).fmt == "SOPP" and j.op.name in NOPS: nxt += j.size
      except WaveFault: pass   # undecodable: the fault is raised when a wave gets there
      i.extra["next"] = nxt
    self.pc[self.ix(idx)] = nxt

  # ---- memory through the VM ----
  def mem_read(self, addr: int, nbytes: int, what: str, check: bool = True) -> np.ndarray:
    """Bytes at addr through the VM (an MMU fault outside a mapping); check: undefined bytes are a fault (checked mode)."""
    r = self.vm.find(addr)
    if r is None or addr + nbytes > r.end:
      why = "is not mapped" if r is None else f"runs past the end of the mapping 0x{r.va:x}..0x{r.end:x}"
      raise WaveFault(f"MMU fault: {what} of {nbytes} bytes at 0x{addr:x} {why}", "mmu", addr)
    off = addr - r.va
    self._touch(r.va, addr, addr + nbytes, False)
    if check and self.checked and r.mem.bits is not None and r.mem.undefined_bytes(off, off + nbytes).size:
      raise WaveFault(f"{what} of {nbytes} bytes at 0x{addr:x} reads memory that was never written", "compute", addr)
    return r.mem.data[off:off + nbytes].copy()

  def _regions(self, idx: np.ndarray, addr: np.ndarray, nbytes: int, lanes: np.ndarray, what: str) -> list[tuple[Any, np.ndarray]]:
    """Group the enabled lanes' accesses by mapping: [(region, boolean lane selection)]; an MMU fault for any lane outside."""
    if self._map is None:
      self._map = (np.array(self.vm.starts, U64), np.array([r.end for r in self.vm.regions] or [0], U64))
    starts, ends = self._map
    ri = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1
    ok = (ri >= 0) & (addr + U64(nbytes) <= ends[np.maximum(ri, 0)])
    bad = lanes & ~ok
    if bad.any():
      wi, lane = map(int, np.argwhere(bad)[0])
      a = int(addr[wi, lane])
      r = self.vm.find(a)
      why = "is not mapped" if r is None else f"runs past the end of the mapping 0x{r.va:x}..0x{r.end:x} ({r.size} bytes)"
      raise WaveFault(f"MMU fault: lane {lane} of wave {int(idx[wi])}: {what} of {nbytes} bytes at 0x{a:x} {why}", "mmu", a)
    used = ri[lanes]
    if not used.size: return []
    if (k := int(used.min())) == int(used.max()): return [(self.vm.regions[k], lanes)]   # one mapping (the common case)
    return [(self.vm.regions[int(k)], lanes & (ri == k)) for k in np.unique(used)]

  def _touch(self, va: int, lo: int, hi: int, write: bool) -> None:
    if va == self._kernarg_va: return
    t = self.touched.setdefault(va, [1 << 64, 0, 1 << 64, 0])
    k = 2 if write else 0
    t[k], t[k + 1] = min(t[k], lo), max(t[k + 1], hi)

  def accesses(self) -> list[tuple[int, list[tuple[int, int, bool]]]]:
    """What the dispatch read and wrote: (mapping VA, [(lo, hi, write)]) per mapping, for Hazards.access."""
    return [(va, [(lo, hi, w) for lo, hi, w in ((t[0], t[1], False), (t[2], t[3], True)) if hi > lo]) for va, t in self.touched.items()]

  def load_dwords(self, idx: np.ndarray, addr: np.ndarray | None, nd: int, lanes: np.ndarray, r0: int, base: np.ndarray | None = None,
                  boff: int = 0) -> bool:
    """VGPRs r0.. = the nd dwords at each enabled lane's address, in one gather written straight into the register
    file (defined there), when the enabled lanes' addresses are dword aligned in one mapping, the VGPRs are allocated
    and the waves are all of the step's (a slice), and (checked mode) the bytes are defined. False: nothing done (the
    byte path, `gather`, names any fault and gives undefined bytes their definedness). addr None: base + boff (mod
    2^64), where base is a VGPR pair array a block read once for loads at several offsets: the addresses' facts (range,
    alignment, offsets in the mapping) are kept for the next load from the same base and lanes (`_amemo`), whose
    addresses are the kept ones + a multiple of 16, above or below, that keeps every lane in the kept mapping (the same
    alignment and units; no lane wraps past 2^64 or below 0)."""
    ix = self.ix(idx)
    if r0 + nd > self.nv or not isinstance(ix, slice): return False
    full = self.all_on(lanes)
    mm, off, ui, ks = self._amemo, None, None, 0
    # the shift from the kept load's addresses, signed (offsets come modulo 2^64: a load below the kept one too)
    keep = base is not None and mm is not None and mm[0] is base and mm[1] is lanes and mm[2] == full
    sh = ((boff - mm[3] + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63) if keep else 1
    if keep and sh % 16 == 0 and mm[4] + sh >= mm[7].va and mm[5] + sh + 4 * nd <= mm[7].end:   # the same mapping: no wrap
      n, lo, hi, align, r = mm[8].size, mm[4] + sh, mm[5] + sh + 4 * nd, mm[6], mm[7]
    else:
      if addr is None: addr = base + U64(boff)
      a = addr.reshape(-1) if full else addr[lanes]
      if not a.size: return False
      a = np.ascontiguousarray(a)
      align = int(np.bitwise_or.reduce(a.view(U64))) & 15   # the low bits any address has set (one OR of the uint64s: 5x faster than of their low bytes)
      if align & 3: return False
      lo, hi = int(a.min()), int(a.max()) + 4 * nd
      r = self.vm.find(lo)
      if r is None or hi > r.end or r.va % 4: return False
      off, n, sh = a.view(np.int64) - r.va, a.size, 0   # every address lies in the mapping (lo..hi), below 2^63: the same offsets
      self._amemo = None if base is None else (base, lanes, full, boff, lo, hi - 4 * nd, align, r, off, {})
    if self.checked and (bits := r.mem.bits) is not None:
      s0, s1 = lo - r.va, hi - r.va
      # the bitmap bytes of the whole span when that is no more than the lanes' dwords (a dense access), else per dword
      span = (s1 - s0) // 8 <= n * nd and s0 % 8 == 0 and (s1 % 8 == 0 or s1 == r.mem.nbytes)
      if not (span and int(bits[s0 >> 3:(s1 + 7) >> 3].min()) == 255):   # min: no temporary (4x faster than == 255 .all())
        q = ((mm[8] + sh if off is None else off) >> 2)[:, None] + np.arange(nd)   # each dword's 4 bits: one nibble of the bitmap (dword aligned)
        if not (((bits[q >> 1] >> ((q & 1) * 4).astype(np.uint8)) & np.uint8(15)) == 15).all(): return False
    # the widest unit (16, 8 or 4 bytes) every address is aligned to: one element of a unit view per lane and unit
    u = next(u for u in (16, 8, 4) if (4 * nd) % u == 0 and (u == 4 or (r.va % u == 0 and not align & (u - 1))))
    data = r.mem.data
    units = data[:len(data) - len(data) % u].view(np.dtype((np.void, u)))
    k = 4 * nd // u
    if off is None:   # the kept offsets' units, the view moved by the shift's units (sh: a multiple of 16, so of u)
      if (ui := mm[9].get(u)) is None: ui = mm[9][u] = mm[8] >> (u.bit_length() - 1)
      ks = sh // u
    else:
      ui = off >> (u.bit_length() - 1)
      if self._amemo is not None: self._amemo[9][u] = ui
    # np.take: several times faster than indexing with [] for a void dtype (numpy 2.4)
    # mode="wrap": every index lies in the mapping (checked above), and numpy's default bounds mode is slower
    if ks < 0: ui, ks = ui + ks, 0   # a load below the kept one: its units by index (every one in the mapping, checked above)
    got = np.take(units[ks:], ui if k == 1 else (ui[:, None] + np.arange(k)).reshape(-1), axis=0, mode="wrap").view(U32).reshape(n, nd)
    self._touch(r.va, lo, hi, False)
    if full:   # all the registers in one transposing copy (faster than one per register in either register file layout)
      self.v[ix, r0:r0 + nd, :] = got.reshape(n // LANES, LANES, nd).transpose(0, 2, 1)
    else:   # register by register: a masked write with the lanes' stride (one across dwords is many times slower)
      for k in range(nd): self.v[ix, r0 + k, :][lanes] = got[:, k]
    if self.vinit is not None:
      if full: self.vinit[ix, r0:r0 + nd, :] = True
      else: self.vinit[ix, r0:r0 + nd, :] |= lanes[:, None, :]
    return True

  def store_dwords(self, idx: np.ndarray, addr: np.ndarray, nd: int, lanes: np.ndarray, r0: int) -> bool:
    """The nd dwords of VGPRs r0.. to each enabled lane's address, in one assignment to a dword view of the mapping, when
    the enabled lanes' addresses are dword aligned in one mapping, the VGPRs are allocated, the waves are all of the
    step's (a slice) and (checked mode) the VGPRs hold defined values in the enabled lanes. The same bytes as `scatter`:
    lanes in order (a later lane's dword wins; aligned dwords overlap only whole), the written bytes marked defined.
    False: nothing done (the byte path names any fault and stores undefined bytes as such)."""
    ix = self.ix(idx)
    if r0 + nd > self.nv or not isinstance(ix, slice): return False
    full = self.all_on(lanes)
    if self.vinit is not None and not (self.vinit[ix, r0:r0 + nd, :] | ~lanes[:, None, :]).all(): return False
    a = addr.reshape(-1) if full else addr[lanes]
    if not a.size: return False
    a = np.ascontiguousarray(a)
    if int(np.bitwise_or.reduce(a.view(U64))) & 3: return False
    lo, hi = int(a.min()), int(a.max()) + 4 * nd
    r = self.vm.find(lo)
    if r is None or hi > r.end or r.va % 4: return False
    q = (a.view(np.int64) - r.va) >> 2   # dword indices in the mapping
    data = r.mem.data
    words = data[:len(data) - len(data) % 4].view(U32)
    src = self.v[ix, r0:r0 + nd, :]   # [n, nd, 32] -> lane-major [lanes, nd]
    vals = src.transpose(0, 2, 1).reshape(-1, nd) if full else src.transpose(0, 2, 1)[lanes]
    if nd == 1: words[q] = vals[:, 0]
    else: words[q[:, None] + np.arange(nd)] = vals
    self._touch(r.va, lo, hi, True)
    if r.mem.bits is not None:
      s0, s1 = lo - r.va, hi - r.va
      dense = (s1 - s0) == 4 * nd * len(q)   # as many dwords as the span: one range when each is stored
      if dense:
        seen = np.zeros((s1 - s0) // 4, np.bool_)
        seen[(q - (s0 >> 2))[:, None] + np.arange(nd) if nd > 1 else q - (s0 >> 2)] = True
        dense = bool(seen.all())
      if dense: r.mem.mark_range(s0, s1, True)
      else: r.mem.mark_elems((q[:, None] + np.arange(nd)).reshape(-1), 4, True)
      r.mem.settle()
    return True

  def gather(self, idx: np.ndarray, addr: np.ndarray, nbytes: int, lanes: np.ndarray, i: Inst) -> tuple[np.ndarray, np.ndarray | None]:
    """The nbytes at each enabled lane's address ([n, 32, nbytes]) and, in checked mode, which lanes' dwords hold bytes
    nothing wrote ([n, 32, dwords] bool, a load below 4 bytes one dword; None: all defined). A loop batch's copy of the
    machine keeps no definedness (vinit None): there undefined bytes are a fault, which discards the batch (loops.py)."""
    out = np.zeros(addr.shape + (nbytes,), np.uint8)
    nd = max(1, nbytes // 4)
    undef: np.ndarray | None = None
    for r, sel in self._regions(idx, addr, nbytes, lanes, "global load"):
      every = sel is lanes and self.all_on(lanes)   # every lane of every wave: no boolean selection needed
      off = (addr.reshape(-1) if every else addr[sel]) - U64(r.va)
      off = off.astype(np.int64)
      self._touch(r.va, r.va + int(off.min()), r.va + int(off.max()) + nbytes, False)
      if (fast := nbytes in (1, 2, 4, 8, 16) and r.va % nbytes == 0 and not (off & (nbytes - 1)).any()):
        # naturally aligned 1/2/4/8/16 bytes: one element of a word view each; their definedness bits within one byte
        # (up to 8) or whole bytes of the bit map
        data = r.mem.data
        got = data[:len(data) - len(data) % nbytes].view(np.dtype((np.void, nbytes)))[off // nbytes].view(np.uint8).reshape(-1, nbytes)
      else: got = r.mem.data[off[:, None] + np.arange(nbytes)]
      if every: out.reshape(-1, nbytes)[:] = got
      else: out[sel] = got
      if self.checked and r.mem.bits is not None:
        if fast and nbytes <= 8:
          full = (1 << nbytes) - 1
          ok = ((r.mem.bits[off >> 3].astype(np.int64) >> (off & 7)) & full) == full
        elif fast: ok = (r.mem.bits[(off >> 3)[:, None] + np.arange(nbytes // 8)] == 0xFF).all(axis=1)
        else: ok = None
        if ok is None or not ok.all():   # some lane's bytes are undefined: which dwords
          bx = off[:, None] + np.arange(nbytes)
          okb = ((r.mem.bits[bx >> 3] >> (bx & 7).astype(np.uint8)) & np.uint8(1)) != 0
          bad = ~(okb.reshape(len(off), nd, -1).all(axis=2) if nbytes >= 4 else okb.all(axis=1, keepdims=True))
          if bad.any():
            wi, lane = (int(x[bad.any(axis=1)][0]) for x in np.nonzero(np.broadcast_to(sel, addr.shape)))
            a = int(addr[wi, lane])
            if self.vinit is None:
              raise WaveFault(f"lane {lane} of wave {int(idx[wi])}: global load of {nbytes} bytes at 0x{a:x} reads memory that was never "
                              "written (uninitialized)", "compute", a)
            if self.undef_origin is None:
              self.undef_origin = r.mem.origin or (f"in kernel {self.name} at PC 0x{i.pc:x} ({i.text}) by lane {lane} of wave {int(idx[wi])} "
                                                   f"from 0x{a:x}, which nothing has written")
            if undef is None: undef = np.zeros(addr.shape + (nd,), np.bool_)
            if every: undef.reshape(-1, nd)[:] = bad
            else: undef[sel] = bad
    return out, undef

  def scatter(self, idx: np.ndarray, addr: np.ndarray, data: np.ndarray, lanes: np.ndarray, i: Inst, undef: np.ndarray | None = None) -> None:
    """Store each enabled lane's bytes ([n, 32, nbytes]); `undef` ([n, 32, nbytes] bool, checked mode): the bytes that
    come from undefined values, which become undefined in memory (their origin: the dispatch's first undefined load)."""
    nbytes = data.shape[2]
    for r, sel in self._regions(idx, addr, nbytes, lanes, "global store"):
      ix = (addr[sel] - U64(r.va)).astype(np.int64)[:, None] + np.arange(nbytes)
      self._touch(r.va, r.va + int(ix[:, 0].min()), r.va + int(ix[:, -1].max()) + 1, True)
      r.mem.data[ix] = data[sel]   # lanes in order: a later lane's store to the same byte wins, as one wave's store resolves
      if r.mem.bits is not None:
        flat = ix.reshape(-1)
        lo = int(flat.min())
        span = int(flat.max()) + 1 - lo
        dense = span == flat.size
        if dense:   # as many bytes as the span: one range when each is stored (a whole buffer written: the usual output)
          seen = np.zeros(span, np.bool_)
          seen[flat - lo] = True
          dense = bool(seen.all())
        if dense: r.mem.mark_range(lo, lo + span, True)
        else: r.mem.mark_elems(flat, 1, True)
      if undef is not None and (u := undef[sel]).any():
        r.mem.mark_elems(ix[u], 1, False)
        if r.mem.origin is None: r.mem.origin = self.undef_origin
      if r.mem.bits is not None: r.mem.settle()


def _launch(rsrc2: int, grid: tuple[int, int, int], block: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
  """What a dispatch's initial state takes from its RSRC2 and launch shape alone: each wave's workgroup, the SGPRs
  (user SGPRs left 0: Machine fills them), v0 (the work-item ids) and the lanes that exist (EXEC), and the user SGPR
  count."""
  G = grid[0] * grid[1] * grid[2]
  per = block[0] * block[1] * block[2]
  wpg = -(-per // LANES)
  W = G * wpg
  s = np.zeros((W, 128), U32)
  nuser = (rsrc2 >> 1) & 0x1F
  k = nuser
  gid = np.arange(G)
  ids = (gid % grid[0], (gid // grid[0]) % grid[1], gid // (grid[0] * grid[1]))
  for d in range(3):
    if (rsrc2 >> (7 + d)) & 1:
      s[:, k] = np.repeat(ids[d], wpg).astype(U32)
      k += 1
  if (rsrc2 >> 10) & 1: raise WaveFault("RSRC2.TG_SIZE_EN (workgroup info SGPR) is not emulated")
  if rsrc2 & 1: s[:, k] = 0   # SCRATCH_EN: the private segment wave byte offset SGPR, 0 (each wave's scratch starts at 0)
  t = (np.arange(wpg)[:, None] * LANES + np.arange(LANES)[None, :])   # [wave-in-group, lane] -> flat work-item
  exists = t < per
  tx, ty, tz = t % block[0], (t // block[0]) % block[1], t // (block[0] * block[1])
  v0 = np.tile(np.where(exists, tx | (ty << 10) | (tz << 20), 0).astype(U32), (G, 1))
  s[:, 126] = np.tile((exists.astype(np.uint64) << np.arange(LANES, dtype=np.uint64)).sum(axis=1), G).astype(U32)
  out = (np.repeat(np.arange(G), wpg), s, v0, np.tile(exists, (G, 1)), nuser)
  for x in out[:4]: x.flags.writeable = False
  return out
