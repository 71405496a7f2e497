"""`nvrx-hpc prolog` / `nvrx-hpc epilog`: what slurmd runs on each node before and after a job.

For now they record the job's context (one JSON line per run); health gating and the attribution
trigger plug in here. They fail open: whatever goes wrong inside nvrx-hpc, they exit 0, because a
non-zero Prolog drains the node.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import typer

log = logging.getLogger(__name__)

DEFAULT_HOOK_LOG = Path("/var/log/nvrx-hpc/hooks.jsonl")

# What slurmd puts in a Prolog/Epilog environment that we keep in the record.
_SLURM_FIELDS = {
    "job": "SLURM_JOB_ID",
    "node": "SLURMD_NODENAME",
    "context": "SLURM_SCRIPT_CONTEXT",
    "user": "SLURM_JOB_USER",
    "uid": "SLURM_JOB_UID",
    "partition": "SLURM_JOB_PARTITION",
    "exit_code": "SLURM_JOB_EXIT_CODE",
    "exit_code2": "SLURM_JOB_EXIT_CODE2",
    "restart_count": "SLURM_RESTART_COUNT",
}


def hook_record(kind: str, env: dict[str, str]) -> dict:
    """One JSON-able record of a Prolog/Epilog run. SPANK_* holds what our plugin passed from srun/sbatch."""
    record: dict = {"time": time.time(), "hook": kind}
    record.update({key: env[var] for key, var in _SLURM_FIELDS.items() if var in env})
    record["spank"] = {k: v for k, v in sorted(env.items()) if k.startswith("SPANK_")}
    return record


def _append(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")


def _run_hook(kind: str) -> None:
    env = dict(os.environ)
    target = Path(env.get("NVRX_HOOK_LOG", str(DEFAULT_HOOK_LOG)))
    try:
        _append(target, hook_record(kind, env))
    except Exception:  # fail open: a hook bug must never drain a node
        log.exception("[job %s] %s could not record its run in %s", env.get("SLURM_JOB_ID", "?"), kind, target)


def register(app: typer.Typer) -> None:
    @app.command()
    def prolog() -> None:
        """Run by slurmd before a job's first step on a node (slurm.conf: Prolog=)."""
        _run_hook("prolog")

    @app.command()
    def epilog() -> None:
        """Run by slurmd when a job ends on a node (slurm.conf: Epilog=)."""
        _run_hook("epilog")
