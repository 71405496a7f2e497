"""Flight-recorder analysis: per process group, align ranks by collective sequence id and say which
ranks never joined the collective the others wait on, which are behind, which sent no dump, and where
op, size or dtype disagree.

Sequence ids, not clocks, decide (clocks differ across hosts). A rank's progress comes from its
`pg_status` (last enqueued / completed collective) when present, else from its entries. The culprits
are the ends of the waits-for chains across groups: a rank blocked in group A on a rank that never
joined A is a victim of it; a rank missing from group B because it is blocked in A is a victim too;
only a rank that never joined and waits on nobody is a root cause.

Point-to-point ops (`send 0->1`, `recv 1<-0`, group-local ranks) are paired per direction: a send still
pending whose peer has no pending receive from it means the peer never posted that receive (and the
other way round). The rank that never posted is treated like one that never joined a collective; the
rank left waiting counts as blocked.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvrx_hpc.attribution.api import FileProblem
from nvrx_hpc.attribution.fr_load import SUPPORTED_MINOR, FRDump, FREntry, load_dump
from nvrx_hpc.core.errors import AttributionError

__all__ = ["PGFinding", "FRReport", "analyze_dumps", "analyze_files"]

# Ops whose input and output sizes must agree on every rank of the group.
_SAME_SIZE_OPS = {
    "all_reduce", "allreduce", "broadcast", "reduce", "barrier", "all_gather", "_all_gather_base", "allgather",
    "_allgather_base", "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor", "all_gather_into_tensor",
}  # fmt: skip


@dataclass(frozen=True)
class PGFinding:
    """What one process group shows. `seq` is the first collective not completed everywhere."""

    pg: str
    desc: str
    members: tuple[int, ...]
    seq: int | None
    op: str | None
    sizes: Any = None
    dtypes: Any = None
    never_joined: tuple[int, ...] = ()
    behind: tuple[int, ...] = ()
    missing_dumps: tuple[int, ...] = ()
    blocked: tuple[int, ...] = ()
    mismatch: dict[str, Any] | None = None
    p2p: tuple[dict[str, Any], ...] = ()  # unmatched point-to-point ops, see _unmatched_p2p
    last_enqueued: dict[int, int] = field(default_factory=dict)
    last_completed: dict[int, int] = field(default_factory=dict)
    first_created_ns: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pg": self.pg, "desc": self.desc, "members": list(self.members), "seq": self.seq, "op": self.op,
            "sizes": self.sizes, "dtypes": self.dtypes, "never_joined": list(self.never_joined),
            "behind": list(self.behind), "missing_dumps": list(self.missing_dumps), "blocked": list(self.blocked),
            "mismatch": self.mismatch, "p2p": list(self.p2p),
            "last_enqueued": {str(k): v for k, v in sorted(self.last_enqueued.items())},
            "last_completed": {str(k): v for k, v in sorted(self.last_completed.items())},
        }  # fmt: skip

    def text(self) -> str:
        where = f"process group {self.pg!r} ({self.desc or 'no desc'})"
        parts = []
        if self.never_joined:
            parts.append(f"ranks {list(self.never_joined)} never joined {self.op} #{self.seq}")
        if self.missing_dumps:
            parts.append(f"no dump from ranks {list(self.missing_dumps)}")
        if self.mismatch:
            parts.append(f"{self.mismatch['type']} mismatch at #{self.mismatch['seq']}: {self.mismatch['detail']}")
        parts += [p["detail"] for p in self.p2p[:4]]
        return f"{where}: " + ("; ".join(parts) if parts else f"blocked at {self.op} #{self.seq}")


@dataclass(frozen=True)
class FRReport:
    """Every dump read, every problem met, and the findings of the groups that are stuck or disagree."""

    ranks: tuple[int, ...]
    versions: tuple[str, ...]
    findings: tuple[PGFinding, ...]
    culprits: tuple[int, ...]
    problems: tuple[FileProblem, ...] = ()
    notes: tuple[str, ...] = ()
    frames: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": list(self.ranks),
            "versions": list(self.versions),
            "culprits": list(self.culprits),
            "findings": [f.to_dict() for f in self.findings],
            "problems": [p.to_dict() for p in self.problems],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class _Config:
    """Group memberships over all dumps: by group name, and the unnamed entry torch's gloo dumps keep."""

    by_name: dict[str, set[int]]
    unnamed: set[int]
    unnamed_descs: set[str]
    ordered: dict[str, tuple[int, ...]]  # group-local rank i is ordered[name][i]

    @classmethod
    def of(cls, dumps: Iterable[FRDump]) -> _Config:
        by_name: dict[str, set[int]] = {}
        unnamed: set[int] = set()
        descs: set[str] = set()
        ordered: dict[str, tuple[int, ...]] = {}
        for d in dumps:
            for name, (_desc, ranks) in d.pg_config.items():
                by_name.setdefault(name, set()).update(ranks)
                if len(ranks) > len(ordered.get(name, ())):
                    ordered[name] = tuple(ranks)
            if len(d.pg_config) == 1 and "" in d.pg_config:
                unnamed.update(d.pg_config[""][1])
                descs.add(d.pg_config[""][0])
        return cls(by_name, unnamed, descs, ordered)

    def members(self, name: str, desc: str, seen: set[int]) -> tuple[int, ...]:
        ranks = self.by_name.get(name) if name else None
        if not ranks and self.unnamed and desc in ({"default_pg", ""} | self.unnamed_descs):
            # torch's gloo dumps name the group '0' in entries but keep one unnamed entry in pg_config.
            ranks = self.unnamed
        return tuple(sorted(ranks or seen))


