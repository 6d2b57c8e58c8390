"""placeholder"""
from __future__ import annotations


class CreationMixin:
  __slots__ = ()
