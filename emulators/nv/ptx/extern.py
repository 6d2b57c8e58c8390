"""Calls of functions a PTX module declares without a body (`.extern .func vprintf`, ...): CUDA's device runtime, run when a
thread reaches the call (a module that declares them loads and runs; only executing an unsupported one faults).

- vprintf(format, args): device printf. The format is a C string; `args` a per-thread buffer holding each argument at
  its natural alignment (int, char, short: 4 bytes; long, long long, pointers, double, float promoted to double: 8), as
  nvcc lays it out. Each executing thread's text is formatted with C printf semantics (host glibc's, which formats real
  CUDA printf output) and written to stdout when the launch ends (real CUDA flushes at synchronization points), ordered by
  block then thread, each thread's output whole. Returns the number of arguments parsed (CUDA Programming Guide,
  "Formatted Output"): 0 for none, -1 for a NULL format; at most 32 arguments, later conversions are printed as written.
  Conversions: d i u o x X c s p f F e E g G a A %%, flags - + space # 0, widths and precisions (also *), lengths hh h l ll
  j z t L; %n, %lc / %ls and anything else fault (naming the conversion) rather than print a guess.
- __assertfail(message, file, line, function, charSize): a failed assert(): a fault naming the assertion, where, and the
  threads; each failing thread's CUDA-style line is printed first.
- malloc / free: device heap allocation is not emulated: a fault when executed. Any other: a fault naming it.
"""
from __future__ import annotations

import math
import re
import struct
import sys
from collections.abc import Callable

import numpy as np

from emulators.nv.ptx.execute import LOCAL_WINDOW, WINDOW_SIZE, Launch, PTXFault
from emulators.nv.ptx.parse import GLOBAL_WINDOW, Instr

MAX_STRING = 1 << 16   # bytes read for one C string before it counts as unterminated
MAX_ARGS = 32          # printf arguments after the format (CUDA: more are ignored, their conversions printed as written)
_SPEC = re.compile(rb"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d*))?(hh|h|ll|l|j|z|t|L)?([diouxXcspfFeEgGaAn%])")
_LONG = (b"l", b"ll", b"j", b"z", b"t", b"L")


# ---- memory --------------------------------------------------------------------------------------------------------
def _read(L: Launch, lanes: np.ndarray, addr: np.ndarray, w: int) -> np.ndarray:
  """The w bytes at generic addresses addr for lanes ((n, w) uint8); module variables and the rest read apart (one load
  takes one kind)."""
  out = np.zeros((lanes.size, w), np.uint8)
  mod = addr >= np.uint64(GLOBAL_WINDOW)
  saved = L.sel
  try:
    for m in (mod, ~mod):
      if m.any():
        L.sel = lanes[m]
        out[m] = L.load("generic", addr[m], w)[0]
  finally: L.sel = saved
  return out


def _param(L: Launch, lanes: np.ndarray, name: str, w: int) -> np.ndarray:
  """A call argument (a .param variable of the caller, kept in its .local storage) as uint64 per lane."""
  off = np.full(lanes.size, L.symbol(name), np.uint64)
  saved = L.sel
  L.sel = lanes
  try: b, d = L.load("local", off, w)
  finally: L.sel = saved
  if L.checked and d is not None and not d.all():
    raise PTXFault("compute", f"argument {name} of {L.ins.args[0].value if L.ins else 'a call'} is undefined for "  # type: ignore[union-attr]
                   f"{L.lane_name(int(lanes[np.flatnonzero(~d)[0]]))}", L.ins)
  return np.ascontiguousarray(b).view({4: np.uint32, 8: np.uint64}[w]).reshape(-1).astype(np.uint64)


def _strings(L: Launch, lanes: np.ndarray, addr: np.ndarray) -> list[bytes]:
  """The NUL-terminated strings at addr (one per lane; local addresses read per lane, others once per address)."""
  local = (addr >= np.uint64(LOCAL_WINDOW)) & (addr < np.uint64(LOCAL_WINDOW + WINDOW_SIZE))
  key = np.where(local, np.arange(addr.size, dtype=np.uint64), addr)
  _, first, inv = np.unique(np.where(local, ~key, key), return_index=True, return_inverse=True)
  rl, ra = lanes[first], addr[first]
  rows = np.zeros((first.size, 0), np.uint8)
  live = np.arange(first.size)
  length = np.full(first.size, -1, np.int64)
  k = 0
  while live.size:
    if k >= MAX_STRING:
      raise PTXFault("compute", f"the string at 0x{int(ra[live[0]]):x} has no terminating NUL within {MAX_STRING} bytes "
                     f"(read by {L.lane_name(int(rl[live[0]]))})", L.ins)
    n = min(256, MAX_STRING - k)   # a chunk at a time, byte loads of every live string
    chunk = np.zeros((first.size, n), np.uint8)
    for j in range(n):
      b = _read(L, rl[live], ra[live] + np.uint64(k + j), 1)[:, 0]
      chunk[live, j] = b
      done = b == 0
      length[live[done]] = k + j
      live = live[~done]
      if not live.size: break
    rows = np.concatenate([rows, chunk], axis=1)
    k += n
  got = [rows[i, :length[i]].tobytes() for i in range(first.size)]
  return [got[i] for i in inv.reshape(-1)]


