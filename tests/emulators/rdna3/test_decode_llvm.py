"""The decoder against LLVM itself: compile hand-written kernels for gfx1100, decode the object's code and compare each
instruction's text with LLVM's printed assembly of the same module. Any disagreement fails."""
from __future__ import annotations

import pytest

from emulators.amd.rdna3.decode import branch_target, decode
from tests.emulators.rdna3 import kernels
from tests.emulators.rdna3.llvm_util import asm_instructions, compile_ir, read_elf

TOTAL: dict[str, int] = {}


def compare(ir: str) -> int:
  """Decode every kernel of the module and compare with LLVM's text; the number of instructions compared."""
  obj, asm = compile_ir(ir)
  n = 0
  for name, k in read_elf(obj).items():
    got = decode(k.code, where=f"kernel {name}: ")
    want, labels, align = asm_instructions(asm, name)
    # alignment padding: the object holds s_nop 0 where the text has a .p2align; drop those, checking the alignment
    kept, j = [], 0
    for i in got:
      if j in align and i.text == "s_nop 0" and i.pc % align[j]:
        continue
      if j in align: assert i.pc % align[j] == 0, f"{name}: instruction {j} at PC 0x{i.pc:x} is not {align[j]}-byte aligned"
      kept.append(i)
      j += 1
    got = kept
    index = {i.pc: j for j, i in enumerate(got)}
    by_index = {v: lab for lab, v in labels.items()}
    assert len(got) == len(want), f"{name}: decoded {len(got)} instructions, LLVM printed {len(want)}"
    for i, w in zip(got, want):
      t = i.text
      if "@0x" in t: t = t.replace(f"@0x{branch_target(i):x}", by_index.get(index.get(branch_target(i), -1), "?"))
      assert t == w, f"{name} PC 0x{i.pc:x} words {[hex(x) for x in i.words]}: decoded {t!r}, LLVM printed {w!r}"
      n += 1
  return n


@pytest.mark.parametrize("which", ["elementwise", "control"])
def test_decoder_agrees_with_llvm(which):
  ir = {"elementwise": kernels.elementwise_module, "control": kernels.control_module}[which]()
  n = compare(ir)
  assert n > 50
  print(f"{which}: {n} instructions agree")


def test_every_opcode_of_the_corpus_executes():
  """The machine has semantics for every instruction LLVM emitted in the corpus (none would fault as 'not emulated')."""
  from emulators.amd.rdna3.coverage import executes
  seen = set()
  for ir in (kernels.elementwise_module(), kernels.control_module()):
    for k in read_elf(compile_ir(ir)[0]).values():
      for i in decode(k.code): seen.add((i.fmt, i.op.name if i.fmt != "FLAT" else i.op.name.split("_", 1)[1]))
  missing = sorted(x for x in seen if not executes(*x))
  assert not missing, missing
  assert len(seen) > 100
  print(f"{len(seen)} distinct opcodes in the corpus")
