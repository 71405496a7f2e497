"""The background save path of one version: persist, replicate, vote, commit, retire old versions, drain.

Every rank runs the same sequence of collective steps whatever fails locally, so a full burst buffer or a
bad write on one rank turns into the same CheckpointError on every rank (naming the rank and node), never
a hang. The previous committed version is untouched until the new one is committed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from nvrx_hpc.ckpt import xor
from nvrx_hpc.ckpt.api import SaveStats, Scheme, version_name
from nvrx_hpc.ckpt.context import TAG_DATA, TAG_HDR, TAG_META, Context
from nvrx_hpc.ckpt.fsutil import TMP_SUFFIX, ensure_space, remove_quietly, remove_tree
from nvrx_hpc.ckpt.manifest import (
    MANIFEST,
    Manifest,
    ParitySet,
    ReplicaRecord,
    ShardRecord,
    file_name,
    scan_dir,
    version_dir,
    write_manifest,
)
from nvrx_hpc.ckpt.shardfile import digest, pack_meta, unpack_meta, write_parity_file, write_shard_file
from nvrx_hpc.ckpt.staging import TensorEntry
from nvrx_hpc.ckpt.transport import as_buffer
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["Staged", "run_save"]

log = logging.getLogger(__name__)


@dataclass
class Staged:
    """One rank's snapshot in host memory: the skeleton, the tensor table and the arena bytes."""

    skeleton: Any
    entries: list[TensorEntry]
    data: np.ndarray


def _header(ok: bool, length: int) -> np.ndarray:
    return np.array([int(ok), length], dtype=np.int64).view(np.uint8)


def run_save(ctx: Context, step: int, staged: Staged, stats: SaveStats) -> Manifest:
    """Save `staged` as version `step` (collective). Returns the committed manifest.

    Raises:
        CheckpointError: the version was not committed on every rank; the message names each failing rank.
    """
    start = time.perf_counter()
    rank, layout, scheme = ctx.rank, ctx.layout, ctx.settings.scheme
    vdir = version_dir(ctx.bb_root, step)
    existing = (vdir / MANIFEST).exists()  # a restored version being protected again: never delete its files
    errors: list[str] = []
    try:  # local work first: the first collective comes after the write, when every rank has staged
        vdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        ensure_space(vdir, _domain_need(ctx, int(staged.data.nbytes)))
    except (OSError, CheckpointError) as exc:
        errors.append(str(getattr(exc, "message", exc)))

    blob: bytes | None = None
    t = time.perf_counter()
    if not errors:
        try:
            blob = write_shard_file(
                vdir / file_name("shard", rank), kind="shard", rank=rank, step=step, entries=staged.entries,
                data=staged.data, chunk=ctx.chunk, hasher=ctx.hasher, progress=ctx.progress,
                meta_for=lambda sums: pack_meta(rank=rank, step=step, skeleton=staged.skeleton,
                                                entries=staged.entries, checksums=sums, nbytes=len(staged.data)),
            )
        except CheckpointError as exc:
            errors.append(exc.message)
    stats.write_s = time.perf_counter() - t
    stats.nbytes = int(staged.data.nbytes)
    done, drain_failed = ctx.drainer.take_finished() if ctx.drainer else ([], {})
    infos = ctx.gather({"nbytes": int(staged.data.nbytes), "drained": done, "drain_failed": drain_failed})
    _note_drains(ctx, infos)
    sizes = [int(i["nbytes"]) for i in infos]

    parity_sum = ""
    if scheme == Scheme.PARTNER:
        _partner(ctx, step, staged, blob, sizes, errors, stats)
    elif scheme == Scheme.XOR:
        parity_sum = _xor(ctx, step, staged, blob, sizes, errors, stats)

    t = time.perf_counter()
    pins = ctx.drainer.pinned() if ctx.drainer else []
    votes = ctx.gather({
        "ok": not errors, "errors": errors, "digest": digest(blob) if blob else "", "meta_nbytes": len(blob or b""),
        "ntensors": len(staged.entries), "parity": parity_sum, "pins": pins,
    })
    failed = [(r, v["errors"]) for r, v in enumerate(votes) if not v["ok"]]
    if failed:
        if not existing:
            _discard(ctx, vdir)
        reasons = "; ".join(f"rank {r} ({layout.domains[r]}): {' / '.join(e) or 'failed'}" for r, e in failed[:4])
        if ctx.rank == 0:
            ctx.emit("ckpt.save_failed", reason=reasons, step=step, ranks=[r for r, _ in failed])
        raise CheckpointError(
            f"checkpoint of step {step} was not committed: {reasons}" + (" ..." if len(failed) > 4 else ""),
            hint="the previous committed version is kept and loadable; training can go on",
            step=step,
        )
    manifest = _manifest(ctx, step, sizes, votes)
    wrote = ""
    if layout.leader(rank):
        try:
            write_manifest(vdir, manifest)
        except CheckpointError as exc:
            wrote = exc.message
    results = ctx.gather(wrote)
    leaders = [r for r in range(len(results)) if layout.leader(r)]
    if all(results[r] for r in leaders):
        raise CheckpointError(f"checkpoint of step {step} was not committed: no node could write its manifest "
                              f"({results[leaders[0]]})", hint="check the burst-buffer directories", step=step)
    ctx.commits += 1
    stats.commit_s = time.perf_counter() - t
    _after_commit(ctx, step, manifest, votes)
    stats.total_s = time.perf_counter() - start
    stats.committed = True
    if rank == 0:
        ctx.emit("ckpt.committed", step=step, nbytes=manifest.nbytes, scheme=scheme.value,
                 seconds=round(stats.total_s, 3))
    return manifest


