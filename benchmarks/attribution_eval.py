"""Attribution against labelled failure logs: per-category precision and recall, culprit, restartable, time.

    python benchmarks/attribution_eval.py DIR [--json] [--cli] [--show-misses]

DIR holds one directory per case, with the log files as a user would have them (any layout the
`nvrx-hpc attribute` command reads), and `CASE.label.json` beside each case directory:

    {"category": "network", "ranks": [3], "node": "gpu-n07", "restartable": true}

`ranks` ([] when no rank is to blame), `node` (null when none) and `restartable` (null when the label
does not say) are what the maintainers' diagnosis says. A case counts as:

- category right: the verdict's category equals the label's;
- culprit right (cases whose label names ranks or a node): the verdict names every labelled rank and
  the labelled node, with at most one extra rank and at most one extra node; a label that names
  neither is right when the verdict names at most one suspect; a node's short name matches its fully
  qualified one (`gpu-07` and `gpu-07.cluster.internal`), an address only itself;
- restartable right (cases whose label says): the verdict's `restartable` equals it.

Each case runs through the function `nvrx-hpc attribute` calls (`--cli`: the command itself, one
process per case, `--json --no-write`). Nothing is written into DIR. `--json` prints the figures as
one JSON object. Exit code 0 when it ran (whatever the figures), 2 for a bad DIR or label.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nvrx_hpc.attribution.api import Category  # noqa: E402

CATEGORIES = [c.value for c in Category]
GOALS = {"category": 0.90, "culprit": 0.85, "restartable": 0.85}


class LabelError(Exception):
    pass


def parse_label(label_path: Path) -> dict[str, Any]:
    """The label in `label_path`, checked: {category, ranks (sorted), node, restartable}."""
    try:
        label = json.loads(label_path.read_text())
    except ValueError as exc:
        raise LabelError(f"{label_path}: not JSON ({exc})") from None
    if not isinstance(label, dict) or label.get("category") not in CATEGORIES:
        raise LabelError(f"{label_path}: 'category' must be one of {', '.join(CATEGORIES)}")
    ranks = label.get("ranks", [])
    if not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks):
        raise LabelError(f"{label_path}: 'ranks' must be a list of integers")
    if label.get("node") is not None and not isinstance(label["node"], str):
        raise LabelError(f"{label_path}: 'node' must be a string or null")
    if label.get("restartable") not in (True, False, None):
        raise LabelError(f"{label_path}: 'restartable' must be true, false or null")
    return {"category": label["category"], "ranks": sorted(ranks), "node": label.get("node"),
            "restartable": label.get("restartable")}  # fmt: skip


def load_cases(root: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    """(name, case dir, label) of every `CASE.label.json` with its `CASE/` beside it, sorted by name."""
    cases = []
    for label_path in sorted(root.glob("*.label.json")):
        name = label_path.name[: -len(".label.json")]
        case = root / name
        if not case.is_dir():
            raise LabelError(f"{label_path}: no case directory {case}")
        cases.append((name, case, parse_label(label_path)))
    return cases


def _attribute(case: Path, use_cli: bool) -> dict[str, Any]:
    if use_cli:
        env = {**os.environ, "NVRX_ATTR_CONFIG": "/dev/null"}
        done = subprocess.run([sys.executable, "-m", "nvrx_hpc", "attribute", str(case), "--json", "--no-write"],
                              capture_output=True, text=True, timeout=300, env=env, check=False)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip()[-500:])
        return json.loads(done.stdout)
    from nvrx_hpc.attribution.pipeline import run_attribution
    from nvrx_hpc.attribution.settings import load_settings

    settings = load_settings(env={}, path=os.devnull)
    return run_attribution([case], settings, write=False, backends=[]).to_dict()


_ADDRESS = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


def same_host(named: str, label: str) -> bool:
    """One machine under its short name and its fully qualified one (`gpu-07` and `gpu-07.cluster.internal`); an
    address is compared whole."""
    if named == label or _ADDRESS.match(named) or _ADDRESS.match(label) or ("." in named) == ("." in label):
        return named == label
    return named.split(".")[0] == label.split(".")[0]


def culprit_right(label: dict[str, Any], report: dict[str, Any]) -> bool:
    # a Kubernetes job's culprit is named by its node and by its pod there: a label may give either
    ranks, nodes = set(report["culprit"]["ranks"]), {*report["culprit"]["nodes"], *report["culprit"].get("pods", ())}
    want_ranks, want_node = set(label["ranks"]), label["node"]
    if not want_ranks and want_node is None:
        return len(ranks) <= 1 and len(nodes) <= 1
    if want_ranks and not (want_ranks <= ranks and len(ranks - want_ranks) <= 1):
        return False
    if want_node is not None and not (any(same_host(n, want_node) for n in nodes) and len(nodes) <= 2):
        return False
    if not want_ranks and len(ranks) > 1:
        return False
    return True


def _attribute_timed(case: Path, use_cli: bool) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    report = _attribute(case, use_cli)
    return report, time.perf_counter() - t0


def evaluate(root: Path, use_cli: bool = False, jobs: int | None = None) -> dict[str, Any]:
    """Attribute every case; `jobs` worker processes (default: one per CPU) share the cases, each timing its own."""
    cases = load_cases(root)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(cases) or 1))
    paths = [case for _, case, _ in cases]
    if jobs == 1:
        results = [_attribute_timed(case, use_cli) for case in paths]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_attribute_timed, paths, [use_cli] * len(paths), chunksize=8))
    rows = []
    for (name, _case, label), (report, seconds) in zip(cases, results, strict=True):
        rows.append({
            "case": name, "label": label, "seconds": round(seconds, 4),
            "got": {"category": report["category"], "ranks": report["culprit"]["ranks"],
                    "nodes": report["culprit"]["nodes"], "restartable": report["restartable"],
                    "action": report["recommendation"]["action"], "confidence": report["confidence"],
                    "exclude_nodes": report["recommendation"].get("exclude_nodes", [])},
            "category_ok": report["category"] == label["category"],
            "culprit_ok": culprit_right(label, report),
            "restartable_ok": None if label["restartable"] is None else report["restartable"] == label["restartable"],
        })  # fmt: skip
    per_category = {}
    for cat in CATEGORIES:
        tp = sum(1 for r in rows if r["label"]["category"] == cat and r["got"]["category"] == cat)
        labelled = sum(1 for r in rows if r["label"]["category"] == cat)
        called = sum(1 for r in rows if r["got"]["category"] == cat)
        per_category[cat] = {"cases": labelled, "called": called,
                             "precision": round(tp / called, 3) if called else None,
                             "recall": round(tp / labelled, 3) if labelled else None}  # fmt: skip
    with_culprit = [r for r in rows if r["label"]["ranks"] or r["label"]["node"] is not None]
    with_restart = [r for r in rows if r["restartable_ok"] is not None]
    times = sorted(r["seconds"] for r in rows)

    def share(items: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(1 for r in items if r[key]) / len(items), 3) if items else None

    figures = {
        "cases": len(rows),
        "category_accuracy": share(rows, "category_ok"),
        "culprit_accuracy": share(with_culprit, "culprit_ok"),
        "culprit_cases": len(with_culprit),
        "culprit_accuracy_all": share(rows, "culprit_ok"),
        "restartable_accuracy": share(with_restart, "restartable_ok"),
        "restartable_cases": len(with_restart),
        "seconds_per_case": {"mean": round(sum(times) / len(times), 4) if times else None,
                             "median": times[len(times) // 2] if times else None,
                             "max": times[-1] if times else None},
        "per_category": per_category,
        "confusion": dict(Counter(f"{r['label']['category']} -> {r['got']['category']}" for r in rows
                                  if not r["category_ok"])),
        "goals": GOALS,
        "cases_detail": rows,
    }  # fmt: skip
    return figures


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:5.1f} %"


def print_figures(f: dict[str, Any], show_misses: bool) -> None:
    print(f"cases: {f['cases']}")
    print(f"{'category':18} {'cases':>5} {'called':>6} {'precision':>9} {'recall':>8}")
    for cat, v in f["per_category"].items():
        print(f"{cat:18} {v['cases']:>5} {v['called']:>6} {_pct(v['precision']):>9} {_pct(v['recall']):>8}")
    print(f"category accuracy:    {_pct(f['category_accuracy'])}  (goal {_pct(GOALS['category'])})")
    print(f"culprit accuracy:     {_pct(f['culprit_accuracy'])}  over {f['culprit_cases']} cases that name a culprit "
          f"(goal {_pct(GOALS['culprit'])}); {_pct(f['culprit_accuracy_all'])} over all")
    print(f"restartable accuracy: {_pct(f['restartable_accuracy'])}  over {f['restartable_cases']} labelled cases "
          f"(goal {_pct(GOALS['restartable'])})")
    s = f["seconds_per_case"]
    print(f"time per case:        mean {s['mean']:.3f} s, median {s['median']:.3f} s, max {s['max']:.3f} s")
    if show_misses:
        for r in f["cases_detail"]:
            bad = [k for k in ("category_ok", "culprit_ok", "restartable_ok") if r[k] is False]
            if bad:
                print(f"MISS {r['case']}: {', '.join(b[:-3] for b in bad)}; label {r['label']}; got {r['got']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir", type=Path, help="directory of CASE/ + CASE.label.json pairs")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--cli", action="store_true", help="run the nvrx-hpc attribute command per case")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (default: one per CPU; 1 for times per case without contention)")
    parser.add_argument("--show-misses", action="store_true", help="list every case that misses a goal")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        print(f"error: {args.dir} is not a directory", file=sys.stderr)
        return 2
    try:
        figures = evaluate(args.dir, args.cli, args.jobs)
    except LabelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not figures["cases"]:
        print(f"error: no CASE.label.json in {args.dir}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print_figures(figures, args.show_misses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
