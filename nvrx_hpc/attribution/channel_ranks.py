"""NCCL's channel lines tie a process to its rank, looked up only for a failure line that names a pid and no rank.

NCCL prints each connection it sets up as `host:pid:tid [dev] NCCL INFO Channel 00 : 6[5e000] -> 7[86000] via
...` (before 2.4: `Ring 00 : 11[3c000] -> 12[5e000]`): the printing process is the sender (the left rank), or
with `[receive]` the receiver (the right one). An INFO log holds thousands of them, so they are not scan
signatures (each would become a hit); a second look at the failure's own file reads only the lines of the
pids in question (round 13), and a pid its own file leaves unranked (a kernel log's `pid=48212`) is looked
for in the other logs (round 17). A pid whose lines give several ranks (it is in several communicators,
with ranks of each) stays unranked.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from nvrx_hpc.attribution.api import Hit, Role

__all__ = ["rank_pids_by_channels"]

_CHANNEL = re.compile(rb"(?P<host>[A-Za-z][\w.-]*):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO (?:Channel|Ring) \d+(?:/\d+)? : "
                      rb"(?P<src>\d+)\[[0-9a-fx]+\] -> (?P<dst>\d+)\[[0-9a-fx]+\](?P<recv> \[receive\])?")
_NEEDLES = (b"NCCL INFO Channel", b"NCCL INFO Ring")
_CAUSES = (Role.ROOT, Role.WEAK)


def _channel_ranks(path: Path, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], set[int]]:
    found: dict[tuple[str, str], set[int]] = defaultdict(set)
    try:
        with path.open("rb") as f:
            for line in f:
                if not any(needle in line for needle in _NEEDLES):
                    continue
                m = _CHANNEL.search(line)
                if m is None:
                    continue
                key = (m.group("host").decode(errors="replace"), m.group("pid").decode())
                if key in wanted:
                    found[key].add(int(m.group("dst") if m.group("recv") else m.group("src")))
    except OSError:
        return {}
    return found


def rank_pids_by_channels(hits: Sequence[Hit], logs: Iterable[tuple[str, Path]]) -> list[Hit]:
    """Give every hit of an unranked failure's NCCL pid the one rank that pid's channel lines name.
    `logs`: (source name, path) of the scanned log files."""
    wanted: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for h in hits:
        if h.rank is None and h.role in _CAUSES and h.node and h.fields.get("pid"):
            wanted[h.source].add((h.node, h.fields["pid"]))
    if not wanted:
        return list(hits)
    logs = list(logs)
    ranks: dict[tuple[str, str], int] = {}
    for source, path in logs:
        if source in wanted:
            for key, seen in _channel_ranks(path, wanted[source]).items():
                if len(seen) == 1:
                    ranks[key] = next(iter(seen))
    left = {key for keys in wanted.values() for key in keys} - ranks.keys()
    if left:  # the pid's own file has no channel lines (a kernel log): the other logs may
        seen_elsewhere: dict[tuple[str, str], set[int]] = defaultdict(set)
        for _source, path in logs:
            for key, seen in _channel_ranks(path, left).items():
                seen_elsewhere[key] |= seen
        ranks.update({key: next(iter(seen)) for key, seen in seen_elsewhere.items() if len(seen) == 1})
    if not ranks:
        return list(hits)
    return [dataclasses.replace(h, rank=ranks[(h.node, h.fields["pid"])])
            if h.rank is None and h.node and (h.node, h.fields.get("pid", "")) in ranks else h
            for h in hits]  # fmt: skip
