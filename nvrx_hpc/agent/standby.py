"""The agent's side of standby steps: the tasks that wait here for their go, and the go they wait for.

A standby task (nvrx_hpc.launcher.standby) connects once its imports are done and says which attempt it
waits for. The launcher's go for that attempt may come before the task has connected (it was still
importing), so the last go is kept and a late task gets it at once. A task that waits for an attempt
older than the last go was left behind (the launcher started that attempt without it): it is told to exit.
"""

from __future__ import annotations

from nvrx_hpc.agent.server import WorkerLink
from nvrx_hpc.core import messages as m

__all__ = ["StandbyDesk"]


class StandbyDesk:
    def __init__(self) -> None:
        self._waiting: list[tuple[int, WorkerLink]] = []
        self._last_go: m.StandbyGo | None = None

    @property
    def waiting(self) -> dict[str, int]:
        """attempt (a string, as the wire wants map keys) -> tasks waiting for it."""
        counts: dict[str, int] = {}
        for restart, _link in self._waiting:
            counts[str(restart)] = counts.get(str(restart), 0) + 1
        return counts

    def wait(self, msg: m.WorkerStandby, link: WorkerLink) -> None:
        go = self._last_go
        if go is not None and go.restart >= msg.restart:
            self._send(link, msg.restart, go)
        else:
            self._waiting.append((msg.restart, link))

    def go(self, msg: m.StandbyGo) -> int:
        """Sends the go to every task waiting for this attempt (or an older one); returns how many it told."""
        self._last_go = msg
        told = [(restart, link) for restart, link in self._waiting if restart <= msg.restart]
        self._waiting = [(restart, link) for restart, link in self._waiting if restart > msg.restart]
        for restart, link in told:
            self._send(link, restart, msg)
        return len(told)

    def gone(self, link: WorkerLink) -> None:
        self._waiting = [(restart, known) for restart, known in self._waiting if known is not link]

    @staticmethod
    def _send(link: WorkerLink, restart: int, go: m.StandbyGo) -> None:
        ranks_on = go.ranks_on if restart == go.restart else ()  # left behind: no node of its own to train on
        link.send(m.AgentGo(restart=restart, ranks_on=ranks_on, env=go.env if ranks_on else {}))
