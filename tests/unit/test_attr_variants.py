"""The rules hold when the corpus's logs arrive in another shape (benchmarks/attribution_variants.py):
every line of the runners' output stamped by a log collector, or Windows line ends. The harness on each copy
still reaches the acceptance goals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "attribution_corpus"
sys.path.insert(0, str(REPO / "benchmarks"))

import attribution_eval  # noqa: E402
import attribution_variants  # noqa: E402


def test_stamp_puts_a_time_before_every_line_of_files_with_runner_prefixes():
    text = "boot\n3: hello\n[2024-03-14 02:10:00] x\n[rank4]: y\n"
    assert attribution_variants.stamp(text) == (
        "2024-03-14T02:10:00.000Z boot\n2024-03-14T02:10:00.000Z 3: hello\n"
        "2024-03-14T02:10:00.000Z [2024-03-14 02:10:00] x\n2024-03-14T02:10:00.000Z [rank4]: y\n"
    )
    assert attribution_variants.stamp("3: no stamp anywhere\n") == "3: no stamp anywhere\n"
    assert attribution_variants.stamp("Mar 14 02:10:00 n1 kernel: [2024-03-14 02:10:00]\n").startswith("Mar")


@pytest.mark.parametrize("variant", ["stamp", "crlf"])
def test_the_corpus_in_another_format_still_meets_the_goals(tmp_path, variant):
    out = tmp_path / variant
    assert attribution_variants.rewrite(CORPUS, out, variant) > 30
    figures = attribution_eval.evaluate(out)
    for key, goal in attribution_eval.GOALS.items():
        assert figures[f"{key}_accuracy"] >= goal + 0.05, (variant, key, figures[f"{key}_accuracy"])


def test_a_missing_corpus_or_an_existing_out_is_refused(tmp_path):
    assert attribution_variants.main([str(tmp_path / "nope"), str(tmp_path / "o"), "--variant", "crlf"]) == 2
    assert attribution_variants.main([str(CORPUS), str(tmp_path), "--variant", "crlf"]) == 2
