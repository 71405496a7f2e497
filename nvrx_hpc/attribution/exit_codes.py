"""The host of a launcher's exit line that names none, from the exit code srun saw there (round 16).

DeepSpeed's launcher started by srun (one per node, `--no_ssh`) prints `'--local_rank=0' ...] exits with
return code = -9` without a host, then exits with its child's status; srun reports that as the task's
exit code, 256 minus the signal: `srun: error: gpu-j01: task 0: Exited with exit code 247`. When exactly
one host's srun task ended with the code the launcher's line implies, the line was printed there. A task
Slurm's cgroup OOM killer ended is reported `Out Of Memory` instead of a code: the killer's SIGKILL (`-9`)
was seen on that host when it is the only one (round 21).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit, Role

_UNPLACED_EXITS = ("ds_launcher_exit",)
_SIGTERM_CODES = ("-15", "143", "241")  # the signal, 128 + it (a shell), 256 - it (srun)


def terminated(h: Hit) -> bool:
    """An exit by SIGTERM: the teardown's own signal, not a failure of that process."""
    return h.fields.get("code") in _SIGTERM_CODES or h.fields.get("what") == "Terminated"


def place_by_exit_codes(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with each unplaced launcher exit by a signal placed on the one host srun saw exit so."""
    hosts_by_code: dict[str, set[str]] = defaultdict(set)
    for h in hits:
        if h.signature == "srun_task_exit" and h.node and h.fields.get("code"):
            hosts_by_code[h.fields["code"]].add(h.node)
        elif h.signature == "slurm_oom_kill" and h.node and "tasks" in h.fields:
            hosts_by_code[str(256 - 9)].add(h.node)  # `srun: error: host: task 1: Out Of Memory`
    if not hosts_by_code:
        return list(hits)
    out = []
    for h in hits:
        code = h.fields.get("code", "")
        if h.signature in _UNPLACED_EXITS and h.node is None and code.startswith("-") and code[1:].isdigit():
            hosts = hosts_by_code.get(str(256 + int(code)), set())
            if len(hosts) == 1:
                h = dataclasses.replace(h, node=next(iter(hosts)))
        out.append(h)
    return out


_LAUNCHER_EXITS = ("ds_launcher_exit", "elastic_child_failed", "horovod_process_exit")


def quiet_terminated(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with a launcher's report of a child ended by SIGTERM made context when another child's end is
    reported too: the launchers send SIGTERM to every other child once one fails, so that one's end is the
    line worth naming (round 16: `-9` on one node, `-15` on the other)."""
    ends = [h for h in hits if h.signature in _LAUNCHER_EXITS and h.role is Role.CASCADE]
    if not any(h.fields.get("code") and not terminated(h) for h in ends):
        return list(hits)
    return [dataclasses.replace(h, role=Role.CONTEXT) if h in ends and terminated(h) else h for h in hits]
