"""cp.async / commit_group / wait_group / wait_all: copies complete at the wait (zero-filled past src-size), groups complete
oldest first, and a read of the destination before the wait reads undefined bytes (checked mode)."""
from __future__ import annotations

import numpy as np
import pytest

from refgrad.device import Device
from refgrad.runtime.simt import UndefinedBehaviourError
from tests.emulators.ptx.ptxkit import HEAD


def kernel(body: str) -> str:
  """Thread t: sh[16t .. 16t+15] <- copies from x[16t ..]; out[4t .. 4t+3] <- the words of sh[16 * (t ^ 1)] after the body."""
  return HEAD + """.visible .entry k(.param .u64 out, .param .u64 x)
{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  .shared .align 16 .b8 sh[1024];
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [x];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd2, %r0, 16;
  add.s64 %rd3, %rd1, %rd2;
  add.s64 %rd4, %rd0, %rd2;
  mov.u32 %r1, sh;
  shl.b32 %r2, %r0, 4;
  add.u32 %r3, %r1, %r2;
  xor.b32 %r4, %r2, 16;
  add.u32 %r4, %r1, %r4;
""" + body + """
  ld.shared.v4.u32 {%r5, %r6, %r7, %r8}, [%r4];
  st.global.v4.u32 [%rd4], {%r5, %r6, %r7, %r8};
  ret;
}
"""


def run(body: str, n: int = 8) -> np.ndarray:
  x = np.arange(1, 4 * n + 1, dtype=np.uint32)
  return Device["NV"].run_ptx(kernel(body), "k", [np.zeros(4 * n, np.uint32), x], grid=(1, 1, 1), block=(n, 1, 1))[0].reshape(n, 4)


def swapped(n: int = 8) -> np.ndarray:
  return np.arange(1, 4 * n + 1, dtype=np.uint32).reshape(n, 4)[np.arange(n) ^ 1]


def test_copies_complete_at_the_wait():
  got = run("cp.async.cg.shared.global [%r3], [%rd3], 16; cp.async.commit_group; cp.async.wait_group 0; bar.sync 0;")
  assert (got == swapped()).all()
  got = run("cp.async.ca.shared.global [%r3], [%rd3], 8, 4; cp.async.ca.shared.global [%r3+8], [%rd3+8], 8; cp.async.wait_all; bar.sync 0;")
  want = swapped().copy()
  want[:, 1] = 0   # src-size 4 of 8: the second word zero-filled
  assert (got == want).all()
  got = run("setp.eq.u32 %p1, %r0, 3; cp.async.cg.shared.global [%r3], [%rd3], 16, %p1; cp.async.wait_all; bar.sync 0;")
  want = swapped().copy()
  want[2] = 0   # thread 3 ignored its source: zeros (thread 2 reads thread 3's)
  assert (got == want).all()


def test_wait_group_leaves_the_newest_groups_pending():
  # group 0 fills sh[16t..+8), group 1 the rest; wait_group 1 completes group 0 only: the rest still undefined
  body = ("cp.async.ca.shared.global [%r3], [%rd3], 8; cp.async.commit_group; cp.async.ca.shared.global [%r3+8], [%rd3+8], 8;"
          " cp.async.commit_group; cp.async.wait_group {n}; bar.sync 0;")
  assert (run(body.replace("{n}", "0")) == swapped()).all()
  with pytest.raises(UndefinedBehaviourError, match="undefined data was stored there after being loaded in kernel k"):
    run(body.replace("{n}", "1"))


def test_reading_the_destination_before_the_wait_reads_undefined_bytes():
  with pytest.raises(UndefinedBehaviourError, match="undefined data was stored there after being loaded in kernel k"):
    run("cp.async.cg.shared.global [%r3], [%rd3], 16; cp.async.commit_group; bar.sync 0;")


def test_cp_async_reads_its_global_source_for_the_hazard_checker():
  from emulators.nv.ptx.access import param_access
  from emulators.nv.ptx.parse import parse
  from refgrad.runtime.ptx_args import pointer_access, text_rows
  src = kernel("cp.async.cg.shared.global [%r3], [%rd3], 16; cp.async.wait_all; bar.sync 0;")
  assert param_access(parse(src).entries["k"]) == {"x": (True, False), "out": (False, True)}
  assert pointer_access(text_rows(src, "k"), ["out", "x"], follow_loads=True) == {"x": (True, False), "out": (False, True)}
