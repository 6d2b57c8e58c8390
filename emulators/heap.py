"""The C heap the executors' numpy temporaries come from: kept in the process, not handed back to the OS after each
instruction.

A kernel on thousands of lanes makes a fresh array per instruction (16,384 lanes of float64: 128 KiB), freed at once.
glibc maps arrays of 128 KiB and more (and unmaps them when freed) and returns free memory at the top of its heap to the
OS, so nearly every result met fresh pages, zeroed by the kernel and faulted in, and the faults cost more than the
arithmetic: PTX softmax took ~460 minor page faults per call (0-1 with the settings below); the RDNA3 emulated f64 fma
on 16,384 lanes 0.8 ms (0.3 ms). The mock NV also runs kernels on the HCQ worker thread, whose own malloc arena trims
the same way. Raising glibc's mmap and trim thresholds and padding the heap's top keeps that memory for the next
results: peak memory is unchanged, the process keeps up to TRIM_BYTES of freed heap per arena. The settings are the
process's (PYTHON in the same process gains too) and change when memory goes back to the OS, never a value. Only where
the C library is glibc; elsewhere nothing is changed."""
from __future__ import annotations

import ctypes
import ctypes.util

# glibc <malloc.h> parameter number -> value. Setting any of them also ends glibc's own adjustment of the mmap threshold.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MMAP_BYTES = 32 << 20    # arrays below this come from the heap (glibc's largest allowed value on 64-bit machines)
TRIM_BYTES = 64 << 20    # free memory at the top of a heap kept up to this much (per malloc arena)
PAD_BYTES = 16 << 20     # extra memory taken whenever a heap grows, so the next arrays find it mapped
SETTINGS = {M_MMAP_THRESHOLD: MMAP_BYTES, M_TRIM_THRESHOLD: TRIM_BYTES, M_TOP_PAD: PAD_BYTES}
_done: bool | None = None


def keep_freed_memory() -> bool:
  """Apply SETTINGS (first call only; the executors call it when they load a program); True where they were set (glibc)."""
  global _done
  if _done is not None: return _done
  _done = False
  try:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"): return False
    _done = all([bool(libc.mallopt(k, v)) for k, v in SETTINGS.items()])
  except OSError: pass
  return _done
