"""A rank killed before its peers' network errors is what they report (rounds 50b and 54b).

When a process dies, the ranks talking to it see their InfiniBand completions fail (`Got completion from peer ...
with error 12`) or NCCL's `remote process exited or there was a network error`. Those lines look like the fabric's
fault, but a launcher saw one rank end by SIGKILL or SIGBUS first, on another host: the network errors are its
echo. The culprit is that rank; what killed it the logs do not say (no OOM line, no kernel log), so the category is
`unknown`. The rule needs the death to come first where the logs can order it (both stamped, or one file's lines)
and no such order to say otherwise.

So is a process on the peer the errors name that raised an error of its own before them (round 103b: rank 0's
`TypeError`, its launcher then killing its node's processes, the other node's `Got completion from peer <its
address> with status=12`): that error is the failure, the network errors its echo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from nvrx_hpc.attribution.api import Category, Hit, Role
from nvrx_hpc.attribution.causes import Cause, cause_key

__all__ = ["KilledFirst", "killed_first", "raised_on_peer"]

_EXITS = ("ds_launcher_exit", "elastic_child_failed", "elastic_box_exit", "composer_rank_exit")
_SUMMARIES = ("elastic_box_exit",)
_KILLED = {"-9": "SIGKILL", "137": "SIGKILL", "-7": "SIGBUS", "135": "SIGBUS"}


class KilledFirst(NamedTuple):
    rank: int
    node: str | None
    signal: str


def _before(death: Hit, h: Hit) -> bool | None:
    """Whether `death` came before `h`; None when the logs cannot say (no stamps, different files)."""
    if death.time is not None and h.time is not None:
        return death.time <= h.time
    if death.source != h.source or death.signature in _SUMMARIES:
        return None  # torchrun's failure box is printed at the end, whenever its rank failed
    # A launcher reports a death when it notices it: a report above the errors came first, one below says nothing
    return True if death.line < h.line else None


def _first_of(deaths: Sequence[Hit], h: Hit) -> bool | None:
    """Whether one of the death's lines came before `h` (a stamp or a line's place says so), else whether any says
    not; None when none can tell."""
    said = [b for d in deaths if (b := _before(d, h)) is not None]
    return True if True in said else (False if said else None)


def killed_first(hits: Sequence[Hit], rank_nodes: Mapping[int, str], victims: Sequence[str] = ()) -> KilledFirst | None:
    """The one rank a launcher saw killed (SIGKILL, SIGBUS) before every network error (or, with `victims`, every line
    of those signatures: collective timeouts) it can be ordered with, on a host other than the reporters'; None
    otherwise."""
    deaths = [h for h in hits if h.signature in _EXITS and h.fields.get("code") in _KILLED and h.rank is not None]
    network = [h for h in hits if h.signature in victims] if victims else \
        [h for h in hits if h.category is Category.NETWORK and h.role in (Role.ROOT, Role.WEAK)]
    if not deaths or not network or len({h.rank for h in deaths}) != 1:
        return None
    # the launcher's own line first (torchrun's failure box, printed at the end, orders nothing by its place)
    deaths.sort(key=lambda h: (h.signature in _SUMMARIES, h.time is None, h.time or 0.0, h.order))
    death = deaths[0]
    order = [_first_of(deaths, h) for h in network]
    if False in order or True not in order:
        return None
    node = death.node or rank_nodes.get(death.rank)  # type: ignore[arg-type]
    reporters = {h.node or rank_nodes.get(h.rank) for h in network if h.rank is not None or h.node}  # type: ignore
    if victims and death.rank in {h.rank for h in network}:
        return None  # it timed out itself: alive when the others did
    if not victims and node is not None and node in reporters:
        return None  # its own host reports the network errors: the link there, maybe
    return KilledFirst(death.rank, node, _KILLED[death.fields["code"]])  # type: ignore[arg-type]


_OWN = (Category.APPLICATION, Category.FRAMEWORK_CRASH, Category.NUMERICAL)


def raised_on_peer(node: str, causes: Sequence[Cause], root: Cause) -> Cause | None:
    """The first error of a process's own (its code, its framework, its numbers) that `node` printed before `root`,
    a network error naming `node` as its peer, where the logs can order the two; None if none did."""
    own = [c for c in causes if c.kind == "log" and c.category in _OWN and c.strength >= 2 and node in c.nodes]
    first = [c for c in own if c.time is not None and root.time is not None and c.time <= root.time
             or c.evidence.source == root.evidence.source and (c.evidence.line or 0) < (root.evidence.line or 0)]
    return min(first, key=cause_key) if first else None
