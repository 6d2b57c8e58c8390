"""Kernels of real model code, written with the Tensor API and captured as JSON: the fuzzer's second case source.

`python -m oracles.models` runs each model below once on the CPU (NOOPT: only the ASTs matter), records the AST of
every kernel it launches, and writes them (deduplicated) to oracles/models.json, checked in. `load_models()` reads
that file back and checks it.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from oracles.astjson import ast_from_json, ast_to_json
from refgrad import Tensor, dtypes, nn, schedule
from refgrad.device import write_atomic
from refgrad.nn.optim import Adam

MODELS_PATH = Path(__file__).with_name("models.json")
FORMAT = "refgrad.fuzz.models/1"


def _mlp_adam() -> None:
  l1, l2 = nn.Linear(12, 16), nn.Linear(16, 5)
  opt = Adam([l1.weight, l1.bias, l2.weight, l2.bias], lr=1e-3)
  x, y = Tensor.randn(8, 12), Tensor(np.arange(8, dtype=np.int32) % 5)
  logits = l2(l1(x).relu())
  picked = y.reshape(-1, 1) == Tensor.arange(5, dtype=y.dtype).reshape(1, -1)
  loss = -picked.where(logits.log_softmax(axis=-1), 0.0).sum(axis=-1).mean()
  loss.backward()
  opt.step()

def _convnet() -> None:
  c1, l1 = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(4 * 4 * 4, 6)
  for p in (c1.weight, l1.weight): p.requires_grad = True
  x = Tensor.randn(2, 3, 8, 8)
  out = l1(c1(x).relu().max_pool2d().reshape(2, -1))
  out.sum().backward()
  Tensor.realize_all(out, c1.weight.grad, l1.weight.grad)

def _attention() -> None:
  q, k, v = Tensor.randn(2, 6, 8), Tensor.randn(2, 7, 8), Tensor.randn(2, 7, 8)
  ((q @ k.transpose(1, 2)) / 8 ** 0.5).softmax(-1).matmul(v).realize()

def _layernorm() -> None:
  nn.LayerNorm(16)(Tensor.randn(6, 16)).realize()

def _embedding() -> None:
  nn.Embedding(20, 8)(Tensor(np.array([[1, 5, 19], [0, 7, 7]], dtype=np.int32))).realize()

def _pooling() -> None:
  x = Tensor.randn(1, 3, 9, 9)
  Tensor.realize_all(x.avg_pool2d(), x.max_pool2d(kernel_size=3, stride=2))

def _argmax() -> None:
  Tensor.randn(7, 13).argmax(1).realize()

def _cumsum() -> None:
  Tensor.randn(5, 17).cumsum(1).realize()

def _half_matmul() -> None:   # what tensor cores take
  a, b = Tensor.randn(32, 16, dtype=dtypes.float16).realize(), Tensor.randn(16, 16, dtype=dtypes.float16).realize()
  a.matmul(b, dtype=dtypes.float32).realize()
  (a.cast(dtypes.bfloat16).realize() @ b.cast(dtypes.bfloat16).realize().T).realize()

MODELS: dict[str, Callable[[], None]] = {"mlp_adam": _mlp_adam, "convnet": _convnet, "attention": _attention, "layernorm": _layernorm,
                                         "embedding": _embedding, "pooling": _pooling, "argmax": _argmax, "cumsum": _cumsum,
                                         "half_matmul": _half_matmul}


def capture() -> list[dict[str, Any]]:
  """Run every model and record each launched kernel: [{"model", "name", "ast"}], one entry per distinct AST."""
  seen: dict[Any, tuple[str, str]] = {}
  old = os.environ.get("NOOPT")
  os.environ["NOOPT"] = "1"
  try:
    for current, fn in MODELS.items():
      Tensor.manual_seed(0)
      with schedule.recording() as log: fn()
      for step in log:
        if step.ast is not None: seen.setdefault(step.ast, (current, step.name))
  finally:
    if old is None: os.environ.pop("NOOPT", None)
    else: os.environ["NOOPT"] = old
  return [{"model": m, "name": n, "ast": ast_to_json(a)} for a, (m, n) in seen.items()]


def load_models(path: Path = MODELS_PATH) -> list[dict[str, Any]]:
  """The captured kernels, each checked to decode to an AST; ValueError names the file and entry."""
  try: doc = json.loads(Path(path).read_text())
  except (OSError, ValueError) as e: raise ValueError(f"{path}: cannot read the model kernels: {e}") from None
  if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("kernels"), list):
    raise ValueError(f"{path}: expected a JSON object with \"format\": {FORMAT!r} and a list \"kernels\"")
  for i, k in enumerate(doc["kernels"]):
    if not (isinstance(k, dict) and isinstance(k.get("model"), str) and isinstance(k.get("name"), str)):
      raise ValueError(f"{path}: kernel {i} needs string fields 'model' and 'name'")
    try: ast_from_json(k.get("ast"))
    except ValueError as e: raise ValueError(f"{path}: kernel {i} ({k['model']}/{k['name']}): {e}") from None
  return doc["kernels"]


if __name__ == "__main__":
  ks = capture()
  write_atomic(MODELS_PATH, (json.dumps({"format": FORMAT, "kernels": ks}, separators=(",", ":")) + "\n").encode())
  print(f"{len(ks)} kernels from {len(MODELS)} models -> {MODELS_PATH}", file=sys.stderr)
