"""Shard and parity files: one h5py file per rank per version, contiguous uint8 datasets, no filters.

A shard file holds `tensors/NNNNNN` (one dataset per tensor, its xxh3-64 checksum, dtype and shape as
attributes, the checksum computed while the bytes are written) and `meta`: a msgpack blob with the
state's skeleton and the tensor table (checksums included). The shard's digest is the xxh3-64 of that
blob, so a manifest that lists each shard's digest covers every byte. A replica is the same file written
on the partner. A parity file holds one XOR parity chunk and the meta blobs of its set's members.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import msgpack
import numpy as np
import xxhash

from nvrx_hpc.ckpt.api import FORMAT
from nvrx_hpc.ckpt.fsutil import commit_file, is_no_space, remove_quietly, space_error, tmp_path
from nvrx_hpc.ckpt.staging import TensorEntry, clear_gaps
from nvrx_hpc.core.errors import CheckpointError

__all__ = [
    "Progress",
    "ShardData",
    "ParityData",
    "digest",
    "pack_meta",
    "unpack_meta",
    "write_shard_file",
    "read_shard_file",
    "write_parity_file",
    "read_parity_file",
]

log = logging.getLogger(__name__)

# What h5py, numpy and a hostile meta table raise on a file that is not what it claims: all become CheckpointError.
_BAD_FILE = (OSError, KeyError, ValueError, RuntimeError, TypeError, AttributeError, IndexError, OverflowError,
             MemoryError, RecursionError)

Progress = Callable[[str, int, int], None]
"""progress(phase, done_bytes, total_bytes), called from the checkpointer's thread."""


def digest(data: Any) -> str:
    """xxh3-64 of a buffer, as 16 hex digits."""
    return xxhash.xxh3_64_hexdigest(data)


def pack_meta(*, rank: int, step: int, skeleton: Any, entries: Sequence[TensorEntry], checksums: Sequence[str],
              nbytes: int) -> bytes:
    tensors = [{**e.to_wire(), "xxh3": c} for e, c in zip(entries, checksums, strict=True)]
    meta = {"format": FORMAT, "rank": rank, "step": step, "skeleton": skeleton, "tensors": tensors, "nbytes": nbytes}
    return msgpack.packb(meta, use_bin_type=True)


