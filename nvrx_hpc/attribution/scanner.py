"""The log scanner: finds the lines that may match a signature fast, then classifies only those.

Finding runs over whole chunks, never line by line in Python. Engines, fastest first:
`hyperscan` (the catalog's anchor literals, if the package is installed), `re2` (the whole catalog as
one combined pattern, if google-re2 is installed), `grep` (GNU `grep -F` with the anchor literals, on
files), and `python` (a `bytes.find` pass per anchor literal over each chunk; always there).
`auto` picks the fastest one present. Every engine yields the same hits: each candidate line is
classified by `lines.classify_line`, which applies the catalog in order.

A file is read in chunks of a few MB; two worker threads find and locate the candidate lines of the
next chunks (hyperscan, the reads and NumPy's newline counting release the GIL) while the calling
thread classifies the current one, so both cores of a small box work.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from nvrx_hpc.attribution.api import Hit
from nvrx_hpc.attribution.line_index import CandidateLine, locate_lines
from nvrx_hpc.attribution.lines import LineContext, classify_line
from nvrx_hpc.attribution.signatures import CATALOG, Signature
from nvrx_hpc.core.errors import AttributionError

__all__ = ["ENGINES", "Scanner", "available_engines", "prefilter_anchors", "combined_pattern"]

log = logging.getLogger(__name__)

ENGINES = ("auto", "hyperscan", "re2", "grep", "python")
CHUNK = 4 * 1024 * 1024  # small enough for the allocator to reuse its memory, large enough to amortise each call
_WORKERS = 2
_GREP_MB_PER_S = 50.0  # a pessimistic speed, only to size grep's deadline


def prefilter_anchors(catalog: Iterable[Signature] = CATALOG) -> list[str]:
    """The anchor literals of the catalog, minus those that contain another one (it finds them anyway)."""
    anchors = sorted({a for sig in catalog for a in sig.anchors}, key=lambda a: (len(a), a))
    kept: list[str] = []
    for a in anchors:
        if not any(k in a for k in kept):
            kept.append(a)
    return kept


def combined_pattern(catalog: Iterable[Signature] = CATALOG) -> str:
    """All signatures as one alternation, named groups and `^` anchors dropped (for re2 and benchmarks)."""
    parts = [re.sub(r"\(\?P<\w+>", "(?:", sig.pattern.removeprefix("^")) for sig in catalog]
    return "|".join(f"(?:{p})" for p in parts)


def _module(name: str):
    try:
        return __import__(name)
    except ImportError:
        return None


def available_engines() -> list[str]:
    """The engines usable here, fastest first."""
    found = []
    if _module("hyperscan") is not None:
        found.append("hyperscan")
    if _module("re2") is not None:
        found.append("re2")
    if shutil.which("grep"):
        found.append("grep")
    found.append("python")
    return found


class _PythonFinder:
    def __init__(self, anchors: list[str]) -> None:
        self._anchors = [a.encode() for a in anchors]

    def positions(self, data: bytes) -> Iterator[int]:
        find = data.find
        for anchor in self._anchors:
            i = find(anchor)
            while i >= 0:
                yield i
                end = find(b"\n", i)
                if end < 0:
                    break
                i = find(anchor, end)


class _HyperscanFinder:
    def __init__(self, anchors: list[str]) -> None:
        import hyperscan

        self._hyperscan = hyperscan
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        exprs = [re.escape(a).encode() for a in anchors]
        self._db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=[0] * len(exprs))
        self._per_thread = threading.local()  # a scratch space serves one scan at a time

    def positions(self, data: bytes) -> list[int]:
        ends: list[int] = []

        def on_match(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            ends.append(end - 1)

        scratch = getattr(self._per_thread, "scratch", None)
        if scratch is None:
            scratch = self._per_thread.scratch = self._hyperscan.Scratch(self._db)
        self._db.scan(data, match_event_handler=on_match, scratch=scratch)
        return ends


class _Re2Finder:
    def __init__(self, catalog: tuple[Signature, ...]) -> None:
        import re2

        self._pattern = re2.compile(combined_pattern(catalog).encode())

    def positions(self, data: bytes) -> Iterator[int]:
        pos, n = 0, len(data)
        search = self._pattern.search
        while pos < n:
            m = search(data, pos)
            if not m:
                return
            yield m.start()
            end = data.find(b"\n", m.end())
            pos = n if end < 0 else end + 1


_Finder = _PythonFinder | _HyperscanFinder | _Re2Finder
_PREPARED: dict[tuple[int, str], tuple[tuple[Signature, ...], list[str], _Finder]] = {}


def _prepared(catalog: tuple[Signature, ...], engine: str) -> tuple[list[str], _Finder]:
    """The catalog's anchors and its finder for `engine`, made once per process: they cost more than scanning a
    job's logs (tens of ms, the hyperscan database most), and a service or the evaluation harness attributes many."""
    key = (id(catalog), engine)
    entry = _PREPARED.get(key)
    if entry is None or entry[0] is not catalog:  # kept beside its catalog, so an id is never reused while cached
        if len(_PREPARED) > 16:  # catalogs made on the fly (tests): keep the cache small
            _PREPARED.clear()
        anchors = prefilter_anchors(catalog)
        if engine == "hyperscan":
            finder: _Finder = _HyperscanFinder(anchors)
        elif engine == "re2":
            finder = _Re2Finder(catalog)
        else:  # grep works on files; text given in memory goes through the python finder
            finder = _PythonFinder(anchors)
        entry = _PREPARED[key] = (catalog, anchors, finder)
    return entry[1], entry[2]


