"""The GPU a line of `nvidia-smi -q` speaks of: the section it sits in (round 98).

`nvidia-smi -q` prints one section a GPU, headed by its bus (`GPU 00000000:3D:00.0`), and a throttle reason or an
error counter inside says nothing of which GPU it is. Its GPU is the section's, and its index is the section's
place in the listing: nvidia-smi lists every GPU of the node in index order unless the command picked some
(`nvidia-smi -i 2 -q`: the one section is GPU 2). A listing that picked several, or whose command is not shown and
that has one section only, gives the bus and no index.

The GPU is then named by its index, as NCCL's `[5]` names a line's, and local rank i runs on GPU i.

`nvidia-smi --query-gpu=index,...,clocks_event_reasons.hw_thermal_slowdown --format=csv` prints a row a GPU, and
only its header says which column an `Active` is in: a row whose thermal or hardware slowdown column is active is
that GPU slowing down (the older name of these columns is `clocks_throttle_reasons`).

A listing taken while the job runs, in which every GPU but one is in a working performance state (P0 to P2) and that
one sits in an idle one (P5 or lower), shows that GPU held back: its rank runs slower than its peers (round 101h, a
card stuck in P8 until its clocks were set again).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from nvrx_hpc.attribution.api import Category, Hit, Role

__all__ = ["smi_csv_throttles", "smi_low_pstate", "smi_section_gpus"]

_SECTION = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_PICKED = re.compile(r"\bnvidia-smi\b.*?(?:-i|--id)[ =](?P<ids>[\w:.,-]+)")
_SMI_Q = re.compile(r"\bnvidia-smi\b.*\s(?:-q|--query)\b")
_SLOWDOWN_COLUMN = re.compile(r"(?:clocks_event_reasons|clocks_throttle_reasons)\.(?:hw_thermal_slowdown|"
                              r"sw_thermal_slowdown|hw_slowdown)\b")
_WORKING, _IDLE = 2, 5  # the deepest performance state of a GPU at work, the first of an idle one
_READ_LIMIT = 8 << 20  # nvidia-smi output is small; a large file is a log that merely quotes it


@dataclasses.dataclass
class _Section:
    bus: str
    index: int | None
    first: int  # line numbers, 1-based, of the header and of the next section's header (or past the end)
    end: int


def _lines(path: Path) -> list[str]:
    try:
        if path.stat().st_size > _READ_LIMIT:
            return []
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _sections(path: Path) -> list[_Section]:
    lines = _lines(path)
    found: list[tuple[int, str, int]] = []  # (line, bus, the line of the command that printed it, 0 if not shown)
    picks: dict[int, list[int] | None] = {0: None}  # command line -> the indexes it picked (None: every GPU)
    command = 0
    for number, text in enumerate(lines, start=1):
        if _SMI_Q.search(text):
            command = number
            m = _PICKED.search(text)
            ids = m.group("ids").split(",") if m else []
            picked = [int(i) for i in ids if i.isdigit()]
            picks[number] = None if m is None else (picked if len(picked) == len(ids) else [])  # by bus: no index
        elif (m := _SECTION.match(text.strip())) is not None:
            found.append((number, m.group("bus"), command))
    out = []
    for i, (number, bus, command) in enumerate(found):
        run = [f[0] for f in found if f[2] == command]
        chosen = picks[command]
        if chosen is None:
            index = run.index(number) if len(run) >= 2 else None
        else:
            index = chosen[run.index(number)] if len(chosen) == len(run) else None
        end = found[i + 1][0] if i + 1 < len(found) else len(lines) + 1
        out.append(_Section(bus, index, number, end))
    return out


def smi_section_gpus(hits: Sequence[Hit], paths: Mapping[str, Path]) -> list[Hit]:
    """`hits` where each GPU line with no GPU of its own, inside a section of `nvidia-smi -q`, names that section's
    GPU: its index when the listing gives it, else its bus."""
    wanted = {h.source for h in hits if h.category is Category.GPU_HARDWARE and h.gpu is None and h.source in paths}
    sections = {source: _sections(paths[source]) for source in wanted}
    out = []
    for h in hits:
        where = next((s for s in sections.get(h.source, ()) if s.first < h.line < s.end), None)
        if where is not None and h.gpu is None and h.category is Category.GPU_HARDWARE:
            gpu = str(where.index) if where.index is not None else where.bus  # the cause puts its node before it
            fields = {**h.fields, "smi_bus": where.bus, **({} if where.index is None else {"smi_index": gpu})}
            h = dataclasses.replace(h, gpu=gpu, fields=fields)
        out.append(h)
    return out


def _slowed(row: str, header: str) -> str | None:
    """The GPU index of a CSV `row` whose slowdown column (by `header`) is Active, else None."""
    names = [n.strip() for n in header.split(",")]
    values = [v.strip() for v in row.split(",")]
    if len(names) != len(values) or "index" not in names:
        return None
    slow = any(values[i] == "Active" for i, n in enumerate(names) if _SLOWDOWN_COLUMN.search(n))
    return values[names.index("index")] if slow and values[names.index("index")].isdigit() else None


def smi_csv_throttles(hits: Sequence[Hit], paths: Mapping[str, Path]) -> list[Hit]:
    """`hits` where each CSV row of an nvidia-smi query whose header's slowdown column is Active becomes that GPU's
    thermal slowdown; rows that are active in another column stay context."""
    wanted = {h.source for h in hits if h.signature == "smi_csv_active" and h.source in paths}
    texts = {source: _lines(paths[source]) for source in wanted}
    out = []
    for h in hits:
        lines = texts.get(h.source) if h.signature == "smi_csv_active" else None
        if lines and 0 < h.line <= len(lines):
            header = next((t for t in reversed(lines[: h.line - 1]) if _SLOWDOWN_COLUMN.search(t) and
                           not t.lstrip().startswith(("$", "#")) and "--query" not in t), "")  # fmt: skip
            index = _slowed(lines[h.line - 1], header) if header else None
            if index is not None:
                h = dataclasses.replace(h, signature="gpu_thermal_slowdown", role=Role.ROOT, gpu=index,
                                        fields={**h.fields, "smi_index": index},
                                        summary="a GPU slows its clocks down (a thermal or hardware slowdown)")
        out.append(h)
    return out


def smi_low_pstate(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` where the one GPU of an `nvidia-smi -q` listing that idles while the others work becomes its slowdown."""
    states: dict[str, dict[str, Hit]] = {}
    for h in hits:
        if h.signature == "smi_perf_state" and h.gpu is not None:
            states.setdefault(h.source, {}).setdefault(h.gpu, h)
    low = set()
    for listing in states.values():
        idle = [h for h in listing.values() if int(h.fields["pstate"]) >= _IDLE]
        working = [h for h in listing.values() if int(h.fields["pstate"]) <= _WORKING]
        if len(idle) == 1 and len(working) >= 2 and len(idle) + len(working) == len(listing):
            low.add(id(idle[0]))
    return [dataclasses.replace(h, signature="gpu_thermal_slowdown", role=Role.ROOT,
                                summary=f"a GPU idles in performance state P{h.fields['pstate']} while its peers work")
            if id(h) in low else h for h in hits]
