"""Pure functions from `sinfo --json`, `scontrol --json show nodes` and `squeue --json` to NodeInfo/JobInfo.

Two families of shapes are normalised here (see docs/slurm-adapter.md):

* **openapi v0.0.37/v0.0.38** (Slurm 21.08, 22.05): a node has `state` as a lowercase string and
  `state_flags` as a list; a job has `job_state` as a string, `exit_code` as the raw wait status
  (768 is exit 3, 9 is SIGKILL), `time_limit` as minutes or null (unlimited), times as plain ints.
* **data_parser v0.0.39 and later** (23.02+): states are lists of uppercase names (`["IDLE", "DRAIN"]`),
  numbers that may be unset are `{"set": bool, "infinite": bool, "number": N}`, and `exit_code` is
  `{"status": [...], "return_code": N or {...}, "signal": {"id": N or {...}, "name": "KILL"}}`.
  From 23.02 on `sinfo --json` prints `{"sinfo": [...]}`, groups of nodes per partition and state;
  `scontrol --json show nodes` prints one record per node under `nodes`, which both parse here.

Unknown extra fields are ignored; a missing field that matters raises SlurmParseError quoting it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from nvrx_hpc.core.errors import SlurmParseError
from nvrx_hpc.slurm.api import JOB_BASE_STATES, JOB_FINISHED_STATES, NODE_BASE_STATES, JobInfo, NodeInfo
from nvrx_hpc.slurm.hostlist import HostlistError, expand

__all__ = [
    "parse_nodes_json",
    "parse_jobs_json",
    "data_parser_version",
    "node_state_from_tokens",
    "job_state_from_tokens",
    "split_wait_status",
    "expand_stdout_pattern",
]

log = logging.getLogger(__name__)

_NO_VAL32 = 0xFFFFFFFE  # Slurm's NO_VAL; INFINITE is 0xFFFFFFFF. Both mean "no number" in old shapes.


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise SlurmParseError(
            f"{what} (not JSON: {exc})", text if isinstance(text, str) else repr(text)
        ) from exc
    if not isinstance(doc, dict):
        raise SlurmParseError(f"{what} (top level is not an object)", text)
    errors = doc.get("errors") or []
    if errors:
        log.warning("%s reported errors: %s", what, errors)
    return doc


def data_parser_version(doc: Mapping[str, Any]) -> str | None:
    """`"v0.0.38"` from `meta.plugin.type` (old) or `meta.plugin.data_parser` (new); None if absent."""
    plugin = (doc.get("meta") or {}).get("plugin") or {}
    for key in ("data_parser", "type"):
        match = re.search(r"v\d+\.\d+\.\d+", str(plugin.get(key) or ""))
        if match:
            return match.group(0)
    return None


def _number(value: Any) -> tuple[int | None, bool]:
    """(number, infinite) from a plain int/None (old shapes) or a {set, infinite, number} object (new)."""
    if value is None or isinstance(value, bool):
        return None, False
    if isinstance(value, (int, float)):
        number = int(value)
        if number >= _NO_VAL32:
            return None, number == _NO_VAL32 + 1
        return number, False
    if isinstance(value, Mapping):
        if value.get("infinite"):
            return None, True
        if not value.get("set", True):
            return None, False
        return _number(value.get("number"))
    raise SlurmParseError("a number field (expected an int or {set, infinite, number})", repr(value))


def _tokens(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [t for t in re.split(r"[+,\s]+", value) if t]
    if isinstance(value, (list, tuple)):
        return [str(t) for t in value if t]
    raise SlurmParseError("a state field (expected a string or a list)", repr(value))


def node_state_from_tokens(tokens: Iterable[str]) -> tuple[str, frozenset[str]]:
    """["IDLE", "DRAIN"] or ["idle", "DRAIN"] -> ("idle", {"DRAIN"}); no base state -> "unknown"."""
    base = None
    flags = set()
    for token in tokens:
        clean = token.strip().rstrip("*~#!%$@^-")  # sinfo's short suffixes, should they ever appear
        if base is None and clean.lower() in NODE_BASE_STATES:
            base = clean.lower()
        elif clean:
            flags.add(clean.upper())
    return base or "unknown", frozenset(flags)


def job_state_from_tokens(tokens: Iterable[str]) -> tuple[str, frozenset[str]]:
    """["PENDING", "REQUEUED"] -> ("PENDING", {"REQUEUED"}).

    A lone flag (22.05 prints "COMPLETING" alone) stays the state.
    """
    upper = [t.strip().upper() for t in tokens if t.strip()]
    base = next((t for t in upper if t in JOB_BASE_STATES), None)
    if base is None:
        return (upper[0] if upper else "UNKNOWN"), frozenset(upper[1:])
    return base, frozenset(t for t in upper if t != base)


def split_wait_status(status: int) -> tuple[int, int | None]:
    """A raw wait status (v0.0.38 `exit_code`) -> (exit code, signal or None).

    768 -> (3, None); 9 -> (0, 9), as scontrol's ExitCode=0:9.
    """
    signal = status & 0x7F
    return (status >> 8) & 0xFF, (signal or None)


def _exit_code(value: Any) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    if isinstance(value, bool):
        raise SlurmParseError("exit_code", repr(value))
    if isinstance(value, int):
        return split_wait_status(value)
    if isinstance(value, Mapping):
        status = {s.upper() for s in _tokens(value.get("status"))}
        if status & {"PENDING", "INVALID"}:
            return None, None
        code, _ = _number(value.get("return_code"))
        signal_obj = value.get("signal")
        signal_id = signal_obj.get("id") if isinstance(signal_obj, Mapping) else signal_obj
        signal, _ = _number(signal_id)
        return code, (signal or None)
    raise SlurmParseError("exit_code (expected an int or an object)", repr(value))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _optional_text(value: Any, *, none_words: tuple[str, ...] = ("", "None", "(null)")) -> str | None:
    text = _text(value)
    return None if text in none_words else text


def _names(value: Any, what: str) -> tuple[str, ...]:
    """A hostlist string (`n[1-2]`, `n1,n4`) or an already-expanded list of names."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(name for item in value for name in expand(str(item)))
    try:
        return tuple(expand(str(value)))
    except HostlistError as exc:
        raise SlurmParseError(f"{what} ({exc.why})", str(value)) from exc


