"""The restart loop's pure decisions: policy, node pool, culprit choice, hang deadlines, calibration."""

from __future__ import annotations

from nvrx_hpc.agent.hang import OUTLIER_MARGIN, SAFETY_FACTOR, Timeouts, calibrate, find_hangs
from nvrx_hpc.agent.registry import RankRecord, RankState
from nvrx_hpc.launcher.culprit import Finding, pick_culprit
from nvrx_hpc.launcher.policy import Action, Attempt, Outcome, RestartPolicy
from nvrx_hpc.launcher.pool import NodePool
from nvrx_hpc.launcher.settings import COMM_SECTIONS

FAIL = Outcome.FAILED


def test_success_is_done_and_time_limit_stop_requeues():
    policy = RestartPolicy()
    assert policy.decide([Attempt(Outcome.SUCCEEDED)], 2, False, 2).action == Action.DONE
    assert policy.decide([Attempt(Outcome.STOPPED)], 2, False, 2).action == Action.REQUEUE


def test_failure_with_a_spare_restarts_same_size():
    decision = RestartPolicy(max_restarts=3).decide([Attempt(FAIL, "n2", "boom", 4)], 2, True, 2)
    assert decision.action == Action.RESTART and "boom" in decision.reason


def test_no_spare_shrinks_down_to_min_nodes_then_requeues():
    policy = RestartPolicy(max_restarts=5, min_nodes=2)
    assert policy.decide([Attempt(FAIL, "n1", "x", 1)], 2, False, 3).action == Action.SHRINK
    assert policy.decide([Attempt(FAIL, "n1", "x", 1)], 1, False, 3).action == Action.REQUEUE
    assert RestartPolicy().decide([Attempt(FAIL, "n1", "x", 1)], 1, False, 2).action == Action.REQUEUE


def test_unknown_culprit_restarts_on_the_same_nodes():
    assert RestartPolicy().decide([Attempt(FAIL, None, "?", 3)], 2, False, 2).action == Action.RESTART


def test_budget_spent_stops_without_requeue():
    history = [Attempt(FAIL, "n1", "a", 1), Attempt(FAIL, "n2", "b", 2)]
    decision = RestartPolicy(max_restarts=1).decide(history, 2, True, 2)
    assert decision.action == Action.STOP and "budget" in decision.reason


def test_repeated_failure_without_progress_stops():
    history = [Attempt(FAIL, "n1", "crash at 7", 7), Attempt(FAIL, "n2", "crash at 7", 7)]
    policy = RestartPolicy(max_restarts=9, max_no_progress=2)
    assert policy.decide(history, 2, True, 2).action == Action.RESTART
    history.append(Attempt(FAIL, "n3", "crash at 7", 7))
    decision = policy.decide(history, 2, True, 2)
    assert decision.action == Action.STOP and "no training progress in 2" in decision.reason


def test_progress_resets_the_stall_count():
    history = [Attempt(FAIL, "n1", "x", 5), Attempt(FAIL, "n2", "x", 5), Attempt(FAIL, "n3", "x", 9)]
    assert RestartPolicy(max_restarts=9, max_no_progress=2).decide(history, 2, True, 2).action == Action.RESTART


def test_pool_swaps_a_spare_into_the_same_position_and_shrinks_without():
    pool = NodePool.split(["n1", "n2", "n3", "n4"], spares=1)
    assert pool.active == ["n1", "n2", "n3"] and pool.spares == ["n4"]
    assert pool.exclude("n2", "bad") == "n4"
    assert pool.active == ["n1", "n4", "n3"] and pool.excluded == {"n2": "bad"}
    assert pool.exclude("n1", "bad") is None
    assert pool.active == ["n4", "n3"]


def test_pool_keeps_nodes_excluded_before_a_requeue_out():
    pool = NodePool.split(["n1", "n2", "n3"], spares=1, excluded={"n2": "old"})
    assert pool.active == ["n1"] and pool.spares == ["n3"]


def test_culprit_is_the_earliest_crash():
    findings = [
        Finding("exited", 10.2, "n1", 0, "rank 0 killed by signal 15"),
        Finding("exited", 10.0, "n2", 3, "rank 3 killed by signal 9"),
    ]
    assert pick_culprit(findings, COMM_SECTIONS).rank == 3


def test_hung_rank_outside_a_collective_is_blamed_over_those_waiting_in_it():
    findings = [
        Finding("hung", 20.0, "n1", 0, "silent", ("allreduce",), last_beat_at=5.0),
        Finding("hung", 20.0, "n1", 1, "silent", ("allreduce",), last_beat_at=5.0),
        Finding("hung", 20.1, "n2", 3, "silent", ("step",), last_beat_at=5.1),
    ]
    assert pick_culprit(findings, COMM_SECTIONS).rank == 3


