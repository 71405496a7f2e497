"""The restore path: gather what every rank holds, plan, read and verify, move, rebuild, verify again.

A copy that fails verification is set aside (`.bad`) and excluded, and the plan is made again; a version
whose copies are exhausted is marked failed (FAILED.json) and the next older one is tried, so a bad
checkpoint is never retried in a loop. Every rank takes the same decisions from the same gathered facts.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nvrx_hpc.ckpt import xor
from nvrx_hpc.ckpt.api import RestoreStats, version_name
from nvrx_hpc.ckpt.context import TAG_DATA, TAG_META, TAG_PARITY, Context
from nvrx_hpc.ckpt.fsutil import BAD_SUFFIX
from nvrx_hpc.ckpt.manifest import Manifest, file_name, mark_failed, scan_dir, version_dir
from nvrx_hpc.ckpt.plan import SHARED, Fetch, FileKey, Holdings, Rebuild, RestorePlan, plan_restore
from nvrx_hpc.ckpt.shardfile import digest, read_parity_file, read_shard_file, unpack_meta
from nvrx_hpc.ckpt.staging import HostArena, TensorEntry
from nvrx_hpc.ckpt.transport import as_buffer
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["Restored", "gather_holdings", "run_restore"]

log = logging.getLogger(__name__)


@dataclass
class Restored:
    """This rank's restored shard: its skeleton; the bytes are in the host arena."""

    step: int
    skeleton: object
    plan: RestorePlan
    stats: RestoreStats = field(default_factory=RestoreStats)


def gather_holdings(ctx: Context) -> Holdings:
    """Every rank reports its node's burst buffer (rank 0 also the shared directory); all get the union."""
    mine: dict = {"domain": ctx.domain, "versions": {}}
    report_manifests = ctx.layout.leader(ctx.rank)
    places = [(ctx.bb_root, ctx.domain)]
    if ctx.rank == 0 and ctx.shared_root is not None:
        places.append((ctx.shared_root, SHARED))
    for root, where in places:
        for step, v in scan_dir(root).items():
            entry = mine["versions"].setdefault(f"{where}|{step}", {})
            entry.update({"s": sorted(v.shards), "r": sorted(v.replicas), "p": sorted(v.parities), "f": v.failed})
            if v.manifest is not None and (report_manifests or where == SHARED):
                entry["m"] = v.manifest.to_json()
    reports = ctx.gather(mine)
    files: dict[int, dict[tuple[str, int], set[str]]] = {}
    manifests: dict[int, Manifest] = {}
    failed: dict[int, str] = {}
    for report in reports:
        for key, entry in report["versions"].items():
            where, _, step_text = key.rpartition("|")
            step = int(step_text)
            if entry.get("f"):
                failed[step] = entry["f"]
            by_kind = files.setdefault(step, {})
            for kind, letter in (("shard", "s"), ("replica", "r"), ("parity", "p")):
                for owner in entry[letter]:
                    by_kind.setdefault((kind, int(owner)), set()).add(where)
            if "m" in entry:
                try:
                    m = Manifest.from_json(entry["m"], f"{where}/{version_name(step)}")
                except CheckpointError as exc:
                    log.warning("%s", exc)
                    continue
                if step not in manifests or m.created > manifests[step].created:
                    manifests[step] = m
    frozen = {s: {k: frozenset(v) for k, v in d.items()} for s, d in files.items()}
    return Holdings(domains=tuple(r["domain"] for r in reports), files=frozen, manifests=manifests, failed=failed)


def _path(ctx: Context, key: FileKey) -> Path:
    step, where, kind, owner = key
    root = ctx.shared_root if where == SHARED else ctx.bb_root
    assert root is not None
    return root / version_name(step) / file_name(kind, owner)


