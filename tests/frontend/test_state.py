"""safetensors files: round trips for every dtype, an independent numpy reader/writer, metadata, malformed files."""
import json
import os

import numpy as np
import pytest

from refgrad import Tensor, dtypes
from refgrad.nn.state import safe_load, safe_metadata, safe_save

CODES = {"BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16, "U32": dtypes.uint32,
         "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
         "F32": dtypes.float32, "F64": dtypes.float64}
NP = {"BOOL": "<b1", "U8": "<u1", "I8": "<i1", "U16": "<u2", "I16": "<i2", "U32": "<u4", "I32": "<i4", "U64": "<u8", "I64": "<i8",
      "F16": "<f2", "BF16": "<u2", "F32": "<f4", "F64": "<f8"}


def storage(code: str, n: int, seed: int = 0) -> np.ndarray:
  """n values of the dtype's storage (bfloat16: bits), edge values first."""
  rng = np.random.default_rng(seed)
  dt = np.dtype(NP[code])
  if code == "BOOL": return rng.integers(0, 2, n).astype(bool)
  if code == "BF16": return np.concatenate([np.array([0x7F80, 0xFF80, 0x7FC0, 0x8000, 0x0001], np.uint16), rng.integers(0, 1 << 16, n, dtype=np.uint16)])[:n]
  if dt.kind in "iu":
    info = np.iinfo(dt)
    return np.concatenate([np.array([info.min, info.max, 0], dt), rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)])[:n]
  tiny = np.finfo(dt).smallest_subnormal
  return np.concatenate([np.array([np.inf, -np.inf, -0.0, tiny, np.finfo(dt).max], dt), rng.standard_normal(n).astype(dt)])[:n]

def tensor_of(code: str, arr: np.ndarray) -> Tensor: return Tensor(arr, dtype=CODES[code])

def raw_bits(t: Tensor) -> np.ndarray:
  """The tensor's storage as unsigned ints (bfloat16 from its float32 widening, which keeps every bit)."""
  a = t.numpy()
  if t.dtype == dtypes.bfloat16: return (a.view(np.uint32) >> 16).astype(np.uint16)
  return a.view(f"u{a.dtype.itemsize}") if a.dtype != np.bool_ else a

def numpy_read(path) -> tuple[dict, dict[str, np.ndarray]]:
  """A plain reader written from the format's description, independent of refgrad."""
  blob = open(path, "rb").read()
  n = int(np.frombuffer(blob[:8], "<u8")[0])
  header = json.loads(blob[8:8 + n])
  out = {}
  for k, v in header.items():
    if k == "__metadata__": continue
    b, e = v["data_offsets"]
    out[k] = np.frombuffer(blob[8 + n + b: 8 + n + e], NP[v["dtype"]]).reshape(v["shape"])
  return header, out

def numpy_write(path, entries: list[tuple[str, str, list[int], bytes]], header_extra: dict | None = None, pad: int = 0) -> None:
  header, off, data = dict(header_extra or {}), 0, b""
  for name, code, shape, raw in entries:
    header[name] = {"dtype": code, "shape": shape, "data_offsets": [off, off + len(raw)]}
    off, data = off + len(raw), data + raw
  js = json.dumps(header).encode() + b" " * pad
  open(path, "wb").write(len(js).to_bytes(8, "little") + js + data)


@pytest.mark.parametrize("code", list(CODES))
def test_round_trip_every_dtype(tmp_path, code):
  arr = storage(code, 24).reshape(2, 3, 4)
  t = tensor_of(code, arr)
  path = tmp_path / "t.safetensors"
  safe_save({"x": t, "scalar": tensor_of(code, arr.reshape(-1)[:1].reshape(())), "empty": tensor_of(code, arr.reshape(-1)[:0].reshape(0, 5))}, path)
  got = safe_load(path)
  assert list(got) == ["x", "scalar", "empty"]
  for k, (shape) in {"x": (2, 3, 4), "scalar": (), "empty": (0, 5)}.items():
    assert got[k].dtype == CODES[code] and got[k].shape == shape, k
  np.testing.assert_array_equal(raw_bits(got["x"]), raw_bits(t))
  np.testing.assert_array_equal(raw_bits(got["scalar"]), raw_bits(t).reshape(-1)[:1].reshape(()))
  # the plain reader sees the same bytes, at the offsets and dtype codes of the format
  header, plain = numpy_read(path)
  assert header["x"]["dtype"] == code and header["x"]["shape"] == [2, 3, 4]
  np.testing.assert_array_equal(plain["x"].view(f"u{plain['x'].itemsize}") if code != "BOOL" else plain["x"],
                                arr.view(f"u{arr.itemsize}") if code != "BOOL" else arr)