class Scanner:
    """Scans text and files against a catalog. `engine`: one of ENGINES (default auto); files are read
    `chunk_size` bytes at a time (cut at the last newline).

    Raises:
        AttributionError: the engine asked for is unknown or not installed here.
    """

    def __init__(self, catalog: tuple[Signature, ...] = CATALOG, engine: str = "auto", chunk_size: int = CHUNK) -> None:
        self.catalog = catalog
        self.chunk_size = chunk_size
        present = available_engines()
        if engine not in ENGINES:
            raise AttributionError(
                f"unknown scan engine {engine!r}; engines are {', '.join(ENGINES)}", hint="use auto"
            )
        if engine != "auto" and engine not in present:
            raise AttributionError(
                f"scan engine {engine!r} is not available here (available: {', '.join(present)})",
                hint="pip install hyperscan / google-re2, or use auto",
            )
        self.engine = present[0] if engine == "auto" else engine
        self.anchors, self._finder = _prepared(catalog, self.engine)

    # ---- text in memory ------------------------------------------------------------------------
    def scan_bytes(self, data: bytes, ctx: LineContext, *, first_line: int = 1) -> list[Hit]:
        """Hits in `data` (whole lines); `first_line` is the number of its first line."""
        return self._scan(data, len(data), ctx, first_line)[0]

    def scan_text(self, text: str, ctx: LineContext) -> list[Hit]:
        return self.scan_bytes(text.encode("utf-8", "replace"), ctx)

    def _scan(self, data: bytes, limit: int, ctx: LineContext, first_line: int) -> tuple[list[Hit], int]:
        """Hits in the lines of data[:limit], and the number of newlines there."""
        return self._classify(data, self._candidates(data, limit), ctx, first_line)

    def _candidates(self, data: bytes, limit: int) -> tuple[list[CandidateLine], int]:
        """The lines of data[:limit] that may match, and its newlines (work done mostly outside the GIL)."""
        return locate_lines(data, limit, self._finder.positions(data))

    def _classify(
        self, data: bytes, candidates: tuple[list[CandidateLine], int], ctx: LineContext, first_line: int
    ) -> tuple[list[Hit], int]:
        """Hits among the candidate lines, and the number of newlines of the chunk they came from."""
        lines, newlines = candidates
        hits: list[Hit] = []
        for before, start, end in lines:
            hit = classify_line(data[start:end].decode("utf-8", "replace"), first_line + before, ctx, self.catalog)
            if hit is not None:
                hits.append(hit)
        return hits, newlines

    # ---- files ---------------------------------------------------------------------------------
    def scan_file(self, path: Path, ctx: LineContext) -> list[Hit]:
        """Hits in one file.

        Raises:
            AttributionError: the file cannot be read (missing, a directory, no permission).
        """
        try:
            if not path.is_file():
                raise AttributionError(f"{ctx.source}: not a regular file (or missing)")
            size = path.stat().st_size
            if self.engine == "grep" and size > 1024 * 1024:
                return self._grep_file(path, size, ctx)
            if size <= self.chunk_size:  # most logs: one read, no threads to start
                data = path.read_bytes()
                return self._scan(data, len(data), ctx, 1)[0]
            return self._scan_chunks(path, ctx)
        except OSError as exc:
            raise AttributionError(f"{ctx.source}: cannot read: {exc.strerror or exc}") from None

    def _scan_chunks(self, path: Path, ctx: LineContext) -> list[Hit]:
        """Chunks are read here in order; worker threads find and locate candidate lines of the next ones
        (file reads, hyperscan and NumPy run outside the GIL) while this thread classifies, in order."""
        hits: list[Hit] = []
        line_no = 1
        in_flight: deque[tuple[bytes, Future[tuple[list[CandidateLine], int]]]] = deque()

        def classify_oldest() -> int:
            data, candidates = in_flight.popleft()
            found, lines = self._classify(data, candidates.result(), ctx, line_no)
            hits.extend(found)
            return line_no + lines

        with open(path, "rb") as f, ThreadPoolExecutor(_WORKERS, thread_name_prefix="nvrx-scan") as pool:
            for data, cut in self._chunks(f):
                in_flight.append((data, pool.submit(self._candidates, data, cut)))
                if len(in_flight) > _WORKERS:  # bounds memory to a few chunks
                    line_no = classify_oldest()
            while in_flight:
                line_no = classify_oldest()
        return hits

    def _chunks(self, f: BinaryIO) -> Iterator[tuple[bytes, int]]:
        """(data, cut): about `chunk_size` bytes of the file, whose lines up to `cut` are whole."""
        carry = b""
        while True:
            block = f.read(self.chunk_size)
            data = carry + block if carry else block
            if not block:
                if data:
                    yield data, len(data)
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # one enormous line so far: keep reading
                carry = data
                continue
            yield data, cut
            carry = data[cut:]

    def _grep_file(self, path: Path, size: int, ctx: LineContext) -> list[Hit]:
        argv = ["grep", "-a", "-n", "-F"]
        for anchor in self.anchors:
            argv += ["-e", anchor]
        argv += ["--", str(path)]
        deadline = 30 + size / (_GREP_MB_PER_S * 1e6)
        env = {**os.environ, "LC_ALL": "C"}
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=deadline, env=env, check=False)
        except subprocess.TimeoutExpired:
            raise AttributionError(f"{ctx.source}: grep took over {deadline:.0f} s") from None
        if proc.returncode not in (0, 1):
            log.warning("grep failed on %s (%s); scanning it in Python", path, proc.stderr[-200:])
            return self._scan_chunks(path, ctx)
        hits = []
        for out in proc.stdout.splitlines():
            num, _, raw = out.partition(b":")
            hit = classify_line(raw.decode("utf-8", "replace"), int(num), ctx, self.catalog)
            if hit is not None:
                hits.append(hit)
        return hits
