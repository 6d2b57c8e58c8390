"""RDNA3 (gfx11) opcodes: one row per opcode and format, `opcode name dst-type src-types...` ('-': no destination).
Types give operand widths (16/32/64 bits, b128 = 4 dwords ...) and whether an inline constant is read as a float of that
width. `m` is a lane mask (32 bits in wave32: VCC, a compare result, a carry). Opcode numbers: AMD RDNA3 ISA reference
guide ("Microcode Formats") and LLVM's gfx11 encodings (docs/hw/rdna3.md); the rows LLVM emits are checked against its
printed assembly by tests/emulators/rdna3/test_decode_llvm.py."""
from __future__ import annotations

from typing import NamedTuple


class Op(NamedTuple):
  op: int
  name: str
  dst: str          # type of the destination ('-' none)
  srcs: tuple[str, ...]


def _table(text: str) -> dict[int, Op]:
  out: dict[int, Op] = {}
  for line in text.strip().splitlines():
    p = line.split()
    op = int(p[0], 0)
    if op in out: raise AssertionError(f"opcode {op} listed twice ({out[op].name}, {p[1]})")
    out[op] = Op(op, p[1], p[2], tuple(p[3:]))
  return out


SOP2 = _table("""
0 s_add_u32 u32 u32 u32
1 s_sub_u32 u32 u32 u32
2 s_add_i32 i32 i32 i32
3 s_sub_i32 i32 i32 i32
4 s_addc_u32 u32 u32 u32
5 s_subb_u32 u32 u32 u32
6 s_absdiff_i32 i32 i32 i32
8 s_lshl_b32 b32 b32 u32
9 s_lshl_b64 b64 b64 u32
10 s_lshr_b32 b32 b32 u32
11 s_lshr_b64 b64 b64 u32
12 s_ashr_i32 i32 i32 u32
13 s_ashr_i64 i64 i64 u32
14 s_lshl1_add_u32 u32 u32 u32
15 s_lshl2_add_u32 u32 u32 u32
16 s_lshl3_add_u32 u32 u32 u32
17 s_lshl4_add_u32 u32 u32 u32
18 s_min_i32 i32 i32 i32
19 s_min_u32 u32 u32 u32
20 s_max_i32 i32 i32 i32
21 s_max_u32 u32 u32 u32
22 s_and_b32 b32 b32 b32
23 s_and_b64 b64 b64 b64
24 s_or_b32 b32 b32 b32
25 s_or_b64 b64 b64 b64
26 s_xor_b32 b32 b32 b32
27 s_xor_b64 b64 b64 b64
28 s_nand_b32 b32 b32 b32
29 s_nand_b64 b64 b64 b64
30 s_nor_b32 b32 b32 b32
31 s_nor_b64 b64 b64 b64
32 s_xnor_b32 b32 b32 b32
33 s_xnor_b64 b64 b64 b64
34 s_and_not1_b32 b32 b32 b32
35 s_and_not1_b64 b64 b64 b64
36 s_or_not1_b32 b32 b32 b32
37 s_or_not1_b64 b64 b64 b64
38 s_bfe_u32 u32 u32 u32
39 s_bfe_i32 i32 i32 u32
40 s_bfe_u64 u64 u64 u32
41 s_bfe_i64 i64 i64 u32
42 s_bfm_b32 b32 u32 u32
43 s_bfm_b64 b64 u32 u32
44 s_mul_i32 i32 i32 i32
45 s_mul_hi_u32 u32 u32 u32
46 s_mul_hi_i32 i32 i32 i32
48 s_cselect_b32 b32 b32 b32
49 s_cselect_b64 b64 b64 b64
50 s_pack_ll_b32_b16 b32 b32 b32
51 s_pack_lh_b32_b16 b32 b32 b32
52 s_pack_hh_b32_b16 b32 b32 b32
53 s_pack_hl_b32_b16 b32 b32 b32
""")

