"""The rules hold when the corpus's logs arrive in another shape (benchmarks/attribution_variants.py):
every line of the runners' output stamped by a log collector, or Windows line ends. The harness on each copy
still reaches the acceptance goals, within two points of the plain corpus."""

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


@pytest.fixture(scope="module")
def plain(corpus_figures):
    return corpus_figures


@pytest.mark.parametrize("variant", ["stamp", "crlf"])
def test_the_corpus_in_another_format_still_meets_the_goals(tmp_path, variant, plain):
    out = tmp_path / variant
    assert attribution_variants.rewrite(CORPUS, out, variant) > 30
    figures = attribution_eval.evaluate(out)
    for key, goal in attribution_eval.GOALS.items():
        got = figures[f"{key}_accuracy"]
        # the goals, and within two points of the plain corpus (the stamped copy's times are guessed: a line may be
        # stamped later than it ran, 0.917 -> 0.900 culprit after round 47)
        assert got >= goal and got >= plain[f"{key}_accuracy"] - 0.02, (variant, key, got, plain[f"{key}_accuracy"])


def test_a_missing_corpus_or_an_existing_out_is_refused(tmp_path):
    assert attribution_variants.main([str(tmp_path / "nope"), str(tmp_path / "o"), "--variant", "crlf"]) == 2
    assert attribution_variants.main([str(CORPUS), str(tmp_path), "--variant", "crlf"]) == 2
