"""Host (PBDMA) methods of class C56F: every method below 0x100, whatever the subchannel (docs/hw/NV.md §4)."""
from __future__ import annotations

from typing import Any

from emulators.fault import Fault
from emulators.nv import semaphore
from emulators.nv.methods import BLOCKED, DONE, Method, table
from refgrad.hw import bits
from refgrad.hw import nv as NV
from refgrad.hw.nv import HOST

SEM_ADDR_LO, SEM_ADDR_HI, SEM_PAYLOAD_LO, SEM_PAYLOAD_HI = HOST["SEM_ADDR_LO"], HOST["SEM_ADDR_HI"], HOST["SEM_PAYLOAD_LO"], HOST["SEM_PAYLOAD_HI"]
RELEASE, REDUCTION = NV.SEM_OP["RELEASE"], NV.SEM_OP["REDUCTION"]
SE = NV.SEM_EXECUTE
MEM_OPS = NV.MEM_OPS   # MEM_OP_D operations: the mock's memory is coherent, so each is a no-op


# The queue ordering model (README "Ordering inside a queue"): a QMD launch stays in flight, overlapping later launches of
# the channel, until one of these retires it. One row per command: (what it orders, the source in docs/hw/NV.md).
ORDERING: dict[str, tuple[str, str]] = {
  "WFI (0x078)": ("every launch before it finishes first", "docs/hw/NV.md §4 (WFI)"),
  "SEM_EXECUTE release / reduction with RELEASE_WFI=1": ("every launch before it finishes before the write", "docs/hw/NV.md §4.1 bit 20"),
  "switching between the copy subchannel and compute": ("a wait for idle", "docs/hw/NV.md §1 (dev_ram.ref)"),
  "QMD RELEASEn semaphores": ("their own grid only (written after the grid finishes)", "docs/hw/NV.md §6"),
  "SEM_EXECUTE release without RELEASE_WFI": ("nothing in flight", "docs/hw/NV.md §4.1 bit 20"),
  "compute WAIT_FOR_IDLE (0x110)": ("nothing: ignored", "docs/hw/NV.md §5"),
  "copy engine LAUNCH_DMA": ("in order: the fact sheet states no overlap of copies", "docs/hw/NV.md §7"),
}


class HostEngine:
  label = "C56F (AMPERE_CHANNEL_GPFIFO_A host methods)"
  engine = "host"

  def __init__(self, ch: Any):
    self.ch = ch
    self.regs: dict[int, int] = {}
    self.table = TABLE


def set_object(eng: HostEngine, v: int) -> None:
  eng.ch.bind(eng.ch.subch, bits.get(v, NV.SET_OBJECT["CLASS"]))

def set_reference(eng: HostEngine, v: int) -> None:
  eng.ch.userd32[NV.USERD["REFERENCE"] // 4] = v

def non_stall_interrupt(eng: HostEngine, v: int) -> None:
  eng.ch.interrupts.append(v)

def mem_op_d(eng: HostEngine, v: int) -> None:
  op = bits.get(v, NV.MEM_OP_D["OPERATION"])
  if op not in MEM_OPS: raise Fault(f"MEM_OP_D operation 0x{op:x} is not one the mock knows ({', '.join(f'{k:#x} {n}' for k, n in MEM_OPS.items())})", "host")

def wfi(eng: HostEngine, v: int) -> None:
  eng.ch.flight.retire()


def legacy_semaphore(eng: HostEngine, v: int) -> None:
  raise Fault("the legacy SEMAPHOREA..D methods are not emulated: use SEM_ADDR_LO..SEM_EXECUTE (0x5C..0x6C)", "host")

def sem_execute(eng: HostEngine, v: int) -> int:
  """Acquire (blocks until the condition holds), release (optionally with timestamp) or reduction."""
  r, ch = eng.regs, eng.ch
  addr = (bits.get(r.get(SEM_ADDR_HI, 0), NV.SEM_ADDR_HI["ADDRESS_HI"]) << 32) | (r.get(SEM_ADDR_LO, 0) & 0xFFFFFFFC)
  op, is64, ts = bits.get(v, SE["OPERATION"]), bits.get(v, SE["PAYLOAD_SIZE"]), bits.get(v, SE["RELEASE_TIMESTAMP"])
  nbytes = 8 if is64 else 4
  payload = r.get(SEM_PAYLOAD_LO, 0) | ((r.get(SEM_PAYLOAD_HI, 0) << 32) if is64 else 0)
  what = f"SEM_EXECUTE 0x{v:08x} semaphore"
  if (acq := semaphore.ACQUIRES.get(op)) is not None:
    semaphore.check_align(addr, nbytes, "host", f"{nbytes * 8}-bit acquire of a {what}")
    sv = ch.dev.vm.read_uint(addr, nbytes, "host", what)
    if not acq[1](sv, payload, 8 * nbytes):
      ch.blocked = (addr, nbytes, f"{acq[0]} {8 * nbytes}-bit", payload)
      return BLOCKED
    ch.blocked = None
    ch.dev.counters["sem_acquire"] += 1
    ch.dev.hz.acquire(ch.pid, addr, sv, nbytes)
    return DONE
  if op in (RELEASE, REDUCTION) and bits.get(v, SE["RELEASE_WFI"]): ch.flight.retire()   # RELEASE_WFI: wait for idle before writing
  if op == RELEASE:
    ch.dev.counters["sem_release"] += 1
    semaphore.check_align(addr, 16 if ts else nbytes, "host", f"{nbytes * 8}-bit release{' with timestamp' if ts else ''} of a {what}")
    semaphore.release(ch.dev, ch.pid, addr, payload, nbytes, bool(ts), "host", what)
    return DONE
  if op == REDUCTION:
    semaphore.check_align(addr, nbytes, "host", f"{nbytes * 8}-bit reduction of a {what}")
    if (ri := bits.get(v, SE["REDUCTION"])) >= len(NV.SEM_REDUCTIONS):
      raise Fault(f"SEM_EXECUTE 0x{v:08x}: REDUCTION {ri} is not a reduction (0-7)", "host", addr)
    red = NV.SEM_REDUCTIONS[ri]
    semaphore.reduce(ch.dev, ch.pid, addr, red, payload, nbytes, not bits.get(v, SE["REDUCTION_FORMAT"]), "host", what)
    return DONE
  raise Fault(f"SEM_EXECUTE 0x{v:08x} has OPERATION {op}, which is not an operation (0-6)", "host", addr)


ACTIONS = {"SET_OBJECT": set_object, **{f"SEMAPHORE{c}": legacy_semaphore for c in "ABCD"}, "NON_STALL_INTERRUPT": non_stall_interrupt,
           "MEM_OP_D": mem_op_d, "SET_REFERENCE": set_reference, "SEM_EXECUTE": sem_execute,
           "WFI": wfi}   # WFI: wait for idle, the launches in flight finish (an ordering command, README)
TABLE = table("C56F", [Method(name, off, ACTIONS.get(name)) for name, off in HOST.items()])
