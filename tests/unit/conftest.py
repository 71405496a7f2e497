"""Shared by the unit tests: the harness's figures on the labelled corpus, computed once per session (each pass over
the 1,700 cases takes a minute; the goals, the agreement of each verdict and the format variants all read them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "attribution_corpus"


@pytest.fixture(scope="session")
def corpus_figures():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import attribution_eval

    return attribution_eval.evaluate(CORPUS)
