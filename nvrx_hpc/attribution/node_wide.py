"""GPU faults in a part the whole node shares: every rank of the node (round 40).

An Xid or an ECC error belongs to one GPU, and so to the rank on it. NVLink SHARP (NVLS) multicast and the
fabric manager are the node's NVSwitch fabric: when they fail, every GPU of the node fails alike, even though
only the ranks that got as far as printing name themselves. The culprit is then the node's whole block of
ranks, as the rank map places them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from nvrx_hpc.attribution.api import Category

__all__ = ["node_wide_ranks"]

NODE_WIDE_SIGNATURES = frozenset({"nccl_nvls_failure", "cuda_system_not_ready"})
_NODE_WIDE_TEXT = re.compile(r"\bNVLS\b|[Mm]ulticast|[Ff]abric ?[Mm]anager|NVSwitch")


def node_wide_ranks(
    category: Category, signature: str, text: str, nodes: Sequence[str], ranks: Sequence[int],
    rank_nodes: Mapping[int, str],
) -> list[int]:
    """All ranks the rank map places on the root's one node when the root is a GPU fault of the node's shared
    fabric and the named ranks are all there; `ranks` unchanged otherwise."""
    if category is not Category.GPU_HARDWARE or len(set(nodes)) != 1:
        return list(ranks)
    if not (signature in NODE_WIDE_SIGNATURES or _NODE_WIDE_TEXT.search(text)):
        return list(ranks)
    block = sorted(r for r, n in rank_nodes.items() if n == nodes[0])
    return block if set(ranks) <= set(block) and len(block) > len(ranks) else list(ranks)
