"""The Epilog trigger: after a failed job, start one detached analysis of its run directory.

`trigger_from_epilog(os.environ)` is what `nvrx-hpc epilog` calls on every node of the job. It
returns within a second or so and never raises: it decides from the Epilog's environment whether
the job failed, finds the run directory, lets exactly one node win a per-job lock file there, and
starts `python -m nvrx_hpc attribute RUN_DIR --epilog` in its own session, so that slurmd neither
waits for it nor kills it with the Epilog. The analysis keeps to `epilog_budget_s` itself.

Where the run directory comes from, first hit wins: `NVRX_RUN_DIR`, `SPANK_NVRX_RUN_DIR` (what the
SPANK plugin can pass through the job-control environment), `SLURM_JOB_WORK_DIR` (newer Slurm), and
last the job's WorkDir from `scontrol -o show job` (Slurm 22.05 gives the Epilog no directory),
each with the launcher's run-dir template (`{submit_dir}/nvrx-runs/{job_id}` by default).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["trigger_from_epilog", "job_failed", "find_run_dir", "take_lock", "LOG_NAME"]

log = logging.getLogger(__name__)
LOG_NAME = ".attribution.log"


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


def _scontrol_work_dir(job_id: str, timeout: float) -> str | None:
    from nvrx_hpc.slurm.parse_text import parse_key_values
    from nvrx_hpc.slurm.runner import CommandRunner

    out = CommandRunner(default_timeout=timeout).run(["scontrol", "-o", "show", "job", job_id]).stdout
    first = out.strip().splitlines()[0] if out.strip() else ""
    return parse_key_values(first).get("WorkDir") or None


def find_run_dir(env: Mapping[str, str], job_id: str, *, slurm_timeout: float = 5.0) -> Path | None:
    """The job's run directory (see the module docstring), or None when none is found or it does not exist."""
    for var in ("NVRX_RUN_DIR", "SPANK_NVRX_RUN_DIR"):
        if env.get(var):
            path = Path(env[var])
            return path if path.is_dir() else None
    work_dir = env.get("SLURM_JOB_WORK_DIR") or _scontrol_work_dir(job_id, slurm_timeout)
    if not work_dir:
        return None
    path = _template_path(work_dir, job_id)
    return path if path.is_dir() else None


def take_lock(run_dir: Path, restart: str, node: str) -> bool:
    """Create `.attribution-<restart>.lock` exclusively; True for the one caller that created it."""
    lock = run_dir / f".attribution-{restart}.lock"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"node": node, "pid": os.getpid(), "time": time.time()}) + "\n")
    return True


def _spawn(run_dir: Path, job_id: str, budget: float, env: Mapping[str, str]) -> int:
    argv = [sys.executable, "-m", "nvrx_hpc", "attribute", str(run_dir), "--epilog", "--job-id", job_id,
            "--budget-s", f"{budget:g}"]  # fmt: skip
    child_env = dict(os.environ)
    child_env.update({k: v for k, v in env.items() if isinstance(v, str)})
    with open(run_dir / LOG_NAME, "ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=child_env,
            start_new_session=True, close_fds=True, cwd="/",
        )  # fmt: skip
    return proc.pid


def trigger_from_epilog(env: Mapping[str, str]) -> None:
    """Start the attribution of a failed job, once per job and detached. Never raises."""
    job_id = env.get("SLURM_JOB_ID", "?")
    try:
        from nvrx_hpc.attribution.settings import load_settings

        settings = load_settings(env)
        if not settings.epilog_enabled or job_id == "?":
            return
        failed = job_failed(env)
        if failed is False:
            log.debug("[job %s] ended well; no attribution", job_id)
            return
        run_dir = find_run_dir(env, job_id, slurm_timeout=settings.epilog_slurm_timeout_s)
        if run_dir is None:
            log.info("[job %s] no nvrx run directory; no attribution", job_id)
            return
        node = env.get("SLURMD_NODENAME") or socket.gethostname()
        restart = env.get("SLURM_JOB_RESTART_COUNT") or env.get("SLURM_RESTART_COUNT") or "0"
        if not take_lock(run_dir, restart, node):
            log.debug("[job %s] another node runs the attribution", job_id)
            return
        pid = _spawn(run_dir, job_id, settings.epilog_budget_s, env)
        log.info("[job %s] attribution started on %s (pid %d) for %s", job_id, node, pid, run_dir)
    except Exception:  # fail open: the Epilog must succeed whatever happens here
        log.exception("[job %s] could not start the attribution", job_id)
