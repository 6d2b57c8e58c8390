"""The exception type and message of each Tensor API error path (issue 23). Types follow tinygrad: IndexError for
indices and axes out of range, RuntimeError for shapes that do not fit (ShapeError, which is also a ValueError so
older `except ValueError` code keeps working), ValueError and TypeError for bad arguments."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from refgrad import Tensor, nn
from refgrad.tensor import ShapeError


def _t() -> Tensor: return Tensor.ones(2, 3)   # made inside each test, on the device under test

# (name, call, exception type, a regex the message must match)
CASES: list[tuple[str, Callable[[], Any], type[BaseException], str]] = [
  ("index", lambda: _t()[5], IndexError, r"index 5 is out of range for axis 0 of size 2 \(tensor shape \(2, 3\)\)"),
  ("index_inner", lambda: _t()[0, -4], IndexError, r"index -4 is out of range for axis 1 of size 3"),
  ("too_many_indices", lambda: _t()[0, 0, 0], IndexError, r"too many indices for a tensor of shape \(2, 3\): 3 given"),
  ("two_ellipses", lambda: _t()[..., ...], IndexError, r"single ellipsis"),
  ("float_index_tensor", lambda: _t()[Tensor([0.5])], IndexError, r"integer dtype, not"),
  ("sum_axis", lambda: _t().sum(5), IndexError, r"axis 5 is out of range for a tensor of 2 dimensions"),
  ("sum_axis_neg", lambda: _t().sum(-3), IndexError, r"axis -3 is out of range for a tensor of 2 dimensions"),
  ("transpose", lambda: _t().transpose(0, 2), IndexError, r"axis 2 is out of range"),
  ("cat_dim", lambda: _t().cat(_t(), dim=2), IndexError, r"axis 2 is out of range"),
  ("softmax_dim", lambda: _t().softmax(3), IndexError, r"axis 3 is out of range"),
  ("unsqueeze_dim", lambda: _t().unsqueeze(4), IndexError, r"axis 4 is out of range for a tensor of 3 dimensions"),
  ("diagonal_dim", lambda: _t().diagonal(0, 0, 5), IndexError, r"axis 5 is out of range"),
  ("reshape", lambda: _t().reshape(4, 2), RuntimeError, r"reshape: cannot reshape \(2, 3\) \(6 elements\) to \(4, 2\)"),
  ("reshape_infer", lambda: _t().reshape(4, -1), RuntimeError, r"reshape: cannot reshape \(2, 3\) to \(4, -1\)"),
  ("reshape_two_minus_one", lambda: _t().reshape(-1, -1), RuntimeError, r"only one -1 allowed"),
  ("expand", lambda: _t().expand(4, 3), RuntimeError, r"expand: cannot expand \(2, 3\) to \(4, 3\)"),
  ("permute", lambda: _t().permute(0, 0), RuntimeError, r"permute: \(0, 0\) is not a permutation of the 2 axes"),
  ("broadcast", lambda: _t() + Tensor.ones(4), RuntimeError, r"cannot broadcast shapes \(2, 3\) and \(1, 4\): axis 1 has sizes 3 and 4"),
  ("matmul", lambda: _t() @ _t(), RuntimeError, r"matmul: shapes \(2, 3\) and \(2, 3\) do not match"),
  ("matmul_0d", lambda: Tensor(1.0) @ _t(), RuntimeError, r"matmul: both arguments need at least one axis"),
  ("matmul_batch", lambda: Tensor.ones(2, 2, 3) @ Tensor.ones(3, 3, 1), RuntimeError, r"matmul: batch axes of shapes .* do not broadcast"),
  ("cat", lambda: _t().cat(Tensor.ones(3, 3), dim=1), RuntimeError, r"cat along dim 1: shapes \(2, 3\) and \(3, 3\) \(argument 1\) differ outside that dim"),
  ("stack", lambda: _t().stack(Tensor.ones(3, 2)), RuntimeError, r"stack: shapes \(2, 3\) and \(3, 2\) \(argument 1\) differ"),
  ("gather_ndim", lambda: _t().gather(1, Tensor([1, 0])), RuntimeError, r"gather: index of shape \(2,\) needs 2 axes like the input \(2, 3\)"),
  ("gather_size", lambda: _t().gather(0, Tensor([[1, 0, 0, 0]])), RuntimeError, r"gather: index shape \(1, 4\) is larger than input shape"),
  ("scatter_ndim", lambda: _t().scatter(0, Tensor([1]), 1.0), RuntimeError, r"scatter: index of shape \(1,\) needs 2 axes"),
  ("split", lambda: _t().split([1, 1], 1), RuntimeError, r"split: sizes \[1, 1\] do not add up to 3"),
  ("einsum_sizes", lambda: Tensor.einsum("ij,jk", _t(), _t()), RuntimeError, r"einsum: letter 'j' has sizes 3 and 2"),
  ("einsum_rank", lambda: Tensor.einsum("ijk", _t()), RuntimeError, r"einsum: 'ijk' does not fit an operand of shape \(2, 3\)"),
  ("einsum_ellipsis", lambda: Tensor.einsum("...ij,...jk", Tensor.ones(2, 3, 4), Tensor.ones(3, 4, 3)), RuntimeError,
   r"einsum: '\.\.\.' axis -1 has sizes 2 and 3 in '\.\.\.ij,\.\.\.jk'"),
  ("einsum_operands", lambda: Tensor.einsum("ij,jk", _t()), ValueError, r"einsum: 'ij,jk' names 2 operands, 1 given"),
  ("sdpa_mask", lambda: Tensor.ones(2, 5, 4).scaled_dot_product_attention(Tensor.ones(2, 6, 4), Tensor.ones(2, 6, 4), attn_mask=Tensor.ones(4, 4).bool()),
   RuntimeError, r"cannot broadcast shapes \(1, 4, 4\) and \(2, 5, 6\)"),
  ("linear_in", lambda: nn.Linear(4, 2)(_t()), RuntimeError, r"Linear\(4, 2\): input of shape \(2, 3\) needs a last axis of 4"),
  ("assign", lambda: _t().assign(Tensor.ones(3, 2)), RuntimeError, r"assign: shape \(3, 2\) does not match \(2, 3\)"),
  ("backward_grad", lambda: Tensor.ones(2, requires_grad=True).exp().backward(Tensor.ones(3)), RuntimeError, r"backward: gradient shape"),
  ("backward_implicit", lambda: Tensor.ones(2, requires_grad=True).exp().backward(), RuntimeError, r"needs a gradient argument"),
  ("item", lambda: _t().item(), ValueError, r"item\(\) needs a tensor of one element"),
  ("pad_mode", lambda: _t().pad((1, 1), mode="wrap"), ValueError, r"pad: mode must be"),
  ("chunk", lambda: _t().chunk(0), ValueError, r"chunk: chunks must be a positive int, got 0"),
  ("one_hot", lambda: Tensor([1, 2]).one_hot(-2), ValueError, r"one_hot: num_classes must be an int >= 0 or -1, got -2"),
  ("div_mode", lambda: _t().div(_t(), rounding_mode="round"), ValueError, r"div: rounding_mode must be None, 'trunc' or 'floor'"),
  ("bool", lambda: bool(_t()), TypeError, r"no truth value"),
  ("len_0d", lambda: len(Tensor(1.0)), TypeError, r"len\(\) of a 0-d tensor"),
  ("grad_int", lambda: Tensor([1, 2]).requires_grad_(True), TypeError, r"only float tensors can require gradients"),
  ("ragged", lambda: Tensor([[1, 2], [3]]), ValueError, r"ragged nested list"),
]


@pytest.mark.parametrize("name,call,exc,msg", CASES, ids=[c[0] for c in CASES])
def test_error_type_and_message(name: str, call: Callable[[], Any], exc: type[BaseException], msg: str) -> None:
  with pytest.raises(exc, match=msg): call()


def test_shape_error_is_both() -> None:
  """tinygrad code catches RuntimeError, older refgrad code ValueError: a shape mismatch satisfies both."""
  assert issubclass(ShapeError, RuntimeError) and issubclass(ShapeError, ValueError)
  for call in (lambda: _t().reshape(5), lambda: _t() @ _t(), lambda: _t().cat(Tensor.ones(3, 3), dim=1)):
    with pytest.raises(ValueError): call()