SOP1 = _table("""
0 s_mov_b32 b32 b32
1 s_mov_b64 b64 b64
2 s_cmov_b32 b32 b32
3 s_cmov_b64 b64 b64
4 s_brev_b32 b32 b32
5 s_brev_b64 b64 b64
8 s_ctz_i32_b32 i32 b32
9 s_ctz_i32_b64 i32 b64
10 s_clz_i32_u32 i32 u32
11 s_clz_i32_u64 i32 u64
12 s_cls_i32 i32 i32
13 s_cls_i32_i64 i32 i64
14 s_sext_i32_i8 i32 i32
15 s_sext_i32_i16 i32 i32
16 s_bitset0_b32 b32 u32
17 s_bitset0_b64 b64 u32
18 s_bitset1_b32 b32 u32
19 s_bitset1_b64 b64 u32
21 s_abs_i32 i32 i32
22 s_bcnt0_i32_b32 i32 b32
23 s_bcnt0_i32_b64 i32 b64
24 s_bcnt1_i32_b32 i32 b32
25 s_bcnt1_i32_b64 i32 b64
30 s_not_b32 b32 b32
31 s_not_b64 b64 b64
32 s_and_saveexec_b32 b32 b32
33 s_and_saveexec_b64 b64 b64
34 s_or_saveexec_b32 b32 b32
35 s_or_saveexec_b64 b64 b64
36 s_xor_saveexec_b32 b32 b32
37 s_xor_saveexec_b64 b64 b64
38 s_nand_saveexec_b32 b32 b32
40 s_nor_saveexec_b32 b32 b32
42 s_xnor_saveexec_b32 b32 b32
44 s_and_not0_saveexec_b32 b32 b32
46 s_or_not0_saveexec_b32 b32 b32
48 s_and_not1_saveexec_b32 b32 b32
50 s_or_not1_saveexec_b32 b32 b32
52 s_and_not0_wrexec_b32 b32 b32
54 s_and_not1_wrexec_b32 b32 b32
71 s_getpc_b64 b64
72 s_setpc_b64 - b64
""")

SOPC = _table("""
0 s_cmp_eq_i32 - i32 i32
1 s_cmp_lg_i32 - i32 i32
2 s_cmp_gt_i32 - i32 i32
3 s_cmp_ge_i32 - i32 i32
4 s_cmp_lt_i32 - i32 i32
5 s_cmp_le_i32 - i32 i32
6 s_cmp_eq_u32 - u32 u32
7 s_cmp_lg_u32 - u32 u32
8 s_cmp_gt_u32 - u32 u32
9 s_cmp_ge_u32 - u32 u32
10 s_cmp_lt_u32 - u32 u32
11 s_cmp_le_u32 - u32 u32
12 s_bitcmp0_b32 - b32 u32
13 s_bitcmp1_b32 - b32 u32
14 s_bitcmp0_b64 - b64 u32
15 s_bitcmp1_b64 - b64 u32
16 s_cmp_eq_u64 - u64 u64
17 s_cmp_lg_u64 - u64 u64
""")

SOPK = _table("""
0 s_movk_i32 i32 i16
2 s_cmovk_i32 i32 i16
3 s_cmpk_eq_i32 i32 i16
4 s_cmpk_lg_i32 i32 i16
5 s_cmpk_gt_i32 i32 i16
6 s_cmpk_ge_i32 i32 i16
7 s_cmpk_lt_i32 i32 i16
8 s_cmpk_le_i32 i32 i16
9 s_cmpk_eq_u32 u32 u16
10 s_cmpk_lg_u32 u32 u16
11 s_cmpk_gt_u32 u32 u16
12 s_cmpk_ge_u32 u32 u16
13 s_cmpk_lt_u32 u32 u16
14 s_cmpk_le_u32 u32 u16
15 s_addk_i32 i32 i16
16 s_mulk_i32 i32 i16
17 s_getreg_b32 b32 u16
24 s_waitcnt_vscnt b32 u16
25 s_waitcnt_vmcnt b32 u16
26 s_waitcnt_expcnt b32 u16
27 s_waitcnt_lgkmcnt b32 u16
""")

SOPP = _table("""
0 s_nop - u16
3 s_sleep - u16
4 s_set_inst_prefetch_distance - u16
5 s_clause - u16
7 s_delay_alu - u16
8 s_waitcnt_depctr - u16
9 s_waitcnt - u16
10 s_wait_idle -
16 s_trap - u16
13 s_round_mode - u16
14 s_denorm_mode - u16
31 s_code_end -
32 s_branch - i16
33 s_cbranch_scc0 - i16
34 s_cbranch_scc1 - i16
35 s_cbranch_vccz - i16
36 s_cbranch_vccnz - i16
37 s_cbranch_execz - i16
38 s_cbranch_execnz - i16
48 s_endpgm -
53 s_setprio - u16
54 s_sendmsg - u16
60 s_icache_inv -
61 s_barrier -
""")

