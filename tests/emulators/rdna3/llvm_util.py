"""Test helpers: compile LLVM IR for gfx1100 with llvmlite, read the kernel's code and descriptor out of the relocatable
ELF object (just enough ELF64 for what LLVM emits: section headers, .symtab, .text, .rodata), and split LLVM's printed
assembly into instructions for the decoder comparison."""
from __future__ import annotations

import re
import struct
from typing import Any, NamedTuple

import pytest

llvm = pytest.importorskip("llvmlite.binding", reason="llvmlite (the LLVM binding) is not installed")

_TM = None


def target_machine():
  global _TM
  if _TM is None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    _TM = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu="gfx1100", opt=2)
  return _TM


def compile_ir(ir: str) -> tuple[bytes, str]:
  """(ELF object, assembly text) of one LLVM IR module."""
  tm = target_machine()
  # the target's data layout in the text: allocas then default to the private address space (5) as the AMDGPU target needs
  m = llvm.parse_assembly(f'target datalayout = "{tm.target_data}"\ntarget triple = "amdgcn-amd-amdhsa"\n' + ir)
  m.verify()
  # the -O2 module pipeline first: without it the AMDGPU backend cannot select its structurizer's if/loop intrinsics
  pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=2))
  pb.getModulePassManager().run(m, pb)
  opt = str(m)   # code generation rewrites the module (control-flow intrinsics): each emit gets its own copy
  return tm.emit_object(llvm.parse_assembly(opt)), tm.emit_assembly(llvm.parse_assembly(opt))


class Kernel(NamedTuple):
  name: str
  code: bytes        # the kernel's machine code (from its symbol to its end)
  descriptor: bytes  # the 64-byte kernel descriptor (<name>.kd)


def read_elf(obj: bytes) -> dict[str, Kernel]:
  """Kernels of a relocatable AMDGPU ELF object by name."""
  assert obj[:4] == b"\x7fELF" and obj[4] == 2, "not an ELF64 object"
  shoff, = struct.unpack_from("<Q", obj, 0x28)
  shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
  secs = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
  def data(s): return obj[s[4]:s[4] + s[5]]
  def cstr(tab: bytes, off: int) -> str: return tab[off:tab.index(b"\0", off)].decode()
  names = data(secs[shstrndx])
  by_name = {cstr(names, s[0]): (i, s) for i, s in enumerate(secs)}
  _, symtab = by_name[".symtab"]
  strtab = data(secs[symtab[6]])
  syms = []
  raw = data(symtab)
  for k in range(0, len(raw), 24):
    st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", raw, k)
    syms.append((cstr(strtab, st_name), st_info & 0xF, st_shndx, st_value, st_size))
  out = {}
  for nm, typ, shndx, val, size in syms:
    if typ == 2 and shndx < len(secs) and cstr(names, secs[shndx][0]) == ".text":
      text = data(secs[shndx])
      kd = next(s for s in syms if s[0] == nm + ".kd")
      out[nm] = Kernel(nm, text[val:val + size], data(secs[kd[2]])[kd[3]:kd[3] + 64])
  return out


class AsmInst(NamedTuple):
  text: str
  labels: tuple[str, ...]   # labels just before it


def asm_instructions(asm: str, name: str) -> tuple[list[str], dict[str, int], dict[int, int]]:
  """LLVM's printed instructions of kernel `name` (whitespace-normalized, comments dropped), label -> instruction index,
  and instruction index -> the alignment in bytes a `.p2align` before it asks for (the object pads with s_nop 0)."""
  lines = asm.splitlines()
  start = lines.index(f"{name}:") + 1
  out: list[str] = []
  labels: dict[str, int] = {}
  align: dict[int, int] = {}
  for ln in lines[start:]:
    s = ln.split(";")[0].strip()
    if not s: continue
    if s.startswith(".Lfunc_end"): break
    if s.endswith(":"):
      labels[s[:-1]] = len(out)
      continue
    if s.startswith(".p2align"):
      align[len(out)] = 1 << int(s.split()[1].split(",")[0])
      continue
    if s.startswith("."): continue
    out.append(re.sub(r"\s+", " ", s))
  return out, labels, align


class Descriptor(NamedTuple):
  group_segment: int
  private_segment: int
  kernarg_size: int
  entry_offset: int
  rsrc3: int
  rsrc1: int
  rsrc2: int
  properties: int


def descriptor(kd: bytes) -> Descriptor:
  """The fields of a 64-byte AMDHSA kernel descriptor (AMDGPUUsage "Kernel Descriptor" table)."""
  g, p, ka = struct.unpack_from("<III", kd, 0)
  entry, = struct.unpack_from("<q", kd, 16)
  r3, r1, r2 = struct.unpack_from("<III", kd, 44)
  props, = struct.unpack_from("<H", kd, 56)
  return Descriptor(g, p, ka, entry, r3, r1, r2, props)


def run_direct(k: Kernel, bufs: list, grid: tuple[int, int, int], block: tuple[int, int, int], vals: tuple[int, ...] = (),
               checked: bool = True) -> list:
  """Run a kernel on the RDNA3 machine over a fresh mock VM (no command queue): code and kernel arguments uploaded,
  USER_DATA_0/1 = the kernarg pointer. The buffers as numpy arrays after the run."""
  _, out = run_machine(k, bufs, grid, block, vals, checked)
  return [o.view(b.dtype).reshape(b.shape) for o, b in zip(out, bufs)]


def run_machine(k: Kernel, bufs: list, grid: tuple[int, int, int], block: tuple[int, int, int], vals: tuple[int, ...] = (),
                checked: bool = True, blocks: bool = True) -> tuple[Any, list]:
  """run_direct's run, basic blocks on or off: the machine after the run and each buffer's bytes (uint8)."""
  import numpy as np

  from emulators.amd.rdna3.machine import Machine
  from emulators.vm import AddressSpace
  vm = AddressSpace("test")
  code = vm.alloc(len(k.code), False)
  code.mem.write(np.frombuffer(k.code, np.uint8), 0)
  regions = []
  for b in bufs:
    r = vm.alloc(b.nbytes, False)
    r.mem.write(b.view(np.uint8).reshape(-1), 0)
    regions.append(r)
  args = b"".join(struct.pack("<Q", r.va) for r in regions) + b"".join(struct.pack("<i", v) for v in vals)
  ka = vm.alloc(max(len(args), 4), True)
  ka.mem.write(np.frombuffer(args, np.uint8), 0)
  d = descriptor(k.descriptor)
  user = [ka.va & 0xFFFFFFFF, ka.va >> 32] + [0] * 14
  m = Machine(vm, code.va, k.name, d.rsrc1, d.rsrc2, user, grid, block, d.group_segment, checked)
  m.use_blocks = blocks
  m.run()
  return m, [r.mem.data[:b.nbytes].copy() for r, b in zip(regions, bufs)]
