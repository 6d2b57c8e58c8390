"""AMD code objects: LLVM's relocatable ELF64 for `amdgcn-amd-amdhsa` (gfx1100) read and linked by refgrad itself.

`load_code_object(elf, name)` reads the section headers, the symbol table and the RELA relocations, lays the allocated
sections out as one program image (non-executable sections first, each at its alignment, then `.text` at a 256-byte
boundary: docs/hw/amd_code_object.md), and returns a `CodeObject` that `link(va)` turns into the bytes to upload at
GPU address `va` (relocations applied). The kernel descriptor (`<name>.kd`, 64 bytes; docs/hw/AMD.md §8; the layout is
refgrad/hw/amd.py's KD_FIELDS) is checked for what refgrad's runtime can honour. Anything this reader does not handle is a `CodeObjectError` naming it.
"""
from __future__ import annotations

import struct
from dataclasses import astuple, dataclass

from refgrad.hw import amd as A
from refgrad.hw import bits

EM_AMDGPU, ET_REL, ELFOSABI_AMDGPU_HSA = 224, 1, 64
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 1, 2, 3, 4, 8, 9
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
STT_OBJECT, STT_FUNC = 1, 2
KD_BYTES, CODE_ALIGN = A.KD_BYTES, 256

# R_AMDGPU_* relocation types (LLVM AMDGPUUsage "Relocation Records"): type -> (bytes written, value from S+A, P)
RELOCS: dict[int, tuple[str, int, object]] = {
  1: ("ABS32_LO", 4, lambda s, a, p: (s + a) & 0xFFFFFFFF),
  2: ("ABS32_HI", 4, lambda s, a, p: ((s + a) >> 32) & 0xFFFFFFFF),
  3: ("ABS64", 8, lambda s, a, p: (s + a) & (2**64 - 1)),
  4: ("REL32", 4, lambda s, a, p: (s + a - p) & 0xFFFFFFFF),
  5: ("REL64", 8, lambda s, a, p: (s + a - p) & (2**64 - 1)),
  6: ("ABS32", 4, lambda s, a, p: (s + a) & 0xFFFFFFFF),
  10: ("REL32_LO", 4, lambda s, a, p: (s + a - p) & 0xFFFFFFFF),
  11: ("REL32_HI", 4, lambda s, a, p: ((s + a - p) >> 32) & 0xFFFFFFFF),
}

# kernel_code_properties (§8.1): the runtime fills only the kernarg segment pointer
PROPERTIES = A.KD_PROPERTIES
KERNARG_PTR, WAVE32 = A.KERNARG_SEGMENT_PTR, A.WAVEFRONT_SIZE32
SUPPORTED = KERNARG_PTR | WAVE32


SHT_NOTE, NT_AMDGPU_METADATA = 7, 32


def msgpack_decode(b: bytes, what: str) -> object:
  """The one MessagePack value in `b` (the subset the AMDGPU metadata note uses: maps, arrays, strings, ints, bools,
  nil, floats, binary); CodeObjectError for anything else or trailing bytes."""
  pos = 0
  def take(n: int) -> bytes:
    nonlocal pos
    if pos + n > len(b): raise CodeObjectError(f"{what}: the MessagePack data ends early")
    pos += n
    return b[pos - n:pos]
  def num(fmt: str) -> int: return struct.unpack(">" + fmt, take(struct.calcsize(fmt)))[0]
  def value() -> object:
    t = take(1)[0]
    if t <= 0x7F or t >= 0xE0: return t if t <= 0x7F else t - 0x100
    if 0x80 <= t <= 0x8F or t in (0xDE, 0xDF): return mapping(t & 0x0F if t <= 0x8F else num("H" if t == 0xDE else "I"))
    if 0x90 <= t <= 0x9F or t in (0xDC, 0xDD): return [value() for _ in range(t & 0x0F if t <= 0x9F else num("H" if t == 0xDC else "I"))]
    if 0xA0 <= t <= 0xBF or t in (0xD9, 0xDA, 0xDB):
      return take(t & 0x1F if t <= 0xBF else num({0xD9: "B", 0xDA: "H", 0xDB: "I"}[t])).decode("utf-8", "replace")
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if t in fixed: return fixed[t]
    if t in (0xC4, 0xC5, 0xC6): return take(num({0xC4: "B", 0xC5: "H", 0xC6: "I"}[t]))
    fmts = {0xCA: "f", 0xCB: "d", 0xCC: "B", 0xCD: "H", 0xCE: "I", 0xCF: "Q", 0xD0: "b", 0xD1: "h", 0xD2: "i", 0xD3: "q"}
    if t in fmts: return num(fmts[t])
    raise CodeObjectError(f"{what}: MessagePack type byte {t:#04x} at offset {pos - 1} is not handled")
  def mapping(n: int) -> dict:
    out = {}
    for _ in range(n):
      k = value()
      if not isinstance(k, (str, int)): raise CodeObjectError(f"{what}: a MessagePack map key of type {type(k).__name__}")
      out[k] = value()
    return out
  v = value()
  if pos != len(b): raise CodeObjectError(f"{what}: {len(b) - pos} bytes after the MessagePack value")
  return v