SMEM = _table("""
0 s_load_b32 b32 b64
1 s_load_b64 b64 b64
2 s_load_b128 b128 b64
3 s_load_b256 b256 b64
4 s_load_b512 b512 b64
""")

VOP1 = _table("""
0 v_nop -
1 v_mov_b32 b32 b32
2 v_readfirstlane_b32 b32 b32
3 v_cvt_i32_f64 i32 f64
4 v_cvt_f64_i32 f64 i32
5 v_cvt_f32_i32 f32 i32
6 v_cvt_f32_u32 f32 u32
7 v_cvt_u32_f32 u32 f32
8 v_cvt_i32_f32 i32 f32
10 v_cvt_f16_f32 f16 f32
11 v_cvt_f32_f16 f32 f16
12 v_cvt_nearest_i32_f32 i32 f32
13 v_cvt_floor_i32_f32 i32 f32
15 v_cvt_f32_f64 f32 f64
16 v_cvt_f64_f32 f64 f32
17 v_cvt_f32_ubyte0 f32 u32
18 v_cvt_f32_ubyte1 f32 u32
19 v_cvt_f32_ubyte2 f32 u32
20 v_cvt_f32_ubyte3 f32 u32
21 v_cvt_u32_f64 u32 f64
22 v_cvt_f64_u32 f64 u32
23 v_trunc_f64 f64 f64
24 v_ceil_f64 f64 f64
25 v_rndne_f64 f64 f64
26 v_floor_f64 f64 f64
28 v_mov_b16 b16 b16
32 v_fract_f32 f32 f32
33 v_trunc_f32 f32 f32
34 v_ceil_f32 f32 f32
35 v_rndne_f32 f32 f32
36 v_floor_f32 f32 f32
37 v_exp_f32 f32 f32
39 v_log_f32 f32 f32
42 v_rcp_f32 f32 f32
43 v_rcp_iflag_f32 f32 f32
46 v_rsq_f32 f32 f32
47 v_rcp_f64 f64 f64
49 v_rsq_f64 f64 f64
51 v_sqrt_f32 f32 f32
52 v_sqrt_f64 f64 f64
53 v_sin_f32 f32 f32
54 v_cos_f32 f32 f32
55 v_not_b32 b32 b32
56 v_bfrev_b32 b32 b32
57 v_clz_i32_u32 i32 u32
58 v_ctz_i32_b32 i32 b32
59 v_cls_i32 i32 i32
60 v_frexp_exp_i32_f64 i32 f64
61 v_frexp_mant_f64 f64 f64
62 v_fract_f64 f64 f64
63 v_frexp_exp_i32_f32 i32 f32
64 v_frexp_mant_f32 f32 f32
80 v_cvt_f16_u16 f16 u16
81 v_cvt_f16_i16 f16 i16
82 v_cvt_u16_f16 u16 f16
83 v_cvt_i16_f16 i16 f16
84 v_rcp_f16 f16 f16
85 v_sqrt_f16 f16 f16
86 v_rsq_f16 f16 f16
87 v_log_f16 f16 f16
88 v_exp_f16 f16 f16
89 v_frexp_mant_f16 f16 f16
90 v_frexp_exp_i16_f16 i16 f16
91 v_floor_f16 f16 f16
92 v_ceil_f16 f16 f16
93 v_trunc_f16 f16 f16
94 v_rndne_f16 f16 f16
95 v_fract_f16 f16 f16
96 v_sin_f16 f16 f16
97 v_cos_f16 f16 f16
101 v_swap_b32 b32 b32
105 v_not_b16 b16 b16
106 v_cvt_i32_i16 i32 i16
107 v_cvt_u32_u16 u32 u16
""")

