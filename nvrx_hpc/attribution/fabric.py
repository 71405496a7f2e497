"""Links that went down on several hosts at once: the fabric between them, not one node (round 9).

A host's own link going down (`mlx5_core ... Link down`) names that host: its cable, port or NIC. When
two or more hosts lose their links within a few seconds of each other, no one node explains it: the
switch (or a fabric manager, or a power event) they share does. Excluding them would only shrink the
pool, so the verdict names no node and retries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["FABRIC_WINDOW_S", "fabric_wide"]

FABRIC_WINDOW_S = 30.0  # hosts whose links went down this close together lost them to one event
# A link that lost its carrier; a NIC's own fault (cable error, firmware, health) stays that host's.
_LINK_LOST = re.compile(r"[Ll]ink down|lost carrier|Link is Down")


def fabric_wide(downs: Iterable[tuple[str, float | None, str]]) -> int:
    """How many hosts lost their links together: the number of hosts whose first link-down lines (host,
    time, text) fall within `FABRIC_WINDOW_S` of each other when there are two or more; else 0 (one
    host, a NIC's own fault, or a line without a time, which cannot be placed in the window)."""
    first: dict[str, float] = {}
    for host, when, text in downs:
        if when is None or not _LINK_LOST.search(text):
            return 0
        first[host] = min(first.get(host, when), when)
    if len(first) < 2 or max(first.values()) - min(first.values()) > FABRIC_WINDOW_S:
        return 0
    return len(first)