# ---- C printf formatting ------------------------------------------------------------------------------------------
def _pad(s: bytes, flags: bytes, width: int | None) -> bytes:
  if width is None or len(s) >= width: return s
  return s.ljust(width) if b"-" in flags else s.rjust(width)


def format_int(raw: int, flags: bytes, width: int | None, prec: int | None, conv: bytes, length: bytes | None) -> bytes:
  """One integer conversion (d i u o x X c) of an argument's raw bits as C's printf writes it."""
  bits = 64 if length in _LONG else 16 if length == b"h" else 8 if length == b"hh" else 32
  if conv == b"c": return _pad(bytes([raw & 0xFF]), flags, width)
  v = raw & ((1 << bits) - 1)
  if conv in (b"d", b"i") and v >> (bits - 1): v -= 1 << bits
  digits = (b"%d" if conv in (b"d", b"i", b"u") else b"%o" if conv == b"o" else b"%x" if conv == b"x" else b"%X") % abs(v)
  if prec is not None: digits = b"" if prec == 0 and v == 0 else digits.rjust(prec, b"0")
  prefix = b""
  if b"#" in flags:
    if conv == b"o" and not digits.startswith(b"0"): digits = b"0" + digits
    if conv in (b"x", b"X") and v != 0: prefix = b"0" + conv
  if conv in (b"d", b"i"): prefix = b"-" if v < 0 else b"+" if b"+" in flags else b" " if b" " in flags else b""
  if b"0" in flags and b"-" not in flags and prec is None and width is not None:
    digits = digits.rjust(width - len(prefix), b"0")
  return _pad(prefix + digits, flags, width)


def format_float(raw: int, flags: bytes, width: int | None, prec: int | None, conv: bytes) -> bytes:
  """One floating-point conversion (f F e E g G a A) of a double's bits as C's printf (glibc) writes it."""
  d = struct.unpack("<d", struct.pack("<Q", raw & 0xFFFFFFFFFFFFFFFF))[0]
  if math.isfinite(d) and conv in b"aA": return _hexfloat(raw, flags, width, prec, conv == b"A")
  if math.isfinite(d):
    spec = b"%" + flags + (b"%d" % width if width is not None else b"") + (b".%d" % prec if prec is not None else b"") + conv
    return spec % d
  neg = bool(raw >> 63)
  body = b"nan" if math.isnan(d) else b"inf"
  if conv.isupper(): body = body.upper()
  sign = b"-" if neg else b"+" if b"+" in flags else b" " if b" " in flags else b""
  return _pad(sign + body, flags, width)   # (the 0 flag does not pad inf / nan)


def _hexfloat(raw: int, flags: bytes, width: int | None, prec: int | None, upper: bool) -> bytes:
  """%a: 0x<lead>.<hex digits>p<binary exponent> (glibc: the lead digit 1, 0 for zero and subnormals (exponent -1022);
  without a precision the digits end at the last nonzero one; a precision rounds half to even, a carry making the lead 2)."""
  e, m = (raw >> 52) & 0x7FF, raw & ((1 << 52) - 1)
  full, exp = ((1 << 52) | m, e - 1023) if e else (m, -1022 if m else 0)
  if prec is None: digits = b"%013x" % (full & ((1 << 52) - 1))
  elif prec < 13:
    drop = 4 * (13 - prec)
    q, r = divmod(full, 1 << drop)
    if r > 1 << (drop - 1) or (r == 1 << (drop - 1) and q & 1): q += 1
    full = q << drop
    digits = b"%013x" % (full & ((1 << 52) - 1))
  else: digits = b"%013x" % (full & ((1 << 52) - 1)) + b"0" * (prec - 13)
  digits = digits.rstrip(b"0") if prec is None else digits[:prec]
  body = b"%x" % (full >> 52) + (b"." + digits if digits or b"#" in flags else b"") + b"p%+d" % exp
  prefix = (b"-" if raw >> 63 else b"+" if b"+" in flags else b" " if b" " in flags else b"") + b"0x"
  if b"0" in flags and b"-" not in flags and width is not None: body = body.rjust(width - len(prefix), b"0")
  out = _pad(prefix + body, flags, width)
  return out.upper() if upper else out


