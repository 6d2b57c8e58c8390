"""The linear program: what each UOp means, and a verifier that names the offending UOp.

A linear program is a list of UOps in execution order. Every source appears before its user, except
that a DEFINE_ACC names its reduce RANGEs, which come after it.
The layout of each op (src and arg) is the contract between the compiler and every backend:

  CONST          arg=value (bool/int/float, exact for dtype); scalar dtype
  DEFINE_GLOBAL  dtype=base.ptr(size); arg=kernel parameter index (buffers are params 0..n-1)
  DEFINE_LOCAL   dtype=base.ptr(size, local=True); arg=name. Memory shared by one workgroup
  DEFINE_VAR     int dtype; arg=(name, min, max). Kernel parameters after the buffers, in program order
  SPECIAL        int32; arg=(name, size). 'gidxD' workgroup index, 'lidxD' index in the workgroup,
                 'idxD' global index (a launch without locals), D in 0..2. All lanes of a launch run
  RANGE          int dtype; src=(end,); arg=axis. Loop 0..end-1; end is uniform (same on all lanes)
  ENDRANGE       src=(range,). Closes the innermost open RANGE
  IF             src=(cond,) bool. Lanes where cond is false skip to the matching ENDIF
  ENDIF          src=(if,)
  LOAD           dtype=value dtype; src=(buf, idx) or (buf, idx, gate, alt), optionally followed by a
                 BARRIER the load must come after (a local-memory read of what the barrier published).
                 idx counts elements of the buffer's base dtype; a vector LOAD of n lanes reads n
                 consecutive elements. Gated lanes where gate is false do not touch memory and take alt
  STORE          void; src=(buf, idx, val) or (buf, idx, val, gate)
  DEFINE_ACC     dtype=acc; src=(init, *reduce ranges); arg=(id,). Running it resets the acc to init
  ASSIGN         dtype=acc; src=(acc, val). acc = val on active lanes; later users read the acc
  BARRIER        void; src=stores it orders. All lanes of a workgroup wait; ends a local-memory epoch
  VECTORIZE      dtype=s.vec(n); src=n scalars of dtype s
  GEP            scalar dtype; src=(vec,); arg=(i,)
  ALU            operands have the result dtype, except: CMPLT/CMPNE give bool from two equal
                 dtypes; WHERE takes (bool cond, a, b); SHL/SHR take ints; IDIV/MOD ints;
                 RECIP/SQRT/EXP2/LOG2/SIN/MULACC floats; XOR/OR/AND ints or bool
  CAST           any non-pointer dtype to another
  BITCAST        between dtypes of equal itemsize
  WMMA           dtype=tc.dtype_out.vec(c elems); src=(a, b, c) fragments of tc.frag_dtypes; arg=tensor core name
                 (refgrad/target.py TENSOR_CORES). The lanes of a warp (`threads` consecutive work-items of a
                 workgroup) compute D = C + A*B together; each lane gets its fragment of D (semantics: `wmma`)

Vector dtypes work lane-wise for ALU ops, CAST and BITCAST (element count must match).
"""
from __future__ import annotations

from collections.abc import Sequence

from refgrad.dtype import DType, PtrDType, dtypes
from refgrad.target import TENSOR_CORES
from refgrad.uop.ops import GroupOp, Ops, UOp


class SpecError(ValueError):
  """An invalid linear program; the message names the UOp (by position) and what is wrong."""


def load_parts(u: UOp) -> tuple[UOp, UOp, UOp | None, UOp | None]:
  """(buf, idx, gate, alt) of a LOAD, whatever ordering source (a BARRIER) follows them."""
  src = u.src[:-1] if u.src[-1].op is Ops.BARRIER else u.src
  return src[0], src[1], src[2] if len(src) == 4 else None, src[3] if len(src) == 4 else None


def _fmt(i: int, u: UOp) -> str: return f"uop {i} ({u.op.name} {u.dtype!r}, arg={u.arg!r})"

