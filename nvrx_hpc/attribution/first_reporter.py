"""The first rank to report a GPU fault that others then report too is the faulty one (round 37).

A GPU that faults inside an NVLink domain (`CUDA error: Invalid access of peer GPU memory over nvlink`) is met
by its peers through the memory they share with it: they raise the same error a fraction of a second later.
When the logs stamp each rank's line to the millisecond and one rank's comes clearly first, the later ranks'
lines are its cascade, not faults of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Category, Hit, Role

__all__ = ["first_gpu_reporter"]

_LEAD_S = 0.2  # the first report leads the next by at least this much
_PEER_SIGNATURES = ("nvlink_error",)


def first_gpu_reporter(hits: Sequence[Hit]) -> list[Hit]:
    for signature in _PEER_SIGNATURES:
        reports = [h for h in hits if h.signature == signature and h.role is Role.ROOT and h.rank is not None
                   and h.category is Category.GPU_HARDWARE]  # fmt: skip
        if len({h.rank for h in reports}) < 2 or any(h.time is None or h.time % 1 == 0 for h in reports):
            continue
        first = min(reports, key=lambda h: h.time)
        later = [h for h in reports if h.rank != first.rank]
        if min(h.time for h in later) - first.time < _LEAD_S:
            continue
        demoted = {id(h) for h in later}
        hits = [dataclasses.replace(h, role=Role.CASCADE) if id(h) in demoted else h for h in hits]
    return list(hits)
