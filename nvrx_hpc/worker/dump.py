"""Stack and flight-recorder dumps of one rank, written into the run directory.

Both run on the worker's daemon thread, so they work while the training thread is stuck inside a
collective. Nothing here imports torch: the flight recorder is dumped only when the training has
already imported torch and initialised torch.distributed.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["StackFile", "dump_flight_recorder", "flight_recorder_ready"]

log = logging.getLogger(__name__)


class StackFile:
    """The rank's stacks file, opened once in append mode and kept open.

    The same open file serves the agent's `a.dump` request (`dump()`, from the daemon thread: every
    thread) and SIGUSR1 (`register_signal()`, faulthandler's C handler: works even when the daemon
    thread is dead or no Python code can run). Without a path, dumps go to stderr.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def _open(self) -> IO[str]:
        if self._file is None:
            if self.path is None:
                return sys.stderr
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # held open for the process lifetime
        return self._file

    def register_signal(self, signum: int = signal.SIGUSR1) -> bool:
        """Dump the receiving thread's stack into this file on `signum`; chains to a handler the training set.

        Only the thread that takes the signal (the main thread: the daemon thread blocks it) is dumped.
        faulthandler's all-threads dump, run from a signal handler, walks other threads' frames without
        the GIL and segfaults the rank when another thread is running Python at that moment
        (tests/unit/test_worker_process.py reproduces it); the agent's a.dump request, served with the
        GIL held, is the way to get every thread.
        """
        try:
            previous = signal.getsignal(signum)
            chain = callable(previous)  # chaining to SIG_DFL would re-raise it and end the process
            faulthandler.register(signum, file=self._open(), all_threads=False, chain=chain)
        except (OSError, ValueError, RuntimeError) as exc:
            log.warning("[worker] cannot register stack dumps on signal %s into %s: %s", signum, self.path, exc)
            return False
        return True

    def dump(self, reason: Any) -> str | None:
        """Append a header line and the Python stacks of every thread; returns the path (None: stderr).

        The dump is made in a scratch file and appended with one write, so a SIGUSR1 dump landing at the
        same moment cannot interleave with it.
        """
        out = self._open()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        header = f"# nvrx-hpc stack dump at {stamp} (pid {os.getpid()}), reason: {reason}\n"
        with tempfile.TemporaryFile() as scratch:
            faulthandler.dump_traceback(file=scratch, all_threads=True)
            scratch.seek(0)
            data = header.encode() + scratch.read()
        out.flush()
        os.write(out.fileno(), data)
        return self.path

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def flight_recorder_ready() -> bool:
    """True when torch is already imported and torch.distributed is initialised (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    dist = getattr(torch, "distributed", None)
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # a half-imported torch: no dump rather than a crash
        return False


def dump_flight_recorder(path: str, on_first: Callable[[], None] | None = None) -> str | None:
    """Write PyTorch's flight-recorder dump (opaque pickled bytes, never loaded here) atomically to `path`.

    Two passes: first without stack traces, which is instant; then the full dump, which replaces it.
    Symbolizing the stack traces imports some 800 modules on its first call (over 3 s on a busy node),
    longer than an agent waits before it terminates a hung rank, so the quick dump always lands first.
    `on_first` is called once the first file has landed. Returns the path, or None when torch.distributed
    is not initialised. The recorder holds entries only
    when TORCH_FR_BUFFER_SIZE was set before the process group was created.
    """
    if not flight_recorder_ready():
        return None
    dump = sys.modules["torch"]._C._distributed_c10d._dump_fr_trace
    try:
        quick = dump(includeStackTraces=False)
    except TypeError:  # a torch without the keyword: only the full dump exists
        quick = None
    if quick is not None:
        _write_atomic(path, quick)
        log.debug("flight recorder (no stack traces) written to %s", path)
        if on_first is not None:
            on_first()
    _write_atomic(path, dump())
    return path


def _write_atomic(path: str, data: Any) -> None:
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"_dump_fr_trace() returned {type(data).__name__}, expected bytes")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
