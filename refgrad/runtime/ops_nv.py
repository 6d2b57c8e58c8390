"""The NV device: the HCQ runtime (refgrad/runtime/hcq.py) writing real NVIDIA command formats (facts: docs/hw/NV.md; the
formats are the tables of refgrad/hw/nv.py).

- GPFIFO (class C56F): GP entries (address bits 39:2, LENGTH in dwords at bits 62:42) to pushbuffer segments, GPPut in
  the control page, the channel's token rung at the doorbell.
- Pushbuffer methods: one header dword (SEC_OP, COUNT, subchannel, method dword address) then the data dwords. Host
  methods on subchannel 0, compute (C6C0) on 1, copy (C6B5) on 4.
- Signals: host SEM_ADDR_LO..SEM_EXECUTE (one 5-dword incrementing method) release with WFI + 64-bit + timestamp, and
  acquire circular >= 64-bit; on the copy engine SET_SEMAPHORE_A/B/PAYLOAD + LAUNCH_DMA four-word release (32-bit payload).
- Launches: a QMD V03_00 per launch (from the program's template: the field table `refgrad.hw.nv.QMD`), constant buffer 0 = the
  kernel arguments, then SEND_PCAS_A(qmd >> 8) + SEND_SIGNALING_PCAS2_B(PREFETCH_SCHEDULE).
- Copies: copy-engine OFFSET_IN/OUT, LINE_LENGTH_IN, LAUNCH_DMA 0x182 (non-pipelined, pitch to pitch).

Kernels take one of the code paths of `CODE_PATHS` (knob NV_CODE): `ptx` (default) refgrad's own PTX renderer
(refgrad/renderer/ptx.py), `nvcc` the CUDA renderer compiled by nvcc, both uploaded as b"PTX1" images and run by the mock's
PTX executor; `ir` the serialized linear program (b"RGL1" + u32 length + the program), run by the SIMT executor. The
mock picks its executor by the image's magic. `CODE_DEVICES` names a device per code path (NV_NVCC: nvcc's).
A device needs a driver: `MOCKGPU=1` gives the mock NV GPU of emulators/.
"""
from __future__ import annotations

import functools
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from refgrad import knobs
from refgrad.device import CODE_PATH_DEVICES, Compiled, CompileError, Compiler, source_of
from refgrad.hw import bits
from refgrad.hw import nv as NV
from refgrad.hw.nv import COMPUTE, COMPUTE_CLASS, COPY, COPY_CLASS, HOST, QMD_DWORDS, SUBCH_COMPUTE, SUBCH_COPY, SUBCH_HOST, SecOp
from refgrad.renderer.gpu import CUDARenderer
from refgrad.renderer.ptx import PTXRenderer
from refgrad.runtime import ptx_args, ptx_split
from refgrad.runtime.driver import QueueHandle, open_driver
from refgrad.runtime.hcq import Channel, HCQAllocator, HCQCompiled, HCQDevice, HCQProgram, HWQueue, KernArgs, device_index
from refgrad.runtime.image import IMAGE_MAGIC, ImageCompiler, ImageInfo, ImageRenderer, image_info
from refgrad.target import CUDA

# ---- encoders over the NV tables (refgrad/hw/nv.py: docs/hw/NV.md §1-§7) -------------------------------------------------
# the header's and GP entry's field positions, taken from the tables once (these run for every command)
_SEC_OP, _COUNT, _SUBCH = NV.HEADER["SEC_OP"][1], NV.HEADER["COUNT"][1], NV.HEADER["SUBCHANNEL"][1]
_COUNT_BITS, _SUBCH_BITS, _ADDRESS_BITS = bits.width(NV.HEADER["COUNT"]), bits.width(NV.HEADER["SUBCHANNEL"]), bits.width(NV.HEADER["ADDRESS"])
_GP_LENGTH, _GP_LENGTH_BITS, _GP_ADDRESS = NV.GP_ENTRY["LENGTH"][1], bits.width(NV.GP_ENTRY["LENGTH"]), NV.GP_ENTRY["ADDRESS"]

