"""Named barriers with thread counts and bar.arrive (PTX ISA 9.0 §9.7.13.1): a producer warp arrives, a consumer warp
waits for both; a barrier that can never be complete is a fault naming it."""
from __future__ import annotations

import pytest

from refgrad.runtime.driver import GPUFault
from tests.emulators.ptx.test_control import kernel, run

# warp 0 writes sh[tid] = tid * 3 and arrives at barrier 1; warp 1 waits there (64 threads), then reads sh[tid - 32]
_PRODUCER_CONSUMER = """
  mov.u32 %r1, sh;
  setp.ge.u32 %p1, %r0, 32;
  @%p1 bra $L_consume;
  mul.lo.u32 %r2, %r0, 3;
  shl.b32 %r3, %r0, 2;
  add.u32 %r3, %r1, %r3;
  st.shared.u32 [%r3], %r2;
  {arrive}
  st.global.u32 [%rd2], 7;
  ret;
$L_consume:
  bar.sync 1, {count};
  sub.u32 %r4, %r0, 32;
  shl.b32 %r4, %r4, 2;
  add.u32 %r4, %r1, %r4;
  ld.shared.u32 %r5, [%r4];
  st.global.u32 [%rd2], %r5;
  ret;"""


def test_bar_arrive_producer_consumer():
  src = kernel(_PRODUCER_CONSUMER.replace("{arrive}", "bar.arrive 1, 64;").replace("{count}", "64"), ".shared .align 4 .b8 sh[128];")
  r = run(src, 64, grid=2)   # both blocks write out[tid] (the same values), each with its own barriers and shared memory
  assert r[:64].tolist() == [7] * 32 + [3 * t for t in range(32)] and not r[64:].any()


def test_barrier_that_can_never_complete_faults():
  # the producers never arrive: the consumers wait for 64 threads and only 32 come
  src = kernel(_PRODUCER_CONSUMER.replace("{arrive}", "").replace("{count}", "64"), ".shared .align 4 .b8 sh[128];")
  with pytest.raises(GPUFault, match=r"divergent barrier: barrier 1 of block 0 waits for 64 threads but only 32 arrived.*PTX line \d+"):
    run(src, 64)


def test_barrier_id_out_of_range_faults():
  src = kernel("""
  bar.sync 16;
  ret;""")
  with pytest.raises(GPUFault, match=r"barrier id 16 is out of range 0\.\.15.*PTX line \d+"):
    run(src, 32)


def test_barriers_by_id_are_independent():
  # all 64 threads meet at barrier 2 (no count: the whole CTA), then at barrier 0 through barrier.sync
  src = kernel("""
  mov.u32 %r1, sh;
  shl.b32 %r2, %r0, 2;
  add.u32 %r3, %r1, %r2;
  st.shared.u32 [%r3], %r0;
  bar.sync 2;
  xor.b32 %r4, %r0, 1;
  shl.b32 %r4, %r4, 2;
  add.u32 %r4, %r1, %r4;
  ld.shared.u32 %r5, [%r4];
  barrier.sync 0;
  st.shared.u32 [%r3], 5;
  st.global.u32 [%rd2], %r5;
  ret;""", ".shared .align 4 .b8 sh[256];")
  assert run(src, 64).tolist() == [t ^ 1 for t in range(64)]
