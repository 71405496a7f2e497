"""Attribution speed: the log scanner against its baselines, and flight-recorder analysis of many dumps.

Figures, all from one run:

- scan: throughput (MB/s, 10^6 bytes) of `Scanner.scan_file` on a generated Megatron/NCCL-shaped log
  (`--size-mb`, default 50 on a small box; the issue's figure is `--size-mb 300`), for the `auto`
  engine and every engine installed (hyperscan, re2, grep, python); best of `--repeat` runs
- python_re: Python `re` line by line with the same catalog (each line tried against the signatures
  in catalog order, and against the whole catalog as one pattern; the faster of the two is the
  baseline), on the first `--baseline-mb` MB (default 20) of the same log
- grep_e: GNU `grep -E -c` with the same catalog as one POSIX pattern, on the whole log
- ratios: auto engine / python_re and auto engine / grep_e; the goal is >= 2x grep_e (the baseline that
  counts: a tool anyone would reach for) and >= 150 MB/s; without grep, >= 2x python_re stands in
- fr: seconds to load and analyse `--dumps` generated rank dumps (default 1024; 8-way TP groups, one
  rank stuck), and PyTorch's own analyzer (torch.distributed.flight_recorder) on the same files where
  it is installed

The page cache is warmed before each timing. `--json` prints the same figures as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _gen.fr_synth import Layout, simulate, write_dumps  # noqa: E402  (beside this script)
from _gen.synthetic_logs import write_log  # noqa: E402

from nvrx_hpc.attribution.fr_analysis import analyze_files  # noqa: E402
from nvrx_hpc.attribution.lines import LineContext  # noqa: E402
from nvrx_hpc.attribution.scanner import Scanner, available_engines, combined_pattern  # noqa: E402
from nvrx_hpc.attribution.signatures import CATALOG  # noqa: E402

GOAL_MB_S = 150.0
GOAL_RATIO = 2.0


def _warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def _mb(n: int) -> float:
    return n / 1e6


def scan_figures(log: Path, size: int, repeat: int) -> dict[str, dict[str, float]]:
    """Best of `repeat` runs per engine (runs over 5 s are not repeated)."""
    out = {}
    for engine in ["auto", *available_engines()]:
        scanner = Scanner(engine=engine)
        best, hits = float("inf"), []
        for _ in range(repeat):
            _warm(log)
            t0 = time.perf_counter()
            hits = scanner.scan_file(log, LineContext(str(log)))
            best = min(best, time.perf_counter() - t0)
            if best > 5:
                break
        out[engine if engine != "auto" else f"auto ({scanner.engine})"] = {
            "seconds": round(best, 3), "mb_per_s": round(_mb(size) / best, 1), "hits": len(hits)
        }  # fmt: skip
    return out


def python_re_baseline(log: Path, limit: int) -> dict[str, float]:
    """Python `re`, line by line, same catalog: per signature in order, and as one combined pattern."""
    sigs = [s.compiled() for s in CATALOG]
    anchored = re.compile("|".join(f"(?:{re.sub(r'[(][?]P<[a-z_]+>', '(?:', s.pattern)})" for s in CATALOG))
    figures = {}
    for name, per_line in (
        ("per_signature", lambda line: next((s for s in sigs if s.search(line)), None)),
        ("combined", anchored.search),
    ):
        _warm(log)
        done = hits = 0
        t0 = time.perf_counter()
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                done += len(line)
                if per_line(line):
                    hits += 1
                if done >= limit:
                    break
        dt = time.perf_counter() - t0
        figures[name] = {"seconds": round(dt, 3), "mb": round(_mb(done), 1), "mb_per_s": round(_mb(done) / dt, 1),
                         "hits": hits}  # fmt: skip
    best = max(figures.values(), key=lambda f: f["mb_per_s"])
    return {"mb_per_s": best["mb_per_s"], "variants": figures}


def _to_ere(pattern: str) -> str:
    """The catalog's Python patterns in GNU ERE: plain groups, greedy quantifiers, classes spelled out."""
    p = re.sub(r"\(\?P<\w+>", "(", pattern).replace("(?:", "(")
    out, i, in_class = [], 0, False
    inside = {"d": "0-9", "w": "[:alnum:]_", "s": "[:space:]", "n": "", "S": "", "-": "-", ".": "."}
    outside = {"d": "[0-9]", "n": "\n"}
    while i < len(p):
        c = p[i]
        if c == "\\" and i + 1 < len(p):
            nxt = p[i + 1]
            out.append(inside.get(nxt, "\\" + nxt) if in_class else outside.get(nxt, "\\" + nxt))
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class and out[-1] not in ("[", "[^"):
            in_class = False
        elif in_class and c == "^" and out[-1] == "[":
            out[-1] = "[^"
            i += 1
            continue
        out.append(c)
        i += 1
    return re.sub(r"([*+?}])\?", r"\1", "".join(out)).replace("[^]", ".")


