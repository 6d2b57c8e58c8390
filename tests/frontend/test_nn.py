"""nn layers against numpy, optimizers against numpy implementations of the same update rules, state dicts."""
import numpy as np
import pytest

from refgrad import Tensor, dtypes, nn
from refgrad.nn.optim import SGD, Adam, AdamW
from refgrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save

TOL = {"rtol": 1e-5, "atol": 1e-6}   # float32 results vs a float64 numpy reference


def rnd(*shape, seed=0, scale=1.0) -> np.ndarray:
  return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)

def setp(t: Tensor, v: np.ndarray) -> np.ndarray:
  t.assign(Tensor(v))
  return v.astype(np.float64)


# ---- Linear ----------------------------------------------------------------------------------------------

def test_linear_forward_and_grad():
  lin = nn.Linear(5, 3)
  assert lin.weight.shape == (3, 5) and lin.bias.shape == (3,)
  w, b, x, c = setp(lin.weight, rnd(3, 5, seed=1)), setp(lin.bias, rnd(3, seed=2)), rnd(4, 5, seed=3), rnd(4, 3, seed=4)
  xt = Tensor(x, requires_grad=True)
  for t in (lin.weight, lin.bias): t.requires_grad_(True)
  y = lin(xt)
  np.testing.assert_allclose(y.numpy(), x @ w.T + b, **TOL)
  (y * Tensor(c)).sum().backward()
  np.testing.assert_allclose(lin.weight.grad.numpy(), c.T.astype(np.float64) @ x, **TOL)
  np.testing.assert_allclose(lin.bias.grad.numpy(), c.sum(0), **TOL)
  np.testing.assert_allclose(xt.grad.numpy(), c @ w, **TOL)

def test_linear_batched_no_bias_and_init():
  lin = nn.Linear(16, 8, bias=False)
  assert lin.bias is None and get_state_dict(lin).keys() == {"weight"}
  w = lin.weight.numpy()
  assert np.all(np.abs(w) <= 0.25) and np.std(w) > 0.05 and len(np.unique(w)) > 100   # U(-1/sqrt(16), 1/sqrt(16))
  x = rnd(2, 3, 16)
  np.testing.assert_allclose(lin(Tensor(x)).numpy(), x.astype(np.float64) @ w.T, **TOL)

def test_linear_errors():
  with pytest.raises(ValueError, match="needs a last axis of 5"): nn.Linear(5, 3)(Tensor(rnd(2, 4)))
  with pytest.raises(ValueError, match="positive int"): nn.Linear(0, 3)


# ---- Conv2d ----------------------------------------------------------------------------------------------

def np_conv2d(x, w, b, stride, pads, dilation, groups):
  """pads: (top, bottom, left, right)."""
  x, w = x.astype(np.float64), w.astype(np.float64)
  n, _, _, _ = x.shape
  o, cg, kh, kw = w.shape
  (sh, sw), (dh, dw) = stride, dilation
  xp = np.pad(x, ((0, 0), (0, 0), pads[:2], pads[2:]))
  oh, ow = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1, (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
  out, og = np.zeros((n, o, oh, ow)), o // groups
  for g in range(groups):
    for i in range(kh):
      for j in range(kw):
        patch = xp[:, g * cg:(g + 1) * cg, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
        out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, i, j])
  return out if b is None else out + b.reshape(1, -1, 1, 1)

@pytest.mark.parametrize("kw", [
  dict(kernel_size=3),
  dict(kernel_size=(2, 3), stride=2, padding=1),
  dict(kernel_size=3, padding=(1, 2), dilation=(2, 1), groups=2, bias=False),
  dict(kernel_size=2, padding="same"),
  dict(kernel_size=3, padding="same", dilation=2),
  dict(kernel_size=3, padding="valid", stride=(1, 2)),
])
def test_conv2d_forward(kw):
  conv = nn.Conv2d(4, 6, **kw)
  k = conv.kernel_size
  assert conv.weight.shape == (6, 4 // conv.groups, *k) and (conv.bias is None) == (kw.get("bias") is False)
  w = setp(conv.weight, rnd(*conv.weight.shape, seed=1))
  b = setp(conv.bias, rnd(6, seed=2)) if conv.bias is not None else None
  x = rnd(2, 4, 7, 8, seed=3)
  pad = kw.get("padding", 0)
  if pad == "same":
    th, tw = [conv.dilation[i] * (k[i] - 1) for i in range(2)]
    pads = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
  elif pad == "valid": pads = (0, 0, 0, 0)
  else:
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    pads = (ph, ph, pw, pw)
  y = conv(Tensor(x))
  ref = np_conv2d(x, w, b, conv.stride, pads, conv.dilation, conv.groups)
  assert y.shape == ref.shape
  if pad == "same": assert y.shape[2:] == x.shape[2:]
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5)   # sums of up to 36 products: cancellation

