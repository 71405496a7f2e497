"""Loads PyTorch flight-recorder dumps (one file per rank; pickle or JSON, format versions 2.3-2.10)
into plain frozen dataclasses, through an unpickler that refuses every class: only dicts, lists,
tuples, strings, bytes, numbers, booleans and None can come out of it, and nothing is ever called.

A file that is not a dump, is truncated or holds anything but plain data raises `AttributionError`
naming the file; callers record it and go on with the other ranks. The work is bounded for any input:
a pickle may reference one container from many places (a few hundred bytes can describe a tree of
billions of nodes), so the loaded data is counted as the tree it stands for, up to `_NODES_PER_BYTE`
nodes per byte of file, before anything walks it.
"""

from __future__ import annotations

import ast
import io
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvrx_hpc.core.errors import AttributionError

__all__ = [
    "FREntry",
    "FRDump",
    "restricted_loads",
    "load_dump",
    "parse_dump",
    "rank_from_name",
    "SUPPORTED_MINOR",
    "MAX_DUMP_BYTES",
]

SUPPORTED_MINOR = range(3, 11)  # 2.3 .. 2.10
MAX_DUMP_BYTES = 512 * 1024 * 1024
_NODES_PER_BYTE = 4  # a real dump's tree is smaller than its file; a shared-structure bomb is not
_NODES_SLACK = 10_000
_MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError, MemoryError, OverflowError)
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json|bin|dump))?$")
_RANK_WORD = re.compile(r"rank[-_]?(\d+)")  # the worker's `rank-3.restart-1.pkl`: the rank, not the restart


