"""Pure functions for Slurm's text output: `scontrol -o show node|job` and `sinfo --version`.

This is the fallback where `--json` is missing or unparsable. `scontrol show` prints `Key=Value` pairs
separated by spaces, but some values hold spaces themselves:

    OS=Linux 6.18.44-fc-v1098 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=2000 ...
    JobName=half n3 ... Comment=nvrx: attempt 2; "quoted" text ...
    Reason=nvrx: GPU 3 "xid 79"; fell off the bus [root@2026-12-02T15:00:16]

So a pair starts only where whitespace is followed by a key (`[A-Z][A-Za-z0-9_/:]*=`); everything up to
the next such key is the value. The one ambiguity left: free text that itself contains ` Word=` (a
job name or comment such as `a Restarts=9`) would start a false key. The first occurrence of a key
wins, so text late in the record (Comment, Reason) cannot shadow a real field; the JSON path has no
such ambiguity and is preferred wherever Slurm has it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime

from nvrx_hpc.core.errors import SlurmParseError
from nvrx_hpc.slurm.api import JOB_FINISHED_STATES, JobInfo, NodeInfo, SlurmVersion
from nvrx_hpc.slurm.hostlist import HostlistError, expand
from nvrx_hpc.slurm.parse_json import job_state_from_tokens, node_state_from_tokens

__all__ = [
    "parse_version",
    "parse_key_values",
    "parse_show_config",
    "split_records",
    "parse_nodes_text",
    "parse_jobs_text",
    "parse_duration",
    "split_reason",
]

_KEY = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_/:]*)=")
_NULLS = ("", "(null)", "None", "N/A")


def parse_version(text: str) -> SlurmVersion:
    """`slurm 22.05.8`, `slurm-wlm 22.05.8`, `slurm 23.11.4-1` -> SlurmVersion.

    Raises:
        SlurmParseError: no version number in the text.
    """
    match = re.search(r"\b(\d{2})\.(\d{1,2})(?:\.(\d+))?", text or "")
    if match is None:
        raise SlurmParseError("sinfo --version output (expected e.g. 'slurm 22.05.8')", text or "")
    major, minor, micro = match.groups()
    return SlurmVersion(int(major), int(minor), int(micro or 0))


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config` -> {key: value}: one `Key = Value` a line; headers and blank lines are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        key = key.strip()
        if sep and key and " " not in key:
            out[key] = value.strip()
    return out


def parse_key_values(record: str) -> dict[str, str]:
    """One `scontrol show` record -> {key: value}; values keep inner spaces, lose outer ones."""
    matches = list(_KEY.finditer(record))
    pairs: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(record)
        pairs.setdefault(match.group(1), record[match.end() : end].strip())
    return pairs


def split_records(text: str, first_key: str) -> Iterator[str]:
    """Records of `scontrol show` (one line with -o; indented continuation lines without it)."""
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith(f"{first_key}="):
            if current:
                yield " ".join(current)
            current = [line]
        elif line.strip() and current:
            current.append(line.strip())
    if current:
        yield " ".join(current)


def split_reason(value: str) -> tuple[str | None, str | None, datetime | None]:
    """`text [user@2026-12-02T15:00:16]` -> (text, user, local time); `(null)`/empty -> all None."""
    if value in _NULLS:
        return None, None, None
    match = re.fullmatch(r"(.*?)\s*\[([^\[\]@]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]", value, re.DOTALL)
    if match is None:
        return value, None, None
    text, user, stamp = match.groups()
    return text, (user or None), datetime.fromisoformat(stamp).astimezone()


def parse_duration(value: str) -> int | None:
    """Slurm's `[D-]HH:MM:SS`, `MM:SS` or `MM` -> seconds; `UNLIMITED`/`INFINITE` -> None.

    Raises:
        SlurmParseError: anything else (e.g. `Partition_Limit`, which the caller must resolve).
    """
    text = value.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if match is None:
        raise SlurmParseError("a Slurm duration (expected [D-]HH:MM:SS or UNLIMITED)", value)
    days, first, second, third = match.groups()
    if third is not None:
        hours, minutes, seconds = int(first), int(second), int(third)
    elif second is not None:
        hours, minutes, seconds = (int(first), int(second), 0) if days else (0, int(first), int(second))
    else:
        hours, minutes, seconds = (int(first), 0, 0) if days else (0, int(first), 0)
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def _names(value: str | None, what: str) -> tuple[str, ...]:
    if value is None or value in _NULLS:
        return ()
    try:
        return tuple(expand(value))
    except HostlistError as exc:
        raise SlurmParseError(f"{what} ({exc.why})", value) from exc


def parse_nodes_text(text: str) -> list[NodeInfo]:
    """Nodes from `scontrol -o show node` (or the multi-line form).

    Raises:
        SlurmParseError: a record without NodeName or State.
    """
    nodes = []
    for record in split_records(text, "NodeName"):
        pairs = parse_key_values(record)
        if "State" not in pairs:
            raise SlurmParseError("scontrol show node record (no State=)", record)
        base, flags = node_state_from_tokens(pairs["State"].split("+"))
        reason, user, when = split_reason(pairs.get("Reason", ""))
        address = pairs.get("NodeAddr") or None
        partitions = tuple(p for p in pairs.get("Partitions", "").split(",") if p and p not in _NULLS)
        nodes.append(NodeInfo(pairs["NodeName"], base, flags, reason, user, when, address, partitions))
    return nodes


def _exit_code(value: str | None) -> tuple[int | None, int | None]:
    match = re.fullmatch(r"(\d+):(\d+)", value or "")
    if match is None:
        return None, None
    code, signal = int(match.group(1)), int(match.group(2))
    return code, (signal or None)


def _job(record: str) -> JobInfo:
    pairs = parse_key_values(record)
    if "JobId" not in pairs or "JobState" not in pairs:
        raise SlurmParseError("scontrol show job record (no JobId= or JobState=)", record)
    try:
        job_id = int(pairs["JobId"])
    except ValueError as exc:
        raise SlurmParseError("scontrol show job record (JobId is not a number)", record) from exc
    state, state_flags = job_state_from_tokens(pairs["JobState"].split("+"))
    try:
        time_limit = parse_duration(pairs.get("TimeLimit", "UNLIMITED"))
    except SlurmParseError:
        time_limit = None  # Partition_Limit and the like: not known from this record
    if state in JOB_FINISHED_STATES:
        time_left: int | None = 0
        exit_code, signal = _exit_code(pairs.get("ExitCode"))
    else:
        exit_code, signal = None, None
        time_left = time_limit
        if time_limit is not None and state != "PENDING":
            run_time = parse_duration(pairs.get("RunTime", "0"))
            time_left = max(0, time_limit - (run_time or 0))
    node_list = pairs.get("NodeList", "")
    node_list = "" if node_list in _NULLS else node_list
    restarts = pairs.get("Restarts", "0")
    return JobInfo(
        job_id=job_id,
        name=pairs.get("JobName", ""),
        state=state,
        state_flags=state_flags,
        nodes=_names(node_list, f"job {job_id} NodeList"),
        node_list=node_list,
        excluded_nodes=_names(pairs.get("ExcNodeList"), f"job {job_id} ExcNodeList"),
        partition=None if pairs.get("Partition", "") in _NULLS else pairs["Partition"],
        time_limit=time_limit,
        time_left=time_left,
        exit_code=exit_code,
        signal=signal,
        restart_count=int(restarts) if restarts.isdigit() else 0,
        batch_host=None if pairs.get("BatchHost", "") in _NULLS else pairs["BatchHost"],
        stdout=None if pairs.get("StdOut", "") in _NULLS else pairs["StdOut"],
        comment="" if pairs.get("Comment", "") == "(null)" else pairs.get("Comment", ""),
        work_dir=None if pairs.get("WorkDir", "") in _NULLS else pairs["WorkDir"],
        submit_time=_epoch(pairs.get("SubmitTime")),
        state_reason=None if pairs.get("Reason", "") in _NULLS else pairs["Reason"],
    )


def parse_jobs_text(text: str) -> list[JobInfo]:
    """Jobs from `scontrol -o show job [ID]` (or the multi-line form), in Slurm's order.

    Raises:
        SlurmParseError: a record without JobId/JobState, or a bad NodeList.
    """
    return [_job(record) for record in split_records(text, "JobId")]


def _epoch(value: str | None) -> int | None:
    """scontrol's local `2026-12-04T01:06:54` as epoch seconds; None for Unknown/None or what does not parse."""
    if not value or value in _NULLS:
        return None
    try:
        return int(datetime.fromisoformat(value).timestamp())
    except ValueError:
        return None
