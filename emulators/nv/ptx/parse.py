"""PTX module text -> entries of decoded instructions (PTX ISA 9.0, the subset nvcc -O3 emits for sm_80 plus what
refgrad's CUDA renderer produces). Parsed once per distinct text (`parse` is cached by content).

Every statement is either understood or rejected with a `PTXError` naming the line and what is not supported. A statement
inside a function that the emulator cannot take (an indirect call, a call prototype, recursion, ...) is an error of that
function (`Entry.error`), raised when an entry that runs it is loaded: the module's other entries load and run. Calls of
functions declared without a body stay calls, run or faulted when reached (emulators/nv/ptx/extern.py). Module-scope
initializers: emulators/nv/ptx/initializers.py. Debug directives (.loc, .file, .section, .pragma) are accepted and ignored."""
from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass, field

from emulators.nv.ptx import initializers as INIT

TYPES = {"s8": 1, "s16": 2, "s32": 4, "s64": 8, "u8": 1, "u16": 2, "u32": 4, "u64": 8, "b8": 1, "b16": 2, "b32": 4, "b64": 8, "b128": 16,
         "f16": 2, "f16x2": 4, "bf16": 2, "bf16x2": 4, "f32": 4, "f64": 8, "pred": 1, "tf32": 4, "e4m3x2": 2, "e5m2x2": 2}
LINE_DIRECTIVES = (".version", ".target", ".address_size", ".loc", ".file")
WARP_OPS = ("shfl", "vote", "activemask", "match", "redux", "mma", "wmma", "ldmatrix", "bar", "barrier")
SPACES = ("global", "shared", "local", "param", "const")
IGNORED_DIRECTIVES = (".loc", ".file", ".section", ".pragma", ".maxntid", ".reqntid", ".minnctapersm", ".maxnreg", ".noreturn",
                      ".explicitcluster", ".maxclusterrank", ".reqnctapercluster")


GLOBAL_WINDOW = 3 << 48   # module-scope .global/.const variables: their addresses (execute.py reads them from here)


class PTXError(ValueError):
  """A PTX module the emulator cannot take: names the line and what is wrong or unsupported."""
  def __init__(self, line: int, text: str, why: str):
    super().__init__(f"PTX line {line}: {why} (in: {text.strip()[:120]!r})")
    self.line, self.text, self.why = line, text, why


@dataclass(frozen=True)
class Operand:
  """kind: reg (a register or special register), imm (int), fimm (float bits + width), sym (a variable's address),
  addr (base operand + byte offset), vec (a list of operands), label, pair (d|p destinations)."""
  kind: str
  value: object
  offset: int = 0


@dataclass
class Instr:
  op: str                    # the family: add, ld, setp, ...
  mods: tuple[str, ...]      # every dotted part after the family, in order (types included)
  types: tuple[str, ...]     # the type parts, in order
  args: tuple[Operand, ...]
  pred: str | None           # guard predicate register
  pred_neg: bool
  line: int
  text: str
  def has(self, m: str) -> bool: return m in self.mods


@dataclass
class Var:
  name: str
  space: str
  type: str
  size: int                  # bytes
  align: int
  offset: int = 0            # within its state space (shared/local/param)
  init: bytes | None = None


@dataclass
class Entry:
  name: str
  params: list[Var]
  regs: dict[str, str]                       # register -> declared type
  instrs: list[Instr] = field(default_factory=list)
  labels: dict[str, int] = field(default_factory=dict)
  shared: dict[str, Var] = field(default_factory=dict)
  local: dict[str, Var] = field(default_factory=dict)
  shared_bytes: int = 0
  dynamic_shared: bool = False
  local_bytes: int = 0
  param_bytes: int = 0
  is_entry: bool = True
  globals: dict[str, Var] = field(default_factory=dict)   # the module's .global/.const variables (GLOBAL_WINDOW + offset)
  globals_bytes: int = 0
  warp_ops: bool = False     # uses warp-level instructions (shfl vote activemask match redux mma) or %laneid/%lanemask
  rets: list[Var] = field(default_factory=list)   # a .func's return parameters
  call_params: set[str] = field(default_factory=set)   # .param variables declared in the body (call arguments / results): per-thread .local
  steps: tuple | None = None  # the pre-decoded closures (emulators/nv/ptx/fast.py) and scheduler tables, built on the first launch
  body: bool = False          # has a body here (else a declaration: an extern function, called by name at run time)
  error: PTXError | None = None   # what this function (or one it calls) uses that is not supported: raised when the entry is loaded
  inlined: bool = False       # its calls of other .funcs are already replaced by their bodies


