"""The mock AMD GPU against the PYTHON device. Prints tables; run `python -m bench.bench_amd` (sets MOCKGPU=1).

1. The tensor programs of bench/bench_tensor.py on PYTHON (CPU target), PYTHON with EMULATE=AMD (the very programs AMD
   runs: AMD's target is AMD) and AMD: everything a user pays per call, scheduling, launches through PM4 (the dispatch
   recipe in an indirect buffer, one INDIRECT_BUFFER packet + doorbell per submission), copies through SDMA, the copy back
   to numpy. The mock's overhead is AMD over PYTHON-EMULATE=AMD.
2. Launches per second of a tiny kernel through the full command path (enqueue rate and end to end), next to PYTHON and NV.
The JIT'd MLP step: `python -m bench.bench_jit --devices PYTHON/AMD AMD`.
"""
from __future__ import annotations

from bench import bench_nv

if __name__ == "__main__":
  bench_nv.main("AMD", "AMD", ("PYTHON", "NV", "AMD"), __doc__)
