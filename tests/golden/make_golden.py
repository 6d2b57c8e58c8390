"""Record PyTorch's results for tests/golden/cases.py as JSON golden files (one per group), read by
tests/frontend/test_golden.py without torch.

  pip install torch==2.13.0      # a CPU build; never an unpinned torch
  python -m tests.golden.make_golden [GROUP ...]

For each case and dtype: the inputs (made in float64 by the case, rounded to the dtype by torch), the output
gradient (seeded uniform weights in [0.5, 1.5), so every output element counts differently), the outputs and
the input gradients, all as exact bytes. Files are written atomically.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from tests.golden.cases import GROUPS, Case
from tests.golden.golden_io import GOLDEN_DIR, TORCH_VERSION, encode


def _torch() -> Any:
  try:
    import torch
  except ImportError: sys.exit(f"make_golden needs torch=={TORCH_VERSION} (pip install torch=={TORCH_VERSION})")
  if torch.__version__.split("+")[0] != TORCH_VERSION: sys.exit(f"make_golden needs torch=={TORCH_VERSION}, found {torch.__version__}")
  torch.use_deterministic_algorithms(True, warn_only=True)   # max_unpool has no deterministic kernel; its indices are unique here
  torch.set_num_threads(1)
  return torch


def _to_storage(torch: Any, t: Any) -> tuple[np.ndarray, str]:
  t = t.detach().cpu()
  name = str(t.dtype).removeprefix("torch.")
  if name == "bfloat16": return t.view(torch.int16).numpy().view(np.uint16), name
  if name in ("int8", "int16", "uint8"): return t.to(torch.int64).numpy(), "int64"
  return t.numpy(), name


def _enc(torch: Any, t: Any) -> dict[str, Any]:
  a, name = _to_storage(torch, t)
  return encode(a, name)


def run_case(torch: Any, case: Case, dtype: str, seed: int) -> dict[str, Any]:
  rng = np.random.default_rng(seed)
  raw = case.make(rng)
  tdt = getattr(torch, dtype)
  xs = []
  for i, a in enumerate(raw):
    if case.kind(i) == "i": xs.append(torch.tensor(np.asarray(a, dtype=np.int64)))
    elif case.kind(i) == "b": xs.append(torch.tensor(np.asarray(a, dtype=np.bool_)))
    elif not tdt.is_floating_point: xs.append(torch.tensor(np.asarray(a, dtype=np.float64)).to(tdt))   # an int dtype case
    else: xs.append(torch.tensor(np.asarray(a, dtype=np.float64)).to(tdt).requires_grad_(case.grad and case.kind(i) == "f"))
  outs = case.pt(torch, *xs)
  outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
  rec: dict[str, Any] = {"inputs": [_enc(torch, x) for x in xs], "outs": [_enc(torch, o) for o in outs]}
  if case.grad:
    w = torch.tensor(rng.uniform(0.5, 1.5, tuple(outs[0].shape))).to(outs[0].dtype)
    outs[0].backward(w)
    rec["gout"] = _enc(torch, w)
    rec["grads"] = [None if x.grad is None else _enc(torch, x.grad) for i, x in enumerate(xs) if case.kind(i) == "f"]
  return rec


def main(groups: list[str]) -> None:
  torch = _torch()
  from refgrad.device import write_atomic
  for g in groups or list(GROUPS):
    cases: dict[str, Any] = {}
    for k, case in enumerate(GROUPS[g]):
      for dt in case.dtypes: cases[f"{case.name}@{dt}"] = run_case(torch, case, dt, seed=k)
    path = GOLDEN_DIR / f"{g}.json"
    write_atomic(path, json.dumps({"torch": TORCH_VERSION, "cases": cases}, indent=0, sort_keys=True).encode())
    print(f"{path}: {len(cases)} cases")


if __name__ == "__main__":
  main(sys.argv[1:])
