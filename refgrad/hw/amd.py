"""AMD gfx11 (RDNA3) command formats, as tables (docs/hw/AMD.md; its §0 names the public source of each): the PM4
type-3 header and opcodes (§1, §2), packet fields (§3), the compute SH registers and their fields (§4), SDMA opcodes
and fields (§5), the queue control page (§6), the kernel descriptor (§8). refgrad/runtime/ops_amd.py and amd_elf.py
encode and read from these, emulators/amd/ decodes with them."""
from __future__ import annotations

from refgrad.hw.bits import Field

# ---- §1, §2 PM4 type-3 packets --------------------------------------------------------------------------------------
PM4_HEADER: dict[str, Field] = {"PREDICATE": (0, 0), "SHADER_TYPE": (1, 1), "IT_OPCODE": (15, 8), "COUNT": (29, 16), "TYPE": (31, 30)}
PM4_TYPE3 = 3
PM4_NOP_FILLER_COUNT = 0x3FFF   # NOP with this COUNT is a one-dword filler
PM4: dict[str, int] = {"NOP": 0x10, "DISPATCH_DIRECT": 0x15, "WAIT_REG_MEM": 0x3C, "INDIRECT_BUFFER": 0x3F, "EVENT_WRITE": 0x46,
                       "RELEASE_MEM": 0x49, "ACQUIRE_MEM": 0x58, "SET_SH_REG": 0x76, "WAIT_REG_MEM64": 0x93}

# ---- §3 packet fields -----------------------------------------------------------------------------------------------
SET_SH_REG_DW1: dict[str, Field] = {"OFFSET": (15, 0), "INDEX": (31, 28)}
RELEASE_MEM_DW1: dict[str, Field] = {"EVENT_TYPE": (5, 0), "EVENT_INDEX": (11, 8), "GLM_WB": (12, 12), "GLM_INV": (13, 13), "GLV_INV": (14, 14),
                                     "GL1_INV": (15, 15), "GL2_INV": (20, 20), "GL2_WB": (21, 21)}
RELEASE_MEM_DW2: dict[str, Field] = {"DST_SEL": (17, 16), "INT_SEL": (26, 24), "DATA_SEL": (31, 29)}
DATA_SEL = {"NONE": 0, "DATA32": 1, "DATA64": 2, "GPU_CLOCK": 3, "SYSTEM_CLOCK": 4}
WAIT_REG_MEM_DW1: dict[str, Field] = {"FUNCTION": (2, 0), "MEM_SPACE": (5, 4), "OPERATION": (7, 6)}
COMPARE = {"ALWAYS": 0, "LT": 1, "LE": 2, "EQ": 3, "NE": 4, "GE": 5, "GT": 6}   # WAIT_REG_MEM FUNCTION, POLL_REGMEM FUNC
EVENT_DW1: dict[str, Field] = {"EVENT_TYPE": (5, 0), "EVENT_INDEX": (11, 8)}   # EVENT_WRITE dw1 (and RELEASE_MEM's low bits)
EVENTS = {0x07: "CS_PARTIAL_FLUSH", 0x14: "CACHE_FLUSH_AND_INV_TS_EVENT", 0x16: "CACHE_FLUSH_AND_INV_EVENT", 0x28: "BOTTOM_OF_PIPE_TS",
          0x2F: "CS_DONE", 0x35: "THREAD_TRACE_MARKER", 0x37: "THREAD_TRACE_FINISH"}
EVENT = {n: e for e, n in EVENTS.items()}
EOP_EVENTS = {e: EVENTS[e] for e in (0x14, 0x28, 0x2F)}   # the end-of-pipe events RELEASE_MEM takes
EVENT_INDEX = {"CS_PARTIAL_FLUSH": 4, "END_OF_PIPE": 5, "SHADER_DONE": 6}
GCR_CNTL: dict[str, Field] = {"GLI_INV": (1, 0), "GLK_INV": (7, 7), "GLV_INV": (8, 8), "GL1_INV": (9, 9), "GL2_INV": (14, 14), "GL2_WB": (15, 15),
                              "RANGE_IS_PA": (18, 18)}
GCR_CNTL_BITS = 19   # ACQUIRE_MEM dw7 GCR_CNTL 18:0
INDIRECT_BUFFER_DW3: dict[str, Field] = {"IB_SIZE": (19, 0), "CHAIN": (20, 20), "VALID": (23, 23)}
MAX_IB_DWORDS = (1 << 20) - 1

