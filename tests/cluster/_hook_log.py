"""The dev cluster's hook log: one JSON line per Prolog/Epilog run (nvrx_hpc.cli.hooks)."""

from __future__ import annotations

import json


def hook_records(cluster, job_id: int | str) -> list[dict]:
    """Every Prolog/Epilog record of one job, in the order they ran."""
    path = cluster.state_dir / "log" / "hooks.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r.get("job") == str(job_id)]
