"""Random command streams never crash the mock with anything but a GPUFault, and never hang it."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulators.mock_driver import make_driver
from emulators.nv.compute import TABLE as COMPUTE_TABLE
from emulators.nv.copy import TABLE as COPY_TABLE
from emulators.nv.host import TABLE as HOST_TABLE
from refgrad.runtime.driver import GPUFault

from .nvenc import COMPUTE, COPY, HOST, Stream, hdr, set_object

# headers aimed at real methods (so the decoder gets past the header most of the time), and any dword at all
_METHODS = [(HOST, o) for o in HOST_TABLE] + [(COMPUTE, o) for o in COMPUTE_TABLE] + [(COPY, o) for o in COPY_TABLE]
_header = st.builds(lambda op, count, m: hdr(op, count, *m), st.sampled_from([0, 1, 3, 4, 5, 7, 2, 6]), st.integers(0, 6), st.sampled_from(_METHODS))

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_streams_fault_or_run(data):
  drv = make_driver("NV", 0)
  mem = drv.alloc(4096, True)   # a mapping random addresses can hit: its VA's halves are likely data words
  mem.host[:] = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).integers(0, 256, 4096, dtype=np.uint8)
  word = st.one_of(st.sampled_from([0, 1, 2, 4, 16, 0x41, 0x182, 0x14, mem.va >> 32, mem.va & 0xFFFFFFFF, (mem.va >> 8) & 0xFFFFFFFF,
                                    (mem.va & 0xFFFFFFFF) + 256, 0x03100001, 0x01000003, 9]), st.integers(0, 2**32 - 1))
  words = data.draw(st.lists(st.one_of(_header, word), max_size=40))
  s = Stream(drv, "compute")
  s.entry([*set_object(COMPUTE, 0xC6C0), *set_object(COPY, 0xC6B5), *words])
  for _ in range(200):
    try:
      if not drv.poll(): break
    except GPUFault as f:
      assert f.device == "NV:0" and f.queue == "NV:0 compute" and f.what
      drv.recover(s.q)
  else: raise AssertionError("the mock was still busy after 200 polls of a 40-dword stream")
  assert isinstance(drv.describe(), str)