# ---- §4 compute registers: SET_SH_REG offset (register dword address - SH_START) -> name ---------------------------------
SH_START, SH_END = 0x2C00, 0x3000
SH_REGS: dict[int, str] = {
  0x200: "COMPUTE_DISPATCH_INITIATOR", 0x201: "COMPUTE_DIM_X", 0x202: "COMPUTE_DIM_Y", 0x203: "COMPUTE_DIM_Z",
  0x204: "COMPUTE_START_X", 0x205: "COMPUTE_START_Y", 0x206: "COMPUTE_START_Z",
  0x207: "COMPUTE_NUM_THREAD_X", 0x208: "COMPUTE_NUM_THREAD_Y", 0x209: "COMPUTE_NUM_THREAD_Z",
  0x20A: "COMPUTE_PIPELINESTAT_ENABLE", 0x20B: "COMPUTE_PERFCOUNT_ENABLE",
  0x20C: "COMPUTE_PGM_LO", 0x20D: "COMPUTE_PGM_HI", 0x20E: "COMPUTE_DISPATCH_PKT_ADDR_LO", 0x20F: "COMPUTE_DISPATCH_PKT_ADDR_HI",
  0x210: "COMPUTE_DISPATCH_SCRATCH_BASE_LO", 0x211: "COMPUTE_DISPATCH_SCRATCH_BASE_HI",
  0x212: "COMPUTE_PGM_RSRC1", 0x213: "COMPUTE_PGM_RSRC2", 0x214: "COMPUTE_VMID", 0x215: "COMPUTE_RESOURCE_LIMITS",
  0x216: "COMPUTE_STATIC_THREAD_MGMT_SE0", 0x217: "COMPUTE_STATIC_THREAD_MGMT_SE1", 0x218: "COMPUTE_TMPRING_SIZE",
  0x21B: "COMPUTE_RESTART_X", 0x21C: "COMPUTE_RESTART_Y", 0x21D: "COMPUTE_RESTART_Z", 0x21E: "COMPUTE_THREAD_TRACE_ENABLE",
  0x228: "COMPUTE_PGM_RSRC3",
  **{0x240 + i: f"COMPUTE_USER_DATA_{i}" for i in range(16)},
}
SH: dict[str, int] = {n: o for o, n in SH_REGS.items()}
USER_DATA_REGS = 16
PGM_ADDRESS_SHIFT = 8   # COMPUTE_PGM_LO/HI hold the program address >> 8 (PGM_HI: bits 47:40 in 7:0)

# §4.1 field layouts; the kernel descriptor's RSRC words (§8.2) have the registers' bits
FIELDS: dict[str, dict[str, Field]] = {
  "COMPUTE_DISPATCH_INITIATOR": {"COMPUTE_SHADER_EN": (0, 0), "PARTIAL_TG_EN": (1, 1), "FORCE_START_AT_000": (2, 2),
                                 "ORDERED_APPEND_ENBL": (3, 3), "USE_THREAD_DIMENSIONS": (5, 5), "CS_W32_EN": (15, 15)},
  "COMPUTE_NUM_THREAD": {"NUM_THREAD_FULL": (15, 0), "NUM_THREAD_PARTIAL": (31, 16)},
  "COMPUTE_PGM_HI": {"ADDRESS_HI": (7, 0)},
  "COMPUTE_PGM_RSRC1": {"VGPRS": (5, 0), "SGPRS": (9, 6), "PRIORITY": (11, 10), "FLOAT_MODE": (19, 12), "PRIV": (20, 20),
                        "DX10_CLAMP": (21, 21), "IEEE_MODE": (23, 23), "WGP_MODE": (29, 29), "MEM_ORDERED": (30, 30)},
  "COMPUTE_PGM_RSRC2": {"SCRATCH_EN": (0, 0), "USER_SGPR": (5, 1), "TRAP_PRESENT": (6, 6), "TGID_X_EN": (7, 7), "TGID_Y_EN": (8, 8),
                        "TGID_Z_EN": (9, 9), "TG_SIZE_EN": (10, 10), "TIDIG_COMP_CNT": (12, 11), "LDS_SIZE": (23, 15)},
  "COMPUTE_PGM_RSRC3": {"SHARED_VGPR_CNT": (3, 0), "INST_PREF_SIZE": (9, 4)},
  "COMPUTE_TMPRING_SIZE": {"WAVES": (11, 0), "WAVESIZE": (26, 12)},
  "COMPUTE_RESOURCE_LIMITS": {"WAVES_PER_SH": (9, 0), "TG_PER_CU": (15, 12)},
}
RSRC1, RSRC2 = FIELDS["COMPUTE_PGM_RSRC1"], FIELDS["COMPUTE_PGM_RSRC2"]
LDS_GRANULE = 512       # bytes per unit of RSRC2.LDS_SIZE on gfx11
SCRATCH_GRANULE = 256   # bytes of a wave's scratch per unit of COMPUTE_TMPRING_SIZE.WAVESIZE
WAVE_SIZE = 32

