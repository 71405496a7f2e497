"""Where the Epilog finds a job's run directory when the user chose it (`nvrx-hpc run --run-dir`).

Slurm 22.05 gives the Epilog neither the job's environment nor its working directory's subpaths, so a
run directory away from the default template (`{submit_dir}/nvrx-runs/{job_id}`) was invisible to it.
The launcher writes its path into `/tmp/nvrx-<uid>-<job>/run-dir` on the batch host, a directory only
the user may write (mode 0700, checked); the Epilog's children, already the job's user, read it back
with O_NOFOLLOW. On a real cluster /tmp is per node: the batch host's Epilog finds it, the others do not,
which is what they need (one of them acts for the job).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nvrx_hpc.core.safedir import private_dir, read_regular_file

__all__ = ["job_tmp_dir", "write_run_pointer", "read_run_pointer"]

_POINTER = "run-dir"
_MAX = 4096


def job_tmp_dir(uid: int, job_id: int | str) -> Path:
    """The user's private per-job directory on this node (user-mode agent sockets, the run-dir pointer)."""
    return Path(f"/tmp/nvrx-{uid}-{job_id}")


def write_run_pointer(run_dir: Path, job_id: int | str) -> None:
    """Record the run directory for this node's Epilog (replaced atomically; raises NvrxError or OSError)."""
    home = private_dir(job_tmp_dir(os.getuid(), job_id))
    tmp = home / f".{_POINTER}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(str(Path(run_dir).resolve()) + "\n")
    os.replace(tmp, home / _POINTER)


def read_run_pointer(job_id: int | str) -> Path | None:
    """The run directory the job's launcher recorded on this node; None unless the pointer is a regular
    file of ours in a directory of ours that nobody else may write, naming an absolute existing directory."""
    home = job_tmp_dir(os.getuid(), job_id)
    try:
        st = os.lstat(home)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        text = read_regular_file(home / _POINTER, _MAX, own=True).decode(errors="replace").strip()
    except OSError:
        return None
    path = Path(text)
    return path if text and path.is_absolute() and "\n" not in text and path.is_dir() else None
