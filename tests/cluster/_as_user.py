"""Run Slurm commands as the dev cluster's ordinary job account (`nvrxjob`), as a real user would.

The process runs with the account's uid, gid and groups (subprocess `user=`/`group=`/`extra_groups=`, i.e.
setgroups, setgid, setuid in the child) and a small login-like environment plus the cluster's variables:
nothing of root's environment but PATH and PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from nvrx_hpc.slurm.devcluster.account import JobAccount, as_user_kwargs, find_job_account


def job_account() -> JobAccount:
    account = find_job_account()
    if account is None:
        pytest.skip("no job account nvrxjob: start the cluster as root (`nvrx-hpc cluster up` creates it)")
    if os.geteuid() != 0:
        pytest.skip("running as another user needs root")
    return account


def user_env(cluster, account: JobAccount, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(account.home),
        "USER": account.name,
        "LOGNAME": account.name,
        "LANG": "C.UTF-8",
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),
        **cluster.env,
    }
    env.update(extra or {})
    return env


def run_as(cluster, account: JobAccount, argv: list[str], timeout: float, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `argv` as the job account, with a mandatory timeout."""
    return subprocess.run(argv, env=user_env(cluster, account, env), timeout=timeout, capture_output=True,
                          text=True, cwd=str(cwd or account.home), **as_user_kwargs(account))  # fmt: skip


def user_dir(account: JobAccount, name: str) -> Path:
    """A fresh directory owned by the job account under its home (0755 so that root's tests can read it)."""
    path = account.home / "tests" / f"{name}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    for p in (account.home / "tests", path):
        os.chown(p, account.uid, account.gid)
        os.chmod(p, 0o755)
    return path


def remove_user_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
