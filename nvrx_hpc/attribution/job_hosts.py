"""The hosts a job ran on, as the scheduler's own tables print them (round 74).

Users paste what Slurm or PBS says of a job beside its output: `sacct` rows with a `NodeList` column,
`scontrol show job` (`NodeList=c014`, `BatchHost=c014`), PBS's `exec_host` (`gpu-2-4/0+gpu-2-4/1`). A
one-host `NodeList=` is as much the job's nodelist as a bracketed one; a fault that names no host then
happened on that host when the job had only that one (`lone_exit.the_only_host`). Only the scheduler's own
keys count: a free-text `nodes: 4` or a host in a sentence is not a nodelist.
"""

from __future__ import annotations

import re

from nvrx_hpc.slurm.hostlist import HostlistError, expand

__all__ = ["scheduler_hosts"]

_HOST = rb"[A-Za-z][\w-]*\d[\w-]*(?:\[[\d,-]+\][\w-]*)?"
# scontrol's `NodeList=`/`BatchHost=`, slurmctld's `NodeList=` in its allocation line, a single host included
_KEYED = re.compile(rb"\b(?:NodeList|BatchHost|ExecNode)=(" + _HOST + rb"(?:," + _HOST + rb")*)(?![\w\[])")
# PBS: `exec_host = gpu-2-4/0+gpu-2-4/1`, its mail's `Exec host:  gpu-2-4/0+...`
_PBS_EXEC = re.compile(rb"(?i)\bexec[_ ]host\s*[=:]\s*([A-Za-z][\w.-]*/\d+(?:\+[A-Za-z][\w.-]*/\d+)*)")
_ENDED_WELL = (b"COMPLETED", b"RUNNING", b"PENDING", b"REQUEUED", b"RESIZING", b"SUSPENDED")
_SACCT_HEADER = re.compile(rb"(?m)^[ \t]*JobID\b[^\n]*\bNodeList\b[^\n]*$")


def _sacct_column(data: bytes) -> set[str]:
    """The `NodeList` column of each `sacct` table's rows that ended badly: a user's history lists jobs that
    completed or still run elsewhere, and the job asked about is the one that failed. The dashes under the
    header give each column's span (a blank field, sacct's empty `MaxRSS` of a job's own row, leaves the others
    where they are)."""
    found: set[str] = set()
    for header in _SACCT_HEADER.finditer(data):
        lines = data[header.end():].split(b"\n")[1:200]
        if not lines or not re.fullmatch(rb"[ \t]*-+(?: +-+)*[ \t]*\r?", lines[0]):
            continue
        spans = [m.span() for m in re.finditer(rb"-+", lines[0])]
        names = [header.group(0)[a:b].strip() for a, b in _widened(spans)]
        if b"NodeList" not in names:
            continue
        node_at, state_at = names.index(b"NodeList"), names.index(b"State") if b"State" in names else None
        for line in lines[1:]:
            if not line.strip()[:1].isdigit():
                break  # the table ended: each row starts with its job id
            cells = _cells(line, names, spans)
            if cells and (state_at is None or cells[state_at].split(b" ")[0] not in _ENDED_WELL):
                found.add(cells[node_at].decode(errors="replace"))
    return found


def _cells(line: bytes, names: list[bytes], spans: list[tuple[int, int]]) -> list[bytes]:
    """A row's cells: split on blanks when it has as many as the header (no field empty), else cut at the columns'
    spans when no cut falls inside a word (a table pasted out of line is skipped)."""
    words = line.split()
    if len(words) == len(names):
        return words
    cuts = [end for _start, end in _widened(spans)[:-1]]
    if any(0 < cut < len(line) and line[cut - 1 : cut + 1].strip() == line[cut - 1 : cut + 1] for cut in cuts):
        return []
    return [line[a:b].strip() for a, b in _widened(spans)]


def _widened(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Column spans from one column's dashes to the next's (values align right, so a value may start before its
    dashes; the last column runs to the end of the line)."""
    starts = [0] + [end for _start, end in spans[:-1]]
    ends = [end for _start, end in spans[:-1]] + [1 << 20]
    return list(zip(starts, ends, strict=True))


def scheduler_hosts(data: bytes) -> set[str]:
    """The hosts `data`'s scheduler tables name as a job's (see the module docstring)."""
    lists = {m.group(1).decode(errors="replace") for m in _KEYED.finditer(data)} | _sacct_column(data)
    found: set[str] = set()
    for hostlist in lists:
        try:
            found.update(expand(hostlist))
        except HostlistError:
            continue
    for m in _PBS_EXEC.finditer(data):
        found.update(part.split(b"/")[0].decode(errors="replace") for part in m.group(1).split(b"+"))
    return {h for h in found if h.lower() not in ("none", "null")}
