"""A crash that came back in another run of the job, on another node, is the code's (round 36); one that came back
on the same node each time, among others that changed, is that node's (round 92b).

Users often paste the output of two runs: the failure, and a rerun on a different node "to get more info". When
the root cause's own signature is in the output files of two different jobs (`slurm-551902.out`,
`slurm-551917.out`) and the two did not run on one and the same node, a plain restart has already been tried and
failed: the crash is not restartable, whatever a single crash of one rank would suggest. When each run crashed on
one and the same node while the job's other nodes were not the same in both, that node is what the runs share.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath

from nvrx_hpc.attribution.api import Hit

__all__ = ["job_files", "recurs_across_runs", "same_node_every_run"]

_JOB_FILE = re.compile(r"(?:slurm|job)[-_.]?(\d{3,})\b", re.IGNORECASE)


def job_files(hits: Sequence[Hit]) -> set[str]:
    """The Slurm job ids the names of the hits' files carry (`slurm-551902.out` -> 551902)."""
    return {m.group(1) for h in hits if (m := _JOB_FILE.search(PurePath(h.source).name))}


def recurs_across_runs(signature: str, hits: Sequence[Hit]) -> bool:
    runs: dict[str, set[str | None]] = {}
    for h in hits:
        if h.signature == signature:
            m = _JOB_FILE.search(PurePath(h.source).name)
            if m:
                runs.setdefault(m.group(1), set()).add(h.node)
    if len(runs) < 2:
        return False
    nodes = [n for ns in runs.values() for n in ns]
    return None in nodes or len(set(nodes)) > 1  # the same one node every time: that node, not the code


def same_node_every_run(signature: str, hits: Sequence[Hit]) -> str | None:
    """The one node every run's `signature` lines name, when two runs or more crashed there and the runs' other
    hosts differ (`Nodes: cn204 cn211`, then `Nodes: cn197 cn211`): the node, not the code; None otherwise."""
    crashed: dict[str, set[str | None]] = {}
    hosts: dict[str, set[str]] = {}
    for h in hits:
        m = _JOB_FILE.search(PurePath(h.source).name)
        if not m:
            continue
        if h.node:
            hosts.setdefault(m.group(1), set()).add(h.node)
        if h.signature == signature:
            crashed.setdefault(m.group(1), set()).add(h.node)
    nodes = {n for ns in crashed.values() for n in ns}
    if len(crashed) < 2 or len(nodes) != 1 or None in nodes:
        return None
    node = next(iter(nodes))
    others = [frozenset(hosts.get(run, set()) - {node}) for run in crashed]
    return node if all(others) and len(set(others)) == len(others) else None