def _domain_need(ctx: Context, own: int) -> int:
    """Bytes this node's ranks write for a version (shards plus replicas or parity), if all hold about `own`."""
    factor = 1.0
    if ctx.settings.scheme == Scheme.PARTNER:
        factor = 2.0
    elif ctx.settings.scheme == Scheme.XOR:
        members = next(s for s in ctx.layout.xor_sets(ctx.settings.set_size) if ctx.rank in s)
        factor = 1.0 + 1.0 / (len(members) - 1)
    return int(own * factor * len(ctx.layout.ranks_in(ctx.domain)))


def _partner(ctx: Context, step: int, staged: Staged, blob: bytes | None, sizes: list[int], errors: list[str],
             stats: SaveStats) -> None:
    """Send our shard to the partner and write the replica we receive from the left."""
    right, left = ctx.layout.partner(ctx.rank), ctx.layout.partner_source(ctx.rank)
    header = np.empty(16, dtype=np.uint8)
    ctx.transport.exchange([(right, _header(blob is not None, len(blob or b"")), TAG_HDR)], [(left, header, TAG_HDR)])
    ok_in, meta_len = (int(x) for x in header.view(np.int64))
    t = time.perf_counter()  # after the header: the partners are in step, what follows is moving bytes
    sends = [(right, as_buffer(blob), TAG_META), (right, staged.data, TAG_DATA)] if blob is not None else []
    meta_in = np.empty(meta_len, dtype=np.uint8)
    data_in = ctx.spare(sizes[left])
    recvs = [(left, meta_in, TAG_META), (left, data_in, TAG_DATA)] if ok_in else []
    ctx.transport.exchange(sends, recvs)
    stats.replicate_s = time.perf_counter() - t
    stats.replicate_bytes = len(staged.data) if blob is not None else 0
    if not ok_in or errors:
        return
    t = time.perf_counter()
    try:
        blob_in = meta_in.tobytes()
        meta = unpack_meta(blob_in, f"replica of rank {left}")
        entries = [TensorEntry.from_wire(x) for x in meta["tensors"]]
        expected = [x["xxh3"] for x in meta["tensors"]]

        def check(sums: list[str]) -> bytes:
            if sums != expected:
                bad = next(e.path for e, a, b in zip(entries, sums, expected, strict=True) if a != b)
                raise CheckpointError(f"replica of rank {left} arrived corrupted (tensor {bad!r})",
                                      hint="check the interconnect; the version is not committed")
            return blob_in

        write_shard_file(ctx.bb_root / version_name(step) / file_name("replica", left), kind="replica", rank=left,
                         step=step, entries=entries, data=data_in, meta_for=check, chunk=ctx.chunk,
                         hasher=ctx.hasher)
    except CheckpointError as exc:
        errors.append(exc.message)
    stats.redundancy_write_s = time.perf_counter() - t


def _xor(ctx: Context, step: int, staged: Staged, blob: bytes | None, sizes: list[int], errors: list[str],
         stats: SaveStats) -> str:
    """Share meta blobs inside our XOR set, encode our parity chunk and write it."""
    members = next(s for s in ctx.layout.xor_sets(ctx.settings.set_size) if ctx.rank in s)
    others = [m for m in members if m != ctx.rank]
    headers = {m: np.empty(16, dtype=np.uint8) for m in others}
    mine = _header(blob is not None, len(blob or b""))
    ctx.transport.exchange([(m, mine, TAG_HDR) for m in others], [(m, headers[m], TAG_HDR) for m in others])
    lengths = {m: [int(x) for x in headers[m].view(np.int64)] for m in others}
    metas_in = {m: np.empty(lengths[m][1], dtype=np.uint8) for m in others if lengths[m][0]}
    sends = [(m, as_buffer(blob), TAG_META) for m in others] if blob is not None else []
    ctx.transport.exchange(sends, [(m, buf, TAG_META) for m, buf in metas_in.items()])
    c = xor.chunk_size([sizes[m] for m in members])
    t = time.perf_counter()
    parity = xor.encode(ctx.transport, list(members), staged.data, c)
    stats.replicate_s = time.perf_counter() - t
    stats.replicate_bytes = len(staged.data)
    if errors or blob is None or len(metas_in) != len(others):
        return ""
    t = time.perf_counter()
    metas = {ctx.rank: blob, **{m: buf.tobytes() for m, buf in metas_in.items()}}
    try:
        checksum = write_parity_file(ctx.bb_root / version_name(step) / file_name("parity", ctx.rank), rank=ctx.rank,
                                     step=step, members=members, sizes=[sizes[m] for m in members], metas=metas,
                                     parity=parity)
    except CheckpointError as exc:
        errors.append(exc.message)
        checksum = ""
    stats.redundancy_write_s = time.perf_counter() - t
    return checksum


