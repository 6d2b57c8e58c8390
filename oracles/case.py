"""A fuzz case and a check's result, as plain JSON-able data (cases travel to worker processes and to disk).

A case is a kernel AST (oracles/astjson.py rows) x a target x a list of Opts x input values (a seed and a mode,
oracles/inputs.py). Cases that share kernel, target and inputs form a group: the unoptimized kernel is lowered, run and
compared once per group. Findings are saved as JSON (`FINDING_FORMAT`) and checked field by field when read back.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from refgrad.device import write_atomic
from refgrad.opt import Opt, OptOps

FINDING_FORMAT = "refgrad.fuzz.finding/1"
ORACLES = {
  "device": "a device differs from PYTHON on the same linear program (same_bits)",
  "cross-opt": "the optimized kernel differs from the unoptimized one (exactly: ints, bools, exact-input floats; else a tolerance)",
  "redzone": "a CPU kernel wrote into the sentinel bytes around a buffer (out-of-bounds store)",
  "checked": "the PYTHON device reports undefined behaviour in the optimized kernel, the unoptimized one is clean",
  "ast-eval": "the unoptimized kernel on PYTHON differs from the AST evaluated directly (before symbolic simplification)",
  "program": "the whole tensor program, fused vs every step realized (fusion off), gives different bits on PYTHON",
  "numpy": "the whole tensor program on PYTHON differs from the numpy interpreter of its Tensor ops (bits, or the stated bound)",
  "grad": "refgrad's gradient of the program differs from float64 central differences on the numpy interpreter",
  "limits": "a realized tensor of up to 2**31-1 elements is refused, or one of 2**31 is scheduled (big_view programs)",
  "runtime": "(--level runtime) an HCQ workload on the mock GPUs differs from its host model, or hangs, faults or trips the hazard checker",
  "compile": "lowering, linearizing, rendering or compiling a valid Opt list failed",
  "reference": "the PYTHON device failed with an error that is not a report of undefined behaviour",
  "fp-state": "a backend call changed the process's floating-point control state (FTZ/DAZ, rounding mode: oracles/fpstate.py)",
  "crash": "the worker process died (signal or abort) while checking the case",
  "timeout": "checking the case took longer than the per-case limit",
}


@dataclass
class Case:
  index: int                       # position in the case stream (same seed and options: same case)
  kernel: str                      # the kernel's name, for people
  ast: list[Any]                   # astjson rows
  target: str                      # CPU | CUDA | AMD
  opts: list[list[Any]]            # [[op name, axis, arg], ...]
  inputs: dict[str, Any]           # {"seed": int, "mode": "random" | "exact" | "simple"}
  source: str = "program"          # program | model | corpus
  recipe: dict[str, Any] | None = None   # the tensor program a generated kernel came from (for shrinking)
  def group_key(self) -> str:
    return hashlib.sha256(json.dumps([self.ast, self.target, self.inputs], sort_keys=True).encode()).hexdigest()
  def to_json(self) -> dict[str, Any]: return asdict(self)
  def key(self) -> str:
    """A hash of the whole case (index included): equal keys, equal cases."""
    return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]
  @staticmethod
  def from_json(d: Any) -> Case:
    if not isinstance(d, dict): raise ValueError("a case is a JSON object")
    want = {"index": int, "kernel": str, "ast": list, "target": str, "opts": list, "inputs": dict, "source": str}
    for k, t in want.items():
      if not isinstance(d.get(k), t): raise ValueError(f"case field {k!r} must be a {t.__name__}, got {type(d.get(k)).__name__}")
    if d["target"] not in ("CPU", "CUDA", "AMD"): raise ValueError(f"case target {d['target']!r} is not CPU, CUDA or AMD")
    for o in d["opts"]: opt_from_json(o)
    if not isinstance(d["inputs"].get("seed"), int) or d["inputs"].get("mode") not in ("random", "exact", "simple"):
      raise ValueError(f"case inputs must be {{'seed': int, 'mode': random|exact|simple}}, got {d['inputs']!r}")
    if d.get("recipe") is not None and not isinstance(d["recipe"], dict): raise ValueError("case recipe must be an object or null")
    return Case(d["index"], d["kernel"], d["ast"], d["target"], d["opts"], d["inputs"], d["source"], d.get("recipe"))


def opt_to_json(o: Opt) -> list[Any]: return [o.op.name, o.axis, o.arg]

def first_op(first_diff: dict[str, Any] | None) -> str:
  """The op named by a first difference ("MAX"), "" where none was found."""
  return first_diff["op"] if first_diff else ""

def opt_from_json(x: Any) -> Opt:
  if not (isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) and x[0] in OptOps.__members__
          and all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in x[1:])):
    raise ValueError(f"not an Opt [op name, axis, arg]: {x!r}")
  return Opt(OptOps[x[0]], x[1], x[2])


@dataclass
class Result:
  index: int
  status: str                      # pass | fail | ub | invalid
  oracle: str = ""                 # for fail: a key of ORACLES
  device: str = ""                 # the device that disagreed / failed
  detail: str = ""
  expected: str = ""               # sha256 of the expected buffers' bytes
  actual: str = ""
  exact: bool = False              # the cross-Opt check was bit-exact
  target: str = ""
  opt_kinds: list[str] = field(default_factory=list)
  case: dict[str, Any] | None = None   # the failing case (fail only)
  key: str = ""                    # Case.key() of the case checked
  regenerated: bool = False        # its inputs were undefined behaviour and were regenerated ("simple" mode)
  values: dict[str, Any] | None = None   # fail: the buffers as bits (oracles/check.py values_of)
  dtype: str = ""                  # fail: the dtype of the first buffer that differs, where known
  coverage: dict[str, Any] | None = None   # the last Result of a fuzz job: its coverage counts (refgrad/coverage.py snapshot)
  first_diff: dict[str, Any] | None = None   # device fail: the first UOp whose value differs (oracles/firstdiff.py), where found
  def signature(self) -> tuple[str, str, str, str]:
    """What groups findings (triage): the oracle, the device, the dtype where the difference shows, and the first
    differing op ("" where not known)."""
    return (self.oracle, self.device, self.dtype, first_op(self.first_diff))


@dataclass
class Finding:
  """A failure as saved: the (shrunk) case, what failed, and the case before shrinking."""
  case: Case
  oracle: str
  device: str
  detail: str
  expected: str = ""
  actual: str = ""
  original: Case | None = None
  note: str = ""                   # for people: where the case came from, what was fixed
  values: dict[str, Any] | None = None   # the buffers as bits: dtypes, inputs, expected, actual (oracles/check.py values_of)
  dtype: str = ""                  # the dtype where the difference shows
  duplicates: int = 0              # later findings with the same signature in the run that saved this one (not saved again)
  first_diff: dict[str, Any] | None = None   # where the first difference arises: {"op", "dtype", "uop_index", "element"} (a UOp of
                                             # the program) or {"op", "dtype", "step"} (a step of a tensor program)
  def signature(self) -> tuple[str, str, str, str]: return (self.oracle, self.device, self.dtype, first_op(self.first_diff))
  def rerun(self, path: Path) -> str:
    """The one-line command that checks this finding again against the device it names."""
    dev = f" --devices {self.device}" if self.device not in ("PYTHON", "") else ""
    return f"python -m fuzz replay {path}{dev}"
  def to_json(self, path: Path | None = None) -> dict[str, Any]:
    return {"format": FINDING_FORMAT, "oracle": self.oracle, "device": self.device, "dtype": self.dtype, "detail": self.detail,
            "rerun": self.rerun(path) if path is not None else "",
            "first_diff": self.first_diff, "expected": self.expected, "actual": self.actual, "values": self.values,
            "duplicates": self.duplicates, "note": self.note, "case": self.case.to_json(), "original": self.original.to_json() if self.original else None}
  @property
  def content_hash(self) -> str:
    """What identifies a finding across runs and shards: the shrunk case (not its index) and the failure."""
    c = self.case.to_json()
    c.pop("index")
    return hashlib.sha256(json.dumps([c, self.oracle, self.device], sort_keys=True).encode()).hexdigest()[:16]
  def save(self, directory: Path) -> Path:
    """Write atomically as <directory>/<oracle>-<content hash>.json (shards merge by content hash)."""
    path = Path(directory) / f"{self.oracle}-{self.content_hash}.json"
    write_atomic(path, (json.dumps(self.to_json(path), indent=1) + "\n").encode())
    return path
  @staticmethod
  def load(path: Path) -> Finding:
    """Read and check a saved finding; ValueError names the file and what is wrong."""
    try:
      d = json.loads(Path(path).read_text())
      if not isinstance(d, dict) or d.get("format") != FINDING_FORMAT: raise ValueError(f"expected a JSON object with \"format\": {FINDING_FORMAT!r}")
      if d.get("oracle") not in ORACLES: raise ValueError(f"unknown oracle {d.get('oracle')!r}")
      for k in ("device", "detail", "expected", "actual"):
        if not isinstance(d.get(k), str): raise ValueError(f"field {k!r} must be a string")
      for k in ("note", "dtype", "rerun"):
        if not isinstance(d.get(k, ""), str): raise ValueError(f"field {k!r} must be a string")
      if not isinstance(d.get("duplicates", 0), int) or d.get("duplicates", 0) < 0: raise ValueError("field 'duplicates' must be an int >= 0")
      values = d.get("values")
      if values is not None and not (isinstance(values, dict) and all(isinstance(values.get(k), list) and all(isinstance(x, str) for x in values[k])
                                                                     for k in ("dtypes", "inputs", "expected", "actual"))):
        raise ValueError("field 'values' must be null or an object of lists of strings: dtypes, inputs, expected, actual")
      fd = d.get("first_diff")
      if fd is not None and not (isinstance(fd, dict) and isinstance(fd.get("op"), str) and isinstance(fd.get("dtype"), str)
                                 and (all(isinstance(fd.get(k), int) for k in ("uop_index", "element")) or isinstance(fd.get("step"), int))):
        raise ValueError("field 'first_diff' must be null or an object with op, dtype (strings) and uop_index, element or step (ints)")
      return Finding(Case.from_json(d.get("case")), d["oracle"], d["device"], d["detail"], d["expected"], d["actual"],
                     Case.from_json(d["original"]) if d.get("original") is not None else None, d.get("note", ""), values,
                     d.get("dtype", ""), d.get("duplicates", 0), fd)
    except (ValueError, OSError) as e: raise ValueError(f"{path}: not a fuzz finding: {e}") from None
