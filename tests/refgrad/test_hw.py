"""The hardware tables (refgrad/hw): their shape (fields inside dwords, no overlaps, unique offsets), the one bit-field
helper, the program-image container, and the derived rules written once (local-memory layout, launch sizes). The values
themselves are checked against hand-written dword streams (tests/emulators, tests/runtime/test_nv_encode.py)."""
from __future__ import annotations

import pytest

from refgrad.dtype import dtypes
from refgrad.hw import amd as A
from refgrad.hw import bits, image
from refgrad.hw import nv as NV
from refgrad.target import launch_sizes, local_bytes, local_end
from refgrad.uop.ops import Ops, UOp


def _no_overlap(table: dict[str, bits.Field], what: str) -> None:
  seen: dict[int, str] = {}
  for name, (hi, lo) in table.items():
    assert hi >= lo, f"{what}.{name}: hi {hi} < lo {lo}"
    for b in range(lo, hi + 1):
      assert b not in seen, f"{what}: {name} and {seen[b]} share bit {b}"
      seen[b] = name


def test_qmd_fields_lie_in_one_dword_and_do_not_overlap():
  assert all(hi // 32 == lo // 32 and hi < 32 * NV.QMD_DWORDS for hi, lo in NV.QMD.values())
  _no_overlap(NV.QMD, "QMD")
  rows = {name: (dw, lo, mask) for name, dw, lo, mask in bits.dword_rows(NV.QMD)}
  assert rows["CTA_THREAD_DIMENSION0"] == (18, 16, 0xFFFF) and rows["CONSTANT_BUFFER_SIZE_SHIFTED4(0)"] == (33, 19, 0x1FFF)
  assert rows["RELEASE2_PAYLOAD_UPPER"] == (55, 0, 0xFFFFFFFF)   # docs/hw/NV.md §6: RELEASE2 at dword 52


def test_field_tables_do_not_overlap():
  for name, t in {"SEM_EXECUTE": NV.SEM_EXECUTE, "CE_LAUNCH_DMA": NV.CE_LAUNCH_DMA, "RELEASE_MEM_DW1": A.RELEASE_MEM_DW1,
                  "RELEASE_MEM_DW2": A.RELEASE_MEM_DW2, "GCR_CNTL": A.GCR_CNTL, **A.FIELDS}.items():
    _no_overlap(t, name)


def test_method_offsets_and_registers_are_unique_dword_addresses():
  for name, t in {"HOST": NV.HOST, "COMPUTE": NV.COMPUTE, "COPY": NV.COPY}.items():
    assert len(set(t.values())) == len(t), f"{name}: two methods share an offset"
    assert all(o % 4 == 0 for o in t.values()), name
  assert all(o < NV.HOST_METHODS_END for o in NV.HOST.values())
  assert all(o >= NV.HOST_METHODS_END for n, o in {**NV.COMPUTE, **NV.COPY}.items() if n != "SET_OBJECT")
  assert len(set(A.SH_REGS.values())) == len(A.SH_REGS) and len(set(A.PM4.values())) == len(A.PM4) and len(set(A.SDMA.values())) == len(A.SDMA)


def test_bit_field_helper():
  t = {"LO": (3, 0), "HI": (31, 28)}
  assert bits.pack(t, LO=0xA, HI=0x5) == 0x5000000A and bits.unpack(0x5000000A, t) == {"LO": 0xA, "HI": 0x5}
  with pytest.raises(ValueError, match=r"RSRC2\.LDS_SIZE is 9 bits: 512 does not fit"): bits.pack(A.RSRC2, "RSRC2.", LDS_SIZE=512)
  words = [0] * 4
  bits.set_words(words, "X", (47, 40), 0xAB)
  assert words == [0, 0xAB00, 0, 0] and bits.get_words(words, (47, 40)) == 0xAB
  with pytest.raises(AssertionError, match="straddles"): bits.dword_rows({"BAD": (33, 30)})


def test_program_image_container():
  img = image.pack(image.PTX, image.ptx_payload(".entry k() {}", "k"))
  assert img[:4] == b"PTX1" and image.payload_bytes(img) == len(img) - image.HEADER_BYTES
  assert image.read_ptx_payload(image.unpack(img, image.PTX)) == (".entry k() {}", "k")
  with pytest.raises(ValueError, match="magic"): image.unpack(img, image.LINEAR)
  with pytest.raises(ValueError, match="length field"): image.unpack(img[:-1], image.PTX)
  with pytest.raises(ValueError, match="length field"): image.unpack(img + b"x", image.PTX)
  assert image.split(image.pack(image.CODE_OBJECT, b"{}") + b"ELF", image.CODE_OBJECT) == (b"{}", b"ELF")


def test_local_memory_layout_rule():
  # locals in program order, each aligned to its scalar size: 3 bytes of uint8, then a float32 at offset 4
  assert local_end(3, dtypes.float32.ptr(2, local=True)) == 4 + 8
  assert local_bytes([dtypes.uint8.ptr(3, local=True), dtypes.float32.ptr(2, local=True), dtypes.half.ptr(1, local=True)]) == 14


def test_launch_sizes_of_specials():
  def sp(name: str, size: int) -> UOp: return UOp(Ops.SPECIAL, dtypes.int32, (), (name, size))
  assert launch_sizes([sp("gidx0", 5), sp("lidx1", 4), sp("gidx2", 3)]) == ((5, 1, 3), (1, 4, 1))
  assert launch_sizes([sp("idx0", 1000)]) == ((1000, 1, 1), (1, 1, 1))
  assert launch_sizes([]) == ((1, 1, 1), (1, 1, 1))
