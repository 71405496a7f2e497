"""The recording side of the worker API: what the training thread calls, kept to a few attribute writes.

`heartbeat()` stores a counter and a monotonic time; sections, iterations and timeouts are appended to
a deque. While the rank is active the daemon thread (`nvrx_hpc.worker.sender`) picks them up on its own
20 Hz tick, so these calls do no I/O at all. Only after a second of silence does the thread sleep
until woken: then the next call writes one byte into a wake-up pipe, so the first heartbeat after a
pause (and the very first one) goes out at once.
"""

from __future__ import annotations

import itertools
import json
import logging
import operator
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from nvrx_hpc.worker.dump import StackFile
from nvrx_hpc.worker.env import WorkerEnv

__all__ = ["Client", "Section", "STATE_VERSION", "HEARTBEAT_INTERVAL", "check_timeouts_state"]

log = logging.getLogger(__name__)

STATE_VERSION = 1
HEARTBEAT_INTERVAL = 0.05  # seconds between two heartbeat messages at most: ~20 messages/s
BYE_WAIT = 1.0  # seconds the interpreter's exit waits for w.bye to leave
# A training thread that holds the GIL and releases it only for short system calls (a stat, a small
# read) starves other threads: CPython restarts a waiting thread's 5 ms switch timer every time the GIL
# changes hands, and the releasing thread takes it straight back. The link thread then never runs and
# a healthy rank looks hung. So when the link thread is overdue by STARVED seconds, heartbeat() and the
# event calls sleep YIELD seconds, at most once every YIELD_EVERY seconds (<= 2% of the training's time).
STARVED = 0.1
YIELD = 0.001
YIELD_EVERY = 0.05

messages: Any = None  # nvrx_hpc.core.messages, bound by the first Client
_monotonic = time.monotonic
_now = time.time
_sleep = time.sleep


class Section:
    """`with section(name):` — opens the section on entry and closes it on exit (exceptions included)."""

    __slots__ = ("_client", "_name")

    def __init__(self, client: Any, name: str) -> None:
        self._client = client
        self._name = name

    def __enter__(self) -> Section:
        self._client.start_section(self._name)
        return self

    def __exit__(self, *exc: object) -> bool:
        self._client.end_section(self._name)
        return False


def check_timeouts_state(state: Any) -> dict[str, Any]:
    """The timeouts held in a `state_dict()` result, validated and copied; raises TypeError/ValueError."""
    if not isinstance(state, Mapping):
        raise TypeError(f"load_state_dict() takes the dict that state_dict() returned, got {type(state).__name__}")
    if not state:
        return {}
    version = state.get("version")
    if version != STATE_VERSION:
        raise ValueError(
            f"worker state version {version!r} is not supported (expected {STATE_VERSION}); "
            "pass the dict saved from nvrx_hpc.worker.state_dict()"
        )
    timeouts = state.get("timeouts", {})
    if not isinstance(timeouts, Mapping) or not all(isinstance(k, str) for k in timeouts):
        raise ValueError(f"worker state 'timeouts' must map names to values, got {timeouts!r}")
    try:
        return json.loads(json.dumps(dict(timeouts)))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"worker state 'timeouts' is not JSON-able: {exc}") from None


