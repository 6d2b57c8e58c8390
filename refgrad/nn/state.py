"""Model state: finding a model's tensors, state dicts, and the safetensors file format.

safetensors layout (https://github.com/huggingface/safetensors): an 8-byte little-endian unsigned header length N,
N bytes of UTF-8 JSON `{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {str: str}}`
(padded with spaces), then the raw little-endian, C-ordered bytes; offsets count from the first byte after the header.
The reader is strict, as the format asks: the tensors' byte ranges must tile the data exactly (no overlap, no hole,
nothing after the last one), so a file has one reading only. Nothing is ever unpickled.
"""
from __future__ import annotations

import functools
import json
import math
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from refgrad.device import write_atomic
from refgrad.dtype import DType, dtypes
from refgrad.lazy import MAX_ELEMENTS
from refgrad.tensor import Tensor

__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_metadata", "safe_save"]

# ---- walking a model --------------------------------------------------------------------------------

# never looked into: plain values, and code (a module's or a function's globals are not the model's state)
_LEAVES = (str, bytes, int, float, complex, type(None), np.ndarray, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, functools.partial)

def _walk(obj: Any, prefix: str, seen: set[int]) -> Iterator[tuple[str, Tensor]]:
  if isinstance(obj, Tensor):
    yield prefix, obj
    return
  if id(obj) in seen: return  # a cycle (a layer that refers back to its parent) is walked once
  if isinstance(obj, _LEAVES): return
  seen = seen | {id(obj)}
  if hasattr(obj, "_asdict"): obj = obj._asdict()   # namedtuple: by field name
  if isinstance(obj, dict): items: Any = ((str(k), v) for k, v in obj.items())
  elif isinstance(obj, (list, tuple)): items = ((str(i), v) for i, v in enumerate(obj))
  elif hasattr(obj, "__dict__"): items = ((k, v) for k, v in vars(obj).items())
  else: return
  for k, v in items: yield from _walk(v, f"{prefix}.{k}" if prefix else k, seen)

