import pytest


@pytest.fixture(autouse=True, scope="module")
def _mockgpu():
  """The renderer tests run their PTX on the mock NV GPU (Device["NV"].run_ptx)."""
  mp = pytest.MonkeyPatch()
  mp.setenv("MOCKGPU", "1")
  yield
  mp.undo()
