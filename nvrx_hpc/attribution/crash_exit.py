"""A launcher that saw its rank die by SIGSEGV or SIGILL reports a crash (round 16).

DeepSpeed's launcher (`'--local_rank=2' ...] exits with return code = -11`) and torchrun (`failed
(exitcode: -11) local_rank: 2`) report every worker that ends, and most of those ends are the teardown
after a failure elsewhere: such lines are cascades. A crash signal is not teardown. When the crashed
process printed nothing itself (no `Segmentation fault`, no stack), the launcher's line is the only
trace of the crash, and the peers' `ncclRemoteError: ... remote process exited` lines that follow are
its consequence. The line becomes a weak framework-crash cause of its rank: any cause printed as a
cause (a GPU's Xid, a traceback) still outranks it, and an earlier weak cause still comes first.
SIGBUS is left a cascade: it is as often a mapped file or /dev/shm that ran out as a crash (round 17).
A child ended by SIGKILL was killed from outside (the kernel's OOM killer, an administrator): the launchers
end the others with SIGTERM, or do not report them. With nothing printed as a cause it is a weak `unknown`
cause of its node, and the peers' remote-exit errors after it are its consequence (round 23).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Category, Hit, Role

_LAUNCHER_EXITS = ("ds_launcher_exit", "elastic_child_failed", "mp_spawn_exited")
_CRASH_SIGNALS = {"-11": "SIGSEGV", "-4": "SIGILL", "139": "SIGSEGV", "132": "SIGILL"}
_SIGNAL_CODES = {"SIGSEGV": "-11", "SIGILL": "-4", "SIGKILL": "-9"}  # mp.spawn names the signal itself


def crash_exits(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with each launcher report of a crash signal made a weak framework-crash cause."""
    out = []
    for h in hits:
        code = h.fields.get("code") or _SIGNAL_CODES.get(h.fields.get("signal") or "", "")
        signal = _CRASH_SIGNALS.get(code)
        if h.signature in _LAUNCHER_EXITS and signal and h.role is Role.CASCADE:  # placed or not (a one-node
            # DeepSpeed launcher prints no host, round 44)
            who = f"rank {h.rank}" if h.rank is not None else f"a child on {h.node}" if h.node else "a child"
            h = dataclasses.replace(h, role=Role.WEAK, category=Category.FRAMEWORK_CRASH, restartable=True,
                                    summary=f"the launcher saw {who} crash with {signal}")  # fmt: skip
        elif h.signature in _LAUNCHER_EXITS and code in ("-9", "137") and h.role is Role.CASCADE \
                and (h.node or h.signature == "mp_spawn_exited" and h.rank is not None):
            on = f" on {h.node}" if h.node else ""
            h = dataclasses.replace(h, role=Role.WEAK, category=Category.UNKNOWN, restartable=True,
                                    summary=f"the launcher{on} saw a child killed by SIGKILL")  # fmt: skip
        out.append(h)
    return out


_EXIT_ABORT_REACH = 10  # lines: the abort a dying interpreter prints right under its traceback


def aborts_after_exceptions(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with the C++ runtime's `terminate called without an active exception` made a cascade when it
    follows a Python exception of the same rank a few lines above in the same file: an uncaught exception
    ends the interpreter, and a C++ thread still running then (gloo's, a DataLoader's) aborts it so. The
    exception is the failure, not the abort."""
    raised = [(h.source, h.rank, h.line) for h in hits if h.signature == "python_exception" and h.role is Role.ROOT]
    out = []
    for h in hits:
        if h.signature == "cxx_runtime_abort" and "without an active exception" in h.text and any(
                source == h.source and rank == h.rank and 0 < h.line - line <= _EXIT_ABORT_REACH
                for source, rank, line in raised):
            h = dataclasses.replace(h, role=Role.CASCADE)
        out.append(h)
    return out