def test_lost_agent_before_the_hangs_it_caused_is_the_culprit():
    findings = [Finding("hung", 30.0, "n1", 0, "silent"), Finding("agent_lost", 12.0, "n3", None, "lost")]
    assert pick_culprit(findings, COMM_SECTIONS).node == "n3"


def _rank(**kw) -> RankRecord:
    record = RankRecord(rank=kw.pop("rank", 0), pid=1, registered_at=kw.pop("registered_at", 0.0))
    for key, value in kw.items():
        setattr(record, key, value)
    return record


def test_initial_heartbeat_deadline():
    hangs = find_hangs([_rank(registered_at=0.0)], Timeouts(initial=10, heartbeat=5), now=11)
    assert hangs and "no first heartbeat within 10 s" in hangs[0].reason
    assert not find_hangs([_rank(registered_at=0.0)], Timeouts(initial=10, heartbeat=5), now=9)


def test_heartbeat_and_section_deadlines():
    running = _rank(state=RankState.RUNNING, beats=3, last_beat_at=100.0, sections={"checkpoint": 95.0})
    assert "no heartbeat for 6.0 s" in find_hangs([running], Timeouts(heartbeat=5), now=106)[0].reason
    hang = find_hangs([running], Timeouts(heartbeat=50, sections={"checkpoint": 8}), now=104)
    assert "section 'checkpoint' open for 9.0 s" in hang[0].reason
    assert not find_hangs([running], Timeouts(heartbeat=50, sections={"checkpoint": 20}), now=104)
    quiet = _rank(state=RankState.RUNNING, beats=3, last_beat_at=100.0)
    assert "out of any section" in find_hangs([quiet], Timeouts(heartbeat=50, out_of_section=3), now=104)[0].reason
    assert not find_hangs([_rank(state=RankState.EXITED, last_beat_at=0.0)], Timeouts(heartbeat=1), now=99)


def test_calibration_after_warmup_and_across_restarts():
    record = _rank(state=RankState.RUNNING)
    for i in range(8):
        record.beat(i + 1, 100.0 + i * 0.5)
    tuned = calibrate(Timeouts(heartbeat=60), [record])
    assert tuned.heartbeat == 5.0  # 0.5 s x the safety factor is 2.5 s, under the default floor
    assert calibrate(Timeouts(heartbeat=60, floor=1.0), [record]).heartbeat == 0.5 * SAFETY_FACTOR
    assert calibrate(Timeouts(heartbeat=60, floor=4.0), [record]).heartbeat == 4.0
    assert Timeouts.from_dict(Timeouts(floor=2.0).to_dict()).floor == 2.0  # la.timeouts carries it to the agents
    assert calibrate(Timeouts(heartbeat=60, calibrate=False), [record]).heartbeat == 60
    assert calibrate(Timeouts(heartbeat=60), [], restored=7.5).heartbeat == 7.5  # before warm-up: the restored value
    assert calibrate(Timeouts(heartbeat=60), [record], restored=9.0).heartbeat == 9.0  # restored is a floor
    cold = _rank(state=RankState.RUNNING)
    cold.beat(1, 1.0)
    assert calibrate(Timeouts(heartbeat=60), [cold]).heartbeat == 60


def test_one_stall_raises_the_calibrated_deadline_to_twice_itself_not_to_five_times():
    """A 0.9 s stall among thousands of 0.15 s iterations (a busy node) once set the deadline to 4.5 s for the
    rest of the run; it now counts as an outlier: the 99th percentile x 5, at least the stall x 2."""
    record = _rank(state=RankState.RUNNING)
    when = 100.0
    for i in range(2000):
        when += 0.9 if i == 700 else 0.15
        record.beat(i + 1, when)
    tuned = calibrate(Timeouts(heartbeat=60, floor=0.5), [record]).heartbeat
    assert tuned == 0.9 * OUTLIER_MARGIN
    slow_often = _rank(state=RankState.RUNNING)  # every 20th interval is long: that is the job's own rhythm
    when = 100.0
    for i in range(2000):
        when += 0.9 if i % 20 == 0 else 0.15
        slow_often.beat(i + 1, when)
    assert calibrate(Timeouts(heartbeat=60, floor=0.5), [slow_often]).heartbeat == 0.9 * SAFETY_FACTOR
    few = _rank(state=RankState.RUNNING)  # under a hundred intervals the percentile is the longest
    for i, t in enumerate([0.0, 0.15, 0.3, 1.2, 1.35, 1.5, 1.65]):
        few.beat(i + 1, 100.0 + t)
    assert calibrate(Timeouts(heartbeat=60, floor=0.5), [few]).heartbeat == 0.9 * SAFETY_FACTOR