def test_conv2d_errors():
  with pytest.raises(ValueError, match="divisible by groups"): nn.Conv2d(4, 6, 3, groups=4)
  with pytest.raises(ValueError, match="'same' needs stride 1"): nn.Conv2d(4, 6, 3, stride=2, padding="same")
  with pytest.raises(ValueError, match="padding must be"): nn.Conv2d(4, 6, 3, padding="full")
  with pytest.raises(ValueError, match="kernel_size must be"): nn.Conv2d(4, 6, (3, 3, 3))
  with pytest.raises(ValueError, match=r"must be \(N, 4, H, W\)"): nn.Conv2d(4, 6, 3)(Tensor(rnd(1, 3, 5, 5)))


# ---- normalization -----------------------------------------------------------------------------------------

def np_norm_grad(x, g, axes, eps):
  """d/dx of sum(g * (x - mean) / sqrt(var + eps)) with biased statistics over axes."""
  mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
  r = 1 / np.sqrt(var + eps)
  xhat = (x - mu) * r
  return r * (g - g.mean(axes, keepdims=True) - xhat * (g * xhat).mean(axes, keepdims=True))

def test_batchnorm_training_forward_stats_and_grad():
  bn = nn.BatchNorm2d(3, momentum=0.2)
  w, b = setp(bn.weight, rnd(3, seed=1)), setp(bn.bias, rnd(3, seed=2))
  for t in (bn.weight, bn.bias): t.requires_grad_(True)
  x, c = rnd(4, 3, 2, 2, seed=3, scale=3.0).astype(np.float64) + 1.0, rnd(4, 3, 2, 2, seed=4)
  xt = Tensor(x.astype(np.float32), requires_grad=True)
  with Tensor.train():
    y = bn(xt)
  axes, sh = (0, 2, 3), (1, 3, 1, 1)
  mu, var = x.mean(axes), x.var(axes)
  ref = (x - mu.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-5) * w.reshape(sh) + b.reshape(sh)
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)
  Tensor.realize_all(bn.running_mean, bn.running_var, bn.num_batches_tracked)
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.2 * mu, **TOL)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.8 + 0.2 * var * 16 / 15, **TOL)   # unbiased: n/(n-1), n = 16
  assert bn.num_batches_tracked.numpy().tolist() == [1] and bn.num_batches_tracked.dtype == dtypes.int64
  (y * Tensor(c)).sum().backward()
  xhat = (x - mu.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-5)
  np.testing.assert_allclose(xt.grad.numpy(), np_norm_grad(x, c * w.reshape(sh), axes, 1e-5), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(bn.weight.grad.numpy(), (c * xhat).sum(axes), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(bn.bias.grad.numpy(), c.sum(axes), rtol=1e-5, atol=1e-5)

def test_batchnorm_eval_uses_running_stats():
  bn = nn.BatchNorm(3, eps=1e-3)
  assert not Tensor.training
  rm, rv = setp(bn.running_mean, rnd(3, seed=1)), setp(bn.running_var, np.array([0.5, 2.0, 1.0], np.float32))
  x = rnd(2, 3, seed=2)
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), (x - rm) / np.sqrt(rv + 1e-3), **TOL)
  np.testing.assert_array_equal(bn.running_mean.numpy(), rm.astype(np.float32))   # eval does not update

def test_batchnorm_untracked_and_not_affine():
  bn = nn.BatchNorm(2, affine=False, track_running_stats=False)
  assert get_state_dict(bn) == {}
  x = rnd(5, 2, 3, seed=1).astype(np.float64)
  ref = (x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-5)
  np.testing.assert_allclose(bn(Tensor(x.astype(np.float32))).numpy(), ref, rtol=1e-4, atol=1e-5)   # eval, yet batch stats

def test_batchnorm_state_and_errors():
  bn = nn.BatchNorm(4)
  assert list(get_state_dict(bn)) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
  with pytest.raises(ValueError, match=r"must be \(N, 4, ...\)"): bn(Tensor(rnd(2, 3)))
  with Tensor.train(), pytest.raises(ValueError, match="more than one value per channel"): bn(Tensor(rnd(1, 4)))

