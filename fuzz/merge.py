"""`python -m fuzz merge DIR... --out DIR`: the corpora of several runs (CI matrix shards: `--shard I/N`) as one, deduplicated
by signature (oracle, device, dtype, first differing op): of each signature the smallest case is kept (fewest Opts, then the smallest AST),
and the others are counted in its `duplicates`. Every file is checked when read; one that cannot be read is reported
and left out (exit 2 after the merge)."""
from __future__ import annotations

import sys
from pathlib import Path

from oracles.case import Finding
from oracles.cliargs import OneLineParser, dir_problem


def _size(fd: Finding) -> tuple[int, int, str]: return (len(fd.case.opts), len(fd.case.ast), fd.content_hash)

def merge(dirs: list[Path], out: Path) -> tuple[dict[tuple[str, str, str], Finding], list[str]]:
  """(signature -> the finding kept, the lines saying which files could not be read); the kept ones are written to out."""
  best: dict[tuple[str, str, str], Finding] = {}
  bad: list[str] = []
  for d in dirs:
    for path in sorted(d.glob("*.json")):
      try: fd = Finding.load(path)
      except ValueError as e:
        bad.append(str(e))
        continue
      sig = fd.signature()
      if (old := best.get(sig)) is None: best[sig] = fd; continue
      keep, drop = (fd, old) if _size(fd) < _size(old) else (old, fd)
      keep.duplicates += drop.duplicates + 1
      best[sig] = keep
  for fd in best.values(): fd.save(out)
  return best, bad

def main(argv: list[str]) -> int:
  ap = OneLineParser(prog="python -m fuzz merge", description=__doc__.split("\n\n")[0])
  ap.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="corpus directories (e.g. one per shard)")
  ap.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory the merged corpus is written to")
  args = ap.parse_args(argv)
  for d in args.dirs:
    if not d.is_dir(): ap.error(f"{d}: not a directory")
  if (why := dir_problem(args.out, "--out")): ap.error(why)
  best, bad = merge(args.dirs, args.out)
  for line in bad: print(f"UNREADABLE: {line}")
  dups = sum(fd.duplicates for fd in best.values())
  print(f"{len(best)} signatures from {len(args.dirs)} directories written to {args.out} ({dups} duplicates counted, {len(bad)} unreadable)")
  return 2 if bad else 0

if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
