"""The SIMD video instructions (PTX ISA §9.7.16.2): vadd2 vsub2 vavrg2 vabsdiff2 vmin2 vmax2 vset2 on two half-words and
the same with 4 on four bytes, each lane an integer of its operand's signedness. nvcc emits them for CUDA's SIMD
intrinsics (__vabsdiffu4 is `vabsdiff4.u32.u32.u32`, __vsadu4 the same with `.add`).

Lane i of a takes the element .asel names for it from the eight bytes (four half-words) of {b, a} (a's are 0-3, b's
4-7), lane i of b the one .bsel names; the defaults are a's own lanes and b's own lanes. Each lane's result is
clamped to the destination type's 8/16-bit range with .sat; then either merged (the lanes .mask names from the results,
the others from c) or, with .add, summed into c (32-bit wrap). The selectors are suffixes of the operands (`d.h0`,
`a.b3210`), as PTX writes them."""
from __future__ import annotations

import numpy as np

from emulators.nv.ptx.execute import Launch, PTXFault
from emulators.nv.ptx.parse import Instr, Operand

# element width (bytes), lanes, default .asel, default .bsel, default .mask
_SHAPES = {"2": (2, 2, "h10", "h32", "h10"), "4": (1, 4, "b3210", "b7654", "b3210")}
_OPS = {
  "vadd": lambda a, b: a + b,
  "vsub": lambda a, b: a - b,
  "vavrg": lambda a, b: np.where(a + b >= 0, (a + b + 1) >> 1, (a + b) >> 1),
  "vabsdiff": lambda a, b: np.abs(a - b),
  "vmin": np.minimum,
  "vmax": np.maximum,
}
_CMPS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


def _split(ins: Instr, o: Operand, default: str, prefix: str, count: int | None, hi: int) -> tuple[Operand, list[int]]:
  """A register operand and the element numbers of its `.hxy` / `.bxyzw` suffix (written highest lane first; `count`
  digits, any number for a mask), or of the default."""
  s = default
  if o.kind == "reg" and "." in str(o.value):
    name, s = str(o.value).split(".", 1)
    o = Operand("reg", name)
  digits = s[1:]
  if s[:1] != prefix or not digits.isdigit() or (count is not None and len(digits) != count) or any(int(ch) > hi for ch in digits):
    raise PTXFault("compute", f"{ins.op}: selector .{s} is not a .{prefix} selector of {count or 'up to 4'} elements up to {hi}", ins)
  return o, [int(ch) for ch in reversed(digits)]


def _lanes(v: np.ndarray, w: int, signed: bool) -> np.ndarray:
  """(lanes of selected threads, 8 // w elements) of a 64-bit {b, a} value, each sign- or zero-extended to int64."""
  u = np.ascontiguousarray(v.astype(np.uint64)).view(np.uint8 if w == 1 else np.uint16).reshape(v.size, 8 // w)
  return (u.view(np.int8 if w == 1 else np.int16) if signed else u).astype(np.int64)


def video(L: Launch, ins: Instr) -> None:
  name, n = ins.op[:-1], ins.op[-1]
  w, lanes, asel_d, bsel_d, mask_d = _SHAPES[n]
  setp = name == "vset"
  types = list(ins.types)
  if len(types) != (2 if setp else 3) or any(t not in ("u32", "s32") for t in types):
    raise PTXFault("compute", f"{ins.op} takes {'.atype.btype' if setp else '.dtype.atype.btype'} from .u32/.s32", ins)
  dt, at, bt = ("u32", *types) if setp else types
  cmp = next((m for m in ins.mods if m in _CMPS), None) if setp else None
  if setp and cmp is None: raise PTXFault("compute", f"{ins.op} needs a comparison ({', '.join(_CMPS)})", ins)
  add, sat = ins.has("add"), ins.has("sat")
  if add and sat: raise PTXFault("compute", f"{ins.op}: .sat cannot be used with .add", ins)
  p = "h" if w == 2 else "b"
  d, mask = _split(ins, ins.args[0], mask_d, p, None, lanes - 1)
  a_op, asel = _split(ins, ins.args[1], asel_d, p, lanes, 2 * lanes - 1)
  b_op, bsel = _split(ins, ins.args[2], bsel_d, p, lanes, 2 * lanes - 1)
  c_op = ins.args[3]
  a, b, c = (L.get(o, "u32").astype(np.uint64) for o in (a_op, b_op, c_op))
  ba = a | (b << np.uint64(32))
  va, vb = _lanes(ba, w, at == "s32")[:, asel], _lanes(ba, w, bt == "s32")[:, bsel]
  t = _CMPS[cmp](va, vb).astype(np.int64) if setp else _OPS[name](va, vb)
  bits = 8 * w
  if sat: t = np.clip(t, -(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dt == "s32" else np.clip(t, 0, (1 << bits) - 1)
  if add:
    r = c.astype(np.int64) + t[:, mask].sum(axis=1)
  else:
    keep = np.zeros(lanes, np.bool_)
    keep[mask] = True
    merged = np.where(keep, t & ((1 << bits) - 1), _lanes(c, w, False)[:, :lanes])
    r = (merged << (np.arange(lanes, dtype=np.int64) * bits)).sum(axis=1)
  L.put(d, "u32", (r & 0xFFFFFFFF).astype(np.uint32))


TABLE = {f"{n}{k}": video for n in (*_OPS, "vset") for k in _SHAPES}
