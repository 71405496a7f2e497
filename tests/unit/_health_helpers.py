"""Helpers for the health unit tests: a simulated node with injected faults, and an in-memory Slurm.

`MemorySlurm` implements the part of the `SlurmBackend` protocol the drain code uses (node, list_nodes,
drain, resume); it is our own seam's test double, not a patched subprocess.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nvrx_hpc.core.errors import SlurmCommandError
from nvrx_hpc.health.api import Level
from nvrx_hpc.health.gpu_sim import SimBackend
from nvrx_hpc.health.policy import HealthPolicy, load_policy
from nvrx_hpc.health.registry import REGISTRY, CheckContext, CounterHistory, select_checks
from nvrx_hpc.health.runner import run_one
from nvrx_hpc.health.sim_faults import inject, parse_fault
from nvrx_hpc.slurm.api import NodeInfo, SlurmNodeNotFound


def policy(**sections) -> HealthPolicy:
    """The packaged defaults with `sections` merged over them: policy(ecc={"uncorrected_fatal": 5})."""
    return load_policy(env={}, overrides=sections or None)


class SimNode:
    """A simulated node `n2` whose faults live in `tmp_path`."""

    def __init__(self, tmp_path: Path, node: str = "n2", hang_s: float = 30.0) -> None:
        self.dir = tmp_path / "gpu-faults"
        self.node = node
        self.gpu = SimBackend(node, self.dir, hang_s=hang_s)
        self.counters = CounterHistory()

    def inject(self, *specs: str) -> None:
        inject(self.dir, self.node, [parse_fault(s) for s in specs])

    def context(self, pol: HealthPolicy | None = None, level: Level = Level.QUICK, bb: str | None = None):
        return CheckContext(self.node, self.gpu, pol or policy(), level, bb or "/dev/shm/nvrx/%j", self.counters)

    def run(self, check: str, pol: HealthPolicy | None = None, level: Level = Level.QUICK, bb: str | None = None):
        select_checks(Level.FULL)  # loads the check modules
        return run_one(REGISTRY[check], self.context(pol, level, bb))


class MemorySlurm:
    """Nodes in memory; `fail_drain` makes drain raise like a failing scontrol."""

    def __init__(self, *names: str) -> None:
        self.nodes = {n: NodeInfo(n, "idle") for n in names}
        self.calls: list[tuple] = []
        self.fail_drain = False

    def list_nodes(self) -> list[NodeInfo]:
        return list(self.nodes.values())

    def node(self, name: str) -> NodeInfo:
        if name not in self.nodes:
            raise SlurmNodeNotFound(name, self.nodes)
        return self.nodes[name]

    def drain(self, nodes, reason: str) -> None:
        self.calls.append(("drain", tuple(nodes), reason))
        if self.fail_drain:
            raise SlurmCommandError(["scontrol", "update"], 1, "slurm_update error: Access/permission denied")
        for n in nodes:
            self.nodes[n] = replace(self.nodes[n], flags=frozenset({"DRAIN"}), reason=reason)

    def resume(self, nodes) -> None:
        self.calls.append(("resume", tuple(nodes)))
        for n in nodes:
            self.nodes[n] = replace(self.nodes[n], flags=frozenset(), reason=None, state="idle")

    def admin_drain(self, name: str, reason: str) -> None:
        self.nodes[name] = replace(self.nodes[name], flags=frozenset({"DRAIN"}), reason=reason, reason_set_by="root")
