"""An `AssertionError` raised inside an installed framework is that framework's crash (round 27), and so is a
native library's own error (`RuntimeError: DeepEP error: ...`) raised there (round 40).

A bare `assert` in torch, DeepSpeed or Lightning checks the library's own state: when it fails, the
library is in a state its authors did not expect (FSDP's `p_assert` on a flat parameter's dtype). The
user's code did not raise it. The frame that raised it is the traceback's last, one to three lines above
the error line (its source line and `raise AssertionError(s)` between them). Ranks often print their
tracebacks interleaved, so the first error line of a message whose raising frame is adjacent decides for
every line of that message in the file. A library's checks of what the user gave it are the user's error,
not the library's state: frames in a configuration or argument module, a validation function or
`torch.testing` (DeepSpeed's `Check batch related parameters` in `runtime/config.py`) stay the application's, and
so does a message that holds the user's numbers against each other (`15 is not divisible by 2`, round 33).
rich's boxed tracebacks put each frame's source lines in the box under its header (`│ path.py:242 in f`): the
last header above the error, within a box's height, is the frame that raised it (round 28, ColossalAI).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Category, Hit, Role
from nvrx_hpc.attribution.signatures_localising import FRAMEWORK_PACKAGES

__all__ = ["library_asserts"]

_REACH = 3  # the frame line, its source line, `raise AssertionError(...)`, then the error
_RICH_REACH = 16  # a rich frame's header, its context lines (7 by default), the box's end, then the error
_LIBRARY_PATH = re.compile(r"/(?:site|dist)-packages/(?:" + FRAMEWORK_PACKAGES + r")/")
_USERS_INPUT = re.compile(r"config|argument|args|valid|testing|assert_close|check", re.IGNORECASE)
# a message that holds the user's numbers against each other (Megatron's `15 is not divisible by 2`), round 33
_USERS_NUMBERS = re.compile(r"divisible by|must be (?:a )?multiple of|must be (?:greater|less|smaller|larger) than")


def _checks_input(frame: Hit) -> bool:
    return _USERS_INPUT.search(frame.fields.get("path", "") + " " + frame.fields.get("func", "")) is not None


# a native library's own error, raised through its Python binding (`RuntimeError: DeepEP error: timeout (dispatch
# CPU)`, round 40; its kernel's `Failed: Assertion error internode.cu:1713 ...`, round 47): the library's state
_LIBRARY_ERROR = re.compile(r"^[A-Za-z][\w-]* [Ee]rror: |^Failed: Assertion error \S+\.(?:cu|cuh|cpp|cc|h|hpp):\d+")


def _is_assert(h: Hit) -> bool:
    exc = h.fields.get("exc")
    return h.signature == "python_exception" and h.role is Role.ROOT and (
        exc == "AssertionError" or exc == "RuntimeError" and _LIBRARY_ERROR.match(h.fields.get("msg", "")) is not None)


def _rich_library_frame(error: Hit, rich: dict[tuple[str, int], Hit]) -> bool:
    """Whether the last rich frame header above `error` (within a box's height) is a framework's own."""
    for d in range(1, _RICH_REACH + 1):
        frame = rich.get((error.source, error.line - d))
        if frame is not None:
            return _LIBRARY_PATH.search(frame.fields.get("path", "")) is not None and not _checks_input(frame)
    return False


def _bare(h: Hit) -> bool:
    return h.signature == "python_exception" and h.fields.get("exc") == "AssertionError" \
        and not (h.fields.get("msg") or "").strip()


def library_asserts(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with each application `AssertionError` raised in a framework's own frame made a framework crash; a
    bare one (no message) raised by the user's code is weak: the code checked something it reported elsewhere (a
    `NaN detected` line in the job's other file, round 53a)."""
    frames = {(h.source, h.line) for h in hits if h.signature == "library_frame" and not _checks_input(h)}
    rich = {(h.source, h.line): h for h in hits if h.signature == "rich_frame"}
    if not frames and not rich:
        return [dataclasses.replace(h, role=Role.WEAK) if _bare(h) else h for h in hits]
    inside: set[tuple[str, str]] = set()
    for h in hits:
        if _is_assert(h) and not _USERS_NUMBERS.search(h.fields.get("msg", "")) \
                and (any((h.source, h.line - d) in frames for d in range(1, _REACH + 1))
                              or _rich_library_frame(h, rich)):
            inside.add((h.source, h.fields.get("msg", "")))
    return [dataclasses.replace(h, category=Category.FRAMEWORK_CRASH)
            if _is_assert(h) and (h.source, h.fields.get("msg", "")) in inside
            else dataclasses.replace(h, role=Role.WEAK) if _bare(h) else h for h in hits]