@dataclass
class Module:
  version: str
  target: str
  entries: dict[str, Entry]
  globals: dict[str, Var]


_TOKEN = re.compile(r"\s*(\.?[A-Za-z_$%][\w$.:%]*|0[fFdD][0-9A-Fa-f]+|-?0[xX][0-9A-Fa-f]+U?|-?\d+\.\d*(?:[eE][-+]?\d+)?|-?\d+U?|\S)")


def _strip_comments(src: str) -> list[str]:
  src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
  return [ln.split("//", 1)[0] for ln in src.split("\n")]


_IN_BRACES = re.compile(r"[^{};:]+")


def _statements(lines: list[str]) -> list[tuple[int, str]]:
  """(line number, statement) with ';' '{' '}' as terminators; a label 'L:' is its own statement."""
  out: list[tuple[int, str]] = []
  cur, start, skip, pending, vec = "", 0, 0, False, 0
  for i, ln in enumerate(lines, 1):
    st = ln.strip()
    if st.startswith(".section"):   # debug sections: skipped with their brace block
      skip, pending = ln.count("{") - ln.count("}"), "{" not in ln
      continue
    if pending or skip:
      if pending and not st: continue
      pending = False
      skip += ln.count("{") - ln.count("}")
      continue
    if st.startswith(LINE_DIRECTIVES) and not cur.strip():   # these end at the line's end, with no ';'
      out.append((i, st.rstrip(";")))
      continue
    j = 0
    while j < len(ln):
      if vec and (run := _IN_BRACES.match(ln, j)) is not None:   # inside an initializer or vector: the run up to the next brace at once
        cur += run.group(0)
        j = run.end()
        continue
      ch = ln[j]
      j += 1
      if not cur.strip(): start = i
      if ch == "{" and (vec or (cur.strip() and (not cur.lstrip().startswith(".") or cur.rstrip().endswith("=")))): vec += 1   # a vector or (nested) initializer
      if vec and ch in "{}":
        if ch == "}": vec -= 1
        cur += ch
        continue
      if ch in ";{}":
        if cur.strip(): out.append((start, cur.strip()))
        if ch != ";": out.append((i, ch))
        cur = ""
      elif ch == ":" and re.fullmatch(r"\s*[$\w]+", cur) and not cur.strip().startswith("."):
        out.append((start, cur.strip() + ":"))
        cur = ""
      else: cur += ch
    cur += " "
  if cur.strip(): out.append((start, cur.strip()))
  return out


def _int(tok: str) -> int:
  t = tok.rstrip("U")
  return int(t, 16) if t.lower().startswith(("0x", "-0x")) else int(t)


