"""Method tables: one row per method (name, byte offset, action). The channel stores every data dword in the bound
engine's `regs[offset]` (latched state) and then calls the row's action, if any. An action returns None (go on),
DONE (a trigger ran: the step ends there) or BLOCKED (an acquire failed: retry this dword later)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from refgrad.hw.nv import CLASS_NAMES

DONE, BLOCKED = 1, 2


class Method(NamedTuple):
  name: str
  offset: int
  action: Callable[[Any, Any], int | None] | None = None   # (engine, data) -> None | DONE | BLOCKED
  bulk: bool = False   # the action takes a numpy uint32 array of data dwords (all of a NON_INC header at once)


def table(label: str, rows: Iterable[Method]) -> dict[int, Method]:
  """offset -> row; a duplicate offset is a bug in the table."""
  out: dict[int, Method] = {}
  for r in rows:
    if r.offset in out: raise AssertionError(f"{label}: {r.name} and {out[r.offset].name} share offset 0x{r.offset:x}")
    out[r.offset] = r
  return out


class Engine:
  """A class bound to a subchannel: its latched method state (`regs`, by offset) and method table."""
  engine = ""
  table: dict[int, Method]   # set by the subclass

  def __init__(self, ch: Any, cls: int):
    self.ch, self.cls = ch, cls
    self.label = f"{cls:04X} ({CLASS_NAMES[cls]})"
    self.regs: dict[int, int] = {}

  def reset(self) -> None: pass
