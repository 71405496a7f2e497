"""torchrun's local ranks, made global per file (round 10).

A per-node torchrun tags each worker's lines with its *local* rank: `[default5]:`, or `[rank5]:` when it
runs with `--role rank` (torchtitan's scripts do), which looks like torch's own global `[rank13]:` prefix.
A file says which it is, and what each local rank's global rank is, in other lines:

- its command line: `--role rank` (the `[rankN]:` prefix is local), `--node-rank R --nproc-per-node P`
  (local L is global R*P+L);
- torchrun's rendezvous result: `global_ranks=[8, ..., 15]` (with `local_ranks=[...]`, else 0, 1, ...);
- a doubled prefix `[rank2]:[rank6]:` (torchrun's local prefix outside torch's own global one).

`mark_local_prefixes` marks a hit whose rank is such a local `[rankN]:` prefix as local (the
`tee_local` field `[defaultN]:` already sets); `file_local_maps` gives each file's local -> global map,
which `launchers.enrich` applies with the failure boxes'. Pure functions over hits.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit, Role
from nvrx_hpc.attribution.lines import torch_rank_prefixes

__all__ = ["mark_local_prefixes", "file_local_maps", "label_local_maps", "label_node_ranks", "log_dir_ranks",
           "launched_worker_ranks"]

_ITEM = re.compile(r"(\d+)\s*(?:(?:\.\.|-)\s*(\d+))?")


def _numbers(text: str) -> list[int]:
    """`8, 9, 10` or `8..15` or `8-15` -> the ranks in order."""
    out: list[int] = []
    for m in _ITEM.finditer(text):
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi - lo > 100_000:
            return []
        out.extend(range(lo, hi + 1))
    return out


def _local_role_sources(hits: Sequence[Hit]) -> set[str]:
    """Files whose `[rankN]:` prefix is torchrun's local one: its command line says `--role rank`, or a
    line carries both prefixes with different ranks."""
    found = set()
    for h in hits:
        if h.signature == "torchrun_cmd" and h.fields.get("role") == "rank":
            found.add(h.source)
        elif "rank_tee" in h.fields and h.fields["rank_tee"] != str(h.rank):
            found.add(h.source)
    return found


def mark_local_prefixes(hits: Sequence[Hit]) -> list[Hit]:
    """In a file where torchrun's `[rankN]:` prefix is local, a hit whose rank is that prefix (and no
    global one beside it) is marked local (`tee_local`), as `[defaultN]:` is."""
    local_files = _local_role_sources(hits)
    if not local_files:
        return list(hits)
    out = []
    for h in hits:
        if h.source in local_files and h.rank is not None and "tee_local" not in h.fields:
            outer, inner = torch_rank_prefixes(h.text)
            if outer == h.rank and inner is None:
                h = dataclasses.replace(h, fields={**h.fields, "tee_local": str(h.rank)})
        out.append(h)
    return out


def _one_node(h: Hit) -> bool:
    """A launch command that runs on one node: `--nnodes=1`, or a whole command line (not continued on the
    next) that names no node count, rendezvous or master (round 31: `torch.distributed.launch --nproc_per_node=8`)."""
    nnodes = h.fields.get("nnodes")
    if nnodes is not None:
        return nnodes in ("1", "1:1")
    text = h.text.rstrip()
    return not text.endswith("\\") and not any(w in text for w in ("--rdzv", "--master", "--node", "NODE_RANK"))


def file_local_maps(hits: Sequence[Hit]) -> dict[str, dict[int, int]]:
    """source -> {local rank: global rank} from the file's rendezvous result, doubled prefixes and
    command line, in that order of trust (a local rank two sources disagree on keeps the first)."""
    rdzv: dict[str, dict[int, int]] = defaultdict(dict)
    role: dict[str, dict[int, int]] = defaultdict(dict)
    pairs: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    cmd: dict[str, tuple[int, int]] = {}
    shared = _rdzv_of_several_labels(hits)
    for h in hits:
        if h.signature == "elastic_rdzv_ranks" and h.source not in shared:
            ranks = _numbers(h.fields.get("globals", ""))
            locals_ = _numbers(h.fields["locals"]) if "locals" in h.fields else list(range(len(ranks)))
            target = rdzv if h.fields.get("which") == "global" else role
            if ranks and len(locals_) == len(ranks):
                for local, rank in zip(locals_, ranks, strict=True):
                    target[h.source].setdefault(local, rank)
        elif h.signature == "torchrun_cmd" and h.fields.get("node_rank"):
            cmd.setdefault(h.source, (int(h.fields["node_rank"]), int(h.fields["nproc"])))
        elif h.signature == "torchrun_cmd" and _one_node(h):
            cmd.setdefault(h.source, (0, int(h.fields["nproc"])))  # one node: local ranks are the global ones
        elif "rank_tee" in h.fields and h.rank is not None:
            pairs[h.source][int(h.fields["rank_tee"])].add(h.rank)
    out: dict[str, dict[int, int]] = {}
    for source in {*rdzv, *role, *pairs, *cmd}:
        found = dict(rdzv.get(source) or role.get(source) or {})
        for local, ranks in pairs.get(source, {}).items():
            if len(ranks) == 1:
                found.setdefault(local, next(iter(ranks)))
        if source in cmd:
            node_rank, nproc = cmd[source]
            for local in range(nproc):
                found.setdefault(local, node_rank * nproc + local)
        out[source] = found
    return out


def _rdzv_of_several_labels(hits: Sequence[Hit]) -> set[str]:
    """Files holding torchrun's rendezvous results under two or more srun labels: each label's list is its own node's
    (`label_local_maps`), not the file's."""
    labels: dict[str, set[str]] = defaultdict(set)
    for h in hits:
        if h.signature == "elastic_rdzv_ranks" and h.fields.get("srun_label") is not None:
            labels[h.source].add(h.fields["srun_label"])
    return {source for source, seen in labels.items() if len(seen) >= 2}


