"""Heartbeat intervals of a rank as a small log-spaced histogram: enough for a high quantile, constant size."""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["IntervalHistogram", "quantile"]

_BASE_S = 0.001  # bucket 0 holds every interval up to 1 ms
_PER_OCTAVE = 4  # four buckets per doubling: a quantile is read within 19 %, then as the largest value in its bucket


class IntervalHistogram:
    """Counts per bucket and the largest interval seen in each, so a quantile is a value that was observed."""

    __slots__ = ("counts", "largest", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.largest: dict[int, float] = {}
        self.total = 0

    def add(self, seconds: float, times: int = 1) -> None:
        bucket = 0 if seconds <= _BASE_S else int(math.log2(seconds / _BASE_S) * _PER_OCTAVE) + 1
        self.counts[bucket] = self.counts.get(bucket, 0) + times
        self.largest[bucket] = max(self.largest.get(bucket, 0.0), seconds)
        self.total += times


def quantile(histograms: Iterable[IntervalHistogram], q: float) -> float:
    """The largest observed interval of the bucket where the merged histograms reach the `q` quantile."""
    counts: dict[int, int] = {}
    largest: dict[int, float] = {}
    for h in histograms:
        for bucket, n in h.counts.items():
            counts[bucket] = counts.get(bucket, 0) + n
            largest[bucket] = max(largest.get(bucket, 0.0), h.largest[bucket])
    total = sum(counts.values())
    if not total:
        return 0.0
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= q * total:
            return largest[bucket]
    return largest[max(counts)]
