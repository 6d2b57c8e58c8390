"""NVIDIA Ampere command formats, as tables (docs/hw/NV.md; its §0 names the public source of each): classes and
subchannels (§1), GP entries and USERD (§2), method headers (§3), host / compute / copy methods and their fields
(§4, §5, §7), QMD V03_00 (§6). refgrad/runtime/ops_nv.py encodes from these, emulators/nv/ decodes with them."""
from __future__ import annotations

from enum import IntEnum

from refgrad.hw.bits import Field

# ---- §1 classes and subchannels ---------------------------------------------------------------------------------------
GPFIFO_CLASS = 0xC56F
CLASS_NAMES = {0xC56F: "AMPERE_CHANNEL_GPFIFO_A", 0xC6C0: "AMPERE_COMPUTE_A", 0xC7C0: "AMPERE_COMPUTE_B",
               0xC6B5: "AMPERE_DMA_COPY_A", 0xC7B5: "AMPERE_DMA_COPY_B"}
COMPUTE_CLASS, COPY_CLASS = 0xC6C0, 0xC6B5   # what the runtime binds
COMPUTE_CLASSES, COPY_CLASSES = (0xC6C0, 0xC7C0), (0xC6B5, 0xC7B5)
SUBCH_HOST, SUBCH_COMPUTE, SUBCH_COPY = 0, 1, 4
HOST_METHODS_END = 0x100   # a method below this byte address is a host method, whatever the subchannel
SET_OBJECT = {"CLASS": (15, 0), "ENGINE": (20, 16)}

# ---- §2 GP entries, USERD -------------------------------------------------------------------------------------------
GP_ENTRY_BYTES = 8
# one GP entry as a 64-bit value (§2.1): address bits 39:2 at bits 39:2; OPCODE is GET_HI's bits, read when LENGTH is 0
GP_ENTRY: dict[str, Field] = {"ADDRESS": (39, 2), "OPCODE": (39, 32), "LEVEL": (41, 41), "LENGTH": (62, 42), "SYNC": (63, 63)}
GP_OPCODES = {0: "NOP", 1: "ILLEGAL", 2: "GP_CRC", 3: "PB_CRC"}
USERD_BYTES = 512
USERD = {"REFERENCE": 0x48, "GP_GET": 0x88, "GP_PUT": 0x8C}   # byte offsets (§2.3)

# ---- §3 method headers -----------------------------------------------------------------------------------------------
HEADER: dict[str, Field] = {"ADDRESS": (11, 0), "SUBCHANNEL": (15, 13), "COUNT": (28, 16), "TERT_OP": (17, 16), "SEC_OP": (31, 29)}

class SecOp(IntEnum):
  GRP0 = 0
  INC = 1
  GRP2 = 2
  NON_INC = 3
  IMMD = 4
  ONE_INC = 5
  RESERVED = 6
  END_PB_SEGMENT = 7
SEC_OP_NAMES = {0: "GRP0", 1: "INC_METHOD", 2: "GRP2", 3: "NON_INC_METHOD", 4: "IMMD_DATA_METHOD", 5: "ONE_INC", 6: "reserved",
                7: "END_PB_SEGMENT"}

# ---- §4 host methods (class C56F) -----------------------------------------------------------------------------------
HOST: dict[str, int] = {
  "SET_OBJECT": 0x000, "NOP": 0x008, **{f"SEMAPHORE{c}": 0x010 + 4 * i for i, c in enumerate("ABCD")}, "NON_STALL_INTERRUPT": 0x020,
  "MEM_OP_A": 0x028, "MEM_OP_B": 0x02C, "MEM_OP_C": 0x030, "MEM_OP_D": 0x034, "SET_REFERENCE": 0x050,
  "SEM_ADDR_LO": 0x05C, "SEM_ADDR_HI": 0x060, "SEM_PAYLOAD_LO": 0x064, "SEM_PAYLOAD_HI": 0x068, "SEM_EXECUTE": 0x06C, "WFI": 0x078,
}
SEM_ADDR_HI: dict[str, Field] = {"ADDRESS_HI": (7, 0)}
SEM_EXECUTE: dict[str, Field] = {"OPERATION": (2, 0), "ACQUIRE_SWITCH_TSG": (12, 12), "RELEASE_WFI": (20, 20), "PAYLOAD_SIZE": (24, 24),
                                 "RELEASE_TIMESTAMP": (25, 25), "REDUCTION": (30, 27), "REDUCTION_FORMAT": (31, 31)}
