"""When a process started, as seconds since boot: with its pid, the identity of a process we started.

psutil's `create_time()` is that start plus the boot time the kernel prints in /proc/stat, and that boot
time is "now minus uptime" in whole seconds: it moves whenever the wall clock is stepped (NTP, a virtual
machine resumed from a snapshot). A start recorded before a step and read again after it then differs by
a second or more, and a daemon or agent still running looks like a recycled pid: `cluster up` restarted
half a cluster, an Epilog left a job's agent running. The start in clock ticks since boot never moves.
"""

from __future__ import annotations

import os

import psutil

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Two readings of one process's start are equal to the tick; a recycled pid starts later by far more.
SAME_START_S = 0.05


def started_s(pid: int) -> float:
    """Seconds from boot to the start of process `pid` (psutil.NoSuchProcess when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        raise psutil.NoSuchProcess(pid) from None
    # The command name in parentheses may hold spaces and ')': the fields after the last ')' are fixed.
    # Field 22 of proc(5), `starttime`, is the 20th of them.
    return int(stat.rsplit(b")", 1)[1].split()[19]) / _CLOCK_TICKS


def same_start(pid: int, recorded_s: float) -> bool:
    """Process `pid` is still the one whose start was recorded (False when it is gone)."""
    try:
        return abs(started_s(pid) - recorded_s) < SAME_START_S
    except psutil.Error:
        return False
