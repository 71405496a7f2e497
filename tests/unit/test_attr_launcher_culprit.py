"""The launcher's culprit event says which rank exited; that rank's own traceback says why."""

from __future__ import annotations

import json

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Action, Category


def _run(tmp_path, log_lines: list[str], reason: str = "rank 2 on n2 exited with code 1"):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "step-0.log").write_text("\n".join(log_lines) + "\n")
    event = {"time": 1_800_000_000.0, "kind": "launcher.culprit", "node": "n2", "rank": 2, "reason": reason,
             "detail": {"finding": "exited", "findings": []}}  # fmt: skip
    (run / "events.jsonl").write_text(json.dumps(event) + "\n")
    return analyze_run(run, engine="python").verdict


def test_the_exited_rank_s_exception_is_the_root_and_stops_the_job(tmp_path):
    v = _run(tmp_path, [
        "2: [rank2]: Traceback (most recent call last):",
        "2: [rank2]: ValueError: shape mismatch: expected [4, 8], got [4, 9]",
        "1: [rank1]: RuntimeError: [pair.cc:534] Connection closed by peer [127.0.0.1]:5555",
    ])  # fmt: skip
    assert v.category is Category.APPLICATION and not v.restartable and v.action is Action.STOP
    assert v.root_cause.startswith("ValueError: shape mismatch") and v.culprit.ranks == (2,)


def test_without_a_cause_of_its_own_the_exit_stays_restartable(tmp_path):
    v = _run(tmp_path, [
        "1: [rank1]: RuntimeError: [pair.cc:534] Connection closed by peer [127.0.0.1]:5555",
        # the launcher's own kill of the step, on the exited rank's label: not its cause
        "2: slurmstepd-n2: error: *** STEP 7.1 ON n2 CANCELLED AT 2027-01-15T08:00:01 ***",
    ])  # fmt: skip
    assert v.restartable and v.action is not Action.STOP and v.culprit.ranks == (2,)
    assert v.root_cause.startswith("launcher: rank 2 on n2 exited with code 1")
