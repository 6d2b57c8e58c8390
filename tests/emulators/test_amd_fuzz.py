"""Random PM4 and SDMA streams never crash the mock AMD GPU with anything but a GPUFault, and never hang it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulators.amd import pm4, sdma
from emulators.mock_driver import make_driver
from refgrad.runtime.driver import GPUFault

from . import amdenc as A

# headers aimed at real rows (so the decoder gets past the header most of the time), and any dword at all
_pm4_header = st.builds(lambda op, count: (3 << 30) | (count << 16) | (op << 8), st.sampled_from(sorted(pm4.TABLE)), st.integers(0, 9))
_sdma_header = st.builds(lambda k, hi: k[0] | (k[1] << 8) | (hi << 16), st.sampled_from(sorted(sdma.TABLE)), st.integers(0, 0xFFFF))

@pytest.mark.parametrize("engine", ["compute", "copy"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_streams_fault_or_run(engine, data):
  drv = make_driver("AMD", 0)
  r = A.Ring(drv, engine, 64)
  mem = drv.alloc(4096, True)   # a mapping random addresses can hit
  mem.host[:] = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).integers(0, 256, 4096, dtype=np.uint8)
  word = st.one_of(st.sampled_from([0, 1, 2, 4, 16, 0x15, 0x514, 0x40000000, 0x8005, 0x20C, 0x213, 0x240, mem.va >> 32, mem.va & 0xFFFFFFFF,
                                    (mem.va >> 8) & 0xFFFFFFFF, (mem.va & 0xFFFFFFFF) + 256, 1 << 23 | 4]), st.integers(0, 2**32 - 1))
  words = data.draw(st.lists(st.one_of(_pm4_header if engine == "compute" else _sdma_header, word), max_size=40))
  r.push(words)
  for _ in range(200):
    try:
      if not drv.poll(): break
    except GPUFault as f:
      assert f.device == "AMD:0" and f.queue == f"AMD:0 {engine}" and f.what
      drv.recover(r.q)
  else: raise AssertionError("the mock was still busy after 200 polls of a 40-dword stream")
  assert isinstance(drv.describe(), str)
