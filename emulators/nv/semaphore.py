"""Semaphore memory operations shared by host SEM_EXECUTE, the copy engine and QMD releases (docs/hw/NV.md §4.1, §6, §7).

Layout of a 16-byte semaphore: payload at +0 (bytes 4-7 are 0 for a 32-bit payload), 64-bit ns timestamp at +8,
written before the payload. Alignment: 4 bytes, 8 for a 64-bit payload, 16 with a timestamp.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulators.fault import Fault
from refgrad.hw.nv import SEM_OP


def _circ_geq(sv: int, pv: int, bits: int) -> bool: return ((sv - pv) & ((1 << bits) - 1)) < (1 << (bits - 1))

# SEM_EXECUTE OPERATION -> (name, condition(SV, PV, bits)) for the acquires
ACQUIRES: dict[int, tuple[str, Callable[[int, int, int], bool]]] = {
  SEM_OP["ACQUIRE"]: ("ACQUIRE (==)", lambda sv, pv, bits: sv == pv),
  SEM_OP["ACQ_STRICT_GEQ"]: ("ACQ_STRICT_GEQ (>= unsigned)", lambda sv, pv, bits: sv >= pv),
  SEM_OP["ACQ_CIRC_GEQ"]: ("ACQ_CIRC_GEQ (>= wrap-aware)", _circ_geq),
  SEM_OP["ACQ_AND"]: ("ACQ_AND ((SV & PV) != 0)", lambda sv, pv, bits: (sv & pv) != 0),
  SEM_OP["ACQ_NOR"]: ("ACQ_NOR (~(SV | PV) != 0)", lambda sv, pv, bits: (~(sv | pv) & ((1 << bits) - 1)) != 0),
}

def _signed(x: int, bits: int) -> int: return x - (1 << bits) if x >> (bits - 1) else x

# reduction name -> new value(SV, PV, bits, signed); INC/DEC wrap like CUDA's atomicInc/atomicDec
REDUCTIONS: dict[str, Callable[[int, int, int, bool], int]] = {
  "IMIN": lambda sv, pv, bits, s: min(sv, pv, key=lambda x: _signed(x, bits) if s else x),
  "IMAX": lambda sv, pv, bits, s: max(sv, pv, key=lambda x: _signed(x, bits) if s else x),
  "IXOR": lambda sv, pv, bits, s: sv ^ pv,
  "IAND": lambda sv, pv, bits, s: sv & pv,
  "IOR": lambda sv, pv, bits, s: sv | pv,
  "IADD": lambda sv, pv, bits, s: sv + pv,
  "INC": lambda sv, pv, bits, s: 0 if sv >= pv else sv + 1,
  "DEC": lambda sv, pv, bits, s: pv if sv == 0 or sv > pv else sv - 1,
}


def check_align(addr: int, align: int, engine: str, what: str) -> None:
  if addr % align: raise Fault(f"misaligned semaphore: {what} at 0x{addr:x} must be {align}-byte aligned", engine, addr)


def release(dev: Any, pid: int, addr: int, value: int, nbytes: int, timestamp: bool, engine: str, what: str, done: int | None = None) -> None:
  """Write the payload (and first the ns timer at +8); a release for the hazard checker (`done`: see Hazards.release)."""
  vm = dev.vm
  if timestamp:
    vm.write_uint(addr + 8, 8, dev.read_timer(), engine, f"{what} timestamp")
    nbytes = 8   # the 16-byte structure: a 32-bit payload has zero high bytes
  vm.write_uint(addr, nbytes, value, engine, what)
  dev.hz.release(pid, addr, value & ((1 << (8 * nbytes)) - 1), nbytes, done=done)


def reduce(dev: Any, pid: int, addr: int, op: str, value: int, nbytes: int, signed: bool, engine: str, what: str,
           done: int | None = None) -> None:
  """Atomic read-modify-write with `value` as operand."""
  bits = 8 * nbytes
  mask = (1 << bits) - 1
  sv = dev.vm.read_uint(addr, nbytes, engine, what)
  new = REDUCTIONS[op](sv, value & mask, bits, signed) & mask
  dev.vm.write_uint(addr, nbytes, new, engine, what)
  dev.hz.release(pid, addr, new, nbytes, rmw=True, done=done)