# ---- §5 SDMA --------------------------------------------------------------------------------------------------------
SDMA_HEADER: dict[str, Field] = {"OP": (7, 0), "SUB_OP": (15, 8)}
SDMA: dict[str, tuple[int, int]] = {   # name -> (OP, SUB_OP)
  "NOP": (0, 0), "COPY_LINEAR": (1, 0), "WRITE_LINEAR": (2, 0), "FENCE": (5, 0), "TRAP": (6, 0), "POLL_REGMEM": (8, 0),
  "CONSTANT_FILL": (11, 0), "TIMESTAMP_SET": (13, 0), "TIMESTAMP_GET": (13, 1), "TIMESTAMP_GET_GLOBAL": (13, 2), "GCR_REQ": (17, 0)}
SDMA_NOP_DW0: dict[str, Field] = {"COUNT": (29, 16)}
SDMA_COPY_LINEAR_DW0: dict[str, Field] = {"ENCRYPT": (16, 16), "TMZ": (18, 18), "BACKWARDS": (25, 25), "BROADCAST": (27, 27)}
SDMA_COPY_LINEAR_DW1: dict[str, Field] = {"COUNT": (29, 0)}   # bytes - 1
SDMA_COPY_LINEAR_DW2: dict[str, Field] = {"DST_SW": (17, 16), "SRC_SW": (25, 24)}
SDMA_WRITE_LINEAR_DW3: dict[str, Field] = {"COUNT": (19, 0)}   # dwords - 1
SDMA_FENCE_DW0: dict[str, Field] = {"MTYPE": (18, 16)}
SDMA_TRAP_DW1: dict[str, Field] = {"INT_CONTEXT": (27, 0)}
SDMA_POLL_REGMEM_DW0: dict[str, Field] = {"FUNC": (30, 28), "MEM_POLL": (31, 31)}
SDMA_POLL_REGMEM_DW5: dict[str, Field] = {"INTERVAL": (15, 0), "RETRY_COUNT": (27, 16)}
SDMA_CONSTANT_FILL_DW0: dict[str, Field] = {"FILLSIZE": (31, 30)}
SDMA_CONSTANT_FILL_DW4: dict[str, Field] = {"COUNT": (29, 0)}   # bytes - 1
SDMA_GCR_DW2: dict[str, Field] = {"GCR_CONTROL": (31, 16)}
MAX_SDMA_COPY = 1 << 30   # COPY_LINEAR COUNT 29:0

# ---- §6 queues: u64 slots of the control page; pointer units ---------------------------------------------------------
CONTROL = {"RPTR": 0, "WPTR": 1, "DOORBELL": 2}
POINTER_UNIT = {"compute": 4, "copy": 1}   # bytes per pointer unit: PM4 dwords, SDMA bytes

# ---- §8 kernel descriptor ---------------------------------------------------------------------------------------------
KD_BYTES = 64
# (name, byte offset, struct format) of each field
KD_FIELDS: tuple[tuple[str, int, str], ...] = (
  ("group_segment", 0, "I"), ("private_segment", 4, "I"), ("kernarg_size", 8, "I"), ("entry", 16, "q"),
  ("rsrc3", 44, "I"), ("rsrc1", 48, "I"), ("rsrc2", 52, "I"), ("properties", 56, "H"), ("kernarg_preload", 58, "H"))
# kernel_code_properties (§8.1): bit -> (name, user SGPRs it takes, in the order they are filled)
KD_PROPERTIES: dict[int, tuple[str, int]] = {
  0: ("ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER", 4), 1: ("ENABLE_SGPR_DISPATCH_PTR", 2), 2: ("ENABLE_SGPR_QUEUE_PTR", 2),
  3: ("ENABLE_SGPR_KERNARG_SEGMENT_PTR", 2), 4: ("ENABLE_SGPR_DISPATCH_ID", 2), 5: ("ENABLE_SGPR_FLAT_SCRATCH_INIT", 2),
  6: ("ENABLE_SGPR_PRIVATE_SEGMENT_SIZE", 1), 10: ("ENABLE_WAVEFRONT_SIZE32", 0), 11: ("USES_DYNAMIC_STACK", 0)}
KERNARG_SEGMENT_PTR, WAVEFRONT_SIZE32 = 1 << 3, 1 << 10
