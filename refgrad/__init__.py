"""refgrad: a small tensor compiler that is the reference emulator and test oracle for its own backends."""
from refgrad.device import Buffer, Device
from refgrad.dtype import DType, dtypes
from refgrad.tensor import Tensor
from refgrad import nn  # noqa: E402

__all__ = ["Buffer", "DType", "Device", "Tensor", "dtypes", "nn"]
