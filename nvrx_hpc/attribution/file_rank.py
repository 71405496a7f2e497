"""A file one task wrote: its rank for the lines that name none (round 40).

`srun --output=train-%j-%t.log` (or a launcher's per-rank log) gives each task its own file, and a job script often
echoes the task's rank at its head (`[kgc-n02] SLURM_PROCID=1 -> torchbiggraph_train --rank 1`). When a file's lines
name exactly one rank through such a variable, and no line of the file carries another rank, the file is that
rank's: its unranked error lines (a traceback printed without a prefix) are that rank's too.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["file_proc_ranks"]

# a start-up line each process prints of itself, its world size, global rank and local rank (`World(world_size=16,
# rank=11, local_rank=3, ...)`: the first line of a per-rank stdout file under torchrun's `--log-dir`, round 105h)
_PROCESS_BANNER = re.compile(r"\bworld_size=\d+, rank=\d+, local_rank=\d+")


def file_proc_ranks(hits: Sequence[Hit]) -> list[Hit]:
    named: dict[str, set[int]] = defaultdict(set)
    for h in hits:
        if h.signature == "proc_rank_var":
            named[h.source].add(int(h.fields["frank"]))
        elif h.signature == "world_size" and h.rank is not None and _PROCESS_BANNER.search(h.text):
            named[h.source].add(h.rank)  # each process's own start-up line: world, rank and local rank
    own = {source: next(iter(ranks)) for source, ranks in named.items() if len(ranks) == 1}
    for h in hits:  # a file that also carries other ranks' prefixes is a shared output, not one task's
        if h.source in own and h.rank is not None and h.rank != own[h.source] and h.signature != "proc_rank_var":
            own.pop(h.source)
    if not own:
        return list(hits)
    return [dataclasses.replace(h, rank=own[h.source]) if h.source in own and h.rank is None else h for h in hits]
