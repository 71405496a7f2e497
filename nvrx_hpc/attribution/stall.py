"""A time limit (or a user's cancel) that ended a job which had stopped making progress long before (round 51a).

Slurm's `CANCELLED ... DUE TO TIME LIMIT` says who ended the job, not why it had not finished. When the job's own
dated lines came at a steady pace and then stopped, an hour of silence before the limit is a hang the limit cut
short (a deadlock after the last evaluation, a rank stuck in a collective with no watchdog), and a restart with more
time meets it again. The line is then a hang's: no progress for `gap` seconds, where before the longest pause was
`longest`. A job that logged rarely (an epoch an hour), or whose silence is short, keeps the time limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from nvrx_hpc.attribution.api import Category, Hit, Role
from nvrx_hpc.attribution.lines import parse_time, ranks_of

__all__ = ["stalled_before_limit"]

STALL_MIN_S = 600.0  # a silence shorter than this before the limit is a slow step, not a hang
_PACE_FACTOR = 3.0  # the silence must be this many times the longest pause while the job ran
_MIN_STAMPS = 5  # dated lines needed before the silence to know the job's pace
_STAMP_AT = 48  # a line's own stamp sits near its start, after a runner's prefix at most
_READ_LIMIT = 64 << 20  # read at most this much of a file for its stamps
# more lines than this after the last dated one: the job went on printing, undated (NeMo RL's step reports, round
# 62a), so its stamps say nothing of a silence; a hung job's last report (a final evaluation's iterations) is shorter
_UNDATED_PROGRESS = 100


def _stamps_before(path: Path, line: int, year: int) -> tuple[list[float], int]:
    """The stamps at the start of `path`'s lines before line `line` (1-based), in file order, and how many lines
    with text came after the last of them."""
    out: list[float] = []
    after = 0
    read = 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, start=1):
                read += len(text)
                if number >= line or read > _READ_LIMIT:
                    break
                t = parse_time(text[:_STAMP_AT], year=year)
                if t is not None:
                    out.append(t)
                    after = 0
                elif text.strip():
                    after += 1
    except OSError:
        return [], 0
    return out, after


def stall(path: Path, end: Hit) -> tuple[float, float] | None:
    """(silence, longest earlier pause) in seconds when the job's lines stopped long before `end`'s time limit."""
    if end.time is None:
        return None
    dated, after = _stamps_before(path, end.line, datetime.fromtimestamp(end.time).year)
    stamps = [t for t in dated if t < end.time - 1]
    if len(stamps) < _MIN_STAMPS or len(set(stamps)) < 2 or after > _UNDATED_PROGRESS:  # one stamp on every line: a
        # collector's, which says nothing of the job's pace
        return None
    longest = max((b - a for a, b in zip(stamps, stamps[1:], strict=False)), default=0.0)
    silence = end.time - max(stamps)
    if silence >= STALL_MIN_S and silence >= _PACE_FACTOR * max(longest, 1.0):
        return silence, longest
    return None


def _ends_job(h: Hit) -> bool:
    """Slurm's time limit, or a plain cancel (`CANCELLED AT ...` with no reason: a user's scancel of a job that had
    stopped moving, round 57a)."""
    return h.signature == "slurm_time_limit" or (h.signature == "slurm_cancelled" and not h.fields.get("why"))


def _left_early(hits: Sequence[Hit]) -> int | None:
    """The one task srun's teardown did not find running (round 82e: `tasks 0-4,6-7: Terminated` and `tasks 8-15:
    Terminated`, no word of task 5): it had ended before the limit, and the others waited for it. None unless the
    `Terminated` lists leave exactly one task of the job out, between others, and no other line reports it; not task 0
    (rank 0's own signal handler may have saved and exited cleanly), nor when srun's tasks are per-node launchers
    (torchrun's `[defaultN]` lines)."""
    if any("tee_local" in h.fields or "task_label" in h.fields for h in hits):
        return None
    ended = [h for h in hits if h.signature == "srun_task_exit"]
    terminated = {r for h in ended if h.fields.get("what") == "Terminated" for r in ranks_of(h.fields.get("tasks", ""))}
    if len(terminated) < 3:
        return None
    gaps = set(range(max(terminated) + 1)) - terminated
    reported = {r for h in ended for r in ranks_of(h.fields.get("tasks", ""))} - terminated
    return gaps.pop() if len(gaps) == 1 and not reported and 0 not in gaps else None


def stalled_before_limit(hits: Sequence[Hit], paths: Mapping[str, Path]) -> list[Hit]:
    """`hits` with each time limit that followed a long silence of its own file turned into that hang's line."""
    out = []
    absent = _left_early(hits)
    for h in hits:
        found = None
        if _ends_job(h) and h.role is not Role.CONTEXT and h.source in paths:
            found = stall(paths[h.source], h)
        if found is not None:
            silence, longest = found
            ended = "its time limit ended it" if h.signature == "slurm_time_limit" else "it was cancelled"
            h = dataclasses.replace(
                h, signature="stall_before_time_limit", category=Category.DISTRIBUTED_HANG, node=None,
                rank=h.rank if absent is None else absent,
                restartable=False, fields={**h.fields, "silence_s": f"{silence:.0f}"},
                summary=f"the job made no progress for {silence / 60:.0f} min before {ended} (its lines had come at "
                        f"most {longest:.0f} s apart): a hang",
            )  # fmt: skip
        out.append(h)
    return out
