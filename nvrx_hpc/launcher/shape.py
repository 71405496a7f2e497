"""The job's shape (nodes, spares, ranks per node, CPUs and GPUs per rank), taken from the allocation.

Ranks per node, in order of preference:

1. `--tasks-per-node` (the flag);
2. `SLURM_NTASKS_PER_NODE` (the job asked `--ntasks-per-node`);
3. a uniform `SLURM_TASKS_PER_NODE` (`2(x4)`), unless it is one per node on nodes with GPUs: a job
   that asked for GPUs and not for tasks gets Slurm's default of one task per node, and means one
   rank per GPU;
4. GPUs per node (`SLURM_GPUS_ON_NODE`);
5. one.

A shape the allocation cannot hold (more CPUs or GPUs per node than every node has) is a ConfigError
before anything starts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.slurm.api import JobContext

__all__ = ["Shape", "resolve_shape"]


@dataclass(frozen=True)
class Shape:
    nodes: int  # allocated nodes (training + spares)
    spares: int
    tasks_per_node: int
    source: str  # where tasks_per_node came from
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None

    @property
    def training_nodes(self) -> int:
        return self.nodes - self.spares

    @property
    def world_size(self) -> int:
        return self.training_nodes * self.tasks_per_node

    def describe(self) -> str:
        extra = "".join(
            f", {value} {what} per rank"
            for what, value in (("CPUs", self.cpus_per_task), ("GPUs", self.gpus_per_task))
            if value is not None
        )
        return (
            f"{self.training_nodes} node(s) x {self.tasks_per_node} rank(s) = world size {self.world_size}"
            f" + {self.spares} spare node(s); ranks per node from {self.source}{extra}"
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "training_nodes": self.training_nodes, "world_size": self.world_size}


def _tasks_per_node(ctx: JobContext, flag: int | None) -> tuple[int, str]:
    if flag is not None:
        return flag, "--tasks-per-node"
    if ctx.ntasks_per_node_requested is not None:
        return ctx.ntasks_per_node_requested, "SLURM_NTASKS_PER_NODE"
    gpus = ctx.gpus_per_node
    if ctx.ntasks_per_node is not None and not (ctx.ntasks_per_node == 1 and gpus):
        return ctx.ntasks_per_node, "SLURM_TASKS_PER_NODE"
    if gpus:
        return gpus, "GPUs per node"
    return 1, "default (Slurm gave no per-node task count)"


def resolve_shape(ctx: JobContext, tasks_per_node: int | None, spares: int) -> Shape:
    """The shape for this allocation; raises ConfigError when the allocation cannot hold it."""
    nodes = len(ctx.node_list)
    count, source = _tasks_per_node(ctx, tasks_per_node)
    if count < 1:
        raise ConfigError(f"ranks per node must be >= 1, got {count} (from {source})")
    shape = Shape(nodes, spares, count, source, ctx.cpus_per_task, ctx.gpus_per_task)
    cpus = count * (ctx.cpus_per_task or 1)
    if ctx.cpus_per_node is not None and cpus > ctx.cpus_per_node:
        per_task = f" x {ctx.cpus_per_task} CPUs per task" if ctx.cpus_per_task else ""
        raise ConfigError(
            f"{count} ranks per node (from {source}){per_task} need {cpus} CPUs per node, but this allocation "
            f"has {ctx.cpus_per_node} on its smallest node (SLURM_JOB_CPUS_PER_NODE)",
            hint=f"ask Slurm for them (sbatch --ntasks-per-node={count}) or pass a smaller --tasks-per-node",
        )
    if ctx.gpus_per_task and ctx.gpus_per_node is not None and count * ctx.gpus_per_task > ctx.gpus_per_node:
        raise ConfigError(
            f"{count} ranks per node x {ctx.gpus_per_task} GPUs per task need {count * ctx.gpus_per_task} GPUs "
            f"per node, but this allocation has {ctx.gpus_per_node}",
            hint="pass a smaller --tasks-per-node, or ask Slurm for more GPUs per node",
        )
    return shape
