"""The Slurm step whose tasks are a node's ranks.

Every srun inside an `sbatch --nvrx` job gets the SPANK plugin from the job, and a site may turn it on for every
step: the launcher's health probe, a refill step and a standby step register their tasks with the agent too, under
their own task ids. Task 0 of a health probe must not take rank 0's place, or the stop that follows a failure kills
the probe and the node looks unreachable. The ranks are the tasks of one step: the first whose task registers after
the launcher announces a training step, or the step a standby task registered under before its go made it a rank.
"""

from __future__ import annotations

__all__ = ["RankStep"]

_REMEMBERED_PIDS = 65536  # registrations kept for standby tasks: far more than any node runs between two steps


class RankStep:
    def __init__(self) -> None:
        self.step: int | None = None
        self._step_of: dict[int, int] = {}  # pid -> the step it registered under

    def reset(self) -> None:
        """A new training step: its first registering task names it."""
        self.step = None

    def admits(self, step: int, pid: int) -> bool:
        """Whether task `pid` of `step`, registering now, is a rank (the first step to register since the reset)."""
        if len(self._step_of) >= _REMEMBERED_PIDS:
            self._step_of.clear()
        self._step_of[pid] = step
        if self.step is None:
            self.step = step
        return step == self.step

    def worker_joined(self, pid: int) -> None:
        """A rank said hello over its worker link: a standby task that registered earlier names its step."""
        if self.step is None and pid in self._step_of:
            self.step = self._step_of[pid]
