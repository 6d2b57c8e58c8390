"""The `kernels` group: a fixed set of whole kernels x targets x Opts, checked with the fuzzer's oracles (oracles/check.py:
each device against PYTHON bit for bit, optimized against unoptimized, red zones, checked mode, the AST evaluator).

Kernels: the captured model kernels (oracles/models.json) and a few programs built for a path (a two-stage reduction, a
launch wider than the PYTHON executor's lane batch, a non-zero pad, boundary-dense constants), and a few whole programs
(`PROGRAMS`) checked with the tensor-level oracles too: gradients, fusion through pads, symbolic's divmod rules. Every Opt kind x
target x dtype class (half, float, int, bool) that some kernel accepts appears at least once, with the Opt alone
and again after an UPCAST (so PADTO + UPCAST makes gated vector memory, GROUP reduces with barriers, TC uses
tensor cores). Deterministic: the same cases every run."""
from __future__ import annotations

import itertools
from typing import Any

from conformance.suite import Result
from oracles.astjson import ast_from_json, ast_to_json
from oracles.case import Case, opt_to_json
from oracles.check import check_cases
from oracles.models import load_models
from oracles.programs import kernels_of
from refgrad.dtype import dtypes
from refgrad.kernel import Kernel
from refgrad.opt import InvalidOptError, Opt, OptOps, apply_opts
from refgrad.target import TARGETS
from refgrad.uop.ops import Ops, UOp

