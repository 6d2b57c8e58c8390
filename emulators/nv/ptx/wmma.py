"""wmma.load / wmma.mma / wmma.store (PTX ISA 9.0 §9.7.14.4), the instructions nvcc emits for CUDA's nvcuda::wmma API:
m16n16k16, m32n8k16 and m8n32k16 with .f16 or .bf16 A and B and .f32 C and D, or .s8 / .u8 A and B and .s32 C and D;
m16n16k8 with .tf32 A and B and .f32 C and D; m8n8k4 with .f64 A, B, C and D. A is M x K, B K x N, C and D M x N.

The ISA leaves the mapping of matrix elements to the fragment registers of a warp unspecified: only wmma.load, wmma.mma
and wmma.store agree on it. This emulator's mapping, for a matrix of E elements numbered row-major (element r * cols + c)
and a fragment of S values per thread (the slots of its registers in order, a .b32 register's low half or byte first):
lane l's slot s is element (S * l + s) mod E. S * 32 >= E always; where it is larger, elements are held several times
(m16n16k16 .f16 A/B: S = 16, E = 256, each twice; m32n8k16 .f16 B and m8n32k16 .f16 A: S = 16, E = 128, each four
times; every other A/B and every C/D holds each element once: bf16 m16n16k16 S = 8, m32n8k16 A S = 16 and B S = 4,
m8n32k16 A S = 4 and B S = 16; s8/u8 the same counts as bf16; tf32 A and B S = 4 (E = 128); C/D S = 8 (E = 256,
element 8l + s); f64 A and B S = 1 (E = 32), C/D S = 2 (E = 64)). The register count of each fragment is checked
against the ISA's. Code that relies on another mapping (reading fragment elements by position) relies on undefined
behaviour.

Arithmetic, in-order over k (d = c; d = d + a_k b_k for k = 0 .. K-1): .f16/.bf16: refgrad's semantics.wmma (exact
products, one float32 rounding per add), as for mma.sync; .tf32: an A/B register is read as tf32, its low 13 mantissa bits
ignored (the ISA defines the operand as .tf32, whose format has no such bits; cvt.rna.tf32.f32 produces them zero), then
the same chain (the products of two 11-bit significands are exact in float32 unless they overflow or leave the normal
range, where float32's multiply rounds them once, as for bf16); .f64 (.rn): each step one IEEE fma, d = fma(a_k, b_k, d)
(A100's DMMA is IEEE double precision). Real tensor cores round the float32 chains differently. Integer arithmetic is
exact, then wraps to 32 bits (.satfinite: clamps to the s32 range)."""
from __future__ import annotations

import numpy as np

from emulators.nv.ptx.execute import Launch, PTXFault, warp_check
from emulators.nv.ptx.parse import Instr
from refgrad.dtype import dtypes
from refgrad.uop.semantics import fma_f64
from refgrad.uop.semantics import wmma as wmma_arith

# shape -> (M, N, K, the A/B types it takes, the C/D types it takes)
_SHAPES: dict[str, tuple[int, int, int, tuple[str, ...], tuple[str, ...]]] = {
  "m16n16k16": (16, 16, 16, ("f16", "bf16", "s8", "u8"), ("f32", "s32")),
  "m32n8k16": (32, 8, 16, ("f16", "bf16", "s8", "u8"), ("f32", "s32")),
  "m8n32k16": (8, 32, 16, ("f16", "bf16", "s8", "u8"), ("f32", "s32")),
  "m16n16k8": (16, 16, 8, ("tf32",), ("f32",)),
  "m8n8k4": (8, 8, 4, ("f64",), ("f64",)),
}
_ES = {"f16": 2, "bf16": 2, "s8": 1, "u8": 1, "tf32": 4, "f32": 4, "s32": 4, "f64": 8}   # bytes per element in memory
_TF32_MASK = np.uint32(0xFFFFE000)   # sign, exponent and the 10 mantissa bits of tf32


