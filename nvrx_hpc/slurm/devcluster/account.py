"""The dev cluster's ordinary job account: tests and the demo submit jobs as a user who is not root.

On a real cluster the Prolog and Epilog run as root while jobs run as their users, and that is the
boundary nvrx-hpc must keep (docs/security.md). The dev cluster reproduces it with one unprivileged
account, `nvrxjob`, which `nvrx-hpc cluster up` creates when it runs as root (idempotently).

Dev/CI machines only: the interpreter may live under a home directory that others cannot traverse
(`/root/.pyenv`, /root being 0700). `grant_traverse` then adds the execute bit for others on each such
ancestor, nothing else (no read bit, no listing). A real site installs nvrx-hpc where its users can run it.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nvrx_hpc
from nvrx_hpc.core.errors import ClusterError

__all__ = ["JOB_USER", "JobAccount", "ensure_job_account", "find_job_account", "grant_traverse", "as_user_kwargs"]

log = logging.getLogger(__name__)

JOB_USER = "nvrxjob"


@dataclass(frozen=True)
class JobAccount:
    name: str
    uid: int
    gid: int
    home: Path


def find_job_account(name: str = JOB_USER) -> JobAccount | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return JobAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def as_user_kwargs(account: JobAccount) -> dict:
    """subprocess keyword arguments that run a child as `account` (its own groups only), like a login would."""
    return {"user": account.uid, "group": account.gid, "extra_groups": os.getgrouplist(account.name, account.gid)}


def _needs_traverse(path: Path) -> list[Path]:
    """Ancestors of `path` (itself included) that others may not traverse."""
    blocked = []
    for p in [path, *path.parents]:
        try:
            mode = p.stat().st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            blocked.append(p)
    return blocked


def grant_traverse(paths: list[Path]) -> list[Path]:
    """Add o+x to every directory above `paths` that lacks it (dev/CI machines only); returns what changed."""
    changed = []
    for target in paths:
        for p in _needs_traverse(target.resolve()):
            p.chmod(stat.S_IMODE(p.stat().st_mode) | stat.S_IXOTH)
            log.warning("dev cluster: gave others traverse (o+x) on %s so that %s can run nvrx-hpc", p, JOB_USER)
            changed.append(p)
    return changed


def _code_paths() -> list[Path]:
    """What the job account must reach: the interpreter and the nvrx_hpc source tree."""
    return [Path(sys.executable).parent, Path(nvrx_hpc.__file__).resolve().parent]


def ensure_job_account(name: str = JOB_USER) -> JobAccount | None:
    """Create the job account if missing (root only) and let it run this interpreter; None when not root
    and the account does not exist (cluster tests that need it then skip)."""
    account = find_job_account(name)
    if os.geteuid() != 0:
        return account
    if account is None:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        argv = [useradd, "--system", "--create-home", "--home-dir", f"/home/{name}", "--shell", "/bin/sh",
                "--user-group", "--comment", "nvrx-hpc dev cluster job account", name]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)  # noqa: S603
        account = find_job_account(name)
        if account is None:
            raise ClusterError(f"could not create the job account {name}: {done.stderr.strip() or done.returncode}",
                               hint="create it by hand: useradd --system --create-home --user-group nvrxjob")
    account.home.mkdir(mode=0o700, exist_ok=True)
    os.chown(account.home, account.uid, account.gid)
    grant_traverse(_code_paths())
    return account
