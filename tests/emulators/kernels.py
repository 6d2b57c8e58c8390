"""Small real kernels for the mock GPU tests: hand-built linear programs compiled by refgrad's Runner for the PYTHON
device (the bytes are what the NV runtime uploads), and a helper to launch one on a mock driver."""
from __future__ import annotations

import numpy as np

from refgrad.dtype import dtypes
from refgrad.program import Runner
from refgrad.uop.ops import Ops, UOp

from .nvenc import COMPUTE, Stream, image, launch, qmd_words, set_object

i32 = dtypes.int32


def add_kernel(n: int = 16) -> Runner:
  """out[i] = a[i] + b[i] (float32, one workgroup per element)."""
  out, a, b = (UOp.define_global(k, dtypes.float, n) for k in range(3))
  i = UOp.special("gidx0", n)
  la, lb = a.load(i), b.load(i)
  s = la + lb
  return Runner("add", [out, a, b, i, la, lb, s, out.store(i, s)], "PYTHON")

def reverse_kernel(groups: int = 4, width: int = 8) -> Runner:
  """Per workgroup, out[g*W + l] = in[g*W + W-1-l] * 3 + v through local memory and a barrier (v a variable)."""
  n = groups * width
  out, inp = UOp.define_global(0, i32, n), UOp.define_global(1, i32, n)
  v = UOp.variable("v", -100, 100)
  gi, li = UOp.special("gidx0", groups), UOp.special("lidx0", width)
  tmp = UOp(Ops.DEFINE_LOCAL, i32.ptr(width, local=True), (), "tmp")
  w, wm1, three = UOp.const(i32, width), UOp.const(i32, width - 1), UOp.const(i32, 3)
  base = gi * w
  idx = base + li
  x = inp.load(idx)
  s1 = tmp.store(li, x)
  b1 = UOp(Ops.BARRIER, dtypes.void, (s1,))
  rev = wm1 - li
  y = UOp(Ops.LOAD, i32, (tmp, rev, b1))   # the BARRIER source orders the load after every lane's store
  z = y * three
  r = z + v
  st = out.store(idx, r)
  return Runner("rev", [u for u in UOp(Ops.SINK, dtypes.void, (st,)).toposort if u.op is not Ops.SINK], "PYTHON")

def gather_kernel(n: int = 16) -> Runner:
  """out[i] = a[idx[i]] (float32 a, int32 idx): an undefined idx decides an address."""
  out, a, idx = UOp.define_global(0, dtypes.float, n), UOp.define_global(1, dtypes.float, n), UOp.define_global(2, i32, n)
  i = UOp.special("gidx0", n)
  j = idx.load(i)
  x = a.load(j)
  return Runner("gather", [out, a, idx, i, j, x, out.store(i, x)], "PYTHON")

def oob_kernel(n: int = 16) -> Runner:
  """Stores out[i] for i < 2n into a buffer of n elements: the lanes past n are out of bounds."""
  out = UOp.define_global(0, i32, n)
  i = UOp.special("gidx0", 2 * n)
  return Runner("oob", [out, i, out.store(i, i)], "PYTHON")


class Launcher:
  """Uploads a Runner's image, writes its constant buffer and QMD into host-visible memory, and builds launch words."""
  def __init__(self, drv, r: Runner, bufs: list[int], vals: tuple[int, ...] = (), **qmd: int):
    self.drv, self.r = drv, r
    img = image(r.lib)
    self.prog = drv.alloc(len(img), True)
    self.prog.host[:] = np.frombuffer(img, np.uint8)
    args = np.array(bufs, np.uint64).tobytes() + np.array(vals, np.int32).tobytes()
    self.cb = drv.alloc(max(1, len(args)), True)
    self.cb.host[:len(args)] = np.frombuffer(args, np.uint8)
    shared = sum(u.dtype.size * u.dtype.base.itemsize for u in r.spec.uops if u.op is Ops.DEFINE_LOCAL)
    fields = {"grid": r.spec.global_size, "block": r.spec.local_size, "shared": shared, **qmd}
    self.qmd = drv.alloc(256, True)
    self.qmd.host.view(np.uint32)[:] = qmd_words(self.prog.va, self.cb.va, len(args), **fields)

  def words(self, action: int = 9) -> list[int]: return launch(self.qmd.va, action)


def compute_stream(drv) -> Stream:
  s = Stream(drv, "compute")
  s.entry(set_object(COMPUTE, 0xC6C0))
  return s
