"""A process the batch script ran itself is the job's only rank (round 36).

A job script that starts `python train.py` with no launcher (srun, torchrun, accelerate, deepspeed, mpirun)
runs one process: rank 0. When the kernel's OOM killer names a PID and the batch shell reports that same PID
killed (`slurm_script: line 21: 2481307 Killed  python train.py`), the killed process is that rank, provided
no line of the inputs shows another rank.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["single_process_rank"]

_LAUNCHER = re.compile(
    r"\b(?:srun|mpirun|mpiexec|torchrun|accelerate|deepspeed|horovodrun|torch\.distributed\.(?:launch|run)|"
    r"lightning|composer|ray)\b"
)
_PYTHON = re.compile(r"^(?:\S*/)?python[\d.]*\s")


def single_process_rank(hits: Sequence[Hit]) -> list[Hit]:
    if any(h.rank not in (None, 0) for h in hits):
        return list(hits)
    alone = {h.fields.get("pid") for h in hits if h.signature == "batch_shell_killed"
             and _PYTHON.match(h.fields.get("command", "")) and not _LAUNCHER.search(h.fields.get("command", ""))}
    alone.discard(None)
    return [dataclasses.replace(h, rank=0)
            if h.signature == "linux_oom_kill" and h.rank is None and h.fields.get("pid") in alone else h
            for h in hits]
