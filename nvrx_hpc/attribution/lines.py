"""One log line in, one `Hit` out: strip the rank prefixes, pick the first signature that matches, and
pull out rank, node, GPU and time. Pure functions; the scanner decides which lines get here."""

from __future__ import annotations

import re
from datetime import datetime

from nvrx_hpc.attribution.api import Hit, Role
from nvrx_hpc.attribution.signatures import CASCADE_EXCEPTIONS, CATALOG, Signature

__all__ = ["classify_line", "parse_time", "LineContext", "split_prefix", "MAX_TEXT"]

MAX_TEXT = 400  # characters of a line kept in a hit

_SRUN_LABEL = re.compile(r"^\s*(\d{1,7}): ")
_TORCH_RANK = re.compile(r"^\[rank(\d{1,7})\]:\s?")
_INLINE_RANK = re.compile(r"\[Rank (\d{1,7})\]|\bRank (\d{1,7}):|\brank (\d{1,7})\b:|\[rank(\d{1,7})\]")
_NCCL_PREFIX = re.compile(r"^(?P<host>[A-Za-z][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]")
_NODE_WORD = re.compile(r"\bnode[:=] ?(?P<node>[A-Za-z][\w.-]*)")
_DEVICE_WORD = re.compile(r"\bDevice[:=] ?(?P<dev>\d+)")
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
_GLOG = re.compile(r"\[[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")


class LineContext:
    """What a file says about all its lines: the rank/node it belongs to and the year for glog stamps."""

    __slots__ = ("source", "rank", "node", "year", "file_index")

    def __init__(
        self, source: str, *, rank: int | None = None, node: str | None = None, year: int | None = None,
        file_index: int = 0,
    ) -> None:
        self.source = source
        self.rank = rank
        self.node = node
        self.year = year if year is not None else datetime.now().year
        self.file_index = file_index


def split_prefix(line: str) -> tuple[int | None, str]:
    """Strip `srun --label` (`12: `) and torch (`[rank12]:`) prefixes; return (rank or None, the rest)."""
    rank = None
    m = _SRUN_LABEL.match(line)
    if m:
        rank = int(m.group(1))
        line = line[m.end() :]
    m = _TORCH_RANK.match(line)
    if m:
        rank = int(m.group(1)) if rank is None else rank
        line = line[m.end() :]
    return rank, line


def _frac(digits: str | None) -> float:
    return float("0." + digits) if digits else 0.0


def parse_time(text: str, year: int | None = None) -> float | None:
    """Epoch seconds from the first ISO (`2024-04-20T09:09:37`, `2024-04-20 09:09:37,123`) or glog
    (`[E1016 03:31:38.928`) stamp in `text`, read as local time; None when there is none."""
    m = _ISO.search(text)
    try:
        if m:
            y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
            return datetime(y, mo, d, h, mi, s).timestamp() + _frac(m.group(7))
        m = _GLOG.search(text)
        if m:
            mo, d, h, mi, s = (int(g) for g in m.groups()[:5])
            return datetime(year or datetime.now().year, mo, d, h, mi, s).timestamp() + _frac(m.group(6))
    except ValueError:  # 2024-13-45 is not a time: treat the line as untimed
        return None
    return None


def _summary(sig: Signature, fields: dict[str, str]) -> str:
    try:
        return sig.summary.format_map({k: v for k, v in fields.items()})
    except (KeyError, IndexError, ValueError):
        return sig.summary.split("{")[0].strip() or sig.id


def _first_int(m: re.Match[str] | None) -> int | None:
    if not m:
        return None
    for g in m.groups():
        if g is not None:
            return int(g)
    return None


def classify_line(
    raw: str, line_no: int, ctx: LineContext, catalog: tuple[Signature, ...] = CATALOG
) -> Hit | None:
    """The hit for one line (1-based `line_no`), or None when no signature matches it."""
    prefix_rank, text = split_prefix(raw.rstrip("\r\n"))
    for sig in catalog:
        m = sig.compiled().search(text)
        if m:
            break
    else:
        return None
    fields = {k: v for k, v in m.groupdict().items() if v is not None}
    role = sig.role
    exc = fields.get("exc", "")
    if sig.id == "python_exception" and exc.rpartition(".")[2] in CASCADE_EXCEPTIONS:
        role = Role.CASCADE
    rank = prefix_rank
    if rank is None and "rank" in fields:
        rank = int(fields.pop("rank"))
    if rank is None:
        rank = _first_int(_INLINE_RANK.search(text))
    if rank is None:
        rank = ctx.rank
    node = fields.pop("failed", None) or fields.pop("node", None)
    fields.pop("node", None)
    gpu = fields.pop("gpu", None)
    nccl = _NCCL_PREFIX.match(text)
    if nccl:
        node = node or nccl.group("host")
        gpu = gpu or nccl.group("dev")
    if node is None:
        word = _NODE_WORD.search(text)
        node = word.group("node") if word else ctx.node
    if gpu is None:
        dev = _DEVICE_WORD.search(text)
        gpu = dev.group("dev") if dev else None
    if rank is None and fields.get("tasks", "").isdigit():
        rank = int(fields["tasks"])
    shown = dict(fields)
    if node:
        shown.setdefault("node", node)
    if gpu:
        shown.setdefault("gpu", gpu)
    return Hit(
        signature=sig.id,
        category=sig.category,
        role=role,
        source=ctx.source,
        line=line_no,
        text=raw.strip()[:MAX_TEXT],
        time=parse_time(text, ctx.year),
        rank=rank,
        node=node,
        gpu=gpu,
        fields=fields,
        order=(ctx.file_index, line_no),
        restartable=sig.restartable,
        summary=_summary(sig, shown),
    )