# programs built for a path the models do not take (oracles/programs.py recipes)
RECIPES = [
  {"dtype": "float", "shape": [5, 3], "steps": [["long_sum", 0, 1, 0]], "kernel": 0},              # two-stage sum
  {"dtype": "int", "shape": [7, 5], "steps": [["long_sum", 1, 1, 0]], "kernel": 0},
  {"dtype": "half", "shape": [64, 64], "steps": [["expand", 2, 0, 0], ["add_const", 1, 0, 0]], "kernel": 0},
  {"dtype": "char", "shape": [13, 5], "steps": [["pad_value", 40, 0, 0], ["mul_const", 42, 2, 0]], "kernel": 0},
  {"dtype": "uint", "shape": [12, 17], "steps": [["add_const", 5, 1, 0], ["lt_const", 6, 0, 0]], "kernel": 0},
  {"dtype": "bfloat16", "shape": [8, 12], "steps": [["pad_value", 3, 0, 1], ["sum", 1, 0, 0]], "kernel": 0},
  {"dtype": "bool", "shape": [16, 8], "steps": [["pad_value", 1, 0, 0], ["maximum", 1, 1, 1]], "kernel": 0},
]
# whole programs checked with their recipe (oracles/tensor_oracles.py and the AST evaluator on the kernel as scheduled,
# before symbolic simplification), unoptimized on the CPU target, input seed given: odd seeds run the gradient oracle
# (tensor_oracles.GRAD_EVERY), multiples of check.PROGRAM_EVERY the fused-vs-unfused one. (recipe, seed)
PROGRAMS = [
  # symbolic's divmod join and split rules on C division (oracles/programs.py divmod_join): unequal constants, values of
  # both signs, c1*n past the dtype's max, and equal constants (where the rules do fire)
  ({"dtype": "short", "shape": [7, 5], "steps": [["divmod_join", 4157, 0, 0]], "kernel": 0}, 3),
  ({"dtype": "int", "shape": [6, 5], "steps": [["divmod_join", 312, 1, 0]], "kernel": 0}, 5),
  ({"dtype": "uint", "shape": [6, 5], "steps": [["divmod_join", 312, 1, 0]], "kernel": 0}, 7),
  ({"dtype": "long", "shape": [5, 7], "steps": [["divmod_join", 4157, 1, 0]], "kernel": 0}, 9),
  ({"dtype": "char", "shape": [5, 7], "steps": [["divmod_join", 4149, 1, 0]], "kernel": 0}, 11),
  ({"dtype": "uchar", "shape": [5, 6], "steps": [["divmod_join", 5, 0, 0]], "kernel": 0}, 13),
  # flag and parity tests of masked bits on unsigned values (bit_test), where symbolic's bounds of x & m decide comparisons
  ({"dtype": "uchar", "shape": [6, 5], "steps": [["bit_test", 0, 0, 0]], "kernel": 0}, 20),
  ({"dtype": "uint", "shape": [5, 7], "steps": [["bit_test", 13, 0, 0]], "kernel": 0}, 22),
  ({"dtype": "ulong", "shape": [4, 6], "steps": [["bit_test", 6, 0, 0]], "kernel": 0}, 26),
  # gradients (float64 central differences): every differentiable step of the fuzzer at least once
  ({"dtype": "float", "shape": [4, 6], "steps": [["mul", 0, 0, 1], ["add", 0, 0, 1], ["add_const", 0, 0, 0], ["exp", 0, 0, 0], ["sum", 0, 1, 0], ["log", 0, 0, 0],
                                                 ["neg", 0, 0, 0], ["sigmoid", 0, 0, 0]], "kernel": 0}, 1),
  ({"dtype": "float", "shape": [3, 5], "steps": [["abs", 0, 0, 0], ["add_const", 3, 0, 0], ["sqrt", 0, 0, 0], ["recip", 0, 0, 0], ["sin", 0, 0, 0],
                                                 ["square", 0, 0, 0], ["mean", 1, 0, 0]], "kernel": 0}, 3),
  ({"dtype": "float", "shape": [4, 3], "steps": [["matmul", 3, 0, 0], ["maximum", 0, 0, 1], ["minimum", 0, 0, 1], ["where", 0, 0, 1], ["sub", 0, 0, 1],
                                                 ["div", 0, 0, 0], ["relu", 0, 0, 0]], "kernel": 0}, 5),
  ({"dtype": "float", "shape": [2, 3, 4], "steps": [["permute", 1, 0, 0], ["reshape", 1, 0, 0], ["pad", 1, 2, 1], ["shrink", 1, 1, 0], ["flip", 1, 0, 0],
                                                    ["expand", 1, 0, 0], ["contiguous", 0, 0, 0], ["cumsum", 2, 0, 0], ["prod", 1, 0, 0]], "kernel": 0}, 7),
  ({"dtype": "float", "shape": [5, 6], "steps": [["conv2d", 1, 1, 1], ["gather", 2, 5, 0], ["pad_value", 0, 0, 1], ["mul_const", 2, 1, 0], ["max", 2, 0, 0],
                                                 ["min", 0, 0, 0]], "kernel": 0}, 9),
  # an input that only decides a where (no gradient path to it): its gradient is zeros
  ({"dtype": "float", "shape": [4, 5], "steps": [["where", 0, 0, 1], ["exp", 0, 0, 0], ["sum", 0, 1, 0]], "kernel": 0}, 11),
  # fusion through a pad: x // y under a pad must stay its own kernel (fused, the padded lanes divide by the gate's 0)
  ({"dtype": "int", "shape": [5, 4], "steps": [["idiv", 0, 0, 1], ["pad", 1, 2, 1]], "kernel": 0}, 8),
  ({"dtype": "uchar", "shape": [6, 3], "steps": [["mod_const", 3, 0, 0], ["idiv", 0, 0, 1], ["pad_value", 1, 2, 0]], "kernel": 0}, 16),
]
BIG = (1 << 22) + 4096 * 3    # elements of the big launch: past refgrad/runtime/simt.py MAX_LANES, so PYTHON runs two batches
AXES, ARGS = range(4), (2, 4, 3, 8, 16, 32, 0)
MAX_NODES = 120   # larger kernels (the models' random-number kernels) take seconds to lower per Opt


def _dtype_class(ast: Any) -> str:
  d = next(u.src[2].dtype for u in ast.toposort if u.op is Ops.STORE)
  if d == dtypes.bool: return "bool"
  if dtypes.is_float(d): return "half" if d.itemsize == 2 else "float"
  return "int"

def _big_launch() -> Any:
  """out[i] = in[i] * 3 + 0x7FFFFFF0 (int32, wraps) over BIG elements."""
  r = UOp.range(BIG, 0)
  a = UOp.define_global(1, dtypes.int32, BIG).load(r)
  return UOp.define_global(0, dtypes.int32, BIG).store(r, a * UOp.const(dtypes.int32, 3) + UOp.const(dtypes.int32, 0x7FFFFFF0)).sink()

