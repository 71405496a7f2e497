"""Scores ranks from the durations of their named sections, window by window, and flags the slow ones.

Each rank's time in its compute sections over a window is compared with what the job's median rank
took for the same work (`score` = median / own, so 1.0 is typical and 0.77 is 1.3x slower), and with
the rank's own best window (`self_score`). A rank is flagged once its score stayed below the threshold
in most of the last `windows` windows, and unflagged once it no longer does.

Compute or communication: when one rank is slow in its own compute, everyone else waits for it inside
the collective, so their communication sections stretch while its own stay short. A rank whose compute
is normal but whose communication sections take longer than the job's median is slow in the network.
Pure: no clock, no I/O; `launcher/straggler_watch.py` feeds it and publishes what it says.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from nvrx_hpc.core.config_model import StragglerConfig

__all__ = ["StragglerSettings", "RankScore", "StragglerDetector", "SectionStats"]

SectionStats = tuple[int, float, float]  # count, total seconds, shortest
_MIN_RANKS = 2  # a median of one rank says nothing
_MATERIAL = 0.05  # a rank that costs the job less than this share of a step is not worth flagging
_D = StragglerConfig()


@dataclass(frozen=True)
class StragglerSettings:
    enabled: bool = _D.enabled  # the defaults of the [straggler] keys, from the one table
    threshold: float = _D.threshold
    window_s: float = _D.window_s
    windows: int = _D.windows
    exclude_at_restart: bool = _D.exclude_at_restart
    comm_sections: frozenset[str] = frozenset()
    ignore_sections: frozenset[str] = frozenset({"checkpoint"})  # occasional, and slow by design

    @classmethod
    def from_config(cls, section: StragglerConfig, comm_sections: frozenset[str]) -> StragglerSettings:
        """The `[straggler]` keys, with the launcher's communication section names."""
        return cls(enabled=section.enabled, threshold=section.threshold, window_s=section.window_s,
                   windows=section.windows, exclude_at_restart=section.exclude_at_restart,
                   comm_sections=comm_sections)

    @property
    def needed(self) -> int:
        """Windows below the threshold, out of the last `windows`, that flag a rank ("most of them")."""
        return self.windows // 2 + 1


@dataclass(frozen=True, slots=True)
class RankScore:
    rank: int
    node: str | None
    score: float  # compute time of the median rank over this rank's, for the same work (<= 1: slower)
    self_score: float  # this rank's best window over this window
    comm_score: float  # the same for its communication sections (1.0 when it has none)
    kind: str  # "compute" or "communication" when below the threshold, else ""
    flagged: bool
    below: int  # windows below the threshold among the last `windows`

    def to_dict(self) -> dict:
        return {"node": self.node, "score": round(self.score, 3), "self_score": round(self.self_score, 3),
                "comm_score": round(self.comm_score, 3), "kind": self.kind, "flagged": self.flagged,
                "below": self.below}  # fmt: skip