def _shape(ins: Instr) -> tuple[str, int, int, int]:
  shape = next((m for m in ins.mods if m.startswith("m") and "n" in m and "k" in m), "")
  if shape not in _SHAPES:
    raise PTXFault("compute", f"wmma shape {shape or '(none)'} is not supported (only {', '.join(_SHAPES)})", ins)
  M, N, K = _SHAPES[shape][:3]
  return shape, M, N, K


def _dims(which: str, M: int, N: int, K: int) -> tuple[int, int]:
  return {"a": (M, K), "b": (K, N)}.get(which, (M, N))


def _nregs(t: str, which: str, E: int) -> int:
  """The register count of a fragment of E elements of type t (the ISA's: .f16 A/B always 8 .f16x2 registers)."""
  if t == "f16" and which in "ab": return 8
  return E // 32 if t == "f64" else E * _ES[t] // 128


def _warps(L: Launch, ins: Instr) -> int:
  if L.sel.size % 32 or not (((L.sel % 32).reshape(-1, 32)) == np.arange(32)).all():
    raise PTXFault("compute", f"{ins.op}.{ins.mods[0]} needs whole warps (every lane of each warp executing it)", ins)
  return L.sel.size // 32


def _elements(L: Launch, ins: Instr, addr_op, stride_op, nw: int, col: bool, es: int, rows: int, cols: int) -> tuple[str, np.ndarray, np.ndarray]:
  """(space, per-(lane, E/32 elements) addresses, lanes repeated E/32 times): lane l covers row-major elements
  (E/32) l .. (E/32) (l + 1) - 1 of the rows x cols matrix. Without a stride, the matrix is packed (stride cols, or rows
  when col-major)."""
  base = L.address(addr_op)
  per = rows * cols // 32
  ldm = L.get(stride_op, "u32").astype(np.uint64) if stride_op is not None else np.full(L.sel.size, rows if col else cols, np.uint64)
  b0, l0 = base.reshape(nw, 32), ldm.reshape(nw, 32)
  if ((b0 != b0[:, :1]) | (l0 != l0[:, :1])).any():
    raise PTXFault("compute", f"{ins.op}.{ins.mods[0]}: the threads of a warp give different addresses or strides (undefined)", ins)
  e = (np.arange(32)[:, None] * per + np.arange(per)).astype(np.uint64)   # (32, per) element numbers
  r, c = e // np.uint64(cols), e % np.uint64(cols)
  off = (c * l0[:, :1, None] + r) if col else (r * l0[:, :1, None] + c)   # (nw, 32, per) in elements
  addr = b0[:, :1, None] + off * np.uint64(es)
  return L.space_of(ins), addr.reshape(-1), np.repeat(L.sel, per)


def _regs(ins: Instr, o, t: str, which: str, E: int) -> tuple:
  regs = o.value if o.kind == "vec" else (o,)
  if len(regs) != _nregs(t, which, E):
    raise PTXFault("compute", f"wmma .{which} fragment of {t} needs {_nregs(t, which, E)} registers, not {len(regs)}", ins)
  return regs