def header(op: SecOp, subch: int, method: int, count: int) -> int:
  """A method header (§3): SEC_OP, COUNT, subchannel and the method's dword address."""
  if method % 4 or not 0 <= method < 4 << _ADDRESS_BITS: raise ValueError(f"method 0x{method:x} is not a dword address below 0x4000")
  if not 0 <= count < 1 << _COUNT_BITS: raise ValueError(f"method count {count} does not fit {_COUNT_BITS} bits")
  if not 0 <= subch < 1 << _SUBCH_BITS: raise ValueError(f"subchannel {subch} does not fit {_SUBCH_BITS} bits")
  return (int(op) << _SEC_OP) | (count << _COUNT) | (subch << _SUBCH) | (method >> 2)

def method(subch: int, addr: int, *data: int) -> list[int]:
  """An incrementing method: the header, then one data dword per consecutive method address."""
  for d in data:
    if not 0 <= d < 2**32: raise ValueError(f"method 0x{addr:x}: data 0x{d:x} is not a 32-bit word")
  return [header(SecOp.INC, subch, addr, len(data)), *data]

def gp_entry(addr: int, ndwords: int) -> int:
  """A GP entry (§2.1): pushbuffer address bits 39:2, LEVEL MAIN, LENGTH in dwords, SYNC off."""
  if addr % 4 or not 0 <= addr < 1 << (_GP_ADDRESS[0] + 1):
    raise ValueError(f"pushbuffer address 0x{addr:x} must be 4-byte aligned and below 2**40")
  if not 0 < ndwords < 1 << _GP_LENGTH_BITS: raise ValueError(f"a pushbuffer segment of {ndwords} dwords (1..2**21-1)")
  return addr | (ndwords << _GP_LENGTH)   # ADDRESS is bits 39:2 of the address, in place

SEM_RELEASE = bits.pack(NV.SEM_EXECUTE, OPERATION=NV.SEM_OP["RELEASE"], RELEASE_WFI=1, PAYLOAD_SIZE=1, RELEASE_TIMESTAMP=1)   # 0x03100001
SEM_ACQUIRE = bits.pack(NV.SEM_EXECUTE, OPERATION=NV.SEM_OP["ACQ_CIRC_GEQ"], PAYLOAD_SIZE=1)                                  # 0x01000003
CE_COPY = bits.pack(NV.CE_LAUNCH_DMA, DATA_TRANSFER_TYPE=NV.CE_TRANSFER["NON_PIPELINED"], SRC_MEMORY_LAYOUT=NV.CE_LAYOUT_PITCH,
                    DST_MEMORY_LAYOUT=NV.CE_LAYOUT_PITCH)                                                                      # 0x182
CE_RELEASE = bits.pack(NV.CE_LAUNCH_DMA, FLUSH_ENABLE=1, SEMAPHORE_TYPE=NV.CE_SEMAPHORE["RELEASE_FOUR_WORD"])                # 0x14
CE_CHUNK = 1 << 31          # bytes per LAUNCH_DMA (LINE_LENGTH_IN is 32 bits)
INVALIDATE_ALL_NO_WFI = bits.pack(NV.INVALIDATE_NO_WFI, INSTRUCTION=1, GLOBAL_DATA=1, CONSTANT=1)   # 0x1011

def qmd_set(words: np.ndarray, name: str, value: int) -> None:
  """Write one QMD field (§6); ValueError names a field the value does not fit."""
  bits.set_words(words, f"QMD field {name}", NV.QMD[name], value)

def qmd_get(words: np.ndarray, name: str) -> int: return bits.get_words(words, NV.QMD[name])

def sm_config(shared: int) -> int:
  """SM-config shared-memory encoding (KiB / 4 + 1) of the smallest Ampere L1 split holding `shared` bytes."""
  kib = next((k for k in NV.SM_CONFIG_KIB if shared <= k * 1024), NV.SM_CONFIG_KIB[-1])
  return kib // 4 + 1

# ---- queues ----------------------------------------------------------------------------------------------------------
Encoded = tuple[list[int], dict[str, tuple[int, str]]]

def host_semaphore(addr: int, payload: int, execute: int) -> Encoded:
  """SEM_ADDR_LO, SEM_ADDR_HI, SEM_PAYLOAD_LO, SEM_PAYLOAD_HI, SEM_EXECUTE as one 5-dword incrementing method."""
  if addr % 16: raise ValueError(f"semaphore address 0x{addr:x} must be 16-byte aligned (64-bit payload with timestamp)")
  if not 0 <= payload < 2**64: raise ValueError(f"semaphore payload {payload} is not a u64")
  return (method(SUBCH_HOST, HOST["SEM_ADDR_LO"], addr & 0xFFFFFFFF, addr >> 32, payload & 0xFFFFFFFF, payload >> 32, execute),
          {"addr": (1, "lohi"), "value": (3, "lohi")})

