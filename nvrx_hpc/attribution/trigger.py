"""The Epilog trigger: after a failed job, start one detached analysis of its run directory.

`trigger_from_epilog(os.environ)` is what `nvrx-hpc epilog` calls on every node of the job. It
returns within a second or so and never raises: it decides from the Epilog's environment whether
the job failed, finds the run directory, lets exactly one node win a per-job lock file there, and
starts `python -m nvrx_hpc attribute RUN_DIR --epilog` in its own session, so that slurmd neither
waits for it nor kills it with the Epilog. The analysis keeps to `epilog_budget_s` itself, and is killed
`_HARD_MARGIN_S` after it.

Root never opens the run directory: it is on storage the job's user writes. The Epilog (root) only
decides from its environment whether the job failed, then starts `python -m nvrx_hpc.attribution.trigger`
as the job's user (initgroups, setgid, setuid in the child) and returns; that child finds the directory,
takes the lock and opens the log with O_NOFOLLOW, with nothing more than the user's own rights.

Where the run directory comes from, first hit wins: `NVRX_RUN_DIR`, `SPANK_NVRX_RUN_DIR` (what the
SPANK plugin can pass through the job-control environment); then the launcher's run-dir template
(`{submit_dir}/nvrx-runs/{job_id}` by default) under `SLURM_JOB_WORK_DIR` (newer Slurm) or the job's
WorkDir from Slurm (22.05 gives the Epilog no directory); last the path the launcher recorded on the
batch host (`core.run_pointer`: a `--run-dir` of the user's choice).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from nvrx_hpc.attribution.settings import AttributionSettings, load_settings
from nvrx_hpc.core.as_user import child_env, job_user, spawn_detached
from nvrx_hpc.core.run_pointer import read_run_pointer

__all__ = ["trigger_from_epilog", "run_here", "job_failed", "find_run_dir", "take_lock", "LOG_NAME"]

log = logging.getLogger(__name__)
LOG_NAME = ".attribution.log"
_HARD_MARGIN_S = 15.0  # past the budget, the analysis process is killed


def _codes(value: str | None) -> list[int]:
    if not value:
        return []
    out = []
    for part in value.replace(":", " ").split():
        try:
            out.append(int(part))
        except ValueError:
            continue
    return out


def job_failed(env: Mapping[str, str]) -> bool | None:
    """True if any of SLURM_JOB_EXIT_CODE, SLURM_JOB_EXIT_CODE2 (`exit:signal`) or SLURM_JOB_DERIVED_EC
    is non-zero; False if some are set and all are zero; None if none is set."""
    seen = False
    for var in ("SLURM_JOB_EXIT_CODE", "SLURM_JOB_EXIT_CODE2", "SLURM_JOB_DERIVED_EC"):
        codes = _codes(env.get(var))
        if codes:
            seen = True
            if any(codes):
                return True
    return False if seen else None


def _template_path(work_dir: str, job_id: str) -> Path:
    try:
        from nvrx_hpc.core.config import load_config

        return Path(load_config().config.launcher.run_path(work_dir, job_id))
    except Exception:  # a broken site config must not stop the report; use the documented default
        return Path(work_dir) / "nvrx-runs" / job_id


def _slurm_work_dir(job_id: str, timeout: float) -> str | None:
    """The job's working directory as Slurm reports it (the configured backend)."""
    from nvrx_hpc.core.config import load_config
    from nvrx_hpc.slurm.backend import get_backend

    try:
        backend_name = load_config().config.slurm.backend
    except Exception:  # a broken site config must not stop the report; ask with the CLI backend
        backend_name = "cli"
    return get_backend(backend_name, timeout=timeout).job(job_id).work_dir


def find_run_dir(env: Mapping[str, str], job_id: str, *, slurm_timeout: float = 5.0) -> Path | None:
    """The job's run directory (see the module docstring), or None when none is found or it does not exist."""
    for var in ("NVRX_RUN_DIR", "SPANK_NVRX_RUN_DIR"):
        if env.get(var):
            path = Path(env[var])
            return path if path.is_dir() else None
    work_dir = env.get("SLURM_JOB_WORK_DIR") or _slurm_work_dir(job_id, slurm_timeout)
    path = _template_path(work_dir, job_id) if work_dir else None
    if path is not None and path.is_dir():
        return path
    # Last: what the launcher recorded on this node (`nvrx-hpc run --run-dir`); after the template, because a
    # pointer left by an older job with the same id (a cluster whose ids restarted) must not win over it.
    return read_run_pointer(job_id)


