"""Which kernel parameters a PTX entry reads and writes global memory through, for the hazard checker
(emulators/hazards.py): the dispatcher records each pointer parameter's buffer, from the pointer to its mapping's end,
as the RGL1 path records its declared buffers.

A static, flow-insensitive taint analysis over the entry: `ld.param` of parameter p taints its destination with {p};
every other instruction's destinations take the union of its register sources' taints, except loads, whose results
are data (a pointer loaded from memory is not followed). A global or generic ld / st / atom / red through an address
tainted with p reads / writes p's buffer. Addresses derived from no parameter (module variables, pointers loaded from
memory) are not recorded."""
from __future__ import annotations

from emulators.nv.ptx.parse import Entry, Operand

_LOADS = ("ld", "ldu")
_MEM = ("ld", "ldu", "st", "atom", "red")
_NOT_GLOBAL = ("shared", "local", "param", "const")


def _regs(o: Operand) -> list[str]:
  if o.kind == "reg": return [str(o.value)]
  if o.kind in ("vec", "pair"): return [r for x in o.value for r in _regs(x)]  # type: ignore[union-attr]
  if o.kind in ("addr", "not"): return _regs(o.value)  # type: ignore[arg-type]
  return []


def param_access(e: Entry) -> dict[str, tuple[bool, bool]]:
  """Parameter name -> (read through, written through), for the 8-byte parameters used as global addresses."""
  ptrs = {p.name for p in e.params if p.size == 8 and p.type in ("u64", "b64", "s64")}
  taint: dict[str, frozenset[str]] = {}
  changed = True
  while changed:   # a fixpoint: loops carry pointers around through moves and adds
    changed = False
    for ins in e.instrs:
      if not ins.args or ins.op in ("st", "red", "atom"): continue   # no destination, or one holding data
      dst, srcs = ins.args[0], ins.args[1:]
      if ins.op in _LOADS:   # only ld.param yields a pointer: of the parameter it names (through a register: any of them)
        a = srcs[0] if srcs else None
        if not ins.has("param") or a is None or a.kind != "addr": continue
        t = frozenset([a.value.value]) & ptrs if a.value.kind == "sym" else frozenset(ptrs)
      else: t = frozenset().union(*(taint.get(r, frozenset()) for o in srcs for r in _regs(o)))
      if not t: continue
      for r in _regs(dst):
        if not t <= taint.get(r, frozenset()):
          taint[r] = taint.get(r, frozenset()) | t
          changed = True
  out: dict[str, tuple[bool, bool]] = {}
  for ins in e.instrs:
    if ins.op not in _MEM or any(ins.has(s) for s in _NOT_GLOBAL): continue
    addr = ins.args[0] if ins.op in ("st", "red") else ins.args[1] if len(ins.args) > 1 else None
    if addr is None or addr.kind != "addr": continue
    reads, writes = ins.op in ("ld", "ldu", "atom", "red"), ins.op in ("st", "atom", "red")
    for p in frozenset().union(*(taint.get(r, frozenset()) for r in _regs(addr))):
      r0, w0 = out.get(p, (False, False))
      out[p] = (r0 or reads, w0 or writes)
  return out
