"""Checked mode follows undefined global loads as values on the RDNA3 executor (the PYTHON device's memcheck model,
refgrad/runtime/simt.py): a load of bytes nothing wrote gives undefined VGPR lanes, ALU ops, compares and selects carry
them, a store makes its bytes undefined, and only a use PYTHON reports is reported (an address, a branch, EXEC; the host
reading the bytes back). Blocks and loop batches on or off give the same values and the same definedness."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from emulators.amd.rdna3.lanes import WaveFault
from emulators.amd.rdna3.machine import Machine
from emulators.vm import AddressSpace
from refgrad import Tensor, dtypes
from refgrad.runtime.driver import GPUFault
from refgrad.runtime.simt import UndefinedBehaviourError
from tests.emulators.rdna3 import kernels as K
from tests.emulators.rdna3.llvm_util import Kernel, compile_ir, descriptor, read_elf, run_direct, run_machine
from tests.emulators.rdna3.test_checked import S_ENDPGM, V_CMP_EQ_U32, raw_kernel, vop1, vopc
from tests.emulators.rdna3.test_execute import NP, N, inputs, kernels_of


def run_partial(k: Kernel, bufs: list[np.ndarray], undef: list[np.ndarray | None], grid, block, vals=(), blocks: bool = True,
                loops: bool = True) -> tuple[Machine, list]:
  """Run k on a fresh VM with each buffer's elements where `undef` is True never written (checked mode): the machine
  and each buffer's region after the run."""
  vm = AddressSpace("test")
  code = vm.alloc(len(k.code), False)
  code.mem.write(np.frombuffer(k.code, np.uint8), 0)
  regions = []
  for b, u in zip(bufs, undef):
    r = vm.alloc(b.nbytes, False)
    r.mem.write(b.view(np.uint8).reshape(-1), 0)
    if u is not None:
      for e in np.flatnonzero(u): r.mem.mark_range(int(e) * b.itemsize, (int(e) + 1) * b.itemsize, False)
    regions.append(r)
  args = b"".join(struct.pack("<Q", r.va) for r in regions) + b"".join(struct.pack("<i", v) for v in vals)
  ka = vm.alloc(max(len(args), 4), True)
  ka.mem.write(np.frombuffer(args, np.uint8), 0)
  d = descriptor(k.descriptor)
  m = Machine(vm, code.va, k.name, d.rsrc1, d.rsrc2, [ka.va & 0xFFFFFFFF, ka.va >> 32] + [0] * 14, grid, block, d.group_segment, True)
  m.use_blocks, m.use_loops = blocks, loops
  m.run()
  return m, regions


def elem_defined(r, n: int, size: int) -> np.ndarray:
  init = r.mem.init
  return np.ones(n, np.bool_) if init is None else init[:n * size].reshape(n, size).all(axis=1)


# kernels covering the paths an undefined lane takes: whole-dword loads, f64 pairs and carries, 16-bit halves, byte
# loads, compares with selects (the lane mask keeps undefined lanes), v_div_scale/v_div_fmas (VCC carries them)
UNDEF_KERNELS = ["add_f32", "cmp_f32", "div_f32", "add_f64", "add_i64", "mul_f16", "cmp_f16", "sext_i8", "cmp_i32", "cvt_i32_f32"]


