"""Memory checks of the PTX executor, from the PTX ISA 8.0:
- alignment (§6.4.1.1 "Addresses as operands": the address of ld/st/atom must be naturally aligned to the access size,
  a vector's to the vector's size): a misaligned address is a fault ("misaligned address", as CUDA reports it) in every
  state space, naming the PTX line, the thread and the address;
- .local memory in checked mode follows .shared: bytes never written are undefined, and a local access past the
  thread's .local variables is a fault;
- the shared-memory race checker and the memory consistency model (§8): see the tests below."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from refgrad.runtime.simt import UndefinedBehaviourError
from tests.emulators.ptx.ptxkit import HEAD, ptxas_ok


def kernel(body: str, decl: str = "") -> str:
  """k(out, inp, n): %rd0 = out, %rd1 = inp (global addresses), %r9 = n, %r0 = tid.x, %rd2 = 4 * tid.x."""
  return HEAD + f""".visible .entry k(.param .u64 out, .param .u64 inp, .param .u32 n)
{{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .f32 %f<8>;
  .reg .b64 %rd<16>;
  {decl}
  ld.param.u64 %rd10, [out];
  ld.param.u64 %rd11, [inp];
  cvta.to.global.u64 %rd0, %rd10;
  cvta.to.global.u64 %rd1, %rd11;
  ld.param.u32 %r9, [n];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd2, %r0, 4;
{body}
  ret;
}}
"""


def run(src: str, n: int = 4, inp: np.ndarray | None = None, arg: int = 0) -> np.ndarray:
  inp = np.arange(64, dtype=np.uint8) if inp is None else inp
  return Device["NV"].run_ptx(src, "k", [np.zeros(n, np.uint32), inp, np.uint32(arg)], grid=(1, 1, 1), block=(n, 1, 1))[0]


STORE = "add.s64 %rd5, %rd0, %rd2; st.global.u32 [%rd5], %r3;"
LOCAL = ".local .align 16 .b8 depot[64];"
SHARED = ".shared .align 16 .b8 sh[256];"

# ---- alignment ---------------------------------------------------------------------------------------------------------
MISALIGNED = {   # name -> (body, declarations, the fault's text)
  "global load": ("add.s64 %rd4, %rd1, %rd2; ld.global.u32 %r3, [%rd4+1];" + STORE, "",
                  r"misaligned address: global load of 4 bytes at 0x[0-9a-f]*1 \(not a multiple of 4\) by thread \(0, 0, 0\).*PTX line 18"),
  "global store": ("add.s64 %rd4, %rd0, %rd2; st.global.u16 [%rd4+3], %r0;", "",
                   r"misaligned address: global store of 2 bytes at 0x[0-9a-f]*3 \(not a multiple of 2\) by thread \(0, 0, 0\)"),
  "global vector": ("add.s64 %rd4, %rd1, %rd2; ld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd4+8]; mov.b32 %r3, %f0;" + STORE, "",
                    r"misaligned address: global load of 16 bytes at 0x[0-9a-f]*8 \(not a multiple of 16\)"),
  "global odd thread": ("cvt.u64.u32 %rd3, %r0; add.s64 %rd4, %rd1, %rd3; ld.global.u16 %rs0, [%rd4]; cvt.u32.u16 %r3, %rs0;" + STORE,
                        ".reg .b16 %rs<2>;", r"misaligned address: global load of 2 bytes at 0x[0-9a-f]* \(not a multiple of 2\) by thread \(1, 0, 0\)"),
  "global atom": ("add.s64 %rd4, %rd0, %rd2; atom.global.add.u32 %r3, [%rd4+2], 1;", "",
                  r"misaligned address: global (load|access) of 4 bytes"),
  "shared": ("mov.u32 %r1, sh; add.u32 %r2, %r1, 6; st.shared.u32 [%r2], %r0;", SHARED,
             r"misaligned address: shared access of 4 bytes at offset 6 \(not a multiple of 4\) by thread \(0, 0, 0\)"),
  "local": ("mov.u64 %rd3, depot; st.local.v2.u32 [%rd3+4], {%r0, %r0};", LOCAL,
            r"misaligned address: local access of 8 bytes at offset 4 \(not a multiple of 8\) by thread \(0, 0, 0\)"),
  "generic shared": ("mov.u64 %rd3, sh; cvta.shared.u64 %rd4, %rd3; ld.u64 %rd5, [%rd4+12]; cvt.u32.u64 %r3, %rd5;" + STORE, SHARED,
                     r"misaligned address: shared access of 8 bytes at offset 12"),
}


@pytest.mark.parametrize("name", list(MISALIGNED))
def test_misaligned_access_is_a_fault(name):
  body, decl, msg = MISALIGNED[name]
  with pytest.raises(GPUFault, match=msg):
    run(kernel(body, decl))


def test_aligned_and_byte_accesses_still_run():
  # the 4 byte loads nvcc makes of an unaligned float (fused into one gather) and an aligned vector load at +16
  body = """
  cvt.u64.u32 %rd3, %r0;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u8 %r3, [%rd4+1]; ld.global.u8 %r4, [%rd4+2]; ld.global.u8 %r5, [%rd4+3]; ld.global.u8 %r6, [%rd4+4];
  prmt.b32 %r7, %r3, %r4, 0x3340; prmt.b32 %r8, %r5, %r6, 0x3340; prmt.b32 %r3, %r7, %r8, 0x5410;
  ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd1+16];
  add.u32 %r3, %r3, %r10;
