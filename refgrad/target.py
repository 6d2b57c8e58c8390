"""Targets: what the optimizer and the code generators may assume about the hardware a kernel runs on.

A `Target` is data: workgroup and grid limits, local memory, warp width, the widest vector memory access
and the tensor cores. Kernels are optimized (refgrad/opt.py) and lowered (refgrad/kernel.py) for one
target; every backend can run a program made for any target (the C backend runs workgroups as loops and
tensor-core instructions in software), so Opt lists are comparable across backends.

- `CPU`: the default of the CPU and PYTHON devices (and of third-party renderers that name none).
- `CUDA`: an Ampere-class NVIDIA GPU (sm_80): mma.sync m16n8k16 tensor cores, warps of 32.
- `AMD`: an RDNA3 GPU (gfx1100) running wave32: WMMA 16x16x16 tensor cores.
`EMULATE=CUDA` / `EMULATE=AMD` makes every device compile for that target (`refgrad.device.target_for`), so GPU-only code
paths (work-groups, local memory, GROUP reductions, tensor cores) run on the PYTHON device and the C backend.

Tensor cores. A `TensorCore` multiplies an M x K matrix A by a K x N matrix B and adds an M x N matrix C,
held across the `threads` consecutive lanes of a warp: every lane holds a fragment (a vector) of each
matrix, and the layout says which matrix element each fragment element is. A layout gives, for each
coordinate (row, column), where its bits come from: bit j of the coordinate is bit `b` of the lane id
(("l", b)) or of the fragment element index (("e", b)). Lanes whose ids differ only in bits no coordinate
uses hold the same elements (replicas). The result D has C's layout. The arithmetic is the reference
semantics of WMMA (refgrad/uop/semantics.py: `wmma`).
The layouts are facts from the public documentation: PTX ISA "Matrix Fragments for mma.m16n8k16 with
floating point type" (NVIDIA) and AMD's RDNA3 WMMA description (lane l holds row l % 16 of A, column
l % 16 of B, and rows 2e + l // 16 of column l % 16 of C/D).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from refgrad import knobs
from refgrad.dtype import DType, dtypes
from refgrad.uop.ops import Ops, UOp

Bits = tuple[tuple[str, int], ...]   # ("l" | "e", bit) for each bit of a coordinate, least significant first


@dataclass(frozen=True)
class Layout:
  """Where one matrix's fragment elements live: (row bits, column bits)."""
  rows: Bits
  cols: Bits

  @property
  def elems(self) -> int:
    """Fragment elements per lane."""
    return 1 << sum(1 for s, _ in self.rows + self.cols if s == "e")

  def coords(self, lane: int, e: int) -> tuple[int, int]:
    """(row, column) of element e of lane `lane`'s fragment."""
    def val(bits: Bits) -> int: return sum((((lane if s == "l" else e) >> b) & 1) << j for j, (s, b) in enumerate(bits))
    return val(self.rows), val(self.cols)

  def table(self, threads: int) -> np.ndarray:
    """(threads, elems, 2) int array: the coordinates of every fragment element of every lane."""
    return np.array([[self.coords(l, e) for e in range(self.elems)] for l in range(threads)], np.int64).reshape(threads, self.elems, 2)

  def owners(self, threads: int, shape: tuple[int, int]) -> np.ndarray:
    """(rows, cols) array of the flat fragment position (lane * elems + e) of the first lane holding each matrix element.
    Raises if some element is held by no lane (the layout does not cover the matrix)."""
    t = self.table(threads).reshape(-1, 2)
    own = np.full(shape, -1, np.int64)
    for flat in range(t.shape[0] - 1, -1, -1): own[t[flat, 0], t[flat, 1]] = flat
    if (own < 0).any(): raise ValueError(f"layout {self} does not cover a {shape} matrix")
    return own


@dataclass(frozen=True)
class TensorCore:
  """D (M x N, dtype_out) = C + A (M x K, dtype_in) * B (K x N, dtype_in), one warp of `threads` lanes."""
  name: str                    # the WMMA uop's arg
  dims: tuple[int, int, int]   # (M, N, K)
  dtype_in: DType
  dtype_out: DType
  threads: int
  a: Layout                    # rows m, columns k
  b: Layout                    # rows k, columns n
  c: Layout                    # rows m, columns n (also D)

  def __post_init__(self) -> None:
    m, n, k = self.dims
    for lay, shape in ((self.a, (m, k)), (self.b, (k, n)), (self.c, (m, n))): lay.owners(self.threads, shape)
    if self.c.elems * self.threads != m * n: raise ValueError(f"{self.name}: the C layout must hold each element exactly once")

  @property
  def frag_dtypes(self) -> tuple[DType, DType, DType]:
    """The vector dtypes of one lane's A, B and C/D fragments."""
    return self.dtype_in.vec(self.a.elems), self.dtype_in.vec(self.b.elems), self.dtype_out.vec(self.c.elems)


