"""The operation of each opcode, one row per name. VALU rows: typed source arrays (one element per lane) -> typed result;
SALU rows: uint64 arrays (one element per wave) -> (result, SCC or None). Types come from the opcode table
(opcodes.py); semantics: the RDNA3 ISA guide's per-opcode pseudocode (see alu.py for floats)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from emulators.amd.rdna3 import alu as A

U64 = np.uint64
M32, M64 = U64(0xFFFFFFFF), U64(0xFFFFFFFFFFFFFFFF)


def _i(x: np.ndarray) -> np.ndarray: return x.astype(np.int64)


def _sh(b: np.ndarray, bits: int) -> np.ndarray: return (b.astype(np.uint64) & U64(bits - 1))


def _f16p(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  u = x.astype(np.uint32)
  return (u & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16), (u >> np.uint32(16)).astype(np.uint16).view(np.float16)


def _pack16(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  return lo.astype(np.uint32) | (hi.astype(np.uint32) << np.uint32(16))


def _cvt_pk_rtz(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return _pack16(_rtz16(a), _rtz16(b))


def _rtz16(a: np.ndarray) -> np.ndarray:
  """f32 -> f16 rounding toward zero (V_CVT_PK_RTZ_F16_F32)."""
  r = a.astype(np.float16)
  over = np.abs(r.astype(np.float32)) > np.abs(a)
  r = np.where(over & np.isfinite(a), np.nextafter(r, np.float16(0)), r)
  return r.astype(np.float16).view(np.uint16)



# ---- float compares: name -> predicate (NaN-aware per the IEEE ordered/unordered meaning of each name) ----
FCMP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
  "f": lambda a, b: np.zeros(np.broadcast(a, b).shape, np.bool_), "lt": lambda a, b: a < b, "eq": lambda a, b: a == b,
  "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "lg": lambda a, b: (a < b) | (a > b), "ge": lambda a, b: a >= b,
  # ordered / unordered: whether either is a NaN, by numpy's maximum (which propagates a NaN of either operand)
  "o": lambda a, b: ~np.isnan(np.maximum(a, b)), "u": lambda a, b: np.isnan(np.maximum(a, b)), "nge": lambda a, b: ~(a >= b),
  "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b),
  "nlt": lambda a, b: ~(a < b), "t": lambda a, b: np.ones(np.broadcast(a, b).shape, np.bool_),
}
ICMP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
  "f": FCMP["f"], "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
  "ne": lambda a, b: a != b, "ge": lambda a, b: a >= b, "t": FCMP["t"],
}


def compare(name: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
  """The predicate of v_cmp[x]_<c>_<t> (class compares: alu.cls_class)."""
  parts = name.split("_")
  c, t = parts[2], parts[3]
  if c == "class": return A.cls_class
  return (FCMP if t[0] == "f" else ICMP)[c]


def _med3(a: np.ndarray, b: np.ndarray, c: np.ndarray, mx: Callable, mn: Callable) -> np.ndarray:
  return mx(mn(a, b), mn(mx(a, b), c))


def _fmed3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """V_MED3_F32/F16 (IEEE mode): the middle value; with any NaN operand, min3 of them (ISA guide pseudocode of V_MED3_F32)."""
  nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
  mn = A.fmin_ieee(A.fmin_ieee(a, b), c)
  return np.where(nan, mn, _med3(a, b, c, A.fmax_ieee, A.fmin_ieee)).astype(a.dtype)


def _imax(a, b): return np.maximum(a, b)
def _imin(a, b): return np.minimum(a, b)


def _sat(x: np.ndarray, t: type) -> np.ndarray:
  info = np.iinfo(t)
  return np.clip(x, info.min, info.max).astype(t)


def _lshl64(a, b): return (b.astype(np.uint64) << _sh(a, 64))
def _lshr64(a, b): return (b.astype(np.uint64) >> _sh(a, 64))
def _ashr64(a, b): return (b.astype(np.int64) >> _sh(a, 64).astype(np.int64))


# VALU: name -> function of the typed sources (numpy) giving the typed result (cast to the destination type by the caller)
VALU: dict[str, Callable[..., np.ndarray]] = {
  "v_mov_b32": lambda a: a, "v_mov_b16": lambda a: a, "v_not_b32": lambda a: ~a, "v_not_b16": lambda a: ~a,
  "v_bfrev_b32": A.brev32, "v_cls_i32": lambda a: A.clz(a.view(np.uint32) ^ (a >> 31).view(np.uint32), 32), "v_clz_i32_u32": lambda a: A.clz(a, 32), "v_ctz_i32_b32": lambda a: A.ctz(a, 32),
  "v_cvt_f32_i32": lambda a: a.astype(np.float32), "v_cvt_f32_u32": lambda a: a.astype(np.float32),
  "v_cvt_u32_f32": lambda a: A.cvt_f_to_i(a, np.uint32), "v_cvt_i32_f32": lambda a: A.cvt_f_to_i(a, np.int32),
  "v_cvt_i32_f64": lambda a: A.cvt_f_to_i(a, np.int32), "v_cvt_u32_f64": lambda a: A.cvt_f_to_i(a, np.uint32),
  "v_cvt_f64_i32": lambda a: a.astype(np.float64), "v_cvt_f64_u32": lambda a: a.astype(np.float64),
  "v_cvt_f16_f32": lambda a: a.astype(np.float16), "v_cvt_f32_f16": lambda a: a.astype(np.float32),
  "v_cvt_f32_f64": lambda a: a.astype(np.float32), "v_cvt_f64_f32": lambda a: a.astype(np.float64),
  "v_cvt_f16_u16": lambda a: a.astype(np.float16), "v_cvt_f16_i16": lambda a: a.astype(np.float16),
  "v_cvt_u16_f16": lambda a: A.cvt_f_to_i(a, np.uint16), "v_cvt_i16_f16": lambda a: A.cvt_f_to_i(a, np.int16),
  "v_cvt_i32_i16": lambda a: a.astype(np.int32), "v_cvt_u32_u16": lambda a: a.astype(np.uint32),
  "v_cvt_f32_ubyte0": lambda a: (a & np.uint32(0xFF)).astype(np.float32), "v_cvt_f32_ubyte1": lambda a: ((a >> np.uint32(8)) & np.uint32(0xFF)).astype(np.float32),
  "v_cvt_f32_ubyte2": lambda a: ((a >> np.uint32(16)) & np.uint32(0xFF)).astype(np.float32), "v_cvt_f32_ubyte3": lambda a: (a >> np.uint32(24)).astype(np.float32),
  "v_trunc_f32": np.trunc, "v_ceil_f32": np.ceil, "v_rndne_f32": np.rint, "v_floor_f32": np.floor, "v_fract_f32": A.fract,
  "v_trunc_f64": np.trunc, "v_ceil_f64": np.ceil, "v_rndne_f64": np.rint, "v_floor_f64": np.floor, "v_fract_f64": A.fract,
  "v_trunc_f16": np.trunc, "v_ceil_f16": np.ceil, "v_rndne_f16": np.rint, "v_floor_f16": np.floor, "v_fract_f16": A.fract,
  "v_exp_f32": A.trans(np.exp2), "v_log_f32": A.trans(np.log2), "v_rcp_f32": A.trans(lambda x: 1.0 / x), "v_rcp_iflag_f32": A.trans(lambda x: 1.0 / x),
  "v_rsq_f32": A.trans(lambda x: 1.0 / np.sqrt(x)), "v_sqrt_f32": A.sqrt_exact, "v_sin_f32": A.trans(lambda x: np.sin(x * 2 * np.pi)),
  "v_cos_f32": A.trans(lambda x: np.cos(x * 2 * np.pi)), "v_rcp_f64": lambda x: 1.0 / x, "v_rsq_f64": lambda x: 1.0 / np.sqrt(x),
  "v_sqrt_f64": np.sqrt, "v_exp_f16": A.trans(np.exp2), "v_log_f16": A.trans(np.log2), "v_rcp_f16": A.trans(lambda x: 1.0 / x),
  "v_sqrt_f16": A.sqrt_exact, "v_rsq_f16": A.trans(lambda x: 1.0 / np.sqrt(x)), "v_sin_f16": A.trans(lambda x: np.sin(x * 2 * np.pi)),
  "v_cos_f16": A.trans(lambda x: np.cos(x * 2 * np.pi)),
  "v_frexp_exp_i32_f32": A.frexp_exp, "v_frexp_exp_i32_f64": A.frexp_exp, "v_frexp_mant_f32": A.frexp_mant, "v_frexp_mant_f64": A.frexp_mant,
  "v_frexp_mant_f16": A.frexp_mant, "v_frexp_exp_i16_f16": lambda a: A.frexp_exp(a).astype(np.int16),
  # VOP2
  # IEEE add/sub/mul in the operands' type: numpy's ufuncs themselves (a basic block writes their result in place, blocks.py)
  "v_add_f32": np.add, "v_sub_f32": np.subtract, "v_subrev_f32": lambda a, b: b - a, "v_mul_f32": np.multiply,
  "v_add_f16": np.add, "v_sub_f16": np.subtract, "v_subrev_f16": lambda a, b: b - a, "v_mul_f16": np.multiply,
  "v_add_f64": np.add, "v_mul_f64": np.multiply,
  "v_min_f32": A.fmin_ieee, "v_max_f32": A.fmax_ieee, "v_min_f16": A.fmin_ieee, "v_max_f16": A.fmax_ieee,
  "v_min_f64": A.fmin_ieee, "v_max_f64": A.fmax_ieee,
  "v_min_i32": _imin, "v_max_i32": _imax, "v_min_u32": _imin, "v_max_u32": _imax,
  "v_min_i16": _imin, "v_max_i16": _imax, "v_min_u16": _imin, "v_max_u16": _imax,
  "v_mul_i32_i24": lambda a, b: A.mul24(a, b, True), "v_mul_u32_u24": lambda a, b: A.mul24(a, b, False),
  "v_mul_hi_i32_i24": lambda a, b: A.mul24(a, b, True) >> 32, "v_mul_hi_u32_u24": lambda a, b: A.mul24(a, b, False) >> 32,
  "v_lshlrev_b32": lambda a, b: b << (a & np.uint32(31)), "v_lshrrev_b32": lambda a, b: b >> (a & np.uint32(31)),
  "v_ashrrev_i32": lambda a, b: b >> (a & np.uint32(31)).astype(np.int32),
  "v_lshlrev_b16": lambda a, b: b << (a & np.uint16(15)), "v_lshrrev_b16": lambda a, b: b >> (a & np.uint16(15)),
  "v_ashrrev_i16": lambda a, b: b >> (a & np.uint16(15)).astype(np.int16),
  "v_lshlrev_b64": _lshl64, "v_lshrrev_b64": _lshr64, "v_ashrrev_i64": _ashr64,
  "v_and_b32": np.bitwise_and, "v_or_b32": np.bitwise_or, "v_xor_b32": np.bitwise_xor, "v_xnor_b32": lambda a, b: ~(a ^ b),
  "v_and_b16": lambda a, b: a & b, "v_or_b16": lambda a, b: a | b, "v_xor_b16": lambda a, b: a ^ b,
  "v_add_nc_u32": lambda a, b: _i(a) + _i(b), "v_sub_nc_u32": lambda a, b: _i(a) - _i(b), "v_subrev_nc_u32": lambda a, b: _i(b) - _i(a),
  "v_add_nc_i32": lambda a, b: _i(a) + _i(b), "v_sub_nc_i32": lambda a, b: _i(a) - _i(b),
  "v_add_nc_u16": lambda a, b: _i(a) + _i(b), "v_sub_nc_u16": lambda a, b: _i(a) - _i(b), "v_mul_lo_u16": lambda a, b: _i(a) * _i(b),
  "v_add_nc_i16": lambda a, b: _i(a) + _i(b), "v_sub_nc_i16": lambda a, b: _i(a) - _i(b),
  "v_fmac_f32": lambda a, b, c: A.fma(a, b, c), "v_fmac_f16": lambda a, b, c: A.fma(a, b, c),
  "v_fmamk_f32": lambda a, k, b: A.fma(a, k, b), "v_fmaak_f32": lambda a, b, k: A.fma(a, b, k),
  "v_fmamk_f16": lambda a, k, b: A.fma(a, k, b), "v_fmaak_f16": lambda a, b, k: A.fma(a, b, k),
  "v_ldexp_f16": A.ldexp, "v_ldexp_f32": A.ldexp, "v_ldexp_f64": A.ldexp,
  "v_cvt_pk_rtz_f16_f32": _cvt_pk_rtz,
  # VOP3
  "v_fma_f32": A.fma, "v_fma_f64": A.fma, "v_fma_f16": A.fma,
  "v_mad_u32_u24": lambda a, b, c: A.mul24(a, b, False) + _i(c), "v_mad_i32_i24": lambda a, b, c: A.mul24(a, b, True) + _i(c),
  "v_bfe_u32": lambda a, b, c: A.bfe(a, b, c, False), "v_bfe_i32": lambda a, b, c: A.bfe(a, b, c, True).view(np.int32),
  "v_bfi_b32": lambda a, b, c: (a & b) | (~a & c), "v_bfm_b32": lambda a, b: ((np.uint64(1) << _sh(a, 32)) - np.uint64(1)) << _sh(b, 32),
  "v_alignbit_b32": lambda a, b, c: ((a.astype(np.uint64) << np.uint64(32) | b.astype(np.uint64)) >> _sh(c, 32)),
  "v_alignbyte_b32": lambda a, b, c: ((a.astype(np.uint64) << np.uint64(32) | b.astype(np.uint64)) >> (np.uint64(8) * (c.astype(np.uint64) & np.uint64(3)))),
  "v_min3_f32": lambda a, b, c: A.fmin_ieee(A.fmin_ieee(a, b), c), "v_max3_f32": lambda a, b, c: A.fmax_ieee(A.fmax_ieee(a, b), c),
  "v_min3_f16": lambda a, b, c: A.fmin_ieee(A.fmin_ieee(a, b), c), "v_max3_f16": lambda a, b, c: A.fmax_ieee(A.fmax_ieee(a, b), c),
  "v_min3_i32": lambda a, b, c: np.minimum(np.minimum(a, b), c), "v_min3_u32": lambda a, b, c: np.minimum(np.minimum(a, b), c),
  "v_max3_i32": lambda a, b, c: np.maximum(np.maximum(a, b), c), "v_max3_u32": lambda a, b, c: np.maximum(np.maximum(a, b), c),
  "v_min3_i16": lambda a, b, c: np.minimum(np.minimum(a, b), c), "v_min3_u16": lambda a, b, c: np.minimum(np.minimum(a, b), c),
  "v_max3_i16": lambda a, b, c: np.maximum(np.maximum(a, b), c), "v_max3_u16": lambda a, b, c: np.maximum(np.maximum(a, b), c),
  "v_med3_f32": _fmed3, "v_med3_f16": _fmed3,
  "v_med3_i32": lambda a, b, c: _med3(a, b, c, np.maximum, np.minimum), "v_med3_u32": lambda a, b, c: _med3(a, b, c, np.maximum, np.minimum),
  "v_med3_i16": lambda a, b, c: _med3(a, b, c, np.maximum, np.minimum), "v_med3_u16": lambda a, b, c: _med3(a, b, c, np.maximum, np.minimum),
  "v_maxmin_f32": lambda a, b, c: A.fmin_ieee(A.fmax_ieee(a, b), c), "v_minmax_f32": lambda a, b, c: A.fmax_ieee(A.fmin_ieee(a, b), c),
  "v_maxmin_f16": lambda a, b, c: A.fmin_ieee(A.fmax_ieee(a, b), c), "v_minmax_f16": lambda a, b, c: A.fmax_ieee(A.fmin_ieee(a, b), c),
  "v_maxmin_i32": lambda a, b, c: np.minimum(np.maximum(a, b), c), "v_minmax_i32": lambda a, b, c: np.maximum(np.minimum(a, b), c),
  "v_maxmin_u32": lambda a, b, c: np.minimum(np.maximum(a, b), c), "v_minmax_u32": lambda a, b, c: np.maximum(np.minimum(a, b), c),
  "v_div_fixup_f32": A.div_fixup, "v_div_fixup_f64": A.div_fixup, "v_div_fixup_f16": A.div_fixup,
  "v_xor3_b32": lambda a, b, c: a ^ b ^ c, "v_or3_b32": lambda a, b, c: a | b | c, "v_and_or_b32": lambda a, b, c: (a & b) | c,
  "v_lshl_or_b32": lambda a, b, c: (a << (b & np.uint32(31))) | c, "v_lshl_add_u32": lambda a, b, c: _i(a << (b & np.uint32(31))) + _i(c),
  "v_add_lshl_u32": lambda a, b, c: (_i(a) + _i(b)) << _i(c & np.uint32(31)), "v_add3_u32": lambda a, b, c: _i(a) + _i(b) + _i(c),
  "v_xad_u32": lambda a, b, c: _i(a ^ b) + _i(c),
  "v_mad_u16": lambda a, b, c: _i(a) * _i(b) + _i(c), "v_mad_i16": lambda a, b, c: _i(a) * _i(b) + _i(c),
  "v_mad_u32_u16": lambda a, b, c: _i(a) * _i(b) + _i(c), "v_mad_i32_i16": lambda a, b, c: _i(a) * _i(b) + _i(c),
  "v_perm_b32": A.perm_b32, "v_pack_b32_f16": lambda a, b: _pack16(a.view(np.uint16), b.view(np.uint16)),
  "v_mul_lo_u32": lambda a, b: (a.astype(np.uint64) * b.astype(np.uint64)), "v_mul_hi_u32": lambda a, b: (a.astype(np.uint64) * b.astype(np.uint64)) >> np.uint64(32),
  "v_mul_hi_i32": lambda a, b: (a.astype(np.int64) * b.astype(np.int64)) >> 32,
  "v_bcnt_u32_b32": lambda a, b: A.popcount(a) + b,
  "v_cvt_pk_u16_u32": lambda a, b: _pack16(a.astype(np.uint16), b.astype(np.uint16)),
  "v_cvt_pk_i16_i32": lambda a, b: _pack16(a.astype(np.int16).view(np.uint16), b.astype(np.int16).view(np.uint16)),
}

# VOP3P packed 16-bit ops on (lo, hi) halves: name -> per-half function on typed halves
PK: dict[str, tuple[type, Callable[..., np.ndarray]]] = {
  "v_pk_add_f16": (np.float16, lambda a, b: a + b), "v_pk_mul_f16": (np.float16, lambda a, b: a * b),
  "v_pk_fma_f16": (np.float16, A.fma), "v_pk_max_f16": (np.float16, A.fmax_ieee), "v_pk_min_f16": (np.float16, A.fmin_ieee),
  "v_pk_add_u16": (np.uint16, lambda a, b: a + b), "v_pk_sub_u16": (np.uint16, lambda a, b: a - b),
  "v_pk_add_i16": (np.int16, lambda a, b: a + b), "v_pk_sub_i16": (np.int16, lambda a, b: a - b),
  "v_pk_mul_lo_u16": (np.uint16, lambda a, b: a * b), "v_pk_mad_u16": (np.uint16, lambda a, b, c: a * b + c),
  "v_pk_mad_i16": (np.int16, lambda a, b, c: a * b + c),
  "v_pk_max_i16": (np.int16, np.maximum), "v_pk_min_i16": (np.int16, np.minimum), "v_pk_max_u16": (np.uint16, np.maximum),
  "v_pk_min_u16": (np.uint16, np.minimum), "v_pk_lshlrev_b16": (np.uint16, lambda a, b: b << (a & np.uint16(15))),
  "v_pk_lshrrev_b16": (np.uint16, lambda a, b: b >> (a & np.uint16(15))),
  "v_pk_ashrrev_i16": (np.int16, lambda a, b: b >> (a & np.int16(15))),
}


# SALU: name -> f(sources as uint64 arrays, scc) -> (result uint64, new SCC or None)
def _s32(x: np.ndarray) -> np.ndarray: return x.astype(np.uint32).view(np.int32).astype(np.int64)   # the cast keeps the low dword


def _nz(x: np.ndarray) -> np.ndarray: return x != 0


def _sbfe(a: np.ndarray, b: np.ndarray, signed: bool, bits: int) -> np.ndarray:
  off, w = b & U64(bits - 1), (b >> U64(16)) & U64(0x7F)
  v = a >> off
  v = np.where(w >= 64, v, v & ((U64(1) << np.minimum(w, U64(63))) - U64(1)))
  if signed:
    sh = np.where(w == 0, U64(0), U64(64) - np.minimum(w, U64(64)))
    v = np.where(w == 0, U64(0), ((v << sh).view(np.int64) >> sh.view(np.int64)).view(np.uint64))
  return v & (M32 if bits == 32 else M64)


SALU: dict[str, Callable[..., tuple[np.ndarray, np.ndarray | None]]] = {
  "s_add_u32": lambda a, b, c: ((a + b) & M32, (a + b) > M32), "s_sub_u32": lambda a, b, c: ((a - b) & M32, b > a),
  "s_addc_u32": lambda a, b, c: ((a + b + c) & M32, (a + b + c) > M32),
  "s_subb_u32": lambda a, b, c: ((a - b - c) & M32, (b + c) > a),
  "s_add_i32": lambda a, b, c: _ovf(_s32(a) + _s32(b)), "s_sub_i32": lambda a, b, c: _ovf(_s32(a) - _s32(b)),
  "s_absdiff_i32": lambda a, b, c: _nzr(np.abs(_s32(a) - _s32(b)).astype(np.uint64) & M32),
  "s_lshl_b32": lambda a, b, c: _nzr((a << (b & U64(31))) & M32), "s_lshl_b64": lambda a, b, c: _nzr(a << (b & U64(63))),
  "s_lshr_b32": lambda a, b, c: _nzr(a >> (b & U64(31))), "s_lshr_b64": lambda a, b, c: _nzr(a >> (b & U64(63))),
  "s_ashr_i32": lambda a, b, c: _nzr((_s32(a) >> (b & U64(31)).astype(np.int64)).astype(np.uint64) & M32),
  "s_ashr_i64": lambda a, b, c: _nzr((a.view(np.int64) >> (b & U64(63)).astype(np.int64)).view(np.uint64)),
  "s_lshl1_add_u32": lambda a, b, c: (((a << U64(1)) + b) & M32, ((a << U64(1)) & M32) + b > M32),
  "s_lshl2_add_u32": lambda a, b, c: (((a << U64(2)) + b) & M32, ((a << U64(2)) & M32) + b > M32),
  "s_lshl3_add_u32": lambda a, b, c: (((a << U64(3)) + b) & M32, ((a << U64(3)) & M32) + b > M32),
  "s_lshl4_add_u32": lambda a, b, c: (((a << U64(4)) + b) & M32, ((a << U64(4)) & M32) + b > M32),
  "s_min_i32": lambda a, b, c: (np.where(_s32(a) <= _s32(b), a, b), _s32(a) <= _s32(b)),
  "s_max_i32": lambda a, b, c: (np.where(_s32(a) >= _s32(b), a, b), _s32(a) >= _s32(b)),
  "s_min_u32": lambda a, b, c: (np.minimum(a, b), a <= b), "s_max_u32": lambda a, b, c: (np.maximum(a, b), a >= b),
  "s_and_b32": lambda a, b, c: _nzr(a & b), "s_and_b64": lambda a, b, c: _nzr(a & b), "s_or_b32": lambda a, b, c: _nzr(a | b),
  "s_or_b64": lambda a, b, c: _nzr(a | b), "s_xor_b32": lambda a, b, c: _nzr(a ^ b), "s_xor_b64": lambda a, b, c: _nzr(a ^ b),
  "s_nand_b32": lambda a, b, c: _nzr(~(a & b) & M32), "s_nor_b32": lambda a, b, c: _nzr(~(a | b) & M32),
  "s_xnor_b32": lambda a, b, c: _nzr(~(a ^ b) & M32), "s_and_not1_b32": lambda a, b, c: _nzr(a & ~b & M32),
  "s_or_not1_b32": lambda a, b, c: _nzr((a | ~b) & M32), "s_and_not1_b64": lambda a, b, c: _nzr(a & ~b),
  "s_or_not1_b64": lambda a, b, c: _nzr(a | ~b), "s_nand_b64": lambda a, b, c: _nzr(~(a & b)), "s_nor_b64": lambda a, b, c: _nzr(~(a | b)),
  "s_xnor_b64": lambda a, b, c: _nzr(~(a ^ b)),
  "s_bfe_u32": lambda a, b, c: _nzr(_sbfe(a, b, False, 32)), "s_bfe_i32": lambda a, b, c: _nzr(_sbfe(a, b, True, 32)),
  "s_bfe_u64": lambda a, b, c: _nzr(_sbfe(a, b, False, 64)), "s_bfe_i64": lambda a, b, c: _nzr(_sbfe(a, b, True, 64)),
  "s_bfm_b32": lambda a, b, c: ((((U64(1) << (a & U64(31))) - U64(1)) << (b & U64(31))) & M32, None),
  "s_bfm_b64": lambda a, b, c: (((U64(1) << (a & U64(63))) - U64(1)) << (b & U64(63)), None),
  "s_mul_i32": lambda a, b, c: ((a * b) & M32, None), "s_mul_hi_u32": lambda a, b, c: ((a * b) >> U64(32), None),
  "s_mul_hi_i32": lambda a, b, c: (((_s32(a) * _s32(b)) >> 32).astype(np.uint64) & M32, None),
  "s_cselect_b32": lambda a, b, c: (np.where(c != 0, a, b), None), "s_cselect_b64": lambda a, b, c: (np.where(c != 0, a, b), None),
  "s_pack_ll_b32_b16": lambda a, b, c: ((a & U64(0xFFFF)) | ((b & U64(0xFFFF)) << U64(16)), None),
  "s_pack_lh_b32_b16": lambda a, b, c: ((a & U64(0xFFFF)) | (b & U64(0xFFFF0000)), None),
  "s_pack_hh_b32_b16": lambda a, b, c: ((a >> U64(16)) | (b & U64(0xFFFF0000)), None),
  "s_pack_hl_b32_b16": lambda a, b, c: ((a >> U64(16)) | ((b & U64(0xFFFF)) << U64(16)), None),
  # SOP1
  "s_mov_b32": lambda a, c: (a, None), "s_mov_b64": lambda a, c: (a, None),
  "s_not_b32": lambda a, c: _nzr(~a & M32), "s_not_b64": lambda a, c: _nzr(~a),
  "s_brev_b32": lambda a, c: (A.brev32(a).astype(np.uint64), None),
  "s_ctz_i32_b32": lambda a, c: (A.ctz(a, 32).astype(np.int64).astype(np.uint64) & M32, None),
  "s_ctz_i32_b64": lambda a, c: (A.ctz(a, 64).astype(np.int64).astype(np.uint64) & M32, None),
  "s_clz_i32_u32": lambda a, c: (A.clz(a, 32).astype(np.int64).astype(np.uint64) & M32, None),
  "s_clz_i32_u64": lambda a, c: (A.clz(a, 64).astype(np.int64).astype(np.uint64) & M32, None),
  "s_sext_i32_i8": lambda a, c: ((a & U64(0xFF)).astype(np.uint8).view(np.int8).astype(np.int64).astype(np.uint64) & M32, None),
  "s_sext_i32_i16": lambda a, c: ((a & U64(0xFFFF)).astype(np.uint16).view(np.int16).astype(np.int64).astype(np.uint64) & M32, None),
  "s_cls_i32": lambda a, c: (A.clz((a ^ ((a >> U64(31)) & U64(1)) * M32) & M32, 32).astype(np.int64).astype(np.uint64) & M32, None),
  "s_abs_i32": lambda a, c: _nzr(np.abs(_s32(a)).astype(np.uint64) & M32),
  "s_bcnt1_i32_b32": lambda a, c: _nzr(A.popcount(a).astype(np.uint64)), "s_bcnt1_i32_b64": lambda a, c: _nzr(A.popcount(a).astype(np.uint64)),
  "s_bcnt0_i32_b32": lambda a, c: _nzr(U64(32) - A.popcount(a).astype(np.uint64)),
}


SALU_SCC = frozenset({"s_addc_u32", "s_subb_u32", "s_cselect_b32", "s_cselect_b64"})   # the SALU rows that read SCC (the others ignore c)


def _ovf(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Signed 32-bit add/sub: the wrapped result and SCC = signed overflow."""
  return r.astype(np.uint32).astype(np.uint64), (r + 0x80000000).view(np.uint64) > M32   # outside [-2^31, 2^31): r + 2^31 outside [0, 2^32)


def _nzr(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]: return r, r != 0


# s_*_saveexec_b32: new EXEC from (S0, old EXEC); the result (old EXEC) goes to SDST; SCC = new EXEC != 0
SAVEEXEC: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
  "s_and_saveexec_b32": lambda s, e: s & e, "s_or_saveexec_b32": lambda s, e: s | e, "s_xor_saveexec_b32": lambda s, e: s ^ e,
  "s_nand_saveexec_b32": lambda s, e: ~(s & e), "s_nor_saveexec_b32": lambda s, e: ~(s | e), "s_xnor_saveexec_b32": lambda s, e: ~(s ^ e),
  "s_and_not0_saveexec_b32": lambda s, e: ~s & e, "s_or_not0_saveexec_b32": lambda s, e: ~s | e,
  "s_and_not1_saveexec_b32": lambda s, e: s & ~e, "s_or_not1_saveexec_b32": lambda s, e: s | ~e,
}

SCMP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
  "eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
  "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
}