def test_file_layout(tmp_path):
  path = tmp_path / "l.safetensors"
  safe_save({"a": Tensor(np.arange(3, dtype=np.int8)), "b": Tensor(np.array([1.5, -2.0], np.float32))}, path)
  blob = path.read_bytes()
  n = int.from_bytes(blob[:8], "little")
  assert n % 8 == 0 and blob[8] == ord("{") and blob[8 + n - 1] in b" }"   # padded with spaces to 8-byte alignment
  header = json.loads(blob[8:8 + n])
  assert header == {"a": {"dtype": "I8", "shape": [3], "data_offsets": [0, 3]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [3, 11]}}
  assert blob[8 + n:] == bytes([0, 1, 2]) + np.array([1.5, -2.0], "<f4").tobytes()

def test_reads_file_written_by_numpy(tmp_path):
  path = tmp_path / "n.safetensors"
  a, b = np.array([[1, -2], [3, 4]], "<i2"), np.array([0.25, np.nan, -np.inf], "<f8")
  bf = np.array([0x3F80, 0xC000], "<u2")   # bfloat16 1.0, -2.0
  numpy_write(path, [("w.b", "F64", [3], b.tobytes()), ("w.a", "I16", [2, 2], a.tobytes()), ("h", "BF16", [2], bf.tobytes())],
              {"__metadata__": {"format": "np"}}, pad=5)
  got = safe_load(path)
  assert list(got) == ["w.b", "w.a", "h"]
  np.testing.assert_array_equal(got["w.a"].numpy(), a)
  np.testing.assert_array_equal(got["w.b"].numpy(), b)
  np.testing.assert_array_equal(got["h"].numpy(), np.array([1.0, -2.0], np.float32))
  assert safe_metadata(path) == {"format": "np"}

def test_metadata(tmp_path):
  path = tmp_path / "m.safetensors"
  safe_save({"x": Tensor([1.0])}, path, metadata={"format": "pt", "note": "é ✓"})
  assert safe_metadata(path) == {"format": "pt", "note": "é ✓"}
  assert numpy_read(path)[0]["__metadata__"] == {"format": "pt", "note": "é ✓"}
  safe_save({"x": Tensor([1.0])}, path)
  assert safe_metadata(path) == {} and "__metadata__" not in numpy_read(path)[0]
  assert list(safe_load(path)) == ["x"]

def test_atomic_overwrite_leaves_no_temp_files(tmp_path):
  path = tmp_path / "o.safetensors"
  safe_save({"x": Tensor([1, 2, 3])}, path)
  safe_save({"y": Tensor([4.0])}, path)
  assert os.listdir(tmp_path) == ["o.safetensors"]
  assert list(safe_load(path)) == ["y"]

def test_empty_dict(tmp_path):
  path = tmp_path / "e.safetensors"
  safe_save({}, path)
  assert safe_load(path) == {}

def test_save_errors(tmp_path):
  path = tmp_path / "bad.safetensors"
  with pytest.raises(TypeError, match="'x' is a ndarray"): safe_save({"x": np.zeros(3)}, path)
  with pytest.raises(ValueError, match="invalid tensor name '__metadata__'"): safe_save({"__metadata__": Tensor([1.0])}, path)
  with pytest.raises(TypeError, match="metadata must be a dict of str -> str"): safe_save({"x": Tensor([1.0])}, path, metadata={"a": 1})
  with pytest.raises(TypeError, match="must be a dict"): safe_save([Tensor([1.0])], path)
  assert not path.exists()

F32_4 = np.arange(4, dtype="<f4").tobytes()

