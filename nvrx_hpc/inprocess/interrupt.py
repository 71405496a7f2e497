"""Getting a training thread out of the function it is in, from the worker's link thread.

The node agent's `a.restart` arrives on the link thread; the training runs on the main thread. The
link thread raises `RestartInterrupt` in the main thread (CPython's asynchronous exception), which
takes effect at its next Python instruction: at once in Python code, when the call returns in C code. A
rank blocked in a gloo collective comes out when a peer's sockets close (the peer tore its process
group down, or died) or at the process group's timeout.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["RestartInterrupt", "Interrupter"]

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc


class RestartInterrupt(BaseException):
    """Raised inside the training function when a peer failed. A BaseException, like KeyboardInterrupt,
    so that a training loop's `except Exception` does not swallow it."""

    def __init__(self, round: int = -1, reason: str = "") -> None:  # raised asynchronously without arguments
        super().__init__(f"in-process restart of round {round}: {reason}")
        self.round = round
        self.reason = reason


class Interrupter:
    """Raises RestartInterrupt in one thread, only while it is armed for a round (inside the function)."""

    def __init__(self, thread: threading.Thread | None = None) -> None:
        self._thread_id = (thread or threading.main_thread()).ident
        self._lock = threading.Lock()
        self._armed: int | None = None  # the round the function is running
        self.ended: dict[int, Any] = {}  # round -> the notice that ended it (kept for a round armed later)
        self.on_notice: Callable[[Any], None] | None = None

    def arm(self, round: int) -> None:
        """Entering the function for `round`; raises at once if that round has already ended."""
        with self._lock:
            notice = self.ended.get(round)
            if notice is None:
                self._armed = round
        if notice is not None:
            raise RestartInterrupt(round, getattr(notice, "reason", "") or "ended before it started")

    def disarm(self) -> None:
        """Leaving the function: no interrupt from now on, and none left pending."""
        with self._lock:
            self._armed = None
            _set_async_exc(ctypes.c_ulong(self._thread_id), None)

    def notice(self, msg: Any) -> None:
        """An `a.restart` (link thread): round `msg.round` ended; interrupt it if it is the running one."""
        with self._lock:
            self.ended.setdefault(msg.round, msg)
            if self._armed == msg.round:
                self._armed = None
                _set_async_exc(ctypes.c_ulong(self._thread_id), ctypes.py_object(RestartInterrupt))
        if self.on_notice is not None:
            self.on_notice(msg)
