"""The host side of raw PTX launches (`Device["NV"].run_ptx`): an entry's .param list and its static shared bytes read
from the PTX text, the PTX program image (refgrad/hw/image.py: b"PTX1" around JSON {"entry", "ptx"}), and constant buffer 0
packed as NVIDIA's driver lays it out (parameters from byte PARAM_BASE, each at its alignment: refgrad/hw/nv.py)."""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from refgrad.hw import image as container
from refgrad.hw.nv import PARAM_BASE

PTX_MAGIC = container.PTX
_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}


@dataclass(frozen=True)
class Param:
  name: str
  type: str      # u64, f32, ...
  size: int
  align: int


def entry_signature(src: str, entry: str) -> tuple[list[Param], int]:
  """The .param list of `.entry entry` and its static .shared bytes; ValueError names what is wrong."""
  text = re.sub(r"//[^\n]*", "", src)
  m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(([^)]*)\)", text)
  if m is None: raise ValueError(f"the PTX text has no .entry {entry!r}")
  params = []
  for p in filter(None, (x.strip() for x in m.group(1).split(","))):
    pm = re.fullmatch(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.([a-z]+(\d+))\s+([$\w]+)(?:\[(\d+)\])?", p)
    if pm is None: raise ValueError(f".entry {entry}: parameter {p!r} is not supported by run_ptx (scalars and .b8 arrays)")
    es = _SIZES.get(pm.group(3))
    if es is None: raise ValueError(f".entry {entry}: parameter {p!r} has an unsupported type")
    params.append(Param(pm.group(4), pm.group(2), es * int(pm.group(5) or 1), int(pm.group(1) or es)))
  body = text[m.end():]
  end = _body_end(body)
  shared = 0
  for sm in re.finditer(r"\.shared\s+(?:\.align\s+(\d+)\s+)?\.[a-z]+(\d+)\s+[$\w]+((?:\[\d+\])*)", body[:end]):
    es, al = int(sm.group(2)) // 8, int(sm.group(1) or int(sm.group(2)) // 8)
    cnt = int(np.prod([int(d) for d in re.findall(r"\d+", sm.group(3))] or [1]))
    shared = -(-shared // al) * al + es * cnt
  return params, shared


def _body_end(body: str) -> int:
  depth = 0
  for i, ch in enumerate(body):
    if ch == "{": depth += 1
    elif ch == "}":
      depth -= 1
      if depth == 0: return i
  return len(body)


def make_image(src: str, entry: str) -> bytes: return container.pack(PTX_MAGIC, container.ptx_payload(src, entry))


def pack_params(entry: str, params: list[Param], args: list, pointers: dict[int, int]) -> bytes:
  """Constant buffer 0: PARAM_BASE zero bytes, then each parameter at its alignment. `pointers`: arg index -> buffer VA."""
  if len(args) != len(params):
    raise ValueError(f"run_ptx: .entry {entry} takes {len(params)} parameters ({', '.join(p.type for p in params)}), got {len(args)} arguments")
  out = bytearray(PARAM_BASE)
  for i, (p, a) in enumerate(zip(params, args)):
    while (len(out) - PARAM_BASE) % p.align: out.append(0)
    if i in pointers:
      if p.size != 8: raise ValueError(f"run_ptx: argument {i} is an array but parameter {p.name} is .{p.type} (arrays are passed as .u64 pointers)")
      out += struct.pack("<Q", pointers[i])
      continue
    if not isinstance(a, np.generic): raise ValueError(f"run_ptx: argument {i} ({type(a).__name__}) must be a numpy array or numpy scalar")
    if a.dtype.itemsize != p.size:
      raise ValueError(f"run_ptx: argument {i} is {a.dtype} ({a.dtype.itemsize} bytes) but parameter {p.name} is .{p.type} ({p.size} bytes)")
    kind = p.type[0]
    if (kind == "f") != (a.dtype.kind == "f"):
      raise ValueError(f"run_ptx: argument {i} is {a.dtype} but parameter {p.name} is .{p.type}")
    out += a.tobytes()
  return bytes(out)


_INSTR = re.compile(r"^(?:@!?%?\w+\s+)?([a-z][\w.]*)\s+(.*?);?$")
_REG = re.compile(r"%[\w$]+")


def buffer_access(src: str, entry: str, params: list[Param]) -> tuple[frozenset[int], frozenset[int]]:
  """(stored, loaded): the parameters (by position) whose value a `st`/`atom`/`red` or an `ld` of `.entry entry` may address,
  found by following registers from each `ld.param` through every instruction that writes one (an over-approximation:
  the launcher tracks those buffers for hazards and for work a fault dropped)."""
  text = re.sub(r"//[^\n]*", "", src)
  m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\([^)]*\)", text)
  if m is None: raise ValueError(f"the PTX text has no .entry {entry!r}")
  body = text[m.end():][:_body_end(text[m.end():])]
  pos = {p.name: i for i, p in enumerate(params)}
  instrs = []
  for ln in body.split(";"):
    ln = re.sub(r"^[\s{}]*(?:[$\w]+:\s*)?[\s{}]*", "", ln)   # block braces and a label before the instruction
    if (im := _INSTR.match(ln.strip() + ";")) is None: continue
    op, rest = im.group(1), im.group(2)
    ops = [o.strip() for o in re.split(r",(?![^{]*\})", rest)] if rest else []   # commas outside vector braces
    instrs.append((op, ops))
  taint: dict[str, set[int]] = {}
  changed = True
  while changed:   # to a fixpoint: loops carry addresses around
    changed = False
    for op, ops in instrs:
      if not ops or op.startswith(("st.", "atom", "red", "bar", "bra", "ret", "exit")): continue
      if op.startswith("ld.param"):
        srcs = {pos[n] for n in re.findall(r"\[([\w$]+)", ops[-1]) if n in pos}
      else: srcs = set().union(*(taint.get(r, set()) for o in ops[1:] for r in _REG.findall(o)))
      for d in _REG.findall(ops[0]):
        if srcs - taint.get(d, set()): taint.setdefault(d, set()).update(srcs); changed = True
  stored: set[int] = set()
  loaded: set[int] = set()
  for op, ops in instrs:
    addr = next((o for o in ops if o.startswith("[")), None)
    if addr is None or op.startswith(("ld.param", "ld.shared", "st.shared", "ld.local", "st.local", "ld.const")): continue
    hit = set().union(*(taint.get(r, set()) for r in _REG.findall(addr)))
    if op.startswith(("st.", "atom", "red")): stored |= hit
    if op.startswith(("ld.", "ldu.", "atom")): loaded |= hit
  return frozenset(stored), frozenset(loaded)
