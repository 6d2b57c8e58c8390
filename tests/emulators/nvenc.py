"""Test-local encoders for NV command streams, written from the fact sheet (docs/hw/NV.md) — independent of the runtime."""
from __future__ import annotations

import struct

import numpy as np

from emulators.mock_driver import MockDriver
from emulators.nv import qmd as Q
from refgrad.runtime.driver import Mapping

HOST, COMPUTE, COPY = 0, 1, 4   # subchannels
INC, NON_INC, IMMD, ONE_INC, END = 1, 3, 4, 5, 7

def hdr(op: int, count: int, subch: int, method: int) -> int: return (op << 29) | (count << 16) | (subch << 13) | (method >> 2)
def inc(subch: int, method: int, *data: int) -> list[int]: return [hdr(INC, len(data), subch, method), *data]
def non_inc(subch: int, method: int, *data: int) -> list[int]: return [hdr(NON_INC, len(data), subch, method), *data]
def one_inc(subch: int, method: int, *data: int) -> list[int]: return [hdr(ONE_INC, len(data), subch, method), *data]
def immd(subch: int, method: int, value: int) -> list[int]: return [hdr(IMMD, value, subch, method)]

# host SEM_EXECUTE values (docs/hw/NV.md §4.1)
REL64_TS, REL32, REL64, ACQ_CIRC64 = 0x03100001, 0x00100001, 0x01100001, 0x01000003

def sem(addr: int, payload: int, execute: int) -> list[int]:
  return inc(HOST, 0x5C, addr & 0xFFFFFFFF, addr >> 32, payload & 0xFFFFFFFF, payload >> 32, execute)

def set_object(subch: int, cls: int) -> list[int]: return inc(subch, 0x0, cls)

def ce_copy(dst: int, src: int, n: int, launch: int = 0x182) -> list[int]:
  return [*inc(COPY, 0x400, src >> 32, src & 0xFFFFFFFF, dst >> 32, dst & 0xFFFFFFFF), *inc(COPY, 0x418, n), *inc(COPY, 0x300, launch)]

def ce_sem(addr: int, payload: int, launch: int = 0x14) -> list[int]:
  return [*inc(COPY, 0x240, addr >> 32, addr & 0xFFFFFFFF, payload), *inc(COPY, 0x300, launch)]

def inline_upload(dst: int, data: bytes) -> list[int]:
  pad = data + b"\0" * (-len(data) % 4)
  return [*inc(COMPUTE, 0x180, len(data), 1, dst >> 32, dst & 0xFFFFFFFF), *inc(COMPUTE, 0x1B0, 0x41),
          *non_inc(COMPUTE, 0x1B4, *struct.unpack(f"<{len(pad) // 4}I", pad))]

def launch(qmd_va: int, action: int = 9) -> list[int]: return [*inc(COMPUTE, 0x2B4, qmd_va >> 8), *inc(COMPUTE, 0x2C0, action)]

def image(lib: bytes) -> bytes: return b"RGL1" + struct.pack("<I", len(lib)) + lib

def qmd_words(prog_va: int, cb_va: int, cb_bytes: int, grid=(1, 1, 1), block=(1, 1, 1), shared: int = 0, **extra: int) -> list[int]:
  f = {"QMD_MAJOR_VERSION": 3, "QMD_VERSION": 0, "CTA_RASTER_WIDTH": grid[0], "CTA_RASTER_HEIGHT": grid[1], "CTA_RASTER_DEPTH": grid[2],
       "CTA_THREAD_DIMENSION0": block[0], "CTA_THREAD_DIMENSION1": block[1], "CTA_THREAD_DIMENSION2": block[2], "BARRIER_COUNT": 1,
       "SHARED_MEMORY_SIZE": shared, "CONSTANT_BUFFER_VALID(0)": 1, "CONSTANT_BUFFER_ADDR_LOWER(0)": cb_va & 0xFFFFFFFF,
       "CONSTANT_BUFFER_ADDR_UPPER(0)": cb_va >> 32, "CONSTANT_BUFFER_SIZE_SHIFTED4(0)": -(-cb_bytes // 16),
       "PROGRAM_ADDRESS_LOWER": prog_va & 0xFFFFFFFF, "PROGRAM_ADDRESS_UPPER": prog_va >> 32, **extra}
  return Q.encode(f)


class Stream:
  """A channel of a mock driver plus helpers to submit pushbuffer segments (one GP entry each) and ring the doorbell."""
  def __init__(self, drv: MockDriver, engine: str, entries: int = 64):
    self.drv, self.q = drv, drv.create_queue(engine, entries)
    self.put = 0

  def entry(self, words: list[int], ring: bool = True) -> Mapping:
    pb = self.drv.alloc(4 * max(1, len(words)), True)
    pb.host[:4 * len(words)] = np.array(words, np.uint32).view(np.uint8)
    self.gp(pb.va | (len(words) << 42))
    if ring: self.doorbell()
    return pb

  def gp(self, value: int) -> None:
    ring = self.q.ring.host.view(np.uint64)
    ring[self.put] = value
    self.put = (self.put + 1) % self.q.entries

  def doorbell(self) -> None:
    self.q.userd.host.view(np.uint32)[0x8C // 4] = self.put
    self.drv.ring_doorbell(self.q.token)

  @property
  def gpget(self) -> int: return int(self.q.userd.host.view(np.uint32)[0x88 // 4])


def u64(m: Mapping, off: int = 0) -> int: return int(m.host[off:off + 8].view(np.uint64)[0])
def u32(m: Mapping, off: int = 0) -> int: return int(m.host[off:off + 4].view(np.uint32)[0])

