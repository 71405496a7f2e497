"""The culprit node's quick health check runs beside attribution (launcher/evidence.py: EarlyProbe).

The check's srun is replaced by a Python child that plays it: the tests are about when the check is started,
waited for and stopped, not about Slurm (tests/cluster/ runs the real one after every fault)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

from nvrx_hpc.launcher import evidence
from nvrx_hpc.launcher.evidence import EarlyProbe
from nvrx_hpc.launcher.policy import Attempt, Outcome


def _attempt(finding: str, node: str | None = "n2") -> Attempt:
    return Attempt(Outcome.FAILED, node, "rank 3 died", 10, time.time(), finding, 3, False)


def _fake_check(tmp_path, monkeypatch, seconds: float) -> None:
    """The check: writes its pid, takes `seconds`, passes."""
    script = f"import os, time; open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid())); time.sleep({seconds})"
    monkeypatch.setattr(evidence, "health_probe_argv", lambda node: [sys.executable, "-c", script])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_check_runs_while_the_launcher_does_other_work_and_answers_for_its_node(tmp_path, monkeypatch):
    _fake_check(tmp_path, monkeypatch, 0.6)

    async def scenario():
        started = time.monotonic()
        early = EarlyProbe.start(_attempt("exited"), {**os.environ})
        await asyncio.sleep(0.6)  # attribution's time: the check runs meanwhile
        probe = await early.result_for("n2")
        return probe, time.monotonic() - started

    probe, took = asyncio.run(scenario())
    assert probe.health_ok is True and probe.reachable is True
    assert took < 1.1  # one 0.6 s wait, not attribution's and then the check's


def test_a_culprit_moved_to_another_node_cancels_the_check_and_its_step(tmp_path, monkeypatch):
    _fake_check(tmp_path, monkeypatch, 30)

    async def scenario():
        early = EarlyProbe.start(_attempt("hung"), {**os.environ})
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            await asyncio.sleep(0.02)
        assert await early.result_for("n5") is None  # the flight recorder named a rank on n5
        pid = int((tmp_path / "pid").read_text())
        for _ in range(100):
            if not _alive(pid):
                return True
            await asyncio.sleep(0.05)
        return False

    assert asyncio.run(scenario()), "the cancelled check's process still runs"


def test_findings_that_are_not_software_faults_get_no_early_check():
    assert EarlyProbe.start(_attempt("agent_lost"), {}) is None  # the node itself is the evidence
    assert EarlyProbe.start(_attempt("health"), {}) is None
    assert EarlyProbe.start(_attempt("exited", node=None), {}) is None


def test_a_check_begun_at_the_first_finding_serves_the_culprit_on_its_node_and_is_dropped_elsewhere(tmp_path,
                                                                                                     monkeypatch):
    """The loop begins the check when the step's first finding arrives (`for_finding`); at the step's end the
    culprit keeps it when it is on that node, and gets a check of its own when a later finding moved it."""
    _fake_check(tmp_path, monkeypatch, 0.3)

    async def scenario():
        begun = EarlyProbe.for_finding("n2", "exited", {**os.environ})
        kept = EarlyProbe.for_attempt(_attempt("exited"), begun, {**os.environ})
        moved_from = EarlyProbe.for_finding("n7", "hung", {**os.environ})
        moved = EarlyProbe.for_attempt(_attempt("hung", node="n2"), moved_from, {**os.environ})
        finished = EarlyProbe.for_finding("n2", "exited", {**os.environ})
        after_success = EarlyProbe.for_attempt(Attempt(Outcome.SUCCEEDED, started_at=time.time()), finished, {})
        await asyncio.sleep(0)
        results = (await kept.result_for("n2"), await moved.result_for("n2"))
        return begun, kept, moved_from, moved, finished, after_success, results

    begun, kept, moved_from, moved, finished, after_success, results = asyncio.run(scenario())
    assert kept is begun and moved is not moved_from and moved.node == "n2" and after_success is None
    assert moved_from._task.cancelled() and finished._task.cancelled()
    assert all(probe.health_ok for probe in results)
    assert EarlyProbe.for_finding("n2", "agent_lost", {}) is None and EarlyProbe.for_finding(None, "hung", {}) is None
