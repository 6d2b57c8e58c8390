"""Hand encoders for the mock AMD GPU tests, written from docs/hw/AMD.md (independent of refgrad/runtime/ops_amd.py),
and a ring helper that writes packets at the write pointer (modulo the ring), stores wptr and rings the doorbell."""
from __future__ import annotations

import numpy as np

from refgrad.program import Runner
from refgrad.uop.ops import Ops

from .nvenc import image


# PM4 (§1-§3)
def pkt3(op: int, *body: int) -> list[int]: return [(3 << 30) | ((len(body) - 1) << 16) | (op << 8), *body]
NOP, DISPATCH_DIRECT, WAIT_REG_MEM, INDIRECT_BUFFER, EVENT_WRITE, RELEASE_MEM, ACQUIRE_MEM, SET_SH_REG, WAIT_REG_MEM64 = \
  0x10, 0x15, 0x3C, 0x3F, 0x46, 0x49, 0x58, 0x76, 0x93
FILLER = 0xFFFF1000
PGM_LO, RSRC1, RSRC3, START_X, NUM_THREAD_X, USER_DATA_0, RESTART_X, TMPRING = 0x20C, 0x212, 0x228, 0x204, 0x207, 0x240, 0x21B, 0x218
INITIATOR_W32 = 0x8005

def sh(off: int, *vals: int) -> list[int]: return pkt3(SET_SH_REG, off, *vals)
def release64(addr: int, value: int, sel: int = 2) -> list[int]:
  return pkt3(RELEASE_MEM, 0x514, sel << 29, addr & 0xFFFFFFFF, addr >> 32, value & 0xFFFFFFFF, value >> 32, 0)
def release32(addr: int, value: int) -> list[int]: return pkt3(RELEASE_MEM, 0x514, 1 << 29, addr & 0xFFFFFFFF, addr >> 32, value, 0, 0)
def wait32(addr: int, ref: int, func: int = 5, mask: int = 0xFFFFFFFF) -> list[int]:
  return pkt3(WAIT_REG_MEM, func | (1 << 4), addr & 0xFFFFFFFF, addr >> 32, ref, mask, 4)
def wait64(addr: int, ref: int, func: int = 5, mask: int = 2**64 - 1) -> list[int]:
  return pkt3(WAIT_REG_MEM64, func | (1 << 4), addr & 0xFFFFFFFF, addr >> 32, ref & 0xFFFFFFFF, ref >> 32, mask & 0xFFFFFFFF, mask >> 32, 4)
def ib(va: int, n: int, valid: int = 1) -> list[int]: return pkt3(INDIRECT_BUFFER, va & 0xFFFFFFFC, va >> 32, n | (valid << 23))

def rsrc2(user: int = 2, tgid: tuple[int, int, int] = (1, 1, 1), tidig: int = 2, lds_bytes: int = 0) -> int:
  return (user << 1) | (tgid[0] << 7) | (tgid[1] << 8) | (tgid[2] << 9) | (tidig << 11) | (-(-lds_bytes // 512) << 15)

def dispatch(prog_va: int, kernarg: int, grid, block, r2: int | None = None, initiator: int = INITIATOR_W32, lds: int = 0,
             flush: bool = True) -> list[int]:
  """The §4.2 recipe with the registers a test can spoil (`flush`: its trailing CS_PARTIAL_FLUSH)."""
  return (sh(PGM_LO, (prog_va >> 8) & 0xFFFFFFFF, prog_va >> 40) + sh(RSRC1, 0, rsrc2(lds_bytes=lds) if r2 is None else r2)
          + sh(RSRC3, 0) + sh(TMPRING, 0) + sh(RESTART_X, 0, 0, 0) + sh(USER_DATA_0, kernarg & 0xFFFFFFFF, kernarg >> 32)
          + sh(START_X, 0, 0, 0, *block) + pkt3(DISPATCH_DIRECT, *grid, initiator) + (pkt3(EVENT_WRITE, 0x407) if flush else []))

# SDMA (§5)
def copy_linear(dst: int, src: int, n: int) -> list[int]: return [1, n - 1, 0, src & 0xFFFFFFFF, src >> 32, dst & 0xFFFFFFFF, dst >> 32]
def fence(addr: int, value: int) -> list[int]: return [0x00030005, addr & 0xFFFFFFFF, addr >> 32, value]
def poll(addr: int, ref: int, func: int = 5, mask: int = 0xFFFFFFFF) -> list[int]:
  return [8 | (func << 28) | (1 << 31), addr & 0xFFFFFFFF, addr >> 32, ref, mask, 4 | (0xFFF << 16)]
def timestamp(addr: int) -> list[int]: return [0x0000020D, addr & 0xFFFFFFFF, addr >> 32]
def trap(ctx: int) -> list[int]: return [6, ctx]
def fill(dst: int, pattern: int, n: int) -> list[int]: return [11 | (2 << 30), dst & 0xFFFFFFFF, dst >> 32, pattern, n - 1]


class Ring:
  """A queue of a mock AMD driver; `push` writes packets at wptr (wrapping), stores wptr and the doorbell, rings it."""
  def __init__(self, drv, engine: str, dwords: int = 256):
    self.drv, self.q = drv, drv.create_queue(engine, dwords)
    self.ring = self.q.ring.host.view(np.uint32)
    self.ctl = self.q.userd.host.view(np.uint64)
    self.unit = 4 if engine == "compute" else 1
    self.wptr = 0

  def write(self, words: list[int]) -> None:
    n = len(self.ring)
    for i, w in enumerate(words): self.ring[(self.wptr * self.unit // 4 + i) % n] = w
    self.wptr += len(words) * 4 // self.unit

  def push(self, words: list[int], doorbell: bool = True) -> None:
    self.write(words)
    self.ctl[1] = self.wptr
    if doorbell: self.bell(self.wptr)

  def bell(self, value: int) -> None:
    self.ctl[2] = value
    self.drv.ring_doorbell(self.q.token)

  @property
  def rptr(self) -> int: return int(self.ctl[0])


class Kernel:
  """A Runner's image in GPU memory (256-byte aligned) and a kernel-argument area for it."""
  def __init__(self, drv, r: Runner, bufs: list[int], vals: tuple[int, ...] = ()):
    img = image(r.lib)
    self.r = r
    self.prog = drv.alloc(len(img), True)
    self.prog.host[:] = np.frombuffer(img, np.uint8)
    args = np.array(bufs, np.uint64).tobytes() + np.array(vals, np.int32).tobytes()
    self.args = drv.alloc(max(16, len(args)), True)
    self.args.host[:len(args)] = np.frombuffer(args, np.uint8)
    self.lds = sum(u.dtype.size * u.dtype.base.itemsize for u in r.spec.uops if u.op is Ops.DEFINE_LOCAL)

  def words(self, **kw) -> list[int]:
    kw.setdefault("lds", self.lds)
    return dispatch(self.prog.va, self.args.va, self.r.spec.global_size, self.r.spec.local_size, **kw)