VOP2 = _table("""
1 v_cndmask_b32 b32 b32 b32 m
2 v_dot2acc_f32_f16 f32 b32 b32 f32
3 v_add_f32 f32 f32 f32
4 v_sub_f32 f32 f32 f32
5 v_subrev_f32 f32 f32 f32
8 v_mul_f32 f32 f32 f32
9 v_mul_i32_i24 i32 i32 i32
10 v_mul_hi_i32_i24 i32 i32 i32
11 v_mul_u32_u24 u32 u32 u32
12 v_mul_hi_u32_u24 u32 u32 u32
15 v_min_f32 f32 f32 f32
16 v_max_f32 f32 f32 f32
17 v_min_i32 i32 i32 i32
18 v_max_i32 i32 i32 i32
19 v_min_u32 u32 u32 u32
20 v_max_u32 u32 u32 u32
24 v_lshlrev_b32 b32 u32 b32
25 v_lshrrev_b32 b32 u32 b32
26 v_ashrrev_i32 i32 u32 i32
27 v_and_b32 b32 b32 b32
28 v_or_b32 b32 b32 b32
29 v_xor_b32 b32 b32 b32
30 v_xnor_b32 b32 b32 b32
32 v_add_co_ci_u32 u32 u32 u32 m
33 v_sub_co_ci_u32 u32 u32 u32 m
34 v_subrev_co_ci_u32 u32 u32 u32 m
37 v_add_nc_u32 u32 u32 u32
38 v_sub_nc_u32 u32 u32 u32
39 v_subrev_nc_u32 u32 u32 u32
43 v_fmac_f32 f32 f32 f32 f32
44 v_fmamk_f32 f32 f32 f32 f32
45 v_fmaak_f32 f32 f32 f32 f32
47 v_cvt_pk_rtz_f16_f32 b32 f32 f32
50 v_add_f16 f16 f16 f16
51 v_sub_f16 f16 f16 f16
52 v_subrev_f16 f16 f16 f16
53 v_mul_f16 f16 f16 f16
54 v_fmac_f16 f16 f16 f16 f16
55 v_fmamk_f16 f16 f16 f16 f16
56 v_fmaak_f16 f16 f16 f16 f16
57 v_max_f16 f16 f16 f16
58 v_min_f16 f16 f16 f16
59 v_ldexp_f16 f16 f16 i16
60 v_pk_fmac_f16 b32 b32 b32 b32
""")

_CMP_F = ["f", "lt", "eq", "le", "gt", "lg", "ge", "o", "u", "nge", "nlg", "ngt", "nle", "neq", "nlt", "tru"]
_CMP_I = ["f", "lt", "eq", "le", "gt", "ne", "ge", "t"]


def _vopc() -> dict[int, Op]:
  rows: list[Op] = []
  for x, pre in ((0, "v_cmp"), (0x80, "v_cmpx")):
    dst = "-" if pre == "v_cmpx" else "m"
    for base, t in ((0x00, "f16"), (0x10, "f32"), (0x20, "f64")):
      rows += [Op(x + base + i, f"{pre}_{c if c != 'tru' else 't'}_{t}", dst, (t, t)) for i, c in enumerate(_CMP_F)]
    for base, t in ((0x30, "i16"), (0x38, "u16")):
      rows += [Op(x + base + i, f"{pre}_{c}_{t}", dst, (t, t)) for i, c in enumerate(_CMP_I) if c not in ("f", "t")]
    for base, t in ((0x40, "i32"), (0x48, "u32"), (0x50, "i64"), (0x58, "u64")):
      rows += [Op(x + base + i, f"{pre}_{c}_{t}", dst, (t, t)) for i, c in enumerate(_CMP_I)]
    rows += [Op(x + 0x7D, f"{pre}_class_f16", dst, ("f16", "u16")), Op(x + 0x7E, f"{pre}_class_f32", dst, ("f32", "u32")),
             Op(x + 0x7F, f"{pre}_class_f64", dst, ("f64", "u32"))]
  return {r.op: r for r in rows}


VOPC = _vopc()

