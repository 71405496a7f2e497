"""What to do after a training step ends, and whether its culprit node goes: pure decisions, no Slurm, no clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "refined_by_dumps",
    "Outcome", "Attempt", "Action", "Decision", "RestartPolicy", "NodeEvidence", "NodeJudgement", "judge_node",
]  # fmt: skip


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
    finding: str = ""  # the culprit finding's kind (launcher.culprit.Finding.kind)
    culprit_rank: int | None = None
    unsure: bool = False  # a hang with every rank inside a collective: attribution may name another rank


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


# ---------------------------------------------------------------------------- which node to exclude


@dataclass(frozen=True)
class NodeEvidence:
    """What is known about the culprit node of a failed attempt, gathered right after the failure.

    `finding`: the culprit finding's kind (`exited`, `hung`, `health`, `agent_lost`, `srun`).
    `health_ok`: the quick health check after the failure passed (True), found a fatal problem
    (False) or was not run (None). `reachable`: the check could run there and Slurm has the node
    responding (True), not (False), unknown (None). `verdict_action`/`verdict_nodes`: attribution's.
    """

    node: str | None
    finding: str
    reason: str = ""
    health_ok: bool | None = None
    health_detail: str = ""
    reachable: bool | None = None
    verdict_action: str | None = None
    verdict_nodes: tuple[str, ...] = ()
    verdict_category: str | None = None


@dataclass(frozen=True)
class NodeJudgement:
    exclude: bool
    reason: str
    row: str  # the decision-table row (docs/launcher.md), for the event and the tests


def judge_node(
    evidence: NodeEvidence, failure_times: list[float], now: float, window_s: float, repeat_limit: int
) -> NodeJudgement:
    """Exclude the culprit node only on evidence about the node; a software fault restarts in place.

    `failure_times`: when earlier failed attempts (this one included) named the same node.
    """
    node, why = evidence.node, evidence.reason
    if node is None:
        return NodeJudgement(False, f"no node named ({why}); restart in place", "no-node")
    if evidence.finding == "health":
        return NodeJudgement(True, f"fatal health finding: {why}", "health")
    if evidence.finding == "agent_lost":
        return NodeJudgement(True, f"node agent or node lost: {why}", "agent-lost")
    if evidence.reachable is False:
        return NodeJudgement(True, f"{node} unreachable after the failure: {evidence.health_detail or why}",
                             "unreachable")
    if evidence.health_ok is False:
        return NodeJudgement(True, f"{node} failed the quick health check: {evidence.health_detail}", "health-check")
    if evidence.verdict_action == "exclude_and_retry" and node in evidence.verdict_nodes:
        return NodeJudgement(
            True, f"attribution blames the node ({evidence.verdict_category}): {why}", "attribution-exclude"
        )
    recent = [t for t in failure_times if now - t <= window_s]
    if len(recent) >= repeat_limit:
        return NodeJudgement(
            True, f"{node} behind {len(recent)} failures within {window_s:g} s (limit {repeat_limit}): {why}",
            "repeated",
        )
    checked = "health check passed" if evidence.health_ok else "node not checked"
    return NodeJudgement(False, f"software fault on a healthy node ({checked}); restart in place: {why}", "software")


def refined_by_dumps(attempt: Attempt, verdict: Any, fr_culprits: tuple, rank_nodes: Mapping[Any, str]) -> Attempt:
    """A hang: the flight-recorder dumps taken at hang time say which rank never joined the collective the
    others wait in; that beats the section heuristic (a victim can wait outside any section). `attempt` itself
    when they name no other single rank."""
    named = fr_culprits
    if not named and attempt.unsure and verdict is not None:
        named = tuple(verdict.culprit.ranks)
    if attempt.finding != "hung" or len(named) != 1 or int(named[0]) == attempt.culprit_rank:
        return attempt
    rank = int(named[0])
    ranks = {int(r): node for r, node in rank_nodes.items() if str(r).isdigit()}
    node = ranks.get(rank) or attempt.culprit_node
    why = f"rank {rank} on {node} holds up the collective (flight recorder): {verdict.root_cause}"
    return dataclasses.replace(attempt, culprit_node=node, culprit_rank=rank, reason=why, unsure=False)
