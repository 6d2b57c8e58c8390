"""Kernel graphs the suite (and the tests and benchmarks) run: one op applied elementwise."""
from __future__ import annotations

from refgrad.dtype import DType
from refgrad.uop.ops import GroupOp, Ops, UOp, alu_dtype


def op_result_dtype(op: Ops, dtype: DType) -> DType:
  """Result dtype of `op` whose first value operand has `dtype` (CAST/BITCAST: pass the target)."""
  if op is Ops.WHERE or op in (Ops.CAST, Ops.BITCAST): return dtype
  return alu_dtype(op, dtype)

def elementwise(op: Ops, out_dtype: DType, src_dtypes: tuple[DType, ...], n: int) -> UOp:
  """out[i] = op(in0[i], in1[i], ...) for i < n, one lane per element (SPECIAL idx0). Buffer 0 is
  the output, buffers 1.. the inputs."""
  idx = UOp.special("idx0", n)
  ins = [UOp.define_global(k + 1, dt, n).load(idx) for k, dt in enumerate(src_dtypes)]
  if op in GroupOp.ALU: val = UOp(op, out_dtype, tuple(ins))
  else: val = UOp(op, out_dtype, (ins[0],))
  return UOp.define_global(0, out_dtype, n).store(idx, val).sink()
