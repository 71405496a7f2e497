"""The ranks a torch.distributed.checkpoint failure names.

DCP gathers each rank's local failure during a collective save or load and raises the same
`CheckpointException ranks:dict_keys([8, 9, ...])` on every rank (round 28: a sharded checkpoint on node-local
disks, the metadata written only on the coordinator's node). The exception is every rank's, its cause the
ranks it lists: those whose own read or write failed.
"""

from __future__ import annotations

import re

__all__ = ["failed_ranks"]

_LISTED = re.compile(r"CheckpointException ranks:\s*dict_keys\(\[([\d,\s]+)\]\)")


def failed_ranks(text: str) -> list[int]:
    """The ranks a CheckpointException line lists, [] when the line is not one."""
    found = _LISTED.search(text)
    return sorted({int(r) for r in found.group(1).split(",") if r.strip()}) if found else []
