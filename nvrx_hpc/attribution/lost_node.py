"""Which node a node failure lost, and its ranks (rounds 4, 8 and 9).

Slurm's `*** JOB 12 ON n1 CANCELLED AT ... DUE TO NODE FAILURE ***` names the node the step's
slurmstepd ran on, a survivor; the lost node prints nothing. Two sources name it:

- Slurm itself: `sinfo -R` (`Not responding  slurm  2024-09-02T18:03:41  n6`), slurmctld's `Nodes n6
  not responding`, a one-line `scontrol -o show node` with `State=DOWN+NOT_RESPONDING`: the one job
  host so reported (or the one host, when the job's hosts are unknown).
- srun's teardown: it lists the tasks it saw end on every node it still hears from (`n1: tasks 0-7:
  Killed`); a node of the job (placed by a banner, a prefix) that those lists leave out, when exactly
  one is, is the node srun no longer hears from.

Its ranks are the job's ranks no source places on another node, when they are one node's share.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence

from nvrx_hpc.attribution.aliases import short_hosts
from nvrx_hpc.attribution.api import Hit

__all__ = ["lost_host", "ranks_of_lost_node", "taken_vm", "place_lost_daemon"]

_BRACKET = re.compile(r"^([^\[]*)\[([\d,-]+)\](.*)$")


def _hosts(names: str) -> list[str]:
    """`gpu-c-[105,107-108]` -> its hosts; a plain name -> itself."""
    m = _BRACKET.match(names)
    if not m:
        return [names]
    out = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        width = len(lo)
        if lo.isdigit() and (not hi or hi.isdigit()):
            out += [f"{m.group(1)}{i:0{width}d}{m.group(3)}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def lost_host(hits: Sequence[Hit], rank_nodes: Mapping[int, str]) -> str | None:
    """The node Slurm lost when its node-failure lines name only a survivor (see the module doc)."""
    job_hosts = set(rank_nodes.values())
    reported = {host for h in hits if h.signature == "slurm_node_not_responding"
                for host in _hosts(h.node or h.fields.get("host", ""))}  # fmt: skip
    reported.discard("")
    named = reported & job_hosts if job_hosts else reported
    if len(named) == 1:
        return next(iter(named))
    heard = {h.node for h in hits if h.signature == "srun_task_exit" and h.node}
    unheard = job_hosts - heard
    if heard and heard <= job_hosts and len(unheard) == 1:
        return next(iter(unheard))
    return None


def ranks_of_lost_node(lost: set[str], universe: set[int], rank_nodes: Mapping[int, str]) -> list[int]:
    """The ranks of a node that failed print nothing: they are the job's ranks that no source places on
    another node, when those are one node's share (as many as each other node holds, when they hold the
    same number; else at most as many as the fullest)."""
    if len(lost) != 1 or not universe:
        return []
    # Else the ranks a source places on the lost node itself (srun's `nid7: tasks 20-23: Killed`).
    placed = sorted(r for r, n in rank_nodes.items() if n in lost)
    elsewhere = defaultdict(set)
    for r, n in rank_nodes.items():
        if n not in lost:
            elsewhere[n].add(r)
    left = universe - {r for rs in elsewhere.values() for r in rs}
    shares = {len(rs) for rs in elsewhere.values()}
    if not left or not shares or len(left) > max(shares) or (len(shares) == 1 and len(left) not in shares):
        return placed
    return sorted(left)


# a VM the cloud took back, a pod evicted or deleted
_TAKEN = ("cloud_preempted", "gce_operation_preempted", "azureml_preempted", "k8s_preempted", "k8s_pod_deleted")


def taken_vm(
    signature: str, nodes: Sequence[str], universe: set[int], rank_nodes: Mapping[int, str]
) -> tuple[list[str], list[int]]:
    """The VM a cloud took back (`cloud_preempted`) and its ranks, when the rank map places ranks on it (round 35:
    EC2's `Server.SpotInstanceTermination` for one worker of two), or the one node srun could not launch the step on
    (round 55b) or Slurm drained for a failed prolog (round 57a; its slurmd's own log, round 77d) or whose slurmd
    lost the batch script (batch_host.py) or an admin drained under the job's pods (round 86c); else no node and no
    rank, as for Slurm's time limit or a cancel, which end
    the whole job."""
    if signature in ("slurm_task_launch_failed", "slurm_node_prolog_error", "slurm_prolog_epilog_failed",
                     "slurm_script_missing", "k8s_node_drained") and len(set(nodes)) == 1:
        return list(nodes), []  # srun could not start the step there, or its prolog failed: the node, no rank ran
    ranks = ranks_of_lost_node(set(nodes), universe, rank_nodes) if signature in _TAKEN else []
    return (list(nodes), ranks) if ranks else ([], [])


def place_lost_daemon(hits: Sequence[Hit]) -> list[Hit]:
    """Open MPI's `ORTE has lost communication with its daemon located on node:` names the node a few lines
    below (`  hostname:  ip-10-15-20-17.ec2.internal`): the lost node (round 37)."""
    hosts = [h for h in hits if h.signature == "mpi_daemon_host"]
    if not hosts:
        return list(hits)
    out = []
    for h in hits:
        if h.signature == "mpi_daemon_lost" and h.node is None:
            below = next((g for g in hosts if g.source == h.source and 0 < g.line - h.line <= 4), None)
            if below is not None:
                h = dataclasses.replace(h, node=short_hosts([below.fields.get("host", "")])[0] or None)
        out.append(h)
    return out