def kernels() -> list[tuple[str, Any]]:
  """(name, AST) of every kernel the group draws from, in a fixed order."""
  out = [(f"{m['model']}/{m['name']}", ast_from_json(m["ast"])) for m in load_models()]
  for i, rec in enumerate(RECIPES):
    out += [(f"recipe{i}/{n}", a) for n, a in kernels_of(rec)]
  return out

def kernel_cases() -> list[Any]:
  """fuzz Cases: for each target x Opt kind x dtype class, the first kernel (in `kernels()` order) that accepts an Opt
  of that kind, unoptimized and with it (and with it after an UPCAST when that is valid too); plus the big launch."""
  ks = sorted((k for k in kernels() if len(k[1].toposort) <= MAX_NODES), key=lambda k: len(k[1].toposort))   # small kernels first
  cases: list[Case] = []
  seen: set[tuple[str, str, tuple[Opt, ...]]] = set()
  def add(name: str, ast: Any, target: str, opts: list[Opt]) -> None:
    if (name, target, tuple(opts)) in seen: return
    seen.add((name, target, tuple(opts)))   # one input set per kernel and target: its cases share the unoptimized run
    mode = ("random", "exact")[sum(map(ord, name)) % 2]
    cases.append(Case(len(cases), name, ast_to_json(ast), target, [opt_to_json(o) for o in opts], {"seed": sum(map(ord, name)) % 97, "mode": mode}))
  def valid(k0: Kernel, opts: list[Opt]) -> bool:
    try: apply_opts(k0, opts)
    except (InvalidOptError, ValueError, AssertionError, IndexError): return False
    return True
  for target, kind in itertools.product(("CPU", "CUDA", "AMD"), OptOps):
    done: set[str] = set()
    for name, ast in ks:
      cls = _dtype_class(ast)
      if cls in done: continue
      k0 = Kernel(ast, name, TARGETS[target])
      opt = next((o for a in AXES for x in ARGS if valid(k0, [o := Opt(kind, a, x)])), None)
      if opt is None: continue
      done.add(cls)
      add(name, ast, target, [])
      add(name, ast, target, [opt])
      up = next((u for a in AXES for x in (4, 2) if valid(k0, [u := Opt(OptOps.UPCAST, a, x), opt])), None)
      if up is not None: add(name, ast, target, [up, opt])
  add("big_launch", _big_launch(), "CPU", [])
  for i, (rec, seed) in enumerate(PROGRAMS):
    name, ast = kernels_of(rec)[rec["kernel"]]
    cases.append(Case(len(cases), f"program{i}/{name}", ast_to_json(ast), "CPU", [], {"seed": seed, "mode": "random"}, "program", rec))
  return cases

def kernel_case_name(c: Any) -> str:
  return f"kernels {c.target} {c.kernel} {' '.join(o[0] + str(o[1:]) for o in c.opts) or 'unoptimized'}"

def kernel_result(c: Any, device: str, r: dict[str, Any]) -> Any:
  """The conformance Result of an oracle result (a dict of oracles.case.Result) of kernel case c checked on device."""
  status, detail = r["status"], ""
  if status == "fail" and r["device"] not in ("PYTHON", device): status = "pass"   # another device's failure
  if status == "fail": detail = f"{r['oracle']} on {r['device']}: {r['detail']}"
  status = {"pass": "pass", "fail": "fail"}.get(status, "pass" if status in ("ub", "invalid") else "error")
  return Result(kernel_case_name(c), "kernels", c.opts[-1][0] if c.opts else "NONE", "", c.target, device, status, 0, detail)

def kernels_results(devices: list[str]) -> list[Any]:
  """One conformance Result per case x device, in this process (the CLI prepares the reference once in a reference worker
  and runs each device in its own, conformance/isolate.py)."""
  cases = kernel_cases()
  try: res = check_cases(cases, [d for d in devices if d != "PYTHON"])   # PYTHON runs once; every other device after it
  except Exception as e:
    return [Result("kernels", "kernels", "", "", "", d, "error", 0, f"{type(e).__name__}: {e}") for d in devices]
  return [kernel_result(c, d, r.__dict__) for d in devices for c, r in zip(cases, res)]
