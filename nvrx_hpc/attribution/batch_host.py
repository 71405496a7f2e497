"""A node-side launch failure printed without a host is the batch node's (round 36).

When Slurm cannot set a job up on a node (its job_container namespace missing, pyxis unable to start the
container), slurmstepd writes the error into the job's output without naming the node, and Slurm requeues and
holds the job before any training line. The batch step runs on the job's first node, which `scontrol show job`
names as `BatchHost=`; where the inputs name exactly one batch host, those errors are placed there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["place_on_batch_host"]

_LAUNCH_FAILURES = ("job_container_join_failed", "container_start_failed")


def place_on_batch_host(hits: Sequence[Hit]) -> list[Hit]:
    hosts = {h.fields.get("host") for h in hits if h.signature == "slurm_batch_host"}
    if len(hosts) != 1:
        return list(hits)
    host = hosts.pop()
    return [dataclasses.replace(h, node=host) if h.signature in _LAUNCH_FAILURES and h.node is None else h
            for h in hits]
