"""AMD_CODE=isa: LLVM's gfx1100 relocatable ELF read and linked by refgrad (refgrad/runtime/amd_elf.py), uploaded and
dispatched with the kernel descriptor's values (docs/hw/amd_code_object.md). The code bytes are checked against
LLVM's own object-file reader; malformed objects and descriptors refgrad cannot honour fail naming what is wrong."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Callable
from functools import cache

import llvmlite.binding as llvm
import numpy as np
import pytest

from refgrad import knobs
from refgrad.device import Buffer, Device
from refgrad.dtype import DType, dtypes
from refgrad.program import ProgramSpec, Runner
from refgrad.runtime import ops_amd
from refgrad.runtime.amd_elf import CodeObjectError, check_args, load_code_object, msgpack_decode, read_sections, read_symbols
from refgrad.runtime.driver import GPUFault
from refgrad.runtime.hcq import HCQAllocator
from refgrad.runtime.ops_llvm import compile_object
from refgrad.tensor import Tensor
from refgrad.uop import semantics
from refgrad.uop.ops import Ops, UOp
from tests.refgrad.test_cpu_barriers import F, barrier, local, seq


def _program(G: int = 3, L: int = 64) -> list[UOp]:
  """out[g, l] = a[g, L-1-l] + n through local memory (a barrier), with a variable n."""
  a, out = UOp.define_global(0, F), UOp.define_global(1, F)
  n = UOp.variable("n", 0, 100)
  g, l = UOp.special("gidx0", G), UOp.special("lidx0", L)
  tmp = local(F, L)
  st = tmp.store(l, a.load(g * L + l))
  return seq(a, out, n, tmp, g, l, st, barrier(st), out.store(g * L + l, tmp.load((l * -1) + (L - 1)) + n.cast(F)))

@cache
def _lib(name: str = "rev") -> bytes:
  return ops_amd.AMDLLVMCompiler().compile(ops_amd.AMDLLVMRenderer().render(name, _program()))

def _elf() -> bytes: return ops_amd.read_container(_lib())[1]


def test_reads_llvms_code_object():
  elf = _elf()
  co = load_code_object(elf, "rev")
  text = next(s.data() for s in llvm.ObjectFileRef.from_data(elf).sections() if s.name() == b".text")
  assert co.entry % 256 == 0 and co.image[co.entry:co.entry + len(text)] == text   # the code, as LLVM's reader sees it
  kd = co.kd
  assert kd.group_segment == 64 * 4 and kd.kernarg_size == 2 * 8 + 4 and kd.private_segment == 0
  assert kd.properties == (1 << 3) | (1 << 10) and 2 <= kd.user_sgprs <= 16 and kd.rsrc2 >> 7 & 1   # kernarg ptr, wave32, TGID_X
  va = 0x7F0000100000
  linked = co.link(va)
  (entry_off,) = struct.unpack_from("<q", linked, co.kd_offset + 16)   # R_AMDGPU_REL64 resolved
  assert co.kd_offset + entry_off == co.entry and linked[co.entry:co.entry + len(text)] == text
  with pytest.raises(CodeObjectError, match="256-byte aligned address"): co.link(va + 64)
  # the kernarg layout from the metadata note (MessagePack) is refgrad's KernArgs
  assert co.args == ((0, 8, "global_buffer"), (8, 8, "global_buffer"), (16, 4, "by_value")) and co.kernarg_size == 20
  check_args(co, 2, 1)
  with pytest.raises(CodeObjectError, match=r"are not refgrad's layout"): check_args(co, 3, 0)

def test_msgpack_subset():
  blob = bytes([0x83, 0xA1, 0x61, 0x93, 0x01, 0xFF, 0xCD, 0x01, 0x00, 0xA1, 0x62, 0xC3, 0xA1, 0x63, 0xCB]) + struct.pack(">d", 1.5)
  assert msgpack_decode(blob, "t") == {"a": [1, -1, 256], "b": True, "c": 1.5}
  with pytest.raises(CodeObjectError, match="type byte 0xc1"): msgpack_decode(b"\xc1", "t")
  with pytest.raises(CodeObjectError, match="ends early"): msgpack_decode(b"\x92\x01", "t")
  with pytest.raises(CodeObjectError, match="1 bytes after"): msgpack_decode(b"\x01\x02", "t")


def _patch(at: Callable[[bytes], int], fmt: str, value: Callable[[int], int]) -> Callable[[bytes], bytes]:
  def f(elf: bytes) -> bytes:
    b = bytearray(elf)
    off = at(elf)
    (old,) = struct.unpack_from(fmt, b, off)
    struct.pack_into(fmt, b, off, value(old))
    return bytes(b)
  return f

def _kd(field: int) -> Callable[[bytes], int]:
  """File offset of a byte of the rev.kd descriptor."""
  def at(elf: bytes) -> int:
    secs = read_sections(elf)
    sym = next(s for s in read_symbols(elf, secs) if s.name == "rev.kd")
    return secs[sym.shndx].offset + sym.value + field
  return at

def _rela(elf: bytes) -> int: return next(s.offset for s in read_sections(elf) if s.name.startswith(".rela")) + 8   # r_info of the first

BROKEN = {
  "truncated": (lambda e: e[:200], "do not fit"),
  "magic": (lambda e: b"\x7fELG" + e[4:], "not an ELF file"),
  "32-bit": (lambda e: e[:4] + b"\x01" + e[5:], "only ELF64 little-endian"),
  "machine": (_patch(lambda e: 18, "<H", lambda v: 62), "machine 62, expected 224"),
  "executable": (_patch(lambda e: 16, "<H", lambda v: 2), "only relocatable objects"),
  "relocation": (_patch(_rela, "<I", lambda v: 7), "relocation type 7 is not handled"),
  "dispatch_ptr": (_patch(_kd(56), "<H", lambda v: v | 2), "enables ENABLE_SGPR_DISPATCH_PTR"),
  "scratch": (_patch(_kd(4), "<I", lambda v: 16), "private_segment_fixed_size 16 with ENABLE_PRIVATE_SEGMENT 0"),
  "wave64": (_patch(_kd(56), "<H", lambda v: v & ~(1 << 10)), "ENABLE_WAVEFRONT_SIZE32 is not set"),
  "user_sgprs": (_patch(_kd(52), "<I", lambda v: (v & ~0x3E) | (1 << 1)), r"RSRC2.USER_SGPR = 1, but the enabled properties take 2"),
  "preload": (_patch(_kd(58), "<H", lambda v: 0x81), "kernarg_preload"),
  "no_metadata": (_patch(lambda e: next(s.offset for s in read_sections(e) if s.name == ".note") + 8, "<I", lambda v: 33), "no NT_AMDGPU_METADATA note"),
}

@pytest.mark.parametrize("what", list(BROKEN))
def test_malformed_code_objects_name_what_is_wrong(what: str):
  mutate, msg = BROKEN[what]
  with pytest.raises(CodeObjectError, match=msg): load_code_object(mutate(_elf()), "rev")

def test_missing_kernel_and_bad_container():
  with pytest.raises(CodeObjectError, match=r"kernel 'other': 0 function symbols .*have: rev"): load_code_object(_elf(), "other")
  with pytest.raises(CodeObjectError, match="magic b'RGL1'"): ops_amd.read_container(b"RGL1" + _lib()[4:])
  with pytest.raises(CodeObjectError, match="header is not JSON"): ops_amd.read_container(b"RGCO" + struct.pack("<I", 3) + b"{x}")
  with pytest.raises(knobs.KnobError, match="AMD_CODE"): knobs.parse("AMD_CODE", "elf")


@pytest.fixture
def amd(monkeypatch: pytest.MonkeyPatch) -> ops_amd.AMDDevice:
  monkeypatch.setenv("MOCKGPU", "1")
  hcq = Device["AMD"].hcq   # type: ignore[attr-defined]
  assert isinstance(hcq, ops_amd.AMDDevice)
  return hcq

def _sh(words: list[int]) -> dict[int, list[int]]:
  """SET_SH_REG register offset -> values, from a packet stream."""
  out, i = {}, 0
  while i < len(words):
    n, op = (words[i] >> 16 & 0x3FFF) + 1, words[i] >> 8 & 0xFF
    if op == ops_amd.PM4["SET_SH_REG"]: out[words[i + 1]] = words[i + 2:i + 1 + n]
    i += 1 + n
  return out

def test_isa_program_is_uploaded_and_dispatched_with_its_descriptor(amd: ops_amd.AMDDevice):
  p = ops_amd.AMDISAProgram(amd, "rev", _lib())
  co = load_code_object(_elf(), "rev")
  assert p.nbufs == 2 and p.nvars == 1 and p.stored == {1} and p.loaded == {0}
  img = np.empty(p.image.size, np.uint8)
  HCQAllocator(amd).copyout(memoryview(img), p.image)
  assert bytes(img[:len(co.image)]) == co.link(p.image.va)   # what the GPU reads: the linked image
  words, slot = p.dispatch((3, 1, 1), (64, 1, 1))
  sh, kd = _sh(words), co.kd
  assert (sh[ops_amd.SH["COMPUTE_PGM_LO"]][1] << 40 | sh[ops_amd.SH["COMPUTE_PGM_LO"]][0] << 8) == p.image.va + co.entry
  assert bytes(img[co.entry:co.entry + 4]) != b"RGL1"
  r1, r2 = sh[ops_amd.SH["COMPUTE_PGM_RSRC1"]]
  assert r1 == kd.rsrc1 and r2 == kd.rsrc2 | (1 << 15) and sh[ops_amd.SH["COMPUTE_PGM_RSRC3"]] == [kd.rsrc3]   # LDS_SIZE: 256 bytes = 1 granule
  # USER_DATA_0.. : as many as RSRC2.USER_SGPR, the kernarg pointer patched into the first two
  assert len(sh[ops_amd.SH["COMPUTE_USER_DATA_0"]]) == kd.user_sgprs and words[slot - 1] == ops_amd.SH["COMPUTE_USER_DATA_0"]
  assert sh[ops_amd.SH["COMPUTE_START_X"]][3:] == [64, 1, 1] and words[-4:] == [3, 1, 1, ops_amd.DISPATCH_INITIATOR]
  with pytest.raises(ValueError, match=r"compiled for \(3, 1, 1\) x \(64, 1, 1\)"): p.dispatch((4, 1, 1), (64, 1, 1))

def test_idx_launch_runs_in_blocks(amd: ops_amd.AMDDevice):
  a, out = UOp.define_global(0, F), UOp.define_global(1, F)
  i = UOp.special("idx0", 1000)
  uops = seq(a, out, i, out.store(i, a.load(i) * 2.0))
  src = ops_amd.AMDLLVMRenderer().render("dbl", uops)
  assert "icmp ult i32" in src and "1000" in src   # lanes past the size do nothing
  p = ops_amd.AMDISAProgram(amd, "dbl", ops_amd.AMDLLVMCompiler().compile(src))
  words, _ = p.dispatch((1000, 1, 1), (1, 1, 1))   # ProgramSpec's sizes of an idx launch
  assert words[-4:] == [4, 1, 1, ops_amd.DISPATCH_INITIATOR] and _sh(words)[ops_amd.SH["COMPUTE_START_X"]][3:] == [256, 1, 1]
  assert sum(u.op is Ops.SPECIAL for u in uops) == 1


def test_code_relocations_against_constant_data():
  """A constant table in addrspace(4) (.rodata) read by pc-relative code: R_AMDGPU_REL32_LO/HI in .text, against the
  section symbol; linked, s_getpc_b64 + the literals reach the table wherever the image is loaded."""
  attrs = " ".join(f'"amdgpu-no-{a}"' for a in ("implicitarg-ptr", "dispatch-ptr", "queue-ptr", "dispatch-id", "lds-kernel-id", "flat-scratch-init",
                                                "heap-ptr", "hostcall-ptr", "multigrid-sync-arg", "default-queue", "completion-action"))
  table = ", ".join(f"float {float(i)}" for i in range(64))
  src = f'''target triple = "amdgcn-amd-amdhsa"
@tab = internal addrspace(4) constant [64 x float] [{table}]
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @k(ptr addrspace(1) %a) #0 {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr [64 x float], ptr addrspace(4) @tab, i32 0, i32 %t
  %v = load float, ptr addrspace(4) %p
  %q = getelementptr float, ptr addrspace(1) %a, i32 %t
  store float %v, ptr addrspace(1) %q
  ret void
}}
attributes #0 = {{ {attrs} }}
'''
  co = load_code_object(compile_object(src, ops_amd.gfx1100_machine(), "test"), "k")
  text_relocs = [r for r in co.relocs if r[0] >= co.entry]
  assert sorted(r[1] for r in text_relocs) == [10, 11]   # REL32_LO, REL32_HI
  va = 0x12345600
  img = co.link(va)
  tab = img.find(struct.pack("<4f", 0.0, 1.0, 2.0, 3.0))
  assert tab >= 0 and img[tab:tab + 256] == np.arange(64, dtype=np.float32).tobytes()
  for off, typ, sym, addend in text_relocs:   # S + A - P: the table's address (plus the literal's distance to s_getpc's pc) from P
    (v,) = struct.unpack_from("<I", img, off)
    full = (va + sym + addend) - (va + off)
    assert v == (full & 0xFFFFFFFF if typ == 10 else (full >> 32) & 0xFFFFFFFF)
    assert va + sym <= va + tab < va + sym + addend + 1   # the relocation's symbol is the table's section, at or before it


def test_llvm_assembly_of_the_same_module():
  src = ops_amd.AMDLLVMRenderer().render("rev", _program())
  asm = ops_amd.amd_assembly(src)
  assert "rev:" in asm and "s_barrier" in asm and "s_endpgm" in asm and ".amdhsa_kernel rev" in asm


# ---- end to end, once the mock AMD executes RDNA3 machine code (emulators/amd/rdna3/, issue 21 part 2) ------------------

def _isa_vs_python(name: str, uops: list[UOp], inputs: list[np.ndarray], nout: int, var_vals: tuple[int, ...] = ()) -> None:
  """Run on the mock AMD as gfx1100 machine code and on PYTHON (EMULATE=AMD); buffers: the inputs, then one float32 output
  of `nout` elements (DEFINE_GLOBAL order); the output bits must be equal."""
  spec = ProgramSpec.from_uops(name, uops, "AMD")
  res = {}
  for dev in ("AMD", "PYTHON"):
    bufs = [Buffer.from_numpy(dev, a) for a in inputs] + [Buffer(dev, nout, dtypes.float32)]
    if dev == "AMD":
      p = ops_amd.AMDISAProgram(Device["AMD"].hcq, name, ops_amd.AMDLLVMCompiler().compile(ops_amd.AMDLLVMRenderer().render(name, uops)))
      p(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, vals=var_vals, wait=True)
    else: Runner(name, uops, dev)(*bufs, var_vals={v.arg[0]: x for v, x in zip(spec.vars, var_vals)})
    res[dev] = bufs[-1].numpy()
  assert np.asarray(semantics.same_bits(res["AMD"], res["PYTHON"], dtypes.float32)).all(), (res["AMD"], res["PYTHON"])

def test_isa_kernels_run_bit_exact_on_the_mock(amd: ops_amd.AMDDevice, monkeypatch: pytest.MonkeyPatch):
  pytest.importorskip("emulators.amd.rdna3", reason="the mock AMD's RDNA3 executor (issue 21 part 2) is not in this tree")
  monkeypatch.setenv("EMULATE", "AMD")
  x = np.random.default_rng(5).standard_normal(3 * 64).astype(np.float32)
  _isa_vs_python("rev", _program(), [x], 3 * 64, (7,))
  a, out = UOp.define_global(0, F), UOp.define_global(1, F)
  i = UOp.special("idx0", 1000)
  y = np.random.default_rng(6).standard_normal(1000).astype(np.float32)
  _isa_vs_python("dbl", seq(a, out, i, out.store(i, a.load(i) * 2.0 + 1.0)), [y], 1000)


def test_amd_code_knob_picks_the_code_path():
  code = ("from refgrad.device import Device; d = Device['AMD']; "
          "print(type(d.renderer).__name__, type(d.compiler).__name__, d.runtime.func.__name__)")
  for knob, want in (("isa", "AMDLLVMRenderer AMDLLVMCompiler AMDISAProgram"), ("ir", "AMDRenderer AMDCompiler AMDProgram"), ("", "AMDLLVMRenderer AMDLLVMCompiler AMDISAProgram")):   # "": the default, isa
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, "MOCKGPU": "1", "AMD_CODE": knob})
    assert r.returncode == 0 and r.stdout.split() == want.split(), r.stdout + r.stderr


_SCRATCH_IR = '''; refgrad-amd {"name": "sc", "nbufs": 2, "nvars": 0, "stored": [0], "loaded": [1], "sizes": [[1, 1, 1], [32, 1, 1]], "grid": [1, 1, 1], "block": [32, 1, 1]}
target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @sc(ptr addrspace(1) %out, ptr addrspace(1) %idx) #0 {
entry:
  %arr = alloca [300 x i32], align 4, addrspace(5)
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  br label %fill
fill:
  %k = phi i32 [0, %entry], [%k1, %fill]
  %p = getelementptr [300 x i32], ptr addrspace(5) %arr, i32 0, i32 %k
  %v = mul i32 %k, %t
  store i32 %v, ptr addrspace(5) %p
  %k1 = add i32 %k, 1
  %c = icmp ult i32 %k1, 300
  br i1 %c, label %fill, label %done
done:
  %ip = getelementptr i32, ptr addrspace(1) %idx, i32 %t
  %j = load i32, ptr addrspace(1) %ip
  %q = getelementptr [300 x i32], ptr addrspace(5) %arr, i32 0, i32 %j
  %r = load i32, ptr addrspace(5) %q
  %op = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 %r, ptr addrspace(1) %op
  ret void
}
attributes #0 = { nounwind "amdgpu-flat-work-group-size"="1,1024" }
'''

def test_scratch_is_private_per_lane_and_bounded(amd: ops_amd.AMDDevice):
  """A private array too large for registers or LDS lives in scratch: the descriptor's fixed size reaches the mock through
  COMPUTE_TMPRING_SIZE; each lane has its own bytes; an access past them is a fault naming the lane."""
  pytest.importorskip("emulators.amd.rdna3", reason="the mock AMD's RDNA3 executor (issue 21 part 2) is not in this tree")
  lib = ops_amd.AMDLLVMCompiler().compile(_SCRATCH_IR)
  p = ops_amd.AMDISAProgram(amd, "sc", lib)
  assert p.code.kd.private_segment >= 1200 and p.tmpring >> 12 == -(-p.code.kd.private_segment * 32 // 256)
  assert "scratch_load_b32" in ops_amd.amd_assembly(_SCRATCH_IR)
  j = np.random.default_rng(3).integers(0, 300, 32).astype(np.int32)
  out, idx = Buffer("AMD", 32, dtypes.int32), Buffer.from_numpy("AMD", j)
  p(out.handle, idx.handle, global_size=(1, 1, 1), local_size=(32, 1, 1), wait=True)
  assert (out.numpy() == j * np.arange(32)).all()
  j[5] = 100000
  idx2 = Buffer.from_numpy("AMD", j)
  with pytest.raises(GPUFault, match=r"lane 5 of wave 0: scratch access of 4 bytes at \d+ is outside the \d+ private bytes per lane"):
    p(out.handle, idx2.handle, global_size=(1, 1, 1), local_size=(32, 1, 1), wait=True)


def _elementwise(fn: Callable[[UOp], UOp], dt: DType) -> list[UOp]:
  a, out = UOp.define_global(0, dt), UOp.define_global(1, F)
  i = UOp.special("idx0", 64)
  return seq(a, out, i, out.store(i, fn(a.load(i)).cast(dtypes.float32)))

_EDGES = [0.0, -0.0, 1.0, -3.0, float("inf"), float("-inf"), float("nan"), 1e-45, -1e-40, 2.0 ** -126, 2.0 ** -127, 2.0 ** 126,
          -(2.0 ** 127), 3.4e38, 2.0 ** -95, 2.0 ** 124, 1e30, -7e-39]

def test_isa_recip_f16_mul_and_native_f64_are_exact(amd: ops_amd.AMDDevice, monkeypatch: pytest.MonkeyPatch):
  """Float RECIP at the range ends (gfx11's f32 division would rescale there: divided in double instead), float16 MUL
  giving -0 (LLVM's v_fma_mixlo_f16 x, y, +0 would give +0: rendered as a half multiply), a native float64 EXP2 (no
  gfx11 instruction or libcall: rendered as refgrad's decomposition, where LLVM would stop the process)."""
  pytest.importorskip("emulators.amd.rdna3", reason="the mock AMD's RDNA3 executor (issue 21 part 2) is not in this tree")
  monkeypatch.setenv("EMULATE", "AMD")
  rng = np.random.default_rng(9)
  x = np.concatenate([np.array(_EDGES, np.float32), rng.standard_normal(64 - len(_EDGES)).astype(np.float32) * 1e30])
  _isa_vs_python("rcp", _elementwise(lambda v: v.alu(Ops.RECIP), F), [x], 64)
  h = np.concatenate([np.array([0.0, -0.0, 1.5, -2.0, 6e-8, -6e-8, 65504.0, -1.0], np.float16), rng.standard_normal(56).astype(np.float16)])
  def hmul(v: UOp) -> UOp:   # float32 products rounded to float16, some -0 by underflow (where LLVM uses fma_mix)
    r = v.cast(dtypes.float32).alu(Ops.MUL, -1e-30).alu(Ops.MUL, 1e-20).cast(dtypes.float16)
    return (v * -1.5) * v.alu(Ops.CMPLT, 1.0).alu(Ops.WHERE, r, 1.0) + r
  _isa_vs_python("hmul", _elementwise(hmul, dtypes.float16), [h], 64)
  _isa_vs_python("h2f", _elementwise(lambda v: v.cast(dtypes.float32).alu(Ops.MUL, -1e-30).alu(Ops.MUL, 1e-20).cast(dtypes.float16), dtypes.float16), [h], 64)
  d = rng.uniform(-1100, 1100, 64)
  src = ops_amd.AMDLLVMRenderer().render("e64", _elementwise(lambda v: v.alu(Ops.EXP2), dtypes.float64))
  assert "@llvm.exp2" not in src
  _isa_vs_python("e64", _elementwise(lambda v: v.alu(Ops.EXP2), dtypes.float64), [d], 64)


def test_isa_recip_f64_at_the_range_ends(amd: ops_amd.AMDDevice):
  """float64 RECIP by rg_recip_f64 (frexp, a division in [1, 2], one ldexp rounding, denormal ties toward the exact
  quotient) on the AMD_ISA device: bit-exact with PYTHON where LLVM's division would need v_div_scale rescaling."""
  pytest.importorskip("emulators.amd.rdna3", reason="the mock AMD's RDNA3 executor (issue 21 part 2) is not in this tree")
  rng = np.random.default_rng(1)
  x = np.concatenate([[0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 2.0 ** -1022, 2.0 ** 1022, -1.7976931348623157e308, 3 * 2.0 ** 1021],
                      2.0 ** rng.uniform(1015, 1024, 300) * rng.choice([-1, 1], 300), 2.0 ** rng.uniform(-1074, -1015, 100),
                      (rng.integers(1, 2 ** 20, 100) | 1) * 2.0 ** 1003, rng.standard_normal(100)])
  a, b = (Tensor(x, device=d).reciprocal().numpy() for d in ("AMD_ISA", "PYTHON"))
  assert (a.view(np.uint64) == b.view(np.uint64)).all(), x[a.view(np.uint64) != b.view(np.uint64)][:5]


def test_amd_isa_device_runs_the_isa_path_whatever_amd_code_says(amd: ops_amd.AMDDevice, monkeypatch: pytest.MonkeyPatch):
  """AMD_ISA (conformance and the fuzzer test it by name) is made on the isa path even with AMD_CODE=ir."""
  monkeypatch.setenv("AMD_CODE", "ir")
  assert "AMD_ISA" in Device.names and isinstance(Device["AMD_ISA"].renderer, ops_amd.AMDLLVMRenderer)


def test_native_sin_past_sin_range_is_accurate_on_the_isa_path(monkeypatch):
  """The amdgcn renderer's native SIN reduces huge arguments exactly (decompositions._sin_wide_f32/_f64), so AMD_ISA gives
  sin(x) where the decomposition's range ends, as the CPU's libm and the ir path do. Through the real dispatch and the
  RDNA3 executor."""
  from refgrad.codegen import to_linear
  def native_sin(dt: DType, x: np.ndarray) -> np.ndarray:
    out, a = UOp.define_global(0, dt), UOp.define_global(1, dt)
    i = UOp.special("gidx0", len(x))
    lin = to_linear(out.store(i, UOp(Ops.SIN, dt, (a.load(i),))).sink(), Device["AMD_ISA"].renderer, decompose=False)
    bout, bin_ = Buffer("AMD_ISA", len(x), dt), Buffer.from_numpy("AMD_ISA", x, dt)
    Runner(f"native_sin_{dt.name}", lin, "AMD_ISA")(bout, bin_)
    return bout.numpy()
  monkeypatch.setenv("MOCKGPU", "1")   # the mock AMD, also when this test runs alone
  rng = np.random.default_rng(3)
  mags = np.ldexp(rng.uniform(1, 2, 48), rng.integers(21, 128, 48))
  x = np.concatenate([mags, -mags, [np.finfo(np.float32).max, 1.5 * 2.0 ** 20]]).astype(np.float32)
  got, ref = native_sin(dtypes.float32, x).astype(np.float64), np.sin(x.astype(np.float64))
  _, ex = np.frexp(ref)
  assert (np.abs(got - ref) / np.ldexp(1.0, ex - 24)).max() < 0.51
  xb = semantics.from_python(x[:-2].astype(np.float64), dtypes.bfloat16)   # float32's max rounds to inf in bfloat16
  gb = semantics.to_float64(native_sin(dtypes.bfloat16, xb), dtypes.bfloat16)
  rb = np.sin(semantics.to_float64(xb, dtypes.bfloat16))
  _, ex = np.frexp(rb)
  assert (np.abs(gb - rb) / np.ldexp(1.0, ex - 8)).max() <= 0.51
  x64 = np.array([1e30, -3e300, np.finfo(np.float64).max, 2.0 ** 31 + 0.5, 6381956970095103 * 2.0 ** 797])
  got = native_sin(dtypes.float64, x64)
  want = [0.009331468931175825, 0.2652200567209199, 0.004961954789184062, -0.7383897152906878, 1.0]   # mpmath at 300 bits, rounded
  assert (np.abs(got - want) / np.ldexp(1.0, np.frexp(want)[1] - 53)).max() <= 1.0


def test_a_big_kernel_is_generated_at_level_0_and_every_instruction_executes(monkeypatch):
  """Native float64 SIN (its exact reduction: thousands of IR lines) is code-generated at level 0, where level 2 took LLVM's
  scheduler seconds (past conformance's case timeout on a busy machine); small kernels stay at level 2. The level-0 code
  decodes whole and the executor has semantics for each of its instructions (its values: the test above)."""
  from emulators.amd.rdna3.coverage import executes
  from emulators.amd.rdna3.decode import decode
  from refgrad.codegen import to_linear
  from tests.emulators.rdna3.llvm_util import read_elf
  monkeypatch.setenv("MOCKGPU", "1")
  out, a = UOp.define_global(0, dtypes.float64), UOp.define_global(1, dtypes.float64)
  i = UOp.special("gidx0", 4)
  lin = to_linear(out.store(i, UOp(Ops.SIN, dtypes.float64, (a.load(i),))).sink(), Device["AMD_ISA"].renderer, decompose=False)
  src = ops_amd.AMDLLVMRenderer().render("sin64", lin)
  assert src.count("\n") > ops_amd.BIG_KERNEL_LINES and ops_amd.codegen_machine(src) is ops_amd.gfx1100_machine(0)
  small = ops_amd.AMDLLVMRenderer().render("rev", _program())
  assert ops_amd.codegen_machine(small) is ops_amd.gfx1100_machine()
  _, elf = ops_amd.read_container(ops_amd.AMDLLVMCompiler().compile(src))
  code = decode(read_elf(elf)["sin64"].code)
  missing = sorted({(x.fmt, x.op.name) for x in code if not executes(x.fmt, x.op.name if x.fmt != "FLAT" else x.op.name.split("_", 1)[1])})
  assert len(code) > 1000 and not missing, missing