# VOP3-only opcodes (VOP3 also encodes VOPC at 0..255, VOP2 at 256 + op, VOP1 at 384 + op)
VOP3_ONLY = _table("""
0x20a v_mad_i32_i24 i32 i32 i32 i32
0x20b v_mad_u32_u24 u32 u32 u32 u32
0x210 v_bfe_u32 u32 u32 u32 u32
0x211 v_bfe_i32 i32 i32 u32 u32
0x212 v_bfi_b32 b32 b32 b32 b32
0x213 v_fma_f32 f32 f32 f32 f32
0x214 v_fma_f64 f64 f64 f64 f64
0x216 v_alignbit_b32 b32 b32 b32 u16
0x217 v_alignbyte_b32 b32 b32 b32 u16
0x219 v_min3_f32 f32 f32 f32 f32
0x21a v_min3_i32 i32 i32 i32 i32
0x21b v_min3_u32 u32 u32 u32 u32
0x21c v_max3_f32 f32 f32 f32 f32
0x21d v_max3_i32 i32 i32 i32 i32
0x21e v_max3_u32 u32 u32 u32 u32
0x21f v_med3_f32 f32 f32 f32 f32
0x220 v_med3_i32 i32 i32 i32 i32
0x221 v_med3_u32 u32 u32 u32 u32
0x227 v_div_fixup_f32 f32 f32 f32 f32
0x228 v_div_fixup_f64 f64 f64 f64 f64
0x237 v_div_fmas_f32 f32 f32 f32 f32
0x238 v_div_fmas_f64 f64 f64 f64 f64
0x240 v_xor3_b32 b32 b32 b32 b32
0x241 v_mad_u16 u16 u16 u16 u16
0x244 v_perm_b32 b32 b32 b32 b32
0x245 v_xad_u32 u32 u32 u32 u32
0x246 v_lshl_add_u32 u32 u32 u32 u32
0x247 v_add_lshl_u32 u32 u32 u32 u32
0x248 v_fma_f16 f16 f16 f16 f16
0x249 v_min3_f16 f16 f16 f16 f16
0x24a v_min3_i16 i16 i16 i16 i16
0x24b v_min3_u16 u16 u16 u16 u16
0x24c v_max3_f16 f16 f16 f16 f16
0x24d v_max3_i16 i16 i16 i16 i16
0x24e v_max3_u16 u16 u16 u16 u16
0x24f v_med3_f16 f16 f16 f16 f16
0x250 v_med3_i16 i16 i16 i16 i16
0x251 v_med3_u16 u16 u16 u16 u16
0x253 v_mad_i16 i16 i16 i16 i16
0x254 v_div_fixup_f16 f16 f16 f16 f16
0x255 v_add3_u32 u32 u32 u32 u32
0x256 v_lshl_or_b32 b32 b32 u32 b32
0x257 v_and_or_b32 b32 b32 b32 b32
0x258 v_or3_b32 b32 b32 b32 b32
0x259 v_mad_u32_u16 u32 u16 u16 u32
0x25a v_mad_i32_i16 i32 i16 i16 i32
0x25d v_cndmask_b16 b16 b16 b16 m
0x25e v_maxmin_f32 f32 f32 f32 f32
0x25f v_minmax_f32 f32 f32 f32 f32
0x260 v_maxmin_f16 f16 f16 f16 f16
0x261 v_minmax_f16 f16 f16 f16 f16
0x262 v_maxmin_u32 u32 u32 u32 u32
0x263 v_minmax_u32 u32 u32 u32 u32
0x264 v_maxmin_i32 i32 i32 i32 i32
0x265 v_minmax_i32 i32 i32 i32 i32
0x2fc v_div_scale_f32 f32 f32 f32 f32
0x2fd v_div_scale_f64 f64 f64 f64 f64
0x2fe v_mad_u64_u32 u64 u32 u32 u64
0x2ff v_mad_i64_i32 i64 i32 i32 i64
0x300 v_add_co_u32 u32 u32 u32
0x301 v_sub_co_u32 u32 u32 u32
0x302 v_subrev_co_u32 u32 u32 u32
0x303 v_add_nc_u16 u16 u16 u16
0x304 v_sub_nc_u16 u16 u16 u16
0x305 v_mul_lo_u16 u16 u16 u16
0x306 v_cvt_pk_i16_f32 b32 f32 f32
0x307 v_cvt_pk_u16_f32 b32 f32 f32
0x309 v_max_u16 u16 u16 u16
0x30a v_max_i16 i16 i16 i16
0x30b v_min_u16 u16 u16 u16
0x30c v_min_i16 i16 i16 i16
0x30d v_add_nc_i16 i16 i16 i16
0x30e v_sub_nc_i16 i16 i16 i16
0x311 v_pack_b32_f16 b32 f16 f16
0x31c v_ldexp_f32 f32 f32 i32
0x31d v_bfm_b32 b32 u32 u32
0x31e v_bcnt_u32_b32 u32 b32 u32
0x31f v_mbcnt_lo_u32_b32 u32 b32 u32
0x320 v_mbcnt_hi_u32_b32 u32 b32 u32
0x323 v_cvt_pk_u16_u32 b32 u32 u32
0x324 v_cvt_pk_i16_i32 b32 i32 i32
0x325 v_sub_nc_i32 i32 i32 i32
0x326 v_add_nc_i32 i32 i32 i32
0x327 v_add_f64 f64 f64 f64
0x328 v_mul_f64 f64 f64 f64
0x329 v_min_f64 f64 f64 f64
0x32a v_max_f64 f64 f64 f64
0x32b v_ldexp_f64 f64 f64 i32
0x32c v_mul_lo_u32 u32 u32 u32
0x32d v_mul_hi_u32 u32 u32 u32
0x32e v_mul_hi_i32 i32 i32 i32
0x32f v_trig_preop_f64 f64 f64 u32
0x338 v_lshlrev_b16 b16 u16 b16
0x339 v_lshrrev_b16 b16 u16 b16
0x33a v_ashrrev_i16 i16 u16 i16
0x33c v_lshlrev_b64 b64 u32 b64
0x33d v_lshrrev_b64 b64 u32 b64
0x33e v_ashrrev_i64 i64 u32 i64
0x360 v_readlane_b32 b32 b32 u32
0x361 v_writelane_b32 b32 b32 u32
0x362 v_and_b16 b16 b16 b16
0x363 v_or_b16 b16 b16 b16
0x364 v_xor_b16 b16 b16 b16
""")

