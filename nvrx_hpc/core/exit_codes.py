"""Exit codes of every nvrx-hpc command: an API that batch scripts branch on by name."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode"]


class ExitCode(IntEnum):
    """Process exit codes.

    OK: done.  INTERNAL: a bug in nvrx-hpc (report it).  USAGE: bad flag, config or input.
    UNAVAILABLE: a dependency (Slurm, munge, the agent, the launcher) is missing or not answering.
    AUTH: a peer's frame failed authentication (another job's token, or altered in transit).
    DO_NOT_REQUEUE: the failure was judged not restartable; the batch script must not requeue.
    REQUEUE_EXCLUDING: requeue the job, excluding the nodes the launcher recorded.
    """

    OK = 0
    INTERNAL = 1
    USAGE = 2
    UNAVAILABLE = 69  # sysexits EX_UNAVAILABLE
    AUTH = 77  # sysexits EX_NOPERM
    DO_NOT_REQUEUE = 93  # same number as NVRx's ft_launcher, so existing scripts keep working
    REQUEUE_EXCLUDING = 94
    INPROCESS_ESCALATE = 95  # a rank that cannot recover in-process: `nvrx-hpc run` restarts the step instead