def _progress(dump: FRDump, entries: list[FREntry], pg_id: str | None) -> tuple[int | None, int | None]:
    """(last enqueued, last completed) collective of one rank in one group; None where unknown."""
    if pg_id is not None and pg_id in dump.pg_status:
        enq, _, done = dump.pg_status[pg_id]
        return enq, done
    colls = [e for e in entries if not e.is_p2p]
    if not colls:
        return None, None
    done_seqs = [e.seq for e in colls if e.completed]
    return max(e.seq for e in colls), (max(done_seqs) if done_seqs else min(e.seq for e in colls) - 1)


def _lists(value: Any) -> Any:
    return [_lists(v) for v in value] if isinstance(value, (list, tuple)) else value


def _signature(e: FREntry, check_sizes: bool) -> tuple:
    sizes = (e.input_sizes, e.output_sizes) if check_sizes else ()
    return (e.op, sizes, (e.input_dtypes, e.output_dtypes))


def _mismatch(by_rank: dict[int, list[FREntry]]) -> dict[str, Any] | None:
    """The first sequence id at which the ranks' ops disagree, and the minority ranks."""
    seqs: dict[int, dict[int, FREntry]] = {}
    for rank, entries in by_rank.items():
        for e in entries:
            if not e.is_p2p and not e.op.endswith("coalesced"):
                seqs.setdefault(e.seq, {})[rank] = e
    for seq in sorted(seqs):
        at = seqs[seq]
        if len(at) < 2:
            continue
        ops = Counter(e.op for e in at.values())
        kind = "op"
        if len(ops) == 1:
            same = next(iter(ops)) in _SAME_SIZE_OPS
            kind = "size" if len({_signature(e, same)[1] for e in at.values()}) > 1 else "dtype"
        sigs = Counter(_signature(e, e.op in _SAME_SIZE_OPS) for e in at.values())
        if len(sigs) == 1:
            continue
        top, count = sigs.most_common(1)[0]
        culprits = sorted(r for r, e in at.items() if _signature(e, e.op in _SAME_SIZE_OPS) != top)
        if count * 2 == len(at):  # a tie names nobody for sure: name every side
            culprits = sorted(at)
        detail = ", ".join(
            f"rank {r}: {e.op} {_lists(e.input_sizes)} {_lists(e.input_dtypes)}" for r, e in sorted(at.items())[:8]
        )
        return {"seq": seq, "type": kind, "culprits": culprits, "detail": detail}
    return None


_P2P_OP = re.compile(r"^(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")


