"""The agent's table of ranks on its node, and what each last said."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from enum import Enum

import psutil

from nvrx_hpc.agent.intervals import IntervalHistogram
from nvrx_hpc.core import proc_start

__all__ = ["RankState", "RankRecord", "Registry"]


class RankState(str, Enum):
    """registered → running (first heartbeat) → hung | exited. A hung rank is killed and then exits."""

    REGISTERED = "registered"
    RUNNING = "running"
    HUNG = "hung"
    EXITED = "exited"


@dataclass
class RankRecord:
    rank: int
    pid: int
    local_rank: int | None = None
    restart: int = 0
    source: str = "worker"
    state: RankState = RankState.REGISTERED
    registered_at: float = field(default_factory=time.time)
    started_s: float | None = None  # seconds from boot to the pid's start: unmoved by clock steps
    first_beat_at: float | None = None
    last_beat_at: float | None = None
    beats: int = 0
    max_interval: float = 0.0
    intervals: int = 0
    gaps: IntervalHistogram = field(default_factory=IntervalHistogram)  # for calibration's high quantile
    iteration: int | None = None
    sections: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    signal: int | None = None
    reported_exit: bool = False
    exit_unknown: bool = False
    finishing: bool = False  # said w.bye: exiting normally

    def beat(self, beats: int, when: float) -> None:
        if beats <= self.beats:
            return
        if self.last_beat_at is not None:
            # Coalesced beats: the gap per beat is what the training loop really did between calls.
            gap = (when - self.last_beat_at) / max(1, beats - self.beats)
            self.max_interval = max(self.max_interval, gap)
            self.gaps.add(gap, beats - self.beats)
            self.intervals += beats - self.beats
        else:
            self.first_beat_at = when
        self.beats, self.last_beat_at = beats, when
        if self.state == RankState.REGISTERED:
            self.state = RankState.RUNNING

    def alive(self) -> bool:
        """The PID still runs and is still this rank's process (not a zombie, not a recycled PID)."""
        try:
            if self.started_s is None:
                self.started_s = proc_start.started_s(self.pid)
            elif not proc_start.same_start(self.pid, self.started_s):
                return False
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def send_signal(self, signum: int) -> None:
        """Send `signum` to the rank's PID; a process already gone (or no longer ours) is not an error."""
        try:
            os.kill(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def summary(self, now: float) -> dict:
        return {
            "rank": self.rank,
            "pid": self.pid,
            "local_rank": self.local_rank,
            "state": self.state.value,
            "iteration": self.iteration,
            "beats": self.beats,
            "last_beat_age": None if self.last_beat_at is None else round(now - self.last_beat_at, 3),
            "sections": sorted(self.sections),
            "exit_code": self.exit_code,
            "signal": self.signal,
        }


class Registry:
    """Ranks of the current step on this node, keyed by global rank."""

    def __init__(self) -> None:
        self.ranks: dict[int, RankRecord] = {}

    def register(self, rank: int, pid: int, **fields) -> tuple[RankRecord, bool]:
        """Returns the record and whether it is new (a re-registration with the same pid only updates)."""
        known = self.ranks.get(rank)
        if known is not None and known.pid == pid and known.state != RankState.EXITED:
            for key, value in fields.items():
                if value is not None:
                    setattr(known, key, value)
            return known, False
        record = RankRecord(rank=rank, pid=pid, **{k: v for k, v in fields.items() if v is not None})
        record.alive()  # remember the start time now, to tell a recycled PID later
        self.ranks[rank] = record
        return record, True

    def get(self, rank: int) -> RankRecord | None:
        return self.ranks.get(rank)

    def live(self) -> list[RankRecord]:
        return [r for r in self.ranks.values() if r.state in (RankState.REGISTERED, RankState.RUNNING)]

    def clear(self) -> None:
        self.ranks.clear()

    def summary(self) -> dict[str, dict]:
        now = time.time()
        return {str(r.rank): r.summary(now) for r in self.ranks.values()}
