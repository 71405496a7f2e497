"""Two nodes launched with one node rank (round 36).

A multi-node launcher takes its node's rank on its command line (`accelerate launch --machine_rank`, `torchrun
--node_rank`). A job script that builds that line with `$SLURM_NODEID` (or `$SLURM_PROCID`) inside the batch
shell expands it once, on the first node, and every node then starts as node 0: their ranks collide, and the
rendezvous waits for clients that never come (`4/8 clients joined`) until it times out. Where the job echoes its
launch line per node and two different hosts show the same node rank of a job of several nodes, that is the cause:
a configuration error of the job (application, not restartable), whatever timeout followed.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Category, Hit, Role

__all__ = ["shared_node_ranks"]

_LAUNCH_LINES = ("accelerate_cmd", "torchrun_cmd")


def _nodes_of_job(value: str) -> int:
    """`--nnodes 2`, `--nnodes=2:4` (the smallest), `--num_machines 2`; 0 when not a count."""
    first = value.split(":")[0]
    return int(first) if first.isdigit() else 0


def shared_node_ranks(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with the launch lines of a node rank that two hosts started as turned into the failure's root."""
    hosts: dict[str, set[str]] = defaultdict(set)
    for h in hits:
        if h.signature in _LAUNCH_LINES and h.fields.get("node_rank") and _nodes_of_job(h.fields.get("nnodes", "")) > 1:
            host = h.fields.get("host") or h.node
            if host:
                hosts[h.fields["node_rank"]].add(host)
    shared = {rank: sorted(names) for rank, names in hosts.items() if len(names) >= 2}
    out = []
    for h in hits:
        if h.signature == "accelerate_cmd" and h.rank is not None:
            h = dataclasses.replace(h, rank=None)  # a node's launcher, no rank's: a file's rank is not its
        rank = h.fields.get("node_rank")
        if h.signature in _LAUNCH_LINES and rank in shared and (h.fields.get("host") or h.node) in shared[rank]:
            names = ", ".join(shared[rank])
            h = dataclasses.replace(
                h, category=Category.APPLICATION, role=Role.ROOT, restartable=False,
                summary=f"{names} were all launched as node rank {rank}: their ranks collide and the rendezvous "
                "cannot complete (a node rank expanded once in the batch shell, e.g. $SLURM_NODEID)",
            )  # fmt: skip
        out.append(h)
    return out
