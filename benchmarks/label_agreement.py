"""How far a second labeller agrees with a corpus's labels, beside how far the verdicts do.

    python benchmarks/label_agreement.py CORPUS SECOND [--json]

CORPUS is a directory in the layout `attribution_eval.py` reads (`CASE/` and `CASE.label.json`). SECOND holds
`CASE.label.json` files, written by someone who read only the logs of CORPUS's cases of those names (not the
thread a case was modelled on, nor CORPUS's label, nor the tool). For the cases both label it prints:

- category: how often the two labels agree;
- culprit: how often SECOND's label, scored as the harness scores a verdict, is right against CORPUS's label,
  over the cases whose CORPUS label names a culprit (the harness's culprit figure);
- restartable: how often the two agree where both say;

and the same three for the verdicts on those cases. The second labeller's figures are the ceiling a reader of
the logs reaches: a goal above it asks for what the logs do not say. Exit code 0 when it ran, 2 for a bad
directory or label.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from attribution_eval import LabelError, _attribute, culprit_right, load_cases, parse_label


def _as_verdict(label: dict[str, Any]) -> dict[str, Any]:
    """A label in the shape of a report, so the harness's culprit rule scores it."""
    return {"culprit": {"ranks": label["ranks"], "nodes": [label["node"]] if label["node"] else []}}


def _figures(rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Category, culprit (over cases whose first label names one) and restartable agreement of (first, other)."""
    named = [(a, b) for a, b in rows if a["ranks"] or a["node"] is not None]
    said = [(a, b) for a, b in rows if a["restartable"] is not None and b["restartable"] is not None]
    return {
        "category": sum(a["category"] == b["category"] for a, b in rows),
        "cases": len(rows),
        "culprit": sum(culprit_right(a, _as_verdict(b)) for a, b in named),
        "culprit_cases": len(named),
        "restartable": sum(a["restartable"] == b["restartable"] for a, b in said),
        "restartable_cases": len(said),
    }


def agreement(corpus: Path, second: Path) -> dict[str, Any]:
    cases = {name: (case, label) for name, case, label in load_cases(corpus)}
    pairs, verdicts = [], []
    for path in sorted(second.glob("*.label.json")):
        name = path.name[: -len(".label.json")]
        if name not in cases:
            raise LabelError(f"{path}: {corpus} has no case {name}")
        case, label = cases[name]
        pairs.append((label, parse_label(path)))
        report = _attribute(case, use_cli=False)
        got = {"category": report["category"], "ranks": sorted(report["culprit"]["ranks"]),
               "node": None, "restartable": report["restartable"]}  # fmt: skip
        verdicts.append((label, got, report))
    tool = _figures([(a, b) for a, b, _ in verdicts])
    # the verdict may name several nodes: score its culprit with the harness itself, not as a one-node label
    tool["culprit"] = sum(culprit_right(a, r) for a, _, r in verdicts if a["ranks"] or a["node"] is not None)
    return {"second_labeller": _figures(pairs), "verdicts": tool}


def _line(what: str, f: dict[str, Any]) -> str:
    def pct(n: int, d: int) -> str:
        return f"{n}/{d} ({100 * n / d:.0f} %)" if d else "-"

    return (f"{what:16} category {pct(f['category'], f['cases']):14} culprit {pct(f['culprit'], f['culprit_cases']):14}"
            f" restartable {pct(f['restartable'], f['restartable_cases'])}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    for d in (args.corpus, args.second):
        if not d.is_dir():
            print(f"error: {d} is not a directory", file=sys.stderr)
            return 2
    try:
        result = agreement(args.corpus, args.second)
    except LabelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_line("second labeller", result["second_labeller"]))
        print(_line("verdicts", result["verdicts"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
