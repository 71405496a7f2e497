"""A run directory belongs to one job: its identity file, the launcher's state across requeues, and the
moving aside of another job's directory when a job id comes back (a cluster whose state was reset).

`<run dir>/job.json` records the job id, the user, the cluster, the submit time Slurm gave the job and
its restart count. A start continues the directory when it is the same job: same id, user and cluster,
and either a higher restart count (a requeue; Slurm gives a requeued job a new submit time) or the
same restart count and submit time (the launcher started again in the same allocation). Anything else
is another job: the old job's files move into `<run dir>/previous-<n>/` and the new job starts fresh,
so it never inherits another job's excluded nodes, restart count, events or checkpoints. The new job's
own batch script (`job.sbatch`, written by `nvrx-hpc submit`) and Slurm's output files stay: Slurm
opened them for this job before the launcher started.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["JobIdentity", "same_job", "claim_run_dir", "read_state", "write_state", "IDENTITY_FILE", "STATE_FILE"]

IDENTITY_FILE = "job.json"
_KEEP = ("job.sbatch", "slurm-*.out", "previous-*")
STATE_FILE = "launcher-state.json"


@dataclass(frozen=True)
class JobIdentity:
    job_id: int | None
    uid: int
    cluster: str | None
    submit_time: str | None  # as Slurm prints it; None when Slurm could not be asked
    restart_count: int


def same_job(recorded: JobIdentity, current: JobIdentity) -> bool:
    if (recorded.job_id, recorded.uid, recorded.cluster) != (current.job_id, current.uid, current.cluster):
        return False
    if current.restart_count > recorded.restart_count:
        return True  # requeued: a new submit time, the same job
    if current.restart_count < recorded.restart_count:
        return False  # a job does not count backwards: another job reused the id
    return recorded.submit_time is None or current.submit_time is None or recorded.submit_time == current.submit_time


def _read_identity(run_dir: Path) -> JobIdentity | None:
    try:
        data = json.loads((run_dir / IDENTITY_FILE).read_text())
        return JobIdentity(**{k: data.get(k) for k in JobIdentity.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None


def claim_run_dir(run_dir: Path, current: JobIdentity) -> Path | None:
    """Make `run_dir` this job's; returns where another job's directory was moved, else None."""
    moved = None
    recorded = _read_identity(run_dir)
    has_state = (run_dir / STATE_FILE).exists() or (run_dir / "events.jsonl").exists()
    if has_state and (recorded is None or not same_job(recorded, current)):
        n = 1
        while (run_dir / f"previous-{n}").exists():
            n += 1
        moved = run_dir / f"previous-{n}"
        moved.mkdir()
        for entry in sorted(run_dir.iterdir()):
            if entry != moved and not any(fnmatch.fnmatch(entry.name, keep) for keep in _KEEP):
                os.rename(entry, moved / entry.name)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{IDENTITY_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(current), indent=1) + "\n")
    os.replace(tmp, run_dir / IDENTITY_FILE)
    return moved


def read_state(run_dir: Path) -> dict:
    try:
        state = json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write_state(run_dir: Path, state: dict) -> None:
    tmp = run_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, run_dir / STATE_FILE)