def wfi() -> list[int]: return method(SUBCH_HOST, HOST["WFI"], 1)


class NVComputeQueue(HWQueue):
  """Commands for the compute channel: host semaphores, QMD launches, barriers."""
  engine = "compute"
  def _wait(self, addr: int, value: int) -> Encoded: return host_semaphore(addr, value, SEM_ACQUIRE)
  def _signal(self, addr: int, value: int) -> Encoded: return host_semaphore(addr, value, SEM_RELEASE)
  def _timestamp(self, addr: int) -> Encoded: return host_semaphore(addr, 1, SEM_RELEASE)
  def _memory_barrier(self) -> Encoded:
    return wfi() + method(SUBCH_COMPUTE, COMPUTE["INVALIDATE_SHADER_CACHES_NO_WFI"], INVALIDATE_ALL_NO_WFI), {}
  def _exec(self, prg: HCQProgram, args: KernArgs, gs: tuple[int, ...], ls: tuple[int, ...]) -> Encoded:
    assert isinstance(prg, NVProgram)
    qva, qhost = self.scratch(prg.dev, QMD_DWORDS * 4, 256)
    qhost.view(np.uint32)[:] = prg.qmd(gs, ls, args)
    return (method(SUBCH_COMPUTE, COMPUTE["SEND_PCAS_A"], qva >> NV.QMD_ADDRESS_SHIFT)
            + method(SUBCH_COMPUTE, COMPUTE["SEND_SIGNALING_PCAS2_B"], NV.PCAS_PREFETCH_SCHEDULE),
            {"qmd": (1, "u32")})


class NVCopyQueue(HWQueue):
  """Commands for the copy channel: host acquires, copy-engine linear copies and four-word semaphore releases."""
  engine = "copy"
  def _wait(self, addr: int, value: int) -> Encoded: return host_semaphore(addr, value, SEM_ACQUIRE)
  def _release(self, addr: int, payload: int) -> Encoded:
    if addr % 16: raise ValueError(f"semaphore address 0x{addr:x} must be 16-byte aligned (four-word release)")
    if not 0 <= payload < 2**32: raise ValueError(f"the copy engine releases 32-bit payloads: {payload} does not fit")
    return (method(SUBCH_COPY, COPY["SET_SEMAPHORE_A"], addr >> 32, addr & 0xFFFFFFFF, payload) + method(SUBCH_COPY, COPY["LAUNCH_DMA"], CE_RELEASE),
            {"addr": (1, "hilo"), "value": (3, "u32")})
  def _signal(self, addr: int, value: int) -> Encoded: return self._release(addr, value)
  def _timestamp(self, addr: int) -> Encoded: return self._release(addr, 1)
  def _memory_barrier(self) -> Encoded: return wfi(), {}
  def _copy(self, dest: int, src: int, nbytes: int) -> Encoded:
    out: list[int] = []
    for o in range(0, nbytes, CE_CHUNK):
      s, d, n = src + o, dest + o, min(CE_CHUNK, nbytes - o)
      out += method(SUBCH_COPY, COPY["OFFSET_IN_UPPER"], s >> 32, s & 0xFFFFFFFF, d >> 32, d & 0xFFFFFFFF)
      out += method(SUBCH_COPY, COPY["LINE_LENGTH_IN"], n) + method(SUBCH_COPY, COPY["LAUNCH_DMA"], CE_COPY)
    return out, {}


# ---- channel, device, program --------------------------------------------------------------------------------------
USERD_GP_GET, USERD_GP_PUT = NV.USERD["GP_GET"], NV.USERD["GP_PUT"]