def verify_linear(uops: list[UOp]) -> None:
  """Raise SpecError for the first UOp that breaks the contract above."""
  pos: dict[UOp, int] = {}
  blocks: list[UOp] = []       # open RANGE/IF, innermost last
  closed: set[UOp] = set()     # closed RANGE/IF
  scope: dict[UOp, frozenset[UOp]] = {}
  for i, u in enumerate(uops):
    def err(msg: str) -> SpecError: return SpecError(f"{_fmt(i, u)}: {msg}")  # noqa: B023
    if u in pos: raise err(f"appears twice (first at {pos[u]})")
    for j, s in enumerate(u.src[:1] if u.op is Ops.DEFINE_ACC else u.src):
      if s not in pos: raise err(f"source {j} ({s.op.name}) is not defined before its use")
      # a value defined inside a closed block is out of scope (the acc of an ASSIGN lives outside)
      if s.op is not Ops.ASSIGN and (gone := scope[s] & closed) and u.op not in (Ops.ENDRANGE, Ops.ENDIF):
        raise err(f"source {j} ({_fmt(pos[s], s)}) is used outside its {next(iter(gone)).op.name} block")
    _check_types(u, err)
    if u.op in (Ops.ENDRANGE, Ops.ENDIF):
      want = Ops.RANGE if u.op is Ops.ENDRANGE else Ops.IF
      if not blocks or blocks[-1] is not u.src[0] or u.src[0].op is not want:
        raise err(f"does not close the innermost open block ({blocks[-1].op.name if blocks else 'none is open'})")
      closed.add(blocks.pop())
    elif u.op is Ops.DEFINE_ACC:
      for r in u.src[1:]:
        if r in pos: raise err(f"must come before its reduce range {_fmt(pos[r], r)}")
    pos[u] = i
    if u.op in GroupOp.Block: blocks.append(u)
    scope[u] = frozenset(blocks)   # a RANGE's index is in scope only inside its own loop
  if blocks: raise SpecError(f"{_fmt(pos[blocks[-1]], blocks[-1])}: block is never closed")
  for u in uops:
    if u.op is Ops.DEFINE_ACC and (missing := [r for r in u.src[1:] if r not in pos]):
      raise SpecError(f"{_fmt(pos[u], u)}: reduce range {missing[0].arg} never appears in the program")


def _check_types(u: UOp, err) -> None:
  op, dt, src = u.op, u.dtype, u.src
  sdt = [s.dtype for s in src]
  def need(cond: bool, msg: str) -> None:
    if not cond: raise err(msg)
  def nsrc(*ns: int) -> None: need(len(src) in ns, f"takes {' or '.join(map(str, ns))} sources, got {len(src)}")
  if op is Ops.CONST:
    nsrc(0); need(dt.count == 1 and not isinstance(dt, PtrDType), "constants are scalars")
    need((isinstance(u.arg, (bool, int, float)) and dtypes.as_const(u.arg, dt) == u.arg) or u.arg != u.arg,
         f"value {u.arg!r} is not exactly representable as {dt!r}")
  elif op is Ops.DEFINE_GLOBAL: nsrc(0); need(isinstance(dt, PtrDType) and not dt.local and isinstance(u.arg, int), "needs a global pointer dtype and an int index")
  elif op is Ops.DEFINE_LOCAL: nsrc(0); need(isinstance(dt, PtrDType) and dt.local and dt.size > 0, "needs a sized local pointer dtype")
  elif op is Ops.DEFINE_VAR:
    nsrc(0); need(dtypes.is_int(dt) and isinstance(u.arg, tuple) and len(u.arg) == 3, "needs an int dtype and arg (name, min, max)")
  elif op is Ops.SPECIAL:
    nsrc(0)
    name = u.arg[0] if isinstance(u.arg, tuple) else ""
    need(dt == dtypes.int32 and name.rstrip("012") in ("gidx", "lidx", "idx") and name[-1:] in "012" and u.arg[1] >= 1,
         "needs int32 and arg ('gidxD'|'lidxD'|'idxD', size>=1)")
  elif op is Ops.RANGE: nsrc(1); need(dtypes.is_int(dt) and sdt[0] == dt, "needs an int dtype and an end of the same dtype")
  elif op in (Ops.ENDRANGE, Ops.ENDIF): nsrc(1)
  elif op is Ops.IF: nsrc(1); need(sdt[0] == dtypes.bool, "condition must be bool")
  elif op in (Ops.LOAD, Ops.STORE):
    if op is Ops.LOAD and src and src[-1].op is Ops.BARRIER: src, sdt = src[:-1], sdt[:-1]   # ordering only
    nsrc(*((2, 4) if op is Ops.LOAD else (3, 4)))
    need(src[0].op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL), "source 0 must be a DEFINE_GLOBAL or DEFINE_LOCAL")
    need(dtypes.is_int(sdt[1]) and sdt[1].count == 1, "index must be a scalar int")
    base: DType = src[0].dtype.base  # type: ignore[attr-defined]
    val = dt if op is Ops.LOAD else sdt[2]
    need(val.scalar() == base.scalar() and val.count % base.count == 0, f"value dtype {val!r} does not match buffer of {base!r}")
    gate = 2 if op is Ops.LOAD else 3
    if len(src) == 4:
      need(sdt[gate] == dtypes.bool, "gate must be a scalar bool")
      if op is Ops.LOAD: need(sdt[3] == dt, "alt must have the load's dtype")
  elif op is Ops.DEFINE_ACC:
    need(len(src) >= 1 and sdt[0] == dt and all(s.op is Ops.RANGE for s in src[1:]), "needs src (init of its dtype, *RANGEs)")
  elif op is Ops.ASSIGN: nsrc(2); need(src[0].op is Ops.DEFINE_ACC and sdt[0] == sdt[1] == dt, "needs (DEFINE_ACC, value) of its dtype")
  elif op is Ops.BARRIER: need(dt == dtypes.void, "is void")
  elif op is Ops.VECTORIZE: need(dt.count == len(src) > 1 and all(s == dt.scalar() for s in sdt), f"needs {dt.count} sources of {dt.scalar()!r}")
  elif op is Ops.GEP: nsrc(1); need(dt == sdt[0].scalar() and len(u.arg) == 1 and 0 <= u.arg[0] < sdt[0].count, "index out of the vector")
  elif op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
    if (msg := value_op_error(op, dt, sdt)) is not None: raise err(msg)
  elif op is Ops.WMMA:
    nsrc(3)
    need(u.arg in TENSOR_CORES, f"unknown tensor core {u.arg!r} (known: {', '.join(TENSOR_CORES)})")
    fa, fb, fc = TENSOR_CORES[u.arg].frag_dtypes
    need(tuple(sdt) == (fa, fb, fc) and dt == fc, f"{u.arg} takes fragments ({fa!r}, {fb!r}, {fc!r}) and gives {fc!r}")
  else: raise err("does not belong in a linear program")