class Client:
    """One rank's connection state. The training side calls the public methods; `Sender` drains them.

    Attributes shared with the sender thread (each written by one side only, except the `*_armed`
    flags: the sender sets them before it looks for work, the training side clears them when it wakes
    the sender) are plain attributes: under the GIL every store is atomic.
    """

    def __init__(self, env: WorkerEnv, *, hb_interval: float = HEARTBEAT_INTERVAL) -> None:
        global messages
        from nvrx_hpc.core import messages  # here, not at import: a rank without an agent never needs it

        self.env = env
        self.hb_interval = hb_interval
        self.rank = env.rank
        self.timeouts: dict[str, Any] = {}
        self.stop = False
        self.stop_reason: Any = None
        self.on_restart: Any = None  # called on the link thread with each a.restart (nvrx_hpc.inprocess sets it)
        self.last_iteration: int | None = None
        self.beats = 0
        self.last_beat = 0.0  # monotonic time of the last heartbeat()
        self.events: deque[Any] = deque()  # records of nvrx_hpc.core.messages, oldest first
        self.hb_armed = True
        self.ev_armed = True
        self.link_due = float("inf")  # monotonic time by which the link thread means to run again
        self._yielded_at = float("-inf")
        self.stacks = StackFile(env.stacks_path())
        self._counter = itertools.count(1)
        self._open: dict[str, int] = {}
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._sender: Any = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def wake_fd(self) -> int:
        """Read end of the wake-up pipe, for the sender's select()."""
        return self._rfd

    # ------------------------------------------------------------ lifecycle

    def start(self, *, register_signal: bool = True) -> Client:
        """Start the daemon thread (and the SIGUSR1 stack dump). Call once."""
        from nvrx_hpc.worker.sender import Sender

        if register_signal and self.env.stacks_path() is not None:
            self.stacks.register_signal()
        self._sender = Sender(self)
        self.link_due = _monotonic()
        self._sender.start()
        return self

    def close(self, *, wait: float = BYE_WAIT) -> None:
        """Send w.bye (waiting at most `wait` seconds while connected) and stop the daemon thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        sender = self._sender
        if sender is None:
            return
        self.push(messages.WorkerBye(rank=self.rank))
        sender.finish(wait)

    def wake(self) -> None:
        self.link_due = min(self.link_due, _monotonic())
        try:
            os.write(self._wfd, b"\0")
        except OSError:  # pipe full: the sender has wake-ups pending anyway
            pass

    # ------------------------------------------------------------ training side

    def heartbeat(self) -> None:
        self.beats = next(self._counter)
        self.last_beat = now = _monotonic()
        if self.hb_armed:
            self.hb_armed = False
            self.wake()
        elif now - self.link_due > STARVED:
            self._let_link_run(now)

    def push(self, msg: Any) -> None:
        self.events.append(msg)
        if self.ev_armed:
            self.ev_armed = False
            self.wake()
        elif _monotonic() - self.link_due > STARVED:
            self._let_link_run(_monotonic())

    def _let_link_run(self, now: float) -> None:
        """Hand the GIL to an overdue link thread for a moment (see STARVED)."""
        if now - self._yielded_at >= YIELD_EVERY:
            self._yielded_at = now
            _sleep(YIELD)

    def section(self, name: str) -> Section:
        return Section(self, name)

    def start_section(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"section name must be a non-empty string, got {name!r}")
        depth = self._open.get(name, 0)
        self._open[name] = depth + 1
        if depth == 0:
            self.push(messages.SectionMark(rank=self.rank, name=name, open=True, t=_now()))

    def end_section(self, name: str) -> None:
        depth = self._open.get(name, 0)
        if depth == 0:
            log.debug("[worker rank %s] end_section(%r) without a matching start_section; ignored", self.rank, name)
            return
        if depth == 1:
            del self._open[name]
            self.push(messages.SectionMark(rank=self.rank, name=name, open=False, t=_now()))
        else:
            self._open[name] = depth - 1

    def set_iteration(self, n: int) -> None:
        n = operator.index(n)
        self.last_iteration = n
        self.push(messages.Iteration(rank=self.rank, n=n, t=_now()))

    def stop_requested(self) -> bool:
        return self.stop

    def report_fault(self, round: int, reason: str, lost: tuple[int, ...] = ()) -> None:
        """In-process restart: the training function ended `round` with an error, or `lost` ranks never came back."""
        self.push(messages.WorkerFault(rank=self.rank, round=round, reason=reason[:500], lost=tuple(lost)))

    def enabled(self) -> bool:
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "timeouts": json.loads(json.dumps(self.timeouts))}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        timeouts = check_timeouts_state(state)
        self.timeouts = timeouts
        if timeouts:
            self.push(messages.WorkerTimeouts(rank=self.rank, timeouts=timeouts))
