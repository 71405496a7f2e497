"""The rank that ran on a faulted GPU, from its PCI bus: an Xid names the GPU by bus (`Xid (PCI:0000:ab:00)`),
NCCL's `comm ... rank 29 nranks 32 ... busId ab000 - Init COMPLETE` line names each rank's bus on its host.

Bus ids repeat across hosts (every node has a GPU at `ab:00`), so a bus names a rank only together with the
host of the Xid (round 11). Without NCCL's lines, a rank's start-up line may name its bus itself (`[rank 5]
host=h device=cuda:1 pci=0000:65:00.0`), or an `nvidia-smi` listing gives the bus's GPU index and the one rank
of that host whose start-up line names `cuda:<index>` ran on it (round 27; a listing or rank line with no host
of its own counts, but only one rank may match)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence

from nvrx_hpc.attribution.api import Hit
from nvrx_hpc.attribution.localise import rank_nodes as map_rank_nodes

__all__ = ["ranks_on_buses", "rank_on_device", "idle_gpu_rank", "named_pair_ranks"]

_PCI = re.compile(r"([0-9a-fA-F]{2}):[0-9a-fA-F]{2}(?:\.[0-7])?$")  # ...bus:device[.function] at the end


_COMM_RANK = re.compile(r"\brank (\d+) n[Rr]anks ")


def _xid_bus(gpu: str) -> int | None:
    """`gpu-b14:0000:ab:00` or `0000:ab:00.0` -> 0xab."""
    m = _PCI.search(gpu)
    return int(m.group(1), 16) if m else None


def _nccl_bus(bus_id: str) -> int | None:
    """NCCL's `busId ab000` (bus, device, function in hex, no domain) -> 0xab."""
    return int(bus_id[:-3], 16) if len(bus_id) > 3 else None


_INDEX_ROWS = ("gpu_index_bus", "smi_uncorrected_ecc")  # nvidia-smi rows pairing a GPU's index with its bus


def ranks_on_buses(
    gpus: Iterable[str], nodes: Sequence[str], hits: Sequence[Hit], rank_nodes: Mapping[int, str] | None = None
) -> list[int]:
    """Global ranks whose NCCL world communicator ran on one of `gpus` (Xid bus ids) on one of `nodes`; or the
    rank at the index of the one GPU an `nvidia-smi` listing names (smi_sections.py)."""
    listed = _rank_on_listed_gpu(gpus, hits, rank_nodes or {})
    if listed:
        return listed
    buses = {b for g in gpus if (b := _xid_bus(g)) is not None}
    hosts = {h.node for h in hits if h.node}
    if not nodes and len(hosts) <= 1:
        nodes = sorted(hosts) or [""]  # a one-host job whose fault line names no host (round 91e: nvidia-smi's)
    if not buses or not nodes:
        return []
    inits = [h for h in hits if h.signature == "nccl_comm_init" and h.fields.get("bus") and h.node in nodes]
    world = max((int(h.fields["world"]) for h in inits if h.fields.get("world", "").isdigit()), default=0)
    found = set()
    for h in inits:  # the line's own `rank N`: a launcher's prefix may give a local rank instead
        m = _COMM_RANK.search(h.text)
        if m and h.fields.get("world") == str(world) and _nccl_bus(h.fields["bus"]) in buses:
            found.add(int(m.group(1)))
    return sorted(found) or _ranks_on_indexes(buses, nodes, hits, rank_nodes or {})


def _rank_on_listed_gpu(gpus: Iterable[str], hits: Sequence[Hit], rank_nodes: Mapping[int, str]) -> list[int]:
    """[rank] on the one GPU of `gpus` an nvidia-smi listing gave by index: its host's rank at that index, or the
    index itself on a job of that one host (local rank i is rank i)."""
    listed = {f"{h.node}:{h.gpu}" if h.node else str(h.gpu) for h in hits if "smi_index" in h.fields} & set(gpus)
    if len(listed) != 1:
        return []
    host, _, index = next(iter(listed)).rpartition(":")
    if not index.isdigit():
        return []
    rank = block_rank(rank_nodes, host, int(index))
    hosts = {h.node for h in hits} - {None}
    if rank is None and len(hosts) <= 1 and (not host or hosts <= {host}):
        rank = int(index)
    return [] if rank is None else [rank]


