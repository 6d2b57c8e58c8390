"""placeholder"""
from __future__ import annotations


class MathMixin:
  __slots__ = ()
