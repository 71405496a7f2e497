"""benchmarks/label_agreement.py: a second labeller's labels scored against a corpus's, as the harness scores a
verdict, beside the verdicts on the same cases; labels that name no case of the corpus are refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "attribution_corpus"
SCRIPT = REPO / "benchmarks" / "label_agreement.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import label_agreement  # noqa: E402

CASES = ("heldout48a_ddp_unhandled_cuda_error_bad_gpu", "heldout41a_horovod_oom_batch_size")


def _corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in CASES:
        shutil.copytree(CORPUS / name, corpus / name)
        shutil.copy(CORPUS / f"{name}.label.json", corpus)
    return corpus


def _second(tmp_path: Path, labels: dict[str, dict]) -> Path:
    second = tmp_path / "second"
    second.mkdir()
    for name, label in labels.items():
        (second / f"{name}.label.json").write_text(json.dumps(label))
    return second


def test_a_second_label_is_scored_as_a_verdict_would_be(tmp_path):
    same = json.loads((CORPUS / f"{CASES[0]}.label.json").read_text())
    # the same category and restart, but the whole node's ranks instead of rank 6: more than one extra suspect
    other = {"category": "application", "ranks": [4, 5, 6, 7], "node": None, "restartable": False}
    result = label_agreement.agreement(_corpus(tmp_path), _second(tmp_path, {CASES[0]: same, CASES[1]: other}))
    second = result["second_labeller"]
    assert (second["category"], second["cases"]) == (2, 2)
    assert (second["culprit"], second["culprit_cases"]) == (1, 2)
    assert (second["restartable"], second["restartable_cases"]) == (2, 2)
    assert result["verdicts"]["cases"] == 2 and result["verdicts"]["culprit_cases"] == 2


def test_a_label_for_a_case_the_corpus_lacks_exits_2(tmp_path):
    label = {"category": "host", "ranks": [], "node": "n1", "restartable": True}
    second = _second(tmp_path, {"nope": label})
    done = subprocess.run([sys.executable, str(SCRIPT), str(_corpus(tmp_path)), str(second)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "has no case nope" in done.stderr and "Traceback" not in done.stderr
