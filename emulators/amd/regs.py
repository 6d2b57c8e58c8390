"""gfx11 compute registers as the SET_SH_REG window sees them: the tables of refgrad/hw/amd.py (docs/hw/AMD.md §4), read
with its one bit-field helper. Registers are plain state: SET_SH_REG stores values, DISPATCH_DIRECT reads them."""
from __future__ import annotations

from refgrad.hw import amd as A
from refgrad.hw import bits

SH_START = A.SH_START   # SET_SH_REG window start, dword address
SH_REGS, BY_NAME, FIELDS, LDS_GRANULE = A.SH_REGS, A.SH, A.FIELDS, A.LDS_GRANULE


def get(reg: str, value: int, name: str) -> int:
  """Field `name` of register `reg` holding `value`."""
  return bits.get(value, FIELDS[reg][name])

