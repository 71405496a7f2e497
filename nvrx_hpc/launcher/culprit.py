"""Who caused a failed step: the earliest root-cause finding, with hangs judged by where ranks wait."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Finding", "pick_culprit"]


@dataclass(frozen=True)
class Finding:
    """One thing that went wrong in a step, as the agents or srun saw it."""

    kind: str  # "exited" | "hung" | "agent_lost" | "health" | "srun"
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