def _cuda_m16n8k16(din: DType) -> TensorCore:
  # lane = 4 * groupID + threadID_in_group; A: row groupID (+8 for a2,a3,a6,a7), col 2*tig + (i&1) (+8 for i >= 4)
  # B: row 2*tig + (i&1) (+8 for i >= 2), col groupID;  C/D: row groupID (+8 for i >= 2), col 2*tig + (i&1)
  return TensorCore(f"CUDA_m16n8k16_{din.name}_float", (16, 8, 16), din, dtypes.float32, 32,
                    a=Layout(rows=(("l", 2), ("l", 3), ("l", 4), ("e", 1)), cols=(("e", 0), ("l", 0), ("l", 1), ("e", 2))),
                    b=Layout(rows=(("e", 0), ("l", 0), ("l", 1), ("e", 1)), cols=(("l", 2), ("l", 3), ("l", 4))),
                    c=Layout(rows=(("l", 2), ("l", 3), ("l", 4), ("e", 1)), cols=(("e", 0), ("l", 0), ("l", 1))))

def _rdna3_16x16x16(din: DType) -> TensorCore:
  # wave32: A row l%16 col e; B row e col l%16 (lanes 16..31 replicate 0..15); C/D row 2e + l//16, col l%16
  lane16 = (("l", 0), ("l", 1), ("l", 2), ("l", 3))
  ebits = (("e", 0), ("e", 1), ("e", 2), ("e", 3))
  return TensorCore(f"AMD_16x16x16_{din.name}_float", (16, 16, 16), din, dtypes.float32, 32,
                    a=Layout(rows=lane16, cols=ebits), b=Layout(rows=ebits, cols=lane16),
                    c=Layout(rows=(("l", 4), ("e", 0), ("e", 1), ("e", 2)), cols=lane16))


@dataclass(frozen=True)
class Target:
  """Facts about the hardware a kernel is optimized and lowered for."""
  name: str
  gpu: bool                               # real workgroups run in parallel: heuristics use work-items, GROUP and tensor cores
  max_threads_per_block: int              # work-items in one workgroup
  max_block_dims: tuple[int, int, int]    # work-items per workgroup, per dimension
  max_grid_dims: tuple[int, int, int]     # workgroups per launch, per dimension
  shared_memory_per_block: int            # bytes of statically declared local memory per workgroup
  warp_size: int                          # lanes that run in lockstep (warp / wavefront)
  max_vector_bytes: int                   # widest vector load/store the code generator emits
  tensor_cores: tuple[TensorCore, ...] = field(default=())


_BIG = 2 ** 31 - 1
CPU = Target("CPU", False, 256, (256, 256, 256), (_BIG, _BIG, _BIG), 48 * 1024, 1, 32)
# CUDA: compute capability 8.x; 48 KiB is the static __shared__ limit (more needs dynamic shared memory)
CUDA = Target("CUDA", True, 1024, (1024, 1024, 64), (_BIG, 65535, 65535), 48 * 1024, 32, 16,
              (_cuda_m16n8k16(dtypes.float16), _cuda_m16n8k16(dtypes.bfloat16)))
# AMD RDNA3 (gfx11), wave32: 1024 work-items and 64 KiB LDS per workgroup
AMD = Target("AMD", True, 1024, (1024, 1024, 1024), (_BIG, 65535, 65535), 64 * 1024, 32, 16,
             (_rdna3_16x16x16(dtypes.float16), _rdna3_16x16x16(dtypes.bfloat16)))
TARGETS: dict[str, Target] = {t.name: t for t in (CPU, CUDA, AMD)}
TENSOR_CORES: dict[str, TensorCore] = {tc.name: tc for t in TARGETS.values() for tc in t.tensor_cores}


def emulated() -> Target | None:
  """The target named by $EMULATE (CUDA or AMD), or None when it is unset."""
  name = knobs.get("EMULATE")
  return TARGETS[name] if name else None


# ---- limits: what a program must fit to run on a target's hardware --------------------------------------------------

