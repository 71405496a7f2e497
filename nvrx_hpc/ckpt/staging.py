"""Host staging: one reusable byte arena per rank that a state's tensors are copied into (pinned for CUDA).

`save()` blocks only for `HostArena.stage`: the copy of every tensor into the arena. The arena is kept
across saves and only grown, so after the first save no memory is allocated or pinned on the hot path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from nvrx_hpc.ckpt.tree import dtype_from_name, dtype_name

__all__ = ["TensorEntry", "HostArena", "ALIGN", "layout_entries", "clear_gaps"]

log = logging.getLogger(__name__)

ALIGN = 64
"""Every tensor starts on a 64-byte boundary of the arena (cache line; any dtype's alignment)."""


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives in a shard: its bytes are arena[offset : offset + nbytes]."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def to_wire(self) -> dict:
        return {"path": self.path, "dtype": self.dtype, "shape": list(self.shape), "offset": self.offset,
                "nbytes": self.nbytes}

    @classmethod
    def from_wire(cls, d: dict) -> TensorEntry:
        return cls(str(d["path"]), str(d["dtype"]), tuple(int(x) for x in d["shape"]), int(d["offset"]),
                   int(d["nbytes"]))


def layout_entries(tensors: Sequence[torch.Tensor], paths: Sequence[str]) -> tuple[list[TensorEntry], int]:
    """Offsets of `tensors` packed into one arena, and the arena size."""
    entries, offset = [], 0
    for t, path in zip(tensors, paths, strict=True):
        nbytes = t.numel() * t.element_size()
        entries.append(TensorEntry(path, dtype_name(t.dtype), tuple(t.shape), offset, nbytes))
        offset += -(-nbytes // ALIGN) * ALIGN
    return entries, offset


def clear_gaps(data: np.ndarray, entries: Sequence[TensorEntry]) -> None:
    """Zero the alignment padding between tensors: XOR parity covers every byte, so padding must be defined."""
    end = 0
    for e in sorted(entries, key=lambda e: e.offset):
        if e.offset > end:
            data[end : e.offset] = 0
        end = max(end, e.offset + e.nbytes)
    if end < len(data):
        data[end:] = 0


class HostArena:
    """A growable uint8 host buffer holding one rank's snapshot; `data` is its numpy view."""

    def __init__(self) -> None:
        self._buf: torch.Tensor | None = None
        self._pinned = False
        self.entries: list[TensorEntry] = []
        self.nbytes = 0

    @property
    def capacity(self) -> int:
        return 0 if self._buf is None else self._buf.numel()

    def reserve(self, nbytes: int, pin: bool = False) -> None:
        """Make room for `nbytes` (pinned when `pin` and CUDA is there); existing contents are dropped."""
        pin = pin and torch.cuda.is_available()
        if self._buf is not None and self.capacity >= nbytes and (self._pinned or not pin):
            return
        self._buf = None  # free the old one first: the new one may be as large
        size = max(nbytes, ALIGN)
        if pin:
            self._buf = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        else:  # numpy asks for transparent huge pages on large arrays: MPI's copies out of it run faster
            self._buf = torch.from_numpy(np.empty(size, dtype=np.uint8))
        self._pinned = pin
        log.debug("host arena: %d bytes%s", size, " (pinned)" if pin else "")

    @property
    def data(self) -> np.ndarray:
        """The used part of the arena as a 1-D uint8 numpy array (shares memory)."""
        if self._buf is None:
            return np.empty(0, dtype=np.uint8)
        return self._buf.numpy()[: self.nbytes]

    def view(self, entry: TensorEntry) -> torch.Tensor:
        """The arena bytes of one entry as a tensor of its dtype and shape (shares memory)."""
        assert self._buf is not None
        raw = self._buf[entry.offset : entry.offset + entry.nbytes]
        dtype = dtype_from_name(entry.dtype)
        if entry.nbytes == 0:
            return torch.empty(entry.shape, dtype=dtype)
        return raw.view(dtype).view(entry.shape)

    def stage(self, tensors: Sequence[torch.Tensor], paths: Sequence[str]) -> None:
        """Copy `tensors` into the arena (growing it if needed) and wait until the copies are done."""
        entries, total = layout_entries(tensors, paths)
        cuda = any(t.is_cuda for t in tensors)
        self.reserve(total, pin=cuda)
        self.entries, self.nbytes = entries, total
        with torch.no_grad():
            for t, entry in zip(tensors, entries, strict=True):
                if entry.nbytes:
                    self.view(entry).copy_(t.detach(), non_blocking=t.is_cuda)
        clear_gaps(self.data, entries)
        if cuda:
            torch.cuda.synchronize()

    def adopt(self, entries: Sequence[TensorEntry], nbytes: int) -> np.ndarray:
        """Set the layout to `entries` (read back from a shard) and return the buffer to fill."""
        self.reserve(nbytes)
        self.entries, self.nbytes = list(entries), nbytes
        return self.data

    def tensors(self) -> list[torch.Tensor]:
        """Views of every entry, in order (valid until the next `stage` or `adopt`)."""
        return [self.view(e) for e in self.entries]