def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from obj through attributes, lists, tuples and dicts, by dotted name
  (`layers.0.weight`), in attribute order. A tensor reachable by two names appears under both."""
  return {(f"{prefix}{k}" if k else prefix.rstrip(".")): t for k, t in _walk(obj, "", set())}

def get_parameters(obj: Any) -> list[Tensor]:
  """The tensors of get_state_dict(obj), each once (a tied weight is listed once), in order."""
  return list({id(t): t for t in get_state_dict(obj).values()}.values())

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False) -> None:
  """Copy state_dict's tensors into the model's tensors of the same names (the model's Tensor objects keep their
  identity, so an optimizer made before still holds them). Each is moved to the model tensor's device; shapes and
  dtypes must match. strict=True: a missing or unexpected key is an error; strict=False: those are skipped."""
  model_sd = get_state_dict(model)
  missing = [k for k in model_sd if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model_sd]
  if strict and (missing or unexpected):
    raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
  todo = []
  for k, v in model_sd.items():
    if k not in state_dict: continue
    src = state_dict[k]
    if not isinstance(src, Tensor): raise TypeError(f"load_state_dict: {k!r} is a {type(src).__name__}, not a Tensor")
    if src.shape != v.shape: raise ValueError(f"load_state_dict: shape mismatch for {k!r}: model has {v.shape}, state dict has {src.shape}")
    if src.dtype != v.dtype: raise TypeError(f"load_state_dict: dtype mismatch for {k!r}: model has {v.dtype}, state dict has {src.dtype}")
    todo.append((k, v, src))
  for k, v, src in todo:
    if verbose: print(f"load_state_dict: {k} {v.shape} {v.dtype}")
    # a copy in fresh memory of its own: tensors sharing one buffer node are one node to autograd (loading one state
    # dict into two models must not tie them), so the bytes go through the host into a new buffer
    v.assign(Tensor(_raw(src), device=v.device, dtype=v.dtype))

# ---- safetensors --------------------------------------------------------------------------------------

_CODES: dict[str, DType] = {"BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
                            "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64,
                            "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64}
_CODE_OF = {d: c for c, d in _CODES.items()}
_MAX_HEADER = 100 << 20   # the reference implementation's limit: a larger header is a corrupt (or hostile) file

def _raw(t: Tensor) -> np.ndarray:
  """t's storage as little-endian bytes of its dtype (bfloat16: its bits)."""
  arr = t.numpy()
  if t.dtype == dtypes.bfloat16: arr = (arr.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # exact: values are bfloat16
  return np.ascontiguousarray(arr, dtype=t.dtype.np.newbyteorder("<"))

def safe_save(tensors: dict[str, Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write tensors (in dict order) and optional string metadata to a safetensors file, atomically."""
  if not isinstance(tensors, dict): raise TypeError(f"safe_save: tensors must be a dict of name -> Tensor, not {type(tensors).__name__}")
  header: dict[str, Any] = {}
  if metadata is not None:
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
      raise TypeError("safe_save: metadata must be a dict of str -> str")
    header["__metadata__"] = dict(metadata)
  chunks, offset = [], 0
  for name, t in tensors.items():
    if not isinstance(name, str) or name == "__metadata__": raise ValueError(f"safe_save: invalid tensor name {name!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {name!r} is a {type(t).__name__}, not a Tensor")
    if t.dtype not in _CODE_OF: raise TypeError(f"safe_save: {name!r} has dtype {t.dtype}, which safetensors cannot hold")
    data = _raw(t).tobytes()
    header[name] = {"dtype": _CODE_OF[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    chunks.append(data)
    offset += len(data)
  js = json.dumps(header, separators=(",", ":")).encode()
  js += b" " * (-len(js) % 8)   # pad so the data (and so every 8-byte-aligned tensor) starts aligned
  write_atomic(Path(path), len(js).to_bytes(8, "little") + js + b"".join(chunks))

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  keys = [k for k, _ in pairs]
  if len(set(keys)) != len(keys): raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
  return dict(pairs)

def _read_header(path: str | os.PathLike) -> tuple[dict[str, Any], int, int]:
  """(header JSON, data start, data length) of a safetensors file, every field checked."""
  def bad(msg: str) -> ValueError: return ValueError(f"safetensors file {os.fspath(path)!r}: {msg}")
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    if size < 8: raise bad(f"file is {size} bytes, too short for the 8-byte header length")
    n = int.from_bytes(f.read(8), "little")
    if n > size - 8: raise bad(f"header length {n} exceeds the {size - 8} bytes after it")
    if n > _MAX_HEADER: raise bad(f"header length {n} exceeds the limit of {_MAX_HEADER} bytes")
    raw = f.read(n)
  try: header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
  except (UnicodeDecodeError, ValueError) as e: raise bad(f"header is not valid JSON: {e}") from None
  if not isinstance(header, dict): raise bad(f"header must be a JSON object, not {type(header).__name__}")
  meta = header.get("__metadata__", {})
  if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()): raise bad("__metadata__ must be an object of strings")
  data_len = size - 8 - n
  spans = []
  for name, info in header.items():
    if name == "__metadata__": continue
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
      raise bad(f"tensor {name!r}: entry must have exactly the keys dtype, shape, data_offsets, got {info!r}")
    code, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if code not in _CODES: raise bad(f"tensor {name!r}: unknown dtype {code!r} (known: {', '.join(_CODES)})")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape): raise bad(f"tensor {name!r}: invalid shape {shape!r}")
    if (numel := math.prod(shape)) > MAX_ELEMENTS:   # refused here, before any byte is read or copied
      raise bad(f"tensor {name!r}: shape {shape} has {numel} elements, more than 2**31-1: refgrad indexes with int32")
    if not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs) or not 0 <= offs[0] <= offs[1] <= data_len:
      raise bad(f"tensor {name!r}: data_offsets {offs!r} out of range for {data_len} data bytes")
    if (need := math.prod(shape) * _CODES[code].itemsize) != offs[1] - offs[0]:
      raise bad(f"tensor {name!r}: data_offsets {offs} hold {offs[1] - offs[0]} bytes, but shape {shape} of {code} needs {need}")
    spans.append((offs[0], offs[1], name))
  end, prev = 0, None
  for b, e, name in sorted(spans):
    if b < end: raise bad(f"tensors {prev!r} and {name!r} overlap (bytes {b}..{end})")
    if b > end: raise bad(f"bytes {end}..{b} before tensor {name!r} belong to no tensor")
    end, prev = e, name
  if end != data_len: raise bad(f"bytes {end}..{data_len} at the end belong to no tensor")
  return header, 8 + n, data_len

def safe_metadata(path: str | os.PathLike) -> dict[str, str]:
  """The `__metadata__` strings of a safetensors file ({} when it has none)."""
  return dict(_read_header(path)[0].get("__metadata__", {}))

def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
  """The tensors of a safetensors file, in header order, on `device` (default: Device.DEFAULT).
  Malformed files raise ValueError naming the file and the problem."""
  header, start, data_len = _read_header(path)
  data = np.memmap(path, np.uint8, "r", offset=start, shape=(data_len,)) if data_len else np.zeros(0, np.uint8)
  out: dict[str, Tensor] = {}
  for name, info in header.items():
    if name == "__metadata__": continue
    dt, (b, e) = _CODES[info["dtype"]], info["data_offsets"]
    chunk = data[b:e]
    if dt == dtypes.bool and np.any(chunk > 1):
      raise ValueError(f"safetensors file {os.fspath(path)!r}: tensor {name!r}: BOOL bytes must be 0 or 1")
    arr = chunk.view(dt.np.newbyteorder("<")).astype(dt.np).reshape(info["shape"])   # astype: a native-order copy
    out[name] = Tensor(arr, device=device, dtype=dt)   # bfloat16: arr holds its bits, which Tensor takes as they are
  del data
  return out
