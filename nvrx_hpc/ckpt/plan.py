"""Restore planning (pure): from what every rank holds, pick the newest restorable version and its sources.

Every rank computes the same plan from the same gathered holdings. For each rank's data the order is:
a file on its own node (its shard, else a replica), a peer that holds a copy (least-loaded first), an
XOR rebuild (one lost member per set, every survivor's parity reachable), the shared directory. A version
with a rank left without a source is skipped, with the reason; so is a version marked failed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nvrx_hpc.ckpt.manifest import Manifest

__all__ = ["SHARED", "FileKey", "Holdings", "Fetch", "Rebuild", "RestorePlan", "plan_restore"]

SHARED = "@shared"
"""Location of files in the shared directory (a domain name can never start with '@')."""

FileKey = tuple[int, str, str, int]
"""(step, location: domain or SHARED, file kind: shard|replica|parity, owner rank)."""


@dataclass(frozen=True)
class Holdings:
    """What the job can reach, gathered from every rank."""

    domains: tuple[str, ...]
    """Current failure domain of every rank."""
    files: Mapping[int, Mapping[tuple[str, int], frozenset[str]]]
    """step -> (file kind, owner rank) -> domains (or SHARED) holding that file."""
    manifests: Mapping[int, Manifest]
    failed: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Fetch:
    """One object (a rank's data or parity) read from a file by `holder` and delivered to `dest`."""

    obj: str
    owner: int
    dest: int
    holder: int
    kind: str
    location: str
    step: int

    @property
    def key(self) -> FileKey:
        return (self.step, self.location, self.kind, self.owner)

    @property
    def source(self) -> str:
        if self.location == SHARED:
            return "shared"
        return "local" if self.holder == self.dest else "peer"


@dataclass(frozen=True)
class Rebuild:
    members: tuple[int, ...]
    lost: int
    chunk: int


@dataclass(frozen=True)
class RestorePlan:
    step: int
    manifest: Manifest
    fetches: tuple[Fetch, ...]
    rebuilds: tuple[Rebuild, ...]
    reprotect: bool

    def sources(self) -> dict[str, int]:
        counts = Counter(f.source for f in self.fetches if f.obj == "data")
        if self.rebuilds:
            counts["xor"] = len(self.rebuilds)
        return dict(sorted(counts.items()))


def plan_restore(h: Holdings, excluded: Iterable[FileKey] = ()) -> tuple[RestorePlan | None, dict[int, str]]:
    """The plan for the newest restorable version (or None), and why each newer version was skipped."""
    bad = set(excluded)
    rejected: dict[int, str] = {}
    for step in sorted(h.manifests, reverse=True):
        if step in h.failed:
            rejected[step] = f"marked failed: {h.failed[step]}"
            continue
        plan, reason = _plan_step(h, step, bad)
        if plan is not None:
            return plan, rejected
        rejected[step] = reason
    return None, rejected


def _plan_step(h: Holdings, step: int, bad: set[FileKey]) -> tuple[RestorePlan | None, str]:
    m = h.manifests[step]
    world = len(h.domains)
    if m.world_size != world:
        return None, f"saved by {m.world_size} ranks, this job has {world}"
    files = h.files.get(step, {})
    on_domain: dict[str, list[int]] = {}
    for r, d in enumerate(h.domains):
        on_domain.setdefault(d, []).append(r)
    load: Counter[int] = Counter()

    def find(obj: str, kinds: tuple[str, ...], owner: int, dest: int) -> Fetch | None:
        for kind in kinds:
            where = h.domains[dest]
            if where in files.get((kind, owner), ()) and (step, where, kind, owner) not in bad:
                return Fetch(obj, owner, dest, dest, kind, where, step)
        options = []
        for kind in kinds:
            for where in sorted(files.get((kind, owner), ())):
                if where == SHARED or (step, where, kind, owner) in bad:
                    continue
                for holder in on_domain.get(where, ()):
                    options.append((load[holder], holder, kind, where))
        if not options:
            return None
        _, holder, kind, where = min(options)
        load[holder] += 1
        return Fetch(obj, owner, dest, holder, kind, where, step)

    fetches: list[Fetch] = []
    lost: list[int] = []
    for r in range(world):
        f = find("data", ("shard", "replica"), r, r)
        if f is None:
            lost.append(r)
        else:
            fetches.append(f)
    rebuilds: list[Rebuild] = []
    if lost and m.scheme == "xor":
        for ps in m.parity_sets:
            gone = [r for r in ps.members if r in lost]
            if len(gone) != 1:
                continue
            parity = [find("parity", ("parity",), j, j) for j in ps.members if j != gone[0]]
            if all(p is not None for p in parity):
                fetches.extend(p for p in parity if p is not None)
                rebuilds.append(Rebuild(ps.members, gone[0], ps.chunk))
                lost.remove(gone[0])
    for r in list(lost):
        if SHARED in files.get(("shard", r), ()) and (step, SHARED, "shard", r) not in bad:
            fetches.append(Fetch("data", r, r, r, "shard", SHARED, step))
            lost.remove(r)
    if lost:
        shown = ", ".join(f"{r} (was on {m.shards[r].domain})" for r in lost[:6])
        more = f" and {len(lost) - 6} more" if len(lost) > 6 else ""
        return None, f"no readable copy of the shard of rank {shown}{more} on the nodes of this job"
    reprotect = (
        any(f.obj == "data" and (f.source != "local" or f.kind != "shard") for f in fetches)
        or bool(rebuilds)
        or tuple(h.domains) != tuple(m.domains)
    )
    return RestorePlan(step, m, tuple(fetches), tuple(rebuilds), reprotect), ""
