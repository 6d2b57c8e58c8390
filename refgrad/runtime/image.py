"""The program image the HCQ runtimes upload and the mock GPUs execute: the container of refgrad/hw/image.py with magic
b"RGL1" around the serialized linear program (refgrad/renderer/serialize.py). The mock picks its executor by the 4-byte magic;
the launcher reads the program's argument counts and local-memory bytes from it."""
from __future__ import annotations

import json
from dataclasses import dataclass

from refgrad.device import Compiler
from refgrad.hw import image as container
from refgrad.renderer.serialize import PythonRenderer, SerializeError, decode_dtype, parse_program, serialize
from refgrad.target import Target, check_limits, emulated, local_bytes

IMAGE_MAGIC = container.LINEAR

def make_image(src: str) -> bytes:
  """The image of a serialized program's text."""
  return container.pack(IMAGE_MAGIC, src.encode())

def read_image(lib: bytes) -> bytes:
  """The payload of a program image; ValueError names what is wrong."""
  return container.unpack(lib, IMAGE_MAGIC)


@dataclass(frozen=True)
class ImageInfo:
  """What the launcher reads from a program: its name, argument counts and bytes of local (shared) memory."""
  name: str
  nbufs: int
  nvars: int
  shared: int
  stored: frozenset[int] = frozenset()   # the buffers (DEFINE_GLOBAL indices) the program stores to
  loaded: frozenset[int] = frozenset()   # ... and loads from

def image_info(lib: bytes) -> ImageInfo:
  """Name, buffer and variable counts, and local-memory bytes of the program in an image; ValueError names what is wrong."""
  try: doc = json.loads(read_image(lib))
  except json.JSONDecodeError as e: raise ValueError(f"program image: the payload is not a serialized program ({e})") from None
  rows = doc.get("uops") if isinstance(doc, dict) else None
  if not isinstance(rows, list) or not isinstance(doc.get("name"), str): raise ValueError("program image: the payload has no name and uops")
  if not all(isinstance(r, list) and len(r) == 4 for r in rows): raise ValueError("program image: a uop row is not [op, dtype, srcs, arg]")
  nbufs = sum(1 for r in rows if r[0] == "DEFINE_GLOBAL")
  nvars = sum(1 for r in rows if r[0] == "DEFINE_VAR")
  shared = local_bytes(decode_dtype(r[1]) for r in rows if r[0] == "DEFINE_LOCAL")
  def buffers(op: str) -> frozenset[int]:   # the DEFINE_GLOBALs that are the first source of an `op` row
    return frozenset(rows[r[2][0]][3] for r in rows if r[0] == op and isinstance(r[2], list) and r[2] and isinstance(r[2][0], int)
                     and 0 <= r[2][0] < len(rows) and rows[r[2][0]][0] == "DEFINE_GLOBAL")
  return ImageInfo(doc["name"], nbufs, nvars, shared, buffers("STORE"), buffers("LOAD"))


class ImageRenderer(PythonRenderer):
  """The serialized linear program for a GPU's target (or EMULATE's): programs beyond its limits are refused.
  A device subclass names its `device` and `target`."""
  device: str
  target: Target
  def render(self, name: str, uops: list) -> str:
    check_limits(list(uops), emulated() or self.target)
    return serialize(name, uops)


class ImageCompiler(Compiler):
  """Serialized program text -> program image (checked to parse, so errors show at compile time)."""
  cachekey = ""
  arch = ""
  def compile(self, src: str) -> bytes:
    try: parse_program(src)
    except SerializeError as e: raise SerializeError(f"{self.arch} compile: {e}") from None
    return make_image(src)
