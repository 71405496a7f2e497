"""Drain and scavenge: copy committed versions from burst buffers to the shared directory.

`Drainer` is one background thread per rank that copies the rank's own shard of every M-th committed
version, at most `bandwidth` bytes/s. The manifest in the shared directory is written (by rank 0) only
when every rank reported its copy done: it is the shared copy's commit point. `scavenge` is for the end
of a batch script: it copies the newest version not yet in the shared directory from whatever burst
buffers it is given, taking partner replicas for shards whose node is gone.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nvrx_hpc.ckpt.api import version_name
from nvrx_hpc.ckpt.fsutil import commit_file, is_no_space, remove_quietly, space_error, tmp_path
from nvrx_hpc.ckpt.manifest import Manifest, file_name, scan_dir, write_manifest
from nvrx_hpc.ckpt.shardfile import Progress, read_shard_file
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["copy_file", "Drainer", "ScavengeResult", "scavenge"]

log = logging.getLogger(__name__)

_COPY_CHUNK = 8 << 20


def copy_file(src: Path, dst: Path, *, bandwidth: float = 0.0, progress: Progress | None = None) -> int:
    """Copy `src` to `dst` crash-consistently, at most `bandwidth` bytes/s (0: no cap); returns the bytes."""
    dst.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = tmp_path(dst)
    total = src.stat().st_size
    buf = bytearray(min(_COPY_CHUNK, max(total, 1)))
    view = memoryview(buf)
    done = 0
    start = time.monotonic()
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while n := fin.readinto(buf):
                fout.write(view[:n])
                done += n
                if progress is not None:
                    progress("copy", done, total)
                if bandwidth > 0:
                    ahead = done / bandwidth - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
        commit_file(tmp, dst)
    except OSError as exc:
        remove_quietly(tmp)
        if is_no_space(exc):
            raise space_error(dst.parent, total - done, "shared directory") from exc
        raise CheckpointError(f"cannot copy {src} to {dst}: {exc.strerror or exc}",
                              hint="check that the shared directory is mounted and writable") from exc
    return done


class Drainer:
    """Copies shards to the shared directory in the background, one at a time, under a bandwidth cap."""

    def __init__(self, bandwidth: float = 0.0) -> None:
        self._bandwidth = bandwidth
        self._queue: queue.Queue[tuple[int, Path, Path] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._pinned: set[int] = set()
        self._done: list[int] = []
        self._failed: dict[int, str] = {}
        self._thread = threading.Thread(target=self._run, name="nvrx-ckpt-drain", daemon=True)
        self._thread.start()

    def enqueue(self, step: int, src: Path, dst: Path) -> None:
        with self._lock:
            self._pinned.add(step)
        self._queue.put((step, src, dst))

    def pinned(self) -> list[int]:
        """Steps queued or being copied: the burst buffer must keep them."""
        with self._lock:
            return sorted(self._pinned)

    def take_finished(self) -> tuple[list[int], dict[int, str]]:
        """Steps copied and steps that failed (with why) since the last call."""
        with self._lock:
            done, failed = self._done, self._failed
            self._done, self._failed = [], {}
        return done, failed

    def wait_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.pinned():
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            step, src, dst = item
            try:
                copy_file(src, dst, bandwidth=self._bandwidth)
                outcome = None
            except CheckpointError as exc:
                outcome = exc.message
            except Exception as exc:  # never let the thread die: the failure is reported instead
                log.exception("drain of step %d failed", step)
                outcome = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self._pinned.discard(step)
                if outcome is None:
                    self._done.append(step)
                else:
                    self._failed[step] = outcome


@dataclass
class ScavengeResult:
    """What `scavenge` did; `complete` means the shared directory now holds a committed copy of `step`."""

    step: int | None
    complete: bool = False
    copied: list[int] = field(default_factory=list)
    already: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    nbytes: int = 0
    message: str = ""


def _manifests(dirs: Sequence[Path]) -> dict[int, Manifest]:
    best: dict[int, Manifest] = {}
    for d in dirs:
        for step, v in scan_dir(d).items():
            if v.manifest is not None and v.failed is None:
                if step not in best or v.manifest.created > best[step].created:
                    best[step] = v.manifest
    return best


def scavenge(bb_dirs: Sequence[Path], shared: Path, *, step: int | None = None,
             progress: Progress | None = None) -> ScavengeResult:
    """Copy the newest committed version not yet in `shared` (or `step`) from `bb_dirs`, verifying each shard.

    Run it on every node (`srun --ntasks-per-node=1`) or, where all burst buffers are visible, once with
    all of them: whichever run finds the last shard in place writes the shared manifest.
    """
    found = _manifests(bb_dirs)
    in_shared = {s for s, v in scan_dir(shared).items() if v.manifest is not None}
    if step is None:
        newest = max(found) if found else None
        if newest is None or newest in in_shared:
            what = f"the newest version (step {newest}) is already there" if newest is not None else "no version found"
            return ScavengeResult(step=None, complete=newest is not None, message=f"nothing to scavenge: {what}")
        step = newest
    if step not in found:
        raise CheckpointError(f"no committed version of step {step} in {', '.join(map(str, bb_dirs))}",
                              hint="list what is there with `nvrx-hpc ckpt ls`")
    manifest = found[step]
    result = ScavengeResult(step=step)
    target = shared / version_name(step)
    total = manifest.nbytes
    for rec in manifest.shards:
        dst = target / file_name("shard", rec.rank)
        if dst.exists():
            result.already.append(rec.rank)
            continue
        for d in bb_dirs:
            for kind in ("shard", "replica"):
                src = d / version_name(step) / file_name(kind, rec.rank)
                if not src.exists():
                    continue
                try:
                    read_shard_file(src, expect_digest=rec.digest)
                except CheckpointError as exc:
                    result.bad.append(str(exc))
                    continue
                result.nbytes += copy_file(src, dst)
                result.copied.append(rec.rank)
                if progress is not None:
                    progress("scavenge", result.nbytes, total)
                break
            if rec.rank in result.copied:
                break
        else:
            result.missing.append(rec.rank)
    present = [r.rank for r in manifest.shards if (target / file_name("shard", r.rank)).exists()]
    result.missing = [r.rank for r in manifest.shards if r.rank not in present]
    if not result.missing:
        write_manifest(target, manifest)
        result.complete = True
        result.message = f"step {step} is complete in {shared}"
    else:
        result.message = (f"step {step}: {len(result.missing)} shard(s) not found here "
                          f"(ranks {result.missing[:8]}); run scavenge on the nodes that hold them")
    log.info("scavenge: %s", result.message)
    return result

