"""Which step's tasks the agent takes as ranks (nvrx_hpc.agent.rank_step)."""

from __future__ import annotations

from nvrx_hpc.agent.rank_step import RankStep


def test_the_first_step_to_register_after_a_reset_is_the_ranks():
    steps = RankStep()
    assert steps.admits(3, pid=100) and steps.admits(3, pid=101)
    assert not steps.admits(4, pid=200)  # the health probe's task 0
    steps.reset()
    assert steps.admits(5, pid=300) and not steps.admits(3, pid=102)


def test_a_standby_task_that_says_hello_names_its_step():
    """A standby step registers while the previous attempt trains (its tasks are refused then); at its go the
    launcher resets, no task registers again, and the first rank to say hello names the standby step."""
    steps = RankStep()
    assert steps.admits(7, pid=100)
    assert not steps.admits(9, pid=400)  # the next attempt's standby task, waiting
    steps.reset()
    steps.worker_joined(400)
    assert steps.step == 9
    assert not steps.admits(10, pid=500)  # a probe started after the go


def test_a_hello_from_a_task_no_step_registered_names_nothing():
    steps = RankStep()
    steps.worker_joined(123)
    assert steps.step is None and steps.admits(2, pid=124)
