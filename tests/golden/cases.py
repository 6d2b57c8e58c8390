"""The programs checked against PyTorch: each case runs one function on refgrad (`rg`, tinygrad-style API) and on
PyTorch (`pt`, given the torch module, so this file never imports torch) over the same inputs, forward and backward.

make_golden.py runs the `pt` side and records inputs, the output gradient, outputs and input gradients in JSON;
tests/frontend/test_golden.py runs the `rg` side on those inputs and compares. Float inputs are made in float64
by `make` (numpy, seeded) and rounded to each of the case's dtypes by torch; "i" inputs are integer (int64 in the
file; int32 tensors in refgrad, as tinygrad's default int).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

INF, NAN = math.inf, math.nan
F32 = ("float32",)
FLOATS = ("float32", "float64", "float16", "bfloat16")


@dataclass(frozen=True)
class Case:
  name: str
  make: Callable[[np.random.Generator], list[np.ndarray]]
  rg: Callable[..., Any]
  pt: Callable[..., Any]
  kinds: str = ""                # one letter per input: "f" float (default), "c" float without gradient, "i" integer, "b" bool
  dtypes: tuple[str, ...] = F32
  grad: bool = True              # backward through the first output
  tol: dict[str, tuple[float, float]] = field(default_factory=dict)   # dtype -> (rtol, atol), only where stated

  def kind(self, i: int) -> str: return self.kinds[i] if i < len(self.kinds) else "f"


def _vals(*v: float) -> Callable[[np.random.Generator], list[np.ndarray]]:
  return lambda rng: [np.array(v, dtype=np.float64)]

def _randn(*shapes: tuple[int, ...], scale: float = 1.0) -> Callable[[np.random.Generator], list[np.ndarray]]:
  return lambda rng: [rng.standard_normal(s) * scale for s in shapes]


EDGE = (-300.0, -100.0, -20.0, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 20.0, 100.0, 300.0)
BASES = (-INF, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 0.7, 1.0, 2.0, INF)
EXPS = (-INF, -1.5, -1.0, 0.0, 0.3, 1.0, 2.0, 2.5, INF)


def _pow_grid(rng: np.random.Generator) -> list[np.ndarray]:
  b, e = np.meshgrid(np.array(BASES), np.array(EXPS), indexing="ij")
  return [b.reshape(-1), e.reshape(-1)]


# ---- gradients at the edges (issue 12) ------------------------------------------------------------------------
EDGES: list[Case] = [
  Case("pow_0.3", _vals(1.0, 0.5, 2.0, 0.0, -0.0, INF, -2.0, 1e-30), lambda x: x ** 0.3, lambda torch, x: x ** 0.3),
  Case("rpow_0.7", _vals(0.0, 1.0, -1.0, 0.5, INF, -INF, 30.0), lambda x: 0.7 ** x, lambda torch, x: 0.7 ** x),
  Case("pow_tensor", _pow_grid, lambda b, e: b ** e, lambda torch, b, e: b ** e, dtypes=("float32", "float64", "float16")),
  Case("pow_2", _vals(*BASES), lambda x: x ** 2, lambda torch, x: x ** 2),
  Case("pow_3", _vals(*BASES), lambda x: x ** 3, lambda torch, x: x ** 3),
  Case("pow_-1", _vals(*BASES), lambda x: x ** -1, lambda torch, x: x ** -1),
  Case("pow_-2", _vals(*BASES), lambda x: x ** -2, lambda torch, x: x ** -2),
  Case("pow_0", _vals(*BASES, NAN), lambda x: x ** 0, lambda torch, x: x ** 0),
  Case("pow_0.5", _vals(*BASES), lambda x: x ** 0.5, lambda torch, x: x ** 0.5),
  Case("pow_-1.5", _vals(*BASES), lambda x: x ** -1.5, lambda torch, x: x ** -1.5),
  Case("sigmoid", _vals(*EDGE), lambda x: x.sigmoid(), lambda torch, x: x.sigmoid(), dtypes=FLOATS),
  Case("tanh", _vals(*EDGE), lambda x: x.tanh(), lambda torch, x: x.tanh(), dtypes=FLOATS),
  Case("quick_gelu", _vals(*EDGE), lambda x: x.quick_gelu(), lambda torch, x: x * (x * 1.702).sigmoid()),
  Case("softplus", _vals(*EDGE), lambda x: x.softplus(), lambda torch, x: torch.nn.functional.softplus(x)),
  Case("logsigmoid", _vals(*EDGE), lambda x: x.logsigmoid(), lambda torch, x: torch.nn.functional.logsigmoid(x)),
  Case("clip", _vals(-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, NAN), lambda x: x.clip(-1, 1), lambda torch, x: x.clamp(-1, 1), dtypes=FLOATS),
  Case("clamp_min", _vals(-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0), lambda x: x.clamp(min_=-1), lambda torch, x: x.clamp(min=-1)),
  Case("clamp_max", _vals(-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0), lambda x: x.clamp(max_=1), lambda torch, x: x.clamp(max=1)),
  Case("clip_tensor", lambda rng: [np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 0.5]), np.array([-1.0, -1.0, -1.0, -1.0, -1.0, 1.0]),
                                   np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])],
       lambda x, lo, hi: x.clip(lo, hi), lambda torch, x, lo, hi: x.clamp(lo, hi)),
  Case("relu", _vals(*EDGE), lambda x: x.relu(), lambda torch, x: x.relu(), dtypes=FLOATS),
  Case("exp_log", _vals(0.5, 1.0, 2.0, 10.0, 80.0), lambda x: x.exp() + x.log(), lambda torch, x: x.exp() + x.log()),
  Case("floor_ceil_round", lambda rng: [np.array([-1.5, -0.5, 0.5, 1.5, 2.5, 0.3])],
       lambda x: x.floor() + x.ceil() * 2 + x.round() * 3 + x.trunc() * 4 + x,
       lambda torch, x: x.floor() + x.ceil() * 2 + x.round() * 3 + x.trunc() * 4 + x),
  Case("silu", _vals(*EDGE), lambda x: x.silu(), lambda torch, x: torch.nn.functional.silu(x)),
  Case("gelu_tanh", _vals(*EDGE), lambda x: x.gelu(), lambda torch, x: torch.nn.functional.gelu(x, approximate="tanh")),
]

def _fn(torch: Any) -> Any: return torch.nn.functional

def _logits_labels(n: int, c: int) -> Callable[[np.random.Generator], list[np.ndarray]]:
  return lambda rng: [rng.standard_normal((n, c)) * 2, rng.integers(0, c, n)]

def _probs_targets(rng: np.random.Generator) -> list[np.ndarray]:
  return [rng.uniform(0.02, 0.98, (3, 4)), rng.uniform(0, 1, (3, 4))]

def _sdpa_in(rng: np.random.Generator) -> list[np.ndarray]: return [rng.standard_normal((2, 2, 5, 4)) for _ in range(3)]

# ---- API parity (tinygrad names on refgrad, PyTorch's functions on torch) ------------------------------------------
API: list[Case] = [
  Case("cross_entropy_idx", _logits_labels(5, 4), lambda x, y: x.cross_entropy(y), lambda torch, x, y: _fn(torch).cross_entropy(x, y), "fi"),
  Case("cross_entropy_smooth_sum", _logits_labels(5, 4), lambda x, y: x.cross_entropy(y, reduction="sum", label_smoothing=0.2),
       lambda torch, x, y: _fn(torch).cross_entropy(x, y, reduction="sum", label_smoothing=0.2), "fi"),
  Case("cross_entropy_probs", lambda rng: [rng.standard_normal((3, 4)), rng.dirichlet(np.ones(4), 3)],
       lambda x, y: x.cross_entropy(y, reduction="none"), lambda torch, x, y: _fn(torch).cross_entropy(x, y, reduction="none")),
  Case("nll_loss_weight_ignore", lambda rng: [rng.standard_normal((6, 4)), np.array([0, 1, 2, 3, 1, 2]), rng.uniform(0.5, 2, 4)],
       lambda x, y, w: x.log_softmax(1).nll_loss(y, weight=w, ignore_index=2),
       lambda torch, x, y, w: _fn(torch).nll_loss(x.log_softmax(1), y, weight=w, ignore_index=2), "fic"),
  Case("nll_loss_none", _logits_labels(4, 3), lambda x, y: x.nll_loss(y, reduction="none"),
       lambda torch, x, y: _fn(torch).nll_loss(x, y, reduction="none"), "fi"),
  Case("sparse_cce_ignore_smooth", lambda rng: [rng.standard_normal((6, 4)), np.array([0, 1, 2, 3, 1, 2])],
       lambda x, y: x.sparse_categorical_crossentropy(y, ignore_index=2, label_smoothing=0.1),
       lambda torch, x, y: _fn(torch).cross_entropy(x, y, ignore_index=2, label_smoothing=0.1), "fi"),
  Case("binary_crossentropy", _probs_targets, lambda p, y: p.binary_crossentropy(y), lambda torch, p, y: _fn(torch).binary_cross_entropy(p, y), "fc"),
  Case("binary_crossentropy_logits", lambda rng: [rng.standard_normal((3, 4)) * 3, rng.uniform(0, 1, (3, 4)), rng.uniform(0.5, 2, 4)],
       lambda x, y, pw: x.binary_crossentropy_logits(y, pos_weight=pw),
       lambda torch, x, y, pw: _fn(torch).binary_cross_entropy_with_logits(x, y, pos_weight=pw), "fcc"),
  Case("sdpa", _sdpa_in, lambda q, k, v: q.scaled_dot_product_attention(k, v),
       lambda torch, q, k, v: _fn(torch).scaled_dot_product_attention(q, k, v)),
  Case("sdpa_causal", _sdpa_in, lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
       lambda torch, q, k, v: _fn(torch).scaled_dot_product_attention(q, k, v, is_causal=True)),
  Case("sdpa_mask", lambda rng: [*(rng.standard_normal((2, 5, 4)) for _ in range(3)), rng.uniform(0, 1, (5, 5)) > 0.3],
       lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m | _eye_like(m)),
       lambda torch, q, k, v, m: _fn(torch).scaled_dot_product_attention(q, k, v, attn_mask=m | torch.eye(5, dtype=torch.bool)), "fffb"),
  Case("sdpa_gqa", lambda rng: [rng.standard_normal((1, 4, 3, 4)), rng.standard_normal((1, 2, 3, 4)), rng.standard_normal((1, 2, 3, 4))],
       lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True),
       lambda torch, q, k, v: _fn(torch).scaled_dot_product_attention(q, k, v, enable_gqa=True)),
  Case("softmin", _randn((3, 5)), lambda x: x.softmin(-1), lambda torch, x: _fn(torch).softmin(x, -1)),
  Case("log10", lambda rng: [rng.uniform(0.01, 100, 10)], lambda x: x.log10(), lambda torch, x: x.log10()),
  Case("atan", lambda rng: [np.concatenate([rng.standard_normal(8) * 3, [0.0, -0.0, INF, -INF, 1e-20, 0.4142, 2.4143]])],
       lambda x: x.atan(), lambda torch, x: x.atan()),
  Case("asin", lambda rng: [np.array([-1.0, -0.99, -0.5, -0.0, 0.0, 0.1, 0.7, 0.999, 1.0, 1.5])], lambda x: x.asin(), lambda torch, x: x.asin()),
  Case("acos", lambda rng: [np.array([-1.0, -0.99, -0.5, -0.0, 0.0, 0.1, 0.7, 0.999, 1.0, 1.5])], lambda x: x.acos(), lambda torch, x: x.acos()),
  Case("copysign", lambda rng: [np.array([1.0, -2.0, 0.0, -0.0, 3.0, INF]), np.array([-1.0, 1.0, -0.0, 2.0, 0.0, -1.0])],
       lambda x, y: x.copysign(y), lambda torch, x, y: x.copysign(y)),
  Case("fmod", lambda rng: [np.array([5.5, -5.5, 5.5, -5.5, 0.75, -3.0, 7.0]), np.array([2.0, 2.0, -2.0, -2.0, 0.5, 3.0, 2.5])],
       lambda x, y: x.fmod(y), lambda torch, x, y: x.fmod(y)),
  Case("logaddexp", lambda rng: [np.array([0.0, 1.0, -INF, INF, -INF, 100.0, -50.0]), np.array([0.0, -3.0, 2.0, 5.0, -INF, 100.0, 50.0])],
       lambda x, y: x.logaddexp(y), lambda torch, x, y: x.logaddexp(y)),
  Case("normalize", _randn((3, 4)), lambda x: x.normalize(dim=1), lambda torch, x: _fn(torch).normalize(x, dim=1)),
  Case("gelu_erf", _vals(-6.0, -3.0, -1.0, -0.3, 0.0, 0.5, 2.0, 5.0), lambda x: x.gelu(approximate="none"), lambda torch, x: _fn(torch).gelu(x)),
  Case("sum_dtype", _randn((4, 5)), lambda x: x.sum(1, dtype="float64"), lambda torch, x: x.sum(1, dtype=torch.float64)),
  Case("prod_dtype", lambda rng: [rng.uniform(0.5, 1.5, (3, 4))], lambda x: x.prod(0, dtype="float64"), lambda torch, x: x.prod(0, dtype=torch.float64)),
  Case("pad_reflect", _randn((2, 3, 4)), lambda x: x.pad((2, 1, 1, 2), mode="reflect"), lambda torch, x: _fn(torch).pad(x, (2, 1, 1, 2), mode="reflect")),
  Case("pad_replicate", _randn((2, 3, 4)), lambda x: x.pad((2, 3, 0, 1), mode="replicate"),
       lambda torch, x: _fn(torch).pad(x, (2, 3, 0, 1), mode="replicate")),
  Case("pad_circular", _randn((1, 2, 3, 4)), lambda x: x.pad((2, 1, 1, 3), mode="circular"),
       lambda torch, x: _fn(torch).pad(x, (2, 1, 1, 3), mode="circular")),
  Case("pad_constant_flat", _randn((2, 3)), lambda x: x.pad((1, 2), value=1.5), lambda torch, x: _fn(torch).pad(x, (1, 2), value=1.5)),
  Case("roll", _randn((3, 4)), lambda x: x.roll((1, -3), (0, -1)), lambda torch, x: x.roll((1, -3), (0, -1))),
  Case("repeat_interleave", _randn((2, 3)), lambda x: x.repeat_interleave(2, dim=-1), lambda torch, x: x.repeat_interleave(2, dim=-1)),
  Case("unfold", _randn((3, 7)), lambda x: x.unfold(1, 3, 2), lambda torch, x: x.unfold(1, 3, 2)),
  Case("diagonal", _randn((2, 4, 3)), lambda x: x.diagonal(1, -2, -1), lambda torch, x: x.diagonal(1, -2, -1)),
  Case("diag", _randn((4,)), lambda x: x.diag(-1), lambda torch, x: x.diag(-1)),
  Case("masked_fill", lambda rng: [rng.standard_normal((3, 4)), rng.uniform(0, 1, (1, 4)) > 0.5],
       lambda x, m: x.masked_fill(m, -2.0), lambda torch, x, m: x.masked_fill(m, -2.0), "fb"),
  Case("masked_select", lambda rng: [rng.standard_normal((3, 4)), rng.uniform(0, 1, (3, 4)) > 0.5],
       lambda x, m: x.masked_select(m), lambda torch, x, m: x.masked_select(m), "fb"),
  Case("one_hot", lambda rng: [np.array([0, 3, 1, 1])], lambda y: y.one_hot(5), lambda torch, y: _fn(torch).one_hot(y, 5), "i", grad=False),
  Case("nonzero", lambda rng: [np.array([[0.0, 1.5, 0.0], [NAN, 0.0, -2.0]])], lambda x: x.nonzero(), lambda torch, x: x.nonzero(), grad=False),
  Case("isclose", lambda rng: [np.array([1.0, 1.0, NAN, INF, 0.0, 1e-9]), np.array([1.0 + 1e-6, 1.1, NAN, INF, 1e-7, 0.0])],
       lambda x, y: x.isclose(y), lambda torch, x, y: x.isclose(y), grad=False),
  Case("matmul", _randn((3, 40), (40, 5)), lambda a, b: a @ b, lambda torch, a, b: a @ b, dtypes=FLOATS, tol={"float16": (2e-3, 1e-3)}),
  Case("sum_mean", _randn((4, 50)), lambda x: x.sum(1) + x.mean(1), lambda torch, x: x.sum(1) + x.mean(1), dtypes=FLOATS),
  # float16/bfloat16 gradients: g - sum(g * y) cancels; PyTorch takes y rounded to the dtype, refgrad the float32 y it rounded
  # from, so small gradients differ by about an ulp of the largest ones (atol stated here)
  Case("softmax", _randn((3, 7), scale=3.0), lambda x: x.softmax(-1), lambda torch, x: x.softmax(-1), dtypes=FLOATS,
       tol={"float16": (1e-3, 2e-4), "bfloat16": (1.6e-2, 2e-3)}),
  Case("log_softmax", _randn((3, 7), scale=3.0), lambda x: x.log_softmax(0), lambda torch, x: x.log_softmax(0), dtypes=FLOATS,
       tol={"float16": (1e-3, 2e-4), "bfloat16": (1.6e-2, 2e-3)}),
  Case("cross_entropy_half", _logits_labels(6, 5), lambda x, y: x.cross_entropy(y), lambda torch, x, y: _fn(torch).cross_entropy(x, y), "fi",
       dtypes=("float64", "float16", "bfloat16")),
  Case("cumsum_long", _randn((2, 100)), lambda x: x.cumsum(1), lambda torch, x: x.cumsum(1), tol={"float32": (1e-5, 1e-5)}),  # tree order vs sequential
  Case("cumsum_short", _randn((3, 5)), lambda x: x.cumsum(-1), lambda torch, x: x.cumsum(-1), dtypes=FLOATS),
  Case("cumprod_long", lambda rng: [rng.uniform(0.9, 1.1, (1, 40))], lambda x: x.cumprod(1), lambda torch, x: x.cumprod(1),
       tol={"float32": (1e-5, 1e-5)}),
  Case("cummax", lambda rng: [np.array([[1.0, 3.0, 3.0, 2.0, 5.0, 0.0, 4.0, 5.0], [0.0, -1.0, 2.0, 2.0, 1.0, 7.0, 6.0, 8.0]])],
       lambda x: x.cummax(1), lambda torch, x: tuple(x.cummax(1))),
  Case("cummin_long", lambda rng: [rng.permutation(40).reshape(1, 40) * 0.5], lambda x: x.cummin(-1), lambda torch, x: tuple(x.cummin(-1))),
  Case("cummax_nan", _vals(1.0, NAN, 3.0, 0.0, NAN, 5.0), lambda x: x.cummax(0), lambda torch, x: tuple(x.cummax(0)), grad=False),
  Case("logcumsumexp", lambda rng: [np.concatenate([rng.standard_normal(14) * 10, [-1000.0, 500.0]]).reshape(2, 8)], lambda x: x.logcumsumexp(1),
       lambda torch, x: x.logcumsumexp(1), tol={"float32": (1e-5, 1e-5)}),
  Case("logcumsumexp_long", lambda rng: [np.concatenate([rng.standard_normal(38) * 10, [-1000.0, 500.0]])], lambda x: x.logcumsumexp(0),
       lambda torch, x: x.logcumsumexp(0), tol={"float32": (1e-5, 1e-5)}, grad=False),
  Case("sort", lambda rng: [rng.permutation(24).reshape(4, 6) - 11.5], lambda x: x.sort(1), lambda torch, x: tuple(x.sort(1)), dtypes=FLOATS),
  Case("sort_desc_nan", _vals(3.0, NAN, -1.0, 7.0, 0.5), lambda x: x.sort(0, descending=True), lambda torch, x: tuple(x.sort(0, descending=True))),
  Case("argsort", lambda rng: [rng.permutation(12).reshape(3, 4) * 1.0], lambda x: x.argsort(0), lambda torch, x: x.argsort(0), grad=False),
  Case("topk", lambda rng: [rng.permutation(30).reshape(3, 10) * 0.25], lambda x: x.topk(3), lambda torch, x: tuple(x.topk(3))),
  Case("topk_smallest", lambda rng: [rng.permutation(30).reshape(3, 10) * 0.25], lambda x: x.topk(2, dim=0, largest=False),
       lambda torch, x: tuple(x.topk(2, dim=0, largest=False))),
  Case("scatter", lambda rng: [rng.standard_normal((3, 4)), np.array([[0, 1, 2, 0], [2, 0, 0, 1]]), rng.standard_normal((2, 4))],
       lambda x, i, v: x.scatter(0, i, v), lambda torch, x, i, v: x.scatter(0, i, v), "fif"),
  Case("scatter_add", lambda rng: [rng.standard_normal((3, 4)), np.array([[0, 1], [2, 2], [3, 0]]), rng.standard_normal((3, 2))],
       lambda x, i, v: x.scatter(1, i, v, reduce="add"), lambda torch, x, i, v: x.scatter_add(1, i, v), "fif"),
  *(Case(f"scatter_reduce_{r}_{inc}", lambda rng: [rng.uniform(0.5, 2, (3, 4)), np.array([[0, 1, 1, 0], [2, 0, 1, 1]]), rng.uniform(0.5, 2, (2, 4))],
         lambda x, i, v, r=r, inc=inc: x.scatter_reduce(0, i, v, r, include_self=inc),
         lambda torch, x, i, v, r=r, inc=inc: x.scatter_reduce(0, i, v, r, include_self=inc), "fif")
    for r in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)),
  Case("conv_transpose2d", _randn((2, 4, 4, 5), (4, 3, 3, 2)), lambda x, w: x.conv_transpose2d(w, stride=(2, 3), padding=1, output_padding=1),
       lambda torch, x, w: _fn(torch).conv_transpose2d(x, w, stride=(2, 3), padding=1, output_padding=1), tol={"float32": (1e-5, 1e-5)}),
  Case("conv_transpose2d_groups", _randn((1, 4, 5, 5), (4, 2, 3, 3), (4,)), lambda x, w, b: x.conv_transpose2d(w, b, groups=2, dilation=2),
       lambda torch, x, w, b: _fn(torch).conv_transpose2d(x, w, b, groups=2, dilation=2), tol={"float32": (1e-5, 1e-5)}),
  Case("conv_transpose1d", _randn((2, 3, 6), (3, 2, 4)), lambda x, w: x.conv_transpose2d(w, stride=2),
       lambda torch, x, w: _fn(torch).conv_transpose1d(x, w, stride=2), tol={"float32": (1e-5, 1e-5)}),
  Case("conv1d", _randn((2, 3, 9), (4, 3, 3)), lambda x, w: x.conv2d(w, stride=2, padding=1), lambda torch, x, w: _fn(torch).conv1d(x, w, stride=2, padding=1)),
  Case("conv3d", _randn((1, 2, 4, 5, 4), (3, 2, 2, 3, 2)), lambda x, w: x.conv2d(w), lambda torch, x, w: _fn(torch).conv3d(x, w)),
  Case("max_pool2d_ceil_idx", _randn((1, 2, 7, 8)), lambda x: x.max_pool2d(3, 2, padding=1, ceil_mode=True, return_indices=True),
       lambda torch, x: tuple(_fn(torch).max_pool2d(x, 3, 2, padding=1, ceil_mode=True, return_indices=True))),
  Case("avg_pool2d_ceil", _randn((1, 2, 7, 8)), lambda x: x.avg_pool2d(3, 2, padding=1, ceil_mode=True),
       lambda torch, x: _fn(torch).avg_pool2d(x, 3, 2, padding=1, ceil_mode=True)),
  Case("avg_pool2d_ceil_nopad", _randn((1, 2, 7, 8)), lambda x: x.avg_pool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
       lambda torch, x: _fn(torch).avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False)),
  Case("max_pool3d", _randn((1, 2, 4, 5, 6)), lambda x: x.max_pool2d((2, 2, 2)), lambda torch, x: _fn(torch).max_pool3d(x, 2)),
  Case("avg_pool1d", _randn((2, 3, 9)), lambda x: x.avg_pool2d((3,), 2), lambda torch, x: _fn(torch).avg_pool1d(x, 3, 2)),
  Case("max_unpool2d", lambda rng: [rng.standard_normal((1, 2, 3, 4))], lambda x: _unpool(x),
       lambda torch, x: _fn(torch).max_unpool2d(*_fn(torch).max_pool2d(x, 2, return_indices=True), 2)),
  Case("interpolate_nearest", _randn((1, 2, 4, 5)), lambda x: x.interpolate((7, 3), mode="nearest"),
       lambda torch, x: _fn(torch).interpolate(x, size=(7, 3), mode="nearest")),
  Case("interpolate_nearest_exact", _randn((1, 2, 4, 5)), lambda x: x.interpolate((7, 3), mode="nearest-exact"),
       lambda torch, x: _fn(torch).interpolate(x, size=(7, 3), mode="nearest-exact")),
  Case("interpolate_bilinear", _randn((1, 2, 4, 5)), lambda x: x.interpolate((7, 3), mode="bilinear"),
       lambda torch, x: _fn(torch).interpolate(x, size=(7, 3), mode="bilinear")),
  Case("interpolate_bilinear_ac", _randn((1, 2, 4, 5)), lambda x: x.interpolate((7, 3), mode="bilinear", align_corners=True),
       lambda torch, x: _fn(torch).interpolate(x, size=(7, 3), mode="bilinear", align_corners=True)),
  Case("interpolate_linear", _randn((2, 3, 5)), lambda x: x.interpolate((8,), mode="linear"), lambda torch, x: _fn(torch).interpolate(x, size=(8,), mode="linear")),
  Case("interpolate_trilinear", _randn((1, 1, 3, 4, 2)), lambda x: x.interpolate((4, 3, 5), mode="trilinear"),
       lambda torch, x: _fn(torch).interpolate(x, size=(4, 3, 5), mode="trilinear")),
  Case("einsum_matmul", _randn((3, 4), (4, 5)), lambda a, b: _einsum("ij,jk->ik", a, b), lambda torch, a, b: torch.einsum("ij,jk->ik", a, b)),
  Case("einsum_batch_ellipsis", _randn((2, 3, 4), (2, 4, 5)), lambda a, b: _einsum("...ij,...jk", a, b),
       lambda torch, a, b: torch.einsum("...ij,...jk", a, b)),
  Case("einsum_trace_outer", _randn((3, 3), (4,)), lambda a, b: _einsum("ii,j->j", a, b), lambda torch, a, b: torch.einsum("ii,j->j", a, b)),
  # int32 (forward only; PyTorch computes in int32 too)
  Case("int_sort", lambda rng: [rng.permutation(24).reshape(4, 6) - 12], lambda x: x.sort(1, descending=True),
       lambda torch, x: tuple(x.sort(1, descending=True)), dtypes=("int32",), grad=False),
  Case("int_topk_cummax", lambda rng: [rng.permutation(20).reshape(2, 10) - 7], lambda x: (x.topk(3)[0], *x.cummax(1), x.cumsum(1), x.cumprod(1)),
       lambda torch, x: (x.topk(3)[0], *x.cummax(1), x.cumsum(1, dtype=torch.int32), x.cumprod(1, dtype=torch.int32)), dtypes=("int32",), grad=False),
  Case("int_scatter_reduce", lambda rng: [rng.integers(-9, 9, (3, 4)), np.array([[0, 1, 1, 0], [2, 0, 1, 1]]), rng.integers(-9, 9, (2, 4))],
       lambda x, i, v: (x.scatter_reduce(0, i, v.cast(x.dtype), "amax"), x.scatter_reduce(0, i, v.cast(x.dtype), "sum", include_self=False)),
       lambda torch, x, i, v: (x.scatter_reduce(0, i, v.to(x.dtype), "amax"), x.scatter_reduce(0, i, v.to(x.dtype), "sum", include_self=False)),
       "fif", dtypes=("int32",), grad=False),
  Case("int_pad_roll", lambda rng: [rng.integers(-9, 9, (2, 3, 4))], lambda x: (x.pad((1, 2, 2, 1), mode="reflect"), x.roll(2, -1), x.tril(), x.triu(1)),
       lambda torch, x: (_fn(torch).pad(x.float(), (1, 2, 2, 1), mode="reflect").to(x.dtype), x.roll(2, -1), x.tril(), x.triu(1)),
       dtypes=("int32",), grad=False),
  Case("cat_stack_seq", _randn((2, 3), (2, 3)), lambda a, b: _cat_stack(a, b),
       lambda torch, a, b: torch.cat([torch.stack([a, b], dim=-1), torch.stack([b, a], dim=-1)], dim=-2)),
]


def _eye_like(m: Any) -> Any:
  from refgrad import Tensor, dtypes
  return Tensor.eye(m.shape[0], dtype=dtypes.bool, device=m.device)

def _cat_stack(a: Any, b: Any) -> Any:
  from refgrad import Tensor
  return Tensor.cat([Tensor.stack([a, b], dim=-1), a.stack([b], dim=-1).flip(-1)], dim=-2)


def _ints(lo: int, hi: int, *shapes: tuple[int, ...]) -> Callable[[np.random.Generator], list[np.ndarray]]:
  return lambda rng: [rng.integers(lo, hi, s).astype(np.float64) for s in shapes]

def _u8(x: Any) -> Any:
  from refgrad import dtypes
  return x.cast(dtypes.uint8)

def _ts(torch: Any, v: Any) -> Any: return torch.tensor(v)

_ISC = (np.array([1.0, INF, -INF, INF, NAN, NAN, 1.0, -INF, 0.0]), np.array([1.0, INF, INF, 1e30, NAN, 1.0, INF, -INF, -0.0]))
_CMP = (-2.0, -0.5, 0.0, 1.0, 2.0, 3.0, 4.0)

# ---- edge semantics a ported tinygrad program meets (issue 23) -------------------------------------------------
SEMANTICS: list[Case] = [
  Case("cummin_ties", _vals(2.0, 2.0, 1.0, 1.0, 3.0, 0.0, 0.0, -1.0), lambda x: x.cummin(0), lambda torch, x: tuple(x.cummin(0))),
  Case("cummax_ties_2d", lambda rng: [np.array([[1.0, 1.0, 0.0, 2.0, 2.0], [3.0, 3.0, 3.0, 1.0, 4.0]])], lambda x: x.cummax(0),
       lambda torch, x: tuple(x.cummax(0))),
  Case("cumprod_empty", _randn((2, 0)), lambda x: x.cumprod(1), lambda torch, x: x.cumprod(1)),
  Case("cumprod_empty_axis", _randn((0, 3)), lambda x: x.cumprod(0), lambda torch, x: x.cumprod(0)),
  *(Case(f"pad_neg_{m}", _randn((2, 3, 4)), lambda x, m=m: x.pad((-1, 2, 1, -1), mode=m), lambda torch, x, m=m: _fn(torch).pad(x, (-1, 2, 1, -1), mode=m))
    for m in ("constant", "reflect", "replicate", "circular")),
  *(Case(f"pad_flat_{m}", _randn((2, 3, 4)), lambda x, m=m: x.pad((1, 2), mode=m), lambda torch, x, m=m: _fn(torch).pad(x, (1, 2), mode=m))
    for m in ("reflect", "replicate", "circular")),
  Case("roll_three", _randn((2, 3, 4)), lambda x: x.roll((1, -2, 5), (0, 1, 2)), lambda torch, x: x.roll((1, -2, 5), (0, 1, 2))),
  Case("roll_flat", _randn((2, 3, 4)), lambda x: x.roll(5), lambda torch, x: x.roll(5)),
  Case("unfold_size0", _randn((3, 7)), lambda x: x.unfold(1, 0, 2), lambda torch, x: x.unfold(1, 0, 2)),
  Case("linspace_one", lambda rng: [], lambda: _linspace(2.0, 5.0, 1), lambda torch: torch.linspace(2.0, 5.0, 1), grad=False),
  Case("one_hot_infer", lambda rng: [np.array([0, 3, 1, 1])], lambda y: y.one_hot(-1), lambda torch, y: _fn(torch).one_hot(y, -1), "i", grad=False),
  Case("nonzero_size", lambda rng: [np.array([[0.0, 1.5, 0.0], [NAN, 0.0, -2.0]])], lambda x: (x.nonzero(size=5), x.nonzero(size=2)),
       lambda torch, x: (torch.nonzero_static(x, size=5), torch.nonzero_static(x, size=2)), grad=False),
  Case("meshgrid_xy", _randn((3,), (2,)), lambda a, b: _meshgrid(a, b, "xy"), lambda torch, a, b: torch.meshgrid(a, b, indexing="xy")),
  Case("meshgrid_ij", _randn((3,), (2,)), lambda a, b: _meshgrid(a, b, "ij"), lambda torch, a, b: torch.meshgrid(a, b, indexing="ij")),
  Case("diagonal_negdims", _randn((2, 3, 4)), lambda x: x.diagonal(-1, -1, 0), lambda torch, x: x.diagonal(-1, -1, 0)),
  Case("diagonal_negdims_offset", _randn((2, 3, 4)), lambda x: x.diagonal(2, -3, -1), lambda torch, x: x.diagonal(2, -3, -1)),
  Case("einsum_ellipsis_lead", _randn((3, 2, 4), (3, 2, 4)), lambda a, b: _einsum("i...,i...->...", a, b), lambda torch, a, b: torch.einsum("i...,i...->...", a, b)),
  Case("einsum_ellipsis_transpose", _randn((2, 3, 4)), lambda a: _einsum("...ij->...ji", a), lambda torch, a: torch.einsum("...ij->...ji", a)),
  Case("einsum_ellipsis_broadcast", _randn((2, 3, 4), (1, 4, 3)), lambda a, b: _einsum("...ij,...jk", a, b), lambda torch, a, b: torch.einsum("...ij,...jk", a, b)),
  Case("div_rounding_float", lambda rng: [np.array([7.5, -7.5, 7.5, -7.5, 0.5, -0.0, 6.0]), np.array([2.0, 2.0, -2.0, -2.0, 3.0, 2.0, 3.0])],
       lambda x, y: (x.div(y, rounding_mode="floor"), x.div(y, rounding_mode="trunc"), x.div(y)),
       lambda torch, x, y: (x.div(y, rounding_mode="floor"), x.div(y, rounding_mode="trunc"), x.div(y)), grad=False),
  Case("div_rounding_int", lambda rng: [np.array([7.0, -7.0, 7.0, -7.0, 0.0, 9.0]), np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0])],
       lambda x, y: (x.div(y, rounding_mode="floor"), x.div(y, rounding_mode="trunc")),
       lambda torch, x, y: (x.div(y, rounding_mode="floor"), x.div(y, rounding_mode="trunc")), dtypes=("int32",), grad=False),
  Case("sum_prod_int_dtype", _ints(-5, 6, (3, 4)), lambda x: (x.sum(1, dtype="float32"), x.prod(0, dtype="float64"), x.sum(dtype="int32")),
       lambda torch, x: (x.sum(1, dtype=torch.float32), x.prod(0, dtype=torch.float64), x.sum(dtype=torch.int32)), dtypes=("int32",), grad=False),
  Case("sum_half_dtype", _randn((4, 50)), lambda x: x.sum(1, dtype="float32"), lambda torch, x: x.sum(1, dtype=torch.float32), dtypes=("float16", "bfloat16")),
  Case("isclose_inf_nan", lambda rng: list(_ISC), lambda x, y: (x.isclose(y), x.isclose(y, equal_nan=True), x.isclose(y, rtol=0.5, atol=1.0)),
       lambda torch, x, y: (x.isclose(y), x.isclose(y, equal_nan=True), x.isclose(y, rtol=0.5, atol=1.0)), grad=False),
  Case("triu_tril_wide_batched", _randn((2, 3, 5)), lambda x: x.triu(1) + x.tril(-1) * 2 + x.triu(-2) * 3,
       lambda torch, x: x.triu(1) + x.tril(-1) * 2 + x.triu(-2) * 3),
  Case("triu_tril_tall", _randn((5, 3)), lambda x: x.triu(2) + x.tril(1) * 2, lambda torch, x: x.triu(2) + x.tril(1) * 2),
  Case("interpolate_bilinear_uint8", _ints(0, 256, (1, 2, 4, 5)), lambda x: _u8(x).interpolate((7, 3), mode="bilinear"),
       lambda torch, x: _fn(torch).interpolate(x.to(torch.uint8), size=(7, 3), mode="bilinear"), "i", grad=False),
  Case("interpolate_bilinear_uint8_up", _ints(0, 256, (1, 1, 3, 4)), lambda x: _u8(x).interpolate((6, 9), mode="bilinear", align_corners=True),
       lambda torch, x: _fn(torch).interpolate(x.to(torch.uint8), size=(6, 9), mode="bilinear", align_corners=True), "i", grad=False),
  Case("int_pow_const", lambda rng: [np.arange(-4.0, 5.0), np.array([0.0, 1, 2, 3, 4, 5, 0, 1, 2])],
       lambda x, e: (x ** 2, x ** 3, x ** 0, x ** 1, 2 ** e, x ** e, (-3) ** e),
       lambda torch, x, e: (x ** 2, x ** 3, x ** 0, x ** 1, 2 ** e, x ** e, (-3) ** e), dtypes=("int32",), grad=False),
  Case("shifts_int32", lambda rng: [np.array([1.0, 3.0, -4.0, 100.0, -100.0, 0.0, 12345.0]), np.array([0.0, 1, 2, 3, 4, 5, 6])],
       lambda x, e: (x << 2, x >> 1, x << e, x >> e), lambda torch, x, e: (x << 2, x >> 1, x << e, x >> e), dtypes=("int32",), grad=False),
  Case("shifts_uint8", lambda rng: [np.array([1, 3, 200, 255, 0, 128])], lambda x: (_u8(x) << 1, _u8(x) >> 3),
       lambda torch, x: (x.to(torch.uint8) << 1, x.to(torch.uint8) >> 3), "i", grad=False),
  Case("normalize_p1_zero_row", lambda rng: [np.concatenate([rng.standard_normal((2, 4)), np.zeros((1, 4))])],
       lambda x: x.normalize(p=1, dim=1), lambda torch, x: _fn(torch).normalize(x, p=1, dim=1)),
  Case("normalize_default", _randn((2, 3, 4)), lambda x: x.normalize(), lambda torch, x: _fn(torch).normalize(x)),
  Case("comparisons_in_backward", _vals(*_CMP), lambda x: (x > 0).where(x, x * 2) * (x < 3).float() + (x == 1).where(x * x, 0.0) + x.maximum(1.0),
       lambda torch, x: torch.where(x > 0, x, x * 2) * (x < 3).float() + torch.where(x == 1, x * x, 0.0) + x.maximum(_ts(torch, 1.0))),
  Case("clip_min_only", _vals(-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0), lambda x: x.clip(-1), lambda torch, x: x.clip(-1)),
  Case("clip_max_only", _vals(-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0), lambda x: x.clip(None, 1), lambda torch, x: x.clip(None, 1)),
  Case("sigmoid_extreme", _vals(-1e4, -104.0, -89.0, -88.7, -17.0, 17.0, 36.8, 88.7, 89.0, 1e4, -INF, INF), lambda x: x.sigmoid(),
       lambda torch, x: x.sigmoid(), dtypes=FLOATS),
  Case("sdpa_causal_rect", lambda rng: [rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 6, 4)), rng.standard_normal((2, 3, 6, 4))],
       lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), lambda torch, q, k, v: _fn(torch).scaled_dot_product_attention(q, k, v, is_causal=True)),
  Case("sdpa_mask_4d", lambda rng: [rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 6, 4)), rng.standard_normal((2, 3, 6, 4)),
                                    np.concatenate([np.ones((2, 1, 5, 1)), rng.uniform(0, 1, (2, 1, 5, 5))], -1) > 0.3],
       lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m),
       lambda torch, q, k, v, m: _fn(torch).scaled_dot_product_attention(q, k, v, attn_mask=m), "fffb"),
  Case("sdpa_float_mask", lambda rng: [*(rng.standard_normal((2, 5, 4)) for _ in range(3)), rng.standard_normal((5, 5))],
       lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m),
       lambda torch, q, k, v, m: _fn(torch).scaled_dot_product_attention(q, k, v, attn_mask=m), "fffc"),
]


GROUPS: dict[str, list[Case]] = {"edges": EDGES, "api": API, "semantics": SEMANTICS}


def _unpool(x: Any) -> Any:
  v, i = x.max_pool2d(2, return_indices=True)
  return v.max_unpool2d(i, 2)

def _einsum(formula: str, *ops: Any) -> Any:
  from refgrad import Tensor
  return Tensor.einsum(formula, *ops)

def _linspace(*a: Any) -> Any:
  from refgrad import Tensor
  return Tensor.linspace(*a)

def _meshgrid(a: Any, b: Any, indexing: str) -> Any:
  from refgrad import Tensor
  return Tensor.meshgrid(a, b, indexing=indexing)
