"""The executors keep freed C heap (emulators/heap.py): set once where the C library is glibc, a no-op elsewhere; the first PTX
program loaded sets it (the RDNA3 executor calls the same function at its first dispatch)."""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

from emulators import heap


def _glibc() -> bool:
  name = ctypes.util.find_library("c")
  return bool(name) and hasattr(ctypes.CDLL(name), "gnu_get_libc_version")


def test_thresholds_set_once_on_glibc():
  if not _glibc(): pytest.skip("the C library is not glibc: nothing to set (keep_freed_memory returns False)")
  assert heap.keep_freed_memory() is True
  assert heap.keep_freed_memory() is True   # the second call only reports


def test_a_launch_sets_them_and_results_are_unchanged(monkeypatch):
  from refgrad.device import Device
  monkeypatch.setenv("MOCKGPU", "1")
  src = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd0, [out];
  mov.u32 %r0, %tid.x;
  mul.lo.s32 %r1, %r0, 3;
  mul.wide.u32 %rd1, %r0, 4;
  add.s64 %rd2, %rd0, %rd1;
  st.global.u32 [%rd2], %r1;
  ret;
}
"""
  out = Device["NV"].run_ptx(src, "k", [np.zeros(1024, np.uint32)], grid=(1, 1, 1), block=(1024, 1, 1))[0]
  assert (out == np.arange(1024, dtype=np.uint32) * 3).all()
  assert heap._done is _glibc()
