"""Crash-consistent file handling: tmp name, fsync, rename, directory fsync; free-space checks; clean-up."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from nvrx_hpc.core.errors import CheckpointError

__all__ = [
    "TMP_SUFFIX",
    "BAD_SUFFIX",
    "tmp_path",
    "fsync_file",
    "fsync_dir",
    "commit_file",
    "write_atomic",
    "ensure_space",
    "is_no_space",
    "space_error",
    "remove_quietly",
    "remove_tree",
    "mib",
]

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"
"""A file being written; never read, swept at start-up."""
BAD_SUFFIX = ".bad"
"""A file that failed verification, kept aside for inspection and never read again."""
_SLACK = 1 << 20  # HDF5 headers, manifests


def mib(nbytes: float) -> str:
    return f"{nbytes / (1 << 20):.1f} MiB"


def tmp_path(final: Path) -> Path:
    return final.with_name(final.name + TMP_SUFFIX)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in `path` durable (a no-op where the file system cannot fsync directories)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # e.g. EINVAL on some network file systems
        log.debug("fsync of directory %s: %s", path, exc)
    finally:
        os.close(fd)


def commit_file(tmp: Path, final: Path) -> None:
    """fsync `tmp`, rename it to `final`, fsync the directory: after this `final` is whole and durable."""
    os.chmod(tmp, 0o600)  # checkpoints are the user's alone
    fsync_file(tmp)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def write_atomic(final: Path, data: bytes) -> None:
    """Write a small file crash-consistently (manifests, markers)."""
    tmp = tmp_path(final)
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except OSError as exc:
        remove_quietly(tmp)
        if is_no_space(exc):
            raise space_error(final.parent, len(data)) from exc
        raise CheckpointError(f"cannot write {final}: {exc.strerror or exc}", hint="check the directory") from exc
    fsync_dir(final.parent)


def is_no_space(exc: BaseException) -> bool:
    """True for ENOSPC/EDQUOT, also when HDF5 only says so in its message."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "errno = 28" in text or "Disk quota exceeded" in text


def space_error(directory: Path, needed: int, what: str = "burst buffer") -> CheckpointError:
    """The error for a full burst buffer (or shared directory), with the numbers."""
    try:
        free = shutil.disk_usage(directory).free
        have = f"{mib(free)} free"
    except OSError:
        have = "free space unknown"
    return CheckpointError(
        f"{what} full: {directory} needs {mib(needed)} more, {have}",
        hint=f"lower `keep`, give the {what} more room, or checkpoint less state; the previous committed "
        "version is kept and training can go on",
    )


def ensure_space(directory: Path, needed: int) -> None:
    """Raise the burst-buffer-full CheckpointError now when `directory` has less than `needed` bytes free."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return
    if free < needed + _SLACK:
        raise space_error(directory, needed + _SLACK)


def remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc)


def remove_tree(path: Path) -> None:
    """Delete a version directory; what cannot be deleted is logged, never raised."""
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        log.warning("cannot remove all of %s", path)
    fsync_dir(path.parent)
