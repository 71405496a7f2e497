"""Transports behind one Protocol: one process, mpi4py buffer calls, or a private torch.distributed gloo group.

Every payload moves as raw bytes in chunks of at most `chunk_bytes` (MPI counts are C ints); nothing is
pickled: `allgather_bytes` gathers lengths first, then the bytes.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from nvrx_hpc.ckpt.api import Message, Transport
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["LocalTransport", "MpiTransport", "TorchTransport", "make_transport", "as_buffer"]

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 64 << 20
_SPIN_POLLS = 50  # then sleep 10 us, 20 us, ... up to _MAX_SLEEP between polls
_MAX_SLEEP = 0.0002


def as_buffer(blob: bytes) -> np.ndarray:
    """A writable uint8 array holding a copy of `blob` (torch refuses read-only buffers)."""
    return np.frombuffer(bytearray(blob), dtype=np.uint8)


def _chunks(n: int, chunk: int) -> list[tuple[int, int]]:
    return [(a, min(a + chunk, n)) for a in range(0, n, chunk)]


def _check_pairs(sends: Sequence[Message], recvs: Sequence[Message], rank: int) -> None:
    for peer, buf, _ in (*sends, *recvs):
        if buf.dtype != np.uint8 or buf.ndim != 1 or not buf.flags.c_contiguous:
            raise CheckpointError("transport buffers must be 1-D contiguous uint8 arrays", hint="a bug in nvrx-hpc")
        if peer == rank:
            raise CheckpointError(f"rank {rank} tried to send to itself", hint="a bug in nvrx-hpc")


class LocalTransport:
    """A job of one rank: gathers return the caller's blob; there is nobody to exchange with."""

    rank = 0
    size = 1

    def allgather_bytes(self, blob: bytes) -> list[bytes]:
        return [bytes(blob)]

    def exchange(self, sends: Sequence[Message], recvs: Sequence[Message]) -> None:
        _check_pairs(sends, recvs, 0)

    def close(self) -> None:
        pass


class MpiTransport:
    """mpi4py upper-case (buffer) calls on a duplicate of `comm`, so no message meets the application's."""

    def __init__(self, comm: Any, chunk_bytes: int = DEFAULT_CHUNK) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        level = MPI.Query_thread()
        if level < MPI.THREAD_SERIALIZED:
            raise CheckpointError(
                f"MPI was initialised with thread level {level}; the checkpointer calls MPI from its own thread",
                hint="leave mpi4py.rc.thread_level at 'multiple' (the default) or set it to 'serialized'",
            )
        self._comm = comm.Dup()
        self._chunk = chunk_bytes
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()

    def allgather_bytes(self, blob: bytes) -> list[bytes]:
        MPI = self._mpi
        sizes = np.zeros(self.size, dtype=np.int64)
        mine = np.array([len(blob)], dtype=np.int64)
        self._wait([self._comm.Iallgather([mine, MPI.INT64_T], [sizes, MPI.INT64_T])])
        counts = [int(s) for s in sizes]
        displs = [sum(counts[:i]) for i in range(self.size)]
        recv = np.empty(max(sum(counts), 1), dtype=np.uint8)
        send = np.frombuffer(blob, dtype=np.uint8) if blob else np.empty(0, dtype=np.uint8)
        self._wait([self._comm.Iallgatherv([send, MPI.BYTE], [recv, (counts, displs), MPI.BYTE])])
        return [recv[d : d + c].tobytes() for d, c in zip(displs, counts, strict=True)]

    def exchange(self, sends: Sequence[Message], recvs: Sequence[Message]) -> None:
        _check_pairs(sends, recvs, self.rank)
        MPI = self._mpi
        requests = []
        for peer, buf, tag in recvs:
            for a, b in _chunks(len(buf), self._chunk):
                requests.append(self._comm.Irecv([buf[a:b], MPI.BYTE], source=peer, tag=tag))
        for peer, buf, tag in sends:
            for a, b in _chunks(len(buf), self._chunk):
                requests.append(self._comm.Isend([buf[a:b], MPI.BYTE], dest=peer, tag=tag))
        self._wait(requests)

    def _wait(self, requests: list) -> None:
        """Wait for `requests`, sleeping between polls: a blocking MPI wait spins and takes a core from training."""
        test = self._mpi.Request.Testall
        delay, polls = 0.0, 0
        while not test(requests):
            polls += 1
            if polls > _SPIN_POLLS:
                time.sleep(delay)
                delay = min(max(2 * delay, 1e-5), _MAX_SLEEP)

    def close(self) -> None:
        if self._comm is not None:
            self._comm.Free()
            self._comm = None


