"""Format variants of a labelled attribution corpus, to check that rules hold when the same logs arrive
in another shape. Writes a copy of DIR (cases and labels) to OUT with every text log rewritten:

- `stamp`: in files whose lines carry runner prefixes (`12: `, `[rank12]:`, `[default3]:`, `[1,3]<std`),
  every line gets a log collector's stamp in front (`2024-03-14T02:51:07.000Z 12: ...`): the file's
  last ISO stamp so far, its first one before that (so a line may read later than it ran);
- `crlf`: Windows line ends.

    python benchmarks/attribution_variants.py tests/fixtures/attribution_corpus /tmp/stamped --variant stamp
    python benchmarks/attribution_eval.py /tmp/stamped

Exit code 2 for a DIR that does not exist or an OUT that does.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

_PREFIX = re.compile(r"^(?:\s*\d{1,7}: |\[rank\d|\[default\d|\[\d+,\d+\]<)")
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)[T _](\d\d:\d\d:\d\d)")
_BINARY = (".pkl", ".pickle", ".pt", ".bin", ".gz")


def stamp(text: str) -> str:
    first = _ISO.search(text)
    if first is None or not any(_PREFIX.match(line) for line in text.splitlines()):
        return text
    last = f"{first.group(1)}T{first.group(2)}"
    out = []
    for line in text.splitlines(keepends=True):
        m = _ISO.search(line)
        if m:
            last = f"{m.group(1)}T{m.group(2)}"
        out.append(f"{last}.000Z {line}" if line.strip() else line)
    return "".join(out)


def crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


VARIANTS = {"stamp": stamp, "crlf": crlf}


def rewrite(src: Path, out: Path, variant: str) -> int:
    """Copy `src` to `out`, rewriting its text logs; returns how many files were rewritten."""
    shutil.copytree(src, out)
    change = VARIANTS[variant]
    count = 0
    for path in sorted(out.rglob("*")):
        if not path.is_file() or path.name.endswith((".label.json", ".json", ".jsonl")) or path.suffix in _BINARY:
            continue
        if "fr" in path.relative_to(out).parts:
            continue  # flight-recorder dumps are data, not logs
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        new = change(text)
        if new != text:
            path.write_text(new, encoding="utf-8", newline="")
            count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="a corpus: case directories with CASE.label.json beside them")
    ap.add_argument("out", type=Path, help="where the rewritten copy goes (must not exist)")
    ap.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    args = ap.parse_args(argv)
    if not args.dir.is_dir():
        print(f"error: {args.dir} is not a directory", file=sys.stderr)
        return 2
    if args.out.exists():
        print(f"error: {args.out} exists; give a new path", file=sys.stderr)
        return 2
    n = rewrite(args.dir, args.out, args.variant)
    print(f"{args.out}: {n} file(s) rewritten ({args.variant})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
