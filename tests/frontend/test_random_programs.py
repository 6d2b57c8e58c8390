"""Random tensor programs (hypothesis): chains of elementwise, movement and reduction ops on small tensors.
Each program runs on CPU and on PYTHON and must give byte-identical results, and integer programs must
match numpy exactly (the same chain applied to numpy arrays; float chains are tracked for shapes only). A max over an
empty axis (a shrink can empty one) has no identity: numpy and refgrad both raise ValueError, and the program ends there."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refgrad import Tensor

# each step: (name, tensor function, numpy function); int-safe steps keep int32 values small enough not to wrap
_UNARY = [("neg", lambda t: -t, lambda a: -a), ("abs", lambda t: t.abs(), np.abs), ("relu", lambda t: t.relu(), lambda a: np.maximum(a, 0)),
          ("sq", lambda t: t * t % 1000, lambda a: a * a % 1000)]
_same = lambda a: a  # float steps: numpy tracks the shape only
_FLOAT_UNARY = [("exp", lambda t: (t * 0.1).exp(), _same), ("sin", lambda t: t.sin(), _same), ("sqrt", lambda t: t.abs().sqrt(), _same),
                ("sigmoid", lambda t: t.sigmoid(), _same), ("recip", lambda t: 1 / (t.abs() + 1), _same)]


def _step(draw, shape: tuple[int, ...], is_int: bool):
  """One random op for a tensor of `shape`: (tensor function, numpy function or None)."""
  kind = draw(st.sampled_from(["unary", "binary", "reduce", "permute", "reshape", "pad", "shrink", "flip", "expand"]))
  nd = len(shape)
  if kind == "unary":
    _, f, g = draw(st.sampled_from(_UNARY + ([] if is_int else _FLOAT_UNARY)))
    return f, g
  if kind == "binary":
    op = draw(st.sampled_from(["add", "mul", "max", "sub"]))
    f, g = {"add": (lambda x, y: x + y, np.add), "mul": (lambda x, y: x * y % 997, lambda x, y: x * y % 997),
            "max": (lambda x, y: x.maximum(y), np.maximum), "sub": (lambda x, y: x - y, np.subtract)}[op]
    return (lambda t: f(t, t.flip(0))), (lambda a: g(a, np.flip(a, 0)))
  if kind == "reduce" and nd >= 2:
    ax = draw(st.integers(0, nd - 1))
    if draw(st.booleans()): return (lambda t: t.sum(ax, keepdim=True)), (lambda a: a.sum(ax, keepdims=True, dtype=a.dtype))
    return (lambda t: t.max(ax, keepdim=True)), (lambda a: a.max(ax, keepdims=True))
  if kind == "permute" and nd >= 2:
    order = tuple(draw(st.permutations(range(nd))))
    return (lambda t: t.permute(order)), (lambda a: a.transpose(order))
  if kind == "reshape" and nd >= 2:
    new = (shape[0] * shape[1], *shape[2:])
    return (lambda t: t.reshape(new)), (lambda a: a.reshape(new))
  if kind == "pad":
    p = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(nd))
    return (lambda t: t.pad(p)), (lambda a: np.pad(a, p))
  if kind == "shrink" and all(n >= 2 for n in shape):
    b = tuple((draw(st.integers(0, 1)), n - draw(st.integers(0, 1))) for n in shape)
    return (lambda t: t.shrink(b)), (lambda a: a[tuple(slice(s, e) for s, e in b)])
  if kind == "flip":
    ax = draw(st.integers(0, nd - 1))
    return (lambda t: t.flip(ax)), (lambda a: np.flip(a, ax))
  if kind == "expand" and np.prod(shape) <= 64:
    return (lambda t: t.reshape(1, *t.shape).expand(2, *t.shape)), (lambda a: np.broadcast_to(a, (2, *a.shape)))
  return (lambda t: t), (lambda a: a)


def _run(x: np.ndarray, steps: list) -> None:
  """Apply (tensor function, numpy function) steps to x on CPU and PYTHON and numpy; compare the results."""
  ts, a = [Tensor(x, device="CPU"), Tensor(x, device="PYTHON")], x
  for f, g in steps:
    try: a = g(a)
    except ValueError as e:   # the model has no answer (max over an empty axis): neither has refgrad
      for t in ts:
        with pytest.raises(ValueError, match="is empty"): f(t)
      assert "zero-size array" in str(e)
      return
    ts = [f(t) for t in ts]
  cpu, py = ts[0].numpy(), ts[1].numpy()
  assert cpu.shape == py.shape == a.shape
  assert cpu.tobytes() == py.tobytes()
  if x.dtype == np.int32: np.testing.assert_array_equal(cpu, a)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_program_cpu_equals_python(data):
  is_int = data.draw(st.booleans())
  shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
  rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
  x = rng.integers(-9, 10, shape).astype(np.int32) if is_int else rng.standard_normal(shape).astype(np.float32)
  steps, cur = [], x
  for _ in range(data.draw(st.integers(1, 6))):
    f, g = _step(data.draw, cur.shape, is_int)
    steps.append((f, g))
    try: cur = g(cur)
    except ValueError: break
  _run(x, steps)


@pytest.mark.parametrize("is_int", [True, False])
def test_max_after_a_shrink_to_an_empty_axis(is_int):
  """The case hypothesis once drew (the README's test command failed on a fresh clone): a shrink to a zero-size axis,
  then max over it. numpy raises "zero-size array to reduction operation maximum", refgrad raises ValueError; a max
  over the other axis gives an empty result on both."""
  x = np.arange(6, dtype=np.int32 if is_int else np.float32).reshape(2, 3)
  empty = ((lambda t: t.shrink(((1, 1), (0, 3)))), (lambda a: a[1:1, 0:3]))
  _run(x, [empty, ((lambda t: t.max(0, keepdim=True)), (lambda a: a.max(0, keepdims=True)))])
  _run(x, [empty, ((lambda t: t.max(1, keepdim=True)), (lambda a: a.max(1, keepdims=True)))])
