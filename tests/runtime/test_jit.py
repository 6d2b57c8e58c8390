"""TinyJit on CPU, PYTHON and the mock NV and AMD GPUs (MOCKGPU=1): replays give the bits the function gives without the JIT (an
Adam training step included), replays never schedule, lower or compile, mismatched calls raise naming the argument, and
on the HCQ devices a replay is one command buffer submitted with one doorbell."""
from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from refgrad import Tensor, TinyJit, dtypes
from refgrad import schedule as sched
from refgrad.device import Device
from refgrad.jit import JitError
from refgrad.nn.optim import SGD, Adam
from refgrad.nn.state import get_parameters
from refgrad.program import Runner
from refgrad.runtime.driver import GPUFault


def _example() -> Any:
  """examples/mnist_mlp.py as a module (its MLP and loss)."""
  spec = importlib.util.spec_from_file_location("mnist_mlp_jit", Path(__file__).resolve().parents[2] / "examples" / "mnist_mlp.py")
  assert spec is not None and spec.loader is not None
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

_mnist = _example()
MLP, cross_entropy = _mnist.MLP, _mnist.cross_entropy

DEVICES = ["CPU", "PYTHON", "NV", "AMD"]


@pytest.fixture(autouse=True)
def mockgpu(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("MOCKGPU", "1")
  monkeypatch.delenv("JIT", raising=False)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
  """How often scheduling, kernel lookup and lowering run (each wrapped to count its calls)."""
  c: Counter[str] = Counter()
  def counted(name: str, f: Any) -> Any:
    def wrapper(*a: Any, **k: Any) -> Any:
      c[name] += 1
      return f(*a, **k)
    return wrapper
  monkeypatch.setattr(sched, "create_schedule", counted("create_schedule", sched.create_schedule))
  monkeypatch.setattr(sched, "get_runner", counted("get_runner", sched.get_runner))
  monkeypatch.setattr(Runner, "from_sink", staticmethod(counted("from_sink", Runner.from_sink)))
  return c


def _bits(t: Tensor) -> bytes: return np.ascontiguousarray(t.numpy()).tobytes()

def _data(steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  return rng.standard_normal((steps, 32, 64)).astype(np.float32), rng.integers(0, 10, (steps, 32)).astype(np.int32)


def _train(device: str, jit: bool, steps: int, opt: str = "adam", monkeypatch: pytest.MonkeyPatch | None = None,
           counts: Counter[str] | None = None) -> tuple[list[bytes], list[bytes], Any]:
  """The MLP of examples/mnist_mlp.py trained `steps` steps; returns each step's loss bits, the final parameters' bits and
  the step function. With `counts`, asserts that calls after the second schedule nothing."""
  Tensor.manual_seed(0)
  if monkeypatch is not None: monkeypatch.setenv("DEV", device)
  model = MLP()
  params = get_parameters(model)
  optim = Adam(params, lr=0.01) if opt == "adam" else SGD(params, lr=0.1, momentum=0.9)
  calls = [0]
  def step(x: Tensor, y: Tensor) -> Tensor:
    calls[0] += 1
    optim.zero_grad()
    loss = cross_entropy(model(x), y)
    loss.backward()
    Tensor.realize_all(loss, *optim.schedule_step())
    return loss
  f = TinyJit(step) if jit else step
  xs, ys = _data(steps)
  losses = []
  for i in range(steps):
    x, y = Tensor(xs[i], device=device), Tensor(ys[i], device=device)
    if counts is not None: counts.clear()
    loss = f(x, y)
    if counts is not None and i >= 2: assert not counts, f"replay {i} scheduled or compiled: {dict(counts)}"
    losses.append(_bits(loss))
  if jit: assert calls[0] == 2   # the function ran for the first call and the capture only
  return losses, [_bits(p) for p in params], f


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_training_step_same_bits_as_without_jit(device: str, opt: str, monkeypatch: pytest.MonkeyPatch, counts: Counter[str]):
  want_losses, want_params, _ = _train(device, False, 5, opt, monkeypatch)
  got_losses, got_params, f = _train(device, True, 5, opt, monkeypatch, counts)
  assert got_losses == want_losses
  assert got_params == want_params
  assert f.captured and f.captured > 5
  assert len(set(want_losses)) == 5    # the steps do change the parameters


@pytest.mark.parametrize("device", DEVICES)
def test_replay_uses_new_inputs_and_reuses_intermediates(device: str, counts: Counter[str]):
  calls = [0]
  @TinyJit
  def f(a: Tensor, b: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    calls[0] += 1
    h = (a @ b).relu()
    return h.sum(axis=1), {"max": h.max(), "mean": (h * 2).mean()}
  rng = np.random.default_rng(1)
  ins = [(rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)) for _ in range(5)]
  plan_bufs = None
  for i, (a, b) in enumerate(ins):
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    counts.clear()
    s, d = f(ta, tb)
    if i >= 2:
      assert not counts
      assert f._plan is not None and (plan_bufs is None or all(x is y for x, y in zip(f._plan.bufs, plan_bufs)))
      plan_bufs = list(f._plan.bufs)
    h = np.maximum(a @ b, 0)
    ref = (Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")).relu()
    assert _bits(s) == _bits(ref.sum(axis=1)) and _bits(d["max"]) == _bits(ref.max()) and _bits(d["mean"]) == _bits((ref * 2).mean())
    assert np.allclose(s.numpy(), h.sum(axis=1), rtol=1e-5)   # and they are the right numbers (float sums: order differs)
  assert calls[0] == 2


@pytest.mark.parametrize("device", DEVICES)
def test_replay_allocates_nothing(device: str, monkeypatch: pytest.MonkeyPatch):
  f = TinyJit(lambda a: ((a + 1) * a).sum(axis=0) - 1)
  xs = [Tensor(np.full((6, 5), i, np.float32), device=device) for i in range(4)]
  for x in xs[:2]: f(x)
  alloc = Device[device].allocator.alloc
  n = [0]
  def counted(nbytes: int) -> Any:
    n[0] += 1
    return alloc(nbytes)
  monkeypatch.setattr(Device[device].allocator, "alloc", counted)
  out = [f(x).numpy() for x in xs[2:]]
  assert n[0] == 0
  assert [o.tolist() for o in out] == [(((np.full((6, 5), i, np.float32) + 1) * i).sum(axis=0) - 1).tolist() for i in (2, 3)]


@pytest.mark.parametrize("device", DEVICES)
def test_mismatched_calls_raise_naming_the_argument(device: str):
  @TinyJit
  def f(x: Tensor, scale: float, *, bias: Tensor) -> Tensor: return (x * scale + bias).realize()
  def call(shape: tuple[int, ...] = (4, 3), dtype: Any = dtypes.float32, scale: float = 2.0, dev: str = device, bshape: tuple[int, ...] = (3,)) -> Tensor:
    return f(Tensor.ones(*shape, dtype=dtype, device=dev).realize(), scale, bias=Tensor.ones(*bshape, device=dev).realize())
  for _ in range(3): assert call().tolist() == [[3.0] * 3] * 4
  with pytest.raises(JitError, match=r"argument 0 \('x'\) is Tensor\(shape=\(5, 3\).*captured call had Tensor\(shape=\(4, 3\)"): call(shape=(5, 3))
  with pytest.raises(JitError, match=r"argument 0 \('x'\) is Tensor\(.*dtype=dtypes\.int,.*captured call had Tensor\(.*dtype=dtypes\.float,"): call(dtype=dtypes.int32)
  with pytest.raises(JitError, match=r"argument 1 \('scale'\) is float 3.0 but the captured call had float 2.0"): call(scale=3.0)
  with pytest.raises(JitError, match=r"argument 'bias' is Tensor\(shape=\(1,\)"): call(bshape=(1,))
  other = "PYTHON" if device != "PYTHON" else "CPU"
  with pytest.raises(JitError, match=rf"device={other}.*captured call had .*device={device}"): call(dev=other)
  with pytest.raises(JitError, match="called with argument 0"): f(Tensor.ones(4, 3, device=device).realize(), 2.0)
  assert call().tolist() == [[3.0] * 3] * 4   # still usable
  f.reset()
  for _ in range(3): assert call(shape=(2, 3), scale=0.5).tolist() == [[1.5] * 3] * 2   # a new capture after reset()


@pytest.mark.parametrize("device", DEVICES)
def test_arguments_sharing_memory(device: str):
  """Inputs are read only: arguments may share memory at a replay that did not at the capture; the same tensor twice at
  the capture (one buffer the launches read for both) cannot take two later, which raises naming both arguments."""
  f = TinyJit(lambda a, b: (a - b).realize())
  x, y = Tensor([5.0, 7.0], device=device).realize(), Tensor([1.0, 2.0], device=device).realize()
  assert [f(x, y).tolist() for _ in range(3)] == [[4.0, 5.0]] * 3
  assert f(x, x).tolist() == [0.0, 0.0]
  g = TinyJit(lambda a, b: (a - b).realize())
  assert [g(x, x).tolist() for _ in range(3)] == [[0.0, 0.0]] * 3
  with pytest.raises(JitError, match=r"argument 0 \('a'\) and argument 1 \('b'\) were one buffer at the capture \(the same tensor\)"): g(x, y)


@pytest.mark.parametrize("device", DEVICES)
def test_separately_made_equal_constants_are_distinct_inputs(device: str):
  """Two Tensor.ones(4) made apart are one buffer (equal constants are realized once): the capture gives each its own."""
  h = TinyJit(lambda a, b: (a + b).realize())
  assert [h(Tensor.ones(4, device=device), Tensor.ones(4, device=device) * i).tolist() for i in range(4)] == [[1.0 + i] * 4 for i in range(4)]
  k = TinyJit(lambda a, b: (a * 2 + b).realize())
  outs = [k(Tensor.ones(2, device=device), Tensor.ones(2, device=device)).tolist() for _ in range(2)]
  assert outs == [[3.0, 3.0]] * 2
  assert k(Tensor([1.0, 2.0], device=device), Tensor([10.0, 20.0], device=device)).tolist() == [12.0, 24.0]


@pytest.mark.parametrize("device", DEVICES)
def test_same_tensor_in_calls_one_and_two_is_captured(device: str):
  """Call 2 with call 1's tensor: its result is memoized, yet the capture launches the kernel again (else replays would
  return call 1's result), and `x*2` outside the JIT afterwards is x's, not a replay's."""
  f = TinyJit(lambda x: (x * 2).realize())
  x = Tensor([1.0, 2.0, 3.0], device=device)
  assert f(x).tolist() == [2.0, 4.0, 6.0] and f(x).tolist() == [2.0, 4.0, 6.0]
  assert f.captured == 1
  assert f(Tensor([7.0, 8.0, 9.0], device=device)).tolist() == [14.0, 16.0, 18.0]
  assert (x * 2).tolist() == [2.0, 4.0, 6.0]
  assert f(x).tolist() == [2.0, 4.0, 6.0]


@pytest.mark.parametrize("device", DEVICES)
def test_tensors_in_lists_and_dicts_are_inputs(device: str):
  f = TinyJit(lambda xs: (xs[0] + xs[1]).realize())
  assert [f([Tensor([float(i)], device=device), Tensor([1.0], device=device)]).tolist() for i in range(4)] == [[1.0], [2.0], [3.0], [4.0]]
  g = TinyJit(lambda d, t=(): (d["a"] * d["b"] - t[0]).realize())
  outs = [g({"a": Tensor([float(i)], device=device), "b": Tensor([3.0], device=device)}, t=(Tensor([float(i)], device=device),)).tolist()
          for i in range(4)]
  assert outs == [[2.0 * i] for i in range(4)]
  with pytest.raises(JitError, match=r"argument 0 \('xs'\)\[1\] is int 1 but the captured call had Tensor"): f([Tensor([1.0], device=device), 1])
  with pytest.raises(JitError, match=r"argument 0 \('xs'\) \(list\)"): f([Tensor([1.0], device=device)] * 3)


@pytest.mark.parametrize("device", DEVICES)
def test_returned_inputs_are_the_call_arguments(device: str):
  g = TinyJit(lambda x, y: (x, (y * 2).realize(), x.reshape(1, 1)))
  for i in range(4):
    a, b, c = g(Tensor([float(i)], device=device), Tensor([float(i + 1)], device=device))
    assert (a.tolist(), b.tolist(), c.tolist()) == ([float(i)], [2.0 * i + 2], [[float(i)]])
  n = TinyJit(lambda x: x + 1)   # a lazy (not realized) result is realized by the capture, as tinygrad's JIT does
  assert [n(Tensor([float(i)], device=device)).tolist() for i in range(4)] == [[float(i + 1)] for i in range(4)]


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_are_valid_until_the_next_call(device: str):
  f = TinyJit(lambda x: (x * 10).realize())
  outs = [f(Tensor([float(i)], device=device)) for i in range(4)]
  assert outs[3].tolist() == [30.0]
  assert outs[2].tolist() == [30.0]   # the same memory: call 4 overwrote call 3's result (tinygrad's semantics)
  with pytest.raises(JitError, match="holds memory the captured launches use besides their inputs"): f(outs[3])
  assert f(outs[3].contiguous().realize()).tolist() == [300.0]


@pytest.mark.parametrize("device", DEVICES)
def test_state_replaced_between_calls_is_read(device: str):
  """A parameter given new memory between replays (e.g. weights loaded) is what the next replay reads."""
  w = Tensor([1.0, 2.0], device=device).realize()
  @TinyJit
  def step(x: Tensor) -> Tensor:
    w.assign(w + x).realize()
    return (w * 2).realize()
  x = Tensor([1.0, 1.0], device=device).realize()
  assert [step(x).tolist() for _ in range(4)] == [[4.0, 6.0], [6.0, 8.0], [8.0, 10.0], [10.0, 12.0]]
  w.assign(Tensor([100.0, 200.0], device=device)).realize()
  assert step(x).tolist() == [202.0, 402.0] and w.tolist() == [101.0, 201.0]
  assert step(x).tolist() == [204.0, 404.0] and w.tolist() == [102.0, 202.0]


@pytest.mark.parametrize("device", DEVICES)
def test_read_only_tensor_assigned_between_calls_is_read(device: str):
  """A tensor the function only reads (weights of an inference), given new contents between calls: each replay reads
  them (it used to read the capture's memory: a silent wrong answer). Memory the launches write is refused by name."""
  w = Tensor([1.0, 2.0, 3.0], device=device).realize()
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x * w).realize()
  x = Tensor([2.0, 2.0, 2.0], device=device).realize()
  got = []
  for i in range(5):
    w.assign(Tensor([1.0, 2.0, 3.0], device=device) * (i + 1)).realize()
    got.append(f(x).tolist())
  assert got == [[2.0 * (i + 1), 4.0 * (i + 1), 6.0 * (i + 1)] for i in range(5)]
  w.assign(f(x)).realize()   # the replay's own output memory: it would read what it writes
  with pytest.raises(JitError, match="given new contents since the capture, and that memory is also used by the captured launches"): f(x)


@pytest.mark.parametrize("device", ["PYTHON", "NV"])
def test_copies_between_devices_are_replayed(device: str, counts: Counter[str]):
  """Inputs on the CPU moved to the device inside the function, the result moved back: the copies are part of the replay."""
  f = TinyJit(lambda a, b: (a.to(device) * b.to(device) + 1).to("CPU").realize())
  for i in range(5):
    counts.clear()
    a, b = Tensor(np.arange(8, dtype=np.float32) + i, device="CPU"), Tensor(np.full(8, 2.0, np.float32), device="CPU")
    out = f(a, b)
    if i >= 2: assert not counts
    assert out.device == "CPU" and out.tolist() == ((np.arange(8, dtype=np.float32) + i) * 2 + 1).tolist()
  assert f._plan is not None and sum(type(s).__name__ == "_Copy" for s in f._plan.steps) == 3


def test_decorated_method_and_jit_off(monkeypatch: pytest.MonkeyPatch, counts: Counter[str]):
  class Model:
    def __init__(self) -> None: self.k = Tensor([3.0], device="CPU").realize()
    @TinyJit
    def __call__(self, x: Tensor) -> Tensor: return (x * self.k).realize()
  m = Model()
  assert [m(Tensor([float(i)], device="CPU")).item() for i in range(4)] == [0.0, 3.0, 6.0, 9.0]
  monkeypatch.setenv("JIT", "0")
  g = TinyJit(lambda x: (x + 1).realize())
  counts.clear()
  assert [g(Tensor([float(i)], device="CPU")).item() for i in range(3)] == [1.0, 2.0, 3.0]
  assert counts["create_schedule"] == 3   # JIT=0: every call schedules
  monkeypatch.setenv("JIT", "7")
  with pytest.raises(ValueError, match="JIT='7'"): g(Tensor([1.0], device="CPU"))


# ---- NV: the replay is one command buffer ----------------------------------------------------------------------------

LAUNCH_COUNTER = {"NV": "qmd_launch", "AMD": "dispatch"}   # the mock's counter of kernel launches (QMDs / PM4 dispatches)

@pytest.mark.parametrize("device", list(LAUNCH_COUNTER))
@pytest.mark.parametrize("graph", [True, False])
def test_hcq_replay_is_one_submission(device: str, graph: bool, monkeypatch: pytest.MonkeyPatch):
  if not graph: monkeypatch.setenv("JIT", "2")
  _, _, f = _train(device, True, 3, "adam", monkeypatch)   # first call, capture, one replay
  xs, ys = _data(4, seed=1)
  x, y = Tensor(xs[3], device=device).realize(), Tensor(ys[3], device=device).realize()
  Device[device].synchronize()
  c = Device[device].hcq.drv.counters   # type: ignore[attr-defined]
  before = Counter(c)
  loss = f(x, y)
  Device[device].synchronize()   # the mock runs queued work when the host waits
  assert c[LAUNCH_COUNTER[device]] - before[LAUNCH_COUNTER[device]] == f.captured
  assert c["doorbell"] - before["doorbell"] == (1 if graph else f.captured)
  if device == "NV": assert c["gp_entry"] - before["gp_entry"] == (1 if graph else f.captured)
  assert np.isfinite(loss.numpy()).all()


def test_nv_graph_patches_addresses_and_signals():
  """Each replay of the same command buffer signals the next timeline value, and inputs at new addresses are read."""
  f = TinyJit(lambda a, b: (a * b + a).realize())
  ts = [(Tensor(np.full(64, i, np.float32), device="NV"), Tensor(np.full(64, 2, np.float32), device="NV")) for i in range(5)]
  outs = []
  for a, b in ts:
    hcq = Device["NV"].hcq   # type: ignore[attr-defined]
    v = hcq.timeline_value
    outs.append(f(a, b).numpy())
    assert hcq.timeline.value >= v
  assert [o[0] for o in outs] == [0.0, 3.0, 6.0, 9.0, 12.0]
  assert f._plan is not None and any(type(s).__name__ == "HCQGraph" for s in f._plan.steps)


def test_nv_fault_in_a_replay_names_the_kernel():
  """Undefined behaviour in a replayed command buffer is the mock's fault report, raised when the result is read; the device
  recovers and the next replay runs."""
  dev = "NV:3"
  f = TinyJit(lambda a, b: (a // b).realize())
  ok = [f(Tensor(np.arange(4, dtype=np.int32) + 10, device=dev), Tensor(np.full(4, 3, np.int32), device=dev)).tolist() for _ in range(3)]
  assert ok == [[3, 3, 4, 4]] * 3
  out = f(Tensor(np.arange(4, dtype=np.int32), device=dev), Tensor(np.array([1, 0, 1, 1], np.int32), device=dev))
  with pytest.raises(GPUFault, match=r"(integer division by zero in kernel r?E_\w+|kernel r?E_\w+: integer division by zero).*GP entry"): out.numpy()
  assert f(Tensor(np.arange(4, dtype=np.int32) + 20, device=dev), Tensor(np.full(4, 7, np.int32), device=dev)).tolist() == [2, 3, 3, 3]


def test_nv_two_gpus_one_command_buffer_each():
  """Launches on NV:0, a copy to NV:1, launches there: a command buffer per GPU; per replay each GPU rings two doorbells,
  its command buffer's and the copy engine's (NV:0 copies out to the host, NV:1 copies in from it)."""
  f = TinyJit(lambda a, b: ((a * 2 + 1).to("NV:1") * b).sum().realize())
  ins = [(np.arange(32, dtype=np.float32) + i, np.full(32, 0.5, np.float32)) for i in range(4)]
  for i, (a, b) in enumerate(ins):
    ta, tb = Tensor(a, device="NV").realize(), Tensor(b, device="NV:1").realize()
    for d in ("NV", "NV:1"): Device[d].synchronize()
    bells = [Device[d].hcq.drv.counters["doorbell"] for d in ("NV", "NV:1")]   # type: ignore[attr-defined]
    out = f(ta, tb)
    if i >= 2:
      assert [Device[d].hcq.drv.counters["doorbell"] for d in ("NV", "NV:1")] == [bells[0] + 2, bells[1] + 2]   # type: ignore[attr-defined]
    assert out.item() == float(((a * 2 + 1) * b).sum())
  assert f._plan is not None and [type(s).__name__ for s in f._plan.steps] == ["HCQGraph", "_Copy", "HCQGraph"]


def test_nv_graph_barriers_only_between_dependent_launches():
  """Three independent kernels then one reading all three: one memory barrier, before the last."""
  def fn(a: Tensor) -> Tensor:
    x, y, z = (a + 1).contiguous(), (a * 2).contiguous(), (a - 3).contiguous()
    Tensor.realize_all(x, y, z)
    return (x * y + z).realize()
  f = TinyJit(fn)
  ins = [np.arange(16, dtype=np.float32) + i for i in range(4)]
  outs = [f(Tensor(v, device="NV")).numpy() for v in ins]
  assert [o.tolist() for o in outs[2:]] == [((v + 1) * (v * 2) + (v - 3)).tolist() for v in ins[2:]]
  graphs = [s for s in f._plan.steps if type(s).__name__ == "HCQGraph"] if f._plan is not None else []
  assert len(graphs) == 1 and len(graphs[0].args) == 4 and graphs[0].barriers == 1
