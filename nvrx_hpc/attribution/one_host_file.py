"""A log whose start-up banners place all their ranks on one host is that host's log (round 81).

A script that starts one launcher per node and sends each node's output to its own file (`train_node1.log`)
leaves in it the banners of that node's ranks only (fairseq's `initialized host tn-gpu22 as rank 4`, one per
rank). A line of that file that names no host is that host's, and a failure that names only its GPU
(`CUDA out of memory. Tried to allocate 1.13 GiB (GPU 2; ...)`) is the rank of that node that drives the GPU:
every launcher gives local rank L the node's L-th device, and the node's ranks are its first rank plus L (not
`GPU 0`, which is also what each process sees when it was given one GPU of its own).
A file whose banners name two hosts, or one rank, places nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from nvrx_hpc.attribution.api import Hit, Role

__all__ = ["place_by_one_host_file"]


def place_by_one_host_file(hits: Sequence[Hit], file_ranks: Mapping[str, Mapping[int, str]]) -> list[Hit]:
    """`hits` with the unplaced lines of a one-host file (see the module) placed on its host, and its unranked
    failures that name a GPU given that GPU's rank."""
    homes: dict[str, tuple[str, list[int]]] = {}
    for source, ranks in file_ranks.items():
        hosts = set(ranks.values())
        if len(ranks) >= 2 and len(hosts) == 1:
            homes[source] = (hosts.pop(), sorted(ranks))
    if not homes:
        return list(hits)
    out = []
    for h in hits:
        home = homes.get(h.source)
        if home is not None and h.node is None:
            host, ranks = home
            contiguous = ranks == list(range(ranks[0], ranks[0] + len(ranks)))
            rank, gpu = h.rank, h.gpu or ""
            # `GPU 0` is also what every process sees that was given one GPU of its own: it says nothing
            if rank is None and h.role is Role.ROOT and gpu.isdigit() and contiguous and 0 < int(gpu) < len(ranks):
                rank = ranks[int(gpu)]
            h = dataclasses.replace(h, node=host, rank=rank)
        out.append(h)
    return out
