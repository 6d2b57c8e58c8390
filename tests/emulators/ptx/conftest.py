import pytest


@pytest.fixture(autouse=True, scope="module")
def _mockgpu():
  mp = pytest.MonkeyPatch()
  mp.setenv("MOCKGPU", "1")
  yield
  mp.undo()