class _Reject(Exception):
  pass

def value_op_error(op: Ops, dtype: DType, src_dtypes: Sequence[DType]) -> str | None:
  """Why an ALU op, CAST or BITCAST does not take these dtypes, or None when it does. The one statement
  of these rules: `verify_linear` and the reference semantics both ask it."""
  def need(cond: bool, msg: str) -> None:
    if not cond: raise _Reject(msg)
  try:
    for i, d in enumerate((dtype, *src_dtypes)):
      need(isinstance(d, DType) and not isinstance(d, PtrDType) and d.scalar() != dtypes.void,
           f"{'result' if i == 0 else f'operand {i - 1}'} dtype {d!r} holds no values")
    n = 1 if op in GroupOp.Unary or op in (Ops.CAST, Ops.BITCAST) else 2 if op in GroupOp.Binary else 3
    need(len(src_dtypes) == n, f"takes {n} operands, got {len(src_dtypes)}")
    opd = src_dtypes[0]
    if op is Ops.CAST: need(dtype.count == opd.count, "element counts must match")
    elif op is Ops.BITCAST: need(dtype.scalar().itemsize == opd.scalar().itemsize and dtype.count == opd.count, "BITCAST needs equal itemsize and lane count")
    elif op is Ops.WHERE: need(opd == dtypes.bool.vec(dtype.count) and src_dtypes[1] == src_dtypes[2] == dtype, "needs (bool cond, a, b) with a, b of its dtype")
    else:
      need(all(s == opd for s in src_dtypes), f"operands must share one dtype, got {', '.join(map(repr, src_dtypes))}")
      if op in GroupOp.Comparison: need(dtype == dtypes.bool.vec(opd.count), "comparisons give bool")
      else: need(dtype == opd, f"result dtype must be the operands' ({opd!r})")
      if op in GroupOp.IntOnly: need(dtypes.is_int(opd), f"{op.name} needs int operands")
      if op in GroupOp.Bitwise: need(dtypes.is_int(opd) or dtypes.is_bool(opd), f"{op.name} needs int or bool operands")
      if op in GroupOp.FloatOnly or op is Ops.MULACC: need(dtypes.is_float(opd), f"{op.name} needs float operands")
      if dtypes.is_bool(opd): need(op in _BOOL_OPS, f"{op.name} is not defined on bool (bool takes XOR/OR/AND/CMPLT/CMPNE/MAX/WHERE)")
  except _Reject as e: return str(e)
  return None

_BOOL_OPS = GroupOp.Bitwise | GroupOp.Comparison | {Ops.MAX}
