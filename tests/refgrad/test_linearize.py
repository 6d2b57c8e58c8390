"""Linearization order and the linear-program verifier."""
import pytest

from refgrad.dtype import dtypes
from refgrad.uop.linearize import linearize
from refgrad.uop.ops import Ops, UOp
from refgrad.uop.spec import SpecError, verify_linear

i32 = dtypes.int32

def _acc(init: int, *ranges: UOp, n: int = 0) -> UOp: return UOp(Ops.DEFINE_ACC, i32, (UOp.const(i32, init), *ranges), (n,))
def _assign(acc: UOp, v: UOp) -> UOp: return UOp(Ops.ASSIGN, acc.dtype, (acc, v))
def _ops(lin: list[UOp]) -> list[Ops]: return [u.op for u in lin]

def test_reduce_inside_loop():
  a, o = UOp.define_global(1, i32, 32), UOp.define_global(0, i32, 8)
  i, j = UOp.range(8, 0), UOp.range(4, 1)
  acc = _acc(0, j)
  lin = linearize(o.store(i, _assign(acc, acc + a.load(i * 4 + j)) * 2).sink())
  verify_linear(lin)
  pos = {u: k for k, u in enumerate(lin)}
  store = next(u for u in lin if u.op is Ops.STORE)
  end_j = next(k for k, u in enumerate(lin) if u.op is Ops.ENDRANGE and u.src[0] is j)
  assert pos[i] < pos[acc] < pos[j] < end_j < pos[store]           # acc reset per i, before j
  assert _ops(lin)[-1] is Ops.ENDRANGE and lin[-1].src[0] is i
  mul_4 = next(u for u in lin if u.op is Ops.MUL and u.src[0] is i)
  assert pos[i] < pos[mul_4] < pos[j]                               # i*4 hoisted out of the j loop

def test_sibling_reductions_in_dependency_order():
  # out[i] = sum_k (a[i,k] - max_j a[i,j]): the k loop waits for the j loop to close
  a, o = UOp.define_global(1, i32, 16), UOp.define_global(0, i32, 4)
  i, j, k = UOp.range(4, 0), UOp.range(4, 2), UOp.range(4, 1)
  m = _acc(-(2**31), j, n=0)
  mx = _assign(m, m.maximum(a.load(i * 4 + j)))
  s = _acc(0, k, n=1)
  sm = _assign(s, s + (a.load(i * 4 + k) - mx))
  lin = linearize(o.store(i, sm).sink())
  verify_linear(lin)
  pos = {u: n for n, u in enumerate(lin)}
  end_j = next(n for n, u in enumerate(lin) if u.op is Ops.ENDRANGE and u.src[0] is j)
  assert pos[j] < end_j < pos[k], "k (axis 1) opened before the j loop it depends on closed"

def test_if_block_and_specials():
  o = UOp.define_global(0, i32, 16)
  g = UOp.special("idx0", 16)
  cond = g < 3
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  st = UOp(Ops.STORE, dtypes.void, (o, g, g * 2, iff))
  lin = linearize(st.sink())
  assert _ops(lin)[-3:] == [Ops.MUL, Ops.STORE, Ops.ENDIF] or _ops(lin)[-2:] == [Ops.STORE, Ops.ENDIF]

def test_value_from_other_loop_is_an_error():
  o = UOp.define_global(0, i32, 4)
  i, j = UOp.range(4, 0), UOp.range(4, 1)
  a = UOp.define_global(1, i32, 4)
  # two stores whose loops are both open around the second: still a valid nest
  verify_linear(linearize(UOp(Ops.SINK, dtypes.void, (o.store(i, i), o.store(j, a.load(j) + i)))))
  acc = _acc(0, j)
  # the value does not depend on the reduce range j: the ASSIGN still runs inside j's loop (sum of 4 copies)
  lin = linearize(o.store(i, _assign(acc, acc + i)).sink())
  verify_linear(lin)
  pos = {u.op: k for k, u in enumerate(lin) if u.op in (Ops.ASSIGN,)}
  rj = lin.index(j)
  assert rj < pos[Ops.ASSIGN] < next(k for k, u in enumerate(lin) if u.op is Ops.ENDRANGE and u.src[0] is j)


def _prog() -> list[UOp]:
  o = UOp.define_global(0, i32, 4)
  return [o, c4 := UOp.const(i32, 4), r := UOp.range(c4, 0), UOp.store(o, r, r), UOp(Ops.ENDRANGE, dtypes.void, (r,))]

F1 = UOp.const(dtypes.float32, 1.0)

def test_verify_accepts_valid():
  verify_linear(_prog())

@pytest.mark.parametrize("mutate, msg", [
  (lambda p: p[2:] + p[:2], "not defined before its use"),
  (lambda p: p[:-1], "never closed"),
  (lambda p: p + [UOp(Ops.ENDIF, dtypes.void, (p[2],))], "does not close the innermost open block"),
  (lambda p: p + [p[2] + p[1]], "used outside its RANGE block"),
  (lambda p: p[:3] + [F1, UOp(Ops.ADD, i32, (p[2], F1))] + p[3:], "operands must share one dtype"),
  (lambda p: p[:3] + [UOp(Ops.CMPLT, i32, (p[2], p[2]))] + p[3:], "comparisons give bool"),
  (lambda p: p[:3] + [UOp(Ops.SQRT, i32, (p[2],))] + p[3:], "SQRT needs float operands"),
  (lambda p: p[:3] + [UOp(Ops.LOAD, i32, (p[2], p[2]))] + p[3:], "source 0 must be a DEFINE_GLOBAL"),
  (lambda p: p[:3] + [UOp(Ops.LOAD, dtypes.float32, (p[0], p[2]))] + p[3:], "does not match buffer"),
  (lambda p: p[:3] + [UOp(Ops.BITCAST, dtypes.int64, (p[2],))] + p[3:], "equal itemsize"),
  (lambda p: p[:3] + [UOp(Ops.WMMA, i32, (p[2],))] + p[3:], "WMMA dtypes.int, arg=None\\): takes 3 sources, got 1"),
  (lambda p: p[:3] + [F1, UOp(Ops.SHL, dtypes.float32, (F1, F1))] + p[3:], "SHL needs int"),
])
def test_verify_names_the_uop(mutate, msg):
  with pytest.raises(SpecError, match=msg) as e: verify_linear(mutate(_prog()))
  assert str(e.value).startswith("uop ")
