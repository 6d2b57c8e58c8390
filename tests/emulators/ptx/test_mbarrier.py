"""mbarrier (PTX ISA 9.0 §9.7.13.15): phases complete when the expected arrivals have arrived, in lane order;
test_wait (.parity) sees completed phases; pending_count, arrive.noComplete, arrive_drop; cp.async.mbarrier.arrive; a
completed phase orders shared-memory accesses for the race checker; misuse is a fault naming the thread."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from tests.emulators.ptx.ptxkit import HEAD


def kernel(body: str, version: str = "8.0") -> str:
  """%r0 = tid.x, %r1 = the barrier's shared address, %r2 = ntid.x, %rd2 = &out[tid] (u32 each); sh: 256 words of data."""
  return HEAD.replace("8.0", version) + """.visible .entry k(.param .u64 out)
{
  .reg .pred %p<8>;
  .reg .b32 %r<24>;
  .reg .b64 %rd<12>;
  .shared .align 8 .b64 bar;
  .shared .align 4 .b32 sh[256];
  ld.param.u64 %rd0, [out];
  mov.u32 %r0, %tid.x;
  mov.u32 %r2, %ntid.x;
  mul.wide.u32 %rd1, %r0, 4;
  add.s64 %rd2, %rd0, %rd1;
  mov.u32 %r1, bar;
  mov.u32 %r3, sh;
  shl.b32 %r4, %r0, 2;
  add.u32 %r5, %r3, %r4;
""" + body + """
  ret;
}
"""


def run(body: str, n: int = 64, version: str = "8.0") -> np.ndarray:
  return Device["NV"].run_ptx(kernel(body, version), "k", [np.zeros(n, np.uint32)], block=(n, 1, 1))[0]


INIT = """
  setp.eq.u32 %p0, %r0, 0;
  @%p0 mbarrier.init.shared.b64 [%r1], %r2;
  bar.sync 0;
"""
WAIT = """
WAIT{k}:
  mbarrier.test_wait.shared.b64 %p1, [%r1], %rd3;
  @!%p1 bra WAIT{k};
"""


def test_phases_exchange_data_without_races():
  # three phases: each thread writes its word, arrives, waits, then reads its neighbour's (the checked race detector
  # would report the read if the completed phase did not order it after the write)
  body = INIT + "  mov.u32 %r10, 0;\n"
  for k in range(3):
    body += f"""
  add.u32 %r6, %r0, {100 * k};
  st.shared.u32 [%r5], %r6;
  mbarrier.arrive.shared.b64 %rd3, [%r1];""" + WAIT.format(k=k) + """
  xor.b32 %r7, %r4, 4;
  add.u32 %r7, %r3, %r7;
  ld.shared.u32 %r8, [%r7];
  add.u32 %r10, %r10, %r8;
  mbarrier.arrive.shared.b64 %rd4, [%r1];""" + WAIT.format(k=f"b{k}").replace("%rd3", "%rd4")
  body += "  st.global.u32 [%rd2], %r10;"
  t = np.arange(64)
  assert run(body).tolist() == (3 * (t ^ 1) + 300).tolist()


def test_state_parity_and_pending_count():
  body = INIT + """
  mbarrier.arrive.shared.b64 %rd3, [%r1];
  mbarrier.pending_count.b64 %r6, %rd3;
  mbarrier.test_wait.parity.shared.b64 %p2, [%r1], 1;
  selp.u32 %r7, 1, 0, %p2;
""" + WAIT.format(k=0) + """
  mbarrier.test_wait.parity.shared.b64 %p2, [%r1], 0;
  mbarrier.test_wait.shared.b64 %p3, [%r1], %rd3;
  selp.u32 %r8, 2, 0, %p2;
  selp.u32 %r9, 4, 0, %p3;
  shl.b32 %r6, %r6, 8;
  or.b32 %r6, %r6, %r7;
  or.b32 %r6, %r6, %r8;
  or.b32 %r6, %r6, %r9;
  st.global.u32 [%rd2], %r6;"""
  r = run(body, 32, "8.0").tolist()
  # lane t leaves 31 - t arrivals pending; parity 1 (the next phase) is not complete, parity 0 is once all arrived
  assert r == [((31 - t) << 8) | 2 | 4 for t in range(32)]


def test_no_complete_counts_and_arrive_drop():
  # thread 0 arrives for 10 (noComplete), the others 1 each: 32 expected = 10 + 22 of threads 1..22 complete the phase;
  # then every thread arrive_drops once: the phase after expects 32 - 32 ... dropped to 0 expected
  body = """
  setp.eq.u32 %p0, %r0, 0;
  @%p0 mbarrier.init.shared.b64 [%r1], 32;
  bar.sync 0;
  setp.gt.u32 %p4, %r0, 22;
  @%p4 bra SKIP;
  @%p0 mbarrier.arrive.noComplete.shared.b64 %rd3, [%r1], 10;
  @!%p0 mbarrier.arrive.shared.b64 %rd3, [%r1];
SKIP:
  bar.sync 0;
  @%p4 mov.b64 %rd3, 0;
  mbarrier.test_wait.parity.shared.b64 %p1, [%r1], 0;
  selp.u32 %r6, 1, 0, %p1;
  mbarrier.pending_count.b64 %r7, %rd3;
  shl.b32 %r7, %r7, 8;
  or.b32 %r6, %r6, %r7;
  st.global.u32 [%rd2], %r6;"""
  r = run(body, 32)
  assert (r & 1).tolist() == [1] * 32
  assert (r >> 8)[:23].tolist() == [22] + [22 - t for t in range(1, 23)]   # thread 0 left 22 pending, thread t 22 - t


