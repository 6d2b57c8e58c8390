"""The AMD device: the HCQ runtime (refgrad/runtime/hcq.py) writing real AMD command formats, gfx11 / RDNA3, wave32 (facts:
docs/hw/AMD.md; the formats are the tables of refgrad/hw/amd.py).

- Compute queue: PM4 type-3 packets (§1-§4). Each submission is written to an indirect buffer (host-visible memory of
  the channel) and the ring gets one INDIRECT_BUFFER packet, so a persistent queue (TinyJit's graph) replays as one
  indirect buffer with one doorbell. Signals: RELEASE_MEM end-of-pipe 64-bit data (DATA_SEL 2) and GPU clock counter
  (DATA_SEL 3) for timestamps; waits: WAIT_REG_MEM64 >= on memory; barriers: EVENT_WRITE CS_PARTIAL_FLUSH + ACQUIRE_MEM.
- Launch (dispatch recipe §4.2): SET_SH_REG COMPUTE_PGM_LO/HI, PGM_RSRC1/2, PGM_RSRC3, TMPRING_SIZE, RESTART_X..Z,
  USER_DATA_0/1 = the kernel-argument pointer, RESOURCE_LIMITS, START_X..Z + NUM_THREAD_X..Z, DISPATCH_DIRECT(groups,
  initiator COMPUTE_SHADER_EN | FORCE_START_AT_000 | CS_W32_EN); the recipe's trailing CS_PARTIAL_FLUSH is left out, so
  independent launches overlap (README "Ordering inside a queue"): memory_barrier orders dependent ones, the end-of-pipe
  signal everything before it. The RSRC values come from
  the program's 64-byte kernel descriptor (§8), which precedes the program image in GPU memory (entry at +256).
- Copy queue: SDMA packets (§5) written straight into the ring (pointers in bytes; a packet never straddles the end:
  the rest of the ring is zero-filled, zero dwords being one-dword NOPs): COPY_LINEAR, FENCE (two 32-bit fences make a
  64-bit signal), POLL_REGMEM >= for waits (32-bit: timeline values stay below 2**32), TIMESTAMP GET_GLOBAL, GCR_REQ.
- Rings (§6): read pointer u64 at +0 of the control page (the GPU writes it), write pointer u64 at +8, doorbell register
  u64 at +0x10 (the new write pointer, then `ring_doorbell(token)`). PM4 pointers count dwords, SDMA pointers bytes.

Code paths (`AMD_CODE`, chosen in `CODE_PATHS`):
- ir: kernels are rendered by PythonRenderer for the AMD target (WMMA 16x16x16 wave32 lane layouts; EMULATE may
  name another) and uploaded as the RGL1 program image shared with NV, after a descriptor refgrad makes (`program_descriptor`).
- isa (default): kernels are rendered to LLVM IR (refgrad/renderer/llvmir.py, amdgcn) and compiled by llvmlite for gfx1100 to a
  relocatable ELF object, which refgrad/runtime/amd_elf.py reads and links; the image, its kernel descriptor (LLVM's) and
  the dispatch registers are described in docs/hw/amd_code_object.md.
Kernel arguments are laid out as on NV (u64 buffer VAs, then int32 variables), which is also LLVM's kernarg layout for
those parameters. A device needs a driver: `MOCKGPU=1` gives the mock AMD GPU of emulators/.
"""
from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from refgrad import knobs
from refgrad.device import CODE_PATH_DEVICES, Compiled, Compiler
from refgrad.hw import amd as A
from refgrad.hw import bits
from refgrad.hw import image as container
from refgrad.hw.amd import PM4, SH
from refgrad.renderer.llvmir import LLVMRenderer
from refgrad.renderer.serialize import parse_program
from refgrad.runtime.amd_elf import CodeObjectError, KernelDescriptor, check_args, load_code_object
from refgrad.runtime.driver import open_driver
from refgrad.runtime.hcq import Channel, HCQAllocator, HCQCompiled, HCQDevice, HCQProgram, HWQueue, KernArgs, Signal, device_index
from refgrad.runtime.image import ImageCompiler, ImageRenderer, image_info
from refgrad.runtime.ops_llvm import compile_object, init_llvm, optimized_module
from refgrad.target import AMD, check_limits, emulated, launch_geometry, launch_sizes
from refgrad.uop.ops import Ops, UOp

