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
  """One of names, matched without regard to case and returned as spelled in names."""
  by_fold = {n.casefold(): n for n in names}
  def parse(s: str) -> str:
    if (n := by_fold.get(s.casefold())) is None: raise ValueError
    return n
  return parse

def _device(s: str) -> str:
  if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(:[0-9]+)?", s): raise ValueError
  return s

def _path(s: str) -> Path: return Path(s).expanduser().absolute()

def _order(s: str) -> int | None:
  """None for round-robin, else the seed."""
  if s == "rr": return None
  head, _, n = s.partition(":")
  if head != "seed" or not n.isdigit(): raise ValueError
  return int(n)

def _jit(s: str) -> int:
  if s not in ("0", "1", "2"): raise ValueError
  return int(s)

def _seconds(s: str) -> float:
  try: v = float(s)
  except ValueError: raise ValueError from None
  if not v > 0 or v == float("inf"): raise ValueError
  return v


KNOBS: dict[str, Knob] = {k.name: k for k in (
  Knob("DEV", "CPU", _device, "a device name such as CPU or PYTHON (optionally NAME:n)",
       "default device of tensors and tests (also settable as `Device.DEFAULT = \"PYTHON\"`)"),
  Knob("EMULATE", "", _choice("CUDA", "AMD"), "CUDA or AMD",
       "compile every kernel for that GPU target (limits, vector width, tensor cores, lane layouts); the PYTHON device then "
       "refuses programs the GPU could not run"),
  Knob("NV_CODE", "ptx", _choice("ptx", "ir", "nvcc"), "ptx, ir or nvcc",
       "what the NV device uploads: ptx = refgrad's own PTX renderer's module, run by the mock's PTX executor (default); ir = the "
       "serialized linear program; nvcc = the CUDA renderer's source compiled by `nvcc --ptx -arch=sm_80` and run by the PTX "
       "executor (cached like every compile)"),
  Knob("AMD_CODE", "isa", _choice("ir", "isa"), "ir or isa",
       "what the AMD device uploads: isa = LLVM IR compiled by llvmlite for gfx1100, the code object linked by refgrad and run "
       "as RDNA3 machine code by the mock (default; docs/hw/amd_code_object.md); ir = the serialized linear program"),
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
  Knob("MOCKGPU", False, _flag, "0 or 1",
       "1: the NV and AMD devices run on the mock GPUs of emulators/ (without it DEV=NV/AMD raises, saying to set it); the frontend "
       "tests, `python -m conformance` and `python -m fuzz` set it themselves for their mock-GPU runs"),
  Knob("MOCKGPU_ORDER", None, _order, "rr or seed:N (N an integer >= 0)",
       "how the mock GPUs pick the next ready queue: round-robin (rr, the default) or a seeded random interleaving"),
  Knob("MOCKGPU_HAZARDS", True, _flag, "0 or 1",
       "1 (default): the mock GPUs report unordered conflicting accesses of different queues as `GPUHazard`; 0 turns the checker off"),
  Knob("JIT", 1, _jit, "0, 1 or 2", "TinyJit: 1 (default) captures and replays; 0 calls the function every time; 2 replays launch by launch, "
       "without HCQ command buffers"),
  Knob("HCQ_TIMEOUT", 300.0, _seconds, "a number of seconds > 0",
       "how long a host wait on an NV/AMD device may last before a TimeoutError (a backstop: deadlocks are reported at once)"),
)}


def get(name: str) -> Any:
  """The value of knob `name` from the environment (its default when unset or empty)."""
  return parse(name, os.environ.get(name))

def parse(name: str, raw: str | None) -> Any:
  """The value of knob `name` for the text `raw` (None or blank: the default)."""
  k = KNOBS[name]
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