def test_layernorm_forward_and_grad():
  ln = nn.LayerNorm((2, 3), eps=1e-4)
  w, b = setp(ln.weight, rnd(2, 3, seed=1)), setp(ln.bias, rnd(2, 3, seed=2))
  for t in (ln.weight, ln.bias): t.requires_grad_(True)
  x, c = rnd(4, 2, 3, seed=3, scale=2.0).astype(np.float64), rnd(4, 2, 3, seed=4)
  xt = Tensor(x.astype(np.float32), requires_grad=True)
  y = ln(xt)
  axes = (1, 2)
  xhat = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-4)
  np.testing.assert_allclose(y.numpy(), xhat * w + b, rtol=1e-4, atol=1e-5)
  (y * Tensor(c)).sum().backward()
  np.testing.assert_allclose(xt.grad.numpy(), np_norm_grad(x, c * w, axes, 1e-4), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(ln.weight.grad.numpy(), (c * xhat).sum(0), rtol=1e-4, atol=1e-5)

def test_layernorm_no_affine_and_errors():
  ln = nn.LayerNorm(4, elementwise_affine=False)
  assert get_state_dict(ln) == {}
  x = rnd(3, 4, seed=5).astype(np.float64)
  np.testing.assert_allclose(ln(Tensor(x.astype(np.float32))).numpy(), (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5),
                             rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match=r"must end in \(4,\)"): ln(Tensor(rnd(4, 3)))


# ---- Embedding -------------------------------------------------------------------------------------------

def test_embedding_forward_grad_and_out_of_range():
  emb = nn.Embedding(5, 3)
  assert emb.weight.shape == (5, 3) and np.all(np.abs(emb.weight.numpy()) <= np.sqrt(6 / 8))
  w = setp(emb.weight, rnd(5, 3, seed=1))
  emb.weight.requires_grad_(True)
  idx = np.array([[0, 4, 4], [2, 7, -1]])
  y = emb(Tensor(idx.astype(np.int32)))
  assert y.shape == (2, 3, 3)
  ref = np.where(((idx >= 0) & (idx < 5))[..., None], w[np.clip(idx, 0, 4)], 0.0)
  np.testing.assert_array_equal(y.numpy(), ref.astype(np.float32))   # a row copied exactly; outside the vocabulary: zeros
  c = rnd(2, 3, 3, seed=2)
  (y * Tensor(c)).sum().backward()
  gref = np.zeros((5, 3))
  for (i, j), k in np.ndenumerate(idx):
    if 0 <= k < 5: gref[k] += c[i, j]
  np.testing.assert_allclose(emb.weight.grad.numpy(), gref, **TOL)

@pytest.mark.parametrize("dt", [dtypes.uint8, dtypes.int64])
def test_embedding_index_dtypes(dt):
  emb = nn.Embedding(300, 2)
  w = emb.weight.numpy()
  idx = np.array([0, 255, 299] if dt == dtypes.int64 else [0, 7, 255])
  np.testing.assert_array_equal(emb(Tensor(idx, dtype=dt)).numpy(), w[idx])

def test_embedding_rejects_float_indices():
  with pytest.raises(TypeError, match="integer tensor"): nn.Embedding(4, 2)(Tensor([1.0]))


# ---- optimizers vs numpy --------------------------------------------------------------------------------------

def np_sgd(p, grads, lr, momentum=0.0, wd=0.0, nesterov=False):
  f = np.float32
  p, b, out = p.copy(), np.zeros_like(p), []
  for g in grads:
    if wd: g = g + f(wd) * p
    if momentum:
      b = f(momentum) * b + g
      g = g + f(momentum) * b if nesterov else b
    p = p - f(lr) * g
    out.append(p.copy())
  return out

def np_adamw(p, grads, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
  f = np.float32
  p, m, v, b1t, b2t, out = p.copy(), np.zeros_like(p), np.zeros_like(p), f(1), f(1), []
  for g in grads:
    b1t, b2t = b1t * f(b1), b2t * f(b2)
    m = f(b1) * m + f(1 - b1) * g
    v = f(b2) * v + f(1 - b2) * (g * g)
    up = (m / (f(1) - b1t)) / (np.sqrt(v / (f(1) - b2t)) + f(eps))
    if wd: up = up + f(wd) * p
    p = p - f(lr) * up
    out.append(p.copy())
  return out

def run_opt(make, p0, grads):
  t = Tensor(p0)
  opt = make([t])
  assert opt.params == [t] and t.requires_grad is True
  out = []
  for g in grads:
    opt.zero_grad()
    t.grad = Tensor(g)
    opt.step()
    out.append(t.numpy())
  return out

P0, GRADS = rnd(2, 3, seed=10), [rnd(2, 3, seed=11 + i) for i in range(3)]

@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True, weight_decay=0.1), dict(weight_decay=0.01)])
def test_sgd_matches_numpy(kw):
  got = run_opt(lambda ps: SGD(ps, lr=0.1, **kw), P0, GRADS)
  ref = np_sgd(P0, GRADS, 0.1, kw.get("momentum", 0.0), kw.get("weight_decay", 0.0), kw.get("nesterov", False))
  for a, b in zip(got, ref): np.testing.assert_array_equal(a, b)   # the same float32 operations in the same order: exact