class _PlainUnpickler(pickle.Unpickler):
    """Refuses every global: no class, function or module reaches the loaded data."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: only plain data is allowed")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id: only plain data is allowed")


def restricted_loads(data: bytes) -> Any:
    """Unpickle `data`, allowing only plain containers and scalars.

    Raises:
        pickle.UnpicklingError: the data names a class or function (nothing was called) or is malformed.
        EOFError / ValueError: the data is truncated or not a pickle.
    """
    return _PlainUnpickler(io.BytesIO(data)).load()


@dataclass(frozen=True)
class FREntry:
    """One recorded collective or p2p op. `op` is the profiling name without its `nccl:`/`gloo:` prefix."""

    record_id: int
    pg_id: str
    pg_name: str
    pg_desc: str
    seq: int
    p2p_seq: int
    op: str
    input_sizes: tuple
    output_sizes: tuple
    input_dtypes: tuple
    output_dtypes: tuple
    state: str
    time_created_ns: int | None
    completed: bool
    is_p2p: bool
    frame: str = ""


@dataclass(frozen=True)
class FRDump:
    """One rank's dump. `pg_config`: name -> (desc, global ranks); `pg_status`: local pg id ->
    (last enqueued, last started, last completed) collective sequence ids."""

    rank: int
    source: str
    version: str
    pg_config: dict[str, tuple[str, tuple[int, ...]]]
    pg_status: dict[str, tuple[int, int, int]]
    entries: tuple[FREntry, ...]

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])


def rank_from_name(name: str) -> int | None:
    """The global rank in a dump's file name: `rank-3.pkl`, `_dump_12`, `nccl_trace_rank_5`, `rank-2.restart-1.pkl`
    -> 3, 12, 5, 2."""
    m = _RANK_WORD.search(name) or _RANK_SUFFIX.search(name)
    return int(m.group(1)) if m else None


_SEQUENCES = frozenset((list, tuple))


def _tuple(value: Any) -> tuple:
    if type(value) not in _SEQUENCES:
        return value
    if _SEQUENCES.isdisjoint(map(type, value)):  # a flat list (sizes, dtypes): no call per element
        return tuple(value)
    return tuple([_tuple(v) for v in value])


def _int(value: Any, default: int = -1) -> int:
    if isinstance(value, bool) or value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


_RANKS_CACHE: dict[str, tuple[int, ...]] = {}


def _ranks_text(text: str) -> tuple[int, ...]:
    """'[0, 1, 2]' -> (0, 1, 2); the same strings recur in every dump, so they are parsed once."""
    if text not in _RANKS_CACHE:
        body = text.strip()
        try:
            if body.startswith("[") and body.endswith("]"):
                found = tuple(int(x) for x in body[1:-1].split(",") if x.strip())
            else:
                value = ast.literal_eval(body)
                found = tuple(int(r) for r in value) if isinstance(value, (list, tuple)) else ()
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            found = ()
        if len(_RANKS_CACHE) < 100_000:
            _RANKS_CACHE[text] = found
        return found
    return _RANKS_CACHE[text]


def _ranks(value: Any) -> tuple[int, ...]:
    if isinstance(value, str):
        return _ranks_text(value)
    if isinstance(value, (list, tuple)):
        return tuple(int(r) for r in value if isinstance(r, int) and not isinstance(r, bool))
    return ()


def _entry(raw: dict) -> FREntry:
    pg = raw.get("process_group") or ("", "")
    name = str(pg[0]) if len(pg) > 0 else ""
    desc = str(pg[1]) if len(pg) > 1 else ""
    profiling = str(raw.get("profiling_name") or "")
    frames = raw.get("frames") or []
    top = ""
    if isinstance(frames, list) and frames and isinstance(frames[-1], dict):
        user = [f for f in frames if isinstance(f, dict) and "torch/distributed" not in str(f.get("filename", ""))]
        f = (user or frames)[0]
        top = f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"
    done_ns = raw.get("time_discovered_completed_ns")
    state = str(raw.get("state") or "")
    return FREntry(
        record_id=_int(raw.get("record_id")),
        pg_id=str(raw.get("pg_id", "")),
        pg_name=name,
        pg_desc=desc,
        seq=_int(raw.get("collective_seq_id"), 0),
        p2p_seq=_int(raw.get("p2p_seq_id"), 0),
        op=profiling.partition(":")[2] or profiling,
        input_sizes=_tuple(raw.get("input_sizes") or ()),
        output_sizes=_tuple(raw.get("output_sizes") or ()),
        input_dtypes=_tuple(raw.get("input_dtypes") or ()),
        output_dtypes=_tuple(raw.get("output_dtypes") or ()),
        state=state,
        time_created_ns=_int(raw.get("time_created_ns"), 0) or None,
        completed=state == "completed" or bool(done_ns),
        is_p2p=bool(raw.get("is_p2p")),
        frame=top,
    )


_CONTAINERS = frozenset((dict, list, tuple))  # exact types: the loaders above make no subclasses


def _check_tree_size(data: Any, budget: int, source: str) -> None:
    """Count `data` as a tree (a shared container once per reference) and refuse it past `budget` nodes.

    Scalars are counted by their containers' lengths, never visited one by one: a dump is mostly scalars
    (some 50 per entry), and visiting each cost more than parsing the entries."""
    stack, seen = [data], 1
    while stack:
        obj = stack.pop()
        kind = type(obj)
        if kind is dict:
            seen += 2 * len(obj)
            if not _CONTAINERS.isdisjoint(map(type, obj)):
                stack.extend(k for k in obj if type(k) in _CONTAINERS)
            items = obj.values()
        elif kind is list or kind is tuple:
            seen += len(obj)
            items = obj
        else:
            continue
        if seen > budget:
            raise AttributionError(f"{source}: the dump describes more than {budget} values; refused as hostile",
                                   hint="a real dump is never larger unpacked than a few times its file")
        if not _CONTAINERS.isdisjoint(map(type, items)):
            stack.extend(v for v in items if type(v) in _CONTAINERS)


def parse_dump(data: Any, source: str, rank: int) -> FRDump:
    """Validate a decoded dump (a dict) and normalise it (pg_status strings to ints, lists to tuples).

    Raises:
        AttributionError: not a flight-recorder dump, a version outside 2.x, or malformed inside.
    """
    try:
        return _parse_dump(data, source, rank)
    except AttributionError:
        raise
    except _MALFORMED as exc:
        raise AttributionError(f"{source}: malformed dump ({type(exc).__name__}: {exc})") from None


def _parse_dump(data: Any, source: str, rank: int) -> FRDump:
    if not isinstance(data, dict) or "version" not in data:
        raise AttributionError(f"{source}: not a flight-recorder dump (no 'version' key at the top)")
    version = str(data["version"])
    m = re.fullmatch(r"(\d+)\.(\d+)", version)
    if not m or m.group(1) != "2":
        raise AttributionError(
            f"{source}: flight-recorder format {version!r} is not supported (2.3 to 2.10 are)",
            hint="a newer PyTorch may have changed the format; please report it with the dump",
        )
    entries = data.get("entries", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise AttributionError(f"{source}: 'entries' is not a list of records")
    config: dict[str, tuple[str, tuple[int, ...]]] = {}
    for key, pg in (data.get("pg_config") or {}).items():
        if isinstance(pg, dict):
            config[str(key)] = (str(pg.get("desc", "")), _ranks(pg.get("ranks")))
    status: dict[str, tuple[int, int, int]] = {}
    for key, st in (data.get("pg_status") or {}).items():
        if isinstance(st, dict):
            status[str(key)] = (
                _int(st.get("last_enqueued_collective")),
                _int(st.get("last_started_collective")),
                _int(st.get("last_completed_collective")),
            )
    parsed = tuple(_entry(e) for e in entries)
    return FRDump(rank=rank, source=source, version=version, pg_config=config, pg_status=status, entries=parsed)


def load_dump(path: Path, source: str | None = None, rank: int | None = None) -> FRDump:
    """Read one dump file (pickle or JSON, told apart by content).

    Raises:
        AttributionError: unreadable, too large, truncated, not plain data, or no rank in the name.
    """
    source = source or str(path)
    rank = rank if rank is not None else rank_from_name(path.name)
    if rank is None:
        raise AttributionError(
            f"{source}: cannot tell the rank from the file name",
            hint="name dumps <prefix><rank>, e.g. fr/rank-3.pkl (what TORCH_FR_DUMP_TEMP_FILE produces)",
        )
    try:
        size = path.stat().st_size
        if size > MAX_DUMP_BYTES:
            raise AttributionError(f"{source}: {size} bytes is too large for a flight-recorder dump")
        raw = path.read_bytes()
    except OSError as exc:
        raise AttributionError(f"{source}: cannot read: {exc.strerror or exc}") from None
    head = raw.lstrip()[:1]
    if head == b"{":
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, RecursionError, MemoryError, ValueError) as exc:
            raise AttributionError(f"{source}: truncated or invalid JSON dump: {type(exc).__name__}: {exc}") from None
    elif raw[:1] == b"\x80":
        try:
            data = restricted_loads(raw)
        except pickle.UnpicklingError as exc:
            what = "refused" if "refused" in str(exc) else "corrupt pickle"
            raise AttributionError(f"{source}: {what}: {exc}") from None
        except (EOFError, ValueError, IndexError, TypeError, KeyError, MemoryError, RecursionError, OverflowError,
                AttributeError) as exc:
            raise AttributionError(
                f"{source}: truncated or corrupt pickle ({type(exc).__name__}: {exc or 'data ended early'})"
            ) from None
    else:
        raise AttributionError(f"{source}: neither a pickled nor a JSON flight-recorder dump")
    _check_tree_size(data, _NODES_PER_BYTE * len(raw) + _NODES_SLACK, source)
    return parse_dump(data, source, rank)
