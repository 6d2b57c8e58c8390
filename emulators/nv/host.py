"""Host (PBDMA) methods of class C56F: every method below 0x100, whatever the subchannel (NV.md §4)."""
from __future__ import annotations

from typing import Any

from emulators.fault import Fault
from emulators.nv import semaphore
from emulators.nv.methods import BLOCKED, DONE, Method, field, table

SEM_ADDR_LO, SEM_ADDR_HI, SEM_PAYLOAD_LO, SEM_PAYLOAD_HI, SEM_EXECUTE = 0x5C, 0x60, 0x64, 0x68, 0x6C
RELEASE, REDUCTION = 1, 6
# MEM_OP_D OPERATION values the fact sheet names; the mock's memory is coherent, so each is a no-op
MEM_OPS = {5: "MEMBAR", 9: "MMU_TLB_INVALIDATE", 0xE: "L2_SYSMEM_INVALIDATE", 0x10: "L2_FLUSH_DIRTY"}


# The queue ordering model (README "Ordering inside a queue"): a QMD launch stays in flight, overlapping later launches of
# the channel, until one of these retires it. One row per command: (what it orders, the source in docs/hw/NV.md).
ORDERING: dict[str, tuple[str, str]] = {
  "WFI (0x078)": ("every launch before it finishes first", "NV.md §4 (WFI)"),
  "SEM_EXECUTE release / reduction with RELEASE_WFI=1": ("every launch before it finishes before the write", "NV.md §4.1 bit 20"),
  "switching between the copy subchannel and compute": ("a wait for idle", "NV.md §1 (dev_ram.ref)"),
  "QMD RELEASEn semaphores": ("their own grid only (written after the grid finishes)", "NV.md §6"),
  "SEM_EXECUTE release without RELEASE_WFI": ("nothing in flight", "NV.md §4.1 bit 20"),
  "compute WAIT_FOR_IDLE (0x110)": ("nothing: ignored", "NV.md §5"),
  "copy engine LAUNCH_DMA": ("in order: the fact sheet states no overlap of copies", "NV.md §7"),
}


class HostEngine:
  label = "C56F (AMPERE_CHANNEL_GPFIFO_A host methods)"
  engine = "host"

  def __init__(self, ch: Any):
    self.ch = ch
    self.regs: dict[int, int] = {}
    self.table = TABLE


def set_object(eng: HostEngine, v: int) -> None:
  eng.ch.bind(eng.ch.subch, v & 0xFFFF)

def set_reference(eng: HostEngine, v: int) -> None:
  eng.ch.userd32[0x48 // 4] = v   # USERD Reference

def non_stall_interrupt(eng: HostEngine, v: int) -> None:
  eng.ch.interrupts.append(v)

def mem_op_d(eng: HostEngine, v: int) -> None:
  op = field(v, 31, 27)
  if op not in MEM_OPS: raise Fault(f"MEM_OP_D operation 0x{op:x} is not one the mock knows ({', '.join(f'{k:#x} {n}' for k, n in MEM_OPS.items())})", "host")

def wfi(eng: HostEngine, v: int) -> None:
  eng.ch.flight.retire()


def legacy_semaphore(eng: HostEngine, v: int) -> None:
  raise Fault("the legacy SEMAPHOREA..D methods are not emulated: use SEM_ADDR_LO..SEM_EXECUTE (0x5C..0x6C)", "host")

def sem_execute(eng: HostEngine, v: int) -> int:
  """Acquire (blocks until the condition holds), release (optionally with timestamp) or reduction."""
  r, ch = eng.regs, eng.ch
  addr = (field(r.get(SEM_ADDR_HI, 0), 7, 0) << 32) | (r.get(SEM_ADDR_LO, 0) & 0xFFFFFFFC)
  op, is64, ts = field(v, 2, 0), field(v, 24, 24), field(v, 25, 25)
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
  if op in (RELEASE, REDUCTION) and field(v, 20, 20): ch.flight.retire()   # RELEASE_WFI: wait for idle before writing
  if op == RELEASE:
    ch.dev.counters["sem_release"] += 1
    semaphore.check_align(addr, 16 if ts else nbytes, "host", f"{nbytes * 8}-bit release{' with timestamp' if ts else ''} of a {what}")
    semaphore.release(ch.dev, ch.pid, addr, payload, nbytes, bool(ts), "host", what)
    return DONE
  if op == REDUCTION:
    semaphore.check_align(addr, nbytes, "host", f"{nbytes * 8}-bit reduction of a {what}")
    if (ri := field(v, 30, 27)) >= len(semaphore.HOST_REDUCTIONS):
      raise Fault(f"SEM_EXECUTE 0x{v:08x}: REDUCTION {ri} is not a reduction (0-7)", "host", addr)
    red = semaphore.HOST_REDUCTIONS[ri]
    semaphore.reduce(ch.dev, ch.pid, addr, red, payload, nbytes, not field(v, 31, 31), "host", what)
    return DONE
  raise Fault(f"SEM_EXECUTE 0x{v:08x} has OPERATION {op}, which is not an operation (0-6)", "host", addr)


TABLE = table("C56F", [
  Method("SET_OBJECT", 0x000, set_object),
  Method("NOP", 0x008),
  *(Method(f"SEMAPHORE{c}", 0x010 + 4 * i, legacy_semaphore) for i, c in enumerate("ABCD")),
  Method("NON_STALL_INTERRUPT", 0x020, non_stall_interrupt),
  Method("MEM_OP_A", 0x028), Method("MEM_OP_B", 0x02C), Method("MEM_OP_C", 0x030), Method("MEM_OP_D", 0x034, mem_op_d),
  Method("SET_REFERENCE", 0x050, set_reference),
  Method("SEM_ADDR_LO", SEM_ADDR_LO), Method("SEM_ADDR_HI", SEM_ADDR_HI),
  Method("SEM_PAYLOAD_LO", SEM_PAYLOAD_LO), Method("SEM_PAYLOAD_HI", SEM_PAYLOAD_HI),
  Method("SEM_EXECUTE", SEM_EXECUTE, sem_execute),
  Method("WFI", 0x078, wfi),   # wait for idle: the launches in flight finish (an ordering command, README)
])
