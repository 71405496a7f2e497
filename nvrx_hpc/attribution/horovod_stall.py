"""The one rank whose Horovod stall entry differs from every other's (round 39).

Horovod's stall warning lists, per rank, the tensors that rank has not submitted (`5: [allgather.valid_stats.loss,
...]`). Usually it lists only the late ranks. When it lists every rank, each waiting for what the others
submitted, the ranks took different paths: seven missing the gradients' all-reduce that one rank submitted, and that
one missing the validation all-gather the seven submitted. The one rank that stands apart is the one that
diverged; the others' entries are what its absence caused.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit, Role

__all__ = ["lone_stalled_path"]

_TENSOR = re.compile(r"\[(?:horovod_)?(\w+\.\w+)")  # the first tensor's operation and group: `allgather.valid_stats`


def lone_stalled_path(hits: Sequence[Hit]) -> list[Hit]:
    by_path: dict[str, set[int]] = defaultdict(set)
    for h in hits:
        if h.signature == "horovod_missing_rank" and h.rank is not None and (m := _TENSOR.search(h.text)):
            by_path[m.group(1)].add(h.rank)
    if len(by_path) != 2:
        return list(hits)
    (lone_path, lone), (_path, others) = sorted(by_path.items(), key=lambda kv: len(kv[1]))
    if len(lone) != 1 or len(others) < 2 or lone & others:
        return list(hits)
    return [dataclasses.replace(h, role=Role.CASCADE)
            if h.signature == "horovod_missing_rank" and h.rank in others else h for h in hits]
