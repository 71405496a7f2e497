"""`async_save` for the DCP adapter: stage in the caller, save in one long-lived thread per process.

    from nvrx_hpc.ckpt.dcp_async import async_save
    future = async_save(state, storage_writer=DcpWriter("/dev/shm/nvrx/{domain}"), checkpoint_id="step-100")
    ...                                   # training goes on
    future.result()                       # the save's Metadata, or its error

The same contract as `torch.distributed.checkpoint.async_save` (a concurrent.futures.Future: result(), done(),
errors raised by result()) and the same files, written by torch's synchronous `dcp.save` with the given writer.
torch's async_save starts a ThreadPoolExecutor and a thread per call and wraps four calls in its logging; on a
busy host the caller also waits for the scheduler to start that thread. Here the caller copies the state into
the adapter's kept host copy (ckpt.dcp_stage) and queues it; one thread, started by the first call, runs the
saves in call order, each after a barrier on the saves' group: the thread sleeps until every rank has staged.

The save's collectives (DCP's plan gather/scatter, its final reduce) run on a gloo group of their own, made by
the first call on every rank (collectively, in the caller) and again after the default group was replaced: on
the default group, torch's own async_save thread, a background thread, would interleave them with the
training thread's collectives. `process_group=` overrides it.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from concurrent.futures import Future
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from nvrx_hpc.ckpt import dcp_stage
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["async_save", "save_group"]

_lock = threading.Lock()
_group: tuple[Any, Any] = (None, None)  # (the default group, the saves' gloo group made on it)
_worker: _Worker | None = None


class _Worker:
    """One daemon thread that runs queued saves in order; the staged state is dropped once its save returned
    (so that dcp_stage refills the kept copy on the next save)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="nvrx-dcp-save", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            future, staged, kwargs = job
            del job
            if future.set_running_or_notify_cancel():
                try:
                    if not kwargs["no_dist"]:
                        # sleep in gloo until every rank staged: the save's planning before its first collective
                        # (about 1 ms of CPU a rank) would otherwise take a shared host's cores from the ranks
                        # still copying, whose blocking part is the one every rank waits for at its next step
                        dist.barrier(group=kwargs["process_group"])
                    future.set_result(dcp.save(staged, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - every error goes to result(), as torch's executor
                    future.set_exception(exc)
            del staged, kwargs, future

    def close(self) -> None:
        """Run the saves queued so far, then stop (at exit, as torch's executor threads are joined)."""
        if self.pid == os.getpid() and self.thread.is_alive():
            self.jobs.put(None)
            self.thread.join()


def _get_worker() -> _Worker:
    global _worker
    with _lock:
        if _worker is None or _worker.pid != os.getpid():  # a forked child has no thread of its parent's
            _worker = _Worker()
            atexit.register(_worker.close)
        return _worker


def save_group() -> Any:
    """The saves' gloo group: made collectively by every rank's first call, again after the default group
    was replaced (a restart). Its collectives time out like the default group's (ckpt.transport)."""
    from nvrx_hpc.ckpt.transport import _world_timeout

    global _group
    world = dist.distributed_c10d._get_default_group()
    with _lock:
        if _group[0] is not world:
            _group = (world, dist.new_group(backend="gloo", timeout=_world_timeout(torch, dist)))
        return _group[1]


def _host_copy(state_dict: dict[str, Any], writer: Any) -> dict[str, Any]:
    if getattr(writer, "cache_staging", True):
        writer.per_thread_copy_ahead = 0  # as FileSystemWriter.stage: the staged state is on the host already
        return dcp_stage.stage(state_dict)
    return _copy_state_dict(state_dict, _create_cpu_state_dict(state_dict), type_check=False)  # torch's way


def async_save(state_dict: dict[str, Any], *, storage_writer: Any, checkpoint_id: str | os.PathLike[str] | None = None,
               planner: Any = None, process_group: Any = None, no_dist: bool = False) -> Future:
    """Copy `state_dict` into host memory, queue its `dcp.save(..., storage_writer=...)`, return its Future.

    Returns once the host copy is made: the state may change from then on. Every rank calls it for every save,
    in the same order (DCP's collectives). The writer is used by one save at a time (a writer per save, as
    torch's FileSystemWriter, or one after the previous future's result)."""
    if storage_writer is None:
        raise CheckpointError("async_save needs a storage_writer", hint="pass storage_writer=DcpWriter(root)")
    distributed = not no_dist and dist.is_available() and dist.is_initialized()
    if distributed and process_group is None:
        process_group = save_group()
    # as torch's _stateful_to_state_dict, without its logging wrapper per key (0.16 ms for 8 keys here); a
    # tensor is never Stateful, and the Protocol check costs 5 us a value
    state_dict = {k: v if isinstance(v, torch.Tensor) or not isinstance(v, Stateful) else v.state_dict()
                  for k, v in state_dict.items()}
    staged = _host_copy(state_dict, storage_writer)
    future: Future = Future()
    _get_worker().jobs.put((future, staged, {
        "checkpoint_id": checkpoint_id, "storage_writer": storage_writer, "planner": planner,
        "process_group": process_group, "no_dist": not distributed}))
    return future