""" + STORE
  b = np.arange(64, dtype=np.uint8)
  r = run(kernel(body), inp=b)
  first = int.from_bytes(b[16:20].tobytes(), "little")
  assert r.tolist() == [int.from_bytes(b[t + 1:t + 5].tobytes(), "little") + first for t in range(4)]


# ---- .local ------------------------------------------------------------------------------------------------------------
def test_never_written_local_bytes_are_undefined():
  # lane t writes depot[0..n) and reads depot[4 * (t + 1)]: lanes reading past what was written copy undefined values out
  body = """
  mov.u64 %rd3, depot;
  mov.u32 %r1, 0;
$Lw:
  setp.ge.u32 %p1, %r1, %r9;
  @%p1 bra $Ld;
  mul.wide.u32 %rd4, %r1, 4;
  add.s64 %rd5, %rd3, %rd4;
  st.local.u32 [%rd5], %r1;
  add.u32 %r1, %r1, 1;
  bra $Lw;
$Ld:
  add.s64 %rd6, %rd3, %rd2;
  ld.local.u32 %r3, [%rd6+4];
""" + STORE
  assert run(kernel(body, LOCAL), arg=5).tolist() == [1, 2, 3, 4]
  with pytest.raises(UndefinedBehaviourError, match=r"8 of the 16 bytes of the buffer are undefined, the first at byte 8.*kernel k"):
    run(kernel(body, LOCAL), arg=3)


def test_undefined_local_value_used_as_an_address_is_reported():
  body = """
  mov.u64 %rd3, depot;
  st.local.u32 [%rd3], %r0;
  add.s64 %rd6, %rd3, %rd2;
  ld.local.u32 %r3, [%rd6];
  mul.wide.u32 %rd7, %r3, 4;
  add.s64 %rd8, %rd1, %rd7;
  ld.global.u32 %r4, [%rd8];
