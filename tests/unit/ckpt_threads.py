"""An in-process Transport for unit tests: N ranks as threads, messages through queues (no MPI needed)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nvrx_hpc.ckpt.api import Message


class ThreadWorld:
    """Mailboxes of a world of `size` thread-ranks."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._boxes: dict[tuple[int, int, int], queue.Queue] = {}
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(size)
        self._gather: list[Any] = [None] * size

    def box(self, src: int, dst: int, tag: int) -> queue.Queue:
        with self._lock:
            return self._boxes.setdefault((src, dst, tag), queue.Queue())

    def transport(self, rank: int) -> ThreadTransport:
        return ThreadTransport(self, rank)

    def run(self, fn: Callable[[ThreadTransport], Any], timeout: float = 60) -> list[Any]:
        """fn(transport) on every rank in its own thread; returns the results (re-raises the first error)."""
        results: list[Any] = [None] * self.size
        errors: list[BaseException] = []

        def body(rank: int) -> None:
            try:
                results[rank] = fn(self.transport(rank))
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                errors.append(exc)
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        if errors:
            raise errors[0]
        if any(t.is_alive() for t in threads):
            raise TimeoutError("thread ranks did not finish")
        return results


class ThreadTransport:
    def __init__(self, world: ThreadWorld, rank: int) -> None:
        self.world, self.rank, self.size = world, rank, world.size

    def allgather_bytes(self, blob: bytes) -> list[bytes]:
        w = self.world
        w._barrier.wait(30)
        w._gather[self.rank] = bytes(blob)
        w._barrier.wait(30)
        out = list(w._gather)
        w._barrier.wait(30)
        return out

    def exchange(self, sends: Sequence[Message], recvs: Sequence[Message]) -> None:
        for peer, buf, tag in sends:
            self.world.box(self.rank, peer, tag).put(np.array(buf, copy=True))
        for peer, buf, tag in recvs:
            got = self.world.box(peer, self.rank, tag).get(timeout=30)
            assert len(got) == len(buf), (len(got), len(buf))
            buf[:] = got

    def close(self) -> None:
        pass