def _load(L: Launch, ins: Instr) -> None:
  """wmma.load.{a,b,c}.sync.aligned.{row,col}.shape{.space}.type {regs}, [addr]{, stride}"""
  shape, M, N, K = _shape(ins)
  which = next((m for m in ins.mods if m in ("a", "b", "c")), None)
  t = ins.types[-1] if ins.types else None
  ok_t = _SHAPES[shape][3 if which in ("a", "b") else 4]
  if which is None or t not in ok_t:
    raise PTXFault("compute", f"wmma.{'.'.join(ins.mods)} is not supported ({shape}: A/B {' '.join(_SHAPES[shape][3])}, "
                   f"C {' '.join(_SHAPES[shape][4])})", ins)
  rows, cols = _dims(which, M, N, K)
  E, es = rows * cols, _ES[t]
  regs = _regs(ins, ins.args[0], t, which, E)
  nw = _warps(L, ins)
  space, addr, lanes = _elements(L, ins, ins.args[1], ins.args[2] if len(ins.args) > 2 else None, nw, ins.has("col"), es, rows, cols)
  sel = L.sel
  L.sel = lanes
  try: raw, dd = L.load(space, addr, es)
  finally: L.sel = sel
  flat = np.ascontiguousarray(raw).view({8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}[es]).reshape(nw, E)
  ok = np.ones((nw, E), np.bool_) if dd is None else dd.reshape(nw, E)
  per = max(1, 4 // es)   # values per register
  S = per * len(regs)     # values per thread
  idx = (np.arange(32)[:, None] * S + np.arange(S)) % E
  vals, vok = flat[:, idx], ok[:, idx]   # (nw, 32, S)
  for k, o in enumerate(regs):
    if es == 8: v = vals[:, :, k]
    else: v = sum(vals[:, :, per * k + j].astype(np.uint32) << np.uint32(8 * es * j) for j in range(per))
    L.put(o, "b64" if es == 8 else "b32", v.reshape(-1), vok[:, :, per * k:per * (k + 1)].all(axis=-1).reshape(-1))


def _frag(L: Launch, regs, nw: int, es: int, rows: int, cols: int) -> np.ndarray:
  """A or B (nw, rows, cols) of es-byte unsigned values from its registers (the copy in lanes 0..)."""
  if es >= 4:
    v = np.stack([L.get(o, "b64" if es == 8 else "b32").reshape(nw, 32) for o in regs], -1)
    return v.reshape(nw, -1)[:, :rows * cols].reshape(nw, rows, cols)
  parts, ut, m = [], {2: np.uint16, 1: np.uint8}[es], np.uint32((1 << (8 * es)) - 1)
  for o in regs:
    v = L.get(o, "b32").reshape(nw, 32)
    parts += [((v >> np.uint32(8 * es * j)) & m).astype(ut) for j in range(4 // es)]
  h = np.stack(parts, -1)   # (nw, 32, S): element (S * l + s) mod E
  return h.reshape(nw, -1)[:, :rows * cols].reshape(nw, rows, cols)


def _acc(L: Launch, regs, t: str, nw: int, M: int, N: int) -> np.ndarray:
  return np.stack([L.get(o, t).reshape(nw, 32) for o in regs], -1).reshape(nw, M, N)


def _inorder(A: np.ndarray, B: np.ndarray, C: np.ndarray, step) -> np.ndarray:
  d = C.copy()
  with np.errstate(all="ignore"):
    for k in range(A.shape[-1]): d = step(A[..., :, k, None], B[..., None, k, :], d)
  return d


def mma_float(ab: str, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
  """D = A B + C of A (..., M, K) and B (..., K, N) as raw bits of type ab (u16 for f16/bf16, u32 for tf32, u64 for f64)
  and C (..., M, N) float32 (float64 for f64), in-order over k: f16/bf16 semantics.wmma; tf32 the low 13 mantissa bits
  dropped, then the same float32 chain; f64 one IEEE fma per step. (wmma.mma and mma.sync share it.)"""
  if ab == "f64": return _inorder(A.view(np.float64), B.view(np.float64), C.astype(np.float64), fma_f64)
  if ab == "tf32": return _inorder((A & _TF32_MASK).view(np.float32), (B & _TF32_MASK).view(np.float32), C.astype(np.float32), lambda x, y, z: z + x * y)
  return wmma_arith(A.view(np.float16) if ab == "f16" else A, B.view(np.float16) if ab == "f16" else B, C,
                    dtypes.float16 if ab == "f16" else dtypes.bfloat16)


def _mma(L: Launch, ins: Instr) -> None:
  """wmma.mma.sync.aligned.{row,col}.{row,col}.shape.dtype.{atype.btype.}ctype{.rn}{.satfinite} d, a, b, c: shape's
  dtype/ctype .f32 (f16 A, B: no atype/btype), .f32.bf16.bf16.f32, .f32.tf32.tf32.f32, .f64.f64.f64.f64 or .s32.{s8,u8}.{s8,u8}.s32."""
  shape, M, N, K = _shape(ins)
  if ins.types and ins.types[0] == "s32": return _imma(L, ins, shape, M, N, K)
  ty = ins.types
  ab = ty[1] if len(ty) == 4 else "f16" if len(ty) == 2 else ""
  ok = (len(ty) == 2 and ty == ("f32", "f32")) or (len(ty) == 4 and ty[1] == ty[2] and ty[0] == ty[3] == ("f64" if ab == "f64" else "f32"))
  rnd = [m for m in ins.mods if m in ("rn", "rz", "rm", "rp")]
  if not ok or ab not in _SHAPES[shape][3] or ins.has("satfinite") or rnd not in ([], ["rn"]):
    raise PTXFault("compute", f"wmma.{'.'.join(ins.mods)} is not supported ({shape}: A/B {' '.join(_SHAPES[shape][3])} "
                   "with f32 C/D, f64 with .rn, s8/u8 with s32)", ins)
  d, a, b, c = ins.args[:4]
  ct = ty[0]
  ra, rb = _regs(ins, a, ab, "a", M * K), _regs(ins, b, ab, "b", K * N)
  rc, rd = _regs(ins, c, ct, "c", M * N), _regs(ins, d, ct, "d", M * N)
  nw = _warps(L, ins)
  L._d = None
  A, B = _frag(L, ra, nw, _ES[ab], M, K), _frag(L, rb, nw, _ES[ab], K, N)
  C = _acc(L, rc, ct, nw, M, N)
  dw = None if L._d is None else np.repeat(L._d.reshape(nw, 32).all(axis=1), 32)   # D depends on every lane's fragments
  D = mma_float(ab, A, B, C).reshape(nw, 32, -1)
  for s, o in enumerate(rd): L.put(o, ct, D[:, :, s].reshape(-1), dw)


def _imma(L: Launch, ins: Instr, shape: str, M: int, N: int, K: int) -> None:
  """wmma.mma.sync.aligned.{row,col}.{row,col}.shape.s32.{s8,u8}.{s8,u8}.s32{.satfinite}: exact sums, then 32 bits."""
  ta, tb = ins.types[1], ins.types[2] if len(ins.types) > 3 else None
  if len(ins.types) != 4 or ins.types[3] != "s32" or ta not in ("s8", "u8") or tb not in ("s8", "u8") or "s8" not in _SHAPES[shape][3]:
    raise PTXFault("compute", f"wmma.{'.'.join(ins.mods)} is not supported (s32 += s8/u8 x s8/u8 at m16n16k16, m32n8k16, m8n32k16)", ins)
  d, a, b, c = ins.args[:4]
  ra, rb = _regs(ins, a, ta, "a", M * K), _regs(ins, b, tb, "b", K * N)
  rc, rd = _regs(ins, c, "s32", "c", M * N), _regs(ins, d, "s32", "d", M * N)
  nw = _warps(L, ins)
  L._d = None
  A, B = _frag(L, ra, nw, 1, M, K), _frag(L, rb, nw, 1, K, N)
  A = (A.view(np.int8) if ta == "s8" else A).astype(np.int64)
  B = (B.view(np.int8) if tb == "s8" else B).astype(np.int64)
  C = _acc(L, rc, "s32", nw, M, N).astype(np.int64)
  dw = None if L._d is None else np.repeat(L._d.reshape(nw, 32).all(axis=1), 32)
  D = C + np.einsum("wik,wkj->wij", A, B)   # |products| < 2**16, 16 terms: exact in int64
  D = np.clip(D, -2**31, 2**31 - 1) if ins.has("satfinite") else (D & 0xFFFFFFFF)
  D = D.astype(np.int64).astype(np.uint32).view(np.int32).reshape(nw, 32, 8)
  for s, o in enumerate(rd): L.put(o, "s32", D[:, :, s].reshape(-1), dw)


def _store(L: Launch, ins: Instr) -> None:
  """wmma.store.d.sync.aligned.{row,col}.shape{.space}.{f32,s32,f64} [addr], {regs}{, stride}"""
  shape, M, N, _ = _shape(ins)
  t = ins.types[-1] if ins.types else ""
  if t not in _SHAPES[shape][4]:
    raise PTXFault("compute", f"wmma.{'.'.join(ins.mods)} is not supported ({shape}: D {' '.join(_SHAPES[shape][4])})", ins)
  regs = _regs(ins, ins.args[1], t, "d", M * N)
  nw = _warps(L, ins)
  es = _ES[t]
  L._d = None
  v = np.stack([L.get(o, "b64" if es == 8 else "b32").reshape(nw, 32) for o in regs], -1)   # (nw, 32, S): element S l + s
  dv = L._d
  space, addr, lanes = _elements(L, ins, ins.args[0], ins.args[2] if len(ins.args) > 2 else None, nw, ins.has("col"), es, M, N)
  data = np.ascontiguousarray(v.reshape(-1)).view(np.uint8).reshape(-1, es)
  sel = L.sel
  L.sel = lanes
  try: L.store(space, addr, data, None if dv is None else np.repeat(dv, len(regs)))
  finally: L.sel = sel


def wmma(L: Launch, ins: Instr) -> None:
  kind = ins.mods[0] if ins.mods else ""
  f = {"load": _load, "mma": _mma, "store": _store}.get(kind)
  if f is None: raise PTXFault("compute", f"wmma.{kind} is not supported", ins)
  f(L, ins)


def ldmatrix(L: Launch, ins: Instr) -> None:
  """ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}{.shared{::cta}}.b16 d, [addr] (PTX ISA 9.0 §9.7.14.5.15): matrix j
  (j < 1, 2, 4) is 8 rows of 8 b16 values; thread 8j + r gives row r's address (16 bytes). Thread l receives in d_j the
  pair at row l / 4, columns 2 (l % 4) .. +1 (.trans: the transposed matrix's), the lower column in the low half."""
  n = 4 if ins.has("x4") else 2 if ins.has("x2") else 1
  if not ins.has("m8n8") or ins.types[-1:] != ("b16",) or not ins.has("sync"):
    raise PTXFault("compute", f"ldmatrix.{'.'.join(ins.mods)} is not supported (only .m8n8 .x1/.x2/.x4 .b16)", ins)
  nw = _warps(L, ins)
  warp_check(L, ins, np.full(L.sel.size, 0xFFFFFFFF, np.uint32))
  dst = ins.args[0].value if ins.args[0].kind == "vec" else (ins.args[0],)
  if len(dst) != n: raise PTXFault("compute", f"ldmatrix .x{n} needs {n} destination registers", ins)  # type: ignore[arg-type]
  addr = L.address(ins.args[1]).reshape(nw, 32)[:, :8 * n].reshape(-1)   # the row addresses of threads 0 .. 8n-1
  space = L.space_of(ins)
  sel = L.sel
  L.sel = sel.reshape(nw, 32)[:, :8 * n].reshape(-1)
  try: raw, dd = L.load(space, addr, 16)
  finally: L.sel = sel
  M = np.ascontiguousarray(raw).view(np.uint16).reshape(nw, n, 8, 8)   # (warp, matrix, row, column)
  ok = np.ones((nw, n, 8), np.bool_) if dd is None else dd.reshape(nw, n, 8)
  if ins.has("trans"): M = M.transpose(0, 1, 3, 2)
  lane = np.arange(32)
  r, c = lane // 4, 2 * (lane % 4)
  for j, o in enumerate(dst):  # type: ignore[arg-type]
    v = M[:, j, r, c].astype(np.uint32) | (M[:, j, r, c + 1].astype(np.uint32) << np.uint32(16))
    d = ok[:, j, :].all(axis=1)   # a row's definedness, conservatively the whole matrix's
    L.put(o, "b32", v.reshape(-1), np.repeat(d, 32))