SEM_OP = {"ACQUIRE": 0, "RELEASE": 1, "ACQ_STRICT_GEQ": 2, "ACQ_CIRC_GEQ": 3, "ACQ_AND": 4, "ACQ_NOR": 5, "REDUCTION": 6}
SEM_REDUCTIONS = ("IMIN", "IMAX", "IXOR", "IAND", "IOR", "IADD", "INC", "DEC")   # SEM_EXECUTE REDUCTION and CE SEMAPHORE_REDUCTION
MEM_OP_D: dict[str, Field] = {"OPERATION": (31, 27)}
MEM_OPS = {5: "MEMBAR", 9: "MMU_TLB_INVALIDATE", 0xE: "L2_SYSMEM_INVALIDATE", 0x10: "L2_FLUSH_DIRTY"}

# ---- §5 compute methods (class C6C0 / C7C0) ---------------------------------------------------------------------------
COMPUTE: dict[str, int] = {
  "SET_OBJECT": 0x0000, "NO_OPERATION": 0x0100, "WAIT_FOR_IDLE": 0x0110, "PM_TRIGGER": 0x0140,
  "LINE_LENGTH_IN": 0x0180, "LINE_COUNT": 0x0184, "OFFSET_OUT_UPPER": 0x0188, "OFFSET_OUT": 0x018C,
  "LAUNCH_DMA": 0x01B0, "LOAD_INLINE_DATA": 0x01B4, "INVALIDATE_SHADER_CACHES": 0x021C, "SET_QMD_VERSION": 0x0288,
  "INVALIDATE_SKED_CACHES": 0x0298, "SET_SHADER_SHARED_MEMORY_WINDOW_A": 0x02A0, "SET_SHADER_SHARED_MEMORY_WINDOW_B": 0x02A4,
  "SEND_PCAS_A": 0x02B4, "SEND_PCAS_B": 0x02B8, "SEND_SIGNALING_PCAS_B": 0x02BC, "SEND_SIGNALING_PCAS2_B": 0x02C0,
  "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A": 0x02E4, "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B": 0x02E8,
  "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C": 0x02EC, "SET_SPA_VERSION": 0x0310,
  "SET_INLINE_QMD_ADDRESS_A": 0x0318, "SET_INLINE_QMD_ADDRESS_B": 0x031C, "LOAD_INLINE_QMD_DATA": 0x0320,   # (i): + 4 * i, i < 64
  "SET_SHADER_LOCAL_MEMORY_A": 0x0790, "SET_SHADER_LOCAL_MEMORY_B": 0x0794,
  "SET_SHADER_LOCAL_MEMORY_WINDOW_A": 0x07B0, "SET_SHADER_LOCAL_MEMORY_WINDOW_B": 0x07B4,
  "INVALIDATE_SHADER_CACHES_NO_WFI": 0x1698,
  "SET_REPORT_SEMAPHORE_A": 0x1B00, "SET_REPORT_SEMAPHORE_B": 0x1B04, "SET_REPORT_SEMAPHORE_C": 0x1B08, "SET_REPORT_SEMAPHORE_D": 0x1B0C,
}
INLINE_LAUNCH_DMA: dict[str, Field] = {"DST_MEMORY_LAYOUT": (0, 0), "REDUCTION_ENABLE": (1, 1), "REDUCTION_FORMAT": (3, 2),
                                       "COMPLETION_TYPE": (5, 4), "SYSMEMBAR_DISABLE": (6, 6)}   # §5.1
INLINE_COMPLETION = {"FLUSH_DISABLE": 0, "FLUSH_ONLY": 1, "RELEASE_SEMAPHORE": 2}
INVALIDATE_NO_WFI: dict[str, Field] = {"INSTRUCTION": (0, 0), "GLOBAL_DATA": (4, 4), "CONSTANT": (12, 12)}
SEND_SIGNALING_PCAS_B: dict[str, Field] = {"INVALIDATE": (0, 0), "SCHEDULE": (1, 1)}
SEND_SIGNALING_PCAS2_B: dict[str, Field] = {"PCAS_ACTION": (3, 0)}
# PCAS_ACTION -> (name, launches the QMD; None: a queue-mode action)
PCAS_ACTIONS: dict[int, tuple[str, bool | None]] = {
  0: ("NOP", False), 1: ("INVALIDATE", False), 2: ("SCHEDULE", True), 3: ("INVALIDATE_COPY_SCHEDULE", True), 6: ("INCREMENT_PUT", None),
  7: ("DECREMENT_DEPENDENCE", None), 8: ("PREFETCH", False), 9: ("PREFETCH_SCHEDULE", True), 0xA: ("INVALIDATE_PREFETCH_COPY_SCHEDULE", True),
  0xB: ("INVALIDATE_PREFETCH_COPY_FORCE_REQUIRE_SCHEDULING", True)}
