"""Directories with an owner: create a private directory, or accept an existing one only if it is safe.

Shared places such as /tmp, /dev/shm or a node's burst-buffer root are writable by every user, so a
directory there may have been created first by someone else, or be a symlink to somewhere else. These
helpers never follow a symlink in the last component, and refuse (with the caller's NvrxError subclass) a
directory that another user owns or may write, or that sits in a directory another user owns
(docs/security.md).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nvrx_hpc.core.errors import NvrxError

__all__ = ["private_dir", "job_dir", "check_ancestors", "read_regular_file"]


def _describe(st: os.stat_result) -> str:
    return f"{stat.filemode(st.st_mode)} uid {st.st_uid}"


def check_ancestors(path: Path, error: type[NvrxError] = NvrxError) -> None:
    """Every existing ancestor of `path` is owned by root or by us, or is sticky (like /tmp): none that another
    user could rename our directory out of, or swap for a symlink."""
    me = os.geteuid()
    for parent in Path(path).absolute().parents:
        try:
            st = os.lstat(parent)
        except FileNotFoundError:
            continue
        if st.st_uid in (0, me):
            continue
        raise error(f"refusing {path}: its parent {parent} belongs to another user ({_describe(st)})",
                    hint=f"ask an admin to create {parent} owned by root (mode 1777 or 0755), or use another path")


def private_dir(path: Path, error: type[NvrxError] = NvrxError, mode: int = 0o700) -> Path:
    """Create `path` (and missing parents) for the current user, mode 0700; accept an existing one only as a
    real directory of ours that neither group nor others may write. Returns `path`."""
    path = Path(path)
    check_ancestors(path, error)
    for parent in reversed(path.parents):
        try:
            parent.mkdir(mode=0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise error(f"cannot create {parent}: {exc.strerror or exc}") from None
    try:
        path.mkdir(mode=mode)
        os.chmod(path, mode)
    except FileExistsError:
        pass
    except OSError as exc:
        raise error(f"cannot create {path}: {exc.strerror or exc}") from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise error(f"refusing {path}: it exists as {_describe(st)}, not a directory of uid {os.geteuid()} that "
                    "only it may write", hint="someone else created it first: remove it, or use another path")
    return path


def job_dir(path: Path, uid: int, gid: int, error: type[NvrxError] = NvrxError) -> Path:
    """The Prolog's (root's) per-job directory: created fresh, mode 0700, then given to the job's user.

    Its parent must be root's and not writable by others, or sticky (where nobody can rename our entry); an
    existing `path` is accepted only as a real directory of root or of the job's user with mode 0700 (another
    node's Prolog of the same job on the same host)."""
    path = Path(path)
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    pst = os.lstat(parent)
    sticky = bool(pst.st_mode & stat.S_ISVTX)
    if not stat.S_ISDIR(pst.st_mode) or (pst.st_uid != os.geteuid() and not sticky) or (
            pst.st_mode & 0o002 and not sticky):  # fmt: skip
        raise error(f"refusing to create the job directory {path}: others may write its parent ({_describe(pst)})",
                    hint="use a root-owned parent (0755) or a sticky one (1777)")
    check_ancestors(parent, error)
    try:
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700, follow_symlinks=False)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (os.geteuid(), uid) or stat.S_IMODE(st.st_mode) != 0o700:
        raise error(f"refusing the job directory {path}: it exists as {_describe(st)}",
                    hint="someone else created it before the Prolog; remove it (as root)")
    if os.geteuid() == 0 and st.st_uid != uid:
        os.chown(path, uid, gid, follow_symlinks=False)
    return path


def read_regular_file(path: Path, limit: int, *, own: bool = False) -> bytes:
    """Up to `limit` + 1 bytes of a regular file (of this user's, with `own`), never through a symlink, never
    blocking on a FIFO. Raises OSError for anything else: the caller treats it as no file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (own and st.st_uid != os.geteuid()):
            raise OSError(f"{path} is not a regular file{' of ours' if own else ''}")
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)
