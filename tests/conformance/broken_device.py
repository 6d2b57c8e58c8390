"""A third-party-style backend with a bug (float ADD computed as MUL), to show the suite catches it."""
from dataclasses import replace

from refgrad.device import Compiled, Device
from refgrad.dtype import dtypes
from refgrad.renderer.serialize import PythonRenderer
from refgrad.uop.ops import Ops, UOp


class BrokenRenderer(PythonRenderer):
  def render(self, name: str, uops: list[UOp]) -> str:
    swap: dict[UOp, UOp] = {}
    out = []
    for u in uops:
      n = u.replace(src=tuple(swap.get(s, s) for s in u.src))
      if n.op is Ops.ADD and n.dtype == dtypes.float32: n = n.replace(op=Ops.MUL)
      swap[u] = n
      out.append(n)
    return super().render(name, out)

def make_device(name: str) -> Compiled:
  return replace(Device["PYTHON"], name=name, renderer=BrokenRenderer())
