"""Who caused a failed step: the earliest root-cause finding, with hangs judged by where ranks wait."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvrx_hpc.launcher.hub import HubEvent

__all__ = ["Finding", "pick_culprit", "finding_from_event"]


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


def finding_from_event(event: HubEvent, nodes: list[str]) -> tuple[Finding | None, int | None]:
    """What an agent's event says went wrong on `nodes` (None: nothing), and the iteration it carries."""
    data = event.data
    iteration = data.get("iteration") if isinstance(data.get("iteration"), int) else None
    if isinstance(data.get("time"), (int, float)):  # when the agent saw it, not when it arrived here
        event = dataclasses.replace(event, time=float(data["time"]))
    if event.kind == "ag.health" and event.node in nodes:
        why = f"{event.node} failed health check {data.get('check')}: {data.get('detail')}"
        return Finding("health", event.time, event.node, reason=why), None
    if event.kind == "hub.agent_lost" and event.node in nodes:
        silent = f" (silent for {data['silent_s']:g} s)" if "silent_s" in data else ""
        return Finding("agent_lost", event.time, event.node, reason=f"node agent on {event.node} lost{silent}"), None
    if event.kind != "ag.rank" or event.node not in nodes:
        return None, iteration
    rank = data.get("rank")
    if data.get("event") == "hung":
        why = f"rank {rank} on {event.node} hung: {data.get('reason')}"
        sections = tuple(data.get("sections") or ())
        return Finding("hung", event.time, event.node, rank, why, sections, data.get("last_beat_at")), iteration
    if data.get("event") == "exited":
        code, sig = data.get("exit_code"), data.get("signal")
        if code == 0 and not sig:
            return None, iteration
        if code is None and not sig:
            why = f"rank {rank} on {event.node} exited (seen by the PID watch; no exit status)"
            return Finding("exited_unknown", event.time, event.node, rank, why), iteration
        else:
            how = f"killed by signal {sig}" if sig else f"exited with code {code}"
        return Finding("exited", event.time, event.node, rank, f"rank {rank} on {event.node} {how}",
                       tuple(data.get("sections") or ())), iteration
    return None, iteration
