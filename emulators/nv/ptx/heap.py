"""The C heap the executor's arrays come from: kept, not handed back to the OS after every kernel.

The mock runs kernels on the HCQ device's worker thread, whose glibc malloc arena returns freed memory at the top of its
heap to the OS (and maps arrays of 128 KB and more, then unmaps them when freed) as soon as they are freed. A kernel on
16,384 lanes makes a fresh 64-128 KB array per instruction, so nearly every result met fresh pages, zeroed by the
kernel and faulted in: softmax took about 460 minor page faults per call, matmul 64 130 (PYTHON's own matmul 64: 160),
0-1 with the thresholds below; the faults cost more than the arithmetic. Raising glibc's mmap and trim thresholds
(mallopt M_MMAP_THRESHOLD, M_TRIM_THRESHOLD) keeps that memory in the process for the next results: peak memory is
unchanged, the process holds on to up to TRIM_BYTES of freed heap per arena. Only where the C library is glibc
(elsewhere nothing is changed); process-wide (PYTHON in the same process gains too), once."""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's <malloc.h> parameter numbers
MMAP_BYTES = 32 << 20    # arrays below this come from the heap (glibc's largest allowed value on 64-bit machines)
TRIM_BYTES = 64 << 20    # freed memory at the top of a heap kept up to this much (per malloc arena)
_done: bool | None = None


def keep_freed_memory() -> bool:
  """Set the thresholds (first call only); True where they were set (glibc)."""
  global _done
  if _done is not None: return _done
  _done = False
  try:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"): return False
    _done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) & bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
  except OSError: pass
  return _done