def kernel_args(elf: bytes, secs: list[Section], name: str) -> tuple[int, list[tuple[int, int, str]]]:
  """(kernarg segment size, [(offset, size, value kind)]) of kernel `name` from the object's NT_AMDGPU_METADATA note."""
  for s in secs:
    if s.type != SHT_NOTE: continue
    pos, end = s.offset, s.offset + s.size
    while pos + 12 <= end:
      namesz, descsz, typ = struct.unpack_from("<III", elf, pos)
      nm = elf[pos + 12:pos + 12 + namesz].rstrip(b"\0")
      desc = pos + 12 + -(-namesz // 4) * 4
      pos = desc + -(-descsz // 4) * 4
      if typ != NT_AMDGPU_METADATA or nm != b"AMDGPU": continue
      meta = msgpack_decode(elf[desc:desc + descsz], "the AMDGPU metadata note")
      kernels = meta.get("amdhsa.kernels") if isinstance(meta, dict) else None
      for k in kernels if isinstance(kernels, list) else []:
        if not isinstance(k, dict) or k.get(".name") != name: continue
        args = k.get(".args", [])
        if not isinstance(args, list) or not all(isinstance(a, dict) and isinstance(a.get(".offset"), int) and isinstance(a.get(".size"), int)
                                                 for a in args):
          raise CodeObjectError(f"kernel {name!r}: the metadata's .args are not a list of {{.offset, .size, .value_kind}}")
        size = k.get(".kernarg_segment_size")
        if not isinstance(size, int): raise CodeObjectError(f"kernel {name!r}: the metadata has no .kernarg_segment_size")
        return size, [(a[".offset"], a[".size"], str(a.get(".value_kind"))) for a in args]
      raise CodeObjectError(f"kernel {name!r} is not in the metadata note's amdhsa.kernels")
  raise CodeObjectError("the object has no NT_AMDGPU_METADATA note (the kernel argument layout)")


class CodeObjectError(ValueError):
  """An AMD code object refgrad cannot load: the message names the part (header, section, symbol, relocation, descriptor field)."""


@dataclass(frozen=True)
class Section:
  index: int
  name: str
  type: int
  flags: int
  offset: int
  size: int
  link: int
  info: int
  align: int
  entsize: int


@dataclass(frozen=True)
class Symbol:
  name: str
  type: int
  shndx: int
  value: int
  size: int


@dataclass(frozen=True)
class KernelDescriptor:
  """The fields of the 64-byte descriptor (§8), in the order of refgrad.hw.amd.KD_FIELDS (the other bytes are reserved, 0)."""
  group_segment: int        # LDS bytes
  private_segment: int      # scratch bytes per work-item
  kernarg_size: int
  entry: int                # kernel_code_entry_byte_offset (signed, from the descriptor's address)
  rsrc3: int
  rsrc1: int
  rsrc2: int
  properties: int
  kernarg_preload: int

  def pack(self) -> bytes:
    out = bytearray(KD_BYTES)
    for (_, off, fmt), v in zip(A.KD_FIELDS, astuple(self)): struct.pack_into("<" + fmt, out, off, v)
    return bytes(out)

  @staticmethod
  def unpack(b: bytes) -> KernelDescriptor:
    if len(b) != KD_BYTES: raise CodeObjectError(f"kernel descriptor: {len(b)} bytes, expected {KD_BYTES}")
    return KernelDescriptor(*(struct.unpack_from("<" + fmt, b, off)[0] for _, off, fmt in A.KD_FIELDS))

  @property
  def user_sgprs(self) -> int: return bits.get(self.rsrc2, A.RSRC2["USER_SGPR"])


@dataclass(frozen=True)
class CodeObject:
  """One kernel of a relocatable object, laid out as an image (see the module docstring)."""
  name: str
  image: bytes                       # the allocated sections laid out, relocations not yet applied
  placed: dict[int, int]             # section index -> offset in the image
  # (where in the image, R_AMDGPU type, the symbol's image offset or -1 for an absolute symbol, addend incl. its value)
  relocs: tuple[tuple[int, int, int, int], ...]
  kd_offset: int                     # offset of the kernel descriptor in the image
  entry: int                         # offset of the kernel's first instruction
  text: tuple[int, int]              # (offset, size) of the kernel's code in the image
  kd: KernelDescriptor               # as linked (entry_offset resolved)
  kernarg_size: int = 0              # from the metadata note, and each argument's (offset, size, value kind)
  args: tuple[tuple[int, int, str], ...] = ()
  functions: tuple[tuple[str, int, int], ...] = ()   # every function symbol of the image: (name, image offset, size), for code_object_loaded

  def link(self, va: int) -> bytes:
    """The image with every relocation applied for a load address `va` (256-byte aligned)."""
    if va % CODE_ALIGN: raise CodeObjectError(f"{self.name}: the code object must be loaded at a {CODE_ALIGN}-byte aligned address, not {va:#x}")
    out = bytearray(self.image)
    for off, typ, sym_off, addend in self.relocs:
      _, nbytes, fn = RELOCS[typ]
      s = sym_off + va if sym_off >= 0 else 0
      v = fn(s, addend, va + off)  # type: ignore[operator]
      out[off:off + nbytes] = v.to_bytes(nbytes, "little")
    return bytes(out)


def _cstr(tab: bytes, off: int, what: str) -> str:
  if not 0 <= off < len(tab): raise CodeObjectError(f"{what}: name offset {off} outside its string table ({len(tab)} bytes)")
  end = tab.find(b"\0", off)
  return tab[off:end if end >= 0 else len(tab)].decode("utf-8", "replace")


def read_sections(elf: bytes) -> list[Section]:
  """The section headers of an AMDGPU relocatable ELF64 object, header checked."""
  if len(elf) < 64 or elf[:4] != b"\x7fELF": raise CodeObjectError(f"not an ELF file (magic {elf[:4]!r})")
  if elf[4] != 2 or elf[5] != 1: raise CodeObjectError(f"ELF header: class {elf[4]} data {elf[5]}; only ELF64 little-endian (2, 1) is read")
  if elf[7] != ELFOSABI_AMDGPU_HSA: raise CodeObjectError(f"ELF header: OS ABI {elf[7]}, expected {ELFOSABI_AMDGPU_HSA} (AMDGPU HSA)")
  e_type, e_machine = struct.unpack_from("<HH", elf, 16)
  if e_machine != EM_AMDGPU: raise CodeObjectError(f"ELF header: machine {e_machine}, expected {EM_AMDGPU} (EM_AMDGPU)")
  if e_type != ET_REL: raise CodeObjectError(f"ELF header: type {e_type}; only relocatable objects (ET_REL = 1, LLVM's output) are loaded")
  shoff, = struct.unpack_from("<Q", elf, 40)
  shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 58)
  if shentsize != 64 or shoff + shnum * 64 > len(elf) or shnum == 0:
    raise CodeObjectError(f"ELF header: {shnum} section headers of {shentsize} bytes at {shoff} do not fit the {len(elf)}-byte file")
  raw = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + 64 * i) for i in range(shnum)]
  if shstrndx >= shnum: raise CodeObjectError(f"ELF header: section name table index {shstrndx} of {shnum} sections")
  for i, (_, typ, _, _, off, size, *_rest) in enumerate(raw):
    if typ != SHT_NOBITS and off + size > len(elf): raise CodeObjectError(f"section {i}: {size} bytes at {off} run past the {len(elf)}-byte file")
  names = elf[raw[shstrndx][4]:raw[shstrndx][4] + raw[shstrndx][5]]
  return [Section(i, _cstr(names, r[0], f"section {i}"), r[1], r[2], r[4], r[5], r[6], r[7], max(1, r[8]), r[9]) for i, r in enumerate(raw)]


