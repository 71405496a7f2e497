"""How far the job and its fault reach: one node's share of ranks or more, one process or several, one node's
GPUs or every host's links (verdict.py asks these when it names a culprit). Pure functions over findings."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from nvrx_hpc.attribution.api import Category, Hit, Role
from nvrx_hpc.attribution.causes import Cause, Findings

__all__ = ["one_node_hang", "one_process", "beyond_one_node", "gpus_held_by_others", "each_saw_it_twice",
           "one_node_of_several"]


def one_node_hang(category: Category, ranks: Sequence[int], universe: set[int], hits: Sequence[Hit]) -> bool:
    """A hang that names one rank, in a job of one node's size (eight ranks at most, and no line giving a rank whose
    local rank differs: torchrun's `rank: 5 (local_rank: 1)` is a second node's): its rank's host is the job's one host
    (round 83e); a larger job's one host in the logs may be where the dumps were taken, not where the rank ran."""
    if category is not Category.DISTRIBUTED_HANG or len(ranks) != 1 or len(universe) > 8:
        return False
    return not any(h.rank is not None and h.fields.get("local_rank", str(h.rank)) != str(h.rank) for h in hits)


_GPU_INDEX = re.compile(r"^(?:[A-Za-z][\w.-]*:)?(\d{1,2})$")  # `1`, `n1:1`; not a bus id (`0000:4f:00`)


def one_process(known: set[int], gpus: Sequence[str], f: Findings) -> bool:
    """The job shows one process: no rank but 0, no launcher of several (`torchrun --nproc_per_node 4`, at a prompt
    or in a script's trace), and no GPU index but 0 in the fault (a process on GPU 1 is one of several)."""
    if not known <= {0} or f.several_started or any(h.fields.get("nproc", "1") != "1" for h in f.hits):
        return False
    return all(m is None or m.group(1) == "0" for m in map(_GPU_INDEX.match, gpus))


def beyond_one_node(ranks: Sequence[int], universe: set[int], f: Findings) -> bool:
    """More ranks than one node's share of the job (its ranks over the hosts the logs name): they ran on
    several nodes, wherever the logs place them."""
    hosts = {h.node for h in f.hits if h.node} | set(f.listed_nodes) | set(f.job_nodes)
    return len(hosts) >= 2 and bool(universe) and len(set(ranks)) > len(universe) / len(hosts)


_OOM_PROCESS = re.compile(r"Process (\d+) has [\d.]+ [GM]iB memory in use")
_OOM_GPU = re.compile(r"GPU (\d+) has a total capacity")


def gpus_held_by_others(co: Sequence[Cause]) -> bool:
    """Whether CUDA's out-of-memory reports name two processes or more on each GPU, and two GPUs or more: every
    rank found its own GPU already held by another process (round 92b: a cancelled job's workers); not every rank
    crowding onto one GPU (round 39a), which is the job's own doing."""
    texts = [c.evidence.text for c in co]
    held = [len(set(_OOM_PROCESS.findall(t))) >= 2 for t in texts]
    return bool(texts) and all(held) and len({m.group(1) for t in texts if (m := _OOM_GPU.search(t))}) >= 2


def each_saw_it_twice(co: Sequence[Cause]) -> bool:
    """Whether each host of the root's lines reported it on two lines or more: each side's processes failed on
    their own links, not one process and its peer's echo."""
    per_host: dict[str, set[tuple[str, int | None]]] = {}
    for c in co:
        for n in c.nodes:
            per_host.setdefault(n, set()).add((c.evidence.source, c.evidence.line))
    return bool(per_host) and all(len(lines) >= 2 for lines in per_host.values())


def one_node_of_several(ranks: Sequence[int], rank_nodes: Mapping[int, str], f: Findings) -> bool:
    """Whether the rank map places all `ranks` on one node while ranks of other nodes are heard failing otherwise
    (their timeouts, their teardown): a NaN only that node's GPUs computed is that node's (round 92e), not the run's.
    A log of one node alone says nothing of the others (round 60)."""
    on = {rank_nodes.get(r) for r in ranks}
    if len(on) != 1 or None in on:
        return False
    return any(h.rank is not None and h.role is not Role.CONTEXT and rank_nodes.get(h.rank) not in (None, *on)
               for h in f.hits)
