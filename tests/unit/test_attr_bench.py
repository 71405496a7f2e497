"""benchmarks/attribution_bench.py stays runnable: a tiny run prints one JSON object with every figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_json_smoke():
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "attribution_bench.py"), "--size-mb", "2", "--baseline-mb", "0.5",
         "--dumps", "16", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert {"scan", "python_re", "grep_e", "ratio_vs_python_re", "fr", "goal"} <= set(figures)
    hits = {f["hits"] for f in figures["scan"].values()}
    assert len(hits) == 1 and hits.pop() == figures["injected_failure_lines"]
    if figures["grep_e"] and "lines" in figures["grep_e"]:
        assert figures["grep_e"]["lines"] == figures["injected_failure_lines"]
    assert figures["fr"]["ours"]["culprits"] == figures["fr"]["injected"]


def test_bench_rejects_bad_arguments():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "attribution_bench.py"), "--dumps", "1"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "--dumps >= 2" in done.stderr
