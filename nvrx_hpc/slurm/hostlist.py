"""Slurm hostlists: expand `n[01-10,15]` to names and compress names back to one string.

Expansion follows Slurm's own rules (checked against `scontrol show hostnames` of 22.05):

* a top-level list is separated by commas (or whitespace); commas inside brackets separate ranges;
* a range `lo-hi` keeps the zero padding of `lo` (`n[08-10]` gives n08 n09 n10; `n[1-02]` gives n1 n2);
* several brackets in one name give their cartesian product, the first bracket outermost
  (`gpu-a[1-2]-b[3-4]` gives gpu-a1-b3 gpu-a1-b4 gpu-a2-b3 gpu-a2-b4);
* duplicates are kept, in order, as Slurm keeps them.

Expansion is a little more lenient than 22.05 (which rejects text after a single bracket, such as
`n[1-2]-ib`; newer Slurm accepts it), and stricter where 22.05 silently prints garbage (`n[1-`).
Malformed input raises `HostlistError`, which is both a `SlurmParseError` and a `ValueError`.

Compression sorts and de-duplicates, then writes each run of names that differ only in a trailing
number as one bracket: `compress(["n3", "n1", "n2", "n10"]) == "n[1-3,10]"`. Names that do not end in a
digit stay as they are, so every string `compress` writes is accepted by Slurm 22.05 and later.
`expand(compress(names)) == sort_hosts(names)`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from nvrx_hpc.core.errors import SlurmParseError

__all__ = ["HostlistError", "MAX_HOSTS", "expand", "compress", "sort_hosts", "host_sort_key"]

# The most names one hostlist may expand to. Large clusters have tens of thousands of nodes; a hostlist
# such as n[1-999999999] is a typo or an attack, and must not eat the memory of a node agent.
MAX_HOSTS = 1_000_000

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")
_NOT_IN_NAMES = set("[],") | set(" \t\r\n")


class HostlistError(SlurmParseError, ValueError):
    """A hostlist string (or a name given to `compress`) is malformed."""

    def __init__(self, why: str, text: str) -> None:
        super().__init__(f"hostlist ({why})", text)
        self.why = why
        self.hint = "write node ranges as prefix[1-4,7] or prefix[01-10]; see `scontrol show hostnames`"


def _split_top_level(text: str) -> list[str]:
    """Split on commas and whitespace outside brackets; reject unbalanced brackets."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for pos, char in enumerate(text):
        if char == "[":
            if depth:
                raise HostlistError(f"nested '[' at position {pos}", text)
            depth = 1
        elif char == "]":
            if not depth:
                raise HostlistError(f"']' without '[' at position {pos}", text)
            depth = 0
        elif depth == 0 and (char == "," or char.isspace()):
            if current:
                items.append("".join(current))
            current = []
            continue
        elif depth and char.isspace():
            raise HostlistError(f"whitespace inside brackets at position {pos}", text)
        current.append(char)
    if depth:
        raise HostlistError("'[' is never closed", text)
    if current:
        items.append("".join(current))
    return items


def _parse_ranges(body: str, text: str, budget: int) -> list[str]:
    """`01-03,7` -> ["01", "02", "03", "7"] (padding applied); the count is checked before any is made."""
    if not body:
        raise HostlistError("empty brackets '[]'", text)
    values: list[str] = []
    for piece in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", piece)
        if match is None:
            raise HostlistError(f"bad range {piece!r}: expected N or N-M with digits only", text)
        lo_text, hi_text = match.group(1), match.group(2)
        lo = int(lo_text)
        hi = lo if hi_text is None else int(hi_text)
        if hi < lo:
            raise HostlistError(f"range {piece!r} runs backwards", text)
        if len(values) + hi - lo + 1 > budget:
            raise HostlistError(f"range {piece!r} takes the list past the cap of {MAX_HOSTS} names", text)
        width = len(lo_text)
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


