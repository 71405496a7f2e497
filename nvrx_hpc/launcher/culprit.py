"""Who caused a failed step: the earliest root-cause finding, with hangs judged by where ranks wait."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.messages import Kind, RankEventKind

if TYPE_CHECKING:
    from nvrx_hpc.launcher.hub import HubEvent

__all__ = ["Finding", "pick_culprit", "finding_from_event"]


@dataclass(frozen=True)
class Finding:
    """One thing that went wrong in a step, as the agents or srun saw it."""

    kind: str  # "exited" | "exited_unknown" | "hung" | "agent_lost" | "health" | "srun"
    time: float
    node: str | None
    rank: int | None = None
    reason: str = ""
    sections: tuple[str, ...] = ()
    last_beat_at: float | None = None


def pick_culprit(findings: list[Finding], comm_sections: frozenset[str]) -> Finding | None:
    """The finding that names the root cause.

    A failed health check (a GPU Xid, ...) is the root cause of what it brought down. A lost agent or
    a rank that died is a root cause in the order it happened. Among hung ranks,
    those waiting inside a collective are victims: the culprit is a hung rank outside any
    communication section, then the one that went silent first.
    """
    if not findings:
        return None
    # A failed health check names its node outright, even when the ranks it took down were seen first.
    health = [f for f in findings if f.kind == "health"]
    if health:
        return min(health, key=lambda f: f.time)
    hard = [f for f in findings if f.kind in ("exited", "agent_lost")]
    hung = [f for f in findings if f.kind == "hung"]
    if hard and (not hung or min(f.time for f in hard) <= min(f.time for f in hung)):
        return min(hard, key=lambda f: f.time)
    if hung:
        outside = [f for f in hung if not set(f.sections) & comm_sections]
        pool = outside or hung
        return min(pool, key=lambda f: (f.last_beat_at if f.last_beat_at is not None else f.time, f.rank or 0))
    return min(findings, key=lambda f: f.time)


def finding_from_event(event: HubEvent, nodes: list[str]) -> tuple[Finding | None, int | None]:
    """What an agent's event says went wrong on `nodes` (None: nothing), and the iteration it carries."""
    msg = event.msg
    iteration = msg.iteration if isinstance(msg, m.RankEvent) else None
    if event.node not in nodes:
        return None, iteration
    judge = _JUDGES.get(msg.KIND)
    # msg.time: when the agent saw it, not when it arrived here
    return (judge(msg, event.node, getattr(msg, "time", event.time)) if judge else None), iteration


def _health(msg: m.HealthFailed, node: str, at: float) -> Finding:
    return Finding("health", at, node, reason=f"{node} failed health check {msg.check}: {msg.detail}")


def _agent_lost(msg: m.AgentLost, node: str, at: float) -> Finding:
    silent = f" (silent for {msg.silent_s:g} s)" if msg.silent_s is not None else ""
    return Finding("agent_lost", at, node, reason=f"node agent on {node} lost{silent}")


def _rank(msg: m.RankEvent, node: str, at: float) -> Finding | None:
    rank = msg.rank
    if msg.event is RankEventKind.HUNG:
        why = f"rank {rank} on {node} hung: {msg.reason}"
        return Finding("hung", at, node, rank, why, msg.sections, msg.last_beat_at)
    if msg.event is not RankEventKind.EXITED:
        return None
    code, sig = msg.exit_code, msg.signal
    if code == 0 and not sig:
        return None
    if code is None and not sig:
        why = f"rank {rank} on {node} exited (seen by the PID watch; no exit status)"
        return Finding("exited_unknown", at, node, rank, why)
    how = f"killed by signal {sig}" if sig else f"exited with code {code}"
    return Finding("exited", at, node, rank, f"rank {rank} on {node} {how}", msg.sections)


_JUDGES = {Kind.AG_HEALTH: _health, Kind.HUB_AGENT_LOST: _agent_lost, Kind.AG_RANK: _rank}
