"""The mock NV GPU (Ampere-class): GPFIFO channels (C56F), compute (C6C0/C7C0) and copy (C6B5/C7B5) classes, QMD V03_00.
Formats: docs/hw/NV.md. Entry point for the driver: `channel.make_channel`."""
