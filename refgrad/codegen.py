"""From a kernel graph to a linear program for one renderer: the rewrite passes, in order."""
from __future__ import annotations

from typing import Any

from refgrad.uop.decompositions import decompose_transcendentals
from refgrad.uop.linearize import linearize
from refgrad.uop.ops import GroupOp, Ops, UOp, graph_rewrite
from refgrad.uop.spec import verify_linear
from refgrad.uop.symbolic import symbolic


def to_linear(sink: UOp, renderer: Any, decompose: bool | None = None) -> list[UOp]:
  """Decompose transcendentals (by default unless the renderer runs them natively), simplify,
  linearize, verify."""
  if decompose is None: decompose = not renderer.native_transcendentals
  if decompose and any(u.op in GroupOp.Transcendental for u in sink.toposort):
    sink = decompose_transcendentals(sink)
  glb = [u for u in sink.toposort if u.op is Ops.DEFINE_GLOBAL]
  sink = graph_rewrite(sink, symbolic)
  # the program keeps every buffer of the kernel, also one whose loads simplification made dead (two equal fully
  # unrolled sums: WHERE(c, x, x) -> x), so it is still launched with the kernel's buffers
  if missing := [u for u in glb if u not in sink.toposort]: sink = sink.replace(src=(*sink.src, *missing))
  uops = linearize(sink)
  verify_linear(uops)
  return uops
