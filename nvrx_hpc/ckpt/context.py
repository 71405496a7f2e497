"""What the save and restore paths share: the transport, the layout, settings, paths, hooks, reusable buffers."""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from nvrx_hpc.ckpt.api import Transport
from nvrx_hpc.ckpt.layout import Layout
from nvrx_hpc.ckpt.manifest import Manifest
from nvrx_hpc.ckpt.settings import CheckpointSettings
from nvrx_hpc.ckpt.shardfile import Progress

if TYPE_CHECKING:
    from nvrx_hpc.ckpt.drain import Drainer
    from nvrx_hpc.core.events import EventLog

__all__ = ["Context", "TAG_HDR", "TAG_META", "TAG_DATA", "TAG_PARITY"]

log = logging.getLogger(__name__)

TAG_HDR = 10
TAG_META = 11
TAG_DATA = 12
TAG_PARITY = 13


@dataclass
class Context:
    """One checkpointer's fixed parts; only its background thread touches the transport."""

    transport: Transport
    layout: Layout
    settings: CheckpointSettings
    bb_root: Path
    shared_root: Path | None
    hasher: Executor | None = None
    progress: Progress | None = None
    events: EventLog | None = None
    drainer: Drainer | None = None
    job_id: str | None = None
    commits: int = 0
    pending_shared: dict[int, tuple[Manifest, set[int]]] = field(default_factory=dict)
    _spare: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint8))

    @property
    def rank(self) -> int:
        return self.transport.rank

    @property
    def domain(self) -> str:
        return self.layout.domains[self.rank]

    @property
    def chunk(self) -> int:
        return self.settings.chunk_mib << 20

    def gather(self, obj: Any) -> list[Any]:
        """Allgather a msgpack-able object (collective)."""
        blobs = self.transport.allgather_bytes(msgpack.packb(obj, use_bin_type=True))
        return [msgpack.unpackb(b, raw=False, strict_map_key=False) for b in blobs]

    def spare(self, nbytes: int) -> np.ndarray:
        """A reusable receive buffer (the partner's replica), grown when needed."""
        if self._spare.nbytes < nbytes:
            self._spare = np.empty(0, dtype=np.uint8)
            self._spare = np.empty(nbytes, dtype=np.uint8)
        return self._spare[:nbytes]

    def emit(self, kind: str, *, reason: str | None = None, **detail: Any) -> None:
        """An event in events.jsonl (rank 0 speaks for the job), when an EventLog was given."""
        if self.events is not None:
            self.events.emit(kind, reason=reason, node=self.domain, rank=self.rank, **detail)
