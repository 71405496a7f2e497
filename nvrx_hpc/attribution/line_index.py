"""Which lines hold the finder's match positions: their number, start and end, and how many lines a chunk has.

Counting newlines is most of a large scan's cost. Over a large buffer NumPy finds every newline at memory
speed and outside the GIL (so a scan thread and the classifying thread overlap); NumPy comes with h5py,
a dependency, and without it (or for small buffers, which do not pay for the import) `bytes.count`
gives the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CandidateLine", "locate_lines"]

CandidateLine = tuple[int, int, int]  # (newlines before the line, start offset, end offset: its "\n" or the limit)
NUMPY_MIN_BYTES = 1 << 20
_NUMPY: object | None = None


def _numpy():
    global _NUMPY
    if _NUMPY is None:
        try:
            import numpy
        except ImportError:
            numpy = False
        _NUMPY = numpy
    return _NUMPY or None


def locate_lines(data: bytes, limit: int, positions: Iterable[int]) -> tuple[list[CandidateLine], int]:
    """The lines of data[:limit] holding `positions` (sorted, each once), and the newlines in data[:limit].
    A position must not be a newline itself (the finders report characters of an anchor)."""
    starts = sorted({data.rfind(b"\n", 0, p) + 1 for p in positions if p < limit})
    np = _numpy() if limit >= NUMPY_MIN_BYTES else None
    if np is None:

        def newlines(begin: int, end: int) -> int:
            return data.count(b"\n", begin, end)
    else:
        is_newline = np.frombuffer(data, dtype=np.uint8, count=limit) == 10

        def newlines(begin: int, end: int) -> int:
            return int(np.count_nonzero(is_newline[begin:end]))

    lines: list[CandidateLine] = []
    before, prev = 0, 0
    for start in starts:
        before += newlines(prev, start)
        prev = start
        end = data.find(b"\n", start, limit)
        lines.append((before, start, limit if end < 0 else end))
    return lines, before + newlines(prev, limit)
