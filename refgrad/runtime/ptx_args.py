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


MAX_SHARED_BYTES = 163 * 1024   # shared memory one block may have on compute capability 8.0 (with the opt-in above 48 KiB)


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
  # the entry's own .shared variables, then the module's (outside every function body; extern arrays have no size)
  for sm in re.finditer(r"\.shared\s+(?:\.align\s+(\d+)\s+)?\.[a-z]+(\d+)\s+[$\w]+(?![$\w])((?:\[\d+\])*)(?![\d\[])", body[:end] + "\n" + _module_scope(text)):
    es, al = int(sm.group(2)) // 8, int(sm.group(1) or int(sm.group(2)) // 8)
    cnt = int(np.prod([int(d) for d in re.findall(r"\d+", sm.group(3))] or [1]))
    shared = -(-shared // al) * al + es * cnt
  for em in re.finditer(r"\.extern\s+\.shared\s+(?:\.align\s+(\d+)\s+)?\.[a-z]+(\d+)", _module_scope(text) + "\n" + body[:end]):
    al = int(em.group(1) or int(em.group(2)) // 8)   # the dynamic part starts at the extern array's alignment
    shared = -(-shared // al) * al
  return params, shared


def _module_scope(text: str) -> str:
  """The text outside every brace block (module-scope declarations)."""
  out, depth = [], 0
  for ch in text:
    if ch == "{": depth += 1
    elif ch == "}": depth -= 1
    elif depth == 0: out.append(ch)
  return "".join(out)


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
_REG = re.compile(r"%[\w$.]+")
_MEM = ("ld", "ldu", "st", "atom", "red")
_NOT_GLOBAL = frozenset({"shared", "local", "param", "const"})
_NO_DEST = ("st", "red", "bar", "barrier", "bra", "ret", "exit", "membar", "fence", "prefetch", "prefetchu", "trap")


@dataclass(frozen=True)
class TaintRow:
  """One instruction as the pointer analysis sees it (from PTX text here, from the PTX emulator's decoded instructions there)."""
  op: str                    # the family: ld, st, atom, add, ...
  mods: frozenset[str]       # every dotted part after the family
  dsts: tuple[str, ...]      # registers written
  srcs: tuple[str, ...]      # registers read outside the address operand
  addr: tuple[str, ...]      # registers of the address operand [...]
  addr_sym: str | None       # the variable an address [sym+off] names (ld.param's parameter)


def pointer_access(rows: list[TaintRow], pointers: list[str], follow_loads: bool) -> dict[str, tuple[bool, bool]]:
  """Parameter name -> (read through, written through) for the pointer parameters `pointers` that a global or generic
  ld / ldu / st / atom / red / wmma.load / wmma.store addresses (atom and red both read and write).

  A static, flow-insensitive taint analysis to a fixpoint (loops carry pointers around): `ld.param` of parameter p taints
  its destination with {p} (through a register address: every pointer parameter); every other instruction's destinations
  take the union of the taints of the registers it reads. Loads and atom results are data unless follow_loads, where a
  value loaded through a pointer carries that pointer's taint (an over-approximation for pointers stored in buffers).
  refgrad's launcher bookkeeping follows loads; the emulator's hazard recorder does not."""
  ptrs = frozenset(pointers)
  taint: dict[str, frozenset[str]] = {}
  def of(regs: tuple[str, ...]) -> frozenset[str]: return frozenset().union(*(taint.get(r, frozenset()) for r in regs))
  changed = True
  while changed:
    changed = False
    for x in rows:
      if not x.dsts: continue
      if x.op in ("ld", "ldu") and "param" in x.mods: t = (frozenset([x.addr_sym]) & ptrs) if x.addr_sym is not None else ptrs
      elif x.op in ("ld", "ldu", "atom") or (x.op == "wmma" and "load" in x.mods): t = of(x.addr) if follow_loads else frozenset()
      else: t = of(x.srcs + x.addr)
      if not t: continue
      for r in x.dsts:
        if not t <= taint.get(r, frozenset()):
          taint[r] = taint.get(r, frozenset()) | t
          changed = True
  out: dict[str, tuple[bool, bool]] = {}
  for x in rows:
    if x.op == "cp" and "global" in x.mods:   # cp.async: the row's address is its global source
      for p in of(x.addr): out[p] = (True, out.get(p, (False, False))[1])
      continue
    if (x.op not in _MEM and x.op != "wmma") or x.mods & _NOT_GLOBAL or not x.addr: continue
    reads, writes = x.op != "st" and "store" not in x.mods, x.op in ("st", "atom", "red") or "store" in x.mods
    for p in of(x.addr):
      r0, w0 = out.get(p, (False, False))
      out[p] = (r0 or reads, w0 or writes)
  return out


def text_rows(src: str, entry: str) -> list[TaintRow]:
  """The instructions of `.entry entry` in PTX text as TaintRows (block braces, labels and comments skipped)."""
  text = re.sub(r"//[^\n]*", "", src)
  m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\([^)]*\)", text)
  if m is None: raise ValueError(f"the PTX text has no .entry {entry!r}")
  body = text[m.end():][:_body_end(text[m.end():])]
  rows = []
  for ln in body.split(";"):
    ln = re.sub(r"^[\s{}]*(?:[$\w]+:\s*)?[\s{}]*", "", ln)   # block braces and a label before the instruction
    if (im := _INSTR.match(ln.strip() + ";")) is None or im.group(1).startswith("."): continue
    fam, *mods = im.group(1).split(".")
    ops = [o.strip() for o in re.split(r",(?![^{]*\})", im.group(2))] if im.group(2) else []   # commas outside vector braces
    ais = [i for i, o in enumerate(ops) if o.startswith("[")]
    ai = ais[-1] if fam == "cp" and ais else ais[0] if ais else None   # cp.async [shared dst], [global src]: the source
    addr = ops[ai] if ai is not None else ""
    sym = re.match(r"\[\s*([A-Za-z_$][\w$]*)", addr)
    dst = () if fam in _NO_DEST or fam == "cp" or not ops or ai == 0 else tuple(_REG.findall(ops[0]))
    srcs = tuple(r for i, o in enumerate(ops) if i != ai and (i > 0 or not dst) for r in _REG.findall(o))
    rows.append(TaintRow(fam, frozenset(mods), dst, srcs, tuple(_REG.findall(addr)), sym.group(1) if sym else None))
  return rows


def buffer_access(src: str, entry: str, params: list[Param]) -> tuple[frozenset[int], frozenset[int]]:
  """(stored, loaded): the parameters (by position) whose value a `st`/`atom`/`red` or an `ld`/`atom`/`red` of `.entry entry`
  may address (pointer_access following loaded pointers: an over-approximation; the launcher tracks those buffers for
  hazards and for work a fault dropped)."""
  pos = {p.name: i for i, p in enumerate(params)}
  acc = pointer_access(text_rows(src, entry), [p.name for p in params if p.size == 8 and p.type in ("u64", "b64", "s64")], follow_loads=True)
  return frozenset(pos[p] for p, (_, w) in acc.items() if w), frozenset(pos[p] for p, (r, _) in acc.items() if r)