def label_local_maps(hits: Sequence[Hit]) -> dict[tuple[str, str], dict[int, int]]:
    """(source, srun label) -> {local rank: global rank} from the rendezvous result torchrun printed under that label,
    where a file holds several nodes' (`0:   global_ranks=[0, ..., 7]`, `1:   global_ranks=[8, ..., 15]`, 106a)."""
    out: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    for h in hits:
        if h.signature == "elastic_rdzv_ranks" and h.fields.get("which") == "global" and h.fields.get("srun_label"):
            ranks = _numbers(h.fields.get("globals", ""))
            locals_ = _numbers(h.fields["locals"]) if "locals" in h.fields else list(range(len(ranks)))
            if ranks and len(locals_) == len(ranks):
                for local, rank in zip(locals_, ranks, strict=True):
                    out[(h.source, h.fields["srun_label"])].setdefault(local, rank)
    return dict(out)


def label_node_ranks(hits: Sequence[Hit]) -> dict[str, int]:
    """source -> processes per node, for files where srun started one torchrun per node (`srun -l ...
    torchrun --nproc-per-node=8`) and its task labels are torchrun's node ranks: every line that pairs a
    label with torch's global rank (`1: [rank13]:`, two labels at least) has rank // nproc == label, or the srun
    line itself passes `--node_rank $SLURM_PROCID`. Then a local rank L under label T is global rank
    T * nproc + L (round 11)."""
    nproc: dict[str, int] = {}
    pairs: dict[str, set[tuple[int, int]]] = defaultdict(set)
    told: set[str] = set()  # files whose srun line gives each launcher its task number as node rank (round 38)
    for h in hits:
        if h.signature == "torchrun_cmd" and h.fields.get("nproc", "").isdigit() and int(h.fields["nproc"]) > 0:
            nproc.setdefault(h.source, int(h.fields["nproc"]))
        if h.signature == "srun_node_rank_launch":
            told.add(h.source)
        label = h.fields.get("task_label")
        if label is not None and label.isdigit() and h.rank is not None and "tee_local" not in h.fields:
            pairs[h.source].add((int(label), h.rank))
    return {source: p for source, p in nproc.items()
            if (source in told or len({t for t, _ in pairs[source]}) >= 2)
            and all(r // p == t for t, r in pairs[source])}


# torchrun `--log-dir D` writes each worker's output to D/<run id>/attempt_<n>/<local rank>/std{out,err}.log
_LOG_DIR_FILE = re.compile(r"^(?:\./)?(?P<dir>.+)/[^/]+/attempt_\d+/(?P<local>\d+)/(?:stdout|stderr)\.log$")


def log_dir_ranks(hits: Sequence[Hit]) -> list[Hit]:
    """Lines of a file torchrun wrote under its `--log-dir` (round 11): the file's local rank, made global
    by the command line that names that log dir with its node rank and processes per node
    (`gpu-j06: NODE_RANK=2 torchrun --nproc_per_node 8 --log-dir logs/gpu-j06`: local 3 is rank 19), and
    that line's host."""
    cmds: dict[str, tuple[int, int, str | None]] = {}
    for h in hits:
        if h.signature == "torchrun_cmd" and h.fields.get("log_dir") and h.fields.get("node_rank"):
            d = h.fields["log_dir"].removeprefix("./").rstrip("/")
            cmds.setdefault(d, (int(h.fields["node_rank"]), int(h.fields["nproc"]), h.node))
    if not cmds:
        return list(hits)
    out = []
    for h in hits:
        m = _LOG_DIR_FILE.match(h.source) if h.rank is None else None
        d = m.group("dir") if m else None
        found = next((v for k, v in cmds.items() if d is not None and (d == k or d.endswith("/" + k))), None)
        if found is not None:
            node_rank, nproc, node = found
            h = dataclasses.replace(h, rank=node_rank * nproc + int(m.group("local")), node=h.node or node)
        out.append(h)
    return out


_WORKER_DIED = re.compile(r"CalledProcessError: Command '\[[^\n]*?'--local_rank=(\d+)'[^\n]*?\]' "
                          r"(?:died with|returned non-zero exit status)")


def launched_worker_ranks(hits: Sequence[Hit]) -> list[Hit]:
    """A file of one node's `torch.distributed.launch --nproc_per_node P --node_rank R` whose launcher raised for one
    failed worker (`CalledProcessError: Command '[..., '--local_rank=L', ...]' died with ...`): the file's failure
    lines that no global rank of that node claims are that worker's, global rank R*P+L, when no other worker's
    traceback is there (round 91b: an ECC error
    twenty lines above the launcher's exception, in a file that srun's task 5, the node's launcher, wrote)."""
    died: dict[str, set[int]] = defaultdict(set)
    launched: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for h in hits:
        if "CalledProcessError" in h.text and (m := _WORKER_DIED.search(h.text)):
            died[h.source].add(int(m.group(1)))
        elif h.signature == "torchrun_cmd" and h.fields.get("node_rank"):
            launched[h.source].add((int(h.fields["node_rank"]), int(h.fields["nproc"])))
    tracebacks = Counter(h.source for h in hits if h.signature == "traceback_start")
    # one worker's traceback beside the launcher's own: with more, other workers failed too (round 35a: all four
    # of a node's workers missed a file, and the launcher raised for the last)
    blocks = {source: (node_rank * nproc, nproc, node_rank * nproc + next(iter(local)))
              for source, local in died.items() if len(local) == 1 and len(launched[source]) == 1
              and tracebacks[source] <= 2
              for node_rank, nproc in launched[source] if next(iter(local)) < nproc}  # fmt: skip
    if not blocks:
        return list(hits)
    out = []
    for h in hits:
        first, nproc, rank = blocks.get(h.source, (0, 0, None))
        if rank is not None and h.role is Role.ROOT and not (h.rank is not None and first <= h.rank < first + nproc):
            h = dataclasses.replace(h, rank=rank)
        out.append(h)
    return out