def unpack_meta(blob: bytes, where: str) -> dict:
    """Parse and check a meta blob; CheckpointError naming `where` when it is not one."""
    try:
        meta = msgpack.unpackb(blob, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CheckpointError(f"{where}: meta blob is not msgpack ({exc})", hint="the shard is corrupt") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{where}: not an {FORMAT} shard", hint="written by another tool or version?")
    return meta


@dataclass
class ShardData:
    """A shard read back: `data` holds `nbytes` bytes laid out as `entries` say."""

    meta: dict
    blob: bytes
    entries: list[TensorEntry]
    data: np.ndarray

    @property
    def digest(self) -> str:
        return digest(self.blob)


@dataclass
class ParityData:
    members: list[int]
    sizes: list[int]
    metas: dict[int, bytes]
    parity: np.ndarray
    checksum: str


def write_shard_file(
    final: Path,
    *,
    kind: str,
    rank: int,
    step: int,
    entries: Sequence[TensorEntry],
    data: np.ndarray,
    meta_for: Callable[[list[str]], bytes],
    chunk: int,
    hasher: Executor | None = None,
    progress: Progress | None = None,
) -> bytes:
    """Write a shard (or replica) crash-consistently and return the meta blob stored in it.

    Each tensor's checksum is computed while its bytes are written (on `hasher` when given, overlapping
    the write); `meta_for(checksums)` returns the blob to store, or raises when they are wrong.

    Raises:
        CheckpointError: burst buffer full (the message says so, with sizes), or another write error.
    """
    tmp = tmp_path(final)
    total = sum(e.nbytes for e in entries)
    done = 0
    try:
        with h5py.File(tmp, "w", locking=False) as f:
            f.attrs.update({"format": FORMAT, "kind": kind, "rank": rank, "step": step})
            group = f.create_group("tensors")
            checksums = []
            for i, e in enumerate(entries):
                ds = group.create_dataset(f"{i:06d}", shape=(e.nbytes,), dtype="u1")
                src = data[e.offset : e.offset + e.nbytes]
                h = xxhash.xxh3_64()
                pending = []
                for a in range(0, e.nbytes, chunk):
                    piece = src[a : a + chunk]
                    if hasher is not None:
                        pending.append(hasher.submit(h.update, piece))
                    else:
                        h.update(piece)
                    ds[a : a + len(piece)] = piece
                    done += len(piece)
                    if progress is not None:
                        progress("write", done, total)
                for fut in pending:
                    fut.result()
                checksums.append(h.hexdigest())
                ds.attrs.update({"xxh3": checksums[-1], "dtype": e.dtype, "shape": str(list(e.shape)), "path": e.path})
            blob = meta_for(checksums)
            f.create_dataset("meta", data=np.frombuffer(blob, dtype=np.uint8))
            f.attrs["digest"] = digest(blob)
        commit_file(tmp, final)
        return blob
    except CheckpointError:
        remove_quietly(tmp)
        raise
    except (OSError, RuntimeError, ValueError) as exc:
        remove_quietly(tmp)
        if is_no_space(exc):
            raise space_error(final.parent, total - done) from exc
        raise CheckpointError(f"cannot write {final}: {exc}", hint="check the burst-buffer directory") from exc


def read_shard_file(
    path: Path,
    *,
    expect_digest: str | None = None,
    buffer_for: Callable[[list[TensorEntry], int], np.ndarray] | None = None,
    progress: Progress | None = None,
    verify: bool = True,
) -> ShardData:
    """Read a shard (or replica), checking its meta digest and every tensor's checksum.

    `buffer_for(entries, nbytes)` returns where the bytes go (e.g. the host arena); default: a new array.
    `verify=False` skips the tensor checksums, for bytes that are only passed on to a rank that checks them.

    Raises:
        CheckpointError: unreadable file, wrong digest, or a tensor whose checksum does not match (named).
    """
    try:
        with h5py.File(path, "r", locking=False) as f:
            blob = f["meta"][()].tobytes()
            got = digest(blob)
            if expect_digest is not None and got != expect_digest:
                raise CheckpointError(f"{path}: meta digest {got} != {expect_digest} in the manifest",
                                      hint="the shard is corrupt or from another version")
            meta = unpack_meta(blob, str(path))
            entries = [TensorEntry.from_wire(t) for t in meta["tensors"]]
            nbytes = int(meta["nbytes"])
            if not 0 <= nbytes <= 2 * os.path.getsize(path) + (1 << 20):  # bounded work for a hostile table
                raise CheckpointError(f"{path}: meta says {nbytes} bytes, more than the file can hold",
                                      hint="the shard is corrupt")
            data = buffer_for(entries, nbytes) if buffer_for else np.empty(nbytes, dtype=np.uint8)
            done = 0
            for i, (e, t) in enumerate(zip(entries, meta["tensors"], strict=True)):
                ds = f["tensors"][f"{i:06d}"]
                if ds.shape != (e.nbytes,) or e.offset + e.nbytes > nbytes:
                    raise CheckpointError(f"{path}: tensor {e.path!r} has {ds.shape} bytes, table says {e.nbytes}",
                                          hint="the shard is corrupt")
                dest = data[e.offset : e.offset + e.nbytes]
                if e.nbytes:
                    ds.read_direct(dest)
                actual = digest(dest) if verify else t["xxh3"]
                if actual != t["xxh3"]:
                    raise CheckpointError(
                        f"{path}: tensor {e.path!r} checksum {actual} != {t['xxh3']} (bit rot or a torn write)",
                        hint="this copy is bad; a replica, parity or an older version is used instead",
                    )
                done += e.nbytes
                if progress is not None:
                    progress("read", done, nbytes)
            clear_gaps(data, entries)
            return ShardData(meta=meta, blob=blob, entries=entries, data=data)
    except CheckpointError:
        raise
    except _BAD_FILE as exc:
        raise CheckpointError(f"cannot read shard {path}: {exc!r}", hint="the file is missing or corrupt") from None


def write_parity_file(final: Path, *, rank: int, step: int, members: Sequence[int], sizes: Sequence[int],
                      metas: dict[int, bytes], parity: np.ndarray) -> str:
    """Write an XOR parity file crash-consistently; returns the parity checksum."""
    tmp = tmp_path(final)
    checksum = digest(parity)
    try:
        with h5py.File(tmp, "w", locking=False) as f:
            f.attrs.update({"format": FORMAT, "kind": "parity", "rank": rank, "step": step,
                            "members": list(members), "sizes": list(sizes), "xxh3": checksum})
            f.create_dataset("parity", data=parity)
            group = f.create_group("metas")
            for member, blob in metas.items():
                group.create_dataset(str(member), data=np.frombuffer(blob, dtype=np.uint8))
        commit_file(tmp, final)
        return checksum
    except (OSError, RuntimeError, ValueError) as exc:
        remove_quietly(tmp)
        if is_no_space(exc):
            raise space_error(final.parent, parity.nbytes) from exc
        raise CheckpointError(f"cannot write {final}: {exc}", hint="check the burst-buffer directory") from exc


def read_parity_file(path: Path, *, expect_checksum: str | None = None) -> ParityData:
    """Read a parity file and check its checksum (and the manifest's, when given)."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            if f.attrs.get("format") != FORMAT:
                raise CheckpointError(f"{path}: not an {FORMAT} parity file", hint="written by another tool?")
            parity = f["parity"][()]
            stored = str(f.attrs["xxh3"])
            members = [int(m) for m in f.attrs["members"]]
            sizes = [int(s) for s in f.attrs["sizes"]]
            metas = {int(name): ds[()].tobytes() for name, ds in f["metas"].items()}
    except CheckpointError:
        raise
    except _BAD_FILE as exc:
        raise CheckpointError(f"cannot read parity {path}: {exc!r}", hint="the file is missing or corrupt") from None
    actual = digest(parity)
    if actual != stored or (expect_checksum is not None and actual != expect_checksum):
        raise CheckpointError(f"{path}: parity checksum {actual} does not match {expect_checksum or stored}",
                              hint="this parity copy is bad")
    return ParityData(members=members, sizes=sizes, metas=metas, parity=parity, checksum=actual)