@pytest.mark.parametrize("name", UNDEF_KERNELS)
def test_undefined_inputs_flow_to_undefined_outputs_blocks_on_and_off(name: str):
  """Every third element of `a` and every fifth of `b` never written: no fault; out[i] is defined exactly where a[i] and
  b[i] are, holds the same bits as a run on the defined inputs there, and blocks on/off agree on everything."""
  t, tin, _ = K.ELEMENTWISE[name]
  a, b = inputs(NP[tin], np.random.default_rng(sum(map(ord, name))))
  if name.startswith("cvt_i"): a, b = np.trunc(a), np.abs(b)
  ua, ub = np.arange(N) % 3 == 1, np.arange(N) % 5 == 2
  k = kernels_of("elementwise")[name]
  runs = [run_partial(k, [np.zeros(N, NP[t]), a, b], [np.ones(N, np.bool_), ua, ub], (N // 64, 1, 1), (64, 1, 1), blocks=on) for on in (True, False)]
  (mb, rb), (mi, ri) = runs
  _, rr = run_partial(k, [np.zeros(N, NP[t]), a, b], [None, None, None], (N // 64, 1, 1), (64, 1, 1))
  want = ~(ua | ub)
  size = np.dtype(NP[t]).itemsize
  for regs in (rb, ri):
    got = elem_defined(regs[0], N, size)
    assert np.array_equal(got, want), (name, np.flatnonzero(got != want)[:8])
    out = regs[0].mem.data[:N * size].reshape(N, size)
    assert np.array_equal(out[want], rr[0].mem.data[:N * size].reshape(N, size)[want])
    assert "which nothing has written" in regs[0].mem.origin
  assert np.array_equal(mb.vinit, mi.vinit) and np.array_equal(mb.sundef, mi.sundef) and np.array_equal(mb.sccundef, mi.sccundef)
  assert np.array_equal(mb.v, mi.v) and np.array_equal(mb.s, mi.s) and rb[0].mem.data.tobytes() == ri[0].mem.data.tobytes()


def test_loop_over_a_partly_undefined_buffer_loops_on_and_off():
  """loop_sum (a one-block loop: a batch when loops are on) over input with undefined elements: the sums that include
  one are undefined, the others exact, with loop batches and blocks on or off alike."""
  k = kernels_of("control")["loop_sum"]
  x = np.random.default_rng(4).standard_normal(N + 16).astype(np.float32)
  ux = np.zeros(N + 16, np.bool_)
  ux[[5, 77, 130]] = True
  outs = []
  for blocks, loops in ((True, True), (True, False), (False, False)):
    m, regs = run_partial(k, [np.zeros(N, np.float32), x], [None, ux], (2, 1, 1), (64, 1, 1), (3,), blocks=blocks, loops=loops)
    outs.append((elem_defined(regs[0], N, 4), regs[0].mem.data.tobytes(), m.vinit.copy()))
  assert all(np.array_equal(o[0], outs[0][0]) and o[1] == outs[0][1] and np.array_equal(o[2], outs[0][2]) for o in outs)
  assert 0 < (~outs[0][0]).sum() < N   # some sums undefined, the rest defined


GATHER = """
define amdgpu_kernel void @gather_idx(ptr addrspace(1) %out, ptr addrspace(1) %idx, ptr addrspace(1) %data) #0 {
  %l = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %g2 = mul i32 %g, 64
  %i = add i32 %l, %g2
  %pi = getelementptr i32, ptr addrspace(1) %idx, i32 %i
  %j = load i32, ptr addrspace(1) %pi
  %pd = getelementptr float, ptr addrspace(1) %data, i32 %j
  %v = load float, ptr addrspace(1) %pd
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %v, ptr addrspace(1) %po
  ret void
}"""


@pytest.mark.parametrize("blocks", [True, False])
def test_undefined_value_as_an_address_is_reported(blocks: bool):
  k = read_elf(compile_ir(K.module(GATHER))[0])["gather_idx"]
  idx, data = np.arange(N, dtype=np.int32)[::-1].copy(), np.arange(N, dtype=np.float32)
  ui = np.zeros(N, np.bool_)
  ui[70] = True   # lane 6 of wave 2
  with pytest.raises(WaveFault) as e:
    run_partial(k, [np.zeros(N, np.float32), idx, data], [None, ui, None], (2, 1, 1), (64, 1, 1), blocks=blocks)
  assert "kernel gather_idx: PC 0x" in e.value.what and "global_load_b32" in e.value.what
  assert "lane 6 of wave 2 reads v" in e.value.what and "holds no defined value" in e.value.what
  _, regs = run_partial(k, [np.zeros(N, np.float32), idx, data], [None, None, None], (2, 1, 1), (64, 1, 1), blocks=blocks)
  assert np.array_equal(regs[0].mem.data[:4 * N].view(np.float32), data[idx])   # defined indices: no report


# ---- refgrad programs: AMD_ISA agrees with PYTHON on whether something is reported and on every defined value ----
def _partial(dev: str, n: int = 8, dtype=dtypes.float32, val=1) -> Tensor:
  t = Tensor.empty(n, dtype=dtype, device=dev)
  t[0:n // 2] = val
  return t


PROGRAMS = {
  "read all": lambda d: _partial(d).numpy(),
  "read the written part": lambda d: _partial(d)[0:4].numpy(),
  "elementwise": lambda d: (_partial(d) * 2 + 1).realize()[0:4].numpy(),
  "where": lambda d: (lambda t: (t > 0).where(t, 3).realize()[0:4].numpy())(_partial(d)),
  "sum over all": lambda d: _partial(d).sum().numpy(),
  "sum over the written part": lambda d: _partial(d)[0:4].sum().numpy(),
  "max over all": lambda d: _partial(d).max().numpy(),
  "row sums of the written rows": lambda d: (lambda t: (t.__setitem__(slice(0, 32), 1), t.sum(axis=1).realize()[0:32].numpy())[1])(Tensor.empty(64, 256, device=d)),
  "two-stage sum, half written": lambda d: _partial(d, 40000).sum().numpy(),
  "two-stage sum of the written half": lambda d: _partial(d, 40000)[0:20000].sum().numpy(),
  "index by it": lambda d: Tensor([1., 2., 3., 4.], device=d)[_partial(d, 4, dtypes.int32, 0)].numpy(),
  # IDIV/MOD by an undefined divisor: PYTHON reports the divisor, the ISA the EXEC mask the renderer's zero guard sets
  "divide by it": lambda d: (Tensor([8, 8, 8, 8], dtype=dtypes.int32, device=d) // _partial(d, 4, dtypes.int32, 2)).realize()[0:2].numpy(),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_partly_assigned_empty_tensor_agrees_with_python(name: str, monkeypatch):
  monkeypatch.setenv("MOCKGPU", "1")
  outs = []
  for dev in ("PYTHON", "AMD_ISA"):
    try: outs.append(("ok", PROGRAMS[name](dev)))
    except (UndefinedBehaviourError, GPUFault) as e:   # reported by the host's read, or in the kernel (a GPUFault on the mock)
      outs.append(("host" if "by the host" in str(e) else "kernel", str(e)))
  (kp, vp), (ka, va) = outs
  assert kp == ka, (name, outs)
  if kp == "ok": assert np.asarray(vp).tobytes() == np.asarray(va).tobytes()
  elif kp == "host": assert "global_load" in va and "which nothing has written" in va
  else: assert "lane 2 of wave 0: an undefined value" in va and "decides EXEC" in va and "thread gidx=(2, 0, 0)" in vp


def test_exec_from_an_undefined_compare_is_reported():
  """v_cmp of an undefined VGPR then s_and_saveexec_b32 s0, vcc_lo: the lanes that run on depend on it (PYTHON: a branch
  or gate on an undefined value)."""
  k = raw_kernel(vop1(1, 1, 256 + 5), vopc(V_CMP_EQ_U32, 256 + 1, 0), 0xBE80206A, S_ENDPGM)
  with pytest.raises(WaveFault) as e: run_direct(k, [], (1, 1, 1), (32, 1, 1))
  assert "PC 0x8 (s_and_saveexec_b32 s0, vcc_lo): lane 0 of wave 0: an undefined value" in e.value.what and "decides EXEC" in e.value.what


@pytest.mark.parametrize("blocks", [True, False])
def test_undefined_values_pass_through_lds(blocks: bool):
  """lds_reverse: each lane stores its loaded value to LDS and reads its mirror's back. Values stored from undefined lanes
  load back undefined (PYTHON's local memory: a store of an undefined value makes the bytes undefined), with no fault;
  LDS never written is still reported (test_checked.test_uninitialized_lds_read)."""
  k = kernels_of("control")["lds_reverse"]
  a = np.arange(N, dtype=np.float32)
  ua = np.zeros(N, np.bool_)
  ua[[3, 64 + 10]] = True
  _, regs = run_partial(k, [np.zeros(N, np.float32), a], [None, ua], (2, 1, 1), (64, 1, 1), blocks=blocks)
  want = np.ones(N, np.bool_)
  want[[63 - 3, 64 + 63 - 10]] = False
  assert np.array_equal(elem_defined(regs[0], N, 4), want)
  got = regs[0].mem.data[:4 * N].view(np.float32)
  assert np.array_equal(got[want], np.concatenate([a[63::-1], a[:63:-1]])[want])


EXEC_16, EXEC_ALL, S_AND_EXEC_VCC = (0xBEFE00FF, 0xFFFF), (0xBEFE00C1,), 0x8B7E6A7E   # s_mov_b32 exec_lo, ...; s_and_b32 exec_lo, exec_lo, vcc_lo


@pytest.mark.parametrize("blocks", [True, False])
def test_exec_and_of_a_mask_reports_only_the_lanes_it_keeps(blocks: bool):
  """v1 = v0 in lanes 0..15 only; v_cmp under all 32 lanes: VCC's bits 16..31 undefined. ANDing VCC into an EXEC of lanes
  0..15 is defined (those bits are 0 whatever VCC holds); into an EXEC of all lanes it decides lanes 16.. (reported)."""
  head = (*EXEC_16, vop1(1, 1, 256), *EXEC_ALL, vopc(V_CMP_EQ_U32, 256 + 1, 0))
  run_machine(raw_kernel(*head, *EXEC_16, S_AND_EXEC_VCC, S_ENDPGM), [], (1, 1, 1), (32, 1, 1), blocks=blocks)
  with pytest.raises(WaveFault) as e: run_machine(raw_kernel(*head, S_AND_EXEC_VCC, S_ENDPGM), [], (1, 1, 1), (32, 1, 1), blocks=blocks)
  assert "(s_and_b32 exec_lo, exec_lo, vcc_lo): lane 16 of wave 0: an undefined value" in e.value.what and "decides EXEC" in e.value.what


@pytest.mark.parametrize("name", ["lane_max", "lane_maximum"])
@pytest.mark.parametrize("where", ["init", "data", "none"])
def test_split_loop_over_partly_undefined_data_loops_on_and_off(name: str, where: str, monkeypatch):
  """A split loop (loops.Split: a max chain, the carried part stepped per iteration after the rest ran as a batch)
  meeting undefined data, checked mode: accumulators whose start nothing wrote, or input elements nothing wrote in
  iterations 7 and 9 (the split's batch has run the first iteration as a block, then faults at the load on its copy of
  the machine, which keeps no definedness, and everything is undone): the same buffers, definedness of the output
  bytes, VGPR definedness, SGPR/SCC definedness, registers and origin as loops off and blocks off; all defined: the
  split runs (a control)."""
  from emulators.amd.rdna3 import loops as LP
  from tests.emulators.rdna3.test_loops import NL, kernel
  LP.LOOPS.clear()
  k = kernel(name)
  rng = np.random.default_rng(12)
  n = 12
  out, a = rng.standard_normal(NL).astype(np.float32), rng.standard_normal(NL * n).astype(np.float32)
  run_partial(k, [out, a], [None, None], (NL // 64, 1, 1), (64, 1, 1), (n,))   # the prediction fails: the next dispatches split
  assert any(lp is not None and lp.failed and lp.badv for d in LP.LOOPS.values() for lp in d.values())
  calls: list[bool] = []
  real = LP._carried
  def spy(m, lp, prev):
    calls.append(got := real(m, lp, prev))
    return got
  monkeypatch.setattr(LP, "_carried", spy)
  uo, ua = np.zeros(NL, np.bool_), np.zeros(NL * n, np.bool_)
  if where == "init": uo[[3, 40, 77, 100]] = True
  if where == "data": ua[[NL * 7 + 5, NL * 9 + 70]] = True
  runs = []
  for blocks, loops in ((True, True), (True, False), (False, False)):
    calls.clear()
    m, regs = run_partial(k, [out, a], [uo, ua], (NL // 64, 1, 1), (64, 1, 1), (n,), blocks=blocks, loops=loops)
    runs.append((m, regs[0], list(calls)))
  (m0, r0, c0) = runs[0]
  # init: the loop's first block refuses the undefined accumulators (stepped: no split tried); data: the split's batch
  # faults on its copy at the undefined load (undone: the blocks run on); none: the split runs
  assert c0 == {"init": [], "data": [False], "none": [True]}[where], c0
  want = ~uo
  if where == "data": want[[5, 70]] = False
  for m, r, _ in runs:
    assert np.array_equal(elem_defined(r, NL, 4), want)
    assert r.mem.data.tobytes() == r0.mem.data.tobytes() and r.mem.origin == r0.mem.origin
    assert np.array_equal(m.vinit, m0.vinit) and np.array_equal(m.sundef, m0.sundef) and np.array_equal(m.sccundef, m0.sccundef)
    assert np.array_equal(m.v, m0.v) and np.array_equal(m.s, m0.s) and np.array_equal(m.scc, m0.scc) and m.undef_origin == m0.undef_origin
