"""Every decision is an event: one JSON object per line in `<run dir>/events.jsonl`.

Attribution and the tests read this file; the launcher and the agents write it through `EventLog.emit`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["EventLog", "read_events"]

log = logging.getLogger(__name__)


class EventLog:
    """Appends events to a JSON-lines file. Thread-safe; a write failure is logged, never raised."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = Path(path)
        self.source = source
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def emit(
        self, kind: str, *, reason: str | None = None, node: str | None = None, rank: int | None = None, **detail: Any
    ) -> dict:
        event = {"time": time.time(), "kind": kind, "source": self.source, "node": node, "rank": rank}
        if reason is not None:
            event["reason"] = reason
        if detail:
            event["detail"] = detail
        line = json.dumps(event, sort_keys=True, default=str) + "\n"
        with self._lock:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode())  # one write per line: lines of concurrent writers never interleave
                finally:
                    os.close(fd)
            except OSError as exc:
                log.error("cannot write event %s to %s: %s", kind, self.path, exc)
        log.info("event %s node=%s rank=%s %s", kind, node, rank, reason or "")
        return event


def read_events(path: Path) -> list[dict]:
    """All events of a run, skipping lines that are not JSON objects (a torn last line after a crash)."""
    events = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events
