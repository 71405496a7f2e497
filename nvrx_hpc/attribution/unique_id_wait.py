"""The rank the others waited for at their communicator's set-up (round 90d, 101a).

torch's NCCL process group takes its unique id from the store: rank 0 (or a group's first rank) puts it there when it
reaches the group's first collective, and the others wait for it (`retrieving ncclUniqueId from [0] via c10d key-value
store ... Socket Timeout`). When every such error names the same rank, and that rank printed none of them, it never
came to the collective: still loading, preprocessing or saving on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["waited_for_id"]

_UNIQUE_ID_WAIT = re.compile(r"retrieving ncclUniqueId from \[(\d{1,7})\] via c10d key-value store[^\n]*"
                             r"(?:wait timeout|timed out|Socket Timeout)")


def waited_for_id(texts: Iterable[str], reporters: Iterable[int]) -> int | None:
    """The one rank all of `texts` (the co-causes' lines) timed out waiting for, when none of `reporters` is it."""
    waits = [_UNIQUE_ID_WAIT.search(text) for text in texts]
    waited = {int(m.group(1)) for m in waits if m}
    if waits and all(waits) and len(waited) == 1 and not waited & set(reporters):
        return waited.pop()
    return None
