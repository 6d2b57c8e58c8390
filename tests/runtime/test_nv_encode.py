"""The NV runtime's encoders against the recipes of docs/hw/NV.md, dword for dword (no GPU or mock needed)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from refgrad.runtime import image
from refgrad.runtime import ops_nv as nv
from refgrad.runtime.driver import GPUFault, open_driver
from refgrad.runtime.hcq import KernArgs, device_index


class _Sig:   # the queue builders read only .va
  def __init__(self, va: int): self.va = va


def test_method_header_recipe():
  # docs/hw/NV.md §3: 5 incrementing dwords to host SEM_ADDR_LO (0x5C) on subchannel 0
  assert nv.header(nv.SecOp.INC, 0, 0x5C, 5) == 0x20050017
  assert nv.header(nv.SecOp.NON_INC, 1, 0x1B4, 3) == (3 << 29) | (3 << 16) | (1 << 13) | (0x1B4 >> 2)
  assert nv.header(nv.SecOp.IMMD, 4, 0x300, 0x182) >> 29 == 4
  with pytest.raises(ValueError, match="dword address"): nv.header(nv.SecOp.INC, 0, 0x5E, 1)
  with pytest.raises(ValueError, match="13 bits"): nv.header(nv.SecOp.INC, 0, 0x5C, 1 << 13)


def test_sem_execute_and_launch_dma_values():
  # docs/hw/NV.md §4.1 and §7: the encoded values of the field tables
  assert nv.SEM_RELEASE == 0x03100001 and nv.SEM_ACQUIRE == 0x01000003
  assert nv.CE_COPY == 0x182 and nv.CE_RELEASE == 0x14


def test_gp_entry_fields():
  e = nv.gp_entry(0x12_3456_7890 & ~3, 77)
  assert e & ((1 << 40) - 1) == 0x12_3456_7890 & ~3     # address bits 39:2 in place
  assert (e >> 42) & ((1 << 21) - 1) == 77               # LENGTH (dwords), bits 62:42
  assert (e >> 41) & 1 == 0 and e >> 63 == 0             # LEVEL MAIN, SYNC off
  lo, hi = struct.unpack("<II", struct.pack("<Q", e))
  assert lo & 0xFFFFFFFC == 0x34567890 and hi & 0xFF == 0x12 and (hi >> 10) & ((1 << 21) - 1) == 77   # as two dwords (§2.1)
  with pytest.raises(ValueError, match="aligned"): nv.gp_entry(0x1002, 1)


def test_compute_queue_signal_wait_timestamp_words():
  q = nv.NVComputeQueue().wait(_Sig(0x1_2345_6780), 7).signal(_Sig(0x1_0000_0010), (5 << 32) | 9).timestamp(_Sig(0x1_0000_0020))
  assert q.words == [0x20050017, 0x23456780, 0x1, 7, 0, 0x01000003,
                     0x20050017, 0x00000010, 0x1, 9, 5, 0x03100001,
                     0x20050017, 0x00000020, 0x1, 1, 0, 0x03100001]
  assert [c[0] for c in q.cmds] == ["wait", "signal", "timestamp"]
  with pytest.raises(ValueError, match="16-byte aligned"): nv.NVComputeQueue().signal(_Sig(0x1_0000_0008), 1)


def test_patch_signal_and_wait_values():
  q = nv.NVComputeQueue().wait(_Sig(0x1_0000_0000), 1).signal(_Sig(0x1_0000_0010), 2)
  q.update_wait(0, value=(3 << 32) | 4).update_signal(1, signal=_Sig(0x2_0000_0040), value=5)   # type: ignore[arg-type]
  assert q.words[3:5] == [4, 3] and q.words[7:11] == [0x40, 0x2, 5, 0]
  with pytest.raises(ValueError, match="is a wait, not a signal"): q.update_signal(0, value=1)
  c = nv.NVCopyQueue().signal(_Sig(0x3_0000_0100), 6)
  c.update_signal(0, signal=_Sig(0x4_0000_0200), value=8)   # type: ignore[arg-type]
  assert c.words == [0x20038090, 0x4, 0x200, 8, 0x200180C0, 0x14]
  with pytest.raises(ValueError, match="32-bit"): c.update_signal(0, value=1 << 32)


def test_copy_queue_words():
  q = nv.NVCopyQueue().wait(_Sig(0x1_0000_0000), 3).copy(0x2_0000_1000, 0x3_0000_2000, 4096).signal(_Sig(0x1_0000_0000), 4)
  assert q.words == [0x20050017, 0, 1, 3, 0, 0x01000003,                              # host acquire on the copy channel
                     0x20048100, 0x3, 0x2000, 0x2, 0x1000, 0x20018106, 4096, 0x200180C0, 0x182,   # OFFSET_IN/OUT, LINE_LENGTH_IN, LAUNCH_DMA
                     0x20038090, 0x1, 0x0, 4, 0x200180C0, 0x14]                   # SET_SEMAPHORE_A/B/PAYLOAD, four-word release
  with pytest.raises(ValueError, match="32-bit payloads"): nv.NVCopyQueue().signal(_Sig(0x1_0000_0000), 1 << 32)


def test_big_copies_split_into_chunks():
  q = nv.NVCopyQueue().copy(0x10_0000_0000, 0x20_0000_0000, 5 << 30)
  launches = [q.words[i + 1] for i, w in enumerate(q.words) if w == 0x20018106]
  assert launches == [1 << 31, 1 << 31, 1 << 30] and q.words.count(0x182) == 3
  assert q.words[q.words.index(0x20048100, 1) + 1:][:4] == [0x20, 1 << 31, 0x10, 1 << 31]   # second chunk starts 2 GiB on


def test_memory_barrier_words():
  assert nv.NVComputeQueue().memory_barrier().words == [0x2001001E, 1, 0x200125A6, 0x1011]
  assert nv.NVCopyQueue().memory_barrier().words == [0x2001001E, 1]


def test_qmd_field_positions():
  # byte offsets and bits from docs/hw/NV.md §6
  w = np.zeros(nv.QMD_DWORDS, np.uint32)
  for name, val in (("CTA_RASTER_WIDTH", 0x12345678), ("CTA_RASTER_HEIGHT", 0xABCD), ("CTA_RASTER_DEPTH", 3), ("CTA_THREAD_DIMENSION0", 1024),
                    ("CTA_THREAD_DIMENSION1", 2), ("CTA_THREAD_DIMENSION2", 64), ("QMD_MAJOR_VERSION", 3), ("SHARED_MEMORY_SIZE", 0x3FFFF),
                    ("CONSTANT_BUFFER_VALID(0)", 1), ("CONSTANT_BUFFER_ADDR_LOWER(0)", 0xDEADBEE0), ("CONSTANT_BUFFER_ADDR_UPPER(0)", 0x1F),
                    ("CONSTANT_BUFFER_SIZE_SHIFTED4(0)", 5), ("PROGRAM_ADDRESS_LOWER", 0xCAFE0000), ("PROGRAM_ADDRESS_UPPER", 0x7),
                    ("BARRIER_COUNT", 1), ("RELEASE1_ENABLE", 1), ("RELEASE0_PAYLOAD_UPPER", 9)):
    nv.qmd_set(w, name, val)
    assert nv.qmd_get(w, name) == val
  assert w[12] == 0x12345678 and w[13] == 0xABCD and w[14] == 3
  assert w[18] >> 16 == 1024 and w[18] & 0xFF == 0x30 and w[19] == (64 << 16) | 2
  assert w[17] == 0x3FFFF and w[20] == 1 and w[23] == 1 << 27
  assert w[32] == 0xDEADBEE0 and w[33] == (5 << 19) | 0x1F and w[48] == 0xCAFE0000 and w[49] == 7
  assert w[29] == 1 << 23 and w[27] == 9
  with pytest.raises(ValueError, match="CTA_RASTER_HEIGHT is 16 bits"): nv.qmd_set(w, "CTA_RASTER_HEIGHT", 65536)


def test_program_image():
  img = image.make_image('{"x": 1}')
  assert img[:4] == b"RGL1" and struct.unpack_from("<I", img, 4)[0] == 8 and image.read_image(img) == b'{"x": 1}'
  with pytest.raises(ValueError, match="magic"): image.read_image(b"ELF\x7f" + img[4:])
  with pytest.raises(ValueError, match="length field"): image.read_image(img[:-1])
  with pytest.raises(ValueError, match="not a serialized program"): image.image_info(image.make_image("{"))
  with pytest.raises(ValueError, match="not \\[op, dtype"): image.image_info(image.make_image('{"name": "k", "uops": [1]}'))


def test_image_info_counts_arguments_and_shared_memory():
  from refgrad.codegen import to_linear
  from refgrad.dtype import dtypes
  from refgrad.uop.ops import Ops, UOp
  g0, g1 = UOp.define_global(0, dtypes.float32, 16), UOp.define_global(1, dtypes.float32, 16)
  n = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 1, 16))
  i = UOp.range(16, 0)
  sink = UOp(Ops.SINK, dtypes.void, (g0.store(i, g1.load(i) * n.cast(dtypes.float32)),))
  src = nv.NVRenderer().render("k", to_linear(sink, nv.NVRenderer()))
  info = image.image_info(nv.NVCompiler().compile(src))
  assert (info.name, info.nbufs, info.nvars, info.shared, info.stored, info.loaded) == ("k", 2, 1, 0, {0}, {1})


def test_kernargs_layout():
  host = np.zeros(64, np.uint8)
  a = KernArgs(0x1000, host, 2, 2).fill([0x1_2345_6789, 0xAB_0000_0000], [7, -1])
  assert host[:24].tobytes() == struct.pack("<QQii", 0x1_2345_6789, 0xAB_0000_0000, 7, -1)
  a.set_buffer(1, 0x42)
  a.set_var(0, 9)
  assert a.buffers() == (0x1_2345_6789, 0x42) and host[:24].tobytes() == struct.pack("<QQii", 0x1_2345_6789, 0x42, 9, -1)
  with pytest.raises(ValueError, match="2 buffers and 2 variables"): a.fill([1], [])


def test_no_driver_without_mockgpu(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.delenv("MOCKGPU", raising=False)
  with pytest.raises(RuntimeError, match="set MOCKGPU=1"): open_driver("NV", 0)
  with pytest.raises(RuntimeError, match="set MOCKGPU=1"): nv.make_device("NV:5")


def test_device_names():
  from refgrad.device import Device
  assert Device.canonicalize("nv:0") == "NV" and Device.canonicalize("NV:1") == "NV:1" and Device.canonicalize("nv") == "NV"
  assert device_index("NV") == 0 and device_index("NV:1") == 1


def test_fault_text_names_every_field():
  f = GPUFault(device="NV:0", engine="host", queue="NV:0 compute", gp_entry=3, dword_offset=5, words=(0x20050017, 1), address=0x1000,
               kernel=None, uop=None, what="unknown method")
  g = f.replace(kernel="E_4")
  for s in ("NV:0", "host", "unknown method", "NV:0 compute", "GP entry 3", "dword 5", "0x20050017", "0x1000"): assert s in str(g)
  assert "kernel E_4" in str(g) and "kernel" not in str(f)
