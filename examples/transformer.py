"""Train a one-block transformer (token + position embedding, causal self-attention with
scaled_dot_product_attention, GELU MLP, pre-LayerNorm) to predict the next token of short arithmetic
sequences, with cross_entropy and Adam, written as a tinygrad program (the same calls run on tinygrad).

Each sequence starts at a random token and steps by a random stride mod VOCAB, so the next token follows
from the two before it. Every device computes the same bits: `--device CPU` and `--device PYTHON` print
identical losses.

  python examples/transformer.py --device PYTHON --steps 10
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout without installing

from examples.mnist_mlp import default_device
from refgrad import Tensor, nn
from refgrad.nn.optim import Adam
from refgrad.nn.state import get_parameters

VOCAB, SEQ, DIM, HEADS, BATCH = 16, 8, 32, 2, 16


class Block:
  def __init__(self) -> None:
    self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
    self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
    self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

  def __call__(self, x: Tensor) -> Tensor:
    b, t, _ = x.shape
    q, k, v = [y.reshape(b, t, HEADS, DIM // HEADS).transpose(1, 2) for y in self.qkv(self.ln1(x)).chunk(3, dim=-1)]
    att = q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, DIM)
    x = x + self.proj(att)
    return x + self.down(self.up(self.ln2(x)).gelu())


class Model:
  def __init__(self) -> None:
    self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM)
    self.block, self.ln = Block(), nn.LayerNorm(DIM)
    self.head = nn.Linear(DIM, VOCAB)

  def __call__(self, idx: Tensor) -> Tensor:
    x = self.tok(idx) + self.pos(Tensor.arange(idx.shape[1], device=idx.device))
    return self.head(self.ln(self.block(x)))


def batch(device: str) -> tuple[Tensor, Tensor]:
  """(inputs, targets) of shape (BATCH, SEQ): start + stride * i mod VOCAB and the same shifted by one."""
  start = Tensor.randint(BATCH, 1, low=0, high=VOCAB, device=device)
  stride = Tensor.randint(BATCH, 1, low=1, high=4, device=device)
  seq = (start + stride * Tensor.arange(SEQ + 1, device=device).reshape(1, -1)) % VOCAB
  return seq[:, :-1], seq[:, 1:]


def main(device: str, steps: int, seed: int = 0, verbose: bool = False) -> list[float]:
  """Train for `steps` steps on `device`; returns each step's loss (computed before its update)."""
  with default_device(device):
    Tensor.manual_seed(seed)
    model = Model()
    optim = Adam(get_parameters(model), lr=3e-3)
    losses = []
    with Tensor.train():
      for step in range(steps):
        t0 = time.perf_counter()
        x, y = batch(device)
        optim.zero_grad()
        loss = model(x).reshape(-1, VOCAB).cross_entropy(y.reshape(-1))
        loss.backward()
        Tensor.realize_all(loss, *optim.schedule_step())
        losses.append(loss.item())
        if verbose: print(f"step {step:3d}  loss {losses[-1]:.6f}  ({(time.perf_counter() - t0) * 1e3:.0f} ms)")
  return losses


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--device", default="CPU", help="CPU or PYTHON")
  ap.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
  ap.add_argument("--seed", type=int, default=0, help="seed of the weights and the synthetic data (default 0)")
  args = ap.parse_args()
  main(args.device, args.steps, args.seed, verbose=True)