def _ranks_on_indexes(
    buses: set[int], nodes: Sequence[str], hits: Sequence[Hit], rank_nodes: Mapping[int, str]
) -> list[int]:
    """The one rank whose start-up line names the bus itself (`[rank 5] host=h device=cuda:1 pci=0000:65:00.0`), or
    the one whose `cuda:` index nvidia-smi lists at the bus; with no rank naming its device, the node's rank at that
    index in its block of consecutive ranks (a launcher gives local rank i the GPU i; round 40)."""
    # on one node, a start-up line with no host of its own is that node's
    short = {n.split(".")[0] for n in nodes} | ({""} if len(set(nodes)) == 1 else set())
    direct = {int(h.fields["drank"]) for h in hits if h.signature == "rank_device" and h.fields.get("pbus")
              and int(h.fields["pbus"], 16) in buses
              and (h.fields.get("dhost") or h.node or "").split(".")[0] in short}  # fmt: skip
    if len(direct) == 1:
        return sorted(direct)
    here = [h for h in hits if h.node in nodes or h.node is None]
    indexes = {h.fields.get("index") or h.fields.get("index2") for h in here if h.signature in _INDEX_ROWS
               and int(h.fields["bus"], 16) in buses}  # fmt: skip
    if len(indexes) != 1:
        return []
    ranks = {int(h.fields["drank"]) for h in here if h.signature == "rank_device" and h.fields.get("device") in indexes}
    if not ranks and len(set(nodes)) == 1 and not any(h.signature == "rank_device" for h in here):
        return rank_on_device([f"{nodes[0]}:{next(iter(indexes))}"], rank_nodes)
    return sorted(ranks) if len(ranks) == 1 else []


def block_rank(rank_nodes: Mapping[int, str], host: str, index: int, size: int | None = None) -> int | None:
    """The rank at `index` of `host`'s ranks when they are one block of consecutive ranks (and `size` of them, when
    given): a launcher that starts one process a GPU gives local rank i the device i (DeepSpeed, torchrun)."""
    block = sorted(r for r, n in rank_nodes.items() if n.split(".")[0] == host.split(".")[0])
    if not block or block[-1] - block[0] != len(block) - 1 or not 0 <= index < len(block):
        return None
    return block[index] if size is None or len(block) == size else None


def rank_on_device(gpus: Sequence[str], rank_nodes: Mapping[int, str]) -> list[int]:
    """The rank that ran on a node's `cuda:<index>` a CUDA error names (`node:5`), when the index is above 0:
    index 0 may be a process that sees only its own GPU (round 29)."""
    if len(gpus) != 1 or ":" not in gpus[0]:
        return []
    node, _, index = gpus[0].rpartition(":")
    rank = block_rank(rank_nodes, node, int(index)) if index.isdigit() and int(index) > 0 else None
    return [] if rank is None else [rank]


def idle_gpu_rank(hits: Sequence[Hit], rank_nodes: Mapping[int, str], universe: set[int]) -> list[int]:
    """The rank whose GPU a pasted nvidia-smi shows without a process while every other GPU of the listing has one
    (round 40: one rank died of its own error, its peers still spin at 100 %): local rank i runs on GPU i, so it is
    the host's rank at that index of its block of consecutive ranks, or the index itself when the listing's GPUs
    are the whole job's; so too the one GPU of a `--query-gpu` listing at 0 % with no memory. [] unless exactly one
    listing shows exactly one such GPU."""
    gpus: dict[str, set[int]] = {}
    busy: dict[str, set[int]] = {}
    hosts: dict[str, str | None] = {}
    for h in hits:
        if h.signature in _INDEX_ROWS and (h.fields.get("index") or h.fields.get("index2") or "").isdigit():
            gpus.setdefault(h.source, set()).add(int(h.fields.get("index") or h.fields["index2"]))
        elif h.signature == "smi_gpu_process":
            busy.setdefault(h.source, set()).add(int(h.fields["gindex"]))
            hosts.setdefault(h.source, h.node)
        elif h.signature == "smi_csv_load":  # a query's row: busy when it has load or memory (round 105h)
            gpus.setdefault(h.source, set()).add(int(h.fields["cindex"]))
            if int(h.fields["util"]) or int(h.fields["mem"]):
                busy.setdefault(h.source, set()).add(int(h.fields["cindex"]))
                hosts.setdefault(h.source, h.node)
    found = set()
    for source, running in busy.items():
        idle = gpus.get(source, set()) - running
        if len(gpus.get(source, ())) < 2 or len(idle) != 1 or not running <= gpus[source]:
            continue
        index, host = idle.pop(), hosts[source]
        rank = None if host is None else block_rank(rank_nodes, host, index, size=len(gpus[source]))
        if rank is not None:
            found.add(rank)
        elif host is None and universe == set(range(len(gpus[source]))):
            found.add(index)
    return sorted(found) if len(found) == 1 else []


def named_pair_ranks(hits: Sequence[Hit], rank_hosts: Mapping[int, str]) -> list[Hit]:
    """`hits` where a line naming two GPUs of its node (`P2P is disabled between NVLINK connected GPUs 5 and 4`),
    printed by every rank of the node, is the first GPU's rank's: the ranks of those lines together are the pair's.
    Local rank i runs on GPU i; a line whose node's ranks are no block of consecutive ranks keeps its printer."""
    if not any("gpu_a" in h.fields for h in hits):
        return list(hits)
    nodes = {**rank_hosts, **map_rank_nodes(hits)}
    out = []
    for h in hits:
        if "gpu_a" in h.fields and h.node:
            rank = block_rank(nodes, h.node, int(h.fields["gpu_a"]))
            h = h if rank is None else dataclasses.replace(h, rank=rank, gpu=h.fields["gpu_a"])
        out.append(h)
    return out