Encoded = tuple[list[int], dict[str, tuple[int, str]]]

# ---- encoders over the AMD tables (refgrad/hw/amd.py: docs/hw/AMD.md §1-§5) -------------------------------------------
# the header's field positions, taken from the table once (this runs for every packet)
_TYPE3, _COUNT, _OPCODE = bits.pack(A.PM4_HEADER, TYPE=A.PM4_TYPE3), A.PM4_HEADER["COUNT"][1], A.PM4_HEADER["IT_OPCODE"][1]

def pkt3(op: str, *body: int) -> list[int]:
  """A type-3 packet (§1): the header (TYPE 3, COUNT = body dwords - 1, IT_OPCODE), then the body."""
  if not body or len(body) > 1 << 14: raise ValueError(f"PM4 {op}: a body of {len(body)} dwords (1..16384)")
  for d in body:
    if not 0 <= d < 2**32: raise ValueError(f"PM4 {op}: body dword {d:#x} is not a 32-bit word")
  return [_TYPE3 | ((len(body) - 1) << _COUNT) | (PM4[op] << _OPCODE), *body]

def set_sh_reg(reg: str, *vals: int) -> list[int]: return pkt3("SET_SH_REG", SH[reg], *vals)

RSRC1, RSRC2, DW1, DW2 = A.RSRC1, A.RSRC2, A.RELEASE_MEM_DW1, A.RELEASE_MEM_DW2
DISPATCH_INITIATOR = bits.pack(A.FIELDS["COMPUTE_DISPATCH_INITIATOR"], COMPUTE_SHADER_EN=1, FORCE_START_AT_000=1, CS_W32_EN=1)   # 0x8005
EOP = bits.pack(DW1, EVENT_TYPE=A.EVENT["CACHE_FLUSH_AND_INV_TS_EVENT"], EVENT_INDEX=A.EVENT_INDEX["END_OF_PIPE"],
                GLM_WB=1, GLM_INV=1, GLV_INV=1, GL1_INV=1, GL2_WB=1)
DATA64, CLOCK64 = bits.pack(DW2, DATA_SEL=A.DATA_SEL["DATA64"]), bits.pack(DW2, DATA_SEL=A.DATA_SEL["GPU_CLOCK"])
WAIT_GEQ_MEM = bits.pack(A.WAIT_REG_MEM_DW1, FUNCTION=A.COMPARE["GE"], MEM_SPACE=1)                                             # 0x15
CS_PARTIAL_FLUSH = bits.pack(A.EVENT_DW1, EVENT_TYPE=A.EVENT["CS_PARTIAL_FLUSH"], EVENT_INDEX=A.EVENT_INDEX["CS_PARTIAL_FLUSH"])   # 0x407
GCR_INVALIDATE = bits.pack(A.GCR_CNTL, GLI_INV=1, GLK_INV=1, GLV_INV=1, GL1_INV=1, GL2_INV=1, GL2_WB=1)

def release_mem(addr: int, sel: int, value: int = 0) -> list[int]:
  if addr % 8: raise ValueError(f"RELEASE_MEM address 0x{addr:x} must be 8-byte aligned (64-bit data)")
  if not 0 <= value < 2**64: raise ValueError(f"signal value {value} is not a u64")
  return pkt3("RELEASE_MEM", EOP, sel, addr & 0xFFFFFFFF, addr >> 32, value & 0xFFFFFFFF, value >> 32, 0)

_IB_VALID = bits.pack(A.INDIRECT_BUFFER_DW3, VALID=1)

def indirect_buffer(va: int, ndwords: int) -> list[int]:
  if va % 4 or not 0 < ndwords <= A.MAX_IB_DWORDS:
    raise ValueError(f"indirect buffer at 0x{va:x} of {ndwords} dwords (4-byte aligned, 1..2**20-1 dwords)")
  return pkt3("INDIRECT_BUFFER", va & 0xFFFFFFFC, va >> 32, (ndwords << A.INDIRECT_BUFFER_DW3["IB_SIZE"][1]) | _IB_VALID)

