"""What one training step runs on: its nodes in Slurm's order, its environment and its srun spec.

Without in-process restart the step runs the active nodes' ranks only; the spare nodes wait idle for the
next step. With it (`--inprocess`) the step also runs on the spare nodes, every task there a warm spare
rank, so that a lost or failed node's ranks move to a healthy node inside the running step
(docs/inprocess.md); each training node also holds `--spare-ranks` spare tasks after its ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nvrx_hpc.launcher.settings import RunSettings
from nvrx_hpc.launcher.steps import StepSpec, free_port
from nvrx_hpc.slurm.hostlist import sort_hosts

__all__ = ["StepLayout", "layout_step"]


@dataclass(frozen=True)
class StepLayout:
    nodes: list[str]  # every node of the step, in Slurm's order (its tasks are numbered in this order)
    training: list[str]  # those that hold training ranks
    spec: StepSpec
    env: dict[str, str]

    @property
    def width(self) -> int:
        """Tasks per node (training ranks and spare ranks)."""
        return self.spec.tasks_per_node


def layout_step(s: RunSettings, active: list[str], spares: list[str], restart: int, master_addr: str,
                socket_template: str, plugin: bool, store: str | None) -> StepLayout:
    """The step of attempt `restart` on the `active` nodes (and, with in-process restart, the `spares`);
    `store` is the in-process store's HOST:PORT, None without in-process restart."""
    ip, per_node = s.inprocess, s.tasks_per_node
    with_spares = ip.enabled and store is not None
    # Slurm places rank 0 on the first node in its own order
    nodes = sort_hosts(active + spares) if with_spares else sort_hosts(active)
    training = [n for n in nodes if n in active]
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(free_port()),
        "NVRX_RESTART_COUNT": str(restart),
        "NVRX_RUN_DIR": str(s.run_dir),
        "NVRX_TOKEN_FILE": str(s.run_dir / "token"),
        "NVRX_AGENT_SOCKET": socket_template,
        "TORCH_FR_BUFFER_SIZE": os.environ.get("TORCH_FR_BUFFER_SIZE", "2000"),
    }
    if with_spares:  # the spare ranks follow each node's training ranks (nvrx_hpc.inprocess.settings)
        spare_places = tuple(i for i, n in enumerate(nodes) if n not in active)
        env.update(ip.task_env(len(training) * per_node, per_node, store, spare_places))
    spec = StepSpec(
        nodes=nodes, tasks_per_node=per_node + ip.spare_ranks * ip.enabled, name=f"nvrx-train-{restart}",
        output=Path(s.run_dir) / "logs" / f"step-{restart}.log", env=env, command=s.command,
        nvrx_plugin=plugin, cpus_per_task=s.cpus_per_task, gpus_per_task=s.gpus_per_task, keep_going=ip.enabled,
    )  # fmt: skip
    return StepLayout(nodes, training, spec, env)
