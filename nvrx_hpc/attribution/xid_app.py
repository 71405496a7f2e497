"""An illegal memory access that the driver blames on the application (round 43).

`CUDA error: an illegal memory access was encountered` alone is as often a library's kernel as the user's (a
framework crash). The driver says which: Xid 13 (a graphics engine exception) or Xid 31 (an MMU fault) beside it is
the application's own bad access. Where such an Xid is logged on the access's node (or on the one host the Xids
name, when the access names no node), the access is the application's.

Unless one GPU keeps faulting (round 66b): the same application Xid for three or more processes on one GPU, and at
least twice as many as on any other GPU of its node, is that GPU's fault, whatever code ran on it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Category, Hit, Role

__all__ = ["accesses_the_driver_blames"]

_ONE_GPU_PROCESSES = 3  # processes one GPU failed alike before it is the GPU, not each process's code


def _faulting_gpus(hits: Sequence[Hit]) -> set[tuple[str | None, str]]:
    """(node, GPU) of each GPU whose application Xids came from `_ONE_GPU_PROCESSES` processes or more, and twice as
    many as any other GPU of its node."""
    pids: dict[tuple[str | None, str], set[str]] = defaultdict(set)
    for h in hits:
        if h.signature == "xid_application" and h.gpu:
            pids[(h.node, h.gpu)].add(h.fields.get("pid") or str(h.line))
    faulting = set()
    for (node, gpu), seen in pids.items():
        others = max((len(p) for (n, g), p in pids.items() if n == node and g != gpu), default=0)
        if len(seen) >= _ONE_GPU_PROCESSES and len(seen) >= 2 * others:
            faulting.add((node, gpu))
    return faulting


def accesses_the_driver_blames(hits: Sequence[Hit]) -> list[Hit]:
    faulting = _faulting_gpus(hits)
    if faulting:
        return [dataclasses.replace(h, category=Category.GPU_HARDWARE, role=Role.ROOT, restartable=True,
                                    summary=f"Xid {h.fields.get('xid')} again and again on one GPU (the GPU)")
                if h.signature == "xid_application" and (h.node, h.gpu) in faulting else h for h in hits]
    xid_nodes = {h.node for h in hits if h.signature == "xid_application"}
    if not xid_nodes:
        return list(hits)
    only = next(iter(xid_nodes)) if len(xid_nodes) == 1 else None
    return [dataclasses.replace(h, category=Category.APPLICATION, restartable=False)
            if h.signature == "cuda_illegal_access" and (h.node in xid_nodes or h.node is None and only is not None)
            else h for h in hits]  # fmt: skip
