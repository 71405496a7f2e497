"""An illegal memory access that the driver blames on the application (round 43).

`CUDA error: an illegal memory access was encountered` alone is as often a library's kernel as the user's (a
framework crash). The driver says which: Xid 13 (a graphics engine exception) or Xid 31 (an MMU fault) beside it is
the application's own bad access. Where such an Xid is logged on the access's node (or on the one host the Xids
name, when the access names no node), the access is the application's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Category, Hit

__all__ = ["accesses_the_driver_blames"]


def accesses_the_driver_blames(hits: Sequence[Hit]) -> list[Hit]:
    xid_nodes = {h.node for h in hits if h.signature == "xid_application"}
    if not xid_nodes:
        return list(hits)
    only = next(iter(xid_nodes)) if len(xid_nodes) == 1 else None
    return [dataclasses.replace(h, category=Category.APPLICATION, restartable=False)
            if h.signature == "cuda_illegal_access" and (h.node in xid_nodes or h.node is None and only is not None)
            else h for h in hits]  # fmt: skip
