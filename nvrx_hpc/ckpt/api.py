"""The checkpoint layer's seam: redundancy schemes, the transport Protocol, and the records it hands out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "FORMAT",
    "Scheme",
    "Transport",
    "Message",
    "SaveStats",
    "RestoreStats",
    "version_name",
    "parse_version_name",
]

FORMAT = "nvrx-ckpt/1"
"""Written into every shard file and manifest; a reader refuses any other value."""

_VERSION_PREFIX = "v"


class Scheme(str, Enum):
    """How a version survives the loss of a node's burst buffer.

    none: local shard only (survives a crash, not a lost node). partner: a full copy of each shard on the
    same local rank of the next failure domain (2x storage; survives any loss that spares a node and its
    partner together). xor: RAID-5-like parity over sets of failure domains (1 + 1/(N-1) storage; survives
    one lost domain per set).
    """

    NONE = "none"
    PARTNER = "partner"
    XOR = "xor"


Message = tuple[int, np.ndarray, int]
"""(peer rank, 1-D uint8 buffer, tag): one message of `Transport.exchange`."""


@runtime_checkable
class Transport(Protocol):
    """Moves bytes between the ranks of one job. Every call is made from the checkpointer's one thread.

    Implementations: `LocalTransport` (one rank), `MpiTransport` (mpi4py buffer calls on a duplicated
    communicator), `TorchTransport` (a private gloo group of torch.distributed). No call pickles a payload.
    """

    @property
    def rank(self) -> int: ...

    @property
    def size(self) -> int: ...

    def allgather_bytes(self, blob: bytes) -> list[bytes]:
        """Every rank's `blob`, in rank order (collective)."""
        ...

    def exchange(self, sends: Sequence[Message], recvs: Sequence[Message]) -> None:
        """Post all sends and receives at once (chunked), and return when all are done.

        The two sides of a message name each other and use the same tag and length; messages with the
        same (peer, tag) are matched in the order they are listed.
        """
        ...

    def close(self) -> None:
        """Free what the transport holds (a duplicated communicator, a process group)."""
        ...


def version_name(step: int) -> str:
    """Directory name of the version of `step`: v000000000042 (sorts by step)."""
    return f"{_VERSION_PREFIX}{step:012d}"


def parse_version_name(name: str) -> int | None:
    """The step of a version directory name, or None when `name` is not one."""
    if not name.startswith(_VERSION_PREFIX) or not name[1:].isdigit():
        return None
    return int(name[1:])


@dataclass
class SaveStats:
    """Where the time of one save went (seconds, bytes), as seen by this rank."""

    step: int
    snapshot_s: float = 0.0
    """Blocking time of `save()`: flattening the state and copying it into host memory."""
    waited_s: float = 0.0
    """Part of the blocking time spent waiting for the previous save to finish."""
    nbytes: int = 0
    write_s: float = 0.0
    """Own shard: h5py write with checksums, fsync, rename, directory fsync."""
    replicate_s: float = 0.0
    """Moving bytes to the partner or through the XOR ring, once the peers are in step (transport only)."""
    replicate_bytes: int = 0
    redundancy_write_s: float = 0.0
    """Writing the received replica or the parity file."""
    commit_s: float = 0.0
    total_s: float = 0.0
    committed: bool = False


@dataclass
class RestoreStats:
    """What one `load()` did on this rank."""

    step: int | None = None
    seconds: float = 0.0
    sources: dict[str, int] = field(default_factory=dict)
    """How many objects came from each kind of source (local, peer, shared, xor) across the job."""
    rejected: dict[int, str] = field(default_factory=dict)
    """Versions given up, with the reason."""
    bad_files: list[str] = field(default_factory=list)
    reprotect: bool = False
