"""`<run dir>/status.json`: the launcher's live view, rewritten every second; `nvrx-hpc status` reads it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["write_status", "read_status", "launcher_status", "STATUS_FILE"]

STATUS_FILE = "status.json"


def write_status(run_dir: Path, status: dict) -> None:
    path = Path(run_dir) / STATUS_FILE
    tmp = path.with_suffix(".tmp")
    # Compact: json's C encoder only runs without indent, and at 16k ranks this is written every second.
    tmp.write_text(json.dumps({**status, "updated": time.time()}, separators=(",", ":"), default=str))
    os.replace(tmp, path)  # readers never see half a file


def read_status(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None


def launcher_status(agents: dict[str, Any], *, final: bool) -> dict:
    """The agents' and ranks' part of status.json, from the hub's links (node -> link with pid, ranks, last_seen)."""
    now = time.time()
    ranks, seen = {}, {}
    for node, link in agents.items():
        seen[node] = {"pid": link.pid, "last_seen_age": round(now - link.last_seen, 3)}
        for rank, info in link.ranks.items():
            ranks[rank] = {**info, "node": node}
    return {"agents": seen, "ranks": ranks, "final": final}