def grep_baseline(log: Path, size: int) -> dict[str, float] | None:
    grep = shutil.which("grep")
    if grep is None:
        return None
    ere = _to_ere(combined_pattern(CATALOG))
    _warm(log)
    t0 = time.perf_counter()
    done = subprocess.run([grep, "-E", "-c", "-e", ere, "--", str(log)], capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C"}, timeout=600, check=False)  # fmt: skip
    dt = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        return {"error": done.stderr.strip()[-300:]}
    return {"seconds": round(dt, 3), "mb_per_s": round(_mb(size) / dt, 1), "lines": int(done.stdout.strip() or 0)}


def _torch_analyzer(directory: Path) -> dict[str, float] | None:
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig
        from torch.distributed.flight_recorder.components.loader import read_dir
    except ImportError:
        return None
    import contextlib
    import io
    import logging

    args = JobConfig().parse_args([str(directory), "-p", "rank-", "--allow-incomplete-ranks"])
    fr_log = logging.getLogger("Flight Recorder")  # its per-collective report goes to stderr at INFO
    level = fr_log.level
    fr_log.setLevel(logging.ERROR)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            details, version = read_dir(args)
            db = build_db(details, args, version)
    finally:
        fr_log.setLevel(level)
    dt = time.perf_counter() - t0
    missing = sorted({r for c in db.collectives for r in (c.missing_ranks or ())})
    return {"seconds": round(dt, 3), "missing_ranks": missing[:16]}


def fr_figures(n: int, workdir: Path) -> dict[str, object]:
    directory = workdir / "fr"
    tp = 8 if n % 8 == 0 and n >= 16 else 1
    stuck = n // 2 + 1
    write_dumps(simulate(Layout(world=n, tp=tp, steps=4, numel=4096), {stuck: 5}), directory)
    files = sorted(directory.iterdir())
    size = sum(f.stat().st_size for f in files)
    t0 = time.perf_counter()
    report = analyze_files(files)
    dt = time.perf_counter() - t0
    ours = {"seconds": round(dt, 3), "culprits": list(report.culprits), "problems": len(report.problems)}
    return {"dumps": n, "bytes": size, "injected": [stuck], "ours": ours, "pytorch": _torch_analyzer(directory)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=50.0, help="generated log size (MB); issue: 300")
    parser.add_argument("--baseline-mb", type=float, default=20.0, help="MB of the log the Python baseline reads")
    parser.add_argument("--dumps", type=int, default=1024, help="flight-recorder dumps to generate and analyse")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs for each scan engine")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    if args.size_mb <= 0 or args.dumps < 2 or args.baseline_mb <= 0 or args.repeat < 1:
        parser.error("--size-mb and --baseline-mb must be > 0, --dumps >= 2 and --repeat >= 1")
    workdir = Path(tempfile.mkdtemp(prefix="nvrx-attr-bench-"))
    try:
        log = workdir / "job.log"
        injected = write_log(log, args.size_mb, seed=1)
        size = log.stat().st_size
        scan = scan_figures(log, size, args.repeat)
        auto = next(v for k, v in scan.items() if k.startswith("auto"))
        base = python_re_baseline(log, int(min(args.baseline_mb, args.size_mb) * 1e6))
        grep = grep_baseline(log, size)
        fr = fr_figures(args.dumps, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    has_grep = bool(grep and "mb_per_s" in grep)
    baseline = grep["mb_per_s"] if has_grep else base["mb_per_s"]
    figures = {
        "log_mb": round(_mb(size), 1),
        "injected_failure_lines": injected,
        "scan": scan,
        "python_re": base,
        "grep_e": grep,
        "ratio_vs_python_re": round(auto["mb_per_s"] / base["mb_per_s"], 1),
        "ratio_vs_grep_e": round(auto["mb_per_s"] / grep["mb_per_s"], 2) if has_grep else None,
        "goal": {"mb_per_s": GOAL_MB_S, "ratio_vs_grep_e": GOAL_RATIO,
                 "met": auto["mb_per_s"] >= GOAL_MB_S and auto["mb_per_s"] / baseline >= GOAL_RATIO},
        "fr": fr,
    }  # fmt: skip
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"log: {figures['log_mb']} MB generated, {injected} failure lines injected")
    for name, f in scan.items():
        print(f"  scan {name:<18} {f['mb_per_s']:>8.1f} MB/s  ({f['seconds']} s, {f['hits']} hits)")
    for name, f in base["variants"].items():
        print(f"  python re {name:<13} {f['mb_per_s']:>8.1f} MB/s  (line by line, first {f['mb']} MB)")
    if grep and "mb_per_s" in grep:
        print(f"  grep -E (catalog)       {grep['mb_per_s']:>8.1f} MB/s  ({grep['seconds']} s, {grep['lines']} lines)")
    print(f"ratio auto / python re: {figures['ratio_vs_python_re']}x; auto / grep -E: {figures['ratio_vs_grep_e']}x; "
          f"goal >= {GOAL_MB_S:g} MB/s and >= {GOAL_RATIO:g}x {'grep -E' if has_grep else 'python re'}: "
          f"{'met' if figures['goal']['met'] else 'NOT met'}")
    ours, theirs = fr["ours"], fr["pytorch"]
    print(f"flight recorder: {fr['dumps']} dumps ({fr['bytes'] / 1e6:.1f} MB), rank {fr['injected']} stuck: "
          f"ours {ours['seconds']} s -> culprits {ours['culprits']}")
    if theirs is None:
        print("  PyTorch's analyzer: not installed here")
    else:
        print(f"  PyTorch's analyzer: {theirs['seconds']} s -> missing ranks {theirs['missing_ranks']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
