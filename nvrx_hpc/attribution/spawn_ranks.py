"""The rank of a `torch.multiprocessing.spawn` worker's error under srun's label (round 20).

`mp.spawn` started by srun (one task per node, `srun -l`) reports a worker's failure as `-- Process 2
terminated with the following error:` followed by the worker's traceback (or, for a worker a signal killed,
`ProcessExitedException: process 5 terminated with signal SIGSEGV`), all under the node's srun label
(`1: `). The label is the node's index and the process number its local rank: with the job's world size
(`global rank 6 of 8`, `world_size=8`) over srun's tasks, the traceback's lines are rank
label x (world / tasks) + local. Under a one-task srun the spawner holds every rank: process N is rank N. A
launcher that echoes its machine's index and GPU count (detectron2's `machine_rank=1, num_gpus=8`) gives them itself.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit
from nvrx_hpc.attribution.lines import srun_label
from nvrx_hpc.attribution.rank_blocks import world_sizes

_REACH = 60  # lines of the worker's traceback under the header
# a worker killed by a signal has no traceback: the parent's exception names it (round 35: a SIGSEGV in libtorch_cpu)
_EXITED = re.compile(r"(?:ProcessExitedException: |^Exception: )process (\d+) terminated with (?:signal|exit code)")


def spawn_ranks(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with the lines under each `-- Process L terminated` header given that worker's global rank."""
    tasks = {t for h in hits if h.signature == "srun_task_exit" for t in h.fields.get("tasks", "").split(",")
             if t.isdigit()}  # fmt: skip
    # srun started one task, the spawner: its process numbers are the global ranks; so too with no srun and no rank
    # of another node in the logs (round 74a: a one-node job's `mp.spawn`)
    one_task = tasks == {"0"} or (not tasks and all(h.rank in (None, 0) for h in hits)
                                  and not any(srun_label(h) is not None for h in hits))
    # a launcher that names its machine's index and GPUs (detectron2's, round 100g): its workers' ranks in that file
    echoed: dict[tuple[str, str | None], set[tuple[int, int]]] = {}  # (file, srun label) -> (machine, GPUs)
    for h in hits:
        if h.signature == "spawn_machine_args":
            echoed.setdefault((h.source, srun_label(h)), set()).add((int(h.fields["machine_rank"]),
                                                                      int(h.fields["num_gpus"])))
    machines = {key: next(iter(v)) for key, v in echoed.items() if len(v) == 1}  # two machines in one stream: unsure
    headers = [h for h in hits if h.signature == "mp_spawn_process"
               and (one_task or srun_label(h) is not None or (h.source, None) in machines)]  # fmt: skip
    if not headers and not any(_EXITED.search(h.text) and (one_task or srun_label(h) is not None) for h in hits):
        return list(hits)
    worlds = world_sizes(hits)
    if one_task:
        per_node = 0
    elif len(worlds) != 1 or len(tasks) < 2 or next(iter(worlds)) % len(tasks):
        return list(hits)
    else:
        per_node = next(iter(worlds)) // len(tasks)
    out = []
    for h in hits:
        label = srun_label(h)
        owner = next((g for g in reversed(headers) if g.source == h.source and srun_label(g) == label
                      and 0 <= h.line - g.line <= _REACH), None)  # fmt: skip
        exited = _EXITED.search(h.text) if label is not None or not per_node else None
        local = owner.fields["local_rank"] if owner is not None else exited.group(1) if exited else None
        if local is not None and (h.rank is None or str(h.rank) == label):
            machine, gpus = machines.get((h.source, label), (int(label or 0), per_node))
            rank = machine * gpus + int(local)
            h = dataclasses.replace(h, rank=rank, fields={**h.fields, "spawn_rank": str(rank)})
        out.append(h)
    return out