@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_matches_numpy(name):
  make = (lambda ps: Adam(ps, lr=0.01)) if name == "adam" else (lambda ps: AdamW(ps, lr=0.01, b1=0.8, weight_decay=0.1))
  got = run_opt(make, P0, GRADS)
  ref = np_adamw(P0, GRADS, 0.01) if name == "adam" else np_adamw(P0, GRADS, 0.01, b1=0.8, wd=0.1)
  for a, b in zip(got, ref): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert not np.allclose(got[-1], P0, atol=1e-3)

def test_optimizer_params_buffers_and_errors():
  lin, bn = nn.Linear(3, 2), nn.BatchNorm(2)
  frozen = Tensor(rnd(2), requires_grad=False)
  ps = [*get_parameters(lin), *get_parameters(bn), lin.weight, frozen]
  opt = SGD(ps, lr=0.1)
  # requires_grad None -> True; int or requires_grad=False tensors are buffers; duplicates kept once
  assert opt.params == [lin.weight, lin.bias, bn.weight, bn.bias]
  assert opt.buffers == [bn.running_mean, bn.running_var, bn.num_batches_tracked, frozen]
  with pytest.raises(RuntimeError, match=r"parameter 0 \(shape \(2, 3\)\) has no gradient"): opt.step()
  with pytest.raises(ValueError, match="none of the 1 tensors"): SGD([frozen])
  with pytest.raises(TypeError, match=r"params\[0\] is a ndarray"): Adam([np.zeros(3)])
  with pytest.raises(ValueError, match="nesterov needs a momentum"): SGD(get_parameters(lin), nesterov=True)

def test_optimizer_step_keeps_tensor_identity_and_lr_setter():
  lin = nn.Linear(2, 1, bias=False)
  w = lin.weight
  opt = SGD(get_parameters(lin), lr=0.5)
  x = Tensor(np.array([[1.0, 2.0]], np.float32))
  w0 = w.numpy()
  lin(x).sum().backward()
  opt.step()
  assert lin.weight is w and opt.params[0] is w
  np.testing.assert_array_equal(w.numpy(), w0 - np.float32(0.5) * np.array([[1.0, 2.0]], np.float32))
  opt.lr = 0.25   # a number: the value changes, the kernels do not
  assert opt.lr.shape == () and opt.lr.item() == 0.25
  opt.zero_grad()
  assert w.grad is None
  w1 = w.numpy()
  lin(x).sum().backward()
  opt.step()
  np.testing.assert_array_equal(w.numpy(), w1 - np.float32(0.25) * np.array([[1.0, 2.0]], np.float32))

def test_batchnorm_running_stats_realized_by_step():
  bn = nn.BatchNorm(2)
  opt = SGD(get_parameters(bn), lr=0.0)
  x = rnd(4, 2, seed=3)
  with Tensor.train():
    bn(Tensor(x)).sum().backward()
  opt.step()
  from refgrad.uop.ops import Ops
  assert all(t.uop.op in (Ops.BUFFER, Ops.RESHAPE) for t in (bn.running_mean, bn.running_var, bn.num_batches_tracked))
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), **TOL)


# ---- state dicts ----------------------------------------------------------------------------------------------

class Block:
  def __init__(self):
    self.lin = nn.Linear(3, 3)
    self.norm = nn.LayerNorm(3)

class Model:
  def __init__(self):
    self.blocks = [Block(), Block()]
    self.heads = {"out": nn.Linear(3, 2, bias=False)}
    self.scale = Tensor(np.array([2.0], np.float32))
    self.name, self.n = "model", 3
  def __call__(self, x: Tensor) -> Tensor:
    for b in self.blocks: x = b.norm(b.lin(x)).relu()
    return self.heads["out"](x) * self.scale

