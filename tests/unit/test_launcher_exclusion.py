"""Exclusion needs evidence about the node: one test per row of the decision table in docs/launcher.md."""

from __future__ import annotations

import pytest

from nvrx_hpc.launcher.policy import NodeEvidence, judge_node

NOW = 10_000.0
WINDOW = 3600.0


def _judge(failure_times=(NOW,), limit=3, **fields):
    evidence = NodeEvidence(**{"node": "n2", "finding": "exited", "reason": "rank 3 on n2 killed by signal 9",
                               "health_ok": True, "reachable": True, **fields})  # fmt: skip
    return judge_node(evidence, list(failure_times), NOW, WINDOW, limit)


@pytest.mark.parametrize(
    ("fields", "row", "exclude"),
    [
        ({"node": None, "finding": "srun"}, "no-node", False),
        ({"finding": "health", "health_ok": None, "reason": "n2 failed health check gpu.xid: Xid 79"}, "health", True),
        ({"finding": "agent_lost", "health_ok": None, "reachable": None}, "agent-lost", True),
        ({"reachable": False, "health_ok": None, "health_detail": "srun: error: Unable to contact slurm"},
         "unreachable", True),
        ({"health_ok": False, "health_detail": "gpu.ecc: 12 uncorrectable"}, "health-check", True),
        ({"verdict_action": "exclude_and_retry", "verdict_nodes": ("n2",), "verdict_category": "gpu_hardware"},
         "attribution-exclude", True),
        ({"verdict_action": "exclude_and_retry", "verdict_nodes": ("n1",), "verdict_category": "network"},
         "software", False),  # attribution blames another node: no evidence about this one
        ({"verdict_action": "retry", "verdict_category": "framework_crash"}, "software", False),
        ({"finding": "hung"}, "software", False),
        ({}, "software", False),
    ],
)
def test_each_row_of_the_decision_table(fields, row, exclude):
    judgement = _judge(**fields)
    assert (judgement.row, judgement.exclude) == (row, exclude), judgement
    assert judgement.reason  # every decision says why


def test_software_fault_restarts_in_place_and_says_the_check_passed():
    judgement = _judge()
    assert not judgement.exclude and "health check passed" in judgement.reason and "signal 9" in judgement.reason


def test_the_same_node_behind_repeated_failures_inside_the_window_goes():
    assert not _judge(failure_times=(NOW - 100, NOW)).exclude
    judgement = _judge(failure_times=(NOW - 200, NOW - 100, NOW))
    assert judgement.exclude and judgement.row == "repeated" and "3 failures" in judgement.reason


def test_failures_outside_the_window_do_not_count():
    assert not _judge(failure_times=(NOW - WINDOW - 1, NOW - WINDOW - 2, NOW)).exclude


def test_node_evidence_wins_over_a_retry_verdict():
    assert _judge(finding="health", verdict_action="retry").exclude