""" + STORE
  with pytest.raises(GPUFault, match=r"undefined value used as an address by thread \(1, 0, 0\)"):
    run(kernel(body, LOCAL), inp=np.zeros(64, np.uint8))


def test_local_access_past_the_depot_is_a_fault():
  # nvcc's __local_depot: a 64-byte array indexed by an input (what CUDA's `int a[16]; a[x[t]]` compiles to), directly and
  # through a generic address
  body = """
  mov.u64 %rd3, depot;
  st.local.v4.u32 [%rd3], {%r0, %r0, %r0, %r0};
  add.s64 %rd4, %rd1, %rd2;
  ld.global.u32 %r1, [%rd4];
  mul.wide.u32 %rd5, %r1, 4;
  add.s64 %rd6, %rd3, %rd5;
  {load}
""" + STORE
  idx = np.array([0, 1, 2, 3], np.uint32)
  direct, generic = "ld.local.u32 %r3, [%rd6];", "cvta.local.u64 %rd7, %rd6; ld.u32 %r3, [%rd7];"
  assert run(kernel(body.replace("{load}", direct), LOCAL), inp=idx).tolist() == [0, 1, 2, 3]
  for load in (direct, generic):
    with pytest.raises(GPUFault, match=r"local-memory access of 4 bytes at offset 64 outside the thread's 64 bytes by thread \(2, 0, 0\)"):
      run(kernel(body.replace("{load}", load), LOCAL), inp=np.array([0, 1, 16, 3], np.uint32))


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not on PATH: it validates the hand-written PTX")
def test_handwritten_ptx_is_valid_for_ptxas(tmp_path):
  srcs = [kernel(b, d) for b, d, _ in MISALIGNED.values()] + [kernel(b, d) for b, d in EXTRA_PTX]
  for src in srcs: ptxas_ok(src, tmp_path)




# ---- the race checker and the memory consistency model ------------------------------------------------------------
# PTX ISA 8.0 §8: two conflicting accesses (same bytes, one a write) by different threads race unless ordered (a barrier,
# a release/acquire pair: causality order) or morally strong: both strong (.relaxed/.acquire/.release, atom/red, and
# .volatile, which is .relaxed.sys) with scopes including both threads (every scope includes a CTA's own threads, the
# only ones sharing its .shared memory). A strong access against a weak one is still a race.
RACE_DECL = ".shared .align 4 .b8 sh[256]; .shared .align 4 .b32 flag;"

# what nvcc makes of the classic last-warp reduction (`volatile int* s; s[t] += s[t + 16]; ...`, no __syncwarp)
VOLATILE_REDUCTION = """
  mov.u32 %r1, sh;
  shl.b32 %r2, %r0, 2;
  add.u32 %r3, %r1, %r2;
  add.u32 %r4, %r0, 1;
  st.shared.u32 [%r3], %r4;
  st.shared.u32 [%r3+128], 0;
  bar.sync 0;
  {steps}
  ld.shared.u32 %r3, [%r3];
""" + STORE
STEP = "ld.volatile.shared.u32 %r4, [%r3]; ld.volatile.shared.u32 %r5, [%r3+{o}]; add.u32 %r4, %r4, %r5; st.volatile.shared.u32 [%r3], %r4;"


def test_volatile_warp_reduction_does_not_race():
  steps = " ".join(STEP.replace("{o}", str(o)) for o in (64, 32, 16, 8, 4))
  want = np.r_[np.arange(1, 33), np.zeros(32, np.int64)]
  for o in (16, 8, 4, 2, 1): want[:32] = want[:32] + want[o:32 + o]   # each instruction runs for the whole warp at once
  r = run(kernel(VOLATILE_REDUCTION.replace("{steps}", steps), RACE_DECL), n=32)
  assert r[0] == sum(range(1, 33)) and r.tolist() == want[:32].tolist()   # each lane reads its own word (weak) after
  # the same with weak accesses is a race
  with pytest.raises(GPUFault, match=r"shared-memory race: thread \(16, 0, 0\).*writes shared byte 64, which other threads read"):
    run(kernel(VOLATILE_REDUCTION.replace("{steps}", steps.replace(".volatile", "")), RACE_DECL), n=32)


# warp 0 writes data[t] (weak), syncs its warp, and lane 0 releases the flag; warp 1 spins on an acquire of the flag, then
# reads warp 0's words (weak): the release/acquire pair orders them (what cuda::atomic_ref's store(release)/load(acquire) emit)
MESSAGE = """
  mov.u32 %r1, sh;
  shl.b32 %r2, %r0, 2;
  mov.u32 %r10, flag;
  setp.eq.u32 %p3, %r0, 0;
  @%p3 st.relaxed.cta.shared.u32 [%r10], 0;
  bar.sync 0;
  setp.ge.u32 %p1, %r0, 32;
  @%p1 bra $Lread;
  add.u32 %r3, %r1, %r2;
  mul.lo.u32 %r4, %r0, 3;
  st.shared.u32 [%r3], %r4;
  bar.warp.sync -1;
  @%p3 {release}.shared.u32 [%r10], 1;
  bra $Ldone;