def _expand_item(item: str, text: str, budget: int) -> list[str]:
    """One top-level item, possibly with several bracket groups (cartesian product, first outermost)."""
    pieces = re.split(r"\[([^\]]*)\]", item)  # literal, body, literal, body, ..., literal
    axes: list[list[str]] = []
    size = 1
    for index, piece in enumerate(pieces):
        if index % 2 == 0:
            axes.append([piece])
            continue
        values = _parse_ranges(piece, text, budget // size)
        size *= len(values)
        if size > budget:
            raise HostlistError(f"expands to more than the cap of {MAX_HOSTS} names", text)
        axes.append(values)
    return ["".join(combo) for combo in itertools.product(*axes)]


def expand(hostlist: str) -> list[str]:
    """Expand a Slurm hostlist into node names, in Slurm's order. `""` and `"(null)"` give `[]`.

    Raises:
        HostlistError: unbalanced or nested brackets, a bad or backwards range, or more than
            MAX_HOSTS names in total.
    """
    if not isinstance(hostlist, str):
        raise TypeError(f"expand takes a hostlist string, not {type(hostlist).__name__}")
    text = hostlist.strip()
    if text in ("", "(null)", "None"):
        return []
    names: list[str] = []
    for item in _split_top_level(text):
        names.extend(_expand_item(item, text, MAX_HOSTS - len(names)))
    return names


def host_sort_key(name: str) -> tuple[str, int, int, str]:
    """Natural order: by the text before a trailing number, then by that number, then by its padding."""
    match = _TRAILING_NUMBER.match(name)
    if match is None:
        return (name, -1, 0, "")
    prefix, digits = match.groups()
    return (prefix, int(digits), len(digits), digits)


def sort_hosts(names: Iterable[str]) -> list[str]:
    """De-duplicated names in natural order (`n2` before `n10`): what `expand(compress(names))` gives."""
    return sorted(set(names), key=host_sort_key)


def _check_name(name: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"node names must be strings, not {type(name).__name__}")
    if not name or _NOT_IN_NAMES.intersection(name):
        raise HostlistError("a node name may not be empty or hold brackets, commas or whitespace", name)


def _render_runs(numbers: list[str]) -> str:
    """Numbers (as text, sorted by value then width) -> `1-3,7,09-10` with padding kept."""
    runs: list[list[int]] = []  # [lo, hi, width]
    open_runs: dict[tuple[int, int], list[int]] = {}  # (next value, width) -> run
    for digits in numbers:
        value, width = int(digits), len(digits)
        # "08" fits only a run of width 2; "10" fits a run of width 2 or 1 (n[08-10], n[8-10]).
        padded = len(digits) > 1 and digits[0] == "0"
        widths = [width] if padded else range(width, 0, -1)
        run = next((open_runs[(value, w)] for w in widths if (value, w) in open_runs), None)
        if run is None:
            run = [value, value, width]
            runs.append(run)
        else:
            del open_runs[(value, run[2])]
            run[1] = value
        open_runs[(value + 1, run[2])] = run
    texts = []
    for lo, hi, width in runs:
        lo_text, hi_text = str(lo).zfill(width), str(hi).zfill(width)
        texts.append(lo_text if lo == hi else f"{lo_text}-{hi_text}")
    return ",".join(texts)


def compress(names: Iterable[str]) -> str:
    """Sort and de-duplicate node names, then write them as one Slurm hostlist (`n[1-3,10],login`).

    Only a trailing number is ranged, so the result is valid for Slurm 22.05 and later.

    Raises:
        HostlistError: a name is empty or holds brackets, commas or whitespace.
    """
    if isinstance(names, str):
        raise TypeError("compress takes an iterable of node names, not one string; use expand() first")
    ordered = list(names)
    for name in ordered:
        _check_name(name)
    groups: dict[str, list[str]] = {}
    literals: list[str] = []
    for name in sort_hosts(ordered):
        match = _TRAILING_NUMBER.match(name)
        if match is None:
            literals.append(name)
        else:
            groups.setdefault(match.group(1), []).append(match.group(2))
    pieces: list[tuple[tuple[str, int, int, str], str]] = [(host_sort_key(lit), lit) for lit in literals]
    for prefix, numbers in groups.items():
        body = _render_runs(numbers)
        text = f"{prefix}{numbers[0]}" if len(numbers) == 1 else f"{prefix}[{body}]"
        pieces.append((host_sort_key(prefix + numbers[0]), text))
    pieces.sort(key=lambda pair: pair[0])
    return ",".join(text for _, text in pieces)
