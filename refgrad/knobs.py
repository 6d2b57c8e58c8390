"""Environment knobs: every variable refgrad reads, parsed one way, from one table.

A knob is read from the environment each time it is asked for (tests and programs change it). An unset or
empty variable means its default; any other value must parse, or `KnobError` says in one line which variable
holds what and what it accepts. `knobs.table()` is the README's Knobs table.
Adding a knob is adding a row to `KNOBS`.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class KnobError(ValueError):
  """An environment variable holds a value its knob does not accept; the message names the variable (also in `.knob`)."""
  def __init__(self, knob: str, msg: str):
    super().__init__(msg)
    self.knob = knob


@dataclass(frozen=True)
class Knob:
  name: str
  default: Any
  parse: Callable[[str], Any]   # the text (stripped, non-empty) -> value; raises ValueError when it is not allowed
  allowed: str                  # what the values may be, for the error and the docs
  doc: str


def _flag(s: str) -> bool:
  if s not in ("0", "1"): raise ValueError
  return s == "1"

def _count(s: str) -> int:
  if not re.fullmatch(r"[0-9]+", s): raise ValueError
  return int(s)

def _choice(*names: str) -> Callable[[str], str]:
  def parse(s: str) -> str:
    if s.upper() not in names: raise ValueError
    return s.upper()
  return parse

def _device(s: str) -> str:
  if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(:[0-9]+)?", s): raise ValueError
  return s

def _path(s: str) -> Path: return Path(s).expanduser().absolute()


KNOBS: dict[str, Knob] = {k.name: k for k in (
  Knob("DEV", "CPU", _device, "a device name such as CPU or PYTHON (optionally NAME:n)",
       "default device of tensors and tests (also settable as `Device.DEFAULT = \"PYTHON\"`)"),
  Knob("EMULATE", "", _choice("CUDA", "AMD"), "CUDA or AMD",
       "compile every kernel for that GPU target (limits, vector width, tensor cores, lane layouts); the PYTHON device then "
       "refuses programs the GPU could not run"),
  Knob("NOOPT", False, _flag, "0 or 1", "1: kernels run unoptimized (no Opts)"),
  Knob("BEAM", 0, _count, "an integer >= 0", "n > 0: choose each kernel's Opts by a beam search of width n, timed on the device (cached)"),
  Knob("IGNORE_BEAM_CACHE", False, _flag, "0 or 1", "1: search again even when the BEAM cache has an entry (and overwrite it)"),
  Knob("DEBUG", 0, _count, "an integer >= 0", "2: print every kernel launch and copy with its size and time; 4: also every kernel's source"),
  Knob("CHECKED", True, _flag, "0 or 1", "PYTHON device: 1 reports undefined behaviour; 0 turns those checks off (bounds are always checked)"),
  Knob("NATIVE_TRANSCENDENTALS", False, _flag, "0 or 1",
       "1: renderers keep EXP2/LOG2/SIN native (libm / numpy; within a ULP bound, not bit-exact) instead of decomposing them"),
  Knob("REFGRAD_CACHE", None, _path, "a directory path",
       "where compiled kernels, loadable CPU libraries and BEAM results are kept (default ~/.cache/refgrad); an unwritable one "
       "falls back to a private temporary directory with a warning"),
  Knob("DISABLE_COMPILER_CACHE", False, _flag, "0 or 1",
       "1: nothing is read from or written to the cache directory (kernels compile every time; CPU libraries load from a private "
       "temporary directory; BEAM results are not kept)"),
)}


def get(name: str) -> Any:
  """The value of knob `name` from the environment (its default when unset or empty)."""
  k = KNOBS[name]
  raw = os.environ.get(name)
  if raw is None or not raw.strip(): return k.default
  try: return k.parse(raw.strip())
  except ValueError: raise KnobError(name, f"{name}={raw!r} is not allowed: {name} takes {k.allowed}") from None

def check_all() -> None:
  """Parse every knob now (a CLI calls this first, so a bad value is one line, not a failure deep inside)."""
  for name in KNOBS: get(name)

def table() -> str:
  """The knobs as a markdown table."""
  rows = ["| variable | values | effect |", "|---|---|---|"]
  rows += [f"| `{k.name}` | {k.allowed} | {k.doc} |" for k in KNOBS.values()]
  return "\n".join(rows)