def _operand(s: str, ln: int, text: str) -> Operand:
  s = s.strip()
  if not s: raise PTXError(ln, text, "an empty operand")
  if s.startswith("{"):
    if not s.endswith("}"): raise PTXError(ln, text, f"unterminated vector operand {s!r}")
    return Operand("vec", tuple(_operand(x, ln, text) for x in s[1:-1].split(",")))
  if s.startswith("["):
    if not s.endswith("]"): raise PTXError(ln, text, f"unterminated address {s!r}")
    inner = s[1:-1].replace(" ", "")
    m = re.fullmatch(r"([%$\w.]+)(?:\+(-?(?:0[xX][0-9a-fA-F]+|\d+)))?", inner) or re.fullmatch(r"([%$\w.]+)(-(?:0[xX][0-9a-fA-F]+|\d+))", inner)
    if m: return Operand("addr", _operand(m.group(1), ln, text), _int(m.group(2)) if m.group(2) else 0)
    if re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)", inner): return Operand("addr", Operand("imm", _int(inner)), 0)
    raise PTXError(ln, text, f"address expression {s!r} is not supported (only [reg], [var], [reg+imm], [imm])")
  if "|" in s:
    a, b = s.split("|", 1)
    return Operand("pair", (_operand(a, ln, text), _operand(b, ln, text)))
  if re.fullmatch(r"0[fF][0-9A-Fa-f]{8}", s): return Operand("fimm", (int(s[2:], 16), 4))
  if re.fullmatch(r"0[dD][0-9A-Fa-f]{16}", s): return Operand("fimm", (int(s[2:], 16), 8))
  if re.fullmatch(r"-?(?:0[xX][0-9A-Fa-f]+|\d+)U?", s): return Operand("imm", _int(s))
  if re.fullmatch(r"-?\d+\.\d*(?:[eE][-+]?\d+)?", s):
    return Operand("fimm", (struct.unpack("<Q", struct.pack("<d", float(s)))[0], 8))
  if s.startswith("!") and re.fullmatch(r"[%$\w.]+", s[1:]): return Operand("not", _operand(s[1:], ln, text))
  m = re.fullmatch(r"([%$\w.]+)\+(\d+)", s)
  if m: return Operand("sym", m.group(1), int(m.group(2)))
  if re.fullmatch(r"%[\w.$]+", s): return Operand("reg", s)
  if re.fullmatch(r"[$\w.]+", s): return Operand("sym", s)
  raise PTXError(ln, text, f"operand {s!r} is not supported")


def _rename(o: Operand, ren: dict[str, str], regs: dict[str, str] | None = None) -> Operand:
  """o with registers renamed by ren; with regs, a name without % that is a declared register (inline asm declares
  `.reg .f16 low;` and writes `mov.b32 {low,high}, %r1;`) becomes a register operand."""
  if o.kind in ("reg", "sym"):
    v = ren.get(o.value, o.value)  # type: ignore[arg-type]
    return Operand("reg" if regs is not None and o.kind == "sym" and not o.offset and v in regs else o.kind, v, o.offset)
  if o.kind in ("vec", "pair"): return Operand(o.kind, tuple(_rename(x, ren, regs) for x in o.value), o.offset)  # type: ignore[union-attr]
  if o.kind in ("addr", "not"): return Operand(o.kind, _rename(o.value, ren, regs), o.offset)  # type: ignore[arg-type]
  return o


def _bare(o: Operand) -> bool:
  """An operand naming something without % (a register only where it was declared so)."""
  if o.kind == "sym": return True
  if o.kind in ("vec", "pair"): return any(_bare(x) for x in o.value)  # type: ignore[union-attr]
  return o.kind in ("addr", "not") and _bare(o.value)  # type: ignore[arg-type]


def _split_args(s: str) -> list[str]:
  out, depth, cur = [], 0, ""
  for ch in s:
    if ch in "{[": depth += 1
    elif ch in "}]": depth -= 1
    if ch == "," and depth == 0: out.append(cur); cur = ""
    else: cur += ch
  if cur.strip(): out.append(cur)
  return out