class NVChannel(Channel):
  """A GPFIFO channel: pushbuffer segments in a host-visible ring, one GP entry per submission, GPPut, doorbell."""
  PUSHBUFFER_BYTES = 4 << 20

  def __init__(self, dev: HCQDevice, handle: QueueHandle):
    super().__init__(dev, handle)
    self.pb = dev.drv.alloc(self.PUSHBUFFER_BYTES, host_visible=True)
    assert self.pb.host is not None and handle.ring.host is not None and handle.userd.host is not None
    self.pb_words = self.pb.host.view(np.uint32)
    self.gp = handle.ring.host.view(np.uint64)
    self.userd = handle.userd.host.view(np.uint32)
    self.entries, self.put, self.pb_pos = handle.entries, int(self.userd[USERD_GP_PUT // 4]), 0

  def position(self) -> int: return int(self.userd[USERD_GP_GET // 4])
  def idle(self) -> bool: return self.position() == self.put

  def submit(self, words: Sequence[int], kernels: tuple[str, ...]) -> int:
    n = len(words)
    if n > len(self.pb_words): raise ValueError(f"{self.handle.name}: a queue of {n} dwords exceeds the {len(self.pb_words)}-dword pushbuffer")
    if not n: return self.put
    if self.pb_pos + n > len(self.pb_words) or (self.put + 1) % self.entries == self.position():
      self.dev.wait_idle(self)   # the GPU has fetched every segment: the ring memory can be reused
      if self.pb_pos + n > len(self.pb_words): self.pb_pos = 0
    self.pb_words[self.pb_pos:self.pb_pos + n] = words
    pos = self.put
    self.gp[pos] = gp_entry(self.pb.va + 4 * self.pb_pos, n)
    self.pb_pos += n
    self.put = (pos + 1) % self.entries
    self.userd[USERD_GP_PUT // 4] = self.put
    return self._rung(pos, kernels)


class NVDevice(HCQDevice):
  compute_queue_t = NVComputeQueue
  copy_queue_t = NVCopyQueue
  channel_t = NVChannel
  def setup(self) -> None:
    self.compute.submit(method(SUBCH_COMPUTE, COMPUTE["SET_OBJECT"], COMPUTE_CLASS), ())
    self.copy.submit(method(SUBCH_COPY, COPY["SET_OBJECT"], COPY_CLASS), ())


class NVProgram(HCQProgram):
  """A program image in GPU memory and its QMD template; `qmd` gives the QMD of one launch. `NVProgram(dev, name, lib)` takes
  the binary of any code path: PTX text (NV_CODE=ptx or nvcc) is an NVPTXProgram; an image (b"RGL1", or b"PTX1" from run_ptx)
  is this class."""
  def __new__(cls, dev: NVDevice, name: str, lib: bytes, info: ImageInfo | None = None) -> NVProgram:
    if cls is NVProgram and lib[:4] not in (IMAGE_MAGIC, ptx_args.PTX_MAGIC): return super().__new__(NVPTXProgram)   # PTX text
    return super().__new__(cls)

  def __init__(self, dev: NVDevice, name: str, lib: bytes, info: ImageInfo | None = None):
    info = info or image_info(lib)
    if info.name != name: raise ValueError(f"the program image holds {info.name!r}, not {name!r}")
    super().__init__(dev, name, lib, info.nbufs, info.nvars, info.stored, info.loaded)
    t = np.zeros(QMD_DWORDS, np.uint32)
    for k, v in {"QMD_GROUP_ID": 0x3F, "SM_GLOBAL_CACHING_ENABLE": 1, "INVALIDATE_TEXTURE_HEADER_CACHE": 1,
                 "INVALIDATE_TEXTURE_SAMPLER_CACHE": 1, "INVALIDATE_TEXTURE_DATA_CACHE": 1, "INVALIDATE_SHADER_DATA_CACHE": 1,
                 "INVALIDATE_INSTRUCTION_CACHE": 1, "INVALIDATE_SHADER_CONSTANT_CACHE": 1, "CWD_MEMBAR_TYPE": 1,
                 "API_VISIBLE_CALL_LIMIT": 1, "SAMPLER_INDEX": 1, "QMD_MAJOR_VERSION": NV.QMD_MAJOR_VERSION, "QMD_VERSION": NV.QMD_VERSION,
                 "BARRIER_COUNT": 1,
                 "SHARED_MEMORY_SIZE": info.shared, "MIN_SM_CONFIG_SHARED_MEM_SIZE": sm_config(info.shared),
                 "MAX_SM_CONFIG_SHARED_MEM_SIZE": sm_config(100 * 1024), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": sm_config(info.shared),
                 "REGISTER_COUNT_V": 32, "CONSTANT_BUFFER_VALID(0)": 1,
                 "PROGRAM_ADDRESS_LOWER": self.image.va & 0xFFFFFFFF, "PROGRAM_ADDRESS_UPPER": self.image.va >> 32}.items():
      qmd_set(t, k, v)
    self.template = t
    self._dims: dict[tuple[tuple[int, ...], tuple[int, ...]], np.ndarray] = {}

  def qmd(self, gs: tuple[int, ...], ls: tuple[int, ...], args: KernArgs) -> np.ndarray:
    """The QMD words of a launch: the template, the grid and block, constant buffer 0 = the kernel arguments."""
    if (t := self._dims.get((gs, ls))) is None:
      t = self._dims[(gs, ls)] = self.template.copy()
      for k, v in zip(("CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH", "CTA_THREAD_DIMENSION0", "CTA_THREAD_DIMENSION1",
                       "CTA_THREAD_DIMENSION2"), gs + ls):
        try: qmd_set(t, k, v)
        except ValueError as e: raise ValueError(f"{self.name}: launch global {gs} local {ls}: {e}") from None
    q = t.copy()
    qmd_set(q, "CONSTANT_BUFFER_ADDR_LOWER(0)", args.va & 0xFFFFFFFF)
    qmd_set(q, "CONSTANT_BUFFER_ADDR_UPPER(0)", args.va >> 32)
    qmd_set(q, "CONSTANT_BUFFER_SIZE_SHIFTED4(0)", -(-args.nbytes // 16))
    return q


class NVRenderer(ImageRenderer):
  device = "NV"
  target = CUDA

class NVCompiler(ImageCompiler):
  arch = "NV"


class _RawArgs:
  """A filled constant buffer 0 for a raw PTX launch (what NVProgram.qmd reads: va and nbytes)."""
  def __init__(self, va: int, nbytes: int): self.va, self.nbytes = va, nbytes


class NVCompiled(HCQCompiled):
  def run_ptx(self, src: str, entry: str, args: Sequence, grid: Sequence[int] = (1, 1, 1), block: Sequence[int] = (1, 1, 1),
              shared: int = 0) -> list:
    """Run `.entry entry` of a PTX module: arrays are copied to device buffers and passed as .u64 pointers, numpy scalars
    packed per the .param types; returns the arrays after the launch (scalars unchanged), in order. Faults are GPUFaults.
    `shared`: dynamic shared memory bytes per block (extern __shared__ arrays), as the third <<<>>> argument."""
    dev = self.hcq
    assert dev is not None
    if not isinstance(src, str): raise TypeError(f"run_ptx: src must be the PTX module's text (str), not {type(src).__name__}")
    if not isinstance(entry, str): raise TypeError(f"run_ptx: entry must be the .entry's name (str), not {type(entry).__name__}")
    params, static = ptx_args.entry_signature(src, entry)
    for what, v in (("grid", grid), ("block", block)):
      if len(v) != 3 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in v):
        raise ValueError(f"run_ptx: {what} {tuple(v)} must be 3 integers")
    if not isinstance(shared, (int, np.integer)) or isinstance(shared, bool) or shared < 0:
      raise ValueError(f"run_ptx: dynamic shared memory must be a number of bytes >= 0, got {shared!r}")
    if static + shared > ptx_args.MAX_SHARED_BYTES:
      raise ValueError(f"run_ptx: {static + shared} bytes of shared memory per block ({static} static + {shared} dynamic) is more than "
                       f"the {ptx_args.MAX_SHARED_BYTES} an sm_80 block may have")
    shared += static
    gs, ls = tuple(int(x) for x in grid), tuple(int(x) for x in block)
    alloc = HCQAllocator(dev)
    bufs: dict[int, tuple[object, np.ndarray]] = {}
    try:
      for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
          m = alloc.alloc(max(a.nbytes, 1))
          if a.nbytes: alloc.copyin(m, memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))
          bufs[i] = (m, a)
      cb = ptx_args.pack_params(entry, params, list(args), {i: m.va for i, (m, _) in bufs.items()})   # type: ignore[attr-defined]
      prg = NVProgram(dev, entry, ptx_args.make_image(src, entry), ImageInfo(entry, 0, 0, shared))   # type: ignore[arg-type]
      with dev.lock:
        q = dev.ordered("compute")
        va, host = q.scratch(dev, max(len(cb), 16), 256)
        host[:len(cb)] = np.frombuffer(cb, np.uint8)
        q.exec(prg, _RawArgs(va, len(cb)), gs, ls)   # type: ignore[arg-type]
        dev.finish(q)
      dev.synchronize()
      out = []
      for i, a in enumerate(args):
        if i in bufs:
          r = np.empty_like(np.ascontiguousarray(a))
          if a.nbytes: alloc.copyout(memoryview(r.reshape(-1).view(np.uint8)), bufs[i][0])   # type: ignore[arg-type]
          out.append(r)
        else: out.append(a)
      return out
    finally:
      for m, a in bufs.values(): alloc.free(m, max(a.nbytes, 1))   # type: ignore[arg-type]


class PTXKernArgs(KernArgs):
  """Constant buffer 0 of a PTX kernel: the driver's PARAM_BASE bytes, then the CUDA renderer's parameters (u64 buffer
  pointers, then int32 variables: each already at its alignment)."""
  __slots__ = ()
  BASE = ptx_args.PARAM_BASE
  @staticmethod
  def size(nbufs: int, nvars: int) -> int: return PTXKernArgs.BASE + 8 * nbufs + 4 * nvars
  @property
  def nbytes(self) -> int: return self.size(self.nbufs, self.nvars)
  def fill(self, bufs: Sequence[int], vals: Sequence[int]) -> KernArgs:
    if len(bufs) != self.nbufs or len(vals) != self.nvars:
      raise ValueError(f"kernel arguments take {self.nbufs} buffers and {self.nvars} variables, got {len(bufs)} and {len(vals)}")
    self.host[:self.BASE] = 0
    self.host[self.BASE:self.nbytes] = np.frombuffer(struct.pack(f"<{self.nbufs}Q{self.nvars}i", *bufs, *vals), np.uint8)
    return self
  def set_buffer(self, i: int, va: int) -> None:
    if not 0 <= i < self.nbufs: raise IndexError(f"buffer {i} of a kernel with {self.nbufs} buffers")
    self.host[self.BASE + 8 * i:self.BASE + 8 * i + 8] = np.frombuffer(struct.pack("<Q", va), np.uint8)
  def set_var(self, j: int, value: int) -> None:
    if not 0 <= j < self.nvars: raise IndexError(f"variable {j} of a kernel with {self.nvars} variables")
    o = self.BASE + 8 * self.nbufs + 4 * j
    self.host[o:o + 4] = np.frombuffer(struct.pack("<i", value), np.uint8)
  def buffers(self) -> tuple[int, ...]: return struct.unpack_from(f"<{self.nbufs}Q", self.host.tobytes(), self.BASE)


class NVPTXProgram(NVProgram):
  """NV_CODE=ptx or nvcc: `lib` is PTX text (refgrad's PTX renderer's, or nvcc's of the CUDA renderer's kernel), uploaded as a b"PTX1" image."""
  def __init__(self, dev: NVDevice, name: str, lib: bytes):
    src = lib.decode()
    params, shared = ptx_args.entry_signature(src, name)
    nbufs = sum(1 for p in params if p.size == 8)
    if [p.size for p in params] != [8] * nbufs + [4] * (len(params) - nbufs):
      raise ValueError(f"{name}: PTX parameters {[p.type for p in params]} are not the CUDA renderer's (u64 pointers, then int32s)")
    stored, loaded = ptx_args.buffer_access(src, name, params)
    super().__init__(dev, name, ptx_args.make_image(src, name), ImageInfo(name, nbufs, len(params) - nbufs, shared, stored, loaded))

  def args(self, bufs: Sequence[int], vals: Sequence[int] = (), q: HWQueue | None = None) -> KernArgs:
    n = PTXKernArgs.size(self.nbufs, self.nvars)
    va, host = q.scratch(self.dev, n, 256) if q is not None else self.dev.scratch.take(n, 256)
    return PTXKernArgs(va, host, self.nbufs, self.nvars).fill(bufs, vals)


class NVCUDARenderer(CUDARenderer):
  """The CUDA renderer for the NV device (EMULATE's target limits are the CUDA target's)."""


class NVCCCompiler(Compiler):
  """CUDA C -> PTX text with `nvcc --ptx -arch=sm_80` (-O3 is nvcc's default for device code); cached by source.
  `compile_batch` compiles many kernels in one nvcc call (nvcc's start-up, not the kernels, is most of a call's time) and
  caches each kernel's share of the module (refgrad/runtime/ptx_split.py) under its own source."""
  batches = True
  BATCH = 256   # kernels per nvcc call at most (bounds one call's time: about 1.5 s for 365 conformance kernels)
  def __init__(self) -> None:
    self.nvcc = shutil.which("nvcc")
    if self.nvcc is None: raise RuntimeError("NV_CODE=nvcc needs nvcc on PATH (it compiles each kernel to PTX); use NV_CODE=ir without it")
    ver = subprocess.run([self.nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    self.cachekey = f"nvcc-ptx sm_80 -O3 {ver[-1] if ver else '?'}"
  seconds, count = 0.0, 0   # time spent in nvcc (all instances) and its calls, for bench_nv
  def compile(self, src: str) -> bytes:
    st = time.perf_counter()
    try: return self._compile(src)
    finally:
      NVCCCompiler.seconds += time.perf_counter() - st
      NVCCCompiler.count += 1
  def _compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
      cu, out = Path(d) / "k.cu", Path(d) / "k.ptx"
      cu.write_text(src)
      r = subprocess.run([self.nvcc, "--ptx", "-arch=sm_80", "-O3", str(cu), "-o", str(out)], capture_output=True, text=True)
      if r.returncode: raise CompileError(f"nvcc failed ({r.returncode}):\n{r.stderr.strip()}")
      return out.read_bytes()

  def compile_batch(self, kernels: Sequence[tuple[str, tuple[list[str], list[str]]]]) -> list[bytes | CompileError]:
    srcs = [source_of(parts) for _, parts in kernels]
    out: list[bytes | CompileError | None] = [self.cached(s) for s in srcs]
    todo = [i for i, lib in enumerate(out) if lib is None]
    while todo:   # one call per round: kernels of distinct names (one source cannot define a name twice), BATCH at most
      names: set[str] = set()
      now: list[int] = []
      later: list[int] = []
      for i in todo:
        if kernels[i][0] in names or len(now) >= self.BATCH: later.append(i)
        else:
          names.add(kernels[i][0])
          now.append(i)
      for i, lib in zip(now, self._one_call([kernels[i] for i in now], [srcs[i] for i in now])): out[i] = lib
      todo = later
    return [lib for lib in out if lib is not None]

  def _one_call(self, kernels: list[tuple[str, tuple[list[str], list[str]]]], srcs: list[str]) -> list[bytes | CompileError]:
    """The kernels (distinct names) in one nvcc call, each cached; when that call fails (or its module cannot be split),
    each is compiled on its own, so one bad kernel gets its own error and costs the others nothing."""
    if len(kernels) > 1:
      decls = dict.fromkeys(d for _, (ds, _) in kernels for d in ds)
      try: mods = ptx_split.split(self.compile("\n".join([*decls, *(ln for _, (_, lines) in kernels for ln in lines)]) + "\n").decode())
      except (CompileError, ValueError): mods = {}
      if all(name in mods for name, _ in kernels):
        libs = [mods[name].encode() for name, _ in kernels]
        for src, lib in zip(srcs, libs): self.store(src, lib)
        return list(libs)
    res: list[bytes | CompileError] = []
    for src in srcs:
      try: res.append(self.compile_cached(src))
      except CompileError as e: res.append(e)
    return res


class PTXCompiler(Compiler):
  """NV_CODE=ptx: refgrad's own PTX (refgrad/renderer/ptx.py) is the binary as it is; the mock's PTX executor parses it
  once per content, so there is nothing to compile or cache."""
  def compile(self, src: str) -> bytes: return src.encode()


# NV_CODE -> (renderer, compiler, program): the one place the NV code path is chosen
CODE_PATHS: dict[str, tuple[Callable[[], Any], Callable[[], Compiler], Callable[..., NVProgram]]] = {
  "ptx": (PTXRenderer, PTXCompiler, NVPTXProgram),
  "ir": (NVRenderer, NVCompiler, NVProgram),
  "nvcc": (NVCUDARenderer, NVCCCompiler, NVPTXProgram),
}


# device name -> the NV_CODE it runs (None: the knob's). Each is its own mock NV GPU, so conformance and the fuzzer compare
# every code path under its own name; NV_NVCC cannot be constructed without nvcc (and is then skipped by both, with a note).
CODE_DEVICES: dict[str, str | None] = {"NV": None, **{name: path for name, (base, _, path) in CODE_PATH_DEVICES.items() if base == "NV"}}


def make_device(name: str) -> Compiled:
  dev = NVDevice(name, open_driver("NV", device_index(name)))
  renderer, compiler, program = CODE_PATHS[CODE_DEVICES.get(name.split(":")[0]) or knobs.get("NV_CODE")]
  return NVCompiled(name, HCQAllocator(dev), renderer(), compiler(), functools.partial(program, dev), dev)