def test_get_state_dict_names_and_parameters():
  m = Model()
  sd = get_state_dict(m)
  assert list(sd) == [f"blocks.{i}.{k}" for i in range(2) for k in ("lin.weight", "lin.bias", "norm.weight", "norm.bias")] + ["heads.out.weight", "scale"]
  assert sd["blocks.1.lin.weight"] is m.blocks[1].lin.weight
  assert list(get_state_dict(m.blocks[0], prefix="b0.")) == ["b0.lin.weight", "b0.lin.bias", "b0.norm.weight", "b0.norm.bias"]
  m.heads["tied"] = m.heads["out"]   # a tensor reachable twice: two names, one parameter
  assert "heads.tied.weight" in get_state_dict(m) and len(get_parameters(m)) == 10
  m.parent = m   # cycles do not recurse forever
  m.np, m.fn, m.act, m.cls, m.ids = np, test_get_state_dict_names_and_parameters, Tensor.relu, Model, {3: Tensor([1])}   # code is not state
  assert list(get_state_dict(m))[9:] == ["heads.tied.weight", "scale", "ids.3"]

def test_layers_of_equal_shape_have_their_own_parameters():
  # equal initial values (ones, zeros) must still be distinct nodes, or autograd would treat two layers' parameters as one
  a, b = nn.LayerNorm(3), nn.LayerNorm(3)
  SGD([*get_parameters(a), *get_parameters(b)])
  assert len({t.uop for t in [a.weight, a.bias, b.weight, b.bias]}) == 4
  x = Tensor(rnd(2, 3, seed=1))
  (a(x) * Tensor(rnd(2, 3, seed=2))).sum().backward()
  assert a.weight.grad is not None and b.weight.grad is None

def test_state_dict_round_trip_through_safetensors(tmp_path):
  m1, m2 = Model(), Model()
  x = Tensor(rnd(2, 3, seed=7))
  y1 = m1(x).numpy()
  assert not np.array_equal(m2(x).numpy(), y1)
  safe_save(get_state_dict(m1), tmp_path / "m.safetensors")
  w2 = m2.blocks[0].lin.weight
  load_state_dict(m2, safe_load(tmp_path / "m.safetensors"))
  assert m2.blocks[0].lin.weight is w2   # the same Tensor objects, new contents
  np.testing.assert_array_equal(m2(x).numpy(), y1)

def test_loaded_models_are_independent():
  m1 = Model()
  sd = get_state_dict(m1)
  m2, m3 = Model(), Model()
  load_state_dict(m2, sd)
  load_state_dict(m3, sd)
  for t in get_parameters(m2) + get_parameters(m3): t.requires_grad_(True)
  m2(Tensor(rnd(2, 3, seed=8))).sum().backward()
  assert m2.blocks[0].lin.weight.grad is not None and m3.blocks[0].lin.weight.grad is None

def test_load_state_dict_errors():
  m = Model()
  sd = get_state_dict(Model())
  with pytest.raises(KeyError, match=r"missing keys \['scale'\], unexpected keys \['extra'\]"):
    load_state_dict(m, {**{k: v for k, v in sd.items() if k != "scale"}, "extra": Tensor([1.0])})
  with pytest.raises(ValueError, match=r"shape mismatch for 'scale': model has \(1,\), state dict has \(2,\)"):
    load_state_dict(m, {**sd, "scale": Tensor([1.0, 2.0])})
  with pytest.raises(TypeError, match=r"dtype mismatch for 'scale': model has dtypes.float, state dict has dtypes.int"):
    load_state_dict(m, {**sd, "scale": Tensor([1])})
  before = m.scale.numpy()
  load_state_dict(m, {"scale": Tensor([5.0]), "extra": Tensor([1.0])}, strict=False)   # the rest is left as it was
  assert m.scale.numpy().tolist() == [5.0] and before.tolist() == [2.0]

def test_optimizer_mixed_dtypes_keep_their_dtypes():
  a, b = Tensor(np.array([1.0, 2.0], np.float64)), Tensor(np.array([1.0], np.float16))
  opt = AdamW([a, b], lr=0.1)
  a.grad, b.grad = Tensor(np.array([1.0, -1.0], np.float64)), Tensor(np.array([2.0], np.float16))
  opt.step()
  assert a.dtype == dtypes.float64 and b.dtype == dtypes.float16 and opt.lr.dtype == dtypes.float64
  # the first Adam step moves each weight by about lr * sign(grad) (plus the decay)
  np.testing.assert_allclose(a.numpy(), [1.0 - 0.1 * (1 + 0.01), 2.0 + 0.1 * (1 - 0.02)], rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), [1.0 - 0.1 * 1.01], rtol=1e-3)
