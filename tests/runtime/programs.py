"""Small programs the HCQ runtime tests (NV and AMD) share."""
from __future__ import annotations

import numpy as np

from refgrad import Tensor, dtypes
from refgrad.device import Buffer
from refgrad.program import Runner


def add_one(device: str, n: int) -> tuple[Runner, Buffer, Buffer]:
  """The compiled kernel of `a + 1` for n float32s on `device`, an output buffer and an input holding 0..n-1."""
  from refgrad.schedule import create_schedule, get_runner
  a = Tensor(np.zeros(n, np.float32), device=device).realize()
  it = create_schedule([(a + 1).uop], device)[0][-1]
  r = get_runner(it.ast, device, it.name)
  out, inp = Buffer(device, n, dtypes.float32), Buffer(device, n, dtypes.float32).copyin(np.arange(n, dtype=np.float32))
  return r, out, inp

