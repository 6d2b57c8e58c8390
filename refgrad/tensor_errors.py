"""Old home of ShapeError, kept so `from refgrad.tensor_errors import ShapeError` keeps working (it lives in refgrad/tensor/errors.py)."""
from refgrad.tensor.errors import ShapeError

__all__ = ["ShapeError"]
