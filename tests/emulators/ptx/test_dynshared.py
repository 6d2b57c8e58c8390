"""Dynamic shared memory: `extern __shared__` arrays (module-scope .extern .shared in nvcc's PTX) sized by run_ptx's
`shared` bytes, after the entry's static .shared variables; an access past the launch's size is an MMU fault."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emulators.nv.ptx.parse import parse
from refgrad.device import Device
from refgrad.runtime.driver import GPUFault
from refgrad.runtime.ptx_args import entry_signature

PTX = (Path(__file__).parent / "dynshared.ptx").read_text()


def test_tree_sum_in_dynamic_shared_memory():
  x = np.random.default_rng(4).standard_normal(3 * 64).astype(np.float32)
  out = Device["NV"].run_ptx(PTX, "tree_sum", [x, np.zeros(3, np.float32), np.int32(64)], grid=(3, 1, 1), block=(64, 1, 1), shared=64 * 4)[1]
  s = x.reshape(3, 64).copy()
  k = 32
  while k:
    s[:, :k] = s[:, :k] + s[:, k:2 * k]
    k //= 2
  assert out.tobytes() == s[:, 0].tobytes()


def test_too_little_dynamic_shared_memory_faults():
  x = np.zeros(64, np.float32)
  with pytest.raises(GPUFault, match=r"shared-memory access of 4 bytes at offset 128 outside the CTA's 128 bytes"):
    Device["NV"].run_ptx(PTX, "tree_sum", [x, np.zeros(1, np.float32), np.int32(64)], grid=(1, 1, 1), block=(64, 1, 1), shared=128)


def test_module_scope_shared_follows_the_entrys_own():
  src = PTX.replace(".extern .shared", ".shared .align 8 .b8 pad[12];\n.extern .shared")
  e = parse(src).entries["tree_sum"]
  assert e.shared["pad"].offset == 0 and e.shared["s"].offset == 16 and e.dynamic_shared and e.shared_bytes == 16
  assert entry_signature(src, "tree_sum")[1] == 16   # the launcher's static bytes, up to the extern array's alignment
