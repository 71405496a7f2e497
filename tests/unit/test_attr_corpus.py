"""The labelled corpus (tests/fixtures/logs/<case>/, one small run directory per failure; the expected
verdicts in tests/fixtures/logs/expected.json): every case gets the right category, culprit,
restartability and action, the root cause is in the evidence, and what followed it is cascade."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from nvrx_hpc.attribution.analyze import analyze, analyze_run
from nvrx_hpc.attribution.api import Action, Category
from nvrx_hpc.core.errors import AttributionError

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
CASES = sorted(EXPECTED)


def test_the_corpus_covers_every_category_and_every_case_has_its_directory():
    assert {e["category"] for e in EXPECTED.values()} == {c.value for c in Category}
    assert sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) == CASES


@pytest.mark.parametrize("case", CASES)
def test_case(case):
    expect = EXPECTED[case]
    report = analyze_run(CORPUS / case, engine="python")
    v = report.verdict
    got = {
        "category": v.category.value,
        "ranks": list(v.culprit.ranks),
        "nodes": list(v.culprit.nodes),
        "restartable": v.restartable,
        "action": v.action.value,
    }
    assert got == expect, v.root_cause
    assert 0 < v.confidence < 1
    assert not report.problems
    if v.category is not Category.UNKNOWN:
        assert v.evidence and v.evidence[0].role == "root"
    if v.action is Action.EXCLUDE_AND_RETRY:
        assert set(v.exclude_nodes) == set(expect["nodes"])
    data = report.to_dict()
    for key in ("category", "root_cause", "culprit", "restartable", "confidence", "evidence", "timeline"):
        assert key in data
    json.dumps(data)


@pytest.mark.parametrize("case", ["gpu_ecc_cascade", "application_exception", "network_ib", "numerical_nan"])
def test_cascade_after_the_root_is_separated(case):
    v = analyze_run(CORPUS / case).verdict
    cascade = {c.signature: c for c in v.cascade}
    assert "watchdog_timeout" in cascade and cascade["watchdog_timeout"].count >= 6
    assert not set(v.culprit.ranks) & set(cascade["watchdog_timeout"].ranks)
    assert "cascade" in v.root_cause


def test_loose_files_and_a_garbage_input_still_give_a_verdict(tmp_path):
    case = CORPUS / "application_exception"
    garbage = tmp_path / "rank-9.error.json"
    garbage.write_text("{not json")
    events = tmp_path / "events.jsonl"
    events.write_text('{"time": 1, "kind": "launcher.restart"}\nnot json\n[1, 2]\n')
    report = analyze([case / "logs" / "step-0.log", case / "rank-4.error.json", garbage, events])
    assert report.verdict.category is Category.APPLICATION and report.verdict.culprit.ranks == (4,)
    errors = {Path(p.source).name: p.error for p in report.problems}
    assert "unreadable failure record" in errors["rank-9.error.json"]
    assert "2 line(s) are not JSON objects (line 2, 3)" in errors["events.jsonl"]


def test_since_keeps_only_the_latest_attempt(tmp_path):
    run = Path(shutil.copytree(CORPUS / "hang_launcher_event", tmp_path / "42"))
    report = analyze_run(run, since=4_000_000_000)  # after everything in the case
    assert report.verdict.category is Category.UNKNOWN
    assert report.job_id == "42"


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(AttributionError, match="no such file or directory"):
        analyze([tmp_path / "nope"])
    with pytest.raises(AttributionError, match="nothing to analyse"):
        analyze([])
    with pytest.raises(AttributionError, match="not a directory"):
        analyze_run(tmp_path / "nope")


def test_since_skips_an_earlier_attempts_flight_recorder_dumps(tmp_path):
    """The restart loop passes `since`: dumps of earlier attempts pile up in fr/ and loading them all made
    each verdict slower as a run went on (7 s after 29 restarts); an earlier attempt's hang is not this one's."""
    run = tmp_path / "43"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "fr" / "one_faulty", run / "fr")
    (run / "logs").mkdir()
    (run / "logs" / "step-0.log").write_text("srun: error: n1: task 0: Exited with exit code 1\n")
    for dump in (run / "fr").iterdir():
        os.utime(dump, (1_000_000, 1_000_000))
    assert analyze_run(run).fr is not None
    assert analyze_run(run, since=2_000_000).fr is None