PCAS_PREFETCH_SCHEDULE = 9
QMD_ADDRESS_SHIFT = 8   # SEND_PCAS_A, SET_INLINE_QMD_ADDRESS_A/B and DEPENDENT_QMDn_POINTER hold a QMD address >> 8 (256-byte aligned)
SET_REPORT_SEMAPHORE_D: dict[str, Field] = {"OPERATION": (1, 0), "STRUCTURE_SIZE": (28, 28)}
ADDRESS_UPPER: dict[str, Field] = {"UPPER": (16, 0)}   # the *_UPPER / *_A halves of 49-bit addresses (bits 48:32)

# ---- §6 QMD V03_00: field -> (hi, lo) counted across its 64 dwords ---------------------------------------------------
QMD_DWORDS = 64
QMD_BYTES = 4 * QMD_DWORDS

def _release(r: int, base: int) -> dict[str, Field]:
  """RELEASEr: the same layout at bit `base` (RELEASE0 768, RELEASE1 896, RELEASE2 1664)."""
  return {f"RELEASE{r}_{k}": (hi + base, lo + base) for k, (hi, lo) in {
    "ADDRESS_LOWER": (31, 0), "ADDRESS_UPPER": (39, 32), "MEMBAR_TYPE": (51, 51), "REDUCTION_OP": (54, 52), "ENABLE": (55, 55),
    "REDUCTION_FORMAT": (57, 56), "REDUCTION_ENABLE": (58, 58), "PAYLOAD64B": (61, 61), "STRUCTURE_SIZE": (63, 62),
    "PAYLOAD_LOWER": (95, 64), "PAYLOAD_UPPER": (127, 96)}.items()}

