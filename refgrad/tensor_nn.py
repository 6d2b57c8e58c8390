"""placeholder"""
from __future__ import annotations


class NNMixin:
  __slots__ = ()
