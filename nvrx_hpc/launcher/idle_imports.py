"""A standby task's imports at idle priority (SCHED_IDLE): they take only the CPU time nothing else wants.

A standby step's tasks import torch while the attempt before them trains. On a node whose training keeps
the cores busy (8 CPU ranks on 2 cores in the local cluster), imports at normal priority slow the training's
steps for seconds after every restart; at idle priority they run in its pauses (a collective's wait, a
checkpoint's write) and in the time a fault leaves idle. A task that becomes a rank must run at normal
priority again, and leaving SCHED_IDLE needs CAP_SYS_NICE or an RLIMIT_NICE that allows nice 0 (Linux
sched(7)); so the task lowers itself only after a forked child has shown that it can come back.
"""

from __future__ import annotations

import os

__all__ = ["ENV", "MODES", "lower", "restore"]

ENV = "NVRX_STANDBY_IDLE_IMPORTS"
MODES = ("auto", "off")  # auto: idle priority where the task can come back from it; off: normal priority


def _can_come_back() -> bool:
    """Whether this process may go to SCHED_IDLE and back to SCHED_OTHER, tried in a forked child (the
    rules: privileges, the nice value, RLIMIT_NICE, a container's seccomp filter)."""
    child = os.fork()
    if child == 0:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except OSError:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) == 0


def lower() -> bool:
    """This process (its threads to come included) to SCHED_IDLE when it can come back; True if it went."""
    if not hasattr(os, "SCHED_IDLE") or not _can_come_back():
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        return False
    return True


def restore() -> None:
    """Every thread of this process back to SCHED_OTHER (an import may have started threads)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            if os.sched_getscheduler(int(tid)) == os.SCHED_IDLE:
                os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
        except ProcessLookupError:
            continue  # the thread ended meanwhile
