"""QMD V03_00 (256 bytes, 64 dwords): the field table (name, dword, hi, lo) from NV.md §6, decoding and the checks a
launch needs (version, dims, constant buffer 0)."""
from __future__ import annotations

from collections.abc import Sequence

from emulators.fault import Fault

QMD_BYTES = 256


def _release(i: int, dw: int) -> list[tuple[str, int, int, int]]:
  p = f"RELEASE{i}_"
  return [(p + "ADDRESS_LOWER", dw, 31, 0), (p + "ADDRESS_UPPER", dw + 1, 7, 0), (p + "MEMBAR_TYPE", dw + 1, 19, 19),
          (p + "REDUCTION_OP", dw + 1, 22, 20), (p + "ENABLE", dw + 1, 23, 23), (p + "REDUCTION_FORMAT", dw + 1, 25, 24),
          (p + "REDUCTION_ENABLE", dw + 1, 26, 26), (p + "PAYLOAD64B", dw + 1, 29, 29), (p + "STRUCTURE_SIZE", dw + 1, 31, 30),
          (p + "PAYLOAD_LOWER", dw + 2, 31, 0), (p + "PAYLOAD_UPPER", dw + 3, 31, 0)]

FIELDS: tuple[tuple[str, int, int, int], ...] = (
  ("QMD_GROUP_ID", 4, 5, 0), ("SM_GLOBAL_CACHING_ENABLE", 4, 6, 6),
  ("INVALIDATE_TEXTURE_HEADER_CACHE", 5, 26, 26), ("INVALIDATE_TEXTURE_SAMPLER_CACHE", 5, 27, 27),
  ("INVALIDATE_TEXTURE_DATA_CACHE", 5, 28, 28), ("INVALIDATE_SHADER_DATA_CACHE", 5, 29, 29),
  ("INVALIDATE_INSTRUCTION_CACHE", 5, 30, 30), ("INVALIDATE_SHADER_CONSTANT_CACHE", 5, 31, 31),
  ("PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED", 8, 31, 0),
  ("CWD_MEMBAR_TYPE", 11, 17, 16), ("API_VISIBLE_CALL_LIMIT", 11, 26, 26), ("SAMPLER_INDEX", 11, 30, 30),
  ("CTA_RASTER_WIDTH", 12, 31, 0), ("CTA_RASTER_HEIGHT", 13, 15, 0), ("CTA_RASTER_DEPTH", 14, 15, 0),
  ("DEPENDENT_QMD0_POINTER", 15, 31, 0), ("DEPENDENT_QMD0_ENABLE", 16, 0, 0), ("DEPENDENT_QMD0_ACTION", 16, 3, 1),
  ("DEPENDENT_QMD0_PREFETCH", 16, 4, 4), ("DEPENDENT_QMD1_ENABLE", 16, 5, 5), ("DEPENDENT_QMD1_ACTION", 16, 8, 6),
  ("DEPENDENT_QMD1_PREFETCH", 16, 9, 9),
  ("SHARED_MEMORY_SIZE", 17, 17, 0), ("MIN_SM_CONFIG_SHARED_MEM_SIZE", 17, 23, 18), ("MAX_SM_CONFIG_SHARED_MEM_SIZE", 17, 30, 25),
  ("QMD_VERSION", 18, 3, 0), ("QMD_MAJOR_VERSION", 18, 7, 4),
  ("CTA_THREAD_DIMENSION0", 18, 31, 16), ("CTA_THREAD_DIMENSION1", 19, 15, 0), ("CTA_THREAD_DIMENSION2", 19, 31, 16),
  *((f"CONSTANT_BUFFER_VALID{i}", 20, i, i) for i in range(8)),
  ("REGISTER_COUNT_V", 20, 16, 8), ("TARGET_SM_CONFIG_SHARED_MEM_SIZE", 20, 22, 17),
  ("SHADER_LOCAL_MEMORY_LOW_SIZE", 23, 23, 0), ("BARRIER_COUNT", 23, 31, 27),
  *_release(0, 24), *_release(1, 28),
  *(f for i in range(8) for f in ((f"CONSTANT_BUFFER_ADDR_LOWER{i}", 32 + 2 * i, 31, 0), (f"CONSTANT_BUFFER_ADDR_UPPER{i}", 33 + 2 * i, 16, 0),
                                  (f"CONSTANT_BUFFER_PREFETCH_POST{i}", 33 + 2 * i, 17, 17), (f"CONSTANT_BUFFER_INVALIDATE{i}", 33 + 2 * i, 18, 18),
                                  (f"CONSTANT_BUFFER_SIZE_SHIFTED4_{i}", 33 + 2 * i, 31, 19))),
  ("PROGRAM_ADDRESS_LOWER", 48, 31, 0), ("PROGRAM_ADDRESS_UPPER", 49, 16, 0),
  ("SHADER_LOCAL_MEMORY_HIGH_SIZE", 50, 23, 0),
  ("PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED", 51, 8, 0), ("PROGRAM_PREFETCH_SIZE", 51, 17, 9), ("PROGRAM_PREFETCH_TYPE", 51, 19, 18),
  ("SASS_VERSION", 51, 31, 24),
  *_release(2, 52),
)
_DECODE = tuple((name, dw, lo, (1 << (hi - lo + 1)) - 1) for name, dw, hi, lo in FIELDS)

