"""The key that authenticates manifests: a restore accepts only versions written by holders of this key.

One key per user (not per job: a requeued or follow-up job resumes from the same checkpoints), read from
`NVRX_CKPT_KEY_FILE` or else `~/.nvrx-hpc/ckpt.key`, created there (32 random bytes, 0600 in a 0700
directory) on first use. Every node of a job must see the same file: a shared home does that; otherwise
point NVRX_CKPT_KEY_FILE at a file on shared storage. A key file that others may read or write is refused.
"""

from __future__ import annotations

import functools
import os
import secrets
import stat
from pathlib import Path

from nvrx_hpc.core.errors import CheckpointError

__all__ = ["manifest_key", "key_path"]

_KEY_BYTES = 32


def key_path() -> Path:
    explicit = os.environ.get("NVRX_CKPT_KEY_FILE")
    return Path(explicit) if explicit else Path.home() / ".nvrx-hpc" / "ckpt.key"


def _create(path: Path) -> None:
    """Write a fresh key without ever replacing one another rank wrote first (link, not rename)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, secrets.token_bytes(_KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        _create(path)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise CheckpointError(f"cannot open the checkpoint key {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise CheckpointError(f"refusing the checkpoint key {path}: {stat.filemode(st.st_mode)} uid {st.st_uid}",
                                  hint="it must be a regular file of yours, mode 0600")
        key = os.read(fd, 4096)
    finally:
        os.close(fd)
    if len(key) < 16:
        raise CheckpointError(f"the checkpoint key {path} is too short ({len(key)} bytes)", hint="remove it")
    return key


def manifest_key() -> bytes:
    """This user's manifest key (created on first use).

    Raises:
        CheckpointError: the key file is unusable (the message says why).
    """
    try:
        return _load(key_path())
    except OSError as exc:
        raise CheckpointError(f"cannot create the checkpoint key {key_path()}: {exc.strerror or exc}",
                              hint="set NVRX_CKPT_KEY_FILE to a file of yours on shared storage") from None
