"""Golden-file encoding: arrays as JSON objects {"dtype", "shape", "hex"} holding the raw little-endian bytes, so
every float (NaN payloads, -0.0, inf, denormals) round-trips exactly. bfloat16 arrays are stored as their bits
(uint16 in numpy). No torch here: the tests read these files with numpy only."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

GOLDEN_DIR = Path(__file__).resolve().parent
TORCH_VERSION = "2.13.0"
# dtype name -> numpy storage dtype (bfloat16: raw bits)
STORAGE = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "int64": np.int64,
           "int32": np.int32, "bool": np.bool_}


def encode(a: np.ndarray, dtype: str) -> dict[str, Any]:
  """a (already in dtype's storage form) as a JSON object."""
  st = np.dtype(STORAGE[dtype])
  if a.dtype != st: raise TypeError(f"encode: array of {a.dtype} given for {dtype} (storage {st})")
  return {"dtype": dtype, "shape": list(a.shape), "hex": np.ascontiguousarray(a).astype(st.newbyteorder("<")).tobytes().hex()}


def decode(obj: dict[str, Any]) -> tuple[np.ndarray, str]:
  """(storage array, dtype name) from a JSON object; checks that the byte count matches the shape."""
  dtype, shape = obj["dtype"], tuple(obj["shape"])
  if dtype not in STORAGE: raise ValueError(f"golden file: unknown dtype {dtype!r}")
  raw = bytes.fromhex(obj["hex"])
  st = np.dtype(STORAGE[dtype]).newbyteorder("<")
  n = int(np.prod(shape, dtype=np.int64))
  if len(raw) != n * st.itemsize: raise ValueError(f"golden file: {len(raw)} bytes for shape {shape} of {dtype}")
  return np.frombuffer(raw, dtype=st).astype(st.newbyteorder("=")).reshape(shape), dtype


def as_float64(a: np.ndarray, dtype: str) -> np.ndarray:
  """Values of a storage array as float64 (bfloat16 bits widened exactly)."""
  if dtype == "bfloat16": return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
  return a.astype(np.float64)


def load(name: str) -> dict[str, Any]:
  path = GOLDEN_DIR / f"{name}.json"
  data = json.loads(path.read_text())
  if data.get("torch") != TORCH_VERSION: raise ValueError(f"{path}: made with torch {data.get('torch')!r}, expected {TORCH_VERSION}")
  if not isinstance(data.get("cases"), dict): raise ValueError(f"{path}: no 'cases' object")
  return data