def read_symbols(elf: bytes, secs: list[Section]) -> list[Symbol]:
  tabs = [s for s in secs if s.type == SHT_SYMTAB]
  if len(tabs) != 1: raise CodeObjectError(f"the object has {len(tabs)} symbol tables, expected 1")
  st = tabs[0]
  if st.entsize != 24 or st.link >= len(secs): raise CodeObjectError(f"symbol table {st.name}: entry size {st.entsize} (24 expected) or string table {st.link}")
  strs = elf[secs[st.link].offset:secs[st.link].offset + secs[st.link].size]
  out = []
  for k in range(st.size // 24):
    nm, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", elf, st.offset + 24 * k)
    out.append(Symbol(_cstr(strs, nm, f"symbol {k}"), info & 0xF, shndx, value, size))
  return out


def load_code_object(elf: bytes, name: str) -> CodeObject:
  """Read kernel `name` from LLVM's relocatable object; CodeObjectError names anything refgrad cannot handle."""
  secs = read_sections(elf)
  if any(s.type == SHT_REL for s in secs): raise CodeObjectError("the object has SHT_REL relocations (without addends); only SHT_RELA is applied")
  syms = read_symbols(elf, secs)
  # layout: allocated data sections first, executable ones after at 256-byte boundaries
  alloc = [s for s in secs if s.flags & SHF_ALLOC and s.type in (SHT_PROGBITS, SHT_NOBITS) and s.size]
  placed: dict[int, int] = {}
  pos = 0
  for s in sorted(alloc, key=lambda s: bool(s.flags & SHF_EXECINSTR)):
    al = max(s.align, CODE_ALIGN if s.flags & SHF_EXECINSTR else 1)
    pos = -(-pos // al) * al
    placed[s.index] = pos
    pos += s.size
  image = bytearray(pos)
  for s in alloc:
    if s.type == SHT_PROGBITS: image[placed[s.index]:placed[s.index] + s.size] = elf[s.offset:s.offset + s.size]
  def where(sym: Symbol, what: str) -> int:
    if sym.shndx == SHN_UNDEF: raise CodeObjectError(f"{what}: symbol {sym.name!r} is undefined (the object needs linking with something refgrad does not have)")
    if sym.shndx == SHN_ABS: return -1
    if sym.shndx not in placed: raise CodeObjectError(f"{what}: symbol {sym.name!r} is in section {sym.shndx}, which is not loaded")
    return placed[sym.shndx] + sym.value
  relocs = []
  for rs in (s for s in secs if s.type == SHT_RELA):
    if rs.info not in placed: continue   # relocations of a section that is not loaded (debug info, notes)
    if rs.entsize != 24: raise CodeObjectError(f"relocation section {rs.name}: entry size {rs.entsize}, expected 24")
    for k in range(rs.size // 24):
      r_off, r_info, addend = struct.unpack_from("<QQq", elf, rs.offset + 24 * k)
      typ, si = r_info & 0xFFFFFFFF, r_info >> 32
      what = f"relocation {k} of {rs.name} (offset {r_off:#x})"
      if typ == 0: continue
      if typ not in RELOCS: raise CodeObjectError(f"{what}: relocation type {typ} is not handled (only R_AMDGPU_{', '.join(v[0] for v in RELOCS.values())})")
      if si >= len(syms): raise CodeObjectError(f"{what}: symbol index {si} of {len(syms)}")
      if r_off + RELOCS[typ][1] > secs[rs.info].size: raise CodeObjectError(f"{what}: writes past the end of {secs[rs.info].name}")
      sym = syms[si]
      base = where(sym, what)
      relocs.append((placed[rs.info] + r_off, typ, base, addend + (sym.value if base < 0 else 0)))
  # the kernel and its descriptor
  fn = [s for s in syms if s.name == name and s.type == STT_FUNC]
  kds = [s for s in syms if s.name == f"{name}.kd"]
  if len(fn) != 1: raise CodeObjectError(f"kernel {name!r}: {len(fn)} function symbols of that name in the object (have: {', '.join(s.name for s in syms if s.type == STT_FUNC) or 'none'})")
  if len(kds) != 1 or kds[0].size != KD_BYTES:
    raise CodeObjectError(f"kernel {name!r}: no 64-byte kernel descriptor symbol {name}.kd ({[(s.name, s.size) for s in kds]})")
  kd_off, entry = where(kds[0], "kernel descriptor"), where(fn[0], "kernel")
  if kd_off < 0 or kd_off % 64: raise CodeObjectError(f"kernel descriptor {name}.kd at image offset {kd_off}: not 64-byte aligned")
  if entry < 0 or not secs[fn[0].shndx].flags & SHF_EXECINSTR: raise CodeObjectError(f"kernel {name!r} is not in an executable section")
  obj = CodeObject(name, bytes(image), placed, tuple(relocs), kd_off, entry, (entry, fn[0].size), KernelDescriptor.unpack(bytes(image[kd_off:kd_off + 64])))
  kd = KernelDescriptor.unpack(obj.link(0)[kd_off:kd_off + KD_BYTES])
  ksize, args = kernel_args(elf, secs, name)
  funcs = tuple((s.name, where(s, "function"), s.size) for s in syms if s.type == STT_FUNC and s.size and s.shndx in placed)
  obj = CodeObject(obj.name, obj.image, placed, obj.relocs, kd_off, entry, obj.text, kd, ksize, tuple(args), funcs)
  check_descriptor(obj)
  if ksize != kd.kernarg_size: raise CodeObjectError(f"kernel {name!r}: the metadata's kernarg segment is {ksize} bytes, the descriptor's {kd.kernarg_size}")
  return obj


def check_args(obj: CodeObject, nbufs: int, nvars: int) -> None:
  """The kernel's arguments are refgrad's layout (refgrad/runtime/hcq.py KernArgs): `nbufs` global buffers at 8·i, then
  `nvars` 4-byte values; a hidden argument (which the runtime does not fill) or any other layout is an error."""
  want = [(8 * i, 8, "global_buffer") for i in range(nbufs)] + [(8 * nbufs + 4 * j, 4, "by_value") for j in range(nvars)]
  if list(obj.args) != want:
    hidden = [k for _, _, k in obj.args if k.startswith("hidden_")]
    raise CodeObjectError(f"kernel {obj.name!r}: arguments {list(obj.args)} are not refgrad's layout {want}"
                          + (f" (hidden arguments {hidden} are not provided)" if hidden else ""))
  if obj.kernarg_size != 8 * nbufs + 4 * nvars:
    raise CodeObjectError(f"{obj.name}.kd: kernarg_size {obj.kernarg_size}, expected {8 * nbufs + 4 * nvars} ({nbufs} buffers, {nvars} variables)")


def check_descriptor(obj: CodeObject) -> None:
  """What refgrad's runtime can honour: code entry at the kernel symbol, 256-byte aligned; fixed-size scratch; only the kernarg
  pointer as user-SGPR input; wave32."""
  kd, n = obj.kd, obj.name
  if obj.kd_offset + kd.entry != obj.entry:
    raise CodeObjectError(f"{n}.kd: kernel_code_entry_byte_offset {kd.entry} points to image offset {obj.kd_offset + kd.entry}, "
                          f"the kernel symbol is at {obj.entry}")
  if obj.entry % CODE_ALIGN: raise CodeObjectError(f"{n}: the code entry (image offset {obj.entry}) is not {CODE_ALIGN}-byte aligned (COMPUTE_PGM_LO takes address >> 8)")
  if bool(kd.private_segment) != bool(bits.get(kd.rsrc2, A.RSRC2["SCRATCH_EN"])):   # scratch is provided for the fixed size only: no dynamic stack
    raise CodeObjectError(f"{n}.kd: private_segment_fixed_size {kd.private_segment} with ENABLE_PRIVATE_SEGMENT "
                          f"{bits.get(kd.rsrc2, A.RSRC2['SCRATCH_EN'])}: "
                          "scratch is provided only for a fixed size the descriptor enables")
  for bit, (pname, _) in PROPERTIES.items():
    if kd.properties >> bit & 1 and not SUPPORTED >> bit & 1:
      raise CodeObjectError(f"{n}.kd: kernel_code_properties enables {pname} (bit {bit}); the runtime provides only the kernarg segment pointer")
  if not kd.properties & WAVE32: raise CodeObjectError(f"{n}.kd: ENABLE_WAVEFRONT_SIZE32 is not set; the mock dispatches wave32 (CS_W32_EN)")
  if unknown := kd.properties & ~sum(1 << b for b in PROPERTIES):
    raise CodeObjectError(f"{n}.kd: kernel_code_properties has unknown bits {unknown:#x}")
  if kd.kernarg_preload: raise CodeObjectError(f"{n}.kd: kernarg_preload {kd.kernarg_preload:#x} (preloaded kernel arguments) is not provided")
  need = sum(u for b, (_, u) in PROPERTIES.items() if kd.properties >> b & 1)
  if not need <= kd.user_sgprs <= 16:
    raise CodeObjectError(f"{n}.kd: RSRC2.USER_SGPR = {kd.user_sgprs}, but the enabled properties take {need} (and at most 16 exist)")
