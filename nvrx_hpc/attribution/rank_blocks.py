"""Where the ranks no line places ran: the blocks of consecutive ranks each node's launcher holds (torchrun's
`--nproc-per-node`, srun's launcher tasks, torchrun's rendezvous, one world size over the job's hosts).
Pure functions over hits; `localise.rank_nodes` calls `fill_blocks` once the lines' own places are known."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["fill_blocks", "launch_world", "world_sizes", "WORLD_KEYS"]


def _rendezvous_blocks(hits: Sequence[Hit]) -> list[tuple[int, str]]:
    """(rank, host) from torchrun's rendezvous (`The node 'gpu-a07-ib0_18728_0' has joined round 0 ... as rank 2
    in a world of size 4`): that host is node 2 of the rendezvous and runs block 2 of `--nproc-per-node` ranks,
    whatever srun's task number there (round 23)."""
    per_node = {h.fields["nproc"] for h in hits if h.signature == "torchrun_cmd" and h.fields.get("nproc")}
    if len(per_node) != 1 or not 0 < (nproc := int(per_node.pop())) <= 1024:
        return []
    return [(r, h.fields["rhost"]) for h in hits if h.signature == "elastic_rdzv_join"
            for r in range(int(h.fields["rdzv_rank"]) * nproc, (int(h.fields["rdzv_rank"]) + 1) * nproc)]


def fill_blocks(nodes: dict[int, str], hits: Sequence[Hit]) -> dict[int, str]:
    """torchrun gives each node a block of `--nproc-per-node` consecutive ranks: a rank no line places
    sits on the one node its block's other ranks name (round 13: the silent rank 0 beside ranks 1-7).

    Without torchrun's command, one world size and the job's hosts give the block (round 16: Ray Train's
    ranks 0, 4, 8 and 12, one on each of 4 hosts, in a world of 16), when the placed ranks show blocks:
    each block on one host, no host in two blocks (a cyclic layout, rank r on host r mod N, does not)."""
    for r, host in _rendezvous_blocks(hits):
        nodes.setdefault(r, host)
    per_node = {h.fields["nproc"] for h in hits if h.signature == "torchrun_cmd" and h.fields.get("nproc")}
    size = int(next(iter(per_node))) if len(per_node) == 1 else _even_share(nodes, hits)
    nodes = _launcher_blocks(nodes, hits, size if per_node else 0)
    if not nodes or size < 2:
        return nodes
    blocks: dict[int, set[str]] = {}
    for r, node in nodes.items():
        blocks.setdefault(r // size, set()).add(node)
    if not per_node and any(len(named) > 1 for named in blocks.values()):
        return nodes
    if not per_node and len({n for named in blocks.values() for n in named}) < len(blocks):
        return nodes
    for block, named in blocks.items():
        if len(named) == 1:
            for r in range(block * size, block * size + size):
                nodes.setdefault(r, next(iter(named)))
    return _last_block(nodes, hits, size, blocks)


def _launcher_blocks(nodes: dict[int, str], hits: Sequence[Hit], size: int) -> dict[int, str]:
    """srun's task k was node k's launcher (`launchers._launcher_tasks`): block k of the ranks ran on its host,
    blocks of `size` ranks (torchrun's `--nproc-per-node`) or of the world over the launchers; nothing when a
    placed rank says otherwise (round 20)."""
    task_host = {int(h.fields["launcher_tasks"]): h.node for h in hits
                 if h.node and h.fields.get("launcher_tasks", "").isdigit()}  # fmt: skip
    task_host = _missing_launcher(task_host, {h.node for h in hits if h.node})
    if len(task_host) < 2 or set(task_host) != set(range(len(task_host))):
        return nodes
    world = max([r + 1 for r in nodes] + [h.rank + 1 for h in hits if h.rank is not None]
                + list(world_sizes(hits)), default=0)
    size = size or (world // len(task_host) if world % len(task_host) == 0 else 0)
    if size < 2 or world > size * len(task_host):
        return nodes
    if any(task_host.get(r // size) not in (None, node) for r, node in nodes.items()):
        return nodes
    for r in range(size * len(task_host)):
        nodes.setdefault(r, task_host[r // size])
    return nodes


def _missing_launcher(task_host: dict[int, str], hosts: set[str]) -> dict[int, str]:
    """A lost node's launcher gets no `srun: error: host: task k` line (srun says `Node failure on host`): when
    one task number is missing inside srun's list and one host of the job has no task, that task ran there
    (round 21: tasks 0, 1 and 3 on c021, c022 and c024; c023 lost). Not a missing last task: any host a
    line names (a login node, a file server) would do for it."""
    free = hosts - set(task_host.values())
    missing = set(range(max(task_host, default=0))) - set(task_host)
    if len(task_host) < 2 or len(free) != 1 or len(missing) != 1 or len(task_host) != max(task_host):
        return task_host
    return {**task_host, missing.pop(): free.pop()}


def _last_block(nodes: dict[int, str], hits: Sequence[Hit], size: int, blocks: dict[int, set[str]]) -> dict[int, str]:
    """One block per host: when every block but one has its host and one host of the job has none, that
    block is that host's (round 17: ranks 0-3 on gpu-d01, so the silent rank 6 is on gpu-d02)."""
    world = max([*world_sizes(hits)]
                + [r + 1 for r in nodes] + [h.rank + 1 for h in hits if h.rank is not None])  # fmt: skip
    hosts = {h.node for h in hits if h.node}
    if world % size or world // size != len(hosts) or any(len(named) > 1 for named in blocks.values()):
        return nodes
    empty = [b for b in range(world // size) if b not in blocks]
    free = hosts - {n for named in blocks.values() for n in named}
    if len(empty) == 1 and len(free) == 1:
        for r in range(empty[0] * size, empty[0] * size + size):
            nodes.setdefault(r, next(iter(free)))
    return nodes


WORLD_KEYS = ("world", "world2", "world3", "world4")  # the world size's fields in the catalog's signatures


def launch_world(h: Hit) -> int:
    """The world size a torchrun command line gives (`--nnodes=2 --nproc-per-node=8`: 16), a fixed node count
    only (not `--nnodes=1:4`); 0 otherwise (round 40)."""
    nnodes, nproc = h.fields.get("nnodes", ""), h.fields.get("nproc", "")
    return int(nnodes) * int(nproc) if h.signature == "torchrun_cmd" and nnodes.isdigit() and nproc.isdigit() else 0


def world_sizes(hits: Iterable[Hit]) -> set[int]:
    """Every world size the hits name (`world_size=8`, `WORLD_SIZE=8`, `MEMBER: 1/8`, `global rank 6 of 8`)."""
    return {int(h.fields[k]) for h in hits for k in WORLD_KEYS if h.fields.get(k, "").isdigit()}


def _even_share(nodes: dict[int, str], hits: Sequence[Hit]) -> int:
    """The ranks each host holds when the logs give one world size over the hosts they name; 0 when not."""
    worlds = world_sizes(hits)
    hosts = {h.node for h in hits if h.node}
    if len(worlds) != 1 or len(hosts) < 2 or not set(nodes.values()) <= hosts:
        return 0
    world = next(iter(worlds))
    return world // len(hosts) if world % len(hosts) == 0 else 0
