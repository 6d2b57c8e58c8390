"""placeholder"""
from __future__ import annotations


class MovementMixin:
  __slots__ = ()
