"""The public worker API: module-level functions that forward to this process's client.

The first call decides: with NVRX_AGENT_SOCKET set (and a rank), a `Client` and its daemon thread
start; otherwise every call stays a no-op for the life of the process. A child of the rank process
(a forked DataLoader worker, a spawned multiprocessing worker: NVRX_WORKER_PID names its parent) never
reports as the rank: its calls are no-ops.
"""

from __future__ import annotations

import atexit
import faulthandler
import logging
import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

from nvrx_hpc.worker.client import STATE_VERSION, Client, check_timeouts_state
from nvrx_hpc.worker.env import WorkerEnv

__all__ = [
    "heartbeat",
    "section",
    "start_section",
    "end_section",
    "set_iteration",
    "state_dict",
    "load_state_dict",
    "stop_requested",
    "enabled",
]

log = logging.getLogger(__name__)


class _NullSection:
    __slots__ = ()

    def __enter__(self) -> _NullSection:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


_NULL_SECTION = _NullSection()


class _Null:
    """No agent: nothing is recorded, no thread runs. Timeouts still round-trip through state_dict()."""

    def __init__(self, timeouts: dict[str, Any] | None = None) -> None:
        self.timeouts: dict[str, Any] = timeouts or {}

    def heartbeat(self) -> None:
        pass

    def section(self, name: str) -> _NullSection:
        return _NULL_SECTION

    def start_section(self, name: str) -> None:
        pass

    def end_section(self, name: str) -> None:
        pass

    def set_iteration(self, n: int) -> None:
        pass

    def stop_requested(self) -> bool:
        return False

    def enabled(self) -> bool:
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "timeouts": dict(self.timeouts)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.timeouts = check_timeouts_state(state)


class _Lazy:
    """Before the first call: decide, install the real implementation, forward."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_setup(), name)


_impl: Any = _Lazy()
_setup_lock = threading.Lock()
_OWNER_ENV = "NVRX_WORKER_PID"  # set in the rank process; its children inherit it and stay off


def _setup() -> Any:
    global _impl
    with _setup_lock:
        if not isinstance(_impl, _Lazy):
            return _impl
        env = WorkerEnv.from_env()
        impl: Any = _Null()
        owner = os.environ.get(_OWNER_ENV)
        if env is not None and owner not in (None, str(os.getpid())):
            # a process the rank started (multiprocessing spawn, a subprocess): it is not the rank
            log.debug("[worker] pid %s is a child of rank process %s; heartbeats are off here", os.getpid(), owner)
            env = None
        if env is not None:
            os.environ[_OWNER_ENV] = str(os.getpid())
            try:
                impl = Client(env).start()
                atexit.register(_at_exit, impl)
            except Exception as exc:  # monitoring must never stop the training
                log.warning("[worker] cannot start the agent client (%r); heartbeats are off", exc)
                impl = _Null()
        _impl = impl
        return impl


def _at_exit(client: Client) -> None:
    """w.bye, then ignore SIGUSR1: once faulthandler is torn down a late SIGUSR1 would end the rank with it."""
    client.close()
    try:
        faulthandler.unregister(signal.SIGUSR1)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    except (ValueError, OSError, RuntimeError):  # not the main thread, or no such signal here
        pass


def _after_fork_in_child() -> None:
    global _impl
    timeouts = {} if isinstance(_impl, _Lazy) else dict(_impl.timeouts)  # never set up a client here
    _impl = _Null(timeouts)


os.register_at_fork(after_in_child=_after_fork_in_child)


def heartbeat() -> None:
    """Record that this rank is alive. ~0.2 µs; never does I/O on the calling thread."""
    _impl.heartbeat()


def section(name: str) -> Any:
    """Context manager: `with section("step"): ...`. Sections may nest and overlap."""
    return _impl.section(name)


def start_section(name: str) -> None:
    """Open section `name` (a repeated open of the same name nests)."""
    _impl.start_section(name)


def end_section(name: str) -> None:
    """Close section `name`; closing one that is not open is ignored (debug log)."""
    _impl.end_section(name)


def set_iteration(n: int) -> None:
    """Tell the agent the training iteration (the launcher's progress check reads it)."""
    _impl.set_iteration(n)


def state_dict() -> dict[str, Any]:
    """The calibrated timeouts, JSON-able: save it with the checkpoint."""
    return _impl.state_dict()


def load_state_dict(state: Mapping[str, Any]) -> None:
    """Restore timeouts saved by state_dict(); the agent merges them into its calibration."""
    _impl.load_state_dict(state)


def stop_requested() -> bool:
    """True once the launcher asked the ranks to checkpoint and exit (e.g. Slurm's time-limit warning)."""
    return _impl.stop_requested()


def link() -> Client | None:
    """This rank's agent client, or None without an agent (for nvrx_hpc.inprocess, not for training code)."""
    impl = _impl if not isinstance(_impl, _Lazy) else _setup()
    return impl if isinstance(impl, Client) else None


def enabled() -> bool:
    """True when this rank reports to a node agent (NVRX_AGENT_SOCKET set)."""
    return _impl.enabled()
