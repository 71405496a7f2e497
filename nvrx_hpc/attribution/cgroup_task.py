"""A Slurm cgroup's `task_N` is the node's own task index, not the job's rank (round 8).

`task_memcg=/slurm/uid_1/job_7/step_0/task_1` on a node where srun's lines place tasks 4-7 is the
second of them, task 5. Where srun places fewer tasks on the node than N (its lists are partial) the
number is kept as it is.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit
from nvrx_hpc.attribution.lines import ranks_of


def global_cgroup_tasks(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with each cgroup task index on a host srun places tasks on read as that host's Nth task."""
    on_host: dict[str, set[int]] = defaultdict(set)
    for h in hits:
        if h.node and h.signature.startswith(("srun_", "slurm_")) and h.fields.get("tasks"):
            on_host[h.node].update(ranks_of(h.fields["tasks"]))
    out = []
    for h in hits:
        local = h.fields.get("cgroup_task", "")
        tasks = sorted(on_host.get(h.node or "", ()))
        if local.isdigit() and h.rank == int(local) and int(local) < len(tasks):
            h = dataclasses.replace(h, rank=tasks[int(local)])
        out.append(h)
    return out
