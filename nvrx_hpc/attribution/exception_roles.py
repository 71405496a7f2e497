"""The role of a Python exception line by its class name and message: a cause, a weak sign, or the cascade of
a failure elsewhere (lines.py asks it of every `python_exception` hit)."""

from __future__ import annotations

import re

from nvrx_hpc.attribution.api import Category, Role

__all__ = ["CASCADE_EXCEPTIONS", "FOLLOWER_MESSAGE", "exception_role"]

_N, _F = Category.NETWORK, Category.FRAMEWORK_CRASH

# Exceptions that are the visible end of a failure elsewhere, not a cause of their own.
CASCADE_EXCEPTIONS = ("DistBackendError", "ChildFailedError", "KeyboardInterrupt", "DistNetworkError", "SystemExit",
                      "SignalException", "HorovodInternalError", "RayActorError", "ActorDiedError",
                      "TrainingFailedError",  # Ray Train's wrapper: "inspect the previous error messages"
                      "ProcessRaisedException", "ProcessExitedException")  # mp.spawn's report of a child's end
# NCCL's own error types name where the trouble is; they are a cause only when nothing stronger is found.
_NCCL_EXCEPTIONS = {"ncclSystemError": _N, "ncclRemoteError": _N, "ncclInternalError": _F,
                    "ncclUnhandledCudaError": _F, "ncclInvalidUsage": _F}  # fmt: skip


# A transport's own error raised as a generic exception (tensorpipe's `RuntimeError: transport retry counter
# exceeded`): the network's, as the reporting side sees it (weak: the fault may be the peer's).
_TRANSPORT_MESSAGE = re.compile(r"transport retry counter exceeded|RNR retry counter exceeded|"
                                r"(?:ibv|IBV)_\w+ failed|local catastrophic error|"
                                r"^Connection (?:reset by peer|refused)$")  # a bare socket error (TCPStore's)


# A generic exception that reports a child process ended by SIGSEGV (`Worker failure: Local process 1 (pid 92077)
# exited with exit code -11`)
_SEGFAULTED = re.compile(r"exited with (?:exit code|code|signal) (?:-11|139|11\b|SIGSEGV)")
# An error that sends the reader to another rank: its rank follows that one (`Please check local rank 0 for ...`)
FOLLOWER_MESSAGE = r"[Pp]lease check (?:local |global )?rank \d+ for"
# Generic exceptions whose message says they follow a failure elsewhere (round 19): NCCL's watchdog aborted
# the communicator (round 29: `... on rank 1.  Original reason for failure was: [Rank 1] Watchdog caught ...`),
# torch.distributed.launch reporting its worker's exit (`Command '[..., '--local_rank=2', ...]' returned
# non-zero exit status 1`), horovodrun's summary of a worker's exit (round 24b), an error that sends the reader
# to another rank (Composer's followers: `Please check local rank 0 for more ...`, round 28), or a launcher's
# subprocess that ran torchrun and saw it fail (Ultralytics' DDP: `Command '[..., 'torch.distributed.run', ...]'
# returned non-zero exit status 1`, round 29).
_AFTERMATH_MESSAGE = re.compile(r"^NCCL communicator was aborted(?:\.?\s*$| on rank \d+\.)|"
                                r"'--local[-_]rank=\d+'.*returned non-zero|"
                                r"'torch\.distributed\.(?:run|launch)'.*returned non-zero|"
                                r"^Horovod detected that one or more processes exited|"
                                r"^Horovod has been shut down\. This was caused by an exception on one of the ranks|"
                                r"please check (?:the )?log messages above|"  # a wrapper of an error printed above
                                + FOLLOWER_MESSAGE)


# A worker the exception reports killed by SIGKILL (`DataLoader worker (pid 12847) is killed by signal: Killed.`): the
# kernel's OOM killer, as a rule; its own line, where the logs hold it, is the cause, whatever the stamps' order
# (a log collector's stamps put the exception first, round 83's check of the stamped corpus)
_SIGKILLED_WORKER = re.compile(r"killed by signal: Killed")
_WORKER_EXITED = re.compile(r"DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly")


def exception_role(name: str, role: Role, category: Category, message: str = "") -> tuple[Role, Category]:
    """(role, category) of a Python exception line by the exception's class name and message."""
    if _SIGKILLED_WORKER.search(message):
        return Role.WEAK, Category.HOST
    if _WORKER_EXITED.search(message):
        return Role.WEAK, category  # the worker's own end is reported beside it (its signal, the kernel's kill)
    if name not in CASCADE_EXCEPTIONS and _TRANSPORT_MESSAGE.search(message):
        return Role.WEAK, _N
    if _AFTERMATH_MESSAGE.search(message):
        return Role.CASCADE, category
    if name in CASCADE_EXCEPTIONS:
        return Role.CASCADE, category
    if name in _NCCL_EXCEPTIONS:
        return Role.WEAK, _NCCL_EXCEPTIONS[name]
    if _SEGFAULTED.search(message):
        return role, _F  # a worker the exception reports as segfaulted: a crash, not the code's error (round 54b)
    return role, category
