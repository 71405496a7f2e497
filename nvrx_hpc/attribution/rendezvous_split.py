"""A rendezvous that failed on every node by the launch command's doing, not the network's: no node could reach the
store, or the nodes each waited at a rendezvous of their own, which none could complete.

- the store's address is a list of hosts (`store_address_host_list`, round 101f): no node could reach it;
- torchrun ignored `--master_addr` (a c10d rendezvous without an endpoint: `master_addr_ignored`, round 92g);
- torchrun's agents printed different rendezvous ids (`run_id : 6188` on one node, `run_id : 413` on the other): a
  `--rdzv-id` drawn at random on each node (round 101f).
"""

from __future__ import annotations

from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["own_rendezvous"]


def own_rendezvous(root: str, hits: Sequence[Hit]) -> str | None:
    """Why the rendezvous failure `root` (a signature) on the job's nodes is the launch command's, or None when nothing
    says it is: the store's address is a list of hosts, or the nodes waited at different rendezvous."""
    if root == "store_address_host_list":
        return "every node dialled that name, which no host has"
    if root != "store_failure":
        return None
    if any(h.signature == "master_addr_ignored" for h in hits):
        return "torchrun ignored --master_addr, so each node waited at a rendezvous of its own"
    ids = sorted({h.fields["run_id"] for h in hits if h.signature == "torchrun_run_id"} - {"none"})
    if len(ids) >= 2:
        return f"torchrun's agents waited under different rendezvous ids ({', '.join(ids[:4])}), each alone"
    return None
