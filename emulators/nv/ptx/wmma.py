"""wmma.load / wmma.mma / wmma.store (PTX ISA 9.0 §9.7.14.4), the instructions nvcc emits for CUDA's nvcuda::wmma API:
m16n16k16 with .f16 or .bf16 A and B and .f32 C and D, or .s8 / .u8 A and B and .s32 C and D.

The ISA leaves the mapping of matrix elements to the fragment registers of a warp unspecified: only wmma.load, wmma.mma
and wmma.store agree on it. This emulator's mapping: a fragment of S values per thread holds the matrix row-major, lane
l's slot s being element (S * l + s) mod 256 for A and B (S = 16 for .f16, each element held twice; S = 8 for .bf16,
.s8 and .u8) and 8 * l + s for C and D (the slots of a .b32 register: its low half or byte first). Code that relies on
another mapping (reading fragment elements by position) relies on undefined behaviour. Float arithmetic is refgrad's
semantics.wmma (in-order k, exact products, one rounding per add), as for mma.sync; real tensor cores round
differently. Integer arithmetic is exact, then wraps to 32 bits (.satfinite: clamps to the s32 range)."""
from __future__ import annotations

import numpy as np

from emulators.nv.ptx.execute import Launch, PTXFault, warp_check
from emulators.nv.ptx.parse import Instr
from refgrad.dtype import dtypes
from refgrad.uop.semantics import wmma as wmma_arith


def _shape(ins: Instr) -> None:
  shape = next((m for m in ins.mods if m.startswith("m") and "n" in m and "k" in m), "")
  if shape != "m16n16k16": raise PTXFault("compute", f"wmma shape {shape or '(none)'} is not supported (only m16n16k16)", ins)


def _warps(L: Launch, ins: Instr) -> int:
  if L.sel.size % 32 or not (((L.sel % 32).reshape(-1, 32)) == np.arange(32)).all():
    raise PTXFault("compute", f"{ins.op}.{ins.mods[0]} needs whole warps (every lane of each warp executing it)", ins)
  return L.sel.size // 32


def _elements(L: Launch, ins: Instr, addr_op, stride_op, nw: int, col: bool, es: int) -> tuple[str, np.ndarray, np.ndarray]:
  """(space, per-(lane, 8 elements) addresses, lanes repeated 8 times): lane l covers row-major elements 8l..8l+7."""
  base = L.address(addr_op)
  ldm = L.get(stride_op, "u32").astype(np.uint64) if stride_op is not None else np.full(L.sel.size, 16, np.uint64)
  b0, l0 = base.reshape(nw, 32), ldm.reshape(nw, 32)
  if ((b0 != b0[:, :1]) | (l0 != l0[:, :1])).any():
    raise PTXFault("compute", f"{ins.op}.{ins.mods[0]}: the threads of a warp give different addresses or strides (undefined)", ins)
  e = (np.arange(32)[:, None] * 8 + np.arange(8)).astype(np.uint64)   # (32, 8) element numbers
  r, c = e // np.uint64(16), e % np.uint64(16)
  off = (c * l0[:, :1, None] + r) if col else (r * l0[:, :1, None] + c)   # (nw, 32, 8) in elements
  addr = b0[:, :1, None] + off * np.uint64(es)
  return L.space_of(ins), addr.reshape(-1), np.repeat(L.sel, 8)


def _load(L: Launch, ins: Instr) -> None:
  """wmma.load.{a,b,c}.sync.aligned.{row,col}.m16n16k16{.space}.{f16,bf16,f32} {regs}, [addr]{, stride}"""
  _shape(ins)
  which = next((m for m in ins.mods if m in ("a", "b", "c")), None)
  t = ins.types[-1] if ins.types else None
  if which is None or t not in (("f16", "bf16", "s8", "u8") if which in "ab" else ("f32", "s32")):
    raise PTXFault("compute", f"wmma.load.{'.'.join(ins.mods)} is not supported (A/B .f16 .bf16 .s8 .u8, C .f32 .s32)", ins)
  nw = _warps(L, ins)
  es = 4 if t in ("f32", "s32") else 1 if t in ("s8", "u8") else 2
  regs = ins.args[0].value
  space, addr, lanes = _elements(L, ins, ins.args[1], ins.args[2] if len(ins.args) > 2 else None, nw, ins.has("col"), es)
  sel = L.sel
  L.sel = lanes
  try: raw, dd = L.load(space, addr, es)
  finally: L.sel = sel
  flat = np.ascontiguousarray(raw).view({4: np.uint32, 2: np.uint16, 1: np.uint8}[es]).reshape(nw, 256)
  ok = np.ones((nw, 256), np.bool_) if dd is None else dd.reshape(nw, 256)
  if es == 4:   # C: lane l, register s = element 8l + s
    slots, sok = flat.reshape(nw, 32, 8), ok.reshape(nw, 32, 8)
    for s, o in enumerate(regs): L.put(o, "b32", slots[:, :, s].reshape(-1), sok[:, :, s].reshape(-1))  # type: ignore[index]
    return
  per = 4 // es           # values per register
  S = per * len(regs)     # values per thread
  idx = (np.arange(32)[:, None] * S + np.arange(S)) % 256
  vals, vok = flat[:, idx], ok[:, idx]   # (nw, 32, S)
  for k, o in enumerate(regs):  # type: ignore[arg-type]
    v = sum(vals[:, :, per * k + j].astype(np.uint32) << np.uint32(8 * es * j) for j in range(per))
    L.put(o, "b32", v.reshape(-1), vok[:, :, per * k:per * (k + 1)].all(axis=-1).reshape(-1))


