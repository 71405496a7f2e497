"""The attribution service's storage: reports and, per culprit node, when it was blamed and for what.
SQLite by default (one file, one writer at a time); every call takes a lock, so one `ReportStore` can
serve the service's worker threads."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nvrx_hpc.core.errors import AttributionError

__all__ = ["ReportStore", "NODE_FAULT_CATEGORIES"]

# A node blamed for one of these counts towards draining it; the workload's own faults do not.
NODE_FAULT_CATEGORIES = ("gpu_hardware", "network", "host", "distributed_hang", "framework_crash")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT, received REAL NOT NULL, category TEXT NOT NULL, restartable INTEGER NOT NULL,
    confidence REAL NOT NULL, submitter TEXT, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reports_job ON reports(job_id);
CREATE TABLE IF NOT EXISTS culprits (
    report_id INTEGER NOT NULL REFERENCES reports(id), node TEXT NOT NULL, category TEXT NOT NULL,
    received REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS culprits_node ON culprits(node, received);
"""


class ReportStore:
    """Reports and node history in SQLite at `path` (":memory:" for tests)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise AttributionError(
                    f"cannot create the directory of the service database {self.path}: {exc.strerror or exc}",
                    hint="pass --db PATH in a writable directory",
                ) from None
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=10)
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise AttributionError(f"cannot open the service database {self.path}: {exc}") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, report: Mapping[str, Any], submitter: str | None = None, now: float | None = None) -> int:
        received = time.time() if now is None else now
        nodes = sorted(set(report.get("culprit", {}).get("nodes", [])))
        with self._lock, self._db:
            cur = self._db.execute(
                "INSERT INTO reports (job_id, received, category, restartable, confidence, submitter, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    None if report.get("job_id") is None else str(report["job_id"]),
                    received,
                    str(report["category"]),
                    int(bool(report.get("restartable"))),
                    float(report.get("confidence", 0.0)),
                    submitter,
                    json.dumps(report, default=str),
                ),
            )
            rid = int(cur.lastrowid or 0)
            self._db.executemany(
                "INSERT INTO culprits (report_id, node, category, received) VALUES (?, ?, ?, ?)",
                [(rid, n, str(report["category"]), received) for n in nodes],
            )
        return rid

    def get(self, rid: int) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT id, received, submitter, body FROM reports WHERE id = ?", (rid,)).fetchone()
        if row is None:
            return None
        body = json.loads(row[3])
        return {"id": row[0], "received": row[1], "submitter": row[2], "report": body}

    def list(self, job_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        query = "SELECT id, job_id, received, category, restartable, confidence FROM reports"
        args: tuple = ()
        if job_id is not None:
            query += " WHERE job_id = ?"
            args = (job_id,)
        query += " ORDER BY id DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(query, (*args, limit)).fetchall()
        keys = ("id", "job_id", "received", "category", "restartable", "confidence")
        return [dict(zip(keys, r, strict=True)) | {"restartable": bool(r[4])} for r in rows]

    def node_history(
        self, *, node: str | None = None, window_s: float, drain_after: int, now: float | None = None
    ) -> list[dict[str, Any]]:
        """Per node: how often it was the culprit (all time and in the window), of what, and whether to drain.

        A node is to be drained when it was blamed for a node fault (NODE_FAULT_CATEGORIES) at least
        `drain_after` times in the last `window_s` seconds.
        """
        since = (time.time() if now is None else now) - window_s
        query = "SELECT node, category, received, report_id FROM culprits"
        args: tuple = ()
        if node is not None:
            query += " WHERE node = ?"
            args = (node,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY received", args).fetchall()
        by_node: dict[str, dict[str, Any]] = {}
        for name, category, received, rid in rows:
            h = by_node.setdefault(
                name, {"node": name, "culprit_count": 0, "recent_node_faults": 0, "categories": {}, "last": None,
                       "reports": []}  # fmt: skip
            )
            h["culprit_count"] += 1
            h["categories"][category] = h["categories"].get(category, 0) + 1
            h["last"] = received
            h["reports"].append(rid)
            if received >= since and category in NODE_FAULT_CATEGORIES:
                h["recent_node_faults"] += 1
        for h in by_node.values():
            h["drain"] = h["recent_node_faults"] >= drain_after
            h["reason"] = (
                f"nvrx: culprit of {h['recent_node_faults']} node faults in {window_s / 86400:g} days"
                if h["drain"] else ""
            )  # fmt: skip
            h["reports"] = h["reports"][-20:]
        return sorted(by_node.values(), key=lambda h: (-h["recent_node_faults"], h["node"]))