$Lread:
  {acquire}.shared.u32 %r5, [%r10];
  setp.eq.u32 %p2, %r5, 0;
  @%p2 bra $Lread;
  {after}
  sub.u32 %r6, 252, %r2;
  add.u32 %r7, %r1, %r6;
  ld.shared.u32 %r3, [%r7];
""" + STORE + """
$Ldone:
"""
REL, ACQ = "st.release.cta", "ld.acquire.cta"


def message(release: str, acquire: str, after: str = "") -> str:
  return kernel(MESSAGE.replace("{release}", release).replace("{acquire}", acquire).replace("{after}", after), RACE_DECL)


def test_release_acquire_orders_the_releasers_writes():
  r = run(message(REL, ACQ), n=64)
  assert r[32:].tolist() == [3 * (63 - t) for t in range(32, 64)]
  # without the acquire (a relaxed load) or the release (a relaxed store) nothing orders warp 0's words for warp 1
  for rel, acq in ((REL, "ld.relaxed.cta"), ("st.relaxed.cta", ACQ), ("st.volatile", "ld.volatile")):
    with pytest.raises(GPUFault, match=r"shared-memory race: thread \(32, 0, 0\).*reads shared byte 124, which the threads of warp 0"):
      run(message(rel, acq), n=64)


FENCED = "fence.acq_rel.cta; @%p3 st.volatile", "membar.cta;"   # a release pattern (fence; strong write), an acquire's fence


def test_fences_with_strong_accesses_make_release_and_acquire_patterns():
  # `__threadfence_block(); flag = 1` with a volatile flag, and the reader's `while (flag == 0); __threadfence_block();`
  r = run(message(FENCED[0], "ld.volatile", FENCED[1]), n=64)
  assert r[32:].tolist() == [3 * (63 - t) for t in range(32, 64)]
  for rel, after in (("st.volatile", FENCED[1]), (FENCED[0], "")):   # either fence missing: a race
    with pytest.raises(GPUFault, match=r"shared-memory race: thread \(32, 0, 0\).*reads shared byte 124, which the threads of warp 0"):
      run(message(rel, "ld.volatile", after), n=64)


STRONG_VS = """
  mov.u32 %r1, sh;
  setp.eq.u32 %p3, %r0, 0;
  @%p3 {write};
  {read}
