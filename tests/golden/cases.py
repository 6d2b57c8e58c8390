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
  kinds: str = ""                # one letter per input: "f" float (default), "i" integer
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
  Case("pow_tensor", _pow_grid, lambda b, e: b ** e, lambda torch, b, e: b ** e),
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

GROUPS: dict[str, list[Case]] = {"edges": EDGES}