def local_end(offset: int, dt: DType) -> int:
  """The local-memory layout rule, the one every device, launcher and mock uses: DEFINE_LOCALs are laid out in program
  order, each aligned to its scalar size. Where a local of (pointer) dtype `dt` placed after `offset` bytes ends."""
  al = dt.base.scalar().itemsize  # type: ignore[attr-defined]
  return -(-offset // al) * al + dt.size * dt.base.itemsize  # type: ignore[attr-defined]

def local_bytes(dts: Iterable[DType]) -> int:
  """Bytes of local memory of DEFINE_LOCALs of dtypes `dts`, in program order (`local_end`)."""
  end = 0
  for dt in dts: end = local_end(end, dt)
  return end


IDX_BLOCK_SIZE = 256   # work-items per workgroup along x when a GPU runs an idxD launch (a program without workgroups)
Geometry = tuple[tuple[int, int, int], tuple[int, int, int], dict[str, tuple[int, int]]]

def launch_sizes(uops: Iterable[UOp]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(global size, local size) of a linear program as a runtime launches it, from its SPECIALs: lidxD sizes the workgroup
  along D, gidxD and idxD the grid (an idxD launch is split into blocks by `launch_geometry` where the device needs it)."""
  gsz, lsz = [1, 1, 1], [1, 1, 1]
  for u in uops:
    if u.op is Ops.SPECIAL: (lsz if u.arg[0].startswith("lidx") else gsz)[int(u.arg[0][-1])] = u.arg[1]
  return (gsz[0], gsz[1], gsz[2]), (lsz[0], lsz[1], lsz[2])

def launch_geometry(uops: list[UOp], target: Target, idx_block_size: int = IDX_BLOCK_SIZE) -> Geometry:
  """(grid in workgroups, block in work-items, {SPECIAL name: (uop position, size)}) of the launch that runs `uops` on a GPU
  of `target`, after checking the program against the target's limits (see `check_limits`). An idxD launch (no workgroups)
  runs in blocks of `idx_block_size` work-items along x."""
  specials: dict[str, tuple[int, int]] = {}
  for i, u in enumerate(uops):
    if u.op is not Ops.SPECIAL: continue
    nm, size = u.arg
    if nm in specials and specials[nm][1] != size: raise ValueError(f"uop {i}: SPECIAL {nm} has two sizes ({specials[nm][1]} and {size})")
    specials.setdefault(nm, (i, size))
  def where(nm: str) -> str: return f"uop {specials[nm][0]} (SPECIAL {nm}, size {specials[nm][1]})"
  dim, t = "xyz", target.name
  idxs = [n for n in specials if n.startswith("idx")]
  gsz, lsz = launch_sizes(uops)
  grid, block = list(gsz), list(lsz)
  if idxs:
    if other := [n for n in specials if not n.startswith("idx")]:
      raise ValueError(f"{where(idxs[0])}: an idxD launch has no workgroups, so it cannot be mixed with {other[0]}")
    for i, u in enumerate(uops):
      if u.op in (Ops.DEFINE_LOCAL, Ops.BARRIER):
        raise ValueError(f"uop {i} ({u.op.name}): local memory and barriers need a gidx/lidx launch, this program uses {idxs[0]}")
    for nm in idxs:
      d, size = int(nm[-1]), specials[nm][1]
      block[d] = min(size, idx_block_size) if d == 0 else 1
      grid[d] = -(-size // block[d])
  for nm, (_, size) in specials.items():
    d = int(nm[-1])
    if nm.startswith("lidx") and size > target.max_block_dims[d]:
      raise ValueError(f"{where(nm)}: {size} work-items in dimension {dim[d]} exceed {t}'s {target.max_block_dims[d]}")
  for d in range(3):
    if grid[d] > target.max_grid_dims[d]:
      nm = next(n for n in specials if int(n[-1]) == d and not n.startswith("lidx"))
      raise ValueError(f"{where(nm)}: {grid[d]} workgroups in dimension {dim[d]} exceed {t}'s {target.max_grid_dims[d]}")
  if (threads := block[0] * block[1] * block[2]) > target.max_threads_per_block:
    nm = max((n for n in specials if n.startswith("lidx")), key=lambda n: specials[n][0])
    raise ValueError(f"{where(nm)}: {threads} work-items per workgroup ({'x'.join(map(str, block))}) exceed {t}'s {target.max_threads_per_block}")
  shared = 0
  for i, u in enumerate(uops):
    if u.op is not Ops.DEFINE_LOCAL: continue
    shared = local_end(shared, u.dtype)
    if shared > target.shared_memory_per_block:
      raise ValueError(f"uop {i} (DEFINE_LOCAL {u.arg}, {u.dtype!r}): local memory of the program reaches {shared} bytes, "
                       f"over {t}'s {target.shared_memory_per_block} bytes per workgroup")
  check_wmma(uops, target)
  return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), specials

def check_wmma(uops: list[UOp], target: Target | None) -> None:
  """Raise ValueError naming the uop for a WMMA whose tensor core `target` lacks (None: any known one will do), or whose
  workgroup does not split into whole warps of the tensor core (lanes missing from a warp would make it divergent)."""
  lsize = 1
  for u in uops:
    if u.op is Ops.SPECIAL and u.arg[0].startswith("lidx"): lsize *= u.arg[1]
  have = TENSOR_CORES if target is None else {tc.name: tc for tc in target.tensor_cores}
  for i, u in enumerate(uops):
    if u.op is not Ops.WMMA: continue
    if (tc := have.get(u.arg)) is None:
      raise ValueError(f"uop {i} (WMMA {u.arg}): {target.name if target else 'refgrad'} has no tensor core {u.arg!r} "
                       f"(it has: {', '.join(have) or 'none'})")
    if lsize % tc.threads:
      raise ValueError(f"uop {i} (WMMA {u.arg}): a workgroup of {lsize} work-items is not whole warps of {tc.threads} lanes "
                       "(the work-items of the lidx SPECIALs must be a multiple of the tensor core's threads)")

def check_limits(uops: list[UOp], target: Target) -> None:
  """Raise ValueError naming the uop where the linear program `uops` exceeds what a GPU of `target` can run: work-items per
  dimension and per workgroup, workgroups per dimension, bytes of local memory, a WMMA of a tensor core the target lacks or
  in a workgroup that is not whole warps. The GPU renderers and emulation (EMULATE=..., the PYTHON device) share this rule."""
  launch_geometry(uops, target)
