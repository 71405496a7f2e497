"""The labelled corpus (tests/fixtures/attribution_corpus: CASE/ + CASE.label.json) and the harness that
scores attribution on it (benchmarks/attribution_eval.py): the corpus covers every category, and the
harness, run on it, reaches the acceptance goals; it also runs the real command and refuses bad labels."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "attribution_corpus"
EVAL = REPO / "benchmarks" / "attribution_eval.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import attribution_eval  # noqa: E402

from nvrx_hpc.attribution.api import Action, Category  # noqa: E402


def test_the_corpus_has_60_cases_5_per_category_and_stays_small():
    cases = attribution_eval.load_cases(CORPUS)
    per = Counter(label["category"] for _n, _d, label in cases)
    assert len(cases) >= 60
    assert {c.value for c in Category} == set(per) and min(per.values()) >= 5, per
    size = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    assert size < 28_000_000, size  # 1710 cases: 27.1 MB of text


def test_the_harness_on_the_corpus_reaches_the_goals(corpus_figures):
    figures = corpus_figures
    misses = [(r["case"], r["label"], r["got"]) for r in figures["cases_detail"]
              if not (r["category_ok"] and r["culprit_ok"] and r["restartable_ok"] is not False)]  # fmt: skip
    assert figures["category_accuracy"] >= 0.90, misses
    assert figures["culprit_accuracy"] >= 0.85, misses
    assert figures["restartable_accuracy"] >= 0.85, misses
    for cat, v in figures["per_category"].items():
        assert v["recall"] is not None and v["recall"] >= 0.8, (cat, v, misses)
        # `unknown` is the verdict when the logs do not say: the writers often knew more from their thread (an
        # admin's kill, a bare `-9` they call `host`), so its precision is reported (0.72 after round 49), not held;
        # what is held is that it says so, with a confidence of 0.3 at most (the issue: unknown, low confidence)
        if cat != "unknown":
            assert v["precision"] is not None and v["precision"] >= 0.8, (cat, v, misses)
    unsure = [r["got"]["confidence"] for r in figures["cases_detail"] if r["got"]["category"] == "unknown"]
    assert unsure and max(unsure) <= 0.3, max(unsure)


def test_culprit_rule_allows_one_extra_suspect_and_no_more():
    label = {"category": "network", "ranks": [3], "node": "n2", "restartable": True}
    ok = attribution_eval.culprit_right
    assert ok(label, {"culprit": {"ranks": [3], "nodes": ["n2"]}})
    assert ok(label, {"culprit": {"ranks": [3, 4], "nodes": ["n2", "n1"]}})
    assert not ok(label, {"culprit": {"ranks": [3, 4, 5], "nodes": ["n2"]}})
    assert not ok(label, {"culprit": {"ranks": [4], "nodes": ["n2"]}})
    assert not ok(label, {"culprit": {"ranks": [3], "nodes": []}})
    nobody = {"category": "scheduler", "ranks": [], "node": None, "restartable": True}
    assert ok(nobody, {"culprit": {"ranks": [], "nodes": []}})
    assert not ok(nobody, {"culprit": {"ranks": [0, 1], "nodes": []}})


def test_a_node_matches_its_fully_qualified_name_but_an_address_only_itself():
    label = {"category": "host", "ranks": [], "node": "gpu-07.cluster.internal", "restartable": True}
    ok = attribution_eval.culprit_right
    assert ok(label, {"culprit": {"ranks": [], "nodes": ["gpu-07"]}})
    assert not ok(label, {"culprit": {"ranks": [], "nodes": ["gpu-08"]}})
    assert not ok({**label, "node": "gpu-07.a.internal"}, {"culprit": {"ranks": [], "nodes": ["gpu-07.b.internal"]}})
    assert not ok({**label, "node": "10.1.2.3"}, {"culprit": {"ranks": [], "nodes": ["10.1.2.4"]}})
    assert not ok({**label, "node": "10.1.2.3"}, {"culprit": {"ranks": [], "nodes": ["10"]}})


def test_the_harness_runs_the_real_command_on_any_directory(tmp_path):
    for name in ("gpu_xid79_syslog_4x2", "sched_user_scancel"):
        shutil.copytree(CORPUS / name, tmp_path / name)
        shutil.copy(CORPUS / f"{name}.label.json", tmp_path)
    done = subprocess.run([sys.executable, str(EVAL), str(tmp_path), "--cli", "--json"], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["cases"] == 2 and figures["category_accuracy"] == 1.0 and figures["culprit_accuracy"] == 1.0
    assert sorted(p.name for p in (tmp_path / "gpu_xid79_syslog_4x2").iterdir()) == sorted(
        p.name for p in (CORPUS / "gpu_xid79_syslog_4x2").iterdir()), "the harness wrote into a case"
    text = subprocess.run([sys.executable, str(EVAL), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and "category accuracy:    100.0 %" in text.stdout


def test_worker_processes_give_the_same_rows_as_one_process(tmp_path):
    names = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())[:12]
    for name in names:
        shutil.copytree(CORPUS / name, tmp_path / name)
        shutil.copy(CORPUS / f"{name}.label.json", tmp_path)

    def rows(jobs):
        return [(r["case"], r["got"]) for r in attribution_eval.evaluate(tmp_path, jobs=jobs)["cases_detail"]]

    assert rows(1) == rows(3)


@pytest.mark.parametrize(("label", "message"), [
    ('{"category": "cosmic_rays", "ranks": []}', "'category' must be one of"),
    ('{"category": "host", "ranks": ["3"]}', "'ranks' must be a list of integers"),
    ("not json", "not JSON"),
])  # fmt: skip
def test_bad_labels_are_refused_with_exit_2(tmp_path, label, message):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.log").write_text("hello\n")
    (tmp_path / "c.label.json").write_text(label)
    done = subprocess.run([sys.executable, str(EVAL), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_category_restartable_and_recommendation_agree_on_every_case(corpus_figures):
    for row in corpus_figures["cases_detail"]:
        name, got = row["case"], row["got"]
        category, action, restartable = Category(got["category"]), Action(got["action"]), got["restartable"]
        if category in (Category.APPLICATION, Category.NUMERICAL):
            assert not restartable and action is Action.STOP, name
        if not restartable:
            assert action is Action.STOP, name
        if category is Category.UNKNOWN:
            assert restartable and action is Action.RETRY and got["confidence"] <= 0.3, name
        if action is Action.EXCLUDE_AND_RETRY:
            assert category.infra and got["exclude_nodes"], name