def _unmatched_p2p(by_rank: dict[int, list[FREntry]], order: tuple[int, ...], dumped: set[int]) -> list[dict[str, Any]]:
    """Pending sends and receives whose peer never posted the matching op, one record per direction."""
    sends: dict[tuple[int, int], list[FREntry]] = {}
    recvs: dict[tuple[int, int], list[FREntry]] = {}
    for rank, entries in by_rank.items():
        for e in entries:
            m = _P2P_OP.match(e.op) if e.is_p2p or e.op.startswith(("send", "recv")) else None
            if m is None or int(m.group(4)) >= len(order):
                continue
            peer = order[int(m.group(4))]
            if m.group(1) == "send":
                sends.setdefault((rank, peer), []).append(e)
            else:
                recvs.setdefault((peer, rank), []).append(e)
    out = []
    for src, dst in sorted(set(sends) | set(recvs)):
        pending_send = [e for e in sends.get((src, dst), []) if not e.completed]
        pending_recv = [e for e in recvs.get((src, dst), []) if not e.completed]
        if pending_send and not pending_recv and dst in dumped:
            waiting, missing, kind, head = src, dst, "recv", pending_send[0]
            detail = f"rank {src} waits on a send to rank {dst}, which never posted the matching recv"
        elif pending_recv and not pending_send and src in dumped:
            waiting, missing, kind, head = dst, src, "send", pending_recv[0]
            detail = f"rank {dst} waits on a recv from rank {src}, which never posted the matching send"
        else:
            continue
        out.append({"waiting": waiting, "missing": missing, "missing_op": kind, "pending": max(
            len(pending_send), len(pending_recv)), "sizes": _lists(head.input_sizes), "detail": detail})
    return out


def _analyze_group(
    dumps: dict[int, FRDump], name: str, desc: str, group: dict[int, list[FREntry]], config: _Config
) -> PGFinding | None:
    seen = set(group)
    members = config.members(name, desc, seen)
    by_rank = {r: group.get(r, []) for r in (*members, *seen) if r in dumps}
    ids = Counter(e.pg_id for es in by_rank.values() for e in es)
    common_id = ids.most_common(1)[0][0] if ids else None
    enq: dict[int, int] = {}
    done: dict[int, int] = {}
    for r in members:
        if r not in dumps:
            continue
        own_id = by_rank[r][0].pg_id if by_rank[r] else common_id
        e, c = _progress(dumps[r], by_rank[r], own_id)
        if e is not None and c is not None:
            enq[r], done[r] = e, c
    mismatch = _mismatch({r: by_rank[r] for r in members if r in by_rank})
    missing = tuple(r for r in members if r not in dumps)
    p2p = _unmatched_p2p(by_rank, config.ordered.get(name) or members, set(dumps))
    if not enq:
        if not p2p:
            return None
        return PGFinding(pg=name, desc=desc, members=members, seq=None, op=None, p2p=tuple(p2p),
                         first_created_ns=min((e.time_created_ns or 0 for es in by_rank.values() for e in es
                                               if e.is_p2p and not e.completed), default=None) or None)
    first_open = min(done.values()) + 1
    top = max(enq.values())
    if top < first_open and not mismatch and not p2p:
        return None  # everything issued was completed everywhere
    at_seq = [e for es in by_rank.values() for e in es if e.seq == first_open and not e.is_p2p]
    head = min(at_seq, key=lambda e: e.time_created_ns or 0) if at_seq else None
    never = {r for r, v in enq.items() if v < first_open <= top}
    # A collective cannot complete without every member: a rank that issued it while a peer never did is
    # waiting on that peer, even where its own progress says "completed" (gloo counts a collective that
    # failed with a timeout as completed).
    blocked = {r for r in enq if enq[r] > done[r]} | ({r for r in enq if enq[r] >= first_open} if never else set())
    return PGFinding(
        pg=name,
        desc=desc,
        members=members,
        seq=first_open if top >= first_open else None,
        op=head.op if head else None,
        sizes=[_lists(head.input_sizes), _lists(head.output_sizes)] if head else None,
        dtypes=_lists(head.input_dtypes) if head else None,
        never_joined=tuple(sorted(never)),
        behind=tuple(sorted(r for r, v in enq.items() if first_open <= v < top)),
        missing_dumps=missing if top >= first_open else (),
        blocked=tuple(sorted(blocked)),
        mismatch=mismatch,
        p2p=tuple(p2p),
        last_enqueued=enq,
        last_completed=done,
        first_created_ns=head.time_created_ns if head else None,
    )


