"""Who protects whom: failure domains, partner rings and XOR sets (pure functions of the rank-to-domain map).

As in SCR/redset: ranks are grouped by failure domain (a node by default); ranks with the same local rank
inside their domains form a ring, ordered by domain (in order of first appearance by rank). PARTNER sends
a rank's shard to its right-hand neighbour in that ring; XOR cuts the ring into consecutive sets of at
least `set_size` members (leftovers spread evenly), so no set has two members in one domain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from nvrx_hpc.ckpt.api import Scheme
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["Layout", "cut_sets"]


def cut_sets(ring: Sequence[int], set_size: int) -> list[tuple[int, ...]]:
    """Consecutive sets of `ring` with sizes set_size..2*set_size-1 (one set when the ring is shorter)."""
    n = len(ring)
    count = max(1, n // set_size)
    base, extra = divmod(n, count)
    sets, start = [], 0
    for i in range(count):
        size = base + (1 if i < extra else 0)
        sets.append(tuple(ring[start : start + size]))
        start += size
    return sets


@dataclass(frozen=True)
class Layout:
    """The failure domain of every rank, in rank order."""

    domains: tuple[str, ...]

    @cached_property
    def domain_order(self) -> list[str]:
        return list(dict.fromkeys(self.domains))

    @cached_property
    def local_ranks(self) -> list[int]:
        seen: dict[str, int] = {}
        out = []
        for d in self.domains:
            out.append(seen.get(d, 0))
            seen[d] = out[-1] + 1
        return out

    def leader(self, rank: int) -> bool:
        """True for the lowest rank of its domain (it writes the domain's manifest and deletes old versions)."""
        return self.local_ranks[rank] == 0

    def ranks_in(self, domain: str) -> list[int]:
        return [r for r, d in enumerate(self.domains) if d == domain]

    @cached_property
    def rings(self) -> dict[int, list[int]]:
        """local rank -> ranks holding it, ordered by domain."""
        order = {d: i for i, d in enumerate(self.domain_order)}
        rings: dict[int, list[int]] = {}
        for r, lr in enumerate(self.local_ranks):
            rings.setdefault(lr, []).append(r)
        for ring in rings.values():
            ring.sort(key=lambda r: order[self.domains[r]])
        return rings

    def _ring_of(self, rank: int) -> list[int]:
        return self.rings[self.local_ranks[rank]]

    def partner(self, rank: int) -> int:
        """The rank that holds `rank`'s replica (right-hand neighbour)."""
        ring = self._ring_of(rank)
        return ring[(ring.index(rank) + 1) % len(ring)]

    def partner_source(self, rank: int) -> int:
        """The rank whose replica `rank` holds (left-hand neighbour)."""
        ring = self._ring_of(rank)
        return ring[(ring.index(rank) - 1) % len(ring)]

    def xor_sets(self, set_size: int) -> list[tuple[int, ...]]:
        sets = []
        for lr in sorted(self.rings):
            sets.extend(cut_sets(self.rings[lr], set_size))
        return sets

    def check(self, scheme: Scheme, set_size: int) -> None:
        """Refuse a scheme that cannot protect across domains with this layout.

        Raises:
            CheckpointError: a ring with one member (one domain, or uneven ranks per domain), naming it.
        """
        if scheme == Scheme.NONE:
            return
        for lr, ring in sorted(self.rings.items()):
            if len(ring) < 2:
                where = f"local rank {lr} exists only in failure domain {self.domains[ring[0]]!r}"
                raise CheckpointError(
                    f"scheme {scheme.value!r} needs every rank's partner in another failure domain, but {where} "
                    f"({len(self.domain_order)} domain(s): {', '.join(self.domain_order[:8])})",
                    hint="run on at least two nodes with the same number of ranks on each, set failure_domain, "
                    "or use scheme='none'",
                )
        if scheme == Scheme.XOR and set_size < 2:
            raise CheckpointError(f"XOR set size {set_size} is below 2", hint="use set_size >= 2")
