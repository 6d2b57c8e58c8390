"""refgrad: a small tensor compiler that is the reference emulator and test oracle for its own backends."""
from refgrad.device import Buffer, Device
from refgrad.dtype import DType, dtypes

__all__ = ["Buffer", "DType", "Device", "dtypes"]
