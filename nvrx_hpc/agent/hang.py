"""Hang deadlines: initial heartbeat, between heartbeats, per section, out of section; and calibration.

Pure functions over rank records and a clock, so the policy is tested without processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nvrx_hpc.agent.intervals import quantile
from nvrx_hpc.agent.registry import RankRecord, RankState
from nvrx_hpc.core.config import NvrxConfig

__all__ = ["Timeouts", "Hang", "find_hangs", "calibrate"]

# Calibrated timeout = the 99th percentile interval x SAFETY_FACTOR, and at least the longest interval x
# OUTLIER_MARGIN: a single stall (a busy node, a slow file system) then raises the deadline to twice itself,
# not five times, where before it set every later hang's detection for the rest of the run.
SAFETY_FACTOR = 5.0
OUTLIER_MARGIN = 2.0
CALIBRATION_QUANTILE = 0.99
WARMUP_BEATS = 5  # intervals observed before calibration replaces the defaults
_AGENT = NvrxConfig().agent  # until the launcher sends its own, the configured defaults


@dataclass(frozen=True)
class Timeouts:
    """Seconds; None disables a check. `calibrate` off means the values were set by hand and stay."""

    initial: float | None = _AGENT.initial_timeout_s
    heartbeat: float | None = _AGENT.heartbeat_timeout_s
    sections: dict[str, float] = field(default_factory=dict)
    out_of_section: float | None = None
    calibrate: bool = True
    floor: float = _AGENT.calibration_floor_s  # calibration never goes below this

    def to_dict(self) -> dict:
        return {
            "initial": self.initial,
            "heartbeat": self.heartbeat,
            "sections": dict(self.sections),
            "out_of_section": self.out_of_section,
            "calibrate": self.calibrate,
            "floor": self.floor,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Timeouts:
        return cls(
            initial=data.get("initial"),
            heartbeat=data.get("heartbeat"),
            sections={str(k): float(v) for k, v in (data.get("sections") or {}).items()},
            out_of_section=data.get("out_of_section"),
            calibrate=bool(data.get("calibrate", True)),
            floor=float(data.get("floor", _AGENT.calibration_floor_s)),
        )


@dataclass(frozen=True)
class Hang:
    rank: int
    reason: str
    silent_s: float


def find_hangs(records: list[RankRecord], timeouts: Timeouts, now: float) -> list[Hang]:
    hangs = []
    for r in records:
        if r.state not in (RankState.REGISTERED, RankState.RUNNING) or r.finishing:
            continue
        if r.last_beat_at is None:
            waited = now - r.registered_at
            if timeouts.initial is not None and waited > timeouts.initial:
                hangs.append(Hang(r.rank, f"no first heartbeat within {timeouts.initial:g} s", waited))
            continue
        silent = now - r.last_beat_at
        if timeouts.heartbeat is not None and silent > timeouts.heartbeat:
            where = f" (in {', '.join(sorted(r.sections))})" if r.sections else ""
            why = f"no heartbeat for {silent:.1f} s, timeout {timeouts.heartbeat:g} s{where}"
            hangs.append(Hang(r.rank, why, silent))
            continue
        for name, since in r.sections.items():
            limit = timeouts.sections.get(name)
            if limit is not None and now - since > limit:
                why = f"section {name!r} open for {now - since:.1f} s, timeout {limit:g} s"
                hangs.append(Hang(r.rank, why, silent))
                break
        else:
            if not r.sections and timeouts.out_of_section is not None and silent > timeouts.out_of_section:
                hangs.append(Hang(r.rank, f"out of any section for {silent:.1f} s", silent))
    return hangs


def calibrate(timeouts: Timeouts, records: list[RankRecord], restored: float | None = None) -> Timeouts:
    """The heartbeat timeout after warm-up: the 99th percentile interval x the safety factor, at least the
    longest interval x the outlier margin (with under 100 intervals the percentile is the longest).

    `restored` is the calibrated value a previous run persisted through the worker API: it is used
    before this run has warmed up, and as a floor afterwards (calibration only grows across restarts).
    """
    if not timeouts.calibrate:
        return timeouts
    warm = [r for r in records if r.intervals >= WARMUP_BEATS]
    if warm:
        typical = quantile((r.gaps for r in warm), CALIBRATION_QUANTILE)
        observed = max(typical * SAFETY_FACTOR, max(r.max_interval for r in warm) * OUTLIER_MARGIN)
        value = max(timeouts.floor, observed, restored or 0.0)
    elif restored is not None:
        value = max(timeouts.floor, restored)
    else:
        return timeouts
    return replace(timeouts, heartbeat=round(value, 3))