def _decl(text: str, ln: int) -> tuple[str, str, int, int, list[tuple[str, int]], str | None]:
  """`.space [.align n] .type name[<n>|[n]] [= init]` -> (space, type, align, element size, [(name, count or range)], init)."""
  init = None
  if "=" in text: text, init = text.split("=", 1)
  parts = text.replace("\t", " ").split()
  space, align, typ, names = parts[0][1:], 0, None, []
  i = 1
  while i < len(parts):
    p = parts[i]
    if p == ".align": align = int(parts[i + 1]); i += 2; continue
    if p.startswith(".") and p[1:] in TYPES: typ = p[1:]; i += 1; continue
    if p in (".v2", ".v4", ".ptr", ".noreturn") or p.startswith(".ptr"):
      raise PTXError(ln, text, f"declaration modifier {p} is not supported")
    names.append(p); i += 1
  if typ is None: raise PTXError(ln, text, "a declaration without a supported type")
  out = []
  for n in " ".join(names).split(","):
    n = n.strip()
    if not n: continue
    if (m := re.fullmatch(r"([%$\w]+)<(\d+)>", n)): out.append((m.group(1), -int(m.group(2))))       # a register range
    elif (m := re.fullmatch(r"([%$\w]+)((?:\[\d*\])+)", n)):
      dims = re.findall(r"\[(\d*)\]", m.group(2))
      cnt = 1
      for d in dims: cnt *= int(d) if d else 0
      out.append((m.group(1), cnt if all(dims) else 0))
    else: out.append((n, 1))
  return space, typ, align or TYPES[typ], TYPES[typ], out, init


