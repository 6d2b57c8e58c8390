"""The default mix of `python -m fuzz`: runtime-level workloads for a share of the run (fuzz/__main__.py _runtime_part)."""
from __future__ import annotations

import pytest

from fuzz.__main__ import RUNTIME_EVERY, _runtime_part, parser


def _args(*argv: str):
  return parser().parse_args(list(argv))

def test_runtime_share_is_one_workload_per_n_cases_and_off_when_asked(tmp_path):
  assert _runtime_part(_args("--cases", str(RUNTIME_EVERY - 1), "--corpus", str(tmp_path)), None) is None
  assert _runtime_part(_args("--cases", "640", "--runtime-share", "0", "--corpus", str(tmp_path)), None) is None
  assert _runtime_part(_args("--cases", "640", "--devices", "CPU", "--corpus", str(tmp_path)), None) is None   # the kernel level's devices named
  assert _runtime_part(_args("--seconds", "10", "--corpus", str(tmp_path)), 10.0) is None   # a share under 3 s is left out
  s = _runtime_part(_args("--cases", str(RUNTIME_EVERY), "--corpus", str(tmp_path)), None)
  assert s is not None and s["workloads"] == 1 and s["findings"] == [], s

@pytest.mark.parametrize("bad", ["1", "-0.1", "x"])
def test_runtime_share_must_be_a_fraction(bad, capsys):
  with pytest.raises(SystemExit) as e: _args("--runtime-share", bad)
  assert e.value.code == 2 and "--runtime-share takes a fraction" in capsys.readouterr().err
