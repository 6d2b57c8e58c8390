"""From a kernel graph to a linear program for one renderer: the rewrite passes, in order."""
from __future__ import annotations

from typing import Any

from refgrad.uop.linearize import linearize
from refgrad.uop.ops import GroupOp, UOp, graph_rewrite
from refgrad.uop.spec import verify_linear
from refgrad.uop.symbolic import symbolic


def to_linear(sink: UOp, renderer: Any, decompose: bool | None = None) -> list[UOp]:
  """Decompose transcendentals (by default unless the renderer runs them natively), simplify,
  linearize, verify."""
  if decompose is None: decompose = not renderer.native_transcendentals
  if decompose and any(u.op in GroupOp.Transcendental for u in sink.toposort):
    from refgrad.uop.decompositions import decompose_transcendentals
    sink = decompose_transcendentals(sink)
  sink = graph_rewrite(sink, symbolic)
  uops = linearize(sink)
  verify_linear(uops)
  return uops
