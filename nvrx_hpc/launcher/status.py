"""`<run dir>/status.json`: the launcher's live view, rewritten every second; `nvrx-hpc status` reads it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["StatusWriter", "write_status", "read_status", "STATUS_FILE"]

STATUS_FILE = "status.json"


class StatusWriter:
    """Writes status.json. Each agent's ranks are encoded once per status report it sends (its link's
    `ranks` is replaced by every report, never changed in place), so at 16k ranks a rewrite costs the
    event loop only what changed since the last one."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / STATUS_FILE
        self._encoded: dict[str, tuple[Any, str]] = {}  # node -> (the ranks object encoded, its JSON)

    def write(self, agents: dict[str, Any], own: dict, *, final: bool) -> None:
        now = time.time()
        seen, parts = {}, []
        for node, link in agents.items():
            seen[node] = {"pid": link.pid, "last_seen_age": round(now - link.last_seen, 3)}
            done = self._encoded.get(node)
            if done is None or done[0] is not link.ranks:
                text = ",".join(_dumps(str(rank)) + ":" + _dumps({**info, "node": node})
                                for rank, info in link.ranks.items())  # fmt: skip
                done = self._encoded[node] = (link.ranks, text)
            if done[1]:
                parts.append(done[1])
        for node in set(self._encoded) - set(agents):
            del self._encoded[node]
        rest = "".join("," + _dumps(key) + ":" + _dumps(value) for key, value in {**own, "updated": now}.items())
        document = f'{{"agents":{_dumps(seen)},"ranks":{{{",".join(parts)}}},"final":{_dumps(final)}{rest}}}'
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(document, encoding="utf-8")
        os.replace(tmp, self.path)  # readers never see half a file


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