@dataclass
class StragglerDetector:
    """What it keeps per rank is plain: maps of numbers and tuples of numbers, which CPython's garbage
    collector stops tracking (objects per rank, at 16k ranks, would make each of its full passes walk ~100k
    more and stall the launcher's event loop for tens of milliseconds)."""

    settings: StragglerSettings
    # This window, per rank and section: the sections closed, and their seconds in all.
    counts: dict[int, dict[str, int]] = field(default_factory=dict)
    totals: dict[int, dict[str, float]] = field(default_factory=dict)
    nodes: dict[int, str] = field(default_factory=dict)
    best: dict[int, float] = field(default_factory=dict)  # rank -> its shortest compute time per step
    history: dict[int, tuple[tuple[float, float], ...]] = field(default_factory=dict)  # rank -> last (score, comm)
    iterations: dict[int, int] = field(default_factory=dict)  # this window's, per rank
    windows_closed: int = 0

    def add(self, node: str, ranks: Mapping[str, Mapping[str, Iterable[float]]],
            iterations: Mapping[str, int] | None = None) -> None:
        """One agent's report: rank -> section -> (count, total_s, min_s) closed since its last report, and
        rank -> iterations set since then (for the step period)."""
        its = self.iterations
        for rank_key, count in (iterations or {}).items():
            if str(rank_key).isdigit() and isinstance(count, int) and count > 0:
                rank = int(rank_key)
                its[rank] = its.get(rank, 0) + count
        ignore = self.settings.ignore_sections
        for rank_key, sections in ranks.items():
            try:
                rank = int(rank_key)
            except (TypeError, ValueError):
                continue
            self.nodes[rank] = node
            if not isinstance(sections, Mapping):
                continue
            counts = self.counts.get(rank)
            if counts is None:
                counts, totals = self.counts[rank], self.totals[rank] = {}, {}
            else:
                totals = self.totals[rank]
            for name, stats in sections.items():
                if name in ignore or not isinstance(stats, (list, tuple)) or len(stats) < 2:
                    continue
                count, total = stats[0], stats[1]
                if type(count) is int and isinstance(total, (int, float)) and count > 0 and total >= 0:
                    counts[name] = counts.get(name, 0) + count
                    totals[name] = totals.get(name, 0.0) + total

    def clear_window(self) -> None:
        """Forget what this window has gathered so far."""
        self.counts, self.totals, self.iterations = {}, {}, {}

    def close_window(self) -> list[RankScore]:
        """Score the window that ends now and start the next; [] when fewer than two ranks reported."""
        return [score for part in self.close_window_in_parts() for score in part]

    def close_window_in_parts(self, part: int = 256) -> Iterator[list[RankScore]]:
        """`close_window`, a part of the ranks at a time: the launcher's event loop runs between parts
        (16k ranks are ~0.2 s of Python, which a failure frame arriving meanwhile must not wait for). No step
        walks more than `part` ranks, but for the medians (a sort of all ranks' values, a few ms each)."""
        counts, totals, iterations = self.counts, self.totals, self.iterations
        self.clear_window()
        if len(counts) < _MIN_RANKS:
            return
        self.windows_closed += 1
        comm = self.settings.comm_sections
        ranks = sorted(counts)
        compute: dict[int, float] = {}  # seconds per step in compute sections
        talk: dict[int, float] = {}  # ... and in communication sections
        means: dict[str, list[float]] = {}  # section -> every rank's seconds per section
        for i, rank in enumerate(ranks):
            c = k = 0.0
            rank_totals = totals[rank]
            for name, count in counts[rank].items():
                mean = rank_totals[name] / count
                means.setdefault(name, []).append(mean)
                if name in comm:
                    k += mean
                else:
                    c += mean
            compute[rank], talk[rank] = c, k
            if i % part == part - 1:
                yield []
        medians = {name: statistics.median(values) for name, values in means.items() if len(values) >= _MIN_RANKS}
        yield []
        slowest = max(compute.values())
        # In a synchronous step everyone waits for the slowest rank's compute: what is left of a rank's
        # step after it is its own communication cost (a fast rank's long all-reduce is waiting).
        own_comm: dict[int, float] = {}
        for i, r in enumerate(ranks):
            own_comm[r] = max(0.0, talk[r] + compute[r] - slowest)
            if i % part == part - 1:
                yield []
        typical_comm = statistics.median(own_comm.values())
        yield []
        typical_compute = statistics.median(compute.values())
        steps = statistics.median(iterations.values()) if iterations else 0
        # The step period: from the iterations when the ranks report them, else the timed sections' sum.
        period = self.settings.window_s / steps if steps else typical_compute + typical_comm
        material = _MATERIAL * period
        for start in range(0, len(ranks), part):
            yield [self._score(r, counts[r], totals[r], medians, compute[r], own_comm[r], typical_compute,
                               typical_comm, material) for r in ranks[start : start + part]]  # fmt: skip

    def _score(self, rank: int, counts: Mapping[str, int], totals: Mapping[str, float], medians: Mapping[str, float],
               compute: float, own_comm: float, typical_compute: float, typical_comm: float,
               material: float) -> RankScore:
        comm = self.settings.comm_sections
        if compute - typical_compute >= material:
            score = _ratio([n for n in counts if n not in comm], counts, totals, medians)
        else:
            score = 1.0
        comm_score = min(1.0, typical_comm / own_comm) if own_comm - typical_comm >= material else 1.0
        best = self.best.get(rank)
        self_score = min(1.0, best / compute) if best and compute > 0 else 1.0
        if compute > 0 and (best is None or compute < best):
            self.best[rank] = compute
        # The last `windows` (a count changed while running applies at once).
        past = (self.history.get(rank, ()) + ((score, comm_score),))[-self.settings.windows :]
        self.history[rank] = past
        # Judged with the settings in force now: a threshold changed while running applies to the windows
        # already seen, so it takes effect at once.
        kinds = [self._kind(*scored) for scored in past]
        below = len(kinds) - kinds.count("")
        flagged = self.settings.enabled and below >= self.settings.needed
        kind = kinds[-1] or (next(k for k in reversed(kinds) if k) if flagged else "")
        return RankScore(rank, self.nodes.get(rank), score, self_score, comm_score, kind, flagged, below)

    def _kind(self, score: float, comm_score: float) -> str:
        threshold = self.settings.threshold
        return "compute" if score < threshold else "communication" if comm_score < threshold else ""


def _ratio(names: list[str], counts: Mapping[str, int], totals: Mapping[str, float],
           reference: Mapping[str, float]) -> float:
    """Reference time over own time for the same work (the sections both know); 1.0 when there is none."""
    own = sum(totals[n] for n in names if n in reference)
    expected = sum(reference[n] * counts[n] for n in names if n in reference)
    if own <= 0 or expected <= 0:
        return 1.0
    return min(1.0, expected / own)
