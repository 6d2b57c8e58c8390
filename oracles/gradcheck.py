"""Oracle "grad": refgrad's gradients of a random tensor program against float64 central differences, in the manner
of PyTorch's `gradcheck`.

The program is the fuzzer's recipe (oracles/programs.py) in float64, restricted to its differentiable steps. refgrad
computes d(sum(out * w))/d(input) with `backward()` (w: fixed random weights); the differences are taken on the numpy
interpreter (oracles/np_interp.py `replay`), so no refgrad code is on the reference side. A sample of input coordinates
is checked: at each, the forward and backward one-sided differences must agree (else the point is a kink or a jump,
e.g. relu at 0 or a `where` flipping, where the gradient is a convention: not checked), and then

    |grad - central| <= RTOL * max(1, |central|) + ATOL_F * sum|out * w| / h

(the second term: float64 rounding of the loss, about 1e-16 * sum|out * w|, amplified by 1/h; RTOL covers the
central difference's truncation error, h^2 * f''' / 6, at smooth points).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from oracles.np_interp import NotModelled, Run, V, replay, run_both
from refgrad import Tensor

RTOL = 1e-5
ATOL_F = 1e-13
H = 1e-6                 # relative step
SAMPLES = 6              # coordinates checked per input
MAX_INPUTS = 3
# steps whose result is differentiable almost everywhere in their float input (the rest are dropped from the recipe)
DIFFERENTIABLE = {"neg", "abs", "relu", "exp", "log", "sqrt", "sin", "recip", "sigmoid", "square", "add", "sub", "mul", "div",
                  "maximum", "minimum", "where", "sum", "max", "min", "prod", "mean", "cumsum", "permute", "reshape", "pad",
                  "shrink", "flip", "expand", "matmul", "conv2d", "gather", "contiguous", "add_const", "mul_const", "pad_value"}


def grad_recipe(recipe: dict[str, Any]) -> dict[str, Any] | None:
  """The recipe in float64 with only its differentiable steps (None: none left)."""
  steps = [s for s in recipe["steps"] if s[0] in DIFFERENTIABLE]
  return {**recipe, "dtype": "double", "steps": steps} if steps else None


def _loss(val: V, w: np.ndarray) -> tuple[float, float]:
  with np.errstate(all="ignore"): p = val.v * w
  return float(np.sum(p)), float(np.sum(np.abs(p)))


def _at(run: Run, w: np.ndarray, k: int, j: int, x: float) -> float:
  """The loss on the interpreter with element j of input k set to x."""
  base = run.values[k]
  v = base.v.reshape(-1).copy()
  v[j] = x
  vals = list(run.values)
  vals[k] = V(v.reshape(base.v.shape), base.e, base.dt)
  return _loss(replay(run.steps, vals), w)[0]


def grad_differs(recipe: dict[str, Any], seed: int, device: str = "PYTHON") -> str | None:
  """None when refgrad's gradient agrees with central differences at every sampled smooth point, else the first that
  does not."""
  rec = grad_recipe(recipe)
  if rec is None: return None
  try: run: Run = run_both(rec, seed, device, requires_grad=True)
  except NotModelled: return None
  if not run.steps: return None
  rng = np.random.default_rng(seed + 1)
  w = rng.standard_normal(run.value.v.shape)
  f0, scale = _loss(run.value, w)
  if not np.isfinite(f0) or not np.isfinite(scale): return None
  out = run.tensor
  srcs = [(i, x) for i, x in enumerate(run.inputs) if x.requires_grad][:MAX_INPUTS]
  try:
    loss = (out * Tensor(w, device=device, dtype=out.dtype)).sum()
    gvs = [g.numpy().reshape(-1) for g in loss.gradient(*(x for _, x in srcs), materialize_grads=True)]
  except Exception as e: return f"refgrad's gradient failed: {type(e).__name__}: {str(e)[:300]} (steps {[s.name for s in run.steps]})"
  for (k, _), gv in zip(srcs, gvs):
    base = run.values[k]
    n = base.v.size
    for j in rng.choice(n, size=min(SAMPLES, n), replace=False):
      x = float(base.v.reshape(-1)[j])
      h = H * max(1.0, abs(x))
      fp, fm = _at(run, w, k, int(j), x + h), _at(run, w, k, int(j), x - h)
      fwd, bwd, central = (fp - f0) / h, (f0 - fm) / h, (fp - fm) / (2 * h)
      tol = RTOL * max(1.0, abs(central)) + ATOL_F * scale / h
      if not all(np.isfinite(v) for v in (fwd, bwd, central)) or abs(fwd - bwd) > 10 * tol + 1e-4 * max(1.0, abs(central)): continue   # a kink or jump
      if not (abs(gv[j] - central) <= tol):
        return (f"d loss / d input {k} element {int(j)} (value {x!r}): refgrad {gv[j]!r}, central difference {central!r} "
                f"(h {h:.3g}, tolerance {tol:.3g}; steps {[s.name for s in run.steps]})")
  return None
