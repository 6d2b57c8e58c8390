"""The executor's byte-index and column helpers give exactly what the numpy broadcasts they replace give."""
from __future__ import annotations

import numpy as np
import pytest

from emulators.nv.ptx.execute import _spread
from emulators.nv.ptx.fast import _columns

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("m", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("n", [0, 1, 5, 1024])
def test_spread_is_the_broadcast_add(n, m):
  first = RNG.integers(0, 1 << 40, n).astype(np.intp)
  got = _spread(first, m)
  assert got.dtype == first.dtype and np.array_equal(got, (first[:, None] + np.arange(m)).reshape(-1))


@pytest.mark.parametrize("dt", [np.uint32, np.uint64, np.uint16])
def test_columns_is_stack(dt):
  cols = [RNG.integers(0, 1 << 16, 777).astype(dt) for _ in range(4)]
  got = _columns(cols, dt)
  assert got.dtype == dt and got.flags.c_contiguous and np.array_equal(got, np.stack(cols, 1))
