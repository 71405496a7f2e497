"""`AsyncCheckpointer`: save in the time of a host-memory copy; persist, protect and commit in the background.

Construction, `latest`, `load` and `close` are collective: every rank calls them at the same point. `save`
is collective too, but returns once the state is copied into this rank's reusable host arena; one
background thread per rank then runs the save path (see `save.py`). At most one save is in flight: the
next `save` waits for it. A failure in the background is raised by the next `save()` or `wait()`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nvrx_hpc.ckpt.api import RestoreStats, SaveStats, Scheme
from nvrx_hpc.ckpt.context import Context
from nvrx_hpc.ckpt.drain import Drainer
from nvrx_hpc.ckpt.fsutil import TMP_SUFFIX, remove_quietly
from nvrx_hpc.ckpt.layout import Layout
from nvrx_hpc.ckpt.plan import plan_restore
from nvrx_hpc.ckpt.restore import gather_holdings, run_restore
from nvrx_hpc.ckpt.save import Staged, _note_drains, run_save
from nvrx_hpc.ckpt.settings import CheckpointSettings
from nvrx_hpc.ckpt.shardfile import Progress
from nvrx_hpc.ckpt.staging import HostArena
from nvrx_hpc.ckpt.transport import make_transport
from nvrx_hpc.ckpt.tree import flatten, load_into
from nvrx_hpc.core.errors import CheckpointError
from nvrx_hpc.core.safedir import private_dir

__all__ = ["AsyncCheckpointer", "SaveHandle"]

log = logging.getLogger(__name__)


class SaveHandle:
    """One save in flight. `wait()` returns its stats once committed, or raises its CheckpointError."""

    def __init__(self, step: int, stats: SaveStats, timeout: float) -> None:
        self.step = step
        self.stats = stats
        self._timeout = timeout
        self._done = threading.Event()
        self._error: CheckpointError | None = None
        self._reported = False

    def done(self) -> bool:
        return self._done.is_set()

    def _finish(self, error: CheckpointError | None) -> None:
        self._error = error
        self._done.set()

    def _settle(self, timeout: float | None) -> None:
        limit = self._timeout if timeout is None else timeout
        if not self._done.wait(limit):
            raise CheckpointError(
                f"checkpoint of step {self.step} still not committed after {limit:g} s",
                hint="a rank may be dead or stuck in a collective; check the other ranks' logs",
                step=self.step,
            )

    def _take_error(self) -> CheckpointError | None:
        if self._error is None or self._reported:
            return None
        self._reported = True
        return self._error

    def wait(self, timeout: float | None = None) -> SaveStats:
        """Block until this version is committed (or failed: CheckpointError, raised once)."""
        self._settle(timeout)
        error = self._take_error()
        if error is not None:
            raise error
        return self.stats


class AsyncCheckpointer:
    """Asynchronous checkpoints to node-local burst buffers with cross-node redundancy and atomic commits.

    Args:
        bb_dir: node-local directory (`{domain}` is replaced by the failure domain); default $NVRX_BB_DIR.
        shared_dir: shared directory that versions are drained to and restored from as a last resort.
        scheme: "none", "partner" (default) or "xor".
        comm: an mpi4py communicator, "mpi", "torch" (torch.distributed), "local", a Transport, or None to
            detect (torch.distributed if initialised, else MPI if initialised, else one rank).
        events: an EventLog for decisions (default: `$NVRX_RUN_DIR/events.jsonl` on rank 0 when set).
        progress: progress(phase, done_bytes, total_bytes), called from the background thread.
        **options: any other `CheckpointSettings` field (keep, set_size, drain_every, ...).

    Raises:
        CheckpointError: a bad setting, or a scheme this layout cannot honour (e.g. partner on one node).
    """

    def __init__(
        self,
        bb_dir: str | os.PathLike[str] | None = None,
        shared_dir: str | os.PathLike[str] | None = None,
        *,
        scheme: str | Scheme | None = None,
        comm: Any = None,
        settings: CheckpointSettings | None = None,
        events: Any = None,
        progress: Progress | None = None,
        **options: Any,
    ) -> None:
        if settings is None:
            settings = CheckpointSettings.from_config(
                bb_dir=None if bb_dir is None else os.fspath(bb_dir),
                shared_dir=None if shared_dir is None else os.fspath(shared_dir),
                scheme=scheme, **options,
            )
        self.settings = settings
        transport = make_transport(comm, settings.chunk_mib << 20)
        bb_root = Path(settings.bb_path())
        private_dir(bb_root, CheckpointError)  # ours, 0700: never a directory another user made or controls
        domains = [str(d) for d in _gather_plain(transport, settings.failure_domain)]
        layout = Layout(tuple(domains))
        errors = []
        try:
            layout.check(settings.scheme, settings.set_size)
        except CheckpointError as exc:
            errors.append(exc)
        if not errors and layout.leader(transport.rank):
            _sweep_tmp(bb_root)
        _gather_plain(transport, "ready")  # nobody writes before every node's leftovers are swept
        if errors:
            transport.close()
            raise errors[0]
        if events is None and transport.rank == 0 and os.environ.get("NVRX_RUN_DIR"):
            from nvrx_hpc.core.events import EventLog

            events = EventLog(Path(os.environ["NVRX_RUN_DIR"]) / "events.jsonl", source="ckpt")
        shared = Path(settings.shared_dir) if settings.shared_dir else None
        self._ctx = Context(
            transport=transport, layout=layout, settings=settings, bb_root=bb_root, shared_root=shared,
            hasher=ThreadPoolExecutor(1, thread_name_prefix="nvrx-ckpt-hash"), progress=progress,
            events=events if transport.rank == 0 else None,
            drainer=Drainer(settings.drain_bandwidth_mib_s * (1 << 20)) if shared and settings.drain_every else None,
            job_id=os.environ.get("SLURM_JOB_ID"),
        )
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="nvrx-ckpt")
        self._arena = HostArena()
        self._inflight: SaveHandle | None = None
        self._pending: CheckpointError | None = None
        self._closed = False
        self._abandoned = False
        self.last_restore: RestoreStats | None = None

    @property
    def rank(self) -> int:
        return self._ctx.rank

    @property
    def world_size(self) -> int:
        return self._ctx.transport.size

    @property
    def bb_root(self) -> Path:
        return self._ctx.bb_root

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError("the checkpointer is closed", hint="create a new AsyncCheckpointer")

    def _settle_inflight(self, raise_error: bool) -> float:
        """Wait for the save in flight. Its error (and one kept from before) is raised now or kept for later."""
        start = time.perf_counter()
        handle = self._inflight
        if handle is not None:
            handle._settle(None)
            self._inflight = None
            error = handle._take_error()
            if error is not None:
                self._pending = error
        if raise_error and self._pending is not None:
            error, self._pending = self._pending, None
            raise error
        return time.perf_counter() - start

    def save(self, state: Any, step: int) -> SaveHandle:
        """Snapshot `state` into host memory and return; the version commits in the background (collective).

        Raises:
            CheckpointError: the previous save failed (raised once, before this one starts), or `state` holds
                something that cannot be checkpointed.
        """
        self._check_open()
        start = time.perf_counter()
        waited = self._settle_inflight(raise_error=True)
        skeleton, tensors, paths = flatten(state)
        self._arena.stage(tensors, paths)
        stats = SaveStats(step=int(step), waited_s=waited)
        handle = SaveHandle(int(step), stats, self.settings.wait_timeout_s)
        self._submit_save(handle, Staged(skeleton, list(self._arena.entries), self._arena.data))
        stats.snapshot_s = time.perf_counter() - start
        return handle

    def _submit_save(self, handle: SaveHandle, staged: Staged) -> None:
        def job() -> None:
            error = None
            try:
                run_save(self._ctx, handle.step, staged, handle.stats)
            except CheckpointError as exc:
                error = exc
            except Exception as exc:
                if self._abandoned:  # its process group was torn down under it (in-process restart): expected
                    log.info("abandoned checkpoint of step %d stopped: %s: %s", handle.step, type(exc).__name__, exc)
                else:
                    log.exception("checkpoint of step %d failed in the background", handle.step)
                error = CheckpointError(f"checkpoint of step {handle.step} failed in the background: "
                                        f"{type(exc).__name__}: {exc}", hint="a bug in nvrx-hpc; see the log",
                                        step=handle.step)
            handle._finish(error)

        self._inflight = handle
        self._worker.submit(job)

    def wait(self, timeout: float | None = None) -> SaveStats | None:
        """Wait for the save in flight (if any); raises its CheckpointError, or one kept since `load`/`latest`."""
        handle = self._inflight
        if handle is None:
            self._settle_inflight(raise_error=True)
            return None
        try:
            return handle.wait(timeout)
        finally:
            if handle.done():
                self._inflight = None

    def _run(self, fn: Any, *args: Any) -> Any:
        return self._worker.submit(fn, *args).result()

    def latest(self) -> int | None:
        """The step of the newest version this job could restore, or None (collective; reads no tensor data)."""
        self._check_open()
        self._settle_inflight(raise_error=False)

        def find() -> int | None:
            plan, _ = plan_restore(gather_holdings(self._ctx))
            return None if plan is None else plan.step

        return self._run(find)

    def load(self, into: Any) -> int | None:
        """Restore the newest version that verifies into `into` (in place) and return its step (collective).

        Returns None when the job has no checkpoint at all. After a restore that needed replicas, parity or
        the shared copy, the version is protected again under the current node mapping in the background.

        Raises:
            CheckpointError: checkpoints exist but none can be restored, or `into` does not match.
        """
        self._check_open()
        self._settle_inflight(raise_error=False)
        restored = self._run(run_restore, self._ctx, self._arena)
        if restored is None:
            return None
        self.last_restore = restored.stats
        load_into(into, restored.skeleton, self._arena.tensors())
        if restored.plan.reprotect and self.settings.reprotect:
            staged = Staged(restored.skeleton, list(self._arena.entries), self._arena.data)
            self._submit_save(SaveHandle(restored.step, SaveStats(step=restored.step), self.settings.wait_timeout_s),
                              staged)
        return restored.step

    def close(self, timeout: float | None = None) -> None:
        """Finish the save in flight and pending drains, then release everything (collective)."""
        if self._closed:
            return
        limit = self.settings.wait_timeout_s if timeout is None else timeout
        try:
            self._settle_inflight(raise_error=False)
            if self._pending is not None:
                log.warning("closing with an unreported checkpoint failure: %s", self._pending.message)
            if self._inflight is None and self._ctx.drainer is not None:
                self._ctx.drainer.wait_idle(limit)
                self._run(self._final_drains)
        finally:
            self._closed = True
            self._worker.submit(self._ctx.transport.close).result()
            self._worker.shutdown(wait=True)
            if self._ctx.hasher is not None:
                self._ctx.hasher.shutdown(wait=True)
            if self._ctx.drainer is not None:
                self._ctx.drainer.close()

    def abandon(self) -> None:
        """Drop this checkpointer without the collective `close` (in-process restart: peers may be gone).

        A save in flight never commits; its threads are released once the call they are in returns (a
        transport call returns when the process group is torn down). Nothing already committed is touched.
        """
        if self._closed:
            return
        self._closed = self._abandoned = True
        self._worker.shutdown(wait=False, cancel_futures=True)
        if self._ctx.hasher is not None:
            self._ctx.hasher.shutdown(wait=False, cancel_futures=True)
        if self._ctx.drainer is not None:
            self._ctx.drainer.close()

    def _final_drains(self) -> None:
        assert self._ctx.drainer is not None
        done, failed = self._ctx.drainer.take_finished()
        _note_drains(self._ctx, self._ctx.gather({"drained": done, "drain_failed": failed}))

    def __enter__(self) -> AsyncCheckpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _gather_plain(transport: Any, value: str) -> list[str]:
    return [b.decode() for b in transport.allgather_bytes(value.encode())]


def _sweep_tmp(root: Path) -> None:
    """Delete half-written files (`*.tmp`) left by a crash; they are never part of a committed version."""
    for path in root.glob(f"v*/*{TMP_SUFFIX}"):
        log.info("removing leftover %s", path)
        remove_quietly(path)
