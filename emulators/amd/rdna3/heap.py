"""The C heap's padding for the executor's arrays. A dispatch's numpy temporaries are fresh arrays of its lanes (16,384
lanes of float64: 128 KiB each), freed at once; glibc returns the top of its heap to the system when that much is free
and faults the pages in again for the next array. Those page faults cost more than the arithmetic (the emulated f64
fma on 16,384 lanes: 0.8 ms with the default, 0.3 ms with a 16 MiB pad, on this project's 2-core machine). M_TOP_PAD
keeps that much free memory at the top of the heap, with the mmap and trim thresholds below (glibc's mallopt; elsewhere
nothing is done). The setting is the process's, made at the first RDNA3 dispatch: it changes when memory goes back to
the system (at most 64 MiB kept), never a value."""
from __future__ import annotations

import ctypes
import sys

# glibc malloc.h parameters -> values. Setting any of them ends glibc's own adjustment of the mmap threshold (which
# otherwise rises to the largest array freed, up to 32 MiB): the threshold is then set to that maximum itself, so a batch's
# multi-MiB temporaries stay on the heap, and the top is trimmed only past TRIM (keeping PAD).
PARAMS = {-3: 32 << 20,   # M_MMAP_THRESHOLD
          -1: 64 << 20,   # M_TRIM_THRESHOLD
          -2: 16 << 20}   # M_TOP_PAD
_done = False


def pad_heap() -> None:
  """Set PARAMS once (glibc on Linux only; anything else, or a failing call, leaves the heap as it is)."""
  global _done
  if _done: return
  _done = True
  if not sys.platform.startswith("linux"): return
  try:
    mallopt = ctypes.CDLL(None).mallopt
    for k, v in PARAMS.items(): mallopt(k, v)
  except (OSError, AttributeError): pass   # not glibc (e.g. musl has no mallopt): the default heap
