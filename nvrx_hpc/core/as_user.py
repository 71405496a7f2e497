"""A root hook's way to touch what a job's user owns: a detached child that is the job's user first.

The Epilog runs as root on storage the job's user writes (the run directory). Root never opens it: it
starts one of our modules in its own session as that user (initgroups, setgid, setuid in the child),
and returns at once, so slurmd neither waits for the child nor kills it with the Epilog.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Mapping

__all__ = ["job_user", "spawn_detached"]


def job_user(env: Mapping[str, str]) -> tuple[int, int, str] | None:
    """(uid, gid, name) of the job's user from the hook's environment; None when it cannot be told."""
    try:
        entry = pwd.getpwuid(int(env["SLURM_JOB_UID"]))
    except (KeyError, ValueError):
        return None
    gid = int(env["SLURM_JOB_GID"]) if env.get("SLURM_JOB_GID", "").isdigit() else entry.pw_gid
    return entry.pw_uid, gid, entry.pw_name


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    merged = dict(os.environ)
    merged.update({k: v for k, v in env.items() if isinstance(v, str)})
    return merged


def spawn_detached(module: str, env: Mapping[str, str], user: tuple[int, int, str] | None) -> int:
    """Start `python -m <module>` in its own session, as `user` when given (only root can switch); its pid."""
    creds: dict = {}
    if user is not None and os.geteuid() == 0 and user[0] != 0:
        uid, gid, name = user
        creds = {"user": uid, "group": gid, "extra_groups": os.getgrouplist(name, gid)}
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, argv list
        [sys.executable, "-m", module], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env=child_env(env), start_new_session=True, close_fds=True, cwd="/", **creds,
    )  # fmt: skip
    return proc.pid
