"""A node-side launch failure printed without a host is the batch node's (round 36).

When Slurm cannot set a job up on a node (its job_container namespace missing, pyxis unable to start the
container), slurmstepd writes the error into the job's output without naming the node, and Slurm requeues and
holds the job before any training line. The batch step runs on the job's first node, which `scontrol show job`
names as `BatchHost=`; where the inputs name exactly one batch host, those errors are placed there.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["place_on_batch_host"]

_LAUNCH_FAILURES = ("job_container_join_failed", "container_start_failed", "slurm_script_missing")
_JOB_OF_SCRIPT = re.compile(r"/job0*(\d+)/slurm_script")
_HOST = re.compile(r"^[A-Za-z][\w-]*\d[\w.-]*$")


def place_on_batch_host(hits: Sequence[Hit]) -> list[Hit]:
    """Also the batch script slurmd could not find (`execve(): /tmp/slurmd/job2998062/slurm_script: No such file`,
    rounds 49b, 77d, 85c): the node whose slurmd lost it is that job's batch host, as `sacct`'s `.batch` row names
    it under the NodeList column of the header above it."""
    batch_hosts = {h.fields.get("host") for h in hits if h.signature == "slurm_batch_host" and "host" in h.fields}
    only = next(iter(batch_hosts)) if len(batch_hosts) == 1 else None
    by_job = _sacct_batch_hosts(hits)
    out = []
    for h in hits:
        if h.signature in _LAUNCH_FAILURES and h.node is None:
            job = _JOB_OF_SCRIPT.search(h.fields.get("prog", ""))
            host = by_job.get(job.group(1)) if job else only
            if host:
                h = dataclasses.replace(h, node=host)
        out.append(h)
    return out


def _sacct_batch_hosts(hits: Sequence[Hit]) -> dict[str, str]:
    """job -> the NodeList of its `.batch` row, counted from the right: a batch row may leave Partition or Account
    blank, but not the columns after NodeList (State, ExitCode, Elapsed, Start)."""
    headers = sorted((h.source, h.line, h.text.split()) for h in hits if h.signature == "sacct_header")
    found: dict[str, str] = {}
    for h in hits:
        if h.signature != "slurm_batch_host" or "job" not in h.fields:
            continue
        above = [cols for source, line, cols in headers if source == h.source and line < h.line]
        if not above or "NodeList" not in above[-1]:
            continue
        after = len(above[-1]) - above[-1].index("NodeList")  # NodeList and the columns after it
        cells = h.text.split()
        if len(cells) >= after and _HOST.match(cells[-after]):
            found[h.fields["job"]] = cells[-after]
    return found
