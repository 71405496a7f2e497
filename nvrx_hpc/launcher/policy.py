"""What to do after a training step ends: a pure decision over the attempt history, no Slurm, no clock."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Outcome", "Attempt", "Action", "Decision", "RestartPolicy"]


class Outcome(str, Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # the ranks checkpointed and exited on request (time-limit warning)


@dataclass(frozen=True)
class Attempt:
    """One training step: how it ended, who caused it, and how far training got (max iteration seen)."""

    outcome: Outcome
    culprit_node: str | None = None
    reason: str = ""
    max_iteration: int | None = None
    started_at: float | None = None  # epoch seconds: attribution judges only what came after


class Action(str, Enum):
    DONE = "done"
    RESTART = "restart"  # with the same world size (a spare replaced the culprit, or nobody was excluded)
    SHRINK = "shrink"  # restart on fewer nodes
    REQUEUE = "requeue"  # ask Slurm for a new allocation without the excluded nodes
    STOP = "stop"  # do not requeue: the failure is not restartable here


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


@dataclass(frozen=True)
class RestartPolicy:
    """Restart budget, no-progress rule and shrinking limits.

    `max_no_progress`: stop when this many consecutive failed attempts each failed to get past the best
    iteration reached before them (the same failure repeating without training progress).
    """

    max_restarts: int = 3
    max_no_progress: int = 3
    min_nodes: int | None = None

    def decide(
        self, history: list[Attempt], active_after_exclusion: int, spare_used: bool, nodes_wanted: int
    ) -> Decision:
        last = history[-1]
        if last.outcome == Outcome.SUCCEEDED:
            return Decision(Action.DONE, "training finished")
        if last.outcome == Outcome.STOPPED:
            return Decision(Action.REQUEUE, "ranks stopped at the time-limit warning; requeue to continue")
        restarts = len(history) - 1
        stalled = self._stalled_attempts(history)
        if stalled >= self.max_no_progress:
            return Decision(
                Action.STOP,
                f"no training progress in {stalled} consecutive attempts (iteration stuck at "
                f"{last.max_iteration}); last failure: {last.reason}",
            )
        if restarts >= self.max_restarts:
            return Decision(Action.STOP, f"restart budget spent ({self.max_restarts}); last failure: {last.reason}")
        if spare_used or active_after_exclusion >= nodes_wanted:
            return Decision(Action.RESTART, f"restart {restarts + 1} of {self.max_restarts}: {last.reason}")
        minimum = self.min_nodes if self.min_nodes is not None else nodes_wanted
        if active_after_exclusion >= max(1, minimum):
            return Decision(Action.SHRINK, f"no spare left; continue on {active_after_exclusion} nodes")
        return Decision(Action.REQUEUE, f"no spare left and fewer than {minimum} nodes; requeue excluding bad nodes")

    @staticmethod
    def _stalled_attempts(history: list[Attempt]) -> int:
        """Consecutive failed attempts at the end of the history that did not beat the best iteration before them."""
        stalled = 0
        for index in range(len(history) - 1, 0, -1):
            attempt = history[index]
            if attempt.outcome != Outcome.FAILED:
                break
            before = [a.max_iteration for a in history[:index] if a.max_iteration is not None]
            best_before = max(before) if before else None
            if best_before is None or (attempt.max_iteration is not None and attempt.max_iteration > best_before):
                break
            stalled += 1
        return stalled