def test_cp_async_arrives_on_the_barrier():
  body = INIT + """
  mul.wide.u32 %rd6, %r0, 4;
  add.s64 %rd7, %rd0, %rd6;
  cp.async.ca.shared.global [%r5], [%rd7], 4;
  cp.async.mbarrier.arrive.noinc.shared.b64 [%r1];
WAITCP:
  mbarrier.test_wait.parity.shared.b64 %p1, [%r1], 0;
  @!%p1 bra WAITCP;
  xor.b32 %r7, %r4, 4;
  add.u32 %r7, %r3, %r7;
  ld.shared.u32 %r8, [%r7];
  bar.sync 0;
  st.global.u32 [%rd2], %r8;"""
  x = np.arange(64, dtype=np.uint32) * 7
  out = Device["NV"].run_ptx(kernel(body), "k", [x.copy()], block=(64, 1, 1))[0]
  assert out.tolist() == x[np.arange(64) ^ 1].tolist()   # the neighbour's copy is complete once the phase is


def test_arrive_drop_lowers_the_expected_count():
  # 32 expected: threads 0-15 arrive_drop, 16-31 arrive (phase 0 completes); phase 1 then expects 16: threads 16-31 again
  body = """
  setp.eq.u32 %p0, %r0, 0;
  @%p0 mbarrier.init.shared.b64 [%r1], 32;
  bar.sync 0;
  setp.lt.u32 %p4, %r0, 16;
  @%p4 mbarrier.arrive_drop.shared.b64 %rd3, [%r1];
  @!%p4 mbarrier.arrive.shared.b64 %rd3, [%r1];
  bar.sync 0;
  mbarrier.test_wait.parity.shared.b64 %p1, [%r1], 0;
  @!%p4 mbarrier.arrive.shared.b64 %rd4, [%r1];
  bar.sync 0;
  mbarrier.test_wait.parity.shared.b64 %p2, [%r1], 1;
  selp.u32 %r6, 1, 0, %p1;
  selp.u32 %r7, 2, 0, %p2;
  or.b32 %r6, %r6, %r7;
  mbarrier.pending_count.b64 %r8, %rd3;
  shl.b32 %r8, %r8, 8;
  or.b32 %r6, %r6, %r8;
  st.global.u32 [%rd2], %r6;"""
  r = run(body, 32)
  assert (r & 3).tolist() == [3] * 32   # both phases complete
  assert (r >> 8).tolist() == [31 - t for t in range(32)]


@pytest.mark.parametrize("body, match", [
  ("  mbarrier.arrive.shared.b64 %rd3, [%r1];", r"not initialized \(mbarrier.init\) or was invalidated"),
  ("  mbarrier.init.shared.b64 [%r1], 0;", r"mbarrier.init count 0 outside 1..1048575"),
  (INIT + "  mbarrier.arrive.noComplete.shared.b64 %rd3, [%r1], 1;", r"noComplete completes the phase"),
  (INIT + "  bar.sync 0;\n  @%p0 mbarrier.inval.shared.b64 [%r1];\n  bar.sync 0;\n  mbarrier.test_wait.shared.b64 %p1, [%r1], 0;", r"or was invalidated"),
])
def test_misuse_is_a_fault(body, match):
  with pytest.raises(GPUFault, match=match):
    run(body, 1 if "noComplete" in body else 32)


def test_shared_cta_space_and_memory_order_qualifiers():
  # PTX 7.8+ spells the CTA's shared memory .shared::cta; arrive/test_wait take .release/.acquire and a scope
  body = """
  setp.eq.u32 %p0, %r0, 0;
  @%p0 mbarrier.init.shared::cta.b64 [%r1], %r2;
  st.shared::cta.u32 [%r5], %r0;
  bar.sync 0;
  mbarrier.arrive.release.cta.shared::cta.b64 %rd3, [%r1];
W:
  mbarrier.test_wait.acquire.cta.shared::cta.b64 %p1, [%r1], %rd3;
  @!%p1 bra W;
  xor.b32 %r7, %r4, 4;
  add.u32 %r7, %r3, %r7;
  ld.shared::cta.u32 %r8, [%r7];
  st.global.u32 [%rd2], %r8;"""
  assert run(body, 32).tolist() == (np.arange(32) ^ 1).tolist()
