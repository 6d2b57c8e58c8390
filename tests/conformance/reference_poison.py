"""A --preload module that spoils PYTHON's reference runs in any process that loads it: every result of
oracles/check.py run_python has its first byte flipped. conformance loads --preload only in device workers, so the
corpus and kernels groups' expected bits, made in the reference worker, stay clean: a correct device passes."""
from __future__ import annotations

from typing import Any

import numpy as np

from oracles import check

_run_python = check.run_python

def _spoiled(p: Any, data: list[np.ndarray]) -> list[np.ndarray]:
  out = _run_python(p, data)
  for a in out:
    if a.size: a.view(np.uint8).reshape(-1)[0] ^= 1
  return out

check.run_python = _spoiled