def run_restore(ctx: Context, arena: HostArena) -> Restored | None:
    """Restore the newest version that verifies (collective); None when the job has no checkpoint at all.

    Raises:
        CheckpointError: checkpoints exist but none can be restored; the message gives each version's reason.
    """
    start = time.perf_counter()
    holdings = gather_holdings(ctx)
    if not holdings.manifests:
        return None
    excluded: set[FileKey] = set()
    failed = dict(holdings.failed)
    stats = RestoreStats()
    tainted: set[int] = set()
    for _ in range(10_000):  # each round excludes a file or fails a version, so this always ends
        plan, rejected = plan_restore(Holdings(holdings.domains, holdings.files, holdings.manifests, failed), excluded)
        for step, why in rejected.items():
            if step in tainted and step not in failed:
                failed[step] = why
                _mark_failed(ctx, step, why)
            stats.rejected.setdefault(step, why)
        if plan is None:
            break
        bad, skeleton, step_error = _execute(ctx, plan, arena)
        if step_error:
            failed[plan.step] = step_error
            _mark_failed(ctx, plan.step, step_error)
            stats.rejected[plan.step] = step_error
            continue
        if bad:
            excluded.update(bad)
            tainted.add(plan.step)
            stats.bad_files.extend(f"{k[1]}/{version_name(k[0])}/{file_name(k[2], k[3])}" for k in bad)
            continue
        stats.step, stats.seconds = plan.step, time.perf_counter() - start
        stats.sources, stats.reprotect = plan.sources(), plan.reprotect
        if ctx.rank == 0:
            ctx.emit("ckpt.restored", step=plan.step, sources=stats.sources, reprotect=plan.reprotect,
                     rejected={str(k): v for k, v in stats.rejected.items()}, bad_files=stats.bad_files)
        return Restored(plan.step, skeleton, plan, stats)
    reasons = "; ".join(f"step {s}: {why}" for s, why in sorted(stats.rejected.items(), reverse=True)[:5])
    raise CheckpointError(f"no checkpoint can be restored ({reasons})",
                          hint="list the versions with `nvrx-hpc ckpt ls`; a drained copy may be in the shared "
                          "directory (pass shared_dir)")


def _mark_failed(ctx: Context, step: int, why: str) -> None:
    log.warning("checkpoint step %d given up: %s", step, why)
    if ctx.layout.leader(ctx.rank) and version_dir(ctx.bb_root, step).exists():
        mark_failed(version_dir(ctx.bb_root, step), step, why)
    if ctx.rank == 0:
        if ctx.shared_root is not None and version_dir(ctx.shared_root, step).exists():
            mark_failed(version_dir(ctx.shared_root, step), step, why)
        ctx.emit("ckpt.version_failed", reason=why, step=step)


def _quarantine(path: Path) -> None:
    try:
        os.replace(path, path.with_name(path.name + BAD_SUFFIX))
    except OSError as exc:
        log.warning("cannot set %s aside: %s", path, exc)


def _execute(ctx: Context, plan: RestorePlan, arena: HostArena) -> tuple[list[FileKey], object, str]:
    """Run one plan: (bad file keys, our skeleton, version-level error); all ranks return the same verdict.

    Copies for other ranks are read and moved first, and each rank reads its own files after that, so a
    lost rank's bytes travel while the ranks that hold them read their own shards.
    """
    me, run = ctx.rank, _PlanRun(ctx, plan, arena)
    run.read_files(lambda f: f.holder == me and f.dest != me)
    verdict = _agree(ctx, run.bad)
    if verdict:
        return verdict, None, ""
    run.move_copies()
    run.read_files(lambda f: f.holder == me and f.dest == me)
    verdict = _agree(ctx, run.bad)
    if verdict:
        _recheck_sent(ctx, plan, verdict)
        return verdict, None, ""
    errors = [e for e in ctx.gather(run.rebuild_lost()) if e]
    if errors:
        return [], None, errors[0]
    assert run.mine_meta is not None
    meta = unpack_meta(run.mine_meta, f"rank {me} shard")
    arena.entries = [TensorEntry.from_wire(t) for t in meta["tensors"]]
    return [], meta["skeleton"], ""


