"""The program-image container, the one format the runtimes write and the mock GPUs read: a 4-byte magic naming the
format, a u32 little-endian payload length, the payload (and, for a container with a trailer, what follows it).

| magic | payload | written by | read by |
|---|---|---|---|
| RGL1 | the serialized linear program (refgrad/renderer/serialize.py) | refgrad/runtime/image.py | emulators/executors.py |
| PTX1 | JSON {"entry", "ptx"}: a PTX module and the entry to run | refgrad/runtime/ptx_args.py | emulators/nv/ptx/ |
| RGCO | JSON launch metadata; the trailer is a gfx1100 ELF object (never uploaded) | refgrad/runtime/ops_amd.py | ops_amd.read_container |
"""
from __future__ import annotations

import json
import struct

LINEAR, PTX, CODE_OBJECT = b"RGL1", b"PTX1", b"RGCO"
HEADER_BYTES = 8


def pack(magic: bytes, payload: bytes) -> bytes:
  """magic + u32 length + payload."""
  assert len(magic) == 4, magic
  return magic + struct.pack("<I", len(payload)) + payload

def payload_bytes(header: bytes) -> int:
  """The payload length an image's first HEADER_BYTES bytes announce."""
  return struct.unpack_from("<I", header, 4)[0]

def split(image: bytes, magic: bytes, what: str = "program image") -> tuple[bytes, bytes]:
  """(payload, trailer) of an image of format `magic`; ValueError names what is wrong (the magic, the length field)."""
  if image[:4] != magic: raise ValueError(f"not a {what}: magic {image[:4]!r}, expected {magic!r}")
  if len(image) < HEADER_BYTES or (n := payload_bytes(image)) > len(image) - HEADER_BYTES:
    raise ValueError(f"{what}: the length field says {payload_bytes(image) if len(image) >= HEADER_BYTES else '?'} bytes, "
                     f"the payload has {len(image) - HEADER_BYTES}")
  return image[HEADER_BYTES:HEADER_BYTES + n], image[HEADER_BYTES + n:]

def unpack(image: bytes, magic: bytes, what: str = "program image") -> bytes:
  """The payload of an image of format `magic` that holds nothing after it; ValueError names what is wrong."""
  payload, rest = split(image, magic, what)
  if rest: raise ValueError(f"{what}: the length field says {len(payload)} bytes, the payload has {len(payload) + len(rest)}")
  return payload


def ptx_payload(src: str, entry: str) -> bytes: return json.dumps({"entry": entry, "ptx": src}).encode()

def read_ptx_payload(payload: bytes) -> tuple[str, str]:
  """(PTX source, entry name) of a PTX1 payload; ValueError / KeyError / TypeError for a payload that is not one."""
  doc = json.loads(payload)
  return doc["ptx"], doc["entry"]
