"""Which opcodes the decoder knows and which the machine executes, per format (README's coverage table):
`python -m emulators.amd.rdna3.coverage` prints it as markdown."""
from __future__ import annotations

from emulators.amd.rdna3 import execute as E
from emulators.amd.rdna3 import opcodes as O
from emulators.amd.rdna3 import ops as X

VALU_SPECIAL = frozenset({"v_nop", "v_cndmask_b32", "v_cndmask_b16", "v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32",
                          "v_sub_co_ci_u32", "v_subrev_co_ci_u32", "v_mad_u64_u32", "v_mad_i64_i32", "v_div_scale_f32", "v_div_scale_f64",
                          "v_div_fmas_f32", "v_div_fmas_f64", "v_readfirstlane_b32", "v_readlane_b32", "v_writelane_b32",
                          "v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32", "v_swap_b32"})


def executes(fmt: str, name: str) -> bool:
  """Whether the machine has semantics for opcode `name` of format `fmt` (anything else faults by name when run)."""
  if fmt in ("VOP1", "VOP2", "VOP3", "VOPC"):
    return name.startswith(("v_cmp_", "v_cmpx_")) or name in X.VALU or name in VALU_SPECIAL
  if fmt == "VOP3P": return name in X.PK or name.startswith("v_fma_mix") or name in E.WMMA_IN or name in E.DOTS
  if fmt in ("SOP1", "SOP2"):
    return name in X.SALU or name in X.SAVEEXEC or name.startswith("s_bitset") or name in ("s_cmov_b32", "s_cmov_b64", "s_getpc_b64",
                                                                                          "s_and_not0_wrexec_b32", "s_and_not1_wrexec_b32")
  if fmt == "SOPC": return True
  if fmt == "SOPK": return name in E.NOPS or name in ("s_movk_i32", "s_cmovk_i32", "s_addk_i32", "s_mulk_i32") or name.startswith("s_cmpk_")
  if fmt == "SOPP": return name in E.NOPS or name in E.BRANCH_COND or name in ("s_endpgm", "s_barrier")
  if fmt == "SMEM": return True
  if fmt == "DS": return name in E.DS_LOAD or name in E.DS_STORE or name in E.DS_2ADDR or name in E.DS_ATOMIC
  if fmt == "FLAT": return name in E.FLAT_LOAD or name in E.FLAT_STORE
  if fmt == "MUBUF": return name in ("buffer_gl0_inv", "buffer_gl1_inv")
  if fmt == "VOPD": return all(h in E.VOPD_FN or h == "v_dual_cndmask_b32" for h in name.split("::"))
  return False


def table() -> list[tuple[str, int, int, list[str]]]:
  """(format, opcodes decoded, opcodes executed, names decoded but not executed) per format."""
  rows = []
  for fmt, tab in O.TABLES.items():
    names = [o.name for o in tab.values()]
    if fmt == "VOP3": names = [o.name for op, o in tab.items() if op >= 0x200]   # VOP3-only; the promoted VOP1/2/C count there
    missing = sorted(n for n in names if not executes(fmt, n))
    rows.append((fmt, len(names), len(names) - len(missing), missing))
  rows.append(("VOPD", len(O.VOPD_OPS), sum(1 for n in O.VOPD_OPS.values() if n in E.VOPD_FN or n == "v_dual_cndmask_b32"),
               sorted(n for n in O.VOPD_OPS.values() if n not in E.VOPD_FN and n != "v_dual_cndmask_b32")))
  return rows


def markdown() -> str:
  out = ["| format | opcodes decoded | executed | decoded, not executed (a GPUFault naming it when run) |", "|---|---|---|---|"]
  for fmt, n, ex, missing in table(): out.append(f"| {fmt} | {n} | {ex} | {', '.join(missing) if missing else '-'} |")
  return "\n".join(out)


if __name__ == "__main__":
  print(markdown())