# ---- SDMA (§5) --------------------------------------------------------------------------------------------------------
def sdma_header(name: str, dw0: dict[str, tuple[int, int]] | None = None, **fields: int) -> int:
  """An SDMA packet's header: OP and SUB_OP of packet `name`, and named fields of its dword-0 table `dw0`."""
  op, sub = A.SDMA[name]
  return bits.pack(A.SDMA_HEADER, OP=op, SUB_OP=sub) | (bits.pack(dw0, **fields) if dw0 else 0)

SDMA_CHUNK = 1 << 22                     # bytes per COPY_LINEAR (COUNT is bytes - 1; 22 bits fit every SDMA version)
COPY_HEADER = sdma_header("COPY_LINEAR")                                                          # 0x00000001
FENCE_HEADER = sdma_header("FENCE", A.SDMA_FENCE_DW0, MTYPE=3)                                    # 0x00030005
POLL_GEQ_MEM = sdma_header("POLL_REGMEM", A.SDMA_POLL_REGMEM_DW0, FUNC=A.COMPARE["GE"], MEM_POLL=1)   # 0xD0000008
POLL_DW5 = bits.pack(A.SDMA_POLL_REGMEM_DW5, INTERVAL=4, RETRY_COUNT=0xFFF)
TIMESTAMP_GLOBAL = sdma_header("TIMESTAMP_GET_GLOBAL")                                            # 0x0000020D
GCR_HEADER = sdma_header("GCR_REQ")

def fence(addr: int, value: int) -> list[int]: return [FENCE_HEADER, addr & 0xFFFFFFFF, addr >> 32, value]


class AMDComputeQueue(HWQueue):
  """PM4 packets for the compute queue (run from an indirect buffer)."""
  engine = "compute"
  def _wait(self, addr: int, value: int) -> Encoded:
    if addr % 8: raise ValueError(f"signal address 0x{addr:x} must be 8-byte aligned")
    if not 0 <= value < 2**64: raise ValueError(f"signal value {value} is not a u64")
    return (pkt3("WAIT_REG_MEM64", WAIT_GEQ_MEM, addr & 0xFFFFFFFF, addr >> 32, value & 0xFFFFFFFF, value >> 32, 0xFFFFFFFF, 0xFFFFFFFF, 0x4),
            {"addr": (2, "lohi"), "value": (4, "lohi")})
  def _signal(self, addr: int, value: int) -> Encoded: return release_mem(addr, DATA64, value), {"addr": (3, "lohi"), "value": (5, "lohi")}
  def _timestamp(self, addr: int) -> Encoded: return release_mem(addr + 8, CLOCK64), {}
  def _memory_barrier(self) -> Encoded:
    return (pkt3("EVENT_WRITE", CS_PARTIAL_FLUSH) + pkt3("ACQUIRE_MEM", 0, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 0xA, GCR_INVALIDATE)), {}
  def _exec(self, prg: HCQProgram, args: KernArgs, gs: tuple[int, ...], ls: tuple[int, ...]) -> Encoded:
    assert isinstance(prg, AMDProgram)
    words, slot = prg.dispatch(gs, ls)
    words = list(words)
    words[slot], words[slot + 1] = args.va & 0xFFFFFFFF, args.va >> 32
    return words, {"kernarg": (slot, "lohi")}


