"""The ranks of one node that each raised the same error, told by torchrun's failure box under them.

torchrun on a node prints each failed worker's traceback without a rank, then one box entry per failed worker
(`rank : 13 (local_rank: 5)`). When a node's file holds the same error k times and its boxes list k ranks, each of
those ranks raised it (round 105d: all eight ranks of the second node lost a directory only the first node made);
the box's `Root Cause` entry is merely the first of them to exit. Pure function over causes and hits.
"""

from __future__ import annotations

from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit
from nvrx_hpc.attribution.causes import Cause

__all__ = ["box_ranks_of_copies"]


def box_ranks_of_copies(co: Sequence[Cause], hits: Sequence[Hit]) -> list[int]:
    """The ranks torchrun's boxes list on the node whose file holds `co`'s copies of one error, when they are as many
    as the copies (two at least) and those copies name one rank at most; else none."""
    logged = [c for c in co if c.kind == "log"]
    sources = {c.evidence.source for c in logged}
    nodes = {n for c in logged for n in c.nodes}
    named = {r for c in logged for r in c.ranks}
    if len(logged) < 2 or len(sources) != 1 or len(nodes) != 1 or len(named) > 1:
        return []
    source, node = next(iter(sources)), next(iter(nodes))
    boxed = {h.rank for h in hits if h.signature == "elastic_box_rank" and h.source == source and h.node == node
             and h.rank is not None}  # fmt: skip
    return sorted(boxed) if len(boxed) == len(logged) and named <= boxed else []
