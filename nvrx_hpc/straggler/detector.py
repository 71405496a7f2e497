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
from collections import defaultdict, deque
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


@dataclass(frozen=True)
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
class _Acc:
    count: int = 0
    total: float = 0.0


@dataclass
class StragglerDetector:
    settings: StragglerSettings
    window: dict[int, dict[str, _Acc]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(_Acc)))
    nodes: dict[int, str] = field(default_factory=dict)
    best: dict[int, float] = field(default_factory=dict)  # rank -> its shortest compute time per step
    history: dict[int, deque[tuple[float, float]]] = field(default_factory=dict)  # rank -> last (score, comm)
    iterations: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # this window's, per rank
    windows_closed: int = 0

    def add(self, node: str, ranks: Mapping[str, Mapping[str, Iterable[float]]],
            iterations: Mapping[str, int] | None = None) -> None:
        """One agent's report: rank -> section -> (count, total_s, min_s) closed since its last report, and
        rank -> iterations set since then (for the step period)."""
        for rank_key, count in (iterations or {}).items():
            if str(rank_key).isdigit() and isinstance(count, int) and count > 0:
                self.iterations[int(rank_key)] += count
        for rank_key, sections in ranks.items():
            try:
                rank = int(rank_key)
            except (TypeError, ValueError):
                continue
            self.nodes[rank] = node
            if not isinstance(sections, Mapping):
                continue
            window = self.window[rank]
            for name, stats in sections.items():
                if name in self.settings.ignore_sections or not isinstance(stats, (list, tuple)) or len(stats) < 2:
                    continue
                count, total = stats[0], stats[1]
                if type(count) is int and isinstance(total, (int, float)) and count > 0 and total >= 0:
                    acc = window[name]
                    acc.count += count
                    acc.total += total

    def close_window(self) -> list[RankScore]:
        """Score the window that ends now and start the next; [] when fewer than two ranks reported."""
        return [score for part in self.close_window_in_parts() for score in part]

    def close_window_in_parts(self, part: int = 1024) -> Iterator[list[RankScore]]:
        """`close_window`, a part of the ranks at a time: the launcher's event loop runs between parts
        (16k ranks are ~0.2 s of Python, which a failure frame arriving meanwhile must not wait for)."""
        window, self.window = self.window, defaultdict(lambda: defaultdict(_Acc))
        iterations, self.iterations = self.iterations, defaultdict(int)
        if len(window) < _MIN_RANKS:
            return
        self.windows_closed += 1
        comm = self.settings.comm_sections
        ranks = sorted(window)
        compute: dict[int, float] = {}  # seconds per step in compute sections
        talk: dict[int, float] = {}  # ... and in communication sections
        for i, rank in enumerate(ranks):
            c = k = 0.0
            for name, acc in window[rank].items():
                if name in comm:
                    k += acc.total / acc.count
                else:
                    c += acc.total / acc.count
            compute[rank], talk[rank] = c, k
            if i % part == part - 1:
                yield []
        medians = _median_means(window)
        slowest = max(compute.values())
        # In a synchronous step everyone waits for the slowest rank's compute: what is left of a rank's
        # step after it is its own communication cost (a fast rank's long all-reduce is waiting).
        own_comm = {r: max(0.0, talk[r] + compute[r] - slowest) for r in ranks}
        typical_comm = statistics.median(own_comm.values())
        typical_compute = statistics.median(compute.values())
        steps = statistics.median(iterations.values()) if iterations else 0
        # The step period: from the iterations when the ranks report them, else the timed sections' sum.
        period = self.settings.window_s / steps if steps else typical_compute + typical_comm
        material = _MATERIAL * period
        for start in range(0, len(ranks), part):
            yield [self._score(r, window[r], medians, compute[r], own_comm[r], typical_compute, typical_comm,
                               material) for r in ranks[start : start + part]]  # fmt: skip

    def _score(self, rank: int, sections: Mapping[str, _Acc], medians: Mapping[str, float], compute: float,
               own_comm: float, typical_compute: float, typical_comm: float, material: float) -> RankScore:
        comm = self.settings.comm_sections
        if compute - typical_compute >= material:
            score = _ratio({n: a for n, a in sections.items() if n not in comm}, medians)
        else:
            score = 1.0
        comm_score = min(1.0, typical_comm / own_comm) if own_comm - typical_comm >= material else 1.0
        best = self.best.get(rank)
        self_score = min(1.0, best / compute) if best and compute > 0 else 1.0
        if compute > 0 and (best is None or compute < best):
            self.best[rank] = compute
        past = self.history.get(rank)
        if past is None or past.maxlen != self.settings.windows:  # new, or the window count changed
            past = self.history[rank] = deque(past or (), maxlen=self.settings.windows)
        past.append((score, comm_score))
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


def _median_means(window: Mapping[int, Mapping[str, _Acc]]) -> dict[str, float]:
    per_section: dict[str, list[float]] = defaultdict(list)
    for sections in window.values():
        for name, acc in sections.items():
            per_section[name].append(acc.total / acc.count)
    return {name: statistics.median(means) for name, means in per_section.items() if len(means) >= _MIN_RANKS}


def _ratio(sections: Mapping[str, _Acc], reference: Mapping[str, float]) -> float:
    """Reference time over own time for the same work (the sections both know); 1.0 when there is none."""
    own = sum(a.total for n, a in sections.items() if n in reference)
    expected = sum(reference[n] * a.count for n, a in sections.items() if n in reference)
    if own <= 0 or expected <= 0:
        return 1.0
    return min(1.0, expected / own)