class AMDCopyQueue(HWQueue):
  """SDMA packets for the copy queue."""
  engine = "copy"
  def _wait(self, addr: int, value: int) -> Encoded:
    if not 0 <= value < 2**32: raise ValueError(f"SDMA POLL_REGMEM compares 32 bits: signal value {value} does not fit")
    return [POLL_GEQ_MEM, addr & 0xFFFFFFFF, addr >> 32, value, 0xFFFFFFFF, POLL_DW5], {"addr": (1, "lohi"), "value": (3, "u32")}
  def _signal(self, addr: int, value: int) -> Encoded:
    if addr % 8: raise ValueError(f"signal address 0x{addr:x} must be 8-byte aligned")
    if not 0 <= value < 2**32: raise ValueError(f"the SDMA queue signals 32-bit values: {value} does not fit")
    # upper half first (zero), then the value: a 64-bit reader never sees a half-written pair that passes its wait
    return fence(addr + 4, 0) + fence(addr, value), {"addr_hi": (1, "lohi"), "addr": (5, "lohi"), "value": (7, "u32")}
  def _timestamp(self, addr: int) -> Encoded:
    return [TIMESTAMP_GLOBAL, (addr + 8) & 0xFFFFFFFF, (addr + 8) >> 32], {}
  def _memory_barrier(self) -> Encoded:
    return [GCR_HEADER, 0, bits.pack(A.SDMA_GCR_DW2, GCR_CONTROL=GCR_INVALIDATE), 0xFFFFFF80, 0xFFFF], {}
  def _copy(self, dest: int, src: int, nbytes: int) -> Encoded:
    out: list[int] = []
    for o in range(0, nbytes, SDMA_CHUNK):
      s, d, n = src + o, dest + o, min(SDMA_CHUNK, nbytes - o)
      out += [COPY_HEADER, n - 1, 0, s & 0xFFFFFFFF, s >> 32, d & 0xFFFFFFFF, d >> 32]
    return out, {}
  def _update(self, cmd: int, kind: str, signal: Signal | None, value: int | None) -> HWQueue:
    super()._update(cmd, kind, signal, value)
    if signal is not None and "addr_hi" in (slots := self.cmds[cmd][2]): self._patch(self.cmds[cmd][1], slots["addr_hi"], signal.va + 4)
    return self


# ---- channels ---------------------------------------------------------------------------------------------------------
RPTR, WPTR, DOORBELL = A.CONTROL["RPTR"], A.CONTROL["WPTR"], A.CONTROL["DOORBELL"]   # u64 slots of the control page (§6)

