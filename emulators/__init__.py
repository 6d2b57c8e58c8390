"""Mock hardware: GPUs that decode and execute real-format command queues in software.

`emulators.mock_driver.make_driver(arch, index)` is what refgrad's driver loader calls under MOCKGPU=1.
The layers, bottom up (arch-neutral unless named):
- `vm`: a GPU virtual address space over host memory; unmapped accesses are MMU faults.
- `fault`: the internal fault carried up to the channel, which adds where it happened.
- `hazards`: vector clocks per queue + host; reports unordered conflicting accesses.
- `order`: which ready queue runs next (round-robin or a seeded shuffle, MOCKGPU_ORDER).
- `executors`: kernel bodies, chosen by the program image's magic.
- `dispatch`: a decoded launch -> program image, kernel arguments, buffers, hazard records, run.
- `nv/`: the NV formats (GPFIFO, method headers, host/compute/copy classes, QMD V03_00).
"""