def take_lock(run_dir: Path, restart: str, node: str, kind: str = "attribution") -> bool:
    """Create `.<kind>-<restart>.lock` exclusively (never through a symlink); True for the one caller that
    created it (one node's Epilog acts for the job: the analysis here, the orphan check in the launcher)."""
    lock = run_dir / f".{kind}-{restart}.lock"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"node": node, "pid": os.getpid(), "time": time.time()}) + "\n")
    return True


def _open_log(run_dir: Path) -> int:
    """The analysis log, appended to; a symlink, FIFO or other non-regular file there is refused (OSError)."""
    fd = os.open(run_dir / LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{run_dir / LOG_NAME} is not a regular file")
    return fd


def _analysis_argv(run_dir: Path, job_id: str, budget: float) -> list[str]:
    return [sys.executable, "-m", "nvrx_hpc", "attribute", str(run_dir), "--epilog", "--job-id", job_id,
            "--budget-s", f"{budget:g}"]  # fmt: skip


def run_here(env: Mapping[str, str], settings: AttributionSettings) -> int | None:
    """Find the run directory, take the lock, run the analysis under a hard wall-clock bound. Runs as the
    job's user (or as root only for root's own jobs). Returns the analysis' exit code, None if none ran."""
    job_id = env.get("SLURM_JOB_ID", "?")
    run_dir = find_run_dir(env, job_id, slurm_timeout=settings.epilog_slurm_timeout_s)
    if run_dir is None:
        log.info("[job %s] no nvrx run directory; no attribution", job_id)
        return None
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    restart = env.get("SLURM_JOB_RESTART_COUNT") or env.get("SLURM_RESTART_COUNT") or "0"
    if not take_lock(run_dir, restart, node):
        log.debug("[job %s] another node runs the attribution", job_id)
        return None
    try:
        fd = _open_log(run_dir)
    except OSError as exc:  # a planted symlink or FIFO: analyse anyway, without the log
        log.warning("[job %s] not writing the analysis log: %s", job_id, exc)
        fd = os.open(os.devnull, os.O_WRONLY)
    try:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, argv list
            _analysis_argv(run_dir, job_id, settings.epilog_budget_s), stdin=subprocess.DEVNULL, stdout=fd,
            stderr=fd, env=child_env(env), close_fds=True, cwd="/",
        )  # fmt: skip
    finally:
        os.close(fd)
    try:  # the analysis keeps to its budget itself; this bound holds even if it does not
        return proc.wait(settings.epilog_budget_s + _HARD_MARGIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def trigger_from_epilog(env: Mapping[str, str]) -> None:
    """Start the attribution of a failed job, once per job and detached. Never raises.

    As root (a real Epilog), only the decision is taken here; the run directory is looked at by a detached
    child that has dropped to the job's user first. A job whose user cannot be told is not analysed.
    """
    job_id = env.get("SLURM_JOB_ID", "?")
    try:
        settings = load_settings(env)
        if not settings.epilog_enabled or job_id == "?":
            return
        failed = job_failed(env)
        if failed is False:
            log.debug("[job %s] ended well; no attribution", job_id)
            return
        user = job_user(env)
        if user is None and os.geteuid() == 0:
            log.warning("[job %s] no SLURM_JOB_UID in the Epilog's environment; no attribution as root", job_id)
            return
        pid = spawn_detached("nvrx_hpc.attribution.trigger", env, user)
        log.info("[job %s] attribution started (pid %d)", job_id, pid)
    except Exception:  # fail open: the Epilog must succeed whatever happens here
        log.exception("[job %s] could not start the attribution", job_id)


def main() -> int:
    """`python -m nvrx_hpc.attribution.trigger`: the detached child (already the job's user)."""
    env = dict(os.environ)
    try:
        run_here(env, load_settings(env))
    except Exception:  # detached: nobody reads a traceback; the log line says enough
        log.exception("[job %s] attribution failed", env.get("SLURM_JOB_ID", "?"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
