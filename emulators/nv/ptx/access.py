"""Which kernel parameters a PTX entry reads and writes global memory through, for the hazard checker
(emulators/hazards.py): the dispatcher records each pointer parameter's buffer, from the pointer to its mapping's end,
as the RGL1 path records its declared buffers. The analysis is refgrad's (refgrad/runtime/ptx_args.pointer_access, which
the launcher runs on the PTX text); here it runs on the decoded instructions and does not follow loaded pointers:
addresses derived from no parameter (module variables, pointers loaded from memory) are not recorded."""
from __future__ import annotations

from emulators.nv.ptx.parse import Entry, Instr, Operand
from refgrad.runtime.ptx_args import TaintRow, pointer_access

_NO_DEST = ("st", "red")


def _regs(o: Operand) -> tuple[str, ...]:
  if o.kind == "reg": return (str(o.value),)
  if o.kind in ("vec", "pair"): return tuple(r for x in o.value for r in _regs(x))  # type: ignore[union-attr]
  if o.kind in ("addr", "not"): return _regs(o.value)  # type: ignore[arg-type]
  return ()


def row(ins: Instr) -> TaintRow:
  """A decoded instruction as refgrad's analysis reads it."""
  args = ins.args
  ais = [i for i, o in enumerate(args) if o.kind == "addr"]
  ai = ais[-1] if ins.op == "cp" and ais else ais[0] if ais else None   # cp.async [shared dst], [global src]: the source
  dst = () if ins.op in _NO_DEST or ins.op == "cp" or not args or ai == 0 else _regs(args[0])
  srcs = tuple(r for i, o in enumerate(args) if i != ai and (i > 0 or not dst) for r in _regs(o))
  a = args[ai] if ai is not None else None
  sym = str(a.value.value) if a is not None and a.value.kind == "sym" else None  # type: ignore[union-attr]
  return TaintRow(ins.op, frozenset(ins.mods), dst, srcs, _regs(a) if a is not None else (), sym)


def param_access(e: Entry) -> dict[str, tuple[bool, bool]]:
  """Parameter name -> (read through, written through), for the 8-byte parameters used as global addresses."""
  ptrs = [p.name for p in e.params if p.size == 8 and p.type in ("u64", "b64", "s64")]
  return pointer_access([row(i) for i in e.instrs], ptrs, follow_loads=False)
