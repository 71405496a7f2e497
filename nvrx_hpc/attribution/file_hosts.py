"""A log file named after one of the job's nodes is that node's (round 19).

A script that starts one launcher per node often sends each node's output to its own file, named after
the host (`logs/cn110.log`). A kernel log's name already places it (`localise.node_of_file`); any other
file is placed only when its name, up to the first dot, or the part of it before or after a `-` or `_`
(`cn110_nvidia-smi.txt`, `console-nid003014.log`), is a host the logs themselves name as one of the job's nodes
(an `srun: error: cn110: ...` line, a nodelist), so `train.log` or `rank3.log` place nothing.

A file named after one rank and its host (`pyspy/gn13_rank6.txt`, `stack-rank6-gpu-a07.log`, round 60) pairs
the two: someone who dumps each rank's stack names the file after where it ran (`rank_file_host`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import PurePath

from nvrx_hpc.attribution.api import Hit
from nvrx_hpc.attribution.launchers import is_host

_RANK_WORD = re.compile(r"(?:^|[_.-])rank[-_]?\d+(?=[_.-]|$)")
# the words such a name holds besides its rank and host: the tool, the stream, the process or GPU
_FILE_WORDS = re.compile(r"^(?:py-?spy|dumps?|stacks?|traces?|gdb|bt|backtrace|faulthandler|logs?|std(?:out|err)|out|"
                         r"err|txt|train(?:ing)?|worker|proc(?:ess)?|hang|hung|pid-?\d+|gpu-?\d+|local-?\d+|"
                         r"attempt-?\d+|step-?\d+|job-?\d+|\d+)$", re.IGNORECASE)
_HOST_WORD = re.compile(r"^[A-Za-z][\w-]*\d[\w-]*$")  # a node's name holds a digit (`gn13`, `gpu-a07`)
_NOT_NODE = re.compile(r"^(?:node|machine|group|local|rank)[-_]?\d+$", re.IGNORECASE)  # a node rank, not a host


def rank_file_host(name: str) -> str | None:
    """The host a file named after a rank and its host names (`gn13_rank6.txt` -> `gn13`); None when the name
    holds no rank, no host-like word, or more than one."""
    stem = name.split(".")[0]
    m = _RANK_WORD.search(stem)
    if m is None:
        return None
    rest = stem[: m.start()] + "_" + stem[m.end():]
    words = [w.strip("-") for w in rest.split("_")]
    words = [w for w in words if w and not _FILE_WORDS.match(w)]
    if len(words) != 1 or not _HOST_WORD.match(words[0]) or _NOT_NODE.match(words[0]) or not is_host(words[0]):
        return None
    return words[0]


def place_by_file_host(hits: Sequence[Hit], listed: Iterable[str] = ()) -> list[Hit]:
    """`hits` with the unplaced lines of a file named after a job node placed on that node."""
    # short name -> the name the logs give it (`vg-0b` -> `vg-0b.cluster.internal`): one node is one name
    known = {n.split(".")[0]: n for n in [*listed, *(h.node for h in hits if h.node)]}
    out = []
    for h in hits:
        if h.node is None:
            host = _named_host(PurePath(h.source).name.split(".")[0], known)
            if host is not None:
                h = dataclasses.replace(h, node=host)
        out.append(h)
    return out


def _named_host(stem: str, known: dict[str, str]) -> str | None:
    """The job node a file's name holds: the whole stem, or the longest part of it before or after a `-` or `_`
    (`ndv5-h100-03_nvsmi_perf`: the host, then what was taken there; `console-nid003014`, round 95c: what was
    taken, then the host)."""
    cuts = [i for i, ch in enumerate(stem) if ch in "-_"]
    parts = [stem, *(stem[:i] for i in cuts), *(stem[i + 1:] for i in cuts)]
    named = [p for p in parts if p in known]
    return known[max(named, key=len)] if named else None