def _manifest(ctx: Context, step: int, sizes: list[int], votes: list[dict]) -> Manifest:
    layout, scheme = ctx.layout, ctx.settings.scheme
    shards = tuple(
        ShardRecord(r, layout.domains[r], sizes[r], int(v["meta_nbytes"]), int(v["ntensors"]), str(v["digest"]))
        for r, v in enumerate(votes)
    )
    replicas: tuple[ReplicaRecord, ...] = ()
    parity_sets: tuple[ParitySet, ...] = ()
    if scheme == Scheme.PARTNER:
        holders = [layout.partner(r) for r in range(len(votes))]
        replicas = tuple(ReplicaRecord(r, h, layout.domains[h]) for r, h in enumerate(holders))
    elif scheme == Scheme.XOR:
        parity_sets = tuple(
            ParitySet(tuple(s), xor.chunk_size([sizes[m] for m in s]), tuple(str(votes[m]["parity"]) for m in s))
            for s in layout.xor_sets(ctx.settings.set_size)
        )
    return Manifest(step=step, world_size=len(votes), scheme=scheme.value, shards=shards, replicas=replicas,
                    parity_sets=parity_sets, job_id=ctx.job_id)


def _discard(ctx: Context, vdir: Any) -> None:
    """Remove what this rank wrote for a version that did not commit (frees a full burst buffer)."""
    if not vdir.exists():
        return
    for kind in ("shard", "replica", "parity"):
        for owner in {ctx.rank, ctx.layout.partner_source(ctx.rank)} if kind == "replica" else {ctx.rank}:
            path = vdir / file_name(kind, owner)
            remove_quietly(path)
            remove_quietly(path.with_name(path.name + TMP_SUFFIX))
    try:
        vdir.rmdir()  # only when empty: other ranks of this node may still be cleaning up
    except OSError:
        pass


def _after_commit(ctx: Context, step: int, manifest: Manifest, votes: list[dict]) -> None:
    """Queue a drain (every M-th commit) and let each node's leader delete versions beyond `keep`."""
    settings, layout = ctx.settings, ctx.layout
    pinned = {int(s) for r in layout.ranks_in(ctx.domain) for s in votes[r]["pins"]}
    if ctx.drainer is not None and ctx.shared_root is not None and settings.drain_every:
        if ctx.commits % settings.drain_every == 0:
            name = file_name("shard", ctx.rank)
            src, dst = version_dir(ctx.bb_root, step) / name, ctx.shared_root / version_name(step) / name
            ctx.drainer.enqueue(step, src, dst)
            pinned.add(step)
            if ctx.rank == 0:
                ctx.pending_shared[step] = (manifest, set())
    if not layout.leader(ctx.rank):
        return
    local = scan_dir(ctx.bb_root)
    committed = sorted(s for s, v in local.items() if v.manifest is not None and v.failed is None)
    keep = set(committed[-settings.keep :]) | {step} | pinned
    for s, v in local.items():
        if s in keep or (v.manifest is None and v.failed is None and s > step):
            continue
        log.debug("retiring version %d in %s", s, v.path)
        remove_tree(v.path)


def _note_drains(ctx: Context, infos: list[dict]) -> None:
    """Rank 0: write the shared manifest of every version all ranks have copied."""
    if ctx.rank != 0 or ctx.shared_root is None:
        return
    for r, info in enumerate(infos):
        for s in info["drained"]:
            if int(s) in ctx.pending_shared:
                ctx.pending_shared[int(s)][1].add(r)
        for s, why in info["drain_failed"].items():
            if ctx.pending_shared.pop(int(s), None) is not None:
                log.warning("drain of step %s failed on rank %d: %s", s, r, why)
                ctx.emit("ckpt.drain_failed", reason=why, step=int(s), failed_rank=r)
    for s, (manifest, ranks) in sorted(ctx.pending_shared.items()):
        if len(ranks) < manifest.world_size:
            continue
        del ctx.pending_shared[s]
        try:
            write_manifest(ctx.shared_root / version_name(s), manifest)
        except CheckpointError as exc:
            log.warning("cannot commit drained step %d: %s", s, exc)
            continue
        ctx.emit("ckpt.drained", step=s, nbytes=manifest.nbytes)
        _trim_shared(ctx)


def _trim_shared(ctx: Context) -> None:
    keep = ctx.settings.drain_keep
    if not keep or ctx.shared_root is None:
        return
    committed = sorted(s for s, v in scan_dir(ctx.shared_root).items() if v.manifest is not None)
    for s in committed[:-keep]:
        remove_tree(ctx.shared_root / version_name(s))
