"""The queue ordering model, one row per command of the ORDERING tables (emulators/nv/host.py, emulators/amd/pm4.py):
launch A writes o1, launch B reads it; what stands between them decides whether the checker reports a hazard."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.mock_driver import make_driver
from refgrad.runtime.driver import GPUHazard

from . import amdenc as A
from .kernels import Launcher, add_kernel, compute_stream
from .nvenc import COMPUTE, COPY, HOST, REL32, ce_copy, inc, sem, set_object

N = 16


def _bufs(drv):
  a, b, o1, o2, sig, x = (drv.alloc(4 * N, True) for _ in range(6))
  a.host.view(np.float32)[:], b.host.view(np.float32)[:] = np.arange(N), 10
  return a, b, o1, o2, sig, x

def _run(drv) -> str | None:
  """The hazard report of running everything, or None."""
  try: drv.run_until_idle()
  except GPUHazard as e: return str(e)
  return None

# what stands between the launches (sig: a semaphore, x: a spare buffer) -> ordered
NV_BETWEEN = {
  "nothing": (lambda sig, x: [], False),
  "WFI": (lambda sig, x: inc(HOST, 0x78, 1), True),
  "SEM_EXECUTE release with RELEASE_WFI": (lambda sig, x: sem(sig, 1, REL32), True),
  "SEM_EXECUTE release without RELEASE_WFI": (lambda sig, x: sem(sig, 1, REL32 & ~(1 << 20)), False),
  "compute WAIT_FOR_IDLE (ignored)": (lambda sig, x: inc(COMPUTE, 0x110, 0), False),
  "a copy on subchannel 4 (switch: wait for idle)": (lambda sig, x: [*set_object(COPY, 0xC6B5), *ce_copy(x, x + 32, 16)], True),
}

@pytest.mark.parametrize("name", NV_BETWEEN)
def test_nv_ordering_commands(name):
  between, ordered = NV_BETWEEN[name]
  drv = make_driver("NV", 0)
  a, b, o1, o2, sig, x = _bufs(drv)
  ka, kb = Launcher(drv, add_kernel(N), [o1.va, a.va, b.va]), Launcher(drv, add_kernel(N), [o2.va, o1.va, b.va])
  compute_stream(drv).entry([*ka.words(), *between(sig.va, x.va), *kb.words(), *inc(HOST, 0x78, 1)])
  msg = _run(drv)
  if ordered:
    assert msg is None and (o2.host.view(np.float32) == np.arange(N) + 20).all()
  else:
    assert msg is not None and "both in flight on NV:0 compute (its launches 0 and 1)" in msg and f"buffer at 0x{o1.va:x}" in msg

def test_nv_qmd_release_orders_its_own_grid_only():
  """A's QMD release is written when A finishes: another queue acquiring it may read o1; it does not retire B."""
  drv = make_driver("NV", 0)
  a, b, o1, o2, sig, x = _bufs(drv)
  lo, hi = sig.va & 0xFFFFFFFF, sig.va >> 32
  ka = Launcher(drv, add_kernel(N), [o1.va, a.va, b.va], RELEASE0_ENABLE=1, RELEASE0_STRUCTURE_SIZE=1, RELEASE0_ADDRESS_LOWER=lo,
                RELEASE0_ADDRESS_UPPER=hi, RELEASE0_PAYLOAD_LOWER=1)
  kb = Launcher(drv, add_kernel(N), [o2.va, a.va, b.va])
  compute_stream(drv).entry([*ka.words(), *kb.words()])
  other = compute_stream(drv)
  other.entry([*sem(sig.va, 1, 0x00000003), *Launcher(drv, add_kernel(N), [x.va, o1.va, b.va]).words()])   # acquire >= 1, read o1
  assert _run(drv) is None and (x.host.view(np.float32) == np.arange(N) + 20).all()

AMD_BETWEEN = {
  "nothing": ([], False),
  "EVENT_WRITE CS_PARTIAL_FLUSH": (A.pkt3(A.EVENT_WRITE, 0x407), True),
  "EVENT_WRITE CACHE_FLUSH_AND_INV_EVENT": (A.pkt3(A.EVENT_WRITE, 0x16), False),
  "ACQUIRE_MEM": (A.pkt3(A.ACQUIRE_MEM, 0, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 0xA, 0xC3C1), False),
  "RELEASE_MEM": (None, True),
}

@pytest.mark.parametrize("name", AMD_BETWEEN)
def test_amd_ordering_commands(name):
  between, ordered = AMD_BETWEEN[name]
  drv = make_driver("AMD", 0)
  a, b, o1, o2, sig, _x = _bufs(drv)
  ka, kb = A.Kernel(drv, add_kernel(N), [o1.va, a.va, b.va]), A.Kernel(drv, add_kernel(N), [o2.va, o1.va, b.va])
  A.Ring(drv, "compute").push([*ka.words(flush=False), *(between if between is not None else A.release64(sig.va, 1)), *kb.words(flush=False)])
  msg = _run(drv)
  if ordered:
    assert msg is None and (o2.host.view(np.float32) == np.arange(N) + 20).all()
  else:
    assert msg is not None and "both in flight on AMD:0 compute (its launches 0 and 1)" in msg and f"buffer at 0x{o1.va:x}" in msg

@pytest.mark.parametrize("arch", ["NV", "AMD"])
def test_a_seed_runs_the_dependent_launch_first(arch, monkeypatch):
  """Without an ordering command some seeds run B before A (B reads o1 unwritten); none does with one."""
  monkeypatch.setenv("MOCKGPU_HAZARDS", "0")
  outcomes = {}
  for seed in range(8):
    monkeypatch.setenv("MOCKGPU_ORDER", f"seed:{seed}")
    for ordered in (False, True):
      drv = make_driver(arch, 0)
      a, b, o1, o2, _sig, _x = _bufs(drv)
      o1.host.view(np.float32)[:] = -1
      if arch == "NV":
        ka, kb = Launcher(drv, add_kernel(N), [o1.va, a.va, b.va]), Launcher(drv, add_kernel(N), [o2.va, o1.va, b.va])
        compute_stream(drv).entry([*ka.words(), *(inc(HOST, 0x78, 1) if ordered else []), *kb.words()])
      else:
        ka, kb = A.Kernel(drv, add_kernel(N), [o1.va, a.va, b.va]), A.Kernel(drv, add_kernel(N), [o2.va, o1.va, b.va])
        A.Ring(drv, "compute").push([*ka.words(flush=False), *(A.pkt3(A.EVENT_WRITE, 0x407) if ordered else []), *kb.words(flush=False)])
      assert drv.run_until_idle()
      outcomes[seed, ordered] = o2.host.view(np.float32).copy()
  assert all((outcomes[s, True] == np.arange(N) + 20).all() for s in range(8))
  stale = [s for s in range(8) if (outcomes[s, False] == 9).all()]   # -1 + 10
  assert stale and len(stale) < 8 and all((outcomes[s, False] == np.arange(N) + 20).all() for s in range(8) if s not in stale)
