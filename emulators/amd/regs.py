"""gfx11 compute registers (AMD.md §4) as the SET_SH_REG window sees them: one row per register (offset from the SH
window start 0x2C00, name), and the field layouts (§4.1) of the registers a dispatch reads. Registers are plain state:
SET_SH_REG stores values, DISPATCH_DIRECT reads them."""
from __future__ import annotations

SH_START, SH_END = 0x2C00, 0x3000   # SET_SH_REG window, dword addresses

# SET_SH_REG offset -> register name (a write to an offset not listed is a fault: an unknown register)
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
BY_NAME: dict[str, int] = {n: o for o, n in SH_REGS.items()}

# register -> {field: (hi, lo)}
FIELDS: dict[str, dict[str, tuple[int, int]]] = {
  "COMPUTE_DISPATCH_INITIATOR": {"COMPUTE_SHADER_EN": (0, 0), "PARTIAL_TG_EN": (1, 1), "FORCE_START_AT_000": (2, 2),
                                 "ORDERED_APPEND_ENBL": (3, 3), "USE_THREAD_DIMENSIONS": (5, 5), "CS_W32_EN": (15, 15)},
  "COMPUTE_NUM_THREAD": {"NUM_THREAD_FULL": (15, 0), "NUM_THREAD_PARTIAL": (31, 16)},
  "COMPUTE_PGM_RSRC1": {"VGPRS": (5, 0), "SGPRS": (9, 6), "PRIORITY": (11, 10), "FLOAT_MODE": (19, 12), "PRIV": (20, 20),
                        "DX10_CLAMP": (21, 21), "IEEE_MODE": (23, 23), "WGP_MODE": (29, 29), "MEM_ORDERED": (30, 30)},
  "COMPUTE_PGM_RSRC2": {"SCRATCH_EN": (0, 0), "USER_SGPR": (5, 1), "TRAP_PRESENT": (6, 6), "TGID_X_EN": (7, 7), "TGID_Y_EN": (8, 8),
                        "TGID_Z_EN": (9, 9), "TG_SIZE_EN": (10, 10), "TIDIG_COMP_CNT": (12, 11), "LDS_SIZE": (23, 15)},
  "COMPUTE_PGM_RSRC3": {"SHARED_VGPR_CNT": (3, 0), "INST_PREF_SIZE": (9, 4)},
  "COMPUTE_TMPRING_SIZE": {"WAVES": (11, 0), "WAVESIZE": (26, 12)},
  "COMPUTE_RESOURCE_LIMITS": {"WAVES_PER_SH": (9, 0), "TG_PER_CU": (15, 12)},
}
LDS_GRANULE = 512   # RSRC2.LDS_SIZE unit on gfx11 (bytes)


def get(reg: str, value: int, name: str) -> int:
  """Field `name` of register `reg` holding `value`."""
  hi, lo = FIELDS[reg][name]
  return (value >> lo) & ((1 << (hi - lo + 1)) - 1)


def make(reg: str, **vals: int) -> int:
  """A register value from named fields (ValueError names a field the value does not fit)."""
  out = 0
  for k, v in vals.items():
    hi, lo = FIELDS[reg][k]
    if not 0 <= v < 1 << (hi - lo + 1): raise ValueError(f"{reg}.{k} is {hi - lo + 1} bits: {v} does not fit")
    out |= v << lo
  return out
