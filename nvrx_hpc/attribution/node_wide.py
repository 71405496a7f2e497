"""Faults in a part the whole node shares: every rank of the node (round 40).

An Xid or an ECC error belongs to one GPU, and so to the rank on it. NVLink SHARP (NVLS) multicast and the
fabric manager are the node's NVSwitch fabric: when they fail, every GPU of the node fails alike, even though
only the ranks that got as far as printing name themselves. A file missing from a node-local path
(`/data/local_nvme/cache/...`) is missing for every process of that node, unless it is one process's temporary
file that another renamed or removed under it. The culprit is then the node's whole
block of ranks, as the rank map places them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.resources import is_local_path
from nvrx_hpc.attribution.signatures import NODE_LOST_SIGNATURES

__all__ = ["node_alone", "node_wide_ranks"]

NODE_WIDE_SIGNATURES = frozenset({"nccl_nvls_failure", "cuda_system_not_ready", "fabric_manager_failed"})
_NODE_WIDE_TEXT = re.compile(r"\bNVLS\b|[Mm]ulticast")  # not a fabric manager line: it may name one GPU's port
_MISSING_FILE = re.compile(r"No such file or directory: '(/[^']+)'")
# a process's own temporary file (`triton_.cubin.tmp.pid_211874_583021`) that another process renamed or removed
# under it: a race one process lost, not a file the node lacks (round 102f)
_TEMP_NAME = re.compile(r"(?:^|[._])tmp(?:[._]|$)|\.pid_?\d+|\.partial$")


def _node_wide(category: Category, signature: str, text: str) -> bool:
    if category is Category.GPU_HARDWARE:
        return signature in NODE_WIDE_SIGNATURES or bool(_NODE_WIDE_TEXT.search(text))
    missing = _MISSING_FILE.search(text) if category is Category.APPLICATION else None
    return missing is not None and is_local_path(missing.group(1)) \
        and not _TEMP_NAME.search(missing.group(1).rsplit("/", 1)[-1])


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


# faults that strike processes, not the node: an OOM kill names the tasks it killed, a full disk the writer
_PROCESS_FAULTS = frozenset({"linux_oom_kill", "slurm_oom_kill", "k8s_oom_killed", "disk_full"})


def node_alone(
    root_category: Category, category: Category, signature: str, ranks: Sequence[int], nodes: Sequence[str], lost: bool
) -> bool:
    """Whether the culprit is the node alone, not the several ranks of it that met the fault: its adapter or link
    failed, or a part of the host other than its GPUs (its /dev/shm, its container runtime, its GPUs held by
    another process, round 95). A node lost whole names its ranks (they went with it), and so does a fault that
    strikes processes."""
    if len(ranks) <= 1 or len(set(nodes)) != 1:
        return False
    if root_category is Category.NETWORK:
        return True
    return category is Category.HOST and not lost and signature not in NODE_LOST_SIGNATURES \
        and signature not in _PROCESS_FAULTS