@dataclass
class _PlanRun:
    """One rank's part of one plan: the files it read, the copies in flight, the bad keys found so far."""

    ctx: Context
    plan: RestorePlan
    arena: HostArena
    mine_meta: bytes | None = None
    outgoing: dict[int, tuple[bytes, np.ndarray]] = field(default_factory=dict)  # fetch index -> (meta, data)
    parities: dict[int, np.ndarray] = field(default_factory=dict)
    parity_metas: dict[int, dict[int, bytes]] = field(default_factory=dict)
    bad: list[FileKey] = field(default_factory=list)

    def read_files(self, which: Callable[[Fetch], bool]) -> None:
        """Read (and for this rank's own copies, verify) every file of the plan that `which` selects."""
        me, m = self.ctx.rank, self.plan.manifest
        for i, f in enumerate(self.plan.fetches):
            if not which(f):
                continue
            path = _path(self.ctx, f.key)
            try:
                if f.obj == "data":
                    # A copy for another rank is checked there, after the transfer, so it is read unverified (the
                    # first into the reusable spare buffer); only if that check fails is the file verified here.
                    spare = None if self.outgoing else (lambda _entries, n: self.ctx.spare(n))
                    shard = read_shard_file(path, expect_digest=m.shard(f.owner).digest,
                                            buffer_for=self.arena.adopt if f.dest == me else spare, verify=f.dest == me)
                    if f.dest == me:
                        self.mine_meta = shard.blob
                    else:
                        self.outgoing[i] = (shard.blob, shard.data)
                else:
                    idx, ps = m.parity_set_of(f.owner) or (0, None)
                    assert ps is not None
                    pdata = read_parity_file(path, expect_checksum=ps.checksums[idx])
                    self.parity_metas[f.owner] = pdata.metas
                    if f.dest == me:
                        self.parities[f.owner] = pdata.parity
                    else:
                        self.outgoing[i] = (b"", pdata.parity)
            except CheckpointError as exc:
                log.warning("restore of step %d: %s", self.plan.step, exc.message)
                self.bad.append(f.key)
                _quarantine(path)

    def move_copies(self) -> None:
        """Send the copies read for other ranks, receive ours, and check what arrived."""
        me, m, plan = self.ctx.rank, self.plan.manifest, self.plan
        sends, recvs, incoming = [], [], {}
        for i, f in enumerate(plan.fetches):
            if f.holder == f.dest:
                continue
            tag_meta, tag_data = (TAG_META, TAG_DATA) if f.obj == "data" else (TAG_PARITY, TAG_PARITY)
            if f.holder == me:
                blob, data = self.outgoing[i]
                if f.obj == "data":
                    sends.append((f.dest, as_buffer(blob), tag_meta))
                sends.append((f.dest, data, tag_data))
            elif f.dest == me:
                if f.obj == "data":
                    meta_buf = np.empty(m.shard(f.owner).meta_nbytes, dtype=np.uint8)
                    data_buf = self.arena.adopt([], m.shard(f.owner).nbytes)
                    recvs += [(f.holder, meta_buf, tag_meta), (f.holder, data_buf, tag_data)]
                    incoming[i] = (meta_buf, data_buf)
                else:
                    ps = (m.parity_set_of(f.owner) or (0, None))[1]
                    assert ps is not None
                    self.parities[f.owner] = np.empty(ps.chunk, dtype=np.uint8)
                    recvs.append((f.holder, self.parities[f.owner], tag_data))
        self.ctx.transport.exchange(sends, recvs)
        self.outgoing.clear()
        for i, (meta_buf, data_buf) in incoming.items():
            f = plan.fetches[i]
            blob = meta_buf.tobytes()
            problem = _check_received(blob, data_buf, m.shard(f.owner).digest)
            if problem:
                log.warning("restore of step %d: copy of rank %d from rank %d: %s", plan.step, f.owner, f.holder,
                            problem)
                self.bad.append(f.key)
            else:
                self.mine_meta = blob
        for f in plan.fetches:
            if f.obj == "parity" and f.dest == me and f.holder != me:
                idx, ps = m.parity_set_of(f.owner) or (0, None)
                if ps is not None and digest(self.parities[f.owner]) != ps.checksums[idx]:
                    self.bad.append(f.key)

    def rebuild_lost(self) -> str:
        """Rebuild the lost members of this rank's XOR sets; the error of a rebuild that fails, else ""."""
        step_error = ""
        lost_metas = _send_lost_metas(self.ctx, self.plan, self.parity_metas)
        for rb in self.plan.rebuilds:
            if self.ctx.rank not in rb.members:
                continue
            try:
                got = _rebuild(self.ctx, self.plan, rb, self.arena, self.parities, lost_metas.get(rb.lost))
                if got is not None:
                    self.mine_meta = got
            except CheckpointError as exc:
                step_error = exc.message
        return step_error


