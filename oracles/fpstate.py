"""The process's floating-point control state (flush-to-zero, denormals-are-zero, rounding mode), read by behaviour.

A backend built with -ffast-math (or any code that writes MXCSR / FPCR) can switch the whole process to FTZ/DAZ or
another rounding mode; every later float operation in that process, the reference's included, then computes
something else. `probe()` reads the state by computing with numpy (which runs on the same SSE/NEON unit, so it obeys
the same control bits: no compiler or assembly needed); `restore()` puts the C library's default environment back
(glibc `fesetenv(FE_DFL_ENV)`). Callers probe before and after each backend call and report a change as a finding.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np

DEFAULT = "default"

def probe() -> str:
  """"default", or the non-default modes in effect, e.g. "FTZ DAZ" or "round-toward-zero"."""
  f = np.float32
  tiny = np.array([np.finfo(f).tiny], f)
  sub = np.array([np.finfo(f).smallest_subnormal], f)
  modes = []
  if (tiny * f(0.5))[0] == 0: modes.append("FTZ")          # a subnormal result flushed to zero
  if not (sub > f(0))[0]: modes.append("DAZ")              # a subnormal operand read as zero (compares write no result)
  one = np.array([1.0, -1.0], f)
  quarter, three_q = f(2.0 ** -25), f(3 * 2.0 ** -25)      # a quarter and three quarters of float32's ulp at 1
  up, down = one[0] + quarter != 1, one[1] - quarter != -1
  rounded = (one + np.array([three_q, -three_q], f)) != one   # nearest rounds three quarters of an ulp away from 1
  if up: modes.append("round-up")
  elif down: modes.append("round-down")
  elif not rounded.all(): modes.append("round-toward-zero")
  return " ".join(modes) or DEFAULT

@functools.cache
def _libm() -> ctypes.CDLL | None:
  name = ctypes.util.find_library("m")
  try: return ctypes.CDLL(name) if name else None
  except OSError: return None

def restore() -> bool:
  """Set the default floating-point environment again; False where that is not possible here (not glibc)."""
  lib = _libm()
  if lib is None or not hasattr(lib, "fesetenv"): return False
  lib.fesetenv.argtypes = [ctypes.c_void_p]
  lib.fesetenv(ctypes.c_void_p(-1))   # glibc's FE_DFL_ENV is ((const fenv_t *) -1)
  return probe() == DEFAULT

def changed(before: str, after: str) -> str | None:
  """The one line describing a change of state, or None."""
  return None if before == after else f"the floating-point control state changed from {before} to {after}"
