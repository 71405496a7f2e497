"""`<run dir>/status.json`: the launcher's live view, rewritten every second; `nvrx-hpc status` reads it."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["StatusWriter", "write_status", "read_status", "STATUS_FILE"]

STATUS_FILE = "status.json"


class StatusWriter:
    """Writes status.json. Each agent's ranks arrive already encoded (`AgentLink.ranks_json`, made once per
    status report it sends), so at 16k ranks a rewrite only joins the nodes' texts (a few milliseconds of
    the event loop, whatever the size); `write_async` leaves the file's writing to a thread."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / STATUS_FILE
        self._lock = threading.Lock()
        self._made = 0  # documents made
        self._saved = 0  # the newest one on disk: an older one finishing late never replaces it

    def write(self, agents: dict[str, Any], own: dict, *, final: bool) -> None:
        self._save(*self._document(agents, own, final))

    async def write_async(self, agents: dict[str, Any], own: dict) -> None:
        await asyncio.to_thread(self._save, *self._document(agents, own, False))

    def _document(self, agents: dict[str, Any], own: dict, final: bool) -> tuple[int, str]:
        now = time.time()
        seen = {node: {"pid": link.pid, "last_seen_age": round(now - link.last_seen, 3)}
                for node, link in agents.items()}  # fmt: skip
        ranks = ",".join(link.ranks_json for link in agents.values() if link.ranks_json)
        rest = "".join("," + _dumps(key) + ":" + _dumps(value) for key, value in {**own, "updated": now}.items())
        self._made += 1
        return self._made, f'{{"agents":{_dumps(seen)},"ranks":{{{ranks}}},"final":{_dumps(final)}{rest}}}'

    def _save(self, number: int, document: str) -> None:
        with self._lock:
            if number < self._saved:
                return
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(document, encoding="utf-8")
            os.replace(tmp, self.path)  # readers never see half a file
            self._saved = number


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)  # compact: json's C encoder


def write_status(run_dir: Path, status: dict) -> None:
    """One-off status.json from a whole dict (tests, tools); the launcher uses StatusWriter."""
    path = Path(run_dir) / STATUS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(_dumps({**status, "updated": time.time()}), encoding="utf-8")
    os.replace(tmp, path)


def read_status(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
