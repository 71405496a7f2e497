"""The verdict's timeline: launcher events, failure records, health problems and dated root or weak log lines, in
time order (lines without a time last), each placed on its node where the rank map knows it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nvrx_hpc.attribution.api import Hit, Role, TimelineEvent
from nvrx_hpc.attribution.inputs import Event, FailureRecord, HealthProblem

__all__ = ["build_timeline"]


def build_timeline(
    events: Sequence[Event], records: Sequence[FailureRecord], health: Sequence[HealthProblem], hits: Sequence[Hit],
    rank_nodes: Mapping[int, str], limit: int = 2000,
) -> tuple[TimelineEvent, ...]:
    def node(n: str | None, r: int | None) -> str | None:
        return n or (rank_nodes.get(r) if r is not None else None)

    items = [TimelineEvent(e.time, e.kind, node(e.node, e.rank), e.rank, e.detail[:200]) for e in events]
    for r in records:
        what = r.signal or (f"exit {r.exit_code}" if r.exit_code is not None else "failed")
        items.append(TimelineEvent(r.time, "record.failed", r.node, r.rank, what))
    for p in health:
        items.append(TimelineEvent(p.time, "health.failed", p.node, None, f"{p.check}: {p.detail}"[:200]))
    for h in hits:
        if h.time is not None and h.role in (Role.ROOT, Role.WEAK):
            items.append(TimelineEvent(h.time, f"log.{h.signature}", node(h.node, h.rank), h.rank, h.summary[:200]))
    items.sort(key=lambda t: (t.time is None, t.time or 0.0))
    return tuple(items[:limit])
