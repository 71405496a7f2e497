"""The rank that called another collective, from NCCL's own log of each call (round 76d).

With `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL`, NCCL logs every collective a process enqueues: its kind, its count
on the communicator (`opCount 3f2`) and the communicator (`comm 0x7fb537c97920 [nranks=8]`). The communicator's
own init line gives its rank (`comm 0x7fb537c97920 rank 6 nranks 8 ... Init COMPLETE`). Every rank of a
communicator makes the same calls in the same order; at the last count they all reached, a rank that called
another kind of collective than all the others (an all-gather among all-reduces) took another code path, and the
others wait for it in theirs: the program's own divergence, which a restart replays.

The logs are large; the sampled head (init lines) and tail (the last calls) of each file are enough.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["CollSample", "sample_collectives", "odd_collective"]

_PROC = rb"^(?:\d{1,7}: )?([A-Za-z][\w.-]*):(\d+):\d+ \[\d+\] NCCL INFO "
_INIT = re.compile(_PROC + rb"comm (0x[0-9a-f]+) rank (\d+) nranks (\d+)\b", re.M)
_CALL = re.compile(_PROC + rb"(\w+): opCount ([0-9a-f]+) [^\n]*?comm (0x[0-9a-f]+) \[nranks=(\d+)\]", re.M)


class CollSample(NamedTuple):
    """A file's communicators' ranks, (host, pid, comm) -> (rank, size), and its calls: (host, pid, comm), count,
    kind."""

    ranks: dict[tuple[str, str, str], tuple[int, int]]
    calls: list[tuple[tuple[str, str, str], int, str]]


def sample_collectives(data: bytes) -> CollSample:
    if b"opCount" not in data:
        return CollSample({}, [])
    ranks = {(m.group(1).decode(), m.group(2).decode(), m.group(3).decode()): (int(m.group(4)), int(m.group(5)))
             for m in _INIT.finditer(data)}  # fmt: skip
    calls = [((m.group(1).decode(), m.group(2).decode(), m.group(5).decode()), int(m.group(4), 16),
              m.group(3).decode()) for m in _CALL.finditer(data)]  # fmt: skip
    return CollSample(ranks, calls)


def odd_collective(samples: Iterable[CollSample]) -> tuple[tuple[int, ...], str] | None:
    """The ranks (a quarter of the communicator at most) whose call at the last count every rank reached is of
    another kind than that of all the others (three at least, all alike), and what they called; None otherwise."""
    ranks: dict[tuple[str, str, str], tuple[int, int]] = {}
    calls: list[tuple[tuple[str, str, str], int, str]] = []
    for sample in samples:
        ranks.update(sample.ranks)
        calls.extend(sample.calls)
    if not calls or not ranks:
        return None
    world = max(size for _rank, size in ranks.values())
    made: dict[int, dict[int, str]] = defaultdict(dict)  # rank -> count -> kind, on the world's communicators
    for key, count, kind in calls:
        rank, size = ranks.get(key, (None, 0))
        if rank is not None and size == world:
            made[rank][count] = kind
    if len(made) < 4:
        return None
    last = min(max(counts) for counts in made.values())
    kinds = {rank: counts.get(last) for rank, counts in made.items()}
    if None in kinds.values():
        return None  # a rank's call at that count fell outside the sampled tail
    common, agreeing = Counter(kinds.values()).most_common(1)[0]
    odd = tuple(sorted(rank for rank, kind in kinds.items() if kind != common))
    if not odd or len(odd) > max(1, len(made) // 4) or agreeing < 3:
        return None
    what = ", ".join(sorted({kinds[r] for r in odd}))
    return odd, f"NCCL's call log: at call {last:#x} rank(s) {list(odd)} called {what} while the others called {common}"
