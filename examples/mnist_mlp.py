"""Train a small MLP (64 -> 32 -> 10, relu) on synthetic MNIST-like data and print the loss per step.

The data is made with Tensor's seeded RNG on the chosen device: ten random class prototypes, each sample a
prototype plus noise. Every device computes the same bits, so `--device CPU` and `--device PYTHON` print
identical losses.

  python examples/mnist_mlp.py --device PYTHON --steps 20 [--opt adam|sgd]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout without installing

from refgrad import Tensor, dtypes, nn
from refgrad.nn.optim import SGD, Adam
from refgrad.nn.state import get_parameters

FEATURES, HIDDEN, CLASSES, BATCH, SAMPLES = 64, 32, 10, 32, 512


class MLP:
  def __init__(self) -> None:
    self.l1 = nn.Linear(FEATURES, HIDDEN)
    self.l2 = nn.Linear(HIDDEN, CLASSES)

  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu())


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
  """Mean softmax cross-entropy of (B, C) logits against (B,) integer class labels (tinygrad's
  sparse_categorical_crossentropy without its options)."""
  picked = labels.reshape(-1, 1) == Tensor.arange(logits.shape[-1], dtype=labels.dtype, device=logits.device).reshape(1, -1)
  return -picked.where(logits.log_softmax(axis=-1), 0.0).sum(axis=-1).mean()


def make_data(device: str) -> tuple[np.ndarray, np.ndarray]:
  """SAMPLES samples: a random class's prototype plus noise (the RNG must already be seeded)."""
  protos = Tensor.randn(CLASSES, FEATURES, device=device)
  labels = Tensor.randint(SAMPLES, low=0, high=CLASSES, device=device)
  onehot = (labels.reshape(-1, 1) == Tensor.arange(CLASSES, device=device).reshape(1, -1)).cast(dtypes.float32)
  x = onehot @ protos + 1.5 * Tensor.randn(SAMPLES, FEATURES, device=device)
  return x.numpy(), labels.numpy()


@contextlib.contextmanager
def default_device(device: str) -> Iterator[None]:
  """Make `device` Device.DEFAULT (read from $DEV) for the block: layers and optimizers put their tensors there."""
  old = os.environ.get("DEV")
  os.environ["DEV"] = device
  try: yield
  finally:
    if old is None: del os.environ["DEV"]
    else: os.environ["DEV"] = old


def main(device: str, steps: int, opt: str = "adam", seed: int = 0, verbose: bool = False) -> list[float]:
  """Train for `steps` minibatch steps on `device`; returns the loss of each step (computed before its update)."""
  with default_device(device):
    Tensor.manual_seed(seed)
    xs, ys = make_data(device)
    model = MLP()
    params = get_parameters(model)
    optim = Adam(params, lr=0.01) if opt == "adam" else SGD(params, lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
      t0 = time.perf_counter()
      i = (step * BATCH) % SAMPLES
      x, y = Tensor(xs[i:i + BATCH], device=device), Tensor(ys[i:i + BATCH], device=device)
      optim.zero_grad()
      loss = cross_entropy(model(x), y)
      loss.backward()
      Tensor.realize_all(loss, *optim.schedule_step())   # the loss, the new parameters and the optimizer state: one schedule
      losses.append(loss.item())
      if verbose: print(f"step {step:3d}  loss {losses[-1]:.6f}  ({(time.perf_counter() - t0) * 1e3:.1f} ms)")
  return losses


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--device", default="CPU", help="device to train on: CPU or PYTHON (default CPU)")
  ap.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
  ap.add_argument("--opt", choices=["adam", "sgd"], default="adam", help="optimizer (default adam)")
  ap.add_argument("--seed", type=int, default=0, help="seed of the data and the weights (Tensor.manual_seed; default 0)")
  args = ap.parse_args()
  main(args.device, args.steps, args.opt, args.seed, verbose=True)
