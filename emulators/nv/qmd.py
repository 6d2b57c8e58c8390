"""QMD V03_00 (256 bytes, 64 dwords): decoding with the field table of refgrad/hw/nv.py (docs/hw/NV.md §6) and the checks
a launch needs (version, dims, constant buffer 0)."""
from __future__ import annotations

from collections.abc import Sequence

from emulators.fault import Fault
from refgrad.hw import bits
from refgrad.hw import nv as NV
from refgrad.target import CUDA

QMD_BYTES = NV.QMD_BYTES
# (name, dword, hi, lo) of every field: the table in the dword/bit convention of the decoder
FIELDS: tuple[tuple[str, int, int, int], ...] = tuple((name, lo // 32, hi % 32, lo % 32) for name, (hi, lo) in NV.QMD.items())
_DECODE = bits.dword_rows(NV.QMD)

# what a launch may ask for: the CUDA target's limits (compute capability 8.x), written once in refgrad/target.py
MAX_BLOCK, MAX_BLOCK_THREADS, MAX_GRID = CUDA.max_block_dims, CUDA.max_threads_per_block, CUDA.max_grid_dims


def decode(words: Sequence[int], fields: tuple[tuple[str, int, int, int], ...] = _DECODE) -> dict[str, int]:
  """The fields (default: every field of the table) from the QMD's 64 dwords."""
  return {name: (words[dw] >> lo) & mask for name, dw, lo, mask in fields}

def subset(*prefixes: str) -> tuple[tuple[str, int, int, int], ...]:
  """The decoder rows of the fields whose names start with one of `prefixes` (a launch reads a few dozen of ~150)."""
  return tuple(f for f in _DECODE if f[0].startswith(prefixes))

LAUNCH_FIELDS = subset("QMD_MAJOR_VERSION", "QMD_VERSION", "CTA_", "CONSTANT_BUFFER_VALID(0)", "CONSTANT_BUFFER_ADDR_LOWER(0)",
                       "CONSTANT_BUFFER_ADDR_UPPER(0)", "CONSTANT_BUFFER_SIZE_SHIFTED4(0)", "PROGRAM_ADDRESS_", "SHARED_MEMORY_SIZE",
                       "RELEASE0_ENABLE", "RELEASE1_ENABLE", "RELEASE2_ENABLE", "DEPENDENT_QMD0_")
RELEASE_FIELDS = tuple(subset(f"RELEASE{i}_") for i in range(3))

def encode(fields: dict[str, int]) -> list[int]:
  """The 64 dwords holding `fields` (the rest zero); the inverse of decode, for tests and tools."""
  words = [0] * NV.QMD_DWORDS
  for name, v in fields.items(): bits.set_words(words, f"QMD field {name}", NV.QMD[name], v)
  return words


def address(q: dict[str, int], lower: str, upper: str) -> int: return (q[upper] << 32) | q[lower]

def check(q: dict[str, int], qmd_va: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(grid, block) of a launchable QMD; a fault naming the field otherwise."""
  where = f"QMD at 0x{qmd_va:x}"
  if q["QMD_MAJOR_VERSION"] != NV.QMD_MAJOR_VERSION or q["QMD_VERSION"] != NV.QMD_VERSION:
    raise Fault(f"{where} has version {q['QMD_MAJOR_VERSION']}.{q['QMD_VERSION']} (QMD_MAJOR_VERSION.QMD_VERSION); the mock decodes V03_00 only",
                "compute", qmd_va)
  grid = (q["CTA_RASTER_WIDTH"], q["CTA_RASTER_HEIGHT"], q["CTA_RASTER_DEPTH"])
  block = (q["CTA_THREAD_DIMENSION0"], q["CTA_THREAD_DIMENSION1"], q["CTA_THREAD_DIMENSION2"])
  for what, dims, lim, names in (("grid", grid, MAX_GRID, "CTA_RASTER_WIDTH/HEIGHT/DEPTH"), ("block", block, MAX_BLOCK, "CTA_THREAD_DIMENSION0/1/2")):
    if any(d < 1 or d > m for d, m in zip(dims, lim)):
      raise Fault(f"{where} has invalid {what} dims {dims} ({names}): each must be 1..{lim}", "compute", qmd_va)
  if block[0] * block[1] * block[2] > MAX_BLOCK_THREADS:
    raise Fault(f"{where} has a block of {block[0] * block[1] * block[2]} threads {block}, more than {MAX_BLOCK_THREADS}", "compute", qmd_va)
  if not q["CONSTANT_BUFFER_VALID(0)"]: raise Fault(f"{where}: constant buffer 0 (the kernel parameters) is not valid (CONSTANT_BUFFER_VALID(0) = 0)",
                                                  "compute", qmd_va)
  return grid, block