def format_string(s: bytes | None, flags: bytes, width: int | None, prec: int | None) -> bytes:
  if s is None: s = b"(null)" if prec is None or prec >= 6 else b""   # (glibc)
  elif prec is not None: s = s[:prec]
  return _pad(s, flags, width)


def format_pointer(v: int, flags: bytes, width: int | None) -> bytes:
  return _pad(b"(nil)" if v == 0 else b"0x%x" % v, flags, width)   # (glibc)


Piece = bytes | tuple   # literal text, or (flags, width, precision, length, conversion, [argument slots])


def parse_format(fmt: bytes) -> tuple[list[Piece], list[tuple[int, int]], str | None]:
  """(pieces, argument slots (offset, size) in the argument buffer, an unsupported conversion or None)."""
  pieces: list[Piece] = []
  slots: list[tuple[int, int]] = []
  off, pos = 0, 0
  def slot(size: int) -> int:
    nonlocal off
    off = -(-off // size) * size
    slots.append((off, size))
    off += size
    return len(slots) - 1
  while pos < len(fmt):
    k = fmt.find(b"%", pos)
    if k < 0:
      pieces.append(fmt[pos:])
      break
    if k > pos: pieces.append(fmt[pos:k])
    m = _SPEC.match(fmt, k)
    if m is None or m.group(5) == b"n" or (m.group(5) in (b"c", b"s") and m.group(4)):
      return pieces, slots, fmt[k:m.end() if m else k + 2].decode("latin-1")
    pos = m.end()
    flags, w, p, length, conv = m.groups()
    if conv == b"%":
      pieces.append(b"%")
      continue
    need = (w == b"*") + (p == b"*") + 1
    if len(slots) + need > MAX_ARGS:   # past CUDA's argument limit: written as it stands
      pieces.append(m.group(0))
      continue
    ws = slot(4) if w == b"*" else None
    ps = slot(4) if p == b"*" else None
    size = 8 if conv in b"fFeEgGaAsp" or length in _LONG else 4
    pieces.append((flags, int(w) if w and w != b"*" else ws if w else None, (int(p) if p else 0) if p not in (None, b"*") else ps,
                   length, conv, slot(size), w == b"*", p == b"*"))
  return pieces, slots, None


def _vprintf(L: Launch, ins: Instr) -> None:
  lanes = L.sel
  fmt_p = _param(L, lanes, str(ins.args[2].value[0].value), 8)  # type: ignore[index,union-attr]
  buf = _param(L, lanes, str(ins.args[2].value[1].value), 8)  # type: ignore[index,union-attr]
  ret = np.full(lanes.size, -1, np.int64)
  has = fmt_p != 0
  texts: dict[int, bytes] = {}
  if has.any():
    idx = np.flatnonzero(has)
    fmts = _strings(L, lanes[idx], fmt_p[idx])
    groups: dict[bytes, list[int]] = {}
    for j, f in zip(idx.tolist(), fmts): groups.setdefault(f, []).append(j)
    for f, members in groups.items():
      pieces, slots, bad = parse_format(f)
      if bad is not None: raise PTXFault("compute", f"printf conversion {bad!r} is not supported (format {f.decode('latin-1')!r})", ins)
      g = np.array(members)
      if slots and (buf[g] == 0).any():
        raise PTXFault("compute", f"printf format {f.decode('latin-1')!r} reads {len(slots)} arguments but the argument buffer is NULL "
                       f"(by {L.lane_name(int(lanes[g[np.flatnonzero(buf[g] == 0)[0]]]))})", ins)
      vals = [(_read(L, lanes[g], buf[g] + np.uint64(o), w).view(np.uint32 if w == 4 else np.uint64).reshape(-1)).tolist() for o, w in slots]
      strs: dict[int, list[bytes | None]] = {}
      for pc in pieces:
        if isinstance(pc, tuple) and pc[4] == b"s" and pc[5] not in strs:
          ptrs = np.array(vals[pc[5]], np.uint64)
          nz = np.flatnonzero(ptrs != 0)
          got = _strings(L, lanes[g[nz]], ptrs[nz]) if nz.size else []
          col: list[bytes | None] = [None] * g.size
          for t, s in zip(nz.tolist(), got): col[t] = s
          strs[pc[5]] = col
      for r, j in enumerate(members):
        out = bytearray()
        for pc in pieces:
          if isinstance(pc, bytes):
            out += pc
            continue
          flags, w, p, length, conv, a, wstar, pstar = pc
          if wstar:
            w = struct.unpack("<i", struct.pack("<I", vals[w][r]))[0]
            if w < 0: flags, w = flags + b"-", -w   # (C: a negative * width is the - flag)
          if pstar:
            p = struct.unpack("<i", struct.pack("<I", vals[p][r]))[0]
            if p < 0: p = None
          v = vals[a][r]
          if conv in b"fFeEgGaA": out += format_float(v, flags, w, p, conv)
          elif conv == b"s": out += format_string(strs[a][r], flags, w, p)
          elif conv == b"p": out += format_pointer(v, flags, w)
          else: out += format_int(v, flags, w, p, conv, length)
        texts[int(lanes[j])] = bytes(out)
        ret[j] = len(slots)
  if texts: _printed(L).append(texts)
  if ins.args[1].value:  # type: ignore[union-attr]
    _result(L, lanes, str(ins.args[1].value[0].value), ret)  # type: ignore[index,union-attr]


def _result(L: Launch, lanes: np.ndarray, name: str, v: np.ndarray) -> None:
  size = L.e.local[name].size
  saved = L.sel
  L.sel = lanes
  try: L.store("local", np.full(lanes.size, L.symbol(name), np.uint64), np.ascontiguousarray(v.astype(np.int64)).view(np.uint8).reshape(-1, 8)[:, :size], None)
  finally: L.sel = saved


def _printed(L: Launch) -> list[dict[int, bytes]]:
  """The launch's printf output so far: one {lane: text} per executed call, in execution order."""
  out = L.__dict__.get("printed")
  if out is None: out = L.__dict__["printed"] = []
  return out


def flush(L: Launch) -> None:
  """Write the launch's printf output to stdout: lanes in order (block, then thread), each lane's texts in its order."""
  calls = L.__dict__.pop("printed", None)
  if not calls: return
  per: dict[int, list[bytes]] = {}
  for texts in calls:
    for g, t in texts.items(): per.setdefault(g, []).append(t)
  data = b"".join(b"".join(per[g]) for g in sorted(per))
  sys.stdout.flush()
  raw = getattr(sys.stdout, "buffer", None)
  if raw is not None:
    raw.write(data)
    raw.flush()
  else: sys.stdout.write(data.decode("utf-8", "replace"))


def _assertfail(L: Launch, ins: Instr) -> None:
  lanes = L.sel
  names = [str(o.value) for o in ins.args[2].value]  # type: ignore[union-attr]
  if len(names) < 4: raise PTXFault("compute", f"__assertfail called with {len(names)} arguments (it takes message, file, line, function, charSize)", ins)
  msg, file, func = (_strings(L, lanes, _param(L, lanes, names[k], 8)) for k in (0, 1, 3))
  line = _param(L, lanes, names[2], 4)
  texts = {}
  for i, g in enumerate(lanes.tolist()):
    sp = L.special
    b = ",".join(str(int(sp[f"%ctaid.{c}"][g])) for c in "xyz")
    t = ",".join(str(int(sp[f"%tid.{c}"][g])) for c in "xyz")
    texts[g] = b"%s:%d: %s: block: [%s], thread: [%s] Assertion `%s` failed.\n" % (file[i], int(line[i]), func[i], b.encode(), t.encode(), msg[i])
  _printed(L).append(texts)
  more = f" and {lanes.size - 1} other thread{'s' if lanes.size > 2 else ''}" if lanes.size > 1 else ""
  def d(x: bytes) -> str: return x.decode("utf-8", "replace")
  raise PTXFault("compute", f"assertion `{d(msg[0])}` failed at {d(file[0])}:{int(line[0])} in {d(func[0])}, by {L.thread(0)}{more}", ins)


def _no_heap(L: Launch, ins: Instr) -> None:
  raise PTXFault("compute", f"device malloc is not emulated (call of {ins.args[0].value} by {L.thread(0)})", ins)


EXTERN: dict[str, Callable[[Launch, Instr], None]] = {"vprintf": _vprintf, "__assertfail": _assertfail, "malloc": _no_heap, "free": _no_heap}


def call(L: Launch, ins: Instr) -> None:
  """A `call` left after inlining: of a function declared without a body."""
  name = str(ins.args[0].value)
  h = EXTERN.get(name)
  if h is None: raise PTXFault("compute", f"call of {name}, which has no body in this module (extern functions are not emulated), by {L.thread(0)}", ins)
  h(L, ins)