def _timestamp(value: Any) -> datetime | None:
    number, _ = _number(value)
    return datetime.fromtimestamp(number, tz=timezone.utc) if number else None


def _node(
    name: str, state: Any, flags: Any, reason: Any, reason_user: Any, reason_time: Any, address: Any = None,
    partitions: Any = None,
) -> NodeInfo:
    base, state_flags = node_state_from_tokens([*_tokens(state), *_tokens(flags)])
    text = _optional_text(reason, none_words=("",))
    return NodeInfo(
        name=name,
        state=base,
        flags=state_flags,
        reason=text,
        reason_set_by=_optional_text(reason_user) if text else None,
        reason_time=_timestamp(reason_time) if text else None,
        address=_optional_text(address),
        partitions=tuple(str(p) for p in partitions) if isinstance(partitions, (list, tuple)) else (),
    )


def parse_nodes_json(text: str) -> list[NodeInfo]:
    """Nodes from `sinfo --json` (any version) or `scontrol --json show nodes` (23.02+), one per name.

    Raises:
        SlurmParseError: not JSON, or neither a `nodes` nor a `sinfo` list.
    """
    doc = _load(text, "sinfo/scontrol --json output")
    found: dict[str, NodeInfo] = {}
    if isinstance(doc.get("nodes"), list):
        for raw in doc["nodes"]:
            if not isinstance(raw, Mapping) or not raw.get("name"):
                raise SlurmParseError("a node record (no name)", json.dumps(raw)[:200])
            found.setdefault(
                raw["name"],
                _node(
                    raw["name"],
                    raw.get("state"),
                    raw.get("state_flags"),
                    raw.get("reason"),
                    raw.get("reason_set_by_user"),
                    raw.get("reason_changed_at"),
                    raw.get("address"),
                    raw.get("partitions"),
                ),
            )
    elif isinstance(doc.get("sinfo"), list):
        # 23.02+: one entry per (partition, state, ...) group; a node in two partitions appears twice.
        for group in doc["sinfo"]:
            names = (group.get("nodes") or {}).get("nodes")
            state = (group.get("node") or {}).get("state")
            reason = group.get("reason") or {}
            partition = (group.get("partition") or {}).get("name")
            for name in _names(names, "sinfo nodes/nodes"):
                node = found.setdefault(
                    name,
                    _node(
                        name, state, None, reason.get("description"), reason.get("user"), reason.get("time")
                    ),
                )
                if partition and partition not in node.partitions:  # one group per partition it is in
                    found[name] = dataclasses.replace(node, partitions=(*node.partitions, str(partition)))
    else:
        raise SlurmParseError("sinfo/scontrol --json output (no 'nodes' or 'sinfo' list)", text)
    return list(found.values())