QMD: dict[str, Field] = {
  "QMD_GROUP_ID": (133, 128), "SM_GLOBAL_CACHING_ENABLE": (134, 134),
  "INVALIDATE_TEXTURE_HEADER_CACHE": (186, 186), "INVALIDATE_TEXTURE_SAMPLER_CACHE": (187, 187),
  "INVALIDATE_TEXTURE_DATA_CACHE": (188, 188), "INVALIDATE_SHADER_DATA_CACHE": (189, 189),
  "INVALIDATE_INSTRUCTION_CACHE": (190, 190), "INVALIDATE_SHADER_CONSTANT_CACHE": (191, 191),
  "PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED": (287, 256),
  "CWD_MEMBAR_TYPE": (369, 368), "API_VISIBLE_CALL_LIMIT": (378, 378), "SAMPLER_INDEX": (382, 382),
  "CTA_RASTER_WIDTH": (415, 384), "CTA_RASTER_HEIGHT": (431, 416), "CTA_RASTER_DEPTH": (463, 448),
  "DEPENDENT_QMD0_POINTER": (511, 480), "DEPENDENT_QMD0_ENABLE": (512, 512), "DEPENDENT_QMD0_ACTION": (515, 513),
  "DEPENDENT_QMD0_PREFETCH": (516, 516), "DEPENDENT_QMD1_ENABLE": (517, 517), "DEPENDENT_QMD1_ACTION": (520, 518),
  "DEPENDENT_QMD1_PREFETCH": (521, 521),
  "SHARED_MEMORY_SIZE": (561, 544), "MIN_SM_CONFIG_SHARED_MEM_SIZE": (567, 562), "MAX_SM_CONFIG_SHARED_MEM_SIZE": (574, 569),
  "QMD_VERSION": (579, 576), "QMD_MAJOR_VERSION": (583, 580),
  "CTA_THREAD_DIMENSION0": (607, 592), "CTA_THREAD_DIMENSION1": (623, 608), "CTA_THREAD_DIMENSION2": (639, 624),
  **{f"CONSTANT_BUFFER_VALID({i})": (640 + i, 640 + i) for i in range(8)},
  "REGISTER_COUNT_V": (656, 648), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (662, 657),
  "SHADER_LOCAL_MEMORY_LOW_SIZE": (759, 736), "BARRIER_COUNT": (767, 763),
  **_release(0, 768), **_release(1, 896),
  **{k: v for i in range(8) for k, v in {
    f"CONSTANT_BUFFER_ADDR_LOWER({i})": (1055 + 64 * i, 1024 + 64 * i), f"CONSTANT_BUFFER_ADDR_UPPER({i})": (1072 + 64 * i, 1056 + 64 * i),
    f"CONSTANT_BUFFER_PREFETCH_POST({i})": (1073 + 64 * i, 1073 + 64 * i), f"CONSTANT_BUFFER_INVALIDATE({i})": (1074 + 64 * i, 1074 + 64 * i),
    f"CONSTANT_BUFFER_SIZE_SHIFTED4({i})": (1087 + 64 * i, 1075 + 64 * i)}.items()},
  "PROGRAM_ADDRESS_LOWER": (1567, 1536), "PROGRAM_ADDRESS_UPPER": (1584, 1568),
  "SHADER_LOCAL_MEMORY_HIGH_SIZE": (1623, 1600), "PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED": (1640, 1632),
  "PROGRAM_PREFETCH_SIZE": (1649, 1641), "PROGRAM_PREFETCH_TYPE": (1651, 1650), "SASS_VERSION": (1663, 1656),
  **_release(2, 1664),
}
QMD_VERSION, QMD_MAJOR_VERSION = 0, 3
QMD_REDUCTIONS = ("IADD", "IMIN", "IMAX", "INC", "DEC", "IAND", "IOR", "IXOR")   # RELEASEn_REDUCTION_OP
QMD_STRUCTURE_SIZES = {0: "FOUR_WORDS", 1: "ONE_WORD", 2: "TWO_WORDS"}
SM_CONFIG_KIB = (8, 16, 32, 64, 100)
# Kernel parameters sit at this byte offset of constant buffer 0: on sm_70+ the driver keeps its own constants in
# c[0x0][0x0..0x160) and the entry's .param block starts at c[0x0][0x160], each parameter at its natural (or .align)
# alignment in declaration order (docs/hw/NV.md §6 constant bank 0; cuobjdump -sass of any sm_80 kernel reads its first
# parameter as c[0x0][0x160]; the CUDA driver API's packed parameter buffer aligns each parameter to its own alignment).
PARAM_BASE = 0x160   # Ampere L1 shared-memory splits; the QMD's SM-config encoding is KiB / 4 + 1

# ---- §7 copy-engine methods (class C6B5 / C7B5) ---------------------------------------------------------------------
COPY: dict[str, int] = {
  "SET_OBJECT": 0x000, "NOP": 0x100, "SET_SEMAPHORE_A": 0x240, "SET_SEMAPHORE_B": 0x244, "SET_SEMAPHORE_PAYLOAD": 0x248,
  "SET_SRC_PHYS_MODE": 0x260, "SET_DST_PHYS_MODE": 0x264, "LAUNCH_DMA": 0x300,
  "OFFSET_IN_UPPER": 0x400, "OFFSET_IN_LOWER": 0x404, "OFFSET_OUT_UPPER": 0x408, "OFFSET_OUT_LOWER": 0x40C,
  "PITCH_IN": 0x410, "PITCH_OUT": 0x414, "LINE_LENGTH_IN": 0x418, "LINE_COUNT": 0x41C,
}
CE_LAUNCH_DMA: dict[str, Field] = {
  "DATA_TRANSFER_TYPE": (1, 0), "FLUSH_ENABLE": (2, 2), "SEMAPHORE_TYPE": (4, 3), "INTERRUPT_TYPE": (6, 5), "SRC_MEMORY_LAYOUT": (7, 7),
  "DST_MEMORY_LAYOUT": (8, 8), "MULTI_LINE_ENABLE": (9, 9), "SRC_TYPE": (12, 12), "DST_TYPE": (13, 13), "SEMAPHORE_REDUCTION": (17, 14),
  "SEMAPHORE_REDUCTION_SIGN": (18, 18), "SEMAPHORE_REDUCTION_ENABLE": (19, 19)}
CE_TRANSFER = {"NONE": 0, "PIPELINED": 1, "NON_PIPELINED": 2}
CE_SEMAPHORE = {"NONE": 0, "RELEASE_ONE_WORD": 1, "RELEASE_FOUR_WORD": 2, "RELEASE_CONDITIONAL_INTR": 3}
CE_LAYOUT_PITCH = 1
