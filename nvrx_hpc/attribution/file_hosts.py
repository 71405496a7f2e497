"""A log file named after one of the job's nodes is that node's (round 19).

A script that starts one launcher per node often sends each node's output to its own file, named after
the host (`logs/cn110.log`). A kernel log's name already places it (`localise.node_of_file`); any other
file is placed only when its name, up to the first dot, is a host the logs themselves name as one of the
job's nodes (an `srun: error: cn110: ...` line, a nodelist), so `train.log` or `rank3.log` place nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import PurePath

from nvrx_hpc.attribution.api import Hit


def place_by_file_host(hits: Sequence[Hit], listed: Iterable[str] = ()) -> list[Hit]:
    """`hits` with the unplaced lines of a file named after a job node placed on that node."""
    known = {h.node.split(".")[0] for h in hits if h.node} | {n.split(".")[0] for n in listed}
    out = []
    for h in hits:
        if h.node is None:
            stem = PurePath(h.source).name.split(".")[0]
            if stem in known:
                h = dataclasses.replace(h, node=stem)
        out.append(h)
    return out
