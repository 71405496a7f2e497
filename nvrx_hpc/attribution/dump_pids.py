"""Stack dumps of other processes pasted into a file named after one (round 35).

A file named after a rank and its process (`pyspy_dump_rank0_pid5588.txt`) gives that rank to all its lines.
Users paste more dumps below the first (`$ py-spy dump --pid 5590`, py-spy's `Process 5590: python ...`). Those
dumps belong to other processes whose ranks the name does not give, so their lines lose its rank: a victim
waiting in a barrier must not make the busy rank 0 look as if it waited too.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import PurePath

from nvrx_hpc.attribution.api import Hit

__all__ = ["other_pid_dumps"]

_NAMED_PID = re.compile(r"(?:^|[-_.])pid[-_]?(\d+)(?:[-_.]|$)")


def _file_pid(source: str) -> str | None:
    m = _NAMED_PID.search(PurePath(source).name)
    return m.group(1) if m else None


def other_pid_dumps(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` where the lines under another process's dump header, in a file named after one rank and pid, have
    no rank (the header's own line included)."""
    starts: dict[str, list[tuple[int, str]]] = defaultdict(list)  # source -> (line, pid) of each dump header
    for h in hits:
        if h.signature == "pyspy_process" and _file_pid(h.source) is not None:
            starts[h.source].append((h.line, h.fields["dump_pid"]))
    if all(pid == _file_pid(s) for s, heads in starts.items() for _, pid in heads):
        return list(hits)
    out = []
    for h in hits:
        under = [pid for line, pid in sorted(starts.get(h.source, ())) if line <= h.line]
        if under and under[-1] != _file_pid(h.source) and h.rank is not None:
            h = dataclasses.replace(h, rank=None)
        out.append(h)
    return out