def _culprits(findings: Sequence[PGFinding]) -> tuple[int, ...]:
    """The ranks the hang waits on. Each group gives edges "blocked rank -> rank that never joined" (and
    "waiting rank -> rank that never posted" for point-to-point ops); a rank blocked in one group while
    missing from another is a victim, so the culprits are the ranks at the end of those chains: reached
    from a blocked rank and waiting on nobody themselves."""
    waits: dict[int, set[int]] = {}
    for f in findings:
        for b in f.blocked:
            waits.setdefault(b, set()).update(r for r in f.never_joined if r != b)
        for p in f.p2p:
            waits.setdefault(p["waiting"], set()).add(p["missing"])
    never = {r for f in findings for r in f.never_joined} | {p["missing"] for f in findings for p in f.p2p}
    sinks: set[int] = set()
    for start in never:
        seen, todo = {start}, [start]
        while todo:
            r = todo.pop()
            nxt = waits.get(r, set()) - seen
            if not waits.get(r):
                sinks.add(r)
            seen |= nxt
            todo.extend(nxt)
    if sinks:
        return tuple(sorted(sinks))
    if never:  # everyone waits on someone (a cycle): every rank that never joined is a suspect
        return tuple(sorted(never))
    mism = {r for f in findings if f.mismatch for r in f.mismatch["culprits"]}
    if mism:
        return tuple(sorted(mism))
    return tuple(sorted({r for f in findings for r in f.missing_dumps}))


def analyze_dumps(dumps: Iterable[FRDump], problems: Sequence[FileProblem] = ()) -> FRReport:
    """Findings over already-loaded dumps (one per rank; a later duplicate of a rank is ignored)."""
    by_rank: dict[int, FRDump] = {}
    notes = []
    for d in dumps:
        if d.rank in by_rank:
            notes.append(f"{d.source}: a second dump for rank {d.rank}; kept {by_rank[d.rank].source}")
            continue
        by_rank[d.rank] = d
        if d.minor not in SUPPORTED_MINOR:
            notes.append(f"{d.source}: format {d.version} is outside 2.3-2.10; read as the closest known version")
    versions = sorted({d.version for d in by_rank.values()})
    if len(versions) > 1:
        notes.append(f"ranks wrote different formats ({', '.join(versions)}); compared field by field")
    index: dict[str, dict[int, list[FREntry]]] = {}
    groups = set()
    for r, d in by_rank.items():
        for e in d.entries:
            index.setdefault(e.pg_name, {}).setdefault(r, []).append(e)
            groups.add((e.pg_name, e.pg_desc))
    config = _Config.of(by_rank.values())
    findings = []
    for name, desc in sorted(groups):
        found = _analyze_group(by_rank, name, desc, index[name], config)
        if found is not None:
            findings.append(found)
    findings.sort(key=lambda f: (f.first_created_ns is None, f.first_created_ns or 0, f.pg))
    frames = {}
    for r, d in by_rank.items():
        if d.entries and d.entries[-1].frame:
            frames[r] = d.entries[-1].frame
    return FRReport(
        ranks=tuple(sorted(by_rank)),
        versions=tuple(versions),
        findings=tuple(findings),
        culprits=_culprits(findings),
        problems=tuple(problems),
        notes=tuple(notes),
        frames=frames,
    )


def analyze_files(paths: Iterable[Path], *, relative_to: Path | None = None) -> FRReport:
    """Load and analyse dump files; a file that cannot be loaded becomes a problem, the rest go on."""
    dumps, problems = [], []
    for path in sorted(paths):
        try:
            source = str(path.relative_to(relative_to)) if relative_to else str(path)
        except ValueError:
            source = str(path)
        try:
            dumps.append(load_dump(path, source))
        except AttributionError as exc:
            problems.append(FileProblem(source, exc.message))
    return analyze_dumps(dumps, problems)
