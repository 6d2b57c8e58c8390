"""PTX launches record the buffers of their pointer parameters for the hazard checker, as RGL1 launches do: a copy that
fills a PTX kernel's input without a semaphore wait between them is a hazard; with the wait it is clean."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.mock_driver import make_driver
from emulators.nv.ptx import PARAM_BASE, make_ptx_image, parse
from emulators.nv.ptx.access import param_access, row
from refgrad.runtime.driver import GPUHazard
from refgrad.runtime.ptx_args import entry_signature, pointer_access, text_rows

from ..kernels import compute_stream
from ..nvenc import ACQ_CIRC64, COPY, Stream, ce_copy, ce_sem, launch, qmd_words, sem, set_object

ADD = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry add(.param .u64 out, .param .u64 a, .param .u32 n, .param .u64 b)
{
  .reg .b32 %r<3>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [a]; ld.param.u64 %rd3, [b];
  cvta.to.global.u64 %rd4, %rd1; cvta.to.global.u64 %rd5, %rd2;
  mov.u64 %rd6, %rd3;
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd7, %r1, 4;
  add.s64 %rd8, %rd5, %rd7; add.s64 %rd9, %rd6, %rd7; add.s64 %rd10, %rd4, %rd7;
  ld.global.f32 %f1, [%rd8]; ld.global.f32 %f2, [%rd9];
  add.rn.f32 %f3, %f1, %f2;
  st.global.f32 [%rd10], %f3;
  ret;
}
"""


def test_param_access_follows_pointers_through_moves_and_adds():
  e = parse(ADD).entries["add"]
  assert param_access(e) == {"out": (False, True), "a": (True, False), "b": (True, False)}


def test_atomics_read_and_write_and_loaded_values_are_not_pointers():
  src = ADD.replace("st.global.f32 [%rd10], %f3;", "atom.global.add.f32 %f3, [%rd10], %f3; ld.global.u64 %rd11, [%rd8]; st.global.f32 [%rd11], %f3;")
  assert param_access(parse(src).entries["add"]) == {"out": (True, True), "a": (True, False), "b": (True, False)}


LOADED_PTR = ADD.replace("st.global.f32 [%rd10], %f3;", "atom.global.add.f32 %f3, [%rd10], %f3; ld.global.u64 %rd11, [%rd8]; st.global.f32 [%rd11], %f3;")
LOOP = ADD.replace("ld.global.f32 %f1, [%rd8];", "$L: { .reg .b64 %t; add.s64 %rd8, %rd8, 16; } ld.global.v2.f32 {%f1, %f0}, [%rd8+8]; "
                   "setp.lt.u64 %p0, %rd8, %rd9; @%p0 bra $L; red.global.add.f32 [%rd9], %f1;").replace(".reg .b32 %r<3>;", ".reg .b32 %r<3>; .reg .pred %p<1>;")


@pytest.mark.parametrize("src", [ADD, LOADED_PTR, LOOP], ids=["add", "loaded-pointer", "loop-red"])
def test_launcher_and_emulator_run_one_analysis(src):
  """refgrad's launcher (PTX text) and the emulator (decoded instructions) feed the same rows to one pointer analysis."""
  ptrs = [p.name for p in entry_signature(src, "add")[0] if p.size == 8]
  text, decoded = text_rows(src, "add"), [row(i) for i in parse(src).entries["add"].instrs]
  for follow in (False, True): assert pointer_access(text, ptrs, follow) == pointer_access(decoded, ptrs, follow)
  assert param_access(parse(src).entries["add"]) == pointer_access(text, ptrs, False)


def test_following_loaded_pointers_is_a_parameter():
  ptrs = ["out", "a", "b"]
  rows = text_rows(LOADED_PTR, "add")
  assert pointer_access(rows, ptrs, follow_loads=False)["a"] == (True, False)   # the emulator: a loaded value is data
  assert pointer_access(rows, ptrs, follow_loads=True)["a"] == (True, True)     # the launcher: the store through it may hit a's buffer
  loop = pointer_access(text_rows(LOOP, "add"), ptrs, follow_loads=False)
  assert loop["a"] == (True, False) and loop["b"] == (True, True)   # a pointer carried around a loop; red reads and writes


def _copy_then_ptx(drv, wait: bool):
  c = compute_stream(drv)
  k = Stream(drv, "copy")
  k.entry(set_object(COPY, 0xC6B5))
  stage, a, b, o, sig = drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True), drv.alloc(64, True), drv.alloc(16, True)
  stage.host.view(np.float32)[:], b.host.view(np.float32)[:] = 2, 3
  img = make_ptx_image(ADD, "add")
  prog = drv.alloc(len(img), True)
  prog.host[:] = np.frombuffer(img, np.uint8)
  params = np.array([o.va, a.va], np.uint64).tobytes() + np.array([16, 0], np.uint32).tobytes() + np.array([b.va], np.uint64).tobytes()
  cb0 = bytes(PARAM_BASE) + params
  cb = drv.alloc(len(cb0), True)
  cb.host[:] = np.frombuffer(cb0, np.uint8)
  qmd = drv.alloc(256, True)
  qmd.host.view(np.uint32)[:] = qmd_words(prog.va, cb.va, len(cb0), grid=(1, 1, 1), block=(16, 1, 1))
  k.entry([*ce_copy(a.va, stage.va, 64), *ce_sem(sig.va, 1)])
  c.entry([*(sem(sig.va, 1, ACQ_CIRC64) if wait else []), *launch(qmd.va, 9)])
  return o, a


def test_missing_wait_between_copy_and_ptx_kernel_is_a_hazard():
  drv = make_driver("NV", 0)
  _, a = _copy_then_ptx(drv, wait=False)
  with pytest.raises(GPUHazard) as e:
    for _ in range(100): drv.poll()
  msg = str(e.value)
  assert "NV:0 copy GP entry 1: copy of 64 bytes" in msg and "kernel add" in msg
  assert f"0x{a.va:x}" in msg and "writes" in msg and "reads" in msg


def test_the_same_ptx_stream_with_the_wait_is_clean():
  drv = make_driver("NV", 0)
  o, _ = _copy_then_ptx(drv, wait=True)
  assert drv.run_until_idle()
  assert o.host.view(np.float32).tolist() == [5.0] * 16
