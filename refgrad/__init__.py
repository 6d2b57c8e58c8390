"""refgrad: a small tensor compiler that is the reference emulator and test oracle for its own backends."""
from refgrad import nn
from refgrad.device import Buffer, Device
from refgrad.dtype import DType, dtypes
from refgrad.jit import TinyJit
from refgrad.tensor import Tensor

__all__ = ["Buffer", "DType", "Device", "Tensor", "TinyJit", "dtypes", "nn"]
