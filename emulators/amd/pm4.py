"""The compute queue's PM4 type-3 packets (docs/hw/AMD.md §1-§4): one row per opcode (name, body-size rule, action).

A packet is a header (TYPE 31:30 = 3, COUNT 29:16 = body dwords - 1, IT_OPCODE 15:8, SHADER_TYPE 1, PREDICATE 0) and
COUNT + 1 body dwords; NOP with COUNT 0x3FFF is a one-dword filler. Actions get the whole packet (header first) and return
None (state only: go on), DONE (a trigger ran: the step ends) or BLOCKED (a wait is not satisfied: retry the packet later).

Registers are state: SET_SH_REG stores values in the SH window (unknown offsets fault), DISPATCH_DIRECT reads them and
checks what they promise against what the program needs (§4.2, §8.3): the kernel-argument pointer in USER_DATA_0/1 with
RSRC2.USER_SGPR = 2, LDS_SIZE covering the program's local memory, NUM_THREAD_* = the program's work-group size,
TGID/TIDIG enables for the dimensions in use, wave32 (CS_W32_EN: the target's WMMA lane layouts are wave32), work-groups
starting at 0. A program whose first bytes are no known image magic (emulators/executors.py) is RDNA3 machine code
(emulators/amd/rdna3/), run with the state the registers give. The mock's GPU clock counter (RELEASE_MEM DATA_SEL 3/4) ticks in nanoseconds.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from emulators import dispatch, executors
from emulators.amd import rdna3
from emulators.amd import regs as R
from emulators.fault import Fault
from refgrad.hw import amd as A
from refgrad.hw import bits as B
from refgrad.hw.amd import PM4
from refgrad.runtime.simt import checked_default
from refgrad.target import launch_sizes

DONE, BLOCKED = 1, 2
HDR, DW1, DW2, WAIT = A.PM4_HEADER, A.RELEASE_MEM_DW1, A.RELEASE_MEM_DW2, A.WAIT_REG_MEM_DW1
# the header fields as (shift, mask) for the per-packet decode
(_TYPE_SH, _TYPE_M), (_OP_SH, _OP_M), (_CNT_SH, _CNT_M) = (B.shift_mask(HDR[k]) for k in ("TYPE", "IT_OPCODE", "COUNT"))


class Packet(NamedTuple):
  name: str
  opcode: int
  counts: tuple[int, ...] | None       # the COUNT values the packet may have (None: any, the action checks)
  action: Callable[[Any, list[int]], int | None] | None = None


class ComputeEngine:
  """The registers and the packet table of one compute queue (MEC pipe)."""
  engine = "compute"

  def __init__(self, ch: Any):
    self.ch = ch
    self.regs: dict[int, int] = {}   # SET_SH_REG offset -> value
    self.table = TABLE

  def reg(self, name: str) -> int: return self.regs.get(R.BY_NAME[name], 0)

  def reset(self) -> None: pass


# ---- registers ----------------------------------------------------------------------------------------------------
def set_sh_reg(eng: ComputeEngine, w: list[int]) -> None:
  off, index = B.get(w[1], A.SET_SH_REG_DW1["OFFSET"]), B.get(w[1], A.SET_SH_REG_DW1["INDEX"])
  if index not in (0, 1): raise Fault(f"SET_SH_REG INDEX {index} is not emulated (0 or 1)", "compute")
  for i, v in enumerate(w[2:]):
    if off + i not in R.SH_REGS:
      raise Fault(f"SET_SH_REG writes offset 0x{off + i:x} (register dword address 0x{R.SH_START + off + i:x}), which is no compute "
                  "register the mock knows", "compute")
    eng.regs[off + i] = v


# ---- dispatch -----------------------------------------------------------------------------------------------------
def dispatch_direct(eng: ComputeEngine, w: list[int]) -> int:
  ch = eng.ch
  dev = ch.dev
  grid = (w[1], w[2], w[3])
  init = w[4]
  eng.regs[R.BY_NAME["COMPUTE_DISPATCH_INITIATOR"]] = init
  for d, n in zip("XYZ", grid): eng.regs[R.BY_NAME[f"COMPUTE_DIM_{d}"]] = n
  I = "COMPUTE_DISPATCH_INITIATOR"
  if not R.get(I, init, "COMPUTE_SHADER_EN"): raise Fault(f"DISPATCH_DIRECT initiator 0x{init:x} has COMPUTE_SHADER_EN 0", "compute")
  if R.get(I, init, "USE_THREAD_DIMENSIONS"): raise Fault(f"DISPATCH_DIRECT initiator 0x{init:x}: USE_THREAD_DIMENSIONS is not emulated", "compute")
  if not R.get(I, init, "CS_W32_EN"):
    raise Fault(f"DISPATCH_DIRECT initiator 0x{init:x} asks for wave64 (CS_W32_EN 0): the AMD target's programs are wave32", "compute")
  rsrc2 = eng.reg("COMPUTE_PGM_RSRC2")
  block = tuple(R.get("COMPUTE_NUM_THREAD", eng.reg(f"COMPUTE_NUM_THREAD_{d}"), "NUM_THREAD_FULL") for d in "XYZ")
  if min(grid) < 1 or min(block) < 1:
    raise Fault(f"inconsistent dispatch: {grid} work-groups of {block} work-items (DIM_* and NUM_THREAD_* must be >= 1)", "compute")
  for d in "XYZ":
    for r in (f"COMPUTE_START_{d}", f"COMPUTE_RESTART_{d}"):
      if eng.reg(r): raise Fault(f"inconsistent dispatch: {r} = {eng.reg(r)}; dispatches not starting at work-group 0 are not emulated", "compute")
  pgm = ((R.get("COMPUTE_PGM_HI", eng.reg("COMPUTE_PGM_HI"), "ADDRESS_HI") << 32) | eng.reg("COMPUTE_PGM_LO")) << A.PGM_ADDRESS_SHIFT
  if dev.vm.bytes(pgm, 4, "compute", "program (COMPUTE_PGM_LO/HI)").tobytes() not in executors.EXECUTORS:
    return dispatch_isa(eng, pgm, grid, block)
  k = dispatch.load_program(dev.vm, pgm, "compute", "COMPUTE_PGM_LO/HI")
  where = f"DISPATCH_DIRECT of kernel {k.name} (program at 0x{pgm:x})"
  def bad(msg: str, addr: int | None = None) -> Fault: return Fault(f"inconsistent dispatch: {where}: {msg}", "compute", addr, k.name)
  # what the registers promise against what the program needs, one check per row
  if (n := R.get("COMPUTE_PGM_RSRC2", rsrc2, "USER_SGPR")) != 2:
    raise bad(f"RSRC2.USER_SGPR is {n}, but the kernel takes exactly its kernel-argument pointer in s[0:1] (2 user SGPRs)")
  lds = R.get("COMPUTE_PGM_RSRC2", rsrc2, "LDS_SIZE") * R.LDS_GRANULE
  if lds < k.shared_bytes: raise bad(f"RSRC2.LDS_SIZE gives {lds} bytes of LDS but the kernel's DEFINE_LOCALs need {k.shared_bytes}")
  _, need = launch_sizes(k.program.specials)
  if need != block: raise bad(f"NUM_THREAD_X/Y/Z = {block} but the kernel's work-group is {need}")
  used = max((i for i in range(3) if block[i] > 1), default=0)
  if R.get("COMPUTE_PGM_RSRC2", rsrc2, "TIDIG_COMP_CNT") < used:
    raise bad(f"RSRC2.TIDIG_COMP_CNT is {R.get('COMPUTE_PGM_RSRC2', rsrc2, 'TIDIG_COMP_CNT')} but work-items vary along {'XYZ'[used]}")
  for i, d in enumerate("XYZ"):
    if grid[i] > 1 and not R.get("COMPUTE_PGM_RSRC2", rsrc2, f"TGID_{d}_EN"): raise bad(f"{grid[i]} work-groups along {d} but RSRC2.TGID_{d}_EN is 0")
  kernarg = eng.reg("COMPUTE_USER_DATA_0") | (eng.reg("COMPUTE_USER_DATA_1") << 32)
  if not dev.short(key := (k, grid, block)): return BLOCKED   # (polled inline, not known to be short: the worker thread's)
  dev.counters["dispatch"] += 1
  # in flight until an ordering command (ORDERING); the initiator's flags order nothing docs/hw/AMD.md states
  dispatch.run(dev, ch.pid, ch.where(), k, kernarg, "kernel arguments (USER_DATA_0/1)", "compute", grid, block, ch.flight, cost=key)
  return DONE


def dispatch_isa(eng: ComputeEngine, pgm: int, grid: tuple[int, int, int], block: tuple[int, int, int]) -> int:
  """A program that is no known image: RDNA3 machine code, run with the state the SH registers give (docs/hw/AMD.md §4.2;
  docs/hw/amd_code_object.md): USER_DATA_0.. in s0.., workgroup ids after them per RSRC2.TGID_*_EN, LDS per RSRC2."""
  ch = eng.ch
  rsrc1, rsrc2 = eng.reg("COMPUTE_PGM_RSRC1"), eng.reg("COMPUTE_PGM_RSRC2")
  kernel = ch.dev.symbol_at(pgm)   # the loader's registration (code_object_loaded); None: code nobody registered
  where = f"DISPATCH_DIRECT of kernel {kernel} (program at 0x{pgm:x})" if kernel else f"DISPATCH_DIRECT of {rdna3.code_name(pgm)}"
  rdna3.check_modes(rsrc1, where, kernel)
  def bad(msg: str) -> Fault: return Fault(f"inconsistent dispatch: {where}: {msg}", "compute", None, kernel)
  used = max((i for i in range(3) if block[i] > 1), default=0)
  if R.get("COMPUTE_PGM_RSRC2", rsrc2, "TIDIG_COMP_CNT") < used:
    raise bad(f"RSRC2.TIDIG_COMP_CNT is {R.get('COMPUTE_PGM_RSRC2', rsrc2, 'TIDIG_COMP_CNT')} but work-items vary along {'XYZ'[used]}")
  for i, d in enumerate("XYZ"):
    if grid[i] > 1 and not R.get("COMPUTE_PGM_RSRC2", rsrc2, f"TGID_{d}_EN"): raise bad(f"{grid[i]} work-groups along {d} but RSRC2.TGID_{d}_EN is 0")
  private = 0   # scratch bytes per lane: TMPRING_SIZE.WAVESIZE counts 256-byte units of a wave's scratch (wave32)
  if R.get("COMPUTE_PGM_RSRC2", rsrc2, "SCRATCH_EN"):
    private = R.get("COMPUTE_TMPRING_SIZE", eng.reg("COMPUTE_TMPRING_SIZE"), "WAVESIZE") * A.SCRATCH_GRANULE // A.WAVE_SIZE
    if not private: raise bad("RSRC2.SCRATCH_EN is set but COMPUTE_TMPRING_SIZE.WAVESIZE is 0 (no scratch for the waves)")
  if (nuser := R.get("COMPUTE_PGM_RSRC2", rsrc2, "USER_SGPR")) > A.USER_DATA_REGS:
    raise bad(f"RSRC2.USER_SGPR is {nuser}, but there are {A.USER_DATA_REGS} USER_DATA registers")
  user = [eng.reg(f"COMPUTE_USER_DATA_{i}") for i in range(A.USER_DATA_REGS)]
  lds = R.get("COMPUTE_PGM_RSRC2", rsrc2, "LDS_SIZE") * R.LDS_GRANULE
  key = (pgm, kernel, rsrc1, rsrc2, grid, block, lds, private)
  if not ch.dev.short(key): return BLOCKED   # (polled inline, not known to be short: the worker thread's)
  ch.dev.counters["dispatch"] += 1
  checked = checked_default()
  hz, label = ch.dev.hz, ch.where()
  def body(seq: int) -> None:
    # the hazard checker gets the byte ranges the loads and stores touched, per mapping, recorded under the launch's
    # number when the kernel runs (at its start, or when the launches in flight complete under a seeded order: before
    # the ordering command that retires them, so launches in flight together still conflict)
    def record(name: str, accesses: list) -> None:
      if hz.enabled:
        for base, ranges in accesses: hz.access(ch.pid, base, ranges, f"{label}: kernel {name}", seq)
    rdna3.launch(ch.dev.vm, pgm, rsrc1, rsrc2, user, grid, block, lds, checked, private, record, kernel)
  dispatch.start(body, ch.flight, ch.dev, key)
  return DONE


# ---- memory: signals, waits ------------------------------------------------------------------------------------------
C = A.COMPARE
FUNCTIONS: dict[int, tuple[str, Callable[[int, int], bool]]] = {
  C["ALWAYS"]: ("always", lambda v, r: True), C["LT"]: ("<", lambda v, r: v < r), C["LE"]: ("<=", lambda v, r: v <= r),
  C["EQ"]: ("==", lambda v, r: v == r), C["NE"]: ("!=", lambda v, r: v != r), C["GE"]: (">=", lambda v, r: v >= r), C["GT"]: (">", lambda v, r: v > r),
}

def poll_memory(ch: Any, engine: str, addr: int, nbytes: int, func: int, ref: int, mask: int, what: str) -> int | None:
  """A wait on memory: (value & mask) FUNCTION reference. BLOCKED (the channel notes on what) or None (go on)."""
  if func not in FUNCTIONS: raise Fault(f"{what}: FUNCTION {func} is not a compare function (0-6)", engine, addr)
  if addr % nbytes: raise Fault(f"misaligned semaphore: {what} at 0x{addr:x} must be {nbytes}-byte aligned", engine, addr)
  v = ch.dev.vm.read_uint(addr, nbytes, engine, what)
  name, ok = FUNCTIONS[func]
  if not ok(v & mask, ref):
    ch.blocked = (addr, nbytes, f"{what}: (value & 0x{mask:x}) {name} 0x{ref:x}")
    return BLOCKED
  ch.blocked = None
  ch.dev.counters["wait"] += 1
  ch.dev.hz.acquire(ch.pid, addr, v, nbytes)
  return None

def wait_reg_mem(eng: ComputeEngine, w: list[int], wide: bool = False) -> int | None:
  nm = "WAIT_REG_MEM64" if wide else "WAIT_REG_MEM"
  func, space, op = B.get(w[1], WAIT["FUNCTION"]), B.get(w[1], WAIT["MEM_SPACE"]), B.get(w[1], WAIT["OPERATION"])
  if space == 0:
    if op == 1: return None   # write-wait-write on registers (an HDP flush): satisfied at once, the mock is coherent
    raise Fault(f"{nm} on a register (MEM_SPACE 0, OPERATION {op}) is not emulated", "compute")
  if space != 1: raise Fault(f"{nm} MEM_SPACE {space} is not emulated (1 = memory)", "compute")
  if op not in (0, 3): raise Fault(f"{nm} on memory with OPERATION {op} (0 wait, 3 wait preemptable)", "compute")
  addr = w[2] | (w[3] << 32)
  if wide: ref, mask = w[4] | (w[5] << 32), w[6] | (w[7] << 32)
  else: ref, mask = w[4], w[5]
  r = poll_memory(eng.ch, "compute", addr, 8 if wide else 4, func, ref, mask, f"{nm} semaphore")
  return r if r is not None else DONE

# RELEASE_MEM DATA_SEL -> (bytes written, value(engine, packet))
DS = A.DATA_SEL
DATA_SELS: dict[int, tuple[str, int, Callable[[Any, list[int]], int]] | None] = {
  DS["NONE"]: None,
  DS["DATA32"]: ("32-bit data", 4, lambda ch, w: w[5]),
  DS["DATA64"]: ("64-bit data", 8, lambda ch, w: w[5] | (w[6] << 32)),
  DS["GPU_CLOCK"]: ("GPU clock counter", 8, lambda ch, w: ch.dev.read_timer()),
  DS["SYSTEM_CLOCK"]: ("system clock counter", 8, lambda ch, w: ch.dev.read_timer()),
}

def release_mem(eng: ComputeEngine, w: list[int]) -> int:
  ch = eng.ch
  ev, idx = B.get(w[1], DW1["EVENT_TYPE"]), B.get(w[1], DW1["EVENT_INDEX"])
  if ev not in A.EOP_EVENTS: raise Fault(f"RELEASE_MEM EVENT_TYPE 0x{ev:x} is not an end-of-pipe event the mock knows "
                                         f"({', '.join(f'0x{e:x} {n}' for e, n in A.EOP_EVENTS.items())})", "compute")
  if idx not in (A.EVENT_INDEX["END_OF_PIPE"], A.EVENT_INDEX["SHADER_DONE"]):
    raise Fault(f"RELEASE_MEM EVENT_INDEX {idx} (5 end_of_pipe, 6 shader_done)", "compute")
  dsel, isel = B.get(w[2], DW2["DATA_SEL"]), B.get(w[2], DW2["INT_SEL"])
  if dsel not in DATA_SELS: raise Fault(f"RELEASE_MEM DATA_SEL {dsel} is not emulated (0-4)", "compute")
  if isel not in (0, 1, 2, 3): raise Fault(f"RELEASE_MEM INT_SEL {isel} is not emulated (0-3)", "compute")
  ch.flight.retire()   # an end-of-pipe event: everything before it has finished when it writes (ORDERING)
  if isel: ch.interrupts.append(w[7])
  sel = DATA_SELS[dsel]
  if sel is None: return DONE
  what, nbytes, value = sel
  addr = w[3] | (w[4] << 32)
  if addr % nbytes: raise Fault(f"misaligned semaphore: RELEASE_MEM {what} at 0x{addr:x} must be {nbytes}-byte aligned", "compute", addr)
  v = value(ch, w)
  ch.dev.vm.write_uint(addr, nbytes, v, "compute", f"RELEASE_MEM {what}")
  ch.dev.counters["release_mem"] += 1
  if dsel in (DS["DATA32"], DS["DATA64"]): ch.dev.hz.release(ch.pid, addr, v, nbytes)
  return DONE

EVENTS = A.EVENTS
PARTIAL_FLUSH = (A.EVENT["CS_PARTIAL_FLUSH"], A.EVENT_INDEX["CS_PARTIAL_FLUSH"])   # (EVENT_TYPE, EVENT_INDEX) of CS_PARTIAL_FLUSH

# The queue ordering model (README "Ordering inside a queue"): a dispatch stays in flight, overlapping later dispatches,
# until one of these retires it. One row per command: (what it orders, the source in docs/hw/AMD.md).
ORDERING: dict[str, tuple[str, str]] = {
  "EVENT_WRITE CS_PARTIAL_FLUSH (index 4)": ("every dispatch before it finishes first", "docs/hw/AMD.md §4.2 step 7, §3.7"),
  "RELEASE_MEM (end-of-pipe / shader_done event)": ("every dispatch before it finishes before the write", "docs/hw/AMD.md §3.3, §4.2 step 8"),
  "ACQUIRE_MEM": ("nothing: cache invalidate / write-back only", "docs/hw/AMD.md §3.5"),
  "WAIT_REG_MEM / WAIT_REG_MEM64": ("nothing: later packets wait, earlier dispatches go on", "docs/hw/AMD.md §3.4"),
  "DISPATCH_DIRECT initiator flags": ("nothing the fact sheet states", "docs/hw/AMD.md §4.1"),
  "other EVENT_WRITE events": ("nothing the fact sheet states", "docs/hw/AMD.md §3.7"),
  "SDMA packets (copy queue)": ("in order: the fact sheet states no overlap of SDMA packets", "docs/hw/AMD.md §5"),
}

def event_write(eng: ComputeEngine, w: list[int]) -> None:
  ev = B.get(w[1], A.EVENT_DW1["EVENT_TYPE"])
  if ev not in EVENTS: raise Fault(f"EVENT_WRITE EVENT_TYPE 0x{ev:x} is not an event the mock knows", "compute")
  if (ev, B.get(w[1], A.EVENT_DW1["EVENT_INDEX"])) == PARTIAL_FLUSH: eng.ch.flight.retire()   # an ordering command (ORDERING)
  # cache events: the mock's memory is coherent, nothing to do

def acquire_mem(eng: ComputeEngine, w: list[int]) -> None:
  if w[7] >> A.GCR_CNTL_BITS: raise Fault(f"ACQUIRE_MEM GCR_CNTL 0x{w[7]:x} sets bits above {A.GCR_CNTL_BITS - 1}", "compute")
  # coherent memory: invalidates and write-backs are no-ops

def indirect_buffer(eng: ComputeEngine, w: list[int]) -> int | None:
  va, ctl = (w[1] & 0xFFFFFFFC) | (w[2] << 32), w[3]
  n = B.get(ctl, A.INDIRECT_BUFFER_DW3["IB_SIZE"])
  if not B.get(ctl, A.INDIRECT_BUFFER_DW3["VALID"]): raise Fault(f"INDIRECT_BUFFER control 0x{ctl:x} has VALID 0", "compute", va)
  if B.get(ctl, A.INDIRECT_BUFFER_DW3["CHAIN"]): raise Fault(f"INDIRECT_BUFFER control 0x{ctl:x}: CHAIN is not emulated", "compute", va)
  eng.ch.enter_ib(va, n)
  return None

def nop(eng: ComputeEngine, w: list[int]) -> None: pass


def _rows(rows: list[Packet]) -> dict[int, Packet]:
  out: dict[int, Packet] = {}
  for r in rows:
    if r.opcode in out: raise AssertionError(f"PM4 table: {r.name} and {out[r.opcode].name} share opcode 0x{r.opcode:x}")
    out[r.opcode] = r
  return out

TABLE = _rows([
  Packet("NOP", PM4["NOP"], None, nop),
  Packet("DISPATCH_DIRECT", PM4["DISPATCH_DIRECT"], (3,), dispatch_direct),
  Packet("WAIT_REG_MEM", PM4["WAIT_REG_MEM"], (5,), wait_reg_mem),
  Packet("INDIRECT_BUFFER", PM4["INDIRECT_BUFFER"], (2,), indirect_buffer),
  Packet("EVENT_WRITE", PM4["EVENT_WRITE"], (0, 2), event_write),
  Packet("RELEASE_MEM", PM4["RELEASE_MEM"], (6,), release_mem),
  Packet("ACQUIRE_MEM", PM4["ACQUIRE_MEM"], (6,), acquire_mem),
  Packet("SET_SH_REG", PM4["SET_SH_REG"], None, set_sh_reg),
  Packet("WAIT_REG_MEM64", PM4["WAIT_REG_MEM64"], (7,), lambda eng, w: wait_reg_mem(eng, w, True)),
])


_NOP, _SET_SH_REG = PM4["NOP"], PM4["SET_SH_REG"]

def packet_dwords(h: int) -> int:
  """Total dwords of the packet whose header is h (header included); a Fault names a header the queue cannot run."""
  if (t := (h >> _TYPE_SH) & _TYPE_M) != A.PM4_TYPE3:
    raise Fault(f"header 0x{h:08x} is a type-{t} packet; the compute queue runs type-3 packets only", "compute")
  op, count = (h >> _OP_SH) & _OP_M, (h >> _CNT_SH) & _CNT_M
  row = TABLE.get(op)
  if row is None: raise Fault(f"unknown PM4 opcode 0x{op:02x} in header 0x{h:08x} (known: "
                              f"{', '.join(f'0x{o:02x} {r.name}' for o, r in TABLE.items())})", "compute")
  if op == _NOP and count == A.PM4_NOP_FILLER_COUNT: return 1
  if row.counts is not None and count not in row.counts:
    raise Fault(f"{row.name} header 0x{h:08x} has COUNT {count}; the packet has COUNT {' or '.join(map(str, row.counts))}", "compute")
  if op == _SET_SH_REG and count < 1: raise Fault(f"SET_SH_REG header 0x{h:08x} has COUNT 0: no register value follows the offset", "compute")
  return count + 2
