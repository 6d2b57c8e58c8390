"""Hardware facts, written once: one declarative table per architecture (`nv`, `amd`), the one bit-field helper
(`bits`), the program-image container both the runtimes and the mock GPUs use (`image`). The runtimes encode from these
tables and the mock GPUs (emulators/) decode from them; every fact cites its section of docs/hw/NV.md or docs/hw/AMD.md.
Nothing here imports the rest of refgrad."""
