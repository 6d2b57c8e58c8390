"""RDNA3 (gfx11) instruction encodings: one row per format (how the first dword names it, its size) and one row per
field (bit range, counted over the instruction's 32- or 64-bit base word). Facts: AMD "RDNA3 Instruction Set
Architecture" reference guide, the "Microcode Formats" chapter; LLVM AMDGPU (SIInstrFormats.td, *Instructions.td, gfx11
encodings) -- see docs/hw/rdna3.md."""
from __future__ import annotations

from typing import NamedTuple

from refgrad.hw import bits


class Format(NamedTuple):
  name: str
  hi: int            # the identifying bits of dword 0 are [31:hi] ...
  value: int         # ... and must equal this
  dwords: int        # base size (a literal constant adds one dword)
  fields: dict[str, tuple[int, int]]   # field -> (hi, lo) in the base word (dword 1 starts at bit 32)


# Order matters: the longer identifying prefixes first (SOP1/SOPC/SOPP are special cases of SOPK's and SOP2's prefixes).
FORMATS: tuple[Format, ...] = (
  Format("SOP1", 23, 0b101111101, 1, {"sdst": (22, 16), "op": (15, 8), "ssrc0": (7, 0)}),
  Format("SOPC", 23, 0b101111110, 1, {"op": (22, 16), "ssrc1": (15, 8), "ssrc0": (7, 0)}),
  Format("SOPP", 23, 0b101111111, 1, {"op": (22, 16), "simm16": (15, 0)}),
  Format("VOP3P", 24, 0b11001100, 2, {"vdst": (7, 0), "neg_hi": (10, 8), "op_sel": (13, 11), "op_sel_hi2": (14, 14), "clamp": (15, 15),
                                     "op": (22, 16), "src0": (40, 32), "src1": (49, 41), "src2": (58, 50), "op_sel_hi": (60, 59), "neg": (63, 61)}),
  Format("VINTERP", 24, 0b11001101, 2, {"op": (22, 16)}),
  Format("LDSDIR", 24, 0b11001110, 1, {"op": (21, 20)}),
  Format("VOP1", 25, 0b0111111, 1, {"src0": (8, 0), "op": (16, 9), "vdst": (24, 17)}),
  Format("VOPC", 25, 0b0111110, 1, {"src0": (8, 0), "vsrc1": (16, 9), "op": (24, 17)}),
  Format("VOP3", 26, 0b110101, 2, {"vdst": (7, 0), "abs": (10, 8), "sdst": (14, 8), "op_sel": (14, 11), "clamp": (15, 15), "op": (25, 16),
                                  "src0": (40, 32), "src1": (49, 41), "src2": (58, 50), "omod": (60, 59), "neg": (63, 61)}),
  Format("VOPD", 26, 0b110010, 2, {"src0x": (8, 0), "vsrc1x": (16, 9), "opy": (21, 17), "opx": (25, 22),
                                  "src0y": (40, 32), "vsrc1y": (48, 41), "vdsty": (55, 49), "vdstx": (63, 56)}),
  Format("SMEM", 26, 0b111101, 2, {"sbase": (5, 0), "sdata": (12, 6), "dlc": (13, 13), "glc": (14, 14), "op": (25, 18),
                                  "offset": (52, 32), "soffset": (63, 57)}),
  Format("DS", 26, 0b110110, 2, {"offset0": (7, 0), "offset1": (15, 8), "gds": (17, 17), "op": (25, 18),
                                "addr": (39, 32), "data0": (47, 40), "data1": (55, 48), "vdst": (63, 56)}),
  Format("FLAT", 26, 0b110111, 2, {"offset": (12, 0), "dlc": (13, 13), "glc": (14, 14), "slc": (15, 15), "seg": (17, 16), "op": (24, 18),
                                  "addr": (39, 32), "data": (47, 40), "saddr": (54, 48), "sve": (55, 55), "vdst": (63, 56)}),
  Format("MUBUF", 26, 0b111000, 2, {"op": (25, 18)}),
  Format("MTBUF", 26, 0b111010, 2, {"op": (18, 15)}),
  Format("MIMG", 26, 0b111100, 2, {"op": (25, 18)}),
  Format("EXP", 26, 0b111110, 2, {"target": (9, 4)}),
  Format("SOPK", 28, 0b1011, 1, {"simm16": (15, 0), "sdst": (22, 16), "op": (27, 23)}),
  Format("SOP2", 30, 0b10, 1, {"ssrc0": (7, 0), "ssrc1": (15, 8), "sdst": (22, 16), "op": (29, 23)}),
  Format("VOP2", 31, 0b0, 1, {"src0": (8, 0), "vsrc1": (16, 9), "vdst": (24, 17), "op": (30, 25)}),
)
# encodings refgrad's kernels never need: recognized (so a fault names them) but not executed
UNSUPPORTED_FORMATS = frozenset({"VINTERP", "LDSDIR", "MTBUF", "MIMG", "EXP"})


def identify(w0: int) -> Format | None:
  """The format whose identifying bits dword 0 carries (None: no RDNA3 encoding starts like this)."""
  for f in FORMATS:
    if w0 >> f.hi == f.value: return f
  return None


field = bits.get   # field(word, (hi, lo)): the one bit-field helper (refgrad/hw/bits.py)