_STDOUT_PATTERN = re.compile(r"%(\d*)([%AaJjNnstux])")


def expand_stdout_pattern(pattern: str, job: Mapping[str, str | int | None]) -> str:
    """Expand sbatch filename patterns (`%j`, `%x`, `%u`, `%N`, `%A`, `%a`, `%%`, `%5j`) with job values.

    `job` holds job_id, name, user, node, array_job_id, array_task_id. Step and task patterns (%s %t %n)
    are left as they are: they differ per task.
    """
    table = {
        "j": job.get("job_id"),
        "J": job.get("job_id"),
        "x": job.get("name"),
        "u": job.get("user"),
        "N": job.get("node"),
        "A": job.get("array_job_id") or job.get("job_id"),
        "a": job.get("array_task_id"),
    }

    def replace(match: re.Match[str]) -> str:
        width, key = match.groups()
        if key == "%":
            return "%"
        value = table.get(key)
        if value is None or value == "":
            return match.group(0)
        text = str(value)
        return text.zfill(int(width)) if width and text.isdigit() else text

    return _STDOUT_PATTERN.sub(replace, pattern)


def _stdout(raw: Mapping[str, Any], job_id: int, name: str, batch_host: str | None) -> str | None:
    expanded = raw.get("stdout_expanded")
    if expanded:
        return str(expanded)
    pattern = _text(raw.get("standard_output"))
    if not pattern:
        if not raw.get("batch_flag"):
            return None
        pattern = "slurm-%j.out"  # sbatch's default
    task, _ = _number(raw.get("array_task_id"))
    values = {
        "job_id": job_id,
        "name": name,
        "user": raw.get("user_name"),
        "node": batch_host,
        "array_job_id": _number(raw.get("array_job_id"))[0],
        "array_task_id": task,
    }
    path = expand_stdout_pattern(pattern, values)
    workdir = _text(raw.get("current_working_directory"))
    return path if os.path.isabs(path) or not workdir else os.path.join(workdir, path)


def _job(raw: Mapping[str, Any], now: float) -> JobInfo:
    if not isinstance(raw, Mapping) or raw.get("job_id") is None:
        raise SlurmParseError("a job record (no job_id)", json.dumps(raw)[:200])
    job_id = int(raw["job_id"])
    name = _text(raw.get("name"))
    state, state_flags = job_state_from_tokens(_tokens(raw.get("job_state")))
    minutes, _ = _number(raw.get("time_limit"))
    time_limit = None if minutes is None else minutes * 60
    time_left: int | None
    if state in JOB_FINISHED_STATES:
        time_left = 0
        exit_code, signal = _exit_code(raw.get("exit_code"))
    else:
        exit_code, signal = None, None
        time_left = time_limit
        start, _ = _number(raw.get("start_time"))
        if time_limit is not None and state != "PENDING" and start:
            time_left = max(0, int(start + time_limit - now))
    batch_host = _optional_text(raw.get("batch_host"))
    node_list = _text(raw.get("nodes"))
    return JobInfo(
        job_id=job_id,
        name=name,
        state=state,
        state_flags=state_flags,
        nodes=_names(node_list, f"job {job_id} nodes"),
        node_list=node_list,
        excluded_nodes=_names(raw.get("excluded_nodes"), f"job {job_id} excluded_nodes"),
        partition=_optional_text(raw.get("partition")),
        time_limit=time_limit,
        time_left=time_left,
        exit_code=exit_code,
        signal=signal,
        restart_count=_number(raw.get("restart_cnt"))[0] or 0,
        batch_host=batch_host,
        stdout=_stdout(raw, job_id, name, batch_host),
        comment=_text(raw.get("comment")),
        state_reason=_optional_text(raw.get("state_reason")),
        work_dir=_optional_text(raw.get("current_working_directory")),
        submit_time=_number(raw.get("submit_time"))[0] or None,
    )


def parse_jobs_json(text: str, *, now: float | None = None) -> list[JobInfo]:
    """All jobs in `squeue --json` (or `scontrol --json show jobs`) output, in Slurm's order.

    22.05 ignores `-j`, so filter the result yourself. `now` (epoch seconds, default time.time()) is
    used for `time_left` of running jobs.

    Raises:
        SlurmParseError: not JSON, no `jobs` list, or a job record without job_id.
    """
    doc = _load(text, "squeue --json output")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError("squeue --json output (no 'jobs' list)", text)
    moment = time.time() if now is None else now
    return [_job(raw, moment) for raw in jobs]
