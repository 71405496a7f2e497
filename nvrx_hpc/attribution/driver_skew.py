"""A CUDA build that one node's driver cannot run (round 102f).

`device kernel image is invalid`, `no kernel image is available for execution on the device`, `CUDA driver version is
insufficient`, PTX from a newer toolchain: the job's kernels do not fit the GPU or its driver. Met by the ranks of one
node of several while the others ran the same build, it is that node's driver (an older one, a node not yet updated):
the node's fault, restartable without it. Met on every node, it is the build's, the job's own (`application`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.causes import Findings

__all__ = ["kernels_unfit"]

_KERNELS_UNFIT = re.compile(r"device kernel image is invalid|no kernel image is available|driver version is "
                            r"insufficient|PTX was compiled with an unsupported toolchain|unsupported PTX version")


def kernels_unfit(text: str, ranks: Sequence[int], rank_nodes: Mapping[int, str], f: Findings) -> Category | None:
    """`host` when `text`, the root's line, says the kernels do not fit and `ranks` are one node's of several (the
    job's other nodes heard of in any line: they ran the same build without it), `application` when they do not fit
    elsewhere too or no other node is heard of, None when the line says nothing of it."""
    if not _KERNELS_UNFIT.search(text):
        return None
    on = {rank_nodes.get(r) for r in ranks}
    others = {*rank_nodes.values(), *(h.node for h in f.hits if h.node), *f.listed_nodes, *f.job_nodes} - on
    return Category.HOST if len(on) == 1 and None not in on and others else Category.APPLICATION
