"""Renderers turn a linear program (refgrad/uop/spec.py) into the source a device compiles."""
from __future__ import annotations

from refgrad import knobs
from refgrad.dtype import DType
from refgrad.target import CPU, Target
from refgrad.uop.ops import UOp

# default for every renderer: decompose transcendentals (bit-exact everywhere) unless NATIVE_TRANSCENDENTALS=1
NATIVE_TRANSCENDENTALS = bool(knobs.get("NATIVE_TRANSCENDENTALS"))


class Renderer:
  """Base of every renderer. `native_transcendentals` tells the pipeline whether EXP2/LOG2/SIN may reach
  this renderer as they are (True) or must first be rewritten into basic ops by the decomposition pass
  (False: bit-exact on every backend). `target` is the hardware the renderer's programs run on: its limits, warp
  width and tensor cores (refgrad/target.py); kernels are optimized for it unless EMULATE names another."""
  device: str = ""
  target: Target = CPU
  native_transcendentals: bool = NATIVE_TRANSCENDENTALS
  supported_dtypes: frozenset[DType] | None = None   # None: every scalar dtype

  def render(self, name: str, uops: list[UOp]) -> str:
    """The source of one kernel called `name` that runs the linear program `uops`."""
    raise NotImplementedError(f"{type(self).__name__} does not render programs")
