"""The internal fault: raised where a problem is found, turned into a `GPUFault` by the channel,
which knows the queue, GP entry, dword offset and raw words."""
from __future__ import annotations


class Fault(Exception):
  """What went wrong (`what`), which engine found it, and the address / kernel / uop when known."""
  def __init__(self, what: str, engine: str, address: int | None = None, kernel: str | None = None, uop: str | None = None,
               words: tuple[int, ...] = ()):
    super().__init__(what)
    self.what, self.engine, self.address, self.kernel, self.uop, self.words = what, engine, address, kernel, uop, words
