"""Site mode: the Epilog requeues a job whose launcher died before it decided (F7 without the template).

A launcher that ends by itself always leaves `status.json` with `"final": true` (done, stopped or
requeued: its decision). One SIGKILLed (the OOM killer, a user's `kill -9`, a crashed batch host's
step) leaves it `false`, and the job ends undecided: without this, its training is lost until someone
resubmits. The Epilog of a `--nvrx` job (the SPANK plugin passes `SPANK_NVRX_ENABLED=1`) starts
`python -m nvrx_hpc.launcher.orphan` detached, as the job's user (`core.as_user`); that child:

1. finds the run directory as the attribution does, and lets one node win a lock file there;
2. waits until Slurm has finished the job (its Epilogs done: no longer COMPLETING);
3. requeues it only when every sign agrees: the run directory is this job's (`job.json`: id, user,
   the restart count Slurm still reports, so nobody requeued it since), the launcher's status is not
   final and it recorded no stop, and Slurm ended the job as FAILED or COMPLETED (never one a user
   cancelled, one that ran out of time or one Slurm itself requeues after a node failure).

It reads every file with O_NOFOLLOW, as a regular file, at most 1 MiB, and fails open: whatever it cannot
read or understand means no requeue. The requeued launcher continues the same run directory (same job,
a higher restart count) and the training resumes from its last committed checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nvrx_hpc.attribution.trigger import find_run_dir, take_lock
from nvrx_hpc.core.config import NvrxConfig
from nvrx_hpc.core.errors import NvrxError
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.core.safedir import read_regular_file
from nvrx_hpc.launcher.rundir import IDENTITY_FILE, STATE_FILE
from nvrx_hpc.launcher.status import STATUS_FILE
from nvrx_hpc.slurm.api import JobInfo, SlurmBackend

__all__ = ["OrphanDecision", "decide", "read_small_json", "requeue_if_orphaned", "wanted", "MODULE"]

log = logging.getLogger(__name__)

MODULE = "nvrx_hpc.launcher.orphan"  # what the Epilog starts as the job's user
_MAX_BYTES = 1 << 20
_REQUEUE_STATES = frozenset({"FAILED", "COMPLETED"})  # ended by its own script, not by a user or Slurm
_SETTLE_TIMEOUT_S = 300.0  # the Epilogs of every node must end before Slurm lets the job be requeued


@dataclass(frozen=True)
class OrphanDecision:
    requeue: bool
    reason: str


def wanted(env: Mapping[str, str], config: NvrxConfig) -> bool:
    """Whether the Epilog starts the check: a `--nvrx` job, and `launcher.epilog_requeue` on."""
    return env.get("SPANK_NVRX_ENABLED") == "1" and config.launcher.epilog_requeue


def read_small_json(path: Path) -> dict | None:
    """A JSON object from a regular file, never through a symlink, never blocking on a FIFO; None otherwise."""
    try:
        data = read_regular_file(path, _MAX_BYTES)
    except OSError:
        return None
    if len(data) > _MAX_BYTES:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def decide(run_dir: Path, job: JobInfo, uid: int) -> OrphanDecision:
    """Whether the job's launcher died undecided and the job should be requeued (pure but for reading)."""
    identity = read_small_json(run_dir / IDENTITY_FILE)
    if identity is None:
        return OrphanDecision(False, f"no readable {IDENTITY_FILE}: not a run directory of nvrx-hpc run")
    if identity.get("job_id") != job.job_id or identity.get("uid") != uid:
        return OrphanDecision(False, f"{IDENTITY_FILE} belongs to job {identity.get('job_id')}, not {job.job_id}")
    if identity.get("restart_count") != job.restart_count:
        return OrphanDecision(False, f"Slurm's restart count is {job.restart_count}, the launcher ran under "
                                     f"{identity.get('restart_count')}: the job was requeued already")  # fmt: skip
    if job.state not in _REQUEUE_STATES:
        return OrphanDecision(False, f"the job ended {job.state}: not the launcher's to decide")
    status = read_small_json(run_dir / STATUS_FILE)
    if status is None:
        return OrphanDecision(False, f"no readable {STATUS_FILE}: the launcher never ran")
    if status.get("job") != job.job_id:
        return OrphanDecision(False, f"{STATUS_FILE} is of job {status.get('job')}")
    if status.get("final") is not False:
        return OrphanDecision(False, f"the launcher decided: {status.get('outcome') or 'it ended'}")
    state = read_small_json(run_dir / STATE_FILE) or {}
    if state.get("stopped"):
        return OrphanDecision(False, f"the launcher stopped the job: {state['stopped']}")
    return OrphanDecision(True, "the launcher died before it decided (its status is not final); "
                                f"the job ended {job.state}")  # fmt: skip


def _settled(backend: SlurmBackend, job_id: str, timeout: float, sleep: Callable[[float], None]) -> JobInfo | None:
    """The job once Slurm has finished it (no longer COMPLETING); None if that does not happen in time."""
    deadline = time.monotonic() + timeout
    while True:
        info = backend.job(job_id)
        if info.finished and "COMPLETING" not in info.state_flags and info.state != "COMPLETING":
            return info
        if time.monotonic() >= deadline:
            return None
        sleep(1.0)


def requeue_if_orphaned(
    env: Mapping[str, str], backend: SlurmBackend, run_dir: Path, *, settle_timeout: float = _SETTLE_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> OrphanDecision:
    """The detached child's work (already the job's user). Never raises NvrxError: it answers why not."""
    job_id = env.get("SLURM_JOB_ID", "")
    restart = env.get("SLURM_JOB_RESTART_COUNT") or env.get("SLURM_RESTART_COUNT") or "0"
    if not take_lock(run_dir, restart, socket.gethostname(), kind="orphan"):
        return OrphanDecision(False, "another node's Epilog looks after this job")
    try:
        job = _settled(backend, job_id, settle_timeout, sleep)
    except NvrxError as exc:
        return OrphanDecision(False, f"cannot ask Slurm about job {job_id}: {exc.message}")
    if job is None:
        return OrphanDecision(False, f"job {job_id} did not finish completing within {settle_timeout:g} s")
    decision = decide(run_dir, job, os.getuid())
    if not decision.requeue:
        return decision
    events = EventLog(run_dir / "events.jsonl", source="epilog")
    try:
        backend.requeue(job_id)
    except NvrxError as exc:
        events.emit("epilog.requeue_failed", reason=f"{decision.reason}; requeue failed: {exc.message}")
        return OrphanDecision(False, f"requeue failed: {exc.message}")
    events.emit("epilog.requeue", reason=decision.reason, job=job.job_id, restart_count=job.restart_count)
    return decision


def main() -> int:
    """`python -m nvrx_hpc.launcher.orphan`: the detached child the Epilog starts."""
    from nvrx_hpc.core.config import load_config
    from nvrx_hpc.slurm.backend import get_backend

    env = dict(os.environ)
    job_id = env.get("SLURM_JOB_ID", "?")
    try:
        config = load_config(env=env).config
        run_dir = find_run_dir(env, job_id, slurm_timeout=config.slurm.command_timeout_s)
        if run_dir is None:
            log.info("[job %s] no nvrx run directory; nothing to requeue", job_id)
            return 0
        backend = get_backend(config.slurm.backend, timeout=config.slurm.command_timeout_s)
        decision = requeue_if_orphaned(env, backend, run_dir)
        log.info("[job %s] requeue=%s: %s", job_id, decision.requeue, decision.reason)
    except Exception:  # detached: nobody reads a traceback
        log.exception("[job %s] the orphan check failed", job_id)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