# VOP3b: the second destination is a scalar lane mask (carry out / scale flag) in bits 14:8
VOP3B = frozenset({"v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32",
                   "v_div_scale_f32", "v_div_scale_f64", "v_mad_u64_u32", "v_mad_i64_i32"})


def vop3_table() -> dict[int, Op]:
  t = dict(VOP3_ONLY)
  for o in VOPC.values(): t[o.op] = o
  for o in VOP2.values():
    if o.name not in ("v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16", "v_pk_fmac_f16", "v_dot2acc_f32_f16"): t[0x100 + o.op] = o
  for o in VOP1.values():
    if o.name not in ("v_swap_b32",): t[0x180 + o.op] = o
  return t


VOP3 = vop3_table()
HAS_VOP3 = frozenset(o.name for o in VOP3.values())

VOP3P = _table("""
0 v_pk_mad_i16 b32 b32 b32 b32
1 v_pk_mul_lo_u16 b32 b32 b32
2 v_pk_add_i16 b32 b32 b32
3 v_pk_sub_i16 b32 b32 b32
4 v_pk_lshlrev_b16 b32 b32 b32
5 v_pk_lshrrev_b16 b32 b32 b32
6 v_pk_ashrrev_i16 b32 b32 b32
7 v_pk_max_i16 b32 b32 b32
8 v_pk_min_i16 b32 b32 b32
9 v_pk_mad_u16 b32 b32 b32 b32
10 v_pk_add_u16 b32 b32 b32
11 v_pk_sub_u16 b32 b32 b32
12 v_pk_max_u16 b32 b32 b32
13 v_pk_min_u16 b32 b32 b32
14 v_pk_fma_f16 p16 p16 p16 p16
15 v_pk_add_f16 p16 p16 p16
16 v_pk_mul_f16 p16 p16 p16
17 v_pk_min_f16 p16 p16 p16
18 v_pk_max_f16 p16 p16 p16
19 v_dot2_f32_f16 f32 p16 p16 f32
22 v_dot4_i32_iu8 i32 b32 b32 i32
23 v_dot4_u32_u8 u32 b32 b32 u32
24 v_dot8_i32_iu4 i32 b32 b32 i32
25 v_dot8_u32_u4 u32 b32 b32 u32
32 v_fma_mix_f32 f32 x16 x16 x16
33 v_fma_mixlo_f16 f16 x16 x16 x16
34 v_fma_mixhi_f16 f16 x16 x16 x16
64 v_wmma_f32_16x16x16_f16 b256 b256 b256 b256
65 v_wmma_f32_16x16x16_bf16 b256 b256 b256 b256
66 v_wmma_f16_16x16x16_f16 b256 b256 b256 b256
67 v_wmma_bf16_16x16x16_bf16 b256 b256 b256 b256
68 v_wmma_i32_16x16x16_iu8 b256 b128 b128 b256
69 v_wmma_i32_16x16x16_iu4 b256 b64 b64 b256
""")

