"""RDNA3 (gfx11, wave32) machine code on the mock AMD GPU: the encoding tables (formats.py, opcodes.py), the decoder and
LLVM-style disassembly (decode.py), the operation tables (ops.py, alu.py) and the wave machine (machine.py,
execute.py). `launch` is what the PM4 DISPATCH_DIRECT of a program that is not a serialized image runs."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulators.amd.rdna3.machine import Machine, WaveFault
from emulators.fault import Fault
from emulators.heap import keep_freed_memory

FLOAT_MODE_EMULATED = 0xF0   # RSRC1.FLOAT_MODE: round to nearest even (bits 3:0 = 0), f32 and f16/f64 denormals kept (7:4 = 0xF)


def code_name(pgm: int) -> str:
  """How faults name machine code no loader registered a symbol for: its address."""
  return f"<RDNA3 code at 0x{pgm:x}>"


def check_modes(rsrc1: int, where: str, kernel: str | None = None) -> None:
  """The float modes the executor implements (LLVM's defaults): anything else is refused by name, never approximated."""
  fm = (rsrc1 >> 12) & 0xFF
  if fm != FLOAT_MODE_EMULATED:
    raise Fault(f"{where}: RSRC1.FLOAT_MODE 0x{fm:02x} is not emulated (only 0xf0: round to nearest even, denormals kept)", "compute", None, kernel)
  if not (rsrc1 >> 23) & 1:
    raise Fault(f"{where}: RSRC1.IEEE_MODE 0 is not emulated (min/max/NaN quieting follow IEEE mode)", "compute", None, kernel)


def launch(vm: Any, pgm: int, rsrc1: int, rsrc2: int, user: list[int], grid: tuple[int, int, int], block: tuple[int, int, int],
           lds_bytes: int, checked: bool, private_bytes: int = 0,
           record: Callable[[str, list[tuple[int, list[tuple[int, int, bool]]]]], None] | None = None, kernel: str | None = None) -> None:
  """Run RDNA3 machine code at GPU address `pgm` for a dispatch; a WaveFault becomes a Fault naming the program: `kernel`
  (the registered symbol holding `pgm`, MockDriver.symbol_at), else its address. `record(name, accesses)` gets the
  global memory the dispatch read and wrote (Machine.accesses), also after a fault."""
  name = kernel or code_name(pgm)
  keep_freed_memory()   # the executor's temporaries reuse freed heap instead of fresh pages (emulators/heap.py)
  m = None
  try:
    m = Machine(vm, pgm, name, rsrc1, rsrc2, user, grid, block, lds_bytes, checked, private_bytes)
    m.run()
  except WaveFault as f: raise Fault(f.what, f.kind, f.address, name) from None
  finally:
    if record is not None and m is not None: record(name, m.accesses())