class AMDChannel(Channel):
  """A user-mode queue: ring, read/write pointers and doorbell (§6). Compute: each submission is one INDIRECT_BUFFER
  packet in the ring (pointers in dwords); copy: the SDMA packets themselves (pointers in bytes)."""
  IB_BYTES = 4 << 20

  def __init__(self, dev: HCQDevice, handle):
    super().__init__(dev, handle)
    assert handle.ring.host is not None and handle.userd.host is not None
    self.pm4 = handle.engine == "compute"
    self.unit = A.POINTER_UNIT[handle.engine]
    self.ring = handle.ring.host.view(np.uint32)
    self.ctl = handle.userd.host.view(np.uint64)
    self.wptr = int(self.ctl[WPTR])
    if self.pm4:
      self.ib = dev.drv.alloc(self.IB_BYTES, host_visible=True)
      assert self.ib.host is not None
      self.ib_words, self.ib_pos = self.ib.host.view(np.uint32), 0

  def position(self) -> int: return int(self.ctl[RPTR])
  def idle(self) -> bool: return self.position() == self.wptr

  def _room(self, units: int) -> None:
    """Wait until `units` more fit in the ring."""
    if units * self.unit > self.ring.nbytes: raise ValueError(f"{self.handle.name}: {units * self.unit} bytes of packets exceed the {self.ring.nbytes}-byte ring")
    if self.wptr + units - self.position() > self.ring.nbytes // self.unit: self.dev.wait_idle(self)

  def _write(self, words: Sequence[int]) -> None:
    """Packets into the ring at the write pointer (modulo the ring)."""
    n, d = len(self.ring), (self.wptr * self.unit // 4) % len(self.ring)
    k = min(len(words), n - d)
    self.ring[d:d + k] = words[:k]
    if k < len(words): self.ring[:len(words) - k] = words[k:]
    self.wptr += len(words) * 4 // self.unit

  def submit(self, words: Sequence[int], kernels: tuple[str, ...]) -> int:
    if not words: return self.wptr
    if self.pm4:
      n = len(words)
      if n > len(self.ib_words): raise ValueError(f"{self.handle.name}: a queue of {n} dwords exceeds the {len(self.ib_words)}-dword indirect-buffer area")
      if self.ib_pos + n > len(self.ib_words):
        self.dev.wait_idle(self)   # the GPU has run every indirect buffer: the area can be reused
        self.ib_pos = 0
      self.ib_words[self.ib_pos:self.ib_pos + n] = words
      pkt = indirect_buffer(self.ib.va + 4 * self.ib_pos, n)
      self.ib_pos += n
      self._room(len(pkt))
    else:
      pkt = list(words)
      nbytes, off = 4 * len(pkt), self.wptr % self.ring.nbytes
      if off + nbytes > self.ring.nbytes:   # never straddle the end: zero dwords (one-dword NOPs) up to it
        pad = (self.ring.nbytes - off) // 4
        self._room(4 * pad + nbytes)
        self._write([0] * pad)
      else: self._room(nbytes)
    pos = self.wptr
    self._write(pkt)
    self.ctl[WPTR] = self.wptr
    self.ctl[DOORBELL] = self.wptr
    return self._rung(pos, kernels)


class AMDDevice(HCQDevice):
  compute_queue_t = AMDComputeQueue
  copy_queue_t = AMDCopyQueue
  channel_t = AMDChannel
  RING_ENTRIES = 4096   # ring dwords: 1024 INDIRECT_BUFFER packets on the compute queue, 16 KiB of SDMA packets
  def setup(self) -> None:
    self.compute.submit(set_sh_reg("COMPUTE_STATIC_THREAD_MGMT_SE0", 0xFFFFFFFF, 0xFFFFFFFF), ())


# ---- kernel descriptor (§8; refgrad.runtime.amd_elf.KernelDescriptor) and programs --------------------------------------
KD_ENTRY = 256   # the program image follows the descriptor at +256 (PGM_LO/HI take 256-byte aligned addresses)

def program_descriptor(shared: int, kernarg: int, specials: Sequence[tuple[str, int]]) -> KernelDescriptor:
  """The descriptor of a program: LDS for its locals, the kernel-argument pointer as its only user SGPRs, work-group
  IDs for the dimensions it indexes by group, work-item IDs up to the highest dimension it indexes by lane; wave32."""
  props = A.KERNARG_SEGMENT_PTR | A.WAVEFRONT_SIZE32
  user = sum(n for bit, (_, n) in A.KD_PROPERTIES.items() if props >> bit & 1)
  tgid = {d: any(nm[-1] == str(d) and not nm.startswith("lidx") for nm, _ in specials) for d in range(3)}
  tidig = max((int(nm[-1]) for nm, _ in specials if not nm.startswith("gidx")), default=0)
  rsrc2 = bits.pack(RSRC2, "RSRC2.", USER_SGPR=user, TGID_X_EN=int(tgid[0]), TGID_Y_EN=int(tgid[1]), TGID_Z_EN=int(tgid[2]),
                    TIDIG_COMP_CNT=tidig, LDS_SIZE=-(-shared // A.LDS_GRANULE))
  rsrc1 = bits.pack(RSRC1, "RSRC1.", VGPRS=15, SGPRS=10, FLOAT_MODE=0xF0, DX10_CLAMP=1, IEEE_MODE=1, MEM_ORDERED=1)
  return KernelDescriptor(group_segment=shared, private_segment=0, kernarg_size=kernarg, entry=KD_ENTRY, rsrc3=0, rsrc1=rsrc1, rsrc2=rsrc2,
                          properties=props, kernarg_preload=0)


class AMDProgram(HCQProgram):
  """The kernel descriptor + program image in GPU memory; the RSRC registers of a launch are read from the descriptor."""
  def __init__(self, dev: AMDDevice, name: str, lib: bytes):
    info = image_info(lib)
    if info.name != name: raise ValueError(f"the program image holds {info.name!r}, not {name!r}")
    _, uops = parse_program(lib[8:])
    specials = [u.arg for u in uops if u.op is Ops.SPECIAL]
    kd = program_descriptor(info.shared, KernArgs.size(info.nbufs, info.nvars), specials)
    blob = kd.pack().ljust(KD_ENTRY, b"\0") + lib
    super().__init__(dev, name, blob, info.nbufs, info.nvars, info.stored, info.loaded)
    self.kd = KernelDescriptor.unpack(blob[:A.KD_BYTES])   # what a dispatcher reads back from the descriptor
    self.entry, self.rsrc, self.user_sgprs = self.image.va + self.kd.entry, (self.kd.rsrc1, self.kd.rsrc2, self.kd.rsrc3), 2
    self._dispatch: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[list[int], int]] = {}
    self.tmpring = 0   # COMPUTE_TMPRING_SIZE: no scratch

  def geometry(self, gs: tuple[int, ...], ls: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (workgroups, work-items per workgroup) a launch dispatches."""
    return gs, ls

  def dispatch(self, gs: tuple[int, ...], ls: tuple[int, ...]) -> tuple[list[int], int]:
    """The dispatch packets of a launch (§4.2) with the kernel-argument pointer left 0, and the dword where it goes."""
    if (t := self._dispatch.get((gs, ls))) is not None: return t
    key, (gs, ls) = (gs, ls), self.geometry(gs, ls)
    for d in range(3):
      if gs[d] >= 2**32 or ls[d] >= 2**16: raise ValueError(f"{self.name}: launch global {gs} local {ls} does not fit DIM_* / NUM_THREAD_FULL")
    entry, (r1, r2, r3) = self.entry, self.rsrc
    pgm = entry >> A.PGM_ADDRESS_SHIFT
    head = (set_sh_reg("COMPUTE_PGM_LO", pgm & 0xFFFFFFFF, pgm >> 32)
            + set_sh_reg("COMPUTE_PGM_RSRC1", r1, r2) + set_sh_reg("COMPUTE_PGM_RSRC3", r3)
            + set_sh_reg("COMPUTE_TMPRING_SIZE", self.tmpring) + set_sh_reg("COMPUTE_RESTART_X", 0, 0, 0))
    # USER_DATA: the kernarg pointer first (the only user-SGPR input refgrad's descriptors enable), the rest 0
    words = (head + set_sh_reg("COMPUTE_USER_DATA_0", *[0] * self.user_sgprs) + set_sh_reg("COMPUTE_RESOURCE_LIMITS", 0)
             + set_sh_reg("COMPUTE_START_X", 0, 0, 0, *ls)
             + pkt3("DISPATCH_DIRECT", *gs, DISPATCH_INITIATOR))   # no partial flush: independent launches overlap (memory_barrier orders)
    t = self._dispatch[key] = (words, len(head) + 2)
    return t


# ---- AMD_CODE=isa: LLVM IR compiled for gfx1100, the code object read and linked by refgrad (docs/hw/amd_code_object.md) ----
CODE_MAGIC = container.CODE_OBJECT   # refgrad's container of a compiled AMD kernel: the JSON header as payload, the ELF object after it

def _meta(name: str, uops: list[UOp], grid: tuple[int, ...], block: tuple[int, ...]) -> dict[str, Any]:
  """What the launcher needs besides the ELF: argument counts, the buffers stored/loaded, the launch geometry."""
  def bufs(op: Ops) -> list[int]: return sorted({u.src[0].arg for u in uops if u.op is op and u.src[0].op is Ops.DEFINE_GLOBAL})
  gsz, lsz = launch_sizes(uops)
  return {"name": name, "nbufs": sum(u.op is Ops.DEFINE_GLOBAL for u in uops), "nvars": sum(u.op is Ops.DEFINE_VAR for u in uops),
          "stored": bufs(Ops.STORE), "loaded": bufs(Ops.LOAD), "sizes": [list(gsz), list(lsz)], "grid": list(grid), "block": list(block)}

META_PREFIX = "; refgrad-amd "

class AMDLLVMRenderer(LLVMRenderer):
  """LLVM IR for gfx1100 with a first comment line holding the launcher's metadata (`_meta`)."""
  def __init__(self) -> None:
    super().__init__("amdgcn")
    self.device, self.target = "AMD", AMD
  def render(self, name: str, uops: list[UOp]) -> str:
    uops = list(uops)
    check_limits(uops, emulated() or self.target)
    src = super().render(name, uops)
    grid, block, _ = launch_geometry(uops, self.target, self.idx_block_size)
    return META_PREFIX + json.dumps(_meta(name, uops, grid, block)) + "\n" + src


@functools.cache
def gfx1100_machine(opt: int = 2) -> Any:
  """The gfx1100 wave32 target machine llvmlite compiles AMD kernels with (kept: no MCJIT engine takes it over); `opt`:
  LLVM's code generation level (instruction selection, scheduling, register allocation; the IR pipeline is -O2 always)."""
  init_llvm()
  return llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu="gfx1100", features="+wavefrontsize32", opt=opt, reloc="pic")


# IR lines past which a kernel's code is generated at level 0: LLVM's AMDGPU scheduler takes seconds on one basic block of
# thousands of instructions (native float64 SIN's exact reduction, ~4,000 lines: 5.4 s of code generation at level 2,
# 0.1 s at 0, past conformance's 10 s case timeout on a busy 2-core machine). The level changes the instructions' order
# and registers, not what they compute (no fast-math at any level).
BIG_KERNEL_LINES = 3000

def codegen_machine(src: str) -> Any:
  """The target machine for this kernel source: level 2, or 0 for a source over BIG_KERNEL_LINES lines."""
  return gfx1100_machine(0) if src.count("\n") > BIG_KERNEL_LINES else gfx1100_machine()


class AMDLLVMCompiler(Compiler):
  """LLVM IR -> RGCO container (metadata header + gfx1100 ELF object), with llvmlite."""
  seconds, count = 0.0, 0   # time spent compiling (all instances; cache hits are not compiles), for bench_amd
  def __init__(self) -> None:
    self.cachekey = f"refgrad-amd-isa-1\0{llvmlite.__version__}\0{'.'.join(map(str, llvm.llvm_version_info))}\0gfx1100 +wavefrontsize32 O2 codegen O2/O0>{BIG_KERNEL_LINES}"
  def compile(self, src: str) -> bytes:
    head, _, _ = src.partition("\n")
    if not head.startswith(META_PREFIX): raise ValueError(f"AMD_CODE=isa compile: the source does not start with {META_PREFIX!r} metadata")
    meta = head[len(META_PREFIX):].encode()
    st = time.perf_counter()
    elf = compile_object(src, codegen_machine(src), "AMD (gfx1100)")
    AMDLLVMCompiler.seconds += time.perf_counter() - st
    AMDLLVMCompiler.count += 1
    return container.pack(CODE_MAGIC, meta) + elf


def amd_assembly(src: str) -> str:
  """LLVM's own assembly text of an AMD_CODE=isa kernel source (what `AMDLLVMCompiler` compiles): the printer an RDNA3
  decoder can be checked against, instruction by instruction, on the same module."""
  tm = codegen_machine(src)
  return tm.emit_assembly(optimized_module(src, tm, "AMD (gfx1100)"))


def read_container(lib: bytes) -> tuple[dict[str, Any], bytes]:
  """(metadata, ELF) of an RGCO container; CodeObjectError names what is wrong."""
  if lib[:4] != CODE_MAGIC: raise CodeObjectError(f"not an AMD_CODE=isa program: magic {lib[:4]!r}, expected {CODE_MAGIC!r}")
  try: head, elf = container.split(lib, CODE_MAGIC, "RGCO container")
  except ValueError: raise CodeObjectError("RGCO container: the header length runs past the end") from None
  try: meta = json.loads(head)
  except ValueError: raise CodeObjectError("RGCO container: the header is not JSON") from None
  keys = {"name": str, "nbufs": int, "nvars": int, "stored": list, "loaded": list, "sizes": list, "grid": list, "block": list}
  if not isinstance(meta, dict) or any(not isinstance(meta.get(k), t) for k, t in keys.items()):
    raise CodeObjectError(f"RGCO container: the header lacks one of {', '.join(keys)} (or has the wrong type)")
  return meta, elf


class AMDISAProgram(AMDProgram):
  """A gfx1100 code object: LLVM's image (descriptor, code) linked at its GPU address; RSRC and user SGPRs from its descriptor."""
  def __init__(self, dev: AMDDevice, name: str, lib: bytes):  # not super().__init__: that makes a descriptor for RGL1 images
    meta, elf = read_container(lib)
    if meta["name"] != name: raise ValueError(f"the code object holds {meta['name']!r}, not {name!r}")
    co = load_code_object(elf, name)
    check_args(co, meta["nbufs"], meta["nvars"])   # LLVM's kernarg layout (metadata note) is KernArgs'
    HCQProgram.__init__(self, dev, name, co.image, meta["nbufs"], meta["nvars"], frozenset(meta["stored"]), frozenset(meta["loaded"]))
    if (linked := co.link(self.image.va)) != co.image:
      self._bytes = linked
      HCQAllocator(dev).copyin(self.image, memoryview(linked))
    self.code, kd = co, co.kd
    # tell the driver which code is where (as ROCr tells a debugger): the mock names faults of this code by its symbols
    with dev.lock:
      dev._join_stray()
      dev.drv.code_object_loaded(self.image.va, len(co.image), [(n, self.image.va + off, size) for n, off, size in co.functions])
    lds = kd.rsrc2 if bits.get(kd.rsrc2, RSRC2["LDS_SIZE"]) else kd.rsrc2 | bits.pack(RSRC2, LDS_SIZE=-(-kd.group_segment // A.LDS_GRANULE))
    self.entry, self.rsrc, self.user_sgprs = self.image.va + co.entry, (kd.rsrc1, lds, kd.rsrc3), bits.get(kd.rsrc2, RSRC2["USER_SGPR"])
    # scratch (LLVM spills registers there): TMPRING_SIZE.WAVESIZE, a wave's scratch in 256-byte units (docs/hw/amd_code_object.md)
    self.tmpring = (bits.pack(A.FIELDS["COMPUTE_TMPRING_SIZE"], WAVESIZE=-(-kd.private_segment * A.WAVE_SIZE // A.SCRATCH_GRANULE))
                    if bits.get(kd.rsrc2, RSRC2["SCRATCH_EN"]) else 0)
    (gsz, lsz), self.grid, self.block = meta["sizes"], tuple(meta["grid"]), tuple(meta["block"])
    self.sizes = (tuple(gsz), tuple(lsz))
    self._dispatch = {}

  def geometry(self, gs: tuple[int, ...], ls: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # an idxD launch runs in blocks of work-items (refgrad/target.py launch_geometry), as the kernel computes its indices
    if (tuple(gs), tuple(ls)) in (self.sizes, (self.grid, self.block)): return self.grid, self.block
    raise ValueError(f"{self.name}: launched with global {tuple(gs)} local {tuple(ls)}; the kernel was compiled for {self.sizes[0]} x {self.sizes[1]}")


class AMDRenderer(ImageRenderer):
  device = "AMD"
  target = AMD

class AMDCompiler(ImageCompiler):
  arch = "AMD"


# AMD_CODE -> (renderer, compiler, program): the one place the AMD code path is chosen
CODE_PATHS: dict[str, tuple[Callable[[], Any], Callable[[], Compiler], Callable[..., AMDProgram]]] = {
  "ir": (AMDRenderer, AMDCompiler, AMDProgram),
  "isa": (AMDLLVMRenderer, AMDLLVMCompiler, AMDISAProgram),
}


# devices that run one code path whatever AMD_CODE says, so conformance and the fuzzer test each path under its own name
NAMED_PATHS = {name: path for name, (base, _, path) in CODE_PATH_DEVICES.items() if base == "AMD"}


def make_device(name: str) -> Compiled:
  dev = AMDDevice(name, open_driver("AMD", device_index(name)))
  renderer, compiler, program = CODE_PATHS[NAMED_PATHS.get(name.split(":")[0]) or knobs.get("AMD_CODE")]
  return HCQCompiled(name, HCQAllocator(dev), renderer(), compiler(), functools.partial(program, dev), dev)