class TorchTransport:
    """A private gloo group of the default torch.distributed world (created collectively, at construction)."""

    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK) -> None:
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise CheckpointError(
                "torch.distributed is not initialised",
                hint="call torch.distributed.init_process_group() before creating the checkpointer",
            )
        self._torch, self._dist = torch, dist
        # Its collectives time out like the default group's: with torch's default (30 min for gloo) a save in flight
        # waits that long for a hung peer, and so does the training thread's next save (in-process restart sets
        # a short collective timeout so that a hung peer ends the round quickly).
        self._group = dist.new_group(backend="gloo", timeout=_world_timeout(torch, dist))
        self._chunk = chunk_bytes
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()

    def allgather_bytes(self, blob: bytes) -> list[bytes]:
        torch, dist = self._torch, self._dist
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        dist.all_gather(sizes, torch.tensor([len(blob)], dtype=torch.int64), group=self._group)
        counts = [int(s.item()) for s in sizes]
        width = max(max(counts), 1)
        mine = torch.zeros(width, dtype=torch.uint8)
        if blob:
            mine[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        outs = [torch.empty(width, dtype=torch.uint8) for _ in range(self.size)]
        dist.all_gather(outs, mine, group=self._group)
        return [o[:c].numpy().tobytes() for o, c in zip(outs, counts, strict=True)]

    def exchange(self, sends: Sequence[Message], recvs: Sequence[Message]) -> None:
        _check_pairs(sends, recvs, self.rank)
        torch, dist = self._torch, self._dist
        ops = []
        for op, items in ((dist.irecv, recvs), (dist.isend, sends)):
            for peer, buf, tag in items:
                for a, b in _chunks(len(buf), self._chunk):
                    ops.append(dist.P2POp(op, torch.from_numpy(buf[a:b]), peer, self._group, tag))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    def close(self) -> None:
        if self._group is not None and self._dist.is_initialized():
            self._dist.destroy_process_group(self._group)
        self._group = None


def _world_timeout(torch: Any, dist: Any) -> Any:
    """The default group's collective timeout now (a timedelta), or None (torch's default) when torch cannot say."""
    try:
        return dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError):  # a private attribute: absent in another torch version
        return None


def make_transport(comm: Any = None, chunk_bytes: int = DEFAULT_CHUNK) -> Transport:
    """A transport for `comm`: a Transport, an mpi4py communicator, "mpi", "torch", "local", or None (detect).

    None picks torch.distributed when it is initialised, else MPI when mpi4py initialised it, else one rank.
    """
    if isinstance(comm, Transport):
        return comm
    if comm == "local":
        return LocalTransport()
    if comm == "torch":
        return TorchTransport(chunk_bytes)
    if comm == "mpi":
        from mpi4py import MPI

        return MpiTransport(MPI.COMM_WORLD, chunk_bytes)
    if comm is not None:
        if hasattr(comm, "Dup") and hasattr(comm, "Get_rank"):
            return MpiTransport(comm, chunk_bytes)
        raise CheckpointError(f"cannot checkpoint over a {type(comm).__name__}",
                              hint="pass an mpi4py communicator, 'mpi', 'torch', 'local' or a Transport")
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            log.info("checkpoint transport: torch.distributed (gloo group)")
            return TorchTransport(chunk_bytes)
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            log.info("checkpoint transport: MPI (COMM_WORLD)")
            return MpiTransport(MPI.COMM_WORLD, chunk_bytes)
    return LocalTransport()
