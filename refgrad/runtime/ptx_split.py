"""One PTX module of many kernels (a batched nvcc call) -> one module per kernel.

A module is its header (comments, `.version`, `.target`, `.address_size`) and top-level items: declarations that end
in `;` (`.global` tables, `.func` prototypes) and definitions that end in a `{...}` body (`.entry` kernels, `.func`
helpers). A kernel's module is the header, the non-kernel items it names (transitively), in the order nvcc wrote them,
and the kernel itself: what nvcc writes for that kernel compiled alone (it compiles each kernel on its own), up to
comments, blank lines and names local to a function that nvcc numbers by the function's place in the module (branch
labels, local depots). A module of another shape is a ValueError, and the caller compiles its kernels one by one."""
from __future__ import annotations

import re
from dataclasses import dataclass

_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NAME = re.compile(r"([A-Za-z_$][A-Za-z0-9_$]*)\s*[(\[]")   # an item's name: the identifier before its parameters or size
_RETVAL = re.compile(r"\.func\s*\([^)]*\)")   # a helper's return value, before its name
_HEADER = (".version", ".target", ".address_size")


@dataclass(frozen=True)
class Item:
  name: str
  text: str          # the item's lines, the comment lines just before it included
  entry: bool        # a kernel (`.entry`)
  refs: frozenset[str]


def _code(line: str) -> str: return line.split("//", 1)[0]

def items(ptx: str) -> tuple[str, list[Item]]:
  """(the header, the top-level items in order). ValueError when the text does not have that shape."""
  lines = ptx.splitlines(keepends=True)
  first = next((i for i, ln in enumerate(lines) if (c := _code(ln).strip()) and not c.startswith(_HEADER)), len(lines))
  head_end = max((i + 1 for i, ln in enumerate(lines[:first]) if _code(ln).strip()), default=0)   # after the last directive
  out: list[Item] = []
  cur: list[str] = []   # the item being read, with the comment lines before it
  depth = 0
  for ln in lines[head_end:]:
    cur.append(ln)
    code = _code(ln).strip()
    depth += code.count("{") - code.count("}")
    if depth < 0: raise ValueError(f"PTX module: unbalanced '}}' at {ln.strip()!r}")
    if depth == 0 and (code.endswith("}") or code.endswith(";")):
      body = "".join(_code(x) for x in cur)
      if not (m := _NAME.search(_RETVAL.sub(".func ", body, count=1))): raise ValueError(f"PTX module: a top-level item without a name: {body.strip()[:80]!r}")
      out.append(Item(m.group(1), "".join(cur), ".entry" in body.split("(", 1)[0], frozenset(_IDENT.findall(body)) - {m.group(1)}))
      cur = []
  if depth or any(_code(x).strip() for x in cur): raise ValueError("PTX module: it ends inside a top-level item")
  return "".join(lines[:head_end]), out


def split(ptx: str) -> dict[str, str]:
  """{kernel name: a module holding that kernel and what it uses}."""
  header, its = items(ptx)
  defined: dict[str, list[int]] = {}
  for i, it in enumerate(its):
    if not it.entry: defined.setdefault(it.name, []).append(i)
  out = {}
  for it in its:
    if not it.entry: continue
    need: set[int] = set()
    todo = [it]
    while todo:
      for r in todo.pop().refs:
        for i in defined.get(r, ()):
          if i not in need:
            need.add(i)
            todo.append(its[i])
    if it.name in out: raise ValueError(f"PTX module: two kernels named {it.name}")
    out[it.name] = header + "".join(x.text for i, x in enumerate(its) if i in need or x is it)
  return out