def _recheck_sent(ctx: Context, plan: RestorePlan, bad: list[FileKey]) -> None:
    """A copy that failed its check after the transfer: verify the file we read it from, set it aside if bad
    (a good file means the bytes were damaged in flight; the plan avoids this source either way)."""
    for f in plan.fetches:
        if f.holder != ctx.rank or f.dest == ctx.rank or f.obj != "data" or f.key not in bad:
            continue
        path = _path(ctx, f.key)
        try:
            read_shard_file(path, expect_digest=plan.manifest.shard(f.owner).digest)
        except CheckpointError as exc:
            log.warning("restore of step %d: %s", plan.step, exc.message)
            _quarantine(path)


def _agree(ctx: Context, bad: list[FileKey]) -> list[FileKey]:
    """Every rank's bad files, the same list on all ranks."""
    merged: list[FileKey] = []
    for keys in ctx.gather([list(k) for k in bad]):
        merged.extend((int(k[0]), str(k[1]), str(k[2]), int(k[3])) for k in keys)
    return sorted(set(merged))


def _check_received(blob: bytes, data: np.ndarray, expect: str) -> str:
    if digest(blob) != expect:
        return f"meta digest {digest(blob)} != {expect}"
    try:
        meta = unpack_meta(blob, "received shard")
    except CheckpointError as exc:
        return exc.message
    for t in meta["tensors"]:
        e = TensorEntry.from_wire(t)
        if digest(data[e.offset : e.offset + e.nbytes]) != t["xxh3"]:
            return f"tensor {e.path!r} checksum mismatch after transfer"
    return ""


def _send_lost_metas(ctx: Context, plan: RestorePlan, parity_metas: dict[int, dict[int, bytes]]) -> dict[int, bytes]:
    """Deliver each lost member's meta blob (kept in every parity file of its set) to the lost member."""
    me, out = ctx.rank, {}
    sends, recvs, bufs = [], [], {}
    for rb in plan.rebuilds:
        first = next(r for r in rb.members if r != rb.lost)
        sender = next(f.holder for f in plan.fetches if f.obj == "parity" and f.owner == first)
        if sender == me and rb.lost == me:
            out[rb.lost] = parity_metas[first][rb.lost]
        elif sender == me:
            sends.append((rb.lost, as_buffer(parity_metas[first][rb.lost]), TAG_META))
        elif rb.lost == me:
            bufs[rb.lost] = np.empty(plan.manifest.shard(rb.lost).meta_nbytes, dtype=np.uint8)
            recvs.append((sender, bufs[rb.lost], TAG_META))
    ctx.transport.exchange(sends, recvs)
    out.update({r: b.tobytes() for r, b in bufs.items()})
    return out


def _rebuild(ctx: Context, plan: RestorePlan, rb: Rebuild, arena: HostArena, parities: dict[int, np.ndarray],
             lost_meta: bytes | None) -> bytes | None:
    """One XOR set's rebuild of its lost member; the lost member returns its meta blob."""
    me, m = ctx.rank, plan.manifest
    if me == rb.lost:
        assert lost_meta is not None
        payload, _parity = xor.rebuild(ctx.transport, rb.members, rb.lost, rb.chunk, lost_size=m.shard(me).nbytes)
        buf = arena.adopt([], len(payload))
        buf[:] = payload
        problem = _check_received(lost_meta, buf, m.shard(me).digest)
        if problem:
            raise CheckpointError(f"XOR rebuild of rank {me} of step {plan.step} does not verify: {problem}",
                                  hint="the parity set holds a bad copy")
        return lost_meta
    xor.rebuild(ctx.transport, rb.members, rb.lost, rb.chunk, data=arena.data, parity=parities[me])
    return None
