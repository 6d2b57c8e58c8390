"""The mock GPU's virtual address space: page-granular mappings with guard gaps, MMU faults, recycled backing memory."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.fault import Fault
from emulators.vm import PAGE, POOL_MIN, VA_BASE, AddressSpace


def test_mappings_are_page_aligned_with_a_guard_gap():
  vm = AddressSpace("NV:0")
  a, b, c = vm.alloc(1, True), vm.alloc(PAGE, False), vm.alloc(0, True)
  assert a.va == VA_BASE and all(r.va % PAGE == 0 for r in (a, b, c))
  assert b.va - a.end >= PAGE and c.va - b.end >= PAGE
  assert vm.find(a.va) is a and vm.find(b.va + PAGE - 1) is b and vm.find(a.va + 1) is None and vm.find(c.va) is None
  assert vm.resolve(b.va + 8, 8, "copy", "x") == (b, 8)

@pytest.mark.parametrize("va, n, why", [(VA_BASE - 4, 4, "is not mapped"), (VA_BASE + 8, 8, "runs past the end of the mapping"),
                                        (VA_BASE + PAGE, 4, "is not mapped"), (0, 4, "is not mapped")])
def test_accesses_outside_a_mapping_are_mmu_faults(va, n, why):
  vm = AddressSpace("NV:0")
  vm.alloc(12, True)
  with pytest.raises(Fault) as e: vm.resolve(va, n, "compute", "QMD")
  assert e.value.engine == "mmu" and e.value.address == va and why in e.value.what and "QMD at" in e.value.what and "compute engine" in e.value.what

def test_freed_vas_are_never_reused_and_backing_memory_comes_back_zeroed():
  vm = AddressSpace("NV:0")
  a = vm.alloc(POOL_MIN, False)
  a.mem.write(np.full(POOL_MIN, 7, np.uint8))
  data = a.mem.data
  vm.free(a.va)
  b = vm.alloc(POOL_MIN, False)
  assert b.va > a.va and vm.find(a.va) is None
  assert b.mem.data is data and not b.mem.data.any() and not b.init.any()   # recycled, zeroed, nothing initialized
  with pytest.raises(ValueError, match="not the start of a mapping"): vm.free(a.va)

def test_views_hand_back_initialization():
  vm = AddressSpace("NV:0")
  r = vm.alloc(16, False)
  v = r.view(8)
  v.write(b"\1" * 4, 0)
  assert r.mem.data[8] == 1 and not r.init.any()   # bytes shared at once, definedness when merged back
  r.merge(8, v)
  assert r.init.tolist() == [False] * 8 + [True] * 4 + [False] * 4 and r.mem.data[8] == 1