def _frag(L: Launch, regs, nw: int, es: int) -> np.ndarray:
  """A or B (nw, 16, 16) of es-byte unsigned values from its registers (the copy in lanes 0..)."""
  parts, ut, m = [], {2: np.uint16, 1: np.uint8}[es], np.uint32((1 << (8 * es)) - 1)
  for o in regs:
    v = L.get(o, "b32").reshape(nw, 32)
    parts += [((v >> np.uint32(8 * es * j)) & m).astype(ut) for j in range(4 // es)]
  h = np.stack(parts, -1)   # (nw, 32, S): element (S * l + s) mod 256
  return h.reshape(nw, -1)[:, :256].reshape(nw, 16, 16)


def _mma(L: Launch, ins: Instr) -> None:
  """wmma.mma.sync.aligned.{row,col}.{row,col}.m16n16k16.f32.f32 (f16 A, B) or .f32.bf16.bf16.f32 d, a, b, c"""
  _shape(ins)
  if ins.types and ins.types[0] == "s32": return _imma(L, ins)
  ab = "bf16" if "bf16" in ins.types else "f16"
  if ins.types[0] != "f32" or ins.types[-1] != "f32" or any(t not in ("f32", "f16", "bf16") for t in ins.types) or ins.has("satfinite"):
    raise PTXFault("compute", f"wmma.mma.{'.'.join(ins.mods)} is not supported (f32 += f16/bf16 x f16/bf16, s32 += s8/u8 x s8/u8)", ins)
  nw = _warps(L, ins)
  L._d = None
  d, a, b, c = ins.args[:4]
  A, B = _frag(L, a.value, nw, 2), _frag(L, b.value, nw, 2)
  C = np.stack([L.get(o, "f32").reshape(nw, 32) for o in c.value], -1).reshape(nw, 16, 16)  # type: ignore[union-attr]
  dw = None if L._d is None else np.repeat(L._d.reshape(nw, 32).all(axis=1), 32)   # D depends on every lane's fragments
  if ab == "f16": A, B = A.view(np.float16), B.view(np.float16)
  D = wmma_arith(A, B, C, dtypes.float16 if ab == "f16" else dtypes.bfloat16).reshape(nw, 32, 8)
  for s, o in enumerate(d.value): L.put(o, "f32", D[:, :, s].reshape(-1), dw)  # type: ignore[arg-type]


def _imma(L: Launch, ins: Instr) -> None:
  """wmma.mma.sync.aligned.{row,col}.{row,col}.m16n16k16.s32.{s8,u8}.{s8,u8}.s32{.satfinite}: exact sums, then 32 bits."""
  ta, tb = ins.types[1], ins.types[2] if len(ins.types) > 3 else None
  if len(ins.types) != 4 or ins.types[3] != "s32" or ta not in ("s8", "u8") or tb not in ("s8", "u8"):
    raise PTXFault("compute", f"wmma.mma.{'.'.join(ins.mods)} is not supported (s32 += s8/u8 x s8/u8)", ins)
  nw = _warps(L, ins)
  L._d = None
  d, a, b, c = ins.args[:4]
  A, B = _frag(L, a.value, nw, 1), _frag(L, b.value, nw, 1)
  A = (A.view(np.int8) if ta == "s8" else A).astype(np.int64)
  B = (B.view(np.int8) if tb == "s8" else B).astype(np.int64)
  C = np.stack([L.get(o, "s32").reshape(nw, 32) for o in c.value], -1).reshape(nw, 16, 16).astype(np.int64)  # type: ignore[union-attr]
  dw = None if L._d is None else np.repeat(L._d.reshape(nw, 32).all(axis=1), 32)
  D = C + np.einsum("wik,wkj->wij", A, B)   # |products| < 2**16, 16 terms: exact in int64
  D = np.clip(D, -2**31, 2**31 - 1) if ins.has("satfinite") else (D & 0xFFFFFFFF)
  D = D.astype(np.int64).astype(np.uint32).view(np.int32).reshape(nw, 32, 8)
  for s, o in enumerate(d.value): L.put(o, "s32", D[:, :, s].reshape(-1), dw)  # type: ignore[arg-type]


def _store(L: Launch, ins: Instr) -> None:
  """wmma.store.d.sync.aligned.{row,col}.m16n16k16{.space}.f32 [addr], {regs}{, stride}"""
  _shape(ins)
  if not ins.types or ins.types[-1] not in ("f32", "s32"):
    raise PTXFault("compute", f"wmma.store.{'.'.join(ins.mods)} is not supported (D .f32 or .s32)", ins)
  nw = _warps(L, ins)
  regs = ins.args[1].value
  L._d = None
  v = np.stack([L.get(o, "b32").reshape(nw, 32) for o in regs], -1)   # (nw, 32, 8): element 8l + s  # type: ignore[union-attr]
  dv = L._d
  space, addr, lanes = _elements(L, ins, ins.args[0], ins.args[2] if len(ins.args) > 2 else None, nw, ins.has("col"), 4)
  data = np.ascontiguousarray(v.reshape(-1)).view(np.uint8).reshape(-1, 4)
  sel = L.sel
  L.sel = lanes
  try: L.store(space, addr, data, None if dv is None else np.repeat(dv, 8))
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