def _parse_params(s: str, ln: int, text: str) -> list[Var]:
  out, off = [], 0
  for p in _split_args(s):
    p = p.strip()
    if not p: continue
    space, typ, align, es, names, _ = _decl(p, ln)
    if space != "param": raise PTXError(ln, text, f"kernel parameter {p!r} is not in the .param space")
    (name, cnt), = names
    off = -(-off // align) * align
    out.append(Var(name, "param", typ, es * max(cnt, 1), align, off))
    off += es * max(cnt, 1)
  return out


def _guard(stmt: str, ln: int, raw: str) -> tuple[str | None, bool, str]:
  """A statement's guard `@p` / `@!p` split off: (predicate or None, negated, the rest)."""
  if not stmt.startswith("@"): return None, False, stmt
  m = re.match(r"@(!?)(%?[\w$]+)\s+", stmt)   # (inline asm may name a predicate it declared without %)
  if not m: raise PTXError(ln, raw, "a malformed guard predicate")
  return m.group(2), m.group(1) == "!", stmt[m.end():]


def _instr(stmt: str, ln: int, raw: str) -> Instr:
  pred, neg, stmt = _guard(stmt, ln, raw)
  m = re.match(r"([a-z][\w.:]*)\s*(.*)$", stmt, re.S)
  if not m: raise PTXError(ln, raw, "not an instruction")
  parts = m.group(1).split(".")
  op, mods = parts[0], tuple("shared" if x == "shared::cta" else x for x in parts[1:])   # (a CTA's own shared memory, as .shared)
  types = tuple(x for x in mods if x in TYPES)
  args = tuple(_operand(a, ln, raw) for a in _split_args(m.group(2))) if m.group(2).strip() else ()
  return Instr(op, mods, types, args, pred, neg, ln, raw)


_CALL = re.compile(r"call(?:\.uni)?\s+(?:\(\s*([^()]*?)\s*\)\s*,\s*)?([$\w]+)\s*(?:,\s*\(\s*([^()]*?)\s*\))?\s*$", re.S)


def _call(stmt: str, ln: int, raw: str) -> Instr:
  """call{.uni} (results), func, (arguments): args = (func name, results vec, arguments vec), each a .param variable."""
  pred, neg, stmt = _guard(stmt, ln, raw)
  m = _CALL.fullmatch(stmt.strip())
  if not m: raise PTXError(ln, raw, "call form not supported (only direct calls `call (results), func, (params)`; no function pointers or prototypes)")
  def names(x: str | None) -> tuple[Operand, ...]:
    out = tuple(_operand(a, ln, raw) for a in (x or "").split(",") if a.strip())
    if any(o.kind != "sym" for o in out): raise PTXError(ln, raw, "call arguments must be .param variables")
    return out
  mods = tuple(stmt.split(None, 1)[0].split(".")[1:])
  return Instr("call", mods, (), (Operand("sym", m.group(2)), Operand("vec", names(m.group(1))), Operand("vec", names(m.group(3)))), pred, neg, ln, raw)


def _inline_calls(e: Entry, entries: dict[str, Entry], stack: list[str]) -> None:
  """Replace every `call` of e by the callee's body (PTX ISA §9.7.12.2: by-value .param arguments and results): the
  callee's registers, labels and .local/.param variables get names of their own per call site; its parameters and
  results name the caller's argument and result variables; `ret` jumps to the instruction after the call. A call of a
  function declared without a body (vprintf, __assertfail, malloc, ...) stays a `call`: it runs (or faults) when a thread
  reaches it (emulators/nv/ptx/extern.py). What cannot be inlined (recursion, a callee with an unsupported statement) is
  a PTXError naming the line, for the entries that make the call."""
  out: list[Instr] = []
  labels_at: dict[int, list[str]] = {}
  for lab, at in e.labels.items(): labels_at.setdefault(at, []).append(lab)
  new_labels: dict[str, int] = {}
  for idx, ins in enumerate(e.instrs):
    for lab in labels_at.get(idx, []): new_labels[lab] = len(out)
    if ins.op != "call":
      out.append(ins)
      continue
    name = str(ins.args[0].value)
    f = entries.get(name)
    if f is None or f.is_entry: raise PTXError(ins.line, ins.text, f"call of {name}, which is not a .func of this module")
    if name in stack: raise PTXError(ins.line, ins.text, f"recursive call of {name} ({' -> '.join(stack)}) is not supported")
    if f.error is not None:
      raise PTXError(f.error.line, f.error.text, f"{f.error.why} (in {name}, called at PTX line {ins.line})")
    rets, argv = ins.args[1].value, ins.args[2].value
    if len(argv) != len(f.params) or len(rets) != len(f.rets):  # type: ignore[arg-type]
      raise PTXError(ins.line, ins.text, f"call of {name} with {len(argv)} arguments and {len(rets)} results; it takes "  # type: ignore[arg-type]
                     f"{len(f.params)} and {len(f.rets)}")
    if not f.body:   # extern: decided when executed
      out.append(ins)
      continue
    if ins.pred is not None: raise PTXError(ins.line, ins.text, "a guarded call is not supported")
    if not f.inlined and any(i.op == "call" for i in f.instrs): _inline_calls(f, entries, [*stack, name])
    tag = f"@{ins.line}.{idx}"
    ren = {r: r + tag for r in f.regs}
    for r, t in f.regs.items(): e.regs[r + tag] = t
    for v in f.local.values():   # the callee's own .local / call variables, after the caller's
      e.local_bytes = -(-e.local_bytes // v.align) * v.align
      e.local[v.name + tag] = Var(v.name + tag, "local", v.type, v.size, v.align, e.local_bytes)
      e.local_bytes += v.size
      ren[v.name] = v.name + tag
      if v.name in f.call_params: e.call_params.add(v.name + tag)
    if f.shared: raise PTXError(ins.line, ins.text, f"{name} declares .shared variables: not supported in a called function")
    for p, a in zip([*f.params, *f.rets], [*argv, *rets]): ren[p.name] = str(a.value)  # type: ignore[union-attr]
    end = f"$ret{tag}"
    flab = {lab: lab + tag for lab in f.labels}
    flabels_at: dict[int, list[str]] = {}
    for lab, at in f.labels.items(): flabels_at.setdefault(at, []).append(lab)
    for j, x in enumerate(f.instrs):
      for lab in flabels_at.get(j, []): new_labels[flab[lab]] = len(out)
      args = tuple(_rename(a, {**ren, **flab}) for a in x.args)
      pred = ren.get(x.pred, x.pred) if x.pred is not None else None
      if x.op == "ret": out.append(Instr("bra", ("uni",), (), (Operand("sym", end),), pred, x.pred_neg, x.line, x.text))
      else: out.append(Instr(x.op, x.mods, x.types, args, pred, x.pred_neg, x.line, x.text))
    for lab in flabels_at.get(len(f.instrs), []): new_labels[flab[lab]] = len(out)
    new_labels[end] = len(out)
  for lab in labels_at.get(len(e.instrs), []): new_labels[lab] = len(out)
  e.instrs, e.labels, e.inlined = out, new_labels, True


def _param_to_local(e: Entry) -> None:
  """ld.param / st.param of call variables (and a .func's own parameters, when it runs inlined) address .local storage."""
  for k, ins in enumerate(e.instrs):
    if ins.op in ("ld", "st") and "param" in ins.mods:
      a = ins.args[0] if ins.op == "st" else ins.args[1] if len(ins.args) > 1 else None
      if a is not None and a.kind == "addr" and a.value.kind == "sym" and a.value.value in e.call_params:  # type: ignore[union-attr]
        e.instrs[k] = Instr(ins.op, tuple("local" if m == "param" else m for m in ins.mods), ins.types, ins.args, ins.pred, ins.pred_neg, ins.line, ins.text)


@functools.lru_cache(maxsize=256)
def parse(src: str) -> Module:
  """The module of a PTX text; PTXError names the first line it cannot take."""
  lines = _strip_comments(src)
  raw = src.split("\n")
  stmts = _statements(lines)
  version = target = ""
  entries: dict[str, Entry] = {}
  gvars: dict[str, Var] = {}
  mshared: list[Var] = []
  inits: dict[str, tuple[list, int, int]] = {}   # variable -> (element values, element size, line): resolved once laid out
  i = 0
  cur: Entry | None = None
  depth = 0
  scopes: list[dict[str, str]] = []
  def text(ln: int) -> str: return raw[ln - 1] if 0 < ln <= len(raw) else ""
  while i < len(stmts):
    ln, s = stmts[i]
    i += 1
    if cur is None:
      if s in ("{", "}"): raise PTXError(ln, text(ln), f"a stray {s!r} outside a function")
      head = s.split()[0]
      if head == ".version": version = s.split()[1]; continue
      if head == ".target": target = s.split()[1].rstrip(","); continue
      if head == ".address_size":
        if s.split()[1] != "64": raise PTXError(ln, text(ln), "only .address_size 64 is supported")
        continue
      if head in IGNORED_DIRECTIVES: continue
      m = re.match(r"((?:\.visible|\.extern|\.weak)\s+)*\.(entry|func)\s+(?:\((.*?)\)\s*)?([$\w]+)\s*(?:\((.*)\))?\s*(.*)$", s, re.S)
      if m:
        params = _parse_params(m.group(5) or "", ln, text(ln))
        e = Entry(m.group(4), params, {}, is_entry=m.group(2) == "entry")
        if m.group(3):
          if e.is_entry: raise PTXError(ln, text(ln), "an .entry cannot return values")
          e.rets = _parse_params(m.group(3), ln, text(ln))
        e.param_bytes = max((p.offset + p.size for p in params), default=0)
        if i < len(stmts) and stmts[i][1] == "{":
          i += 1; cur, depth, scopes, e.body = e, 1, [{}], True
        old = entries.get(e.name)
        if old is not None and old.body and e.body: raise PTXError(ln, text(ln), f"function {e.name} is defined twice")
        if old is None or e.body: entries[e.name] = e   # (a declaration after the definition keeps the definition)
        continue
      if head in (".global", ".const", ".shared") or (head in (".visible", ".extern", ".weak") and len(s.split()) > 1):
        d = s
        while d.split()[0] in (".visible", ".extern", ".weak") and len(d.split()) > 1: d = d.split(None, 1)[1]   # (linkage: one module here)
        space, typ, align, es, names, init = _decl(d, ln)
        if space == "shared":   # module-scope (e.g. extern __shared__ arrays): in the shared space of every entry
          if init is not None: raise PTXError(ln, text(ln), "initialized .shared variables are not supported")
          for n, cnt in names: mshared.append(Var(n, "shared", typ, es * cnt, align))
          continue
        if space not in ("global", "const"): raise PTXError(ln, text(ln), f"a module-scope .{space} variable is not supported")
        vals = None
        if init is not None:
          if len(names) != 1: raise PTXError(ln, text(ln), "an initializer for several variables")
          dm = re.search(re.escape(names[0][0]) + r"\s*((?:\[\s*\d*\s*\])*)\s*$", d.split("=", 1)[0])
          dims = [int(x) if x.strip() else 0 for x in re.findall(r"\[([^\]]*)\]", dm.group(1))] if dm else []
          try: vals = INIT.parse_init(init, typ, dims)
          except INIT.InitError as ex: raise PTXError(ln, text(ln), f"initializer {init.strip()[:60]!r} of {names[0][0]}: {ex}") from None
          inits[names[0][0]] = (vals, es, ln)
        for n, cnt in names:
          gvars[n] = Var(n, space, typ, es * (cnt or len(vals or ())), align, 0, None)
        continue
      raise PTXError(ln, text(ln), f"directive or statement {head!r} at module scope is not supported")
    # inside a function body
    if s == "{":
      depth += 1
      scopes.append({})
      continue
    if s == "}":
      depth -= 1
      scopes.pop()
      if depth == 0: cur = None
      continue
    try:   # a statement the emulator cannot take: an error of this function (of the entries that run it), not of the module
      if s.endswith(":") and " " not in s:
        if s[:-1] in cur.labels: raise PTXError(ln, text(ln), f"label {s[:-1]} is defined twice")
        cur.labels[s[:-1]] = len(cur.instrs); continue
      if re.match(r"\.(reg|local|shared|param)\.", s): s = s[:s.index(".", 1)] + " " + s[s.index(".", 1):]   # `.reg.b32 f;` (cuda_fp16.hpp)
      head = s.split()[0]
      if head in IGNORED_DIRECTIVES: continue
      if head == ".reg":
        _, typ, _, _, names, _ = _decl(s, ln)
        for n, cnt in names:
          for k in (range(-cnt) if cnt < 0 else [None]):
            r = n if k is None else f"{n}{k}"
            if depth > 1:   # a nested block's register shadows the outer one (inline asm scopes): give it its own name
              scopes[-1][r] = f"{r}#{ln}"
              r = scopes[-1][r]
            cur.regs[r] = typ
        continue
      if head == ".param":   # a call's argument or result variable: per-thread storage (.local), scoped like registers
        _, typ, align, es, names, _ = _decl(s, ln)
        for n, cnt in names:
          name = n
          if depth > 1:
            scopes[-1][n] = f"{n}#{ln}"
            name = scopes[-1][n]
          cur.local_bytes = -(-cur.local_bytes // align) * align
          cur.local[name] = Var(name, "local", typ, es * max(cnt, 1), align, cur.local_bytes)
          cur.local_bytes += es * max(cnt, 1)
          cur.call_params.add(name)
        continue
      if head in (".shared", ".local", ".extern") or (head == ".global"):
        d = s.split(None, 1)[1] if head == ".extern" else s
        space, typ, align, es, names, init = _decl(d, ln)
        if init is not None: raise PTXError(ln, text(ln), f"initialized .{space} variables are not supported")
        if space not in ("shared", "local"): raise PTXError(ln, text(ln), f"a .{space} variable inside a function is not supported")
        for n, cnt in names:
          if space == "shared":
            cur.shared_bytes = -(-cur.shared_bytes // align) * align
            cur.shared[n] = Var(n, space, typ, es * cnt, align, cur.shared_bytes)
            if cnt == 0: cur.dynamic_shared = True
            cur.shared_bytes += es * cnt
          else:
            cur.local_bytes = -(-cur.local_bytes // align) * align
            cur.local[n] = Var(n, space, typ, es * cnt, align, cur.local_bytes)
            cur.local_bytes += es * cnt
        continue
      if head == ".callprototype" or re.match(r"[$\w]+\s*:\s*\.callprototype\b", s):   # (`label: .callprototype`: the label split off)
        raise PTXError(ln, text(ln), "a call prototype (.callprototype, for indirect calls through function pointers) is not supported")
      if head.startswith(".") and not head.startswith("@"): raise PTXError(ln, text(ln), f"directive {head} is not supported inside a function")
      ins = _call(s, ln, text(ln)) if re.match(r"(@!?%\w+\s+)?call\b", s) else _instr(s, ln, text(ln))
      ren = {k: v for sc in scopes[1:] for k, v in sc.items()} if depth > 1 and any(scopes[1:]) else {}
      if ren or (ins.op != "call" and any(_bare(a) for a in ins.args)):
        ins.args = tuple(_rename(a, ren, cur.regs if ins.op != "call" else None) for a in ins.args)
        if ins.pred in ren: ins.pred = ren[ins.pred]
      cur.instrs.append(ins)
    except PTXError as ex:
      if cur.error is None: cur.error = ex
  if cur is not None: raise PTXError(len(raw), text(len(raw)), f"function {cur.name} is not closed (missing '}}')")
  off = 0
  for v in gvars.values():
    off = -(-off // v.align) * v.align
    v.offset, off = off, off + v.size
  bad = _initial_bytes(gvars, inits, raw)
  for e in entries.values():
    if e.is_entry and e.error is None and any(i.op == "call" for i in e.instrs):   # a .func only where called
      try: _inline_calls(e, entries, [e.name])
      except PTXError as ex: e.error = ex
  for e in entries.values():
    _param_to_local(e)
    for v in sorted(mshared, key=lambda v: v.size == 0):   # after the function's own; extern arrays (no size) last: dynamic shared memory
      if v.name in e.shared: continue
      e.shared_bytes = -(-e.shared_bytes // v.align) * v.align
      e.shared[v.name] = Var(v.name, "shared", v.type, v.size, v.align, e.shared_bytes)
      e.shared_bytes += v.size
      if v.size == 0: e.dynamic_shared = True
    e.globals, e.globals_bytes = gvars, off
    e.warp_ops = any(i.op in WARP_OPS or any(a.kind == "reg" and str(a.value).startswith(("%laneid", "%lanemask", "%warpid")) for a in i.args)
                     for i in e.instrs)
    for ins in e.instrs:
      if e.error is not None: break
      for a in ins.args:
        if a.kind == "sym" and ins.op in ("bra", "brx") and a.value not in e.labels:
          e.error = PTXError(ins.line, ins.text, f"branch to undefined label {a.value}")
        elif (x := _syms(a) & bad.keys()):
          why = bad[min(x)]
          e.error = PTXError(why.line, why.text, f"{why.why} (used at PTX line {ins.line})")
  return Module(version, target, entries, gvars)


def _syms(o: Operand) -> set[str]:
  if o.kind == "sym": return {str(o.value)}
  if o.kind in ("vec", "pair"): return set().union(*(_syms(x) for x in o.value))  # type: ignore[union-attr]
  if o.kind in ("addr", "not"): return _syms(o.value)  # type: ignore[arg-type]
  return set()


def _initial_bytes(gvars: dict[str, Var], inits: dict[str, tuple[list, int, int]], raw: list[str]) -> dict[str, PTXError]:
  """Each initialized variable's bytes (addresses of module variables: GLOBAL_WINDOW + offset, as execute.py places
  them). A variable whose initializer names something that is not a module variable (a function's address: indirect
  calls are not emulated) gets no bytes but an error, as does one whose initializer takes its address: returned (variable
  -> error) for the entries that use them."""
  where = {n: GLOBAL_WINDOW + v.offset for n, v in gvars.items()}
  bad: dict[str, PTXError] = {}
  for n, (vals, es, ln) in inits.items():
    try: gvars[n].init = INIT.resolve(vals, es, where)
    except INIT.InitError as ex: bad[n] = PTXError(ln, raw[ln - 1] if 0 < ln <= len(raw) else "", f"initializer of {n}: {ex}")
  grew = True
  while grew:   # a variable holding the address of an unusable one is unusable too
    grew = False
    for n, (vals, _, ln) in inits.items():
      if n not in bad and (x := INIT.symbols(vals) & bad.keys()):
        bad[n] = PTXError(ln, raw[ln - 1] if 0 < ln <= len(raw) else "", f"initializer of {n} takes the address of {min(x)}, which is unusable")
        grew = True
  return bad
