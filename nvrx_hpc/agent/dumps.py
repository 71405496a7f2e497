"""Asking ranks for their stacks and flight recorder, and waiting for the answers before stopping them.

A hung rank is asked to dump (a.dump on its worker link; SIGUSR1 for the faulthandler the worker API
registered) and gets `window_s` to do so before SIGTERM. The launcher's stop can arrive inside that
window: it ends its settle window as soon as every rank of a hang is found, often a few hundred
milliseconds after the dumps were asked for. Terminating then cut the dumps the verdict rests on, so a
stop first waits for the dumps still outstanding. A linked rank answers with w.dumped, which ends its
wait early; a rank reached only by the signal cannot answer.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nvrx_hpc.agent.registry import RankRecord
from nvrx_hpc.agent.server import WorkerLink
from nvrx_hpc.core import messages as m

__all__ = ["DumpDesk"]

_POLL_S = 0.02


@dataclass
class _Request:
    pid: int
    deadline: float  # time.monotonic()
    linked: bool  # asked over the worker link: an answer will come
    answered: bool = False


class DumpDesk:
    """The dump requests of one agent, by rank."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._requests: dict[int, _Request] = {}

    def request(self, records: Iterable[RankRecord], links: Mapping[int, WorkerLink], reason: str) -> None:
        deadline = time.monotonic() + self.window_s
        for record in records:
            link = links.get(record.rank)
            if link is not None:
                link.send(m.AgentDump(reason=reason))
            if record.source == "worker":  # the worker API registered faulthandler for SIGUSR1
                record.send_signal(signal.SIGUSR1)
            self._requests[record.rank] = _Request(record.pid, deadline, linked=link is not None)

    def answered(self, rank: int) -> None:
        request = self._requests.get(rank)
        if request is not None:
            request.answered = True

    def outstanding(self, record: RankRecord, now: float, answers_only: bool = False) -> bool:
        """A dump of this rank was asked for, its window is open, it has not answered and still runs.
        `answers_only`: count only requests an answer can end (a stop does not wait out a signal's window)."""
        request = self._requests.get(record.rank)
        if request is None or request.pid != record.pid or request.answered or now >= request.deadline:
            return False
        if answers_only and not request.linked:
            return False
        return record.alive()

    async def wait(self, records: list[RankRecord], answers_only: bool = False) -> None:
        """Until none of `records` has a dump outstanding; at most the window of the latest request."""
        while any(self.outstanding(r, time.monotonic(), answers_only) for r in records):
            await asyncio.sleep(_POLL_S)
