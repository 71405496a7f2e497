"""What `nvrx-hpc run` was asked to do, validated before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nvrx_hpc.core.errors import ConfigError

__all__ = ["RunSettings", "COMM_SECTIONS"]

# Ranks inside these sections are waiting on peers; a hang is blamed on a rank outside them first.
COMM_SECTIONS = frozenset({"allreduce", "all_reduce", "barrier", "collective", "comm", "communication", "broadcast"})


@dataclass(frozen=True)
class RunSettings:
    command: list[str]
    run_dir: Path
    spares: int = 0
    tasks_per_node: int = 1
    cpus_per_task: int | None = None  # passed to the training step (22.05's srun does not inherit it)
    gpus_per_task: int | None = None
    max_restarts: int = 3
    max_no_progress: int = 3
    min_nodes: int | None = None
    heartbeat_timeout: float | None = None  # None: default, then calibrated
    initial_timeout: float | None = None
    section_timeouts: dict[str, float] = field(default_factory=dict)
    mode: str = "user"
    stop_grace_s: float = 5.0
    agent_timeout_s: float = 30.0
    agent_silent_s: float = 15.0  # an agent link up but silent this long counts as lost (agents report every 1 s)
    health_interval_s: float = 30.0  # the agents' health loop; 0 turns it off
    agent_socket: str = "/run/nvrx/%j/agent-%n.sock"  # site mode: where the Prolog-started agents listen
    exclude_after: int = 3  # a node behind this many failures within exclude_window_s goes, healthy or not
    exclude_window_s: float = 3600.0
    attribution: bool = True  # stop at once when attribution judges a failure not restartable
    comm_sections: frozenset[str] = COMM_SECTIONS

    def validate(self, allocated_nodes: int) -> None:
        if not self.command:
            raise ConfigError("no training command given", hint="nvrx-hpc run [OPTIONS] -- python train.py ...")
        if self.mode not in ("user", "site"):
            raise ConfigError(f"--mode must be user or site, not {self.mode!r}")
        if self.spares < 0 or self.tasks_per_node < 1 or self.max_restarts < 0 or self.max_no_progress < 1:
            raise ConfigError("--spares, --max-restarts must be >= 0; --tasks-per-node, --max-no-progress >= 1")
        if self.spares >= allocated_nodes:
            raise ConfigError(
                f"--spares {self.spares} leaves no node to train on: the allocation has {allocated_nodes}",
                hint="allocate nodes + spares nodes (sbatch --nodes)",
            )
        if self.min_nodes is not None and not 1 <= self.min_nodes <= allocated_nodes - self.spares:
            raise ConfigError(
                f"--min-nodes {self.min_nodes} must be between 1 and the {allocated_nodes - self.spares} training nodes"
            )
        if self.exclude_after < 1 or self.exclude_window_s <= 0:
            raise ConfigError("--exclude-after must be >= 1 and --exclude-window > 0 seconds")
        timeouts = (("--heartbeat-timeout", self.heartbeat_timeout), ("--initial-timeout", self.initial_timeout))
        for name, value in timeouts:
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {value:g}")
