"""A step cancel that srun itself caused is teardown, not a user's cancel (round 9).

`*** STEP 12.0 ON n1 CANCELLED AT ... ***` with no `DUE TO` reason is what Slurm prints both when a
user runs `scancel` and when srun kills the step because one task exited with a code of its own
(`--kill-on-bad-exit`, srun's `Terminating StepId=12.0`). In the second case srun reports that task
first (`srun: error: n3: task 10: Exited with exit code 1`, or a signal of its own: `tasks 8-11: Killed`;
`Terminated` is srun's own teardown): the cancel follows from that exit, and
what made the task exit is not the scheduler. Every cancel line of that step, in any file (the job's
`.err` often holds the cancel line alone), is then context: on the timeline, never a cause.

A user's cancel after live stack dumps (py-spy's or gdb's `all_reduce (torch/distributed/distributed_c10d.py:1322)`
frames) ended a job that hung in a collective: the stacks are the evidence of that hang, the cancel its
end (round 13). So does a time limit or a preemption that comes after collective timeouts: the ranks had
hung, and the watchdog had taken them down, before the scheduler ended the job (round 14).

Logs of several jobs (a single-node smoke test beside the failed run, `slurm-7731488.out` and
`slurm-7731502.out`): the scheduler's end of one job is not the failure of another. When every failure
line lies in files of other jobs, that end is context (round 26).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit, Role

__all__ = ["own_cancels", "hung_cancels", "hang_before_limit", "other_jobs_ends"]


_OWN_SIGNALS = ("Killed", "Segmentation fault", "Aborted", "Bus error")  # not `Terminated`: srun's own teardown


def own_cancels(hits: Sequence[Hit]) -> list[Hit]:
    """Demote to context the reasonless cancel lines of a step srun killed after a task's own exit."""
    first_exit: dict[str, int] = {}  # file -> line of the first task srun saw exit with a code
    for h in hits:
        if h.signature == "srun_task_exit" and (h.fields.get("code", "0") not in ("", "0")
                                                or h.fields.get("what") in _OWN_SIGNALS):
            first_exit[h.source] = min(first_exit.get(h.source, h.line), h.line)
    steps = {h.fields.get("job") for h in hits
             if h.signature == "slurm_cancelled" and not h.fields.get("why")
             and h.source in first_exit and first_exit[h.source] < h.line}  # fmt: skip
    steps.discard(None)
    if not steps:
        return list(hits)
    return [dataclasses.replace(h, role=Role.CONTEXT)
            if h.signature == "slurm_cancelled" and not h.fields.get("why") and h.fields.get("job") in steps else h
            for h in hits]  # fmt: skip


# a dump's frame, not a traceback's `File "...", line N`
_LIVE_FRAME = re.compile(r"(?:distributed_c10d|deepspeed/comm/(?:comm|torch))\.py:\d+\)")


_STALL_REPORTS = ("horovod_stall", "horovod_missing_rank")  # a stall inspector repeats while the job is stuck


def hung_cancels(hits: Sequence[Hit]) -> list[Hit]:
    """When stack dumps show processes inside a collective, or a stall inspector reported ranks missing,
    and a user cancelled the job (no `DUE TO`), that is a hang's evidence (victims': the verdict names
    who they wait on) and the cancel its context. Dumps inside a collective with no failure line at all are
    a hang's evidence too: the job was found hung while it still ran (round 40)."""
    live = [h for h in hits if h.signature == "stack_in_collective" and _LIVE_FRAME.search(h.text)]
    cancels = [h for h in hits if h.signature == "slurm_cancelled" and not h.fields.get("why")
               and h.role is not Role.CONTEXT]  # fmt: skip
    stalled = any(h.signature in _STALL_REPORTS and any(_before(h, c) for c in cancels) for h in hits)
    if live and not cancels and not any(h.role in (Role.ROOT, Role.WEAK) for h in hits):
        # Dumps of processes inside a collective and no failure anywhere: a job found hung while still running.
        return [dataclasses.replace(h, role=Role.WEAK) if h in live else h for h in hits]
    if not (live or stalled) or not cancels:
        return list(hits)
    return [dataclasses.replace(h, role=Role.WEAK) if h.signature == "stack_in_collective"
            and _LIVE_FRAME.search(h.text) else dataclasses.replace(h, role=Role.CONTEXT)
            if h.signature == "slurm_cancelled" and not h.fields.get("why") else h
            for h in hits]  # fmt: skip


_TIMEOUTS = ("watchdog_timeout", "collective_timeout", "horovod_stall", "horovod_missing_rank")
_SCHEDULER_ENDS = ("slurm_time_limit", "slurm_preempted")


def _before(a: Hit, b: Hit) -> bool:
    if a.time is not None and b.time is not None:
        return a.time < b.time
    return a.source == b.source and a.line < b.line


def hang_before_limit(hits: Sequence[Hit]) -> list[Hit]:
    """Demote to context a time limit or preemption that came after collective timeouts."""
    ends = [h for h in hits if h.signature in _SCHEDULER_ENDS]
    timeouts = [h for h in hits if h.signature in _TIMEOUTS]
    if not ends or not timeouts or not all(any(_before(t, e) for t in timeouts) for e in ends):
        return list(hits)
    return [dataclasses.replace(h, role=Role.CONTEXT) if h.signature in _SCHEDULER_ENDS else h for h in hits]


_SCHEDULER_LINES = ("slurm_cancelled", *_SCHEDULER_ENDS)
_JOB_FILE = re.compile(r"slurm[-_](\d+)")


def _file_job(source: str) -> str | None:
    m = _JOB_FILE.search(source.rsplit("/", 1)[-1])
    return m.group(1) if m else None


def other_jobs_ends(hits: Sequence[Hit]) -> list[Hit]:
    """Demote to context a scheduler's end of job J when every other cause line is in another job's file."""
    ends = [h for h in hits if h.signature in _SCHEDULER_LINES and h.role is not Role.CONTEXT and h.fields.get("job")]
    if not ends:
        return list(hits)
    failing = {_file_job(h.source) for h in hits
               if h.role in (Role.ROOT, Role.WEAK) and h.signature not in _SCHEDULER_LINES}  # fmt: skip
    if not failing or None in failing:
        return list(hits)
    other = {h.fields["job"].split(".")[0] for h in ends} - failing
    if not other:
        return list(hits)
    return [dataclasses.replace(h, role=Role.CONTEXT) if h in ends and h.fields["job"].split(".")[0] in other else h
            for h in hits]
