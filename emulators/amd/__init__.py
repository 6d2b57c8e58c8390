"""The mock AMD GPU (gfx11 / RDNA3, wave32; facts: docs/hw/AMD.md): PM4 compute queues and SDMA copy queues.

- `regs`: the compute (SH) registers a dispatch reads, one row per register, and the field layouts of the registers
  the dispatch checks.
- `pm4`: the compute queue's type-3 packet decoder, one row per opcode (size rule, action).
- `sdma`: the copy queue's packet decoder, one row per (opcode, sub-opcode).
- `ring`: the queue itself: ring buffer, read/write pointers and doorbell in the units of §6 (PM4 dwords, SDMA bytes),
  wrap, indirect buffers, faults with ring offsets, hazard clocks; `make_channel` for emulators.mock_driver.
"""
