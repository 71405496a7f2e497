"""The restart loop's own culprit (launcher.culprit in events.jsonl) outranks Slurm's cancel lines it caused."""

from __future__ import annotations

import json

import pytest

from nvrx_hpc.attribution import analyze_run


def _run_dir(tmp_path, finding: str, reason: str):
    t = 1796227896.4
    events = [
        {"time": t - 8, "kind": "launcher.step.started", "node": None, "rank": None},
        {"time": t + 0.3, "kind": "launcher.culprit", "node": "n2", "rank": 2, "reason": reason,
         "detail": {"finding": finding, "findings": [{"kind": finding, "time": t, "node": "n2", "rank": 2,
                                                      "reason": reason}]}},
    ]  # fmt: skip
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    logs = tmp_path / "logs"
    logs.mkdir()
    # Slurm stamps to the second; this line comes from the kill that followed the real failure.
    cancelled = "0: slurmstepd-n1: error: *** STEP 7.1 ON n1 CANCELLED AT 2026-12-02T16:11:36 ***\n"
    (logs / "step-0.log").write_text(cancelled)
    return tmp_path


@pytest.mark.parametrize(
    ("finding", "reason", "category"),
    [
        ("exited", "rank 2 on n2 exited with code 1", "unknown"),  # who exited is known; why is not
        ("exited", "rank 2 on n2 killed by signal 9", "framework_crash"),
        ("hung", "rank 2 on n2 hung: no heartbeat for 9.0 s", "distributed_hang"),
        ("health", "n2 failed health check gpu.xid: Xid 79", "gpu_hardware"),
    ],
)
def test_launcher_culprit_names_rank_and_node(tmp_path, finding, reason, category):
    report = analyze_run(_run_dir(tmp_path, finding, reason))
    verdict = report.verdict
    assert verdict.category.value == category
    assert "n2" in verdict.culprit.nodes and 2 in verdict.culprit.ranks
    if category == "unknown":  # category, restartable and recommendation agree: nothing says a retry cannot help
        assert verdict.restartable and verdict.action.value == "retry" and verdict.confidence <= 0.3
