"""A log collector's clock behind the lines it stamps (round 87's stamped check).

A collector (Fluent Bit, a `ts` pipe, a console export) puts its own stamp before each line it forwards. It reads a
line after the line was written, so its stamp is never earlier than the line's own, unless its clock is behind the
node's. When a file shows that (`2024-11-02T04:05:00Z [rank8]:[E1102 04:21:57.551 ...]`: the collector says 04:05,
the line says 04:21), its stamps on the file's other lines, those that carry no stamp of their own, are not when
those lines happened: they go, and the lines are dated as if unstamped (by torchrun's failure box, for one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["LEAD_ONLY", "LEAD_BEHIND", "drop_lagging_collector_stamps"]

LEAD_ONLY = "lead_only"  # the hit's time is its collector's stamp: the line had none of its own
LEAD_BEHIND = "lead_behind"  # the line's collector stamp is earlier than its own stamp


def drop_lagging_collector_stamps(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with the collector's times removed in each file whose collector stamps a line earlier than the
    line's own stamp."""
    lagging = {h.source for h in hits if h.fields.get(LEAD_BEHIND)}
    if not lagging:
        return list(hits)
    return [dataclasses.replace(h, time=None, clock="") if h.source in lagging and h.fields.get(LEAD_ONLY) else h
            for h in hits]