# VOPD: X and Y halves (Y also has 16..18)
VOPD_OPS: dict[int, str] = {0: "v_dual_fmac_f32", 1: "v_dual_fmaak_f32", 2: "v_dual_fmamk_f32", 3: "v_dual_mul_f32", 4: "v_dual_add_f32",
                            5: "v_dual_sub_f32", 6: "v_dual_subrev_f32", 7: "v_dual_mul_dx9_zero_f32", 8: "v_dual_mov_b32",
                            9: "v_dual_cndmask_b32", 10: "v_dual_max_f32", 11: "v_dual_min_f32", 12: "v_dual_dot2acc_f32_f16",
                            13: "v_dual_dot2acc_f32_bf16", 16: "v_dual_add_nc_u32", 17: "v_dual_lshlrev_b32", 18: "v_dual_and_b32"}

DS = _table("""
0 ds_add_u32 - b32 b32
1 ds_sub_u32 - b32 b32
2 ds_rsub_u32 - b32 b32
3 ds_inc_u32 - b32 b32
4 ds_dec_u32 - b32 b32
5 ds_min_i32 - b32 b32
6 ds_max_i32 - b32 b32
7 ds_min_u32 - b32 b32
8 ds_max_u32 - b32 b32
9 ds_and_b32 - b32 b32
10 ds_or_b32 - b32 b32
11 ds_xor_b32 - b32 b32
13 ds_store_b32 - b32 b32
14 ds_store_2addr_b32 - b32 b32 b32
15 ds_store_2addr_stride64_b32 - b32 b32 b32
18 ds_min_f32 - b32 b32
19 ds_max_f32 - b32 b32
21 ds_add_f32 - b32 b32
30 ds_store_b8 - b32 b32
31 ds_store_b16 - b32 b32
32 ds_add_rtn_u32 b32 b32 b32
45 ds_storexchg_rtn_b32 b32 b32 b32
54 ds_load_b32 b32 b32
55 ds_load_2addr_b32 b64 b32
56 ds_load_2addr_stride64_b32 b64 b32
57 ds_load_i8 b32 b32
58 ds_load_u8 b32 b32
59 ds_load_i16 b32 b32
60 ds_load_u16 b32 b32
77 ds_store_b64 - b32 b64
78 ds_store_2addr_b64 - b32 b64 b64
79 ds_store_2addr_stride64_b64 - b32 b64 b64
118 ds_load_b64 b64 b32
119 ds_load_2addr_b64 b128 b32
120 ds_load_2addr_stride64_b64 b128 b32
160 ds_store_b8_d16_hi - b32 b32
161 ds_store_b16_d16_hi - b32 b32
162 ds_load_u8_d16 b32 b32
163 ds_load_u8_d16_hi b32 b32
164 ds_load_i8_d16 b32 b32
165 ds_load_i8_d16_hi b32 b32
166 ds_load_u16_d16 b32 b32
167 ds_load_u16_d16_hi b32 b32
222 ds_store_b96 - b32 b96
223 ds_store_b128 - b32 b128
254 ds_load_b96 b96 b32
255 ds_load_b128 b128 b32
""")

# MUBUF: only the cache invalidations LLVM emits for acquire fences (buffer loads/stores are not used by refgrad's kernels)
MUBUF = _table("""
43 buffer_gl0_inv -
44 buffer_gl1_inv -
""")

# FLAT/GLOBAL/SCRATCH share opcodes; the prefix comes from SEG (0 flat, 1 scratch, 2 global)
FLAT = _table("""
16 load_u8 b32
17 load_i8 b32
18 load_u16 b32
19 load_i16 b32
20 load_b32 b32
21 load_b64 b64
22 load_b96 b96
23 load_b128 b128
24 store_b8 - b32
25 store_b16 - b32
26 store_b32 - b32
27 store_b64 - b64
28 store_b96 - b96
29 store_b128 - b128
30 load_d16_u8 b32
31 load_d16_i8 b32
32 load_d16_b16 b32
33 load_d16_hi_u8 b32
34 load_d16_hi_i8 b32
35 load_d16_hi_b16 b32
36 store_d16_hi_b8 - b32
37 store_d16_hi_b16 - b32
""")
SEGMENTS = {0: "flat", 1: "scratch", 2: "global"}

TABLES: dict[str, dict[int, Op]] = {"SOP2": SOP2, "SOP1": SOP1, "SOPC": SOPC, "SOPK": SOPK, "SOPP": SOPP, "SMEM": SMEM, "VOP1": VOP1,
                                    "VOP2": VOP2, "VOPC": VOPC, "VOP3": VOP3, "VOP3P": VOP3P, "DS": DS, "FLAT": FLAT,
                                    "MUBUF": MUBUF}