def write_raw(path, header: bytes | dict, data: bytes = b"", n: int | None = None) -> None:
  js = header if isinstance(header, bytes) else json.dumps(header).encode()
  open(path, "wb").write((len(js) if n is None else n).to_bytes(8, "little") + js + data)

MALFORMED = {
  "too short": (lambda p: open(p, "wb").write(b"\x01\x00"), "too short"),
  "header length": (lambda p: write_raw(p, b"{}", n=1000), "header length 1000 exceeds"),
  "bad json": (lambda p: write_raw(p, b"{\"x\": [1,", b""), "not valid JSON"),
  "bad utf8": (lambda p: write_raw(p, b"{\"\xff\": 1}"), "not valid JSON"),
  "not object": (lambda p: write_raw(p, b"[1, 2]"), "must be a JSON object"),
  "unknown dtype": (lambda p: write_raw(p, {"x": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}, bytes(4)), "unknown dtype 'F8_E4M3'"),
  "missing key": (lambda p: write_raw(p, {"x": {"dtype": "F32", "shape": [4]}}, F32_4), "exactly the keys"),
  "bad shape": (lambda p: write_raw(p, {"x": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, F32_4), "invalid shape"),
  "offsets out of range": (lambda p: write_raw(p, {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 32]}}, F32_4), "out of range"),
  "offsets reversed": (lambda p: write_raw(p, {"x": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}}, F32_4), "out of range"),
  "size mismatch": (lambda p: write_raw(p, {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, F32_4), "needs 12"),
  "overlap": (lambda p: write_raw(p, {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                                      "y": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, F32_4), "overlap"),
  "hole": (lambda p: write_raw(p, {"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                   "y": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, F32_4), "belong to no tensor"),
  "trailing bytes": (lambda p: write_raw(p, {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}, F32_4), "at the end belong to no tensor"),
  "duplicate key": (lambda p: write_raw(p, b'{"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
                                           b'"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\x01"), "duplicate key 'x'"),
  "bad metadata": (lambda p: write_raw(p, {"__metadata__": {"a": 1}}), "__metadata__ must be an object of strings"),
  "bool bytes": (lambda p: write_raw(p, {"x": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x07"), "BOOL bytes must be 0 or 1"),
}

@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_file(tmp_path, case):
  make, words = MALFORMED[case]
  path = tmp_path / f"{case.replace(' ', '_')}.safetensors"
  make(path)
  with pytest.raises(ValueError, match=words) as e: safe_load(path)
  assert str(path) in str(e.value)   # the message names the file

def test_huge_header_length_is_rejected_before_reading(tmp_path):
  path = tmp_path / "h.safetensors"
  open(path, "wb").write((1 << 62).to_bytes(8, "little") + b"{}")
  with pytest.raises(ValueError, match="exceeds"): safe_metadata(path)

def test_tensor_over_2_31_elements_is_refused_before_any_copy(tmp_path, monkeypatch):
  """A 2**31-byte U8 tensor (a sparse file: no disk used) is refused from the header, before memmap or copy."""
  header = json.dumps({"big": {"dtype": "U8", "shape": [2**31], "data_offsets": [0, 2**31]}}).encode()
  p = tmp_path / "big.safetensors"
  with open(p, "wb") as f:
    f.write(len(header).to_bytes(8, "little") + header)
    f.truncate(8 + len(header) + 2**31)
  monkeypatch.setattr(np, "memmap", lambda *a, **k: pytest.fail("the data was mapped"))
  with pytest.raises(ValueError, match=r"big.safetensors'.*tensor 'big': shape \[2147483648\] has 2147483648 elements, more than 2\*\*31-1"):
    safe_load(p)


def test_round_trip_to_explicit_devices(tmp_path):
  path = tmp_path / "d.safetensors"
  x = np.array([1.5, -0.0, np.inf], np.float32)
  safe_save({"x": Tensor(x, device="PYTHON")}, path)
  for dev in ("CPU", "PYTHON"):
    t = safe_load(path, device=dev)["x"]
    assert t.device == dev
    np.testing.assert_array_equal(t.numpy().view(np.uint32), x.view(np.uint32))
