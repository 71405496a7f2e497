"""Finds and reads what a run directory holds besides logs: the launcher's events.jsonl, per-rank failure
records (`rank-<r>.error.json`), health snapshots (`health/<node>.json`), flight-recorder and stack dumps.

Readers are tolerant: an unknown event kind is kept as is, a malformed line or file becomes a
`FileProblem`, and the rest is still read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nvrx_hpc.attribution.api import FileProblem
from nvrx_hpc.core.errors import AttributionError

__all__ = [
    "RunFiles",
    "Event",
    "FailureRecord",
    "HealthProblem",
    "discover",
    "read_events",
    "read_records",
    "read_health",
    "to_epoch",
    "REPORT_NAMES",
]

REPORT_NAMES = ("report.json", "report.md", "report.html")
# a global rank in a file name; a node's, machine's, group's or local rank (torchrun's `--node-rank`,
# Accelerate's `--machine_rank`) is not one
_RANK_IN_NAME = re.compile(r"(?<!node[-_])(?<!node)(?<!machine[-_])(?<!group[-_])(?<!local[-_])rank[-_]?(\d+)")
_FR_NAME = re.compile(r"(?:_dump_|trace_rank_|fr[-_]rank[-_]?)\d+$|\.pkl$|\.pickle$")
_SKIP_SUFFIX = (".lock", ".tmp", ".sock", ".pid")
_SIGNAL_NAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


@dataclass
class RunFiles:
    """The files of one analysis, by kind. `root` is the run directory (None for loose files)."""

    root: Path | None = None
    events: list[Path] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    records: list[Path] = field(default_factory=list)
    fr_dumps: list[Path] = field(default_factory=list)
    stacks: list[Path] = field(default_factory=list)
    health: list[Path] = field(default_factory=list)

    def source(self, path: Path) -> str:
        if self.root is not None:
            try:
                return str(path.relative_to(self.root))
            except ValueError:
                pass
        return str(path)


@dataclass(frozen=True)
class Event:
    time: float | None
    kind: str
    node: str | None
    rank: int | None
    detail: str
    raw: dict[str, Any]
    line: int


@dataclass(frozen=True)
class FailureRecord:
    source: str
    time: float | None
    node: str | None
    rank: int | None
    pid: int | None
    exit_code: int | None
    signal: str | None
    section: str | None
    traceback: str


@dataclass(frozen=True)
class HealthProblem:
    source: str
    node: str
    check: str
    detail: str
    gpu: str | None
    time: float | None


def to_epoch(value: Any) -> float | None:
    """Epoch seconds from a number or an ISO-8601 string (naive means local time); None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _sniff_dump(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if head[:1] == b"\x80":
        return True
    return head.lstrip()[:1] == b"{" and (b'"pg_config"' in head or b'"pg_status"' in head)


def _classify(path: Path, files: RunFiles, under_fr: bool) -> None:
    name = path.name
    if name in REPORT_NAMES or name.endswith(_SKIP_SUFFIX) or name.startswith("."):
        return
    if name == "events.jsonl":
        files.events.append(path)
    elif name.endswith(".error.json"):
        files.records.append(path)
    elif path.parent.name == "health" and name.endswith(".json"):
        files.health.append(path)
    elif _FR_NAME.search(name) or _sniff_dump(path):
        files.fr_dumps.append(path)
    elif under_fr:
        files.stacks.append(path)
    else:
        files.logs.append(path)


def discover(paths: Sequence[Path]) -> RunFiles:
    """Sort the inputs by kind. One directory is a run directory; files are taken one by one.

    Raises:
        AttributionError: a path does not exist, or no path was given.
    """
    if not paths:
        raise AttributionError("nothing to analyse", hint="pass a run directory or log/dump files")
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise AttributionError(
            f"no such file or directory: {', '.join(missing)}",
            hint="pass a run directory (<submit dir>/nvrx-runs/<job id>) or log/dump files",
        )
    paths = [p.resolve() for p in paths]
    dirs = [p for p in paths if p.is_dir()]
    files = RunFiles(root=dirs[0] if len(dirs) == 1 else None)
    for p in paths:
        if p.is_dir():
            for child in sorted(p.rglob("*")):
                if child.is_file():
                    rel = child.relative_to(p).parts
                    _classify(child, files, under_fr=bool(rel) and rel[0] in ("fr", "stacks"))
        else:
            _classify(p, files, under_fr=p.parent.name in ("fr", "stacks"))
    return files


def rank_of(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def read_events(path: Path, source: str) -> tuple[list[Event], list[FileProblem]]:
    """Events of one events.jsonl; bad lines become problems (one per file, counting them)."""
    events, bad = [], []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return [], [FileProblem(source, f"cannot read: {exc.strerror or exc}")]
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            if not isinstance(raw, dict):
                raise ValueError("not an object")
        except ValueError:
            bad.append(n)
            continue
        detail = raw.get("detail", raw.get("reason", ""))
        events.append(
            Event(
                time=to_epoch(raw.get("time")),
                kind=str(raw.get("kind", "unknown")),
                node=str(raw["node"]) if raw.get("node") not in (None, "") else None,
                rank=_int(raw.get("rank")),
                detail=detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True),
                raw=raw,
                line=n,
            )
        )
    problems = []
    if bad:
        shown = ", ".join(str(n) for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        problems.append(FileProblem(source, f"{len(bad)} line(s) are not JSON objects (line {shown}); skipped"))
    return events, problems


def _signal_name(value: Any) -> str | None:
    if value in (None, ""):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return _SIGNAL_NAMES.get(abs(value), f"signal {abs(value)}")
    text = str(value)
    return text if text.startswith("SIG") else f"SIG{text.upper()}" if text.isalpha() else text


def read_records(paths: Iterable[Path], files: RunFiles) -> tuple[list[FailureRecord], list[FileProblem]]:
    records, problems = [], []
    for path in paths:
        source = files.source(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            problems.append(FileProblem(source, f"unreadable failure record: {exc}"))
            continue
        tb = raw.get("traceback") or raw.get("message") or ""
        records.append(
            FailureRecord(
                source=source,
                time=to_epoch(raw.get("time", raw.get("timestamp"))),
                node=str(raw["node"]) if raw.get("node") else None,
                rank=_int(raw.get("rank")) if raw.get("rank") is not None else rank_of(path),
                pid=_int(raw.get("pid")),
                exit_code=_int(raw.get("exit_code", raw.get("exitcode"))),
                signal=_signal_name(raw.get("signal", raw.get("signal_name"))),
                section=str(raw["section"]) if raw.get("section") else raw.get("last_section"),
                traceback=tb if isinstance(tb, str) else json.dumps(tb),
            )
        )
    return records, problems


_BAD_STATUS = {"fail", "failed", "error", "unhealthy", "critical", "bad", "down"}


def _failing_checks(data: Any) -> Iterable[dict[str, Any]]:
    checks = data.get("checks") if isinstance(data, dict) else None
    if isinstance(checks, dict):
        checks = [{"name": k, **(v if isinstance(v, dict) else {"status": v})} for k, v in checks.items()]
    for check in checks or []:
        if not isinstance(check, dict):
            continue
        status = str(check.get("status", "")).lower()
        if status in _BAD_STATUS or check.get("ok") is False or check.get("healthy") is False:
            yield check


def read_health(paths: Iterable[Path], files: RunFiles) -> tuple[list[HealthProblem], list[FileProblem]]:
    """Failing checks of each node's snapshot (a dict with `checks`, a list or a name-keyed dict)."""
    found, problems = [], []
    for path in paths:
        source = files.source(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(FileProblem(source, f"unreadable health snapshot: {exc}"))
            continue
        node = str(data.get("node") or path.stem) if isinstance(data, dict) else path.stem
        when = to_epoch(data.get("time")) if isinstance(data, dict) else None
        failing = list(_failing_checks(data))
        if not failing and isinstance(data, dict) and (data.get("healthy") is False or data.get("ok") is False):
            failing = [{"name": "node", "detail": data.get("reason", "node reported unhealthy")}]
        for check in failing:
            gpu = check.get("gpu")
            found.append(
                HealthProblem(
                    source=source,
                    node=node,
                    check=str(check.get("name", check.get("check", "?"))),
                    detail=str(check.get("detail", check.get("message", check.get("reason", "")))),
                    gpu=None if gpu is None else str(gpu),
                    time=to_epoch(check.get("time")) or when,
                )
            )
    return found, problems
