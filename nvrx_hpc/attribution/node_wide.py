"""Faults in a part the whole node shares: every rank of the node (round 40).

An Xid or an ECC error belongs to one GPU, and so to the rank on it. NVLink SHARP (NVLS) multicast and the
fabric manager are the node's NVSwitch fabric: when they fail, every GPU of the node fails alike, even though
only the ranks that got as far as printing name themselves. A file missing from a node-local path
(`/data/local_nvme/cache/...`) is missing for every process of that node. The culprit is then the node's whole
block of ranks, as the rank map places them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.resources import is_local_path

__all__ = ["node_wide_ranks"]

NODE_WIDE_SIGNATURES = frozenset({"nccl_nvls_failure", "cuda_system_not_ready", "fabric_manager_failed"})
_NODE_WIDE_TEXT = re.compile(r"\bNVLS\b|[Mm]ulticast")  # not a fabric manager line: it may name one GPU's port
_MISSING_FILE = re.compile(r"No such file or directory: '(/[^']+)'")


def _node_wide(category: Category, signature: str, text: str) -> bool:
    if category is Category.GPU_HARDWARE:
        return signature in NODE_WIDE_SIGNATURES or bool(_NODE_WIDE_TEXT.search(text))
    missing = _MISSING_FILE.search(text) if category is Category.APPLICATION else None
    return missing is not None and is_local_path(missing.group(1))


def node_wide_ranks(
    category: Category, faults: Iterable[tuple[str, str]], nodes: Sequence[str], ranks: Sequence[int],
    rank_nodes: Mapping[int, str],
) -> list[int]:
    """All ranks the rank map places on the root's one node when the root, or another root-strength fault of its kind
    on that node (`faults`: signature and text; an Xid 74 beside the fabric manager's errors, round 44), is a fault
    of a part the node shares, and the named ranks are all there; `ranks` unchanged otherwise."""
    if len(set(nodes)) != 1 or not any(_node_wide(category, signature, text) for signature, text in faults):
        return list(ranks)
    block = sorted(r for r, n in rank_nodes.items() if n == nodes[0])
    return block if set(ranks) <= set(block) and len(block) > len(ranks) else list(ranks)