MAX_BLOCK, MAX_BLOCK_THREADS, MAX_GRID = (1024, 1024, 64), 1024, (2**31 - 1, 65535, 65535)


def decode(words: Sequence[int], fields: tuple[tuple[str, int, int, int], ...] = _DECODE) -> dict[str, int]:
  """The fields (default: every field of the table) from the QMD's 64 dwords."""
  return {name: (words[dw] >> lo) & mask for name, dw, lo, mask in fields}

def subset(*prefixes: str) -> tuple[tuple[str, int, int, int], ...]:
  """The decoder rows of the fields whose names start with one of `prefixes` (a launch reads a few dozen of ~150)."""
  return tuple(f for f in _DECODE if f[0].startswith(prefixes))

LAUNCH_FIELDS = subset("QMD_MAJOR_VERSION", "QMD_VERSION", "CTA_", "CONSTANT_BUFFER_VALID0", "CONSTANT_BUFFER_ADDR_LOWER0",
                       "CONSTANT_BUFFER_ADDR_UPPER0", "CONSTANT_BUFFER_SIZE_SHIFTED4_0", "PROGRAM_ADDRESS_", "SHARED_MEMORY_SIZE",
                       "RELEASE0_ENABLE", "RELEASE1_ENABLE", "RELEASE2_ENABLE", "DEPENDENT_QMD0_")
RELEASE_FIELDS = tuple(subset(f"RELEASE{i}_") for i in range(3))

def encode(fields: dict[str, int]) -> list[int]:
  """The 64 dwords holding `fields` (the rest zero); the inverse of decode, for tests and tools."""
  words = [0] * 64
  spec = {name: (dw, lo, mask) for name, dw, lo, mask in _DECODE}
  for name, v in fields.items():
    dw, lo, mask = spec[name]
    if not 0 <= v <= mask: raise ValueError(f"QMD field {name} = {v} does not fit its {mask.bit_length()} bits")
    words[dw] |= v << lo
  return words


def address(q: dict[str, int], lower: str, upper: str) -> int: return (q[upper] << 32) | q[lower]

def check(q: dict[str, int], qmd_va: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(grid, block) of a launchable QMD; a fault naming the field otherwise."""
  where = f"QMD at 0x{qmd_va:x}"
  if q["QMD_MAJOR_VERSION"] != 3 or q["QMD_VERSION"] != 0:
    raise Fault(f"{where} has version {q['QMD_MAJOR_VERSION']}.{q['QMD_VERSION']} (QMD_MAJOR_VERSION.QMD_VERSION); the mock decodes V03_00 only",
                "compute", qmd_va)
  grid = (q["CTA_RASTER_WIDTH"], q["CTA_RASTER_HEIGHT"], q["CTA_RASTER_DEPTH"])
  block = (q["CTA_THREAD_DIMENSION0"], q["CTA_THREAD_DIMENSION1"], q["CTA_THREAD_DIMENSION2"])
  for what, dims, lim, names in (("grid", grid, MAX_GRID, "CTA_RASTER_WIDTH/HEIGHT/DEPTH"), ("block", block, MAX_BLOCK, "CTA_THREAD_DIMENSION0/1/2")):
    if any(d < 1 or d > m for d, m in zip(dims, lim)):
      raise Fault(f"{where} has invalid {what} dims {dims} ({names}): each must be 1..{lim}", "compute", qmd_va)
  if block[0] * block[1] * block[2] > MAX_BLOCK_THREADS:
    raise Fault(f"{where} has a block of {block[0] * block[1] * block[2]} threads {block}, more than {MAX_BLOCK_THREADS}", "compute", qmd_va)
  if not q["CONSTANT_BUFFER_VALID0"]: raise Fault(f"{where}: constant buffer 0 (the kernel parameters) is not valid (CONSTANT_BUFFER_VALID0 = 0)",
                                                  "compute", qmd_va)
  return grid, block
