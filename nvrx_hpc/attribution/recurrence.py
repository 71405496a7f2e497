"""A crash that came back in another run of the job, on another node, is the code's (round 36).

Users often paste the output of two runs: the failure, and a rerun on a different node "to get more info". When
the root cause's own signature is in the output files of two different jobs (`slurm-551902.out`,
`slurm-551917.out`) and the two did not run on one and the same node, a plain restart has already been tried and
failed: the crash is not restartable, whatever a single crash of one rank would suggest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath

from nvrx_hpc.attribution.api import Hit

__all__ = ["job_files", "recurs_across_runs"]

_JOB_FILE = re.compile(r"(?:slurm|job)[-_.]?(\d{3,})\b", re.IGNORECASE)


def job_files(hits: Sequence[Hit]) -> set[str]:
    """The Slurm job ids the names of the hits' files carry (`slurm-551902.out` -> 551902)."""
    return {m.group(1) for h in hits if (m := _JOB_FILE.search(PurePath(h.source).name))}


def recurs_across_runs(signature: str, hits: Sequence[Hit]) -> bool:
    runs: dict[str, set[str | None]] = {}
    for h in hits:
        if h.signature == signature:
            m = _JOB_FILE.search(PurePath(h.source).name)
            if m:
                runs.setdefault(m.group(1), set()).add(h.node)
    if len(runs) < 2:
        return False
    nodes = [n for ns in runs.values() for n in ns]
    return None in nodes or len(set(nodes)) > 1  # the same one node every time: that node, not the code