""" + STORE


@pytest.mark.parametrize("write, read", [
  ("st.relaxed.cta.shared.u32 [%r1], 7", "ld.relaxed.cta.shared.u32 %r3, [%r1];"),
  ("st.volatile.shared.u32 [%r1], 7", "ld.volatile.shared.u32 %r3, [%r1];"),
  ("st.release.cta.shared.u32 [%r1], 7", "ld.acquire.cta.shared.u32 %r3, [%r1];"),
  ("atom.shared.exch.b32 %r4, [%r1], 7", "ld.volatile.shared.u32 %r3, [%r1];"),
  ("red.shared.add.u32 [%r1], 7", "atom.shared.add.u32 %r3, [%r1], 0;"),
])
def test_strong_accesses_do_not_race_with_each_other(write, read):
  # thread 0 writes the word; threads 1-3 read it in a later instruction, no barrier between (the first two atomics also
  # read sh[0] undefined: a store first makes it defined)
  body = STRONG_VS.replace("{write}", write).replace("{read}", read)
  body = "  mov.u32 %r1, sh; setp.eq.u32 %p3, %r0, 0; @%p3 st.shared.u32 [%r1], 0; bar.sync 0;" + body
  r = run(kernel(body, RACE_DECL))
  assert r.tolist() == [7] * 4


@pytest.mark.parametrize("write, read", [
  ("st.relaxed.cta.shared.u32 [%r1], 7", "ld.shared.u32 %r3, [%r1];"),
  ("st.shared.u32 [%r1], 7", "ld.volatile.shared.u32 %r3, [%r1];"),
  ("atom.shared.add.u32 %r4, [%r1], 7", "ld.shared.u32 %r3, [%r1];"),
  ("st.shared.u32 [%r1], 7", "atom.shared.add.u32 %r3, [%r1], 0;"),
])
def test_a_strong_access_against_a_weak_one_races(write, read):
  body = "  mov.u32 %r1, sh; setp.eq.u32 %p3, %r0, 0; @%p3 st.shared.u32 [%r1], 0; bar.sync 0;" + STRONG_VS.replace("{write}", write).replace("{read}", read)
  with pytest.raises(GPUFault, match=r"shared-memory race: thread \(1, 0, 0\).*reads shared byte 0, which thread \(0, 0, 0\).*wrote since "
                                     r"the last barrier \(a weak access against a strong one"):
    run(kernel(body, RACE_DECL))


def test_strong_accesses_of_different_sizes_race():
  # morally strong needs complete overlap (§8.6): a relaxed 32-bit store and another thread's relaxed byte load of it race
  body = STRONG_VS.replace("{write}", "st.relaxed.cta.shared.u32 [%r1], 7").replace("{read}", "ld.relaxed.cta.shared.u8 %r3, [%r1+1];")
  body = "  mov.u32 %r1, sh; setp.eq.u32 %p3, %r0, 0; @%p3 st.shared.u32 [%r1], 0; bar.sync 0;" + body
  with pytest.raises(GPUFault, match=r"thread \(1, 0, 0\).*reads shared byte 1, which thread \(0, 0, 0\).*wrote since the last barrier "
                                     r"\(strong accesses of different bytes"):
    run(kernel(body, RACE_DECL))
  assert run(kernel(body.replace(".u8 %r3, [%r1+1]", ".u32 %r3, [%r1]"), RACE_DECL)).tolist() == [7] * 4


EXTRA_PTX = [(VOLATILE_REDUCTION.replace("{steps}", STEP.replace("{o}", "64")), RACE_DECL),
             (MESSAGE.replace("{release}", REL).replace("{acquire}", ACQ).replace("{after}", ""), RACE_DECL),
             (MESSAGE.replace("{release}", "st.relaxed.cta").replace("{acquire}", "ld.relaxed.cta").replace("{after}", ""), RACE_DECL),
             (MESSAGE.replace("{release}", FENCED[0]).replace("{acquire}", "ld.volatile").replace("{after}", FENCED[1]), RACE_DECL),
             *[("  mov.u32 %r1, sh;" + STRONG_VS.replace("{write}", w).replace("{read}", r), RACE_DECL) for w, r in (
               ("st.release.cta.shared.u32 [%r1], 7", "ld.acquire.cta.shared.u32 %r3, [%r1];"),
               ("red.shared.add.u32 [%r1], 7", "atom.shared.add.u32 %r3, [%r1], 0;"),
               ("st.relaxed.cta.shared.u32 [%r1], 7", "ld.relaxed.cta.shared.u8 %r3, [%r1+1];"))]]
