"""What `nvrx-hpc run` was asked to do, validated before anything starts.

The tunables are keys of the configuration (`[launcher]`, `[agent]`); `RunSettings.from_config` copies
them, so their defaults live in `core/config_model.py` only. The rest is this run's: its command, run
directory and the shape the allocation gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nvrx_hpc.core.config import NvrxConfig, ResolvedConfig
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.launcher.standby_exec import python_command
from nvrx_hpc.straggler.detector import StragglerSettings

__all__ = ["RunSettings", "InprocessRun", "COMM_SECTIONS", "agent_status_s"]

# Ranks inside these sections are waiting on peers; a hang is blamed on a rank outside them first.
COMM_SECTIONS = frozenset({"allreduce", "all_reduce", "barrier", "collective", "comm", "communication", "broadcast"})
_L, _A = NvrxConfig().launcher, NvrxConfig().agent  # the defaults of the keys below, from the one table


AGENTS_PER_SECOND = 512  # status reports the launcher takes per second at most (docs/scale.md)


def agent_status_s(nodes: int) -> float:
    """How often each agent sends its status: every second up to 512 nodes, then less often, so that the
    launcher takes at most ~512 reports a second (at 2,048 nodes: every 4 s)."""
    return max(1.0, nodes / AGENTS_PER_SECOND)


@dataclass(frozen=True)
class InprocessRun:
    """`[inprocess]`: recover inside the ranks first (docs/inprocess.md); the ranks read these from NVRX_IP_*."""

    enabled: bool = False
    spare_ranks: int = 0  # per node
    soft_timeout_s: float = 5.0
    hard_timeout_s: float = 60.0
    pg_timeout_s: float = 30.0
    max_restarts: int = 50
    refill_max: int = 64  # spare tasks started in refill steps per training step (nvrx_hpc.launcher.refill)

    def task_env(self, world: int, tasks_per_node: int, store: str,
                 spare_nodes: tuple[int, ...] = ()) -> dict[str, str]:
        """The ranks' NVRX_IP_*; `spare_nodes`: the places in the step of the nodes whose tasks are all spares."""
        from nvrx_hpc.inprocess import settings as ip

        return {
            ip.ENV_STORE: store, ip.ENV_WORLD: str(world), ip.ENV_TASKS_PER_NODE: str(tasks_per_node),
            ip.ENV_SPARES_PER_NODE: str(self.spare_ranks), ip.ENV_SOFT: str(self.soft_timeout_s),
            ip.ENV_HARD: str(self.hard_timeout_s), ip.ENV_PG_TIMEOUT: str(self.pg_timeout_s),
            ip.ENV_MAX_ROUNDS: str(self.max_restarts), ip.ENV_SPARE_NODES: ",".join(map(str, spare_nodes)),
        }  # fmt: skip


@dataclass(frozen=True)
class RunSettings:
    command: list[str]
    run_dir: Path
    spares: int = _L.spares
    tasks_per_node: int = 1
    cpus_per_task: int | None = None  # passed to the training step (22.05's srun does not inherit it)
    gpus_per_task: int | None = None
    max_restarts: int = _L.max_restarts
    max_no_progress: int = _L.max_no_progress
    min_nodes: int | None = None  # None: never shrink (launcher.min_nodes = 0)
    heartbeat_timeout: float = _A.heartbeat_timeout_s
    calibrate_heartbeat: bool = True  # the timeout was not set by hand: the agents calibrate it
    initial_timeout: float = _A.initial_timeout_s
    calibration_floor_s: float = _A.calibration_floor_s
    section_timeouts: dict[str, float] = field(default_factory=dict)
    mode: str = _L.mode
    stop_grace_s: float = _L.stop_grace_s
    agent_timeout_s: float = 30.0
    agent_silent_s: float = 15.0  # an agent link up but silent this long counts as lost (agents report every 1 s)
    health_interval_s: float = _L.health_interval_s  # the agents' health loop; 0 turns it off
    agent_socket: str = _A.socket  # site mode: where the Prolog-started agents listen
    exclude_after: int = _L.exclude_after  # a node behind this many failures within exclude_window_s goes
    exclude_window_s: float = _L.exclude_window_s
    attribution: bool = _L.attribution  # stop at once when attribution judges a failure not restartable
    comm_sections: frozenset[str] = COMM_SECTIONS
    straggler: StragglerSettings = StragglerSettings(comm_sections=COMM_SECTIONS)
    inprocess: InprocessRun = InprocessRun()
    standby: bool = _L.standby  # the next attempt's ranks wait, imported, in a standby step (standby_step.py)

    @classmethod
    def from_config(
        cls, resolved: ResolvedConfig, *, command: list[str], run_dir: Path, **shape: int | None
    ) -> RunSettings:
        """The run's settings from the effective config (flags already applied as overrides) and its own facts."""
        launcher, agent = resolved.config.launcher, resolved.config.agent
        return cls(
            command=command, run_dir=run_dir, **shape,  # type: ignore[arg-type]
            spares=launcher.spares, max_restarts=launcher.max_restarts, max_no_progress=launcher.max_no_progress,
            min_nodes=launcher.min_nodes or None, heartbeat_timeout=agent.heartbeat_timeout_s,
            calibrate_heartbeat=resolved.sources["agent.heartbeat_timeout_s"] == "default",
            initial_timeout=agent.initial_timeout_s, calibration_floor_s=agent.calibration_floor_s,
            section_timeouts=dict(launcher.section_timeouts),
            mode=launcher.mode, stop_grace_s=launcher.stop_grace_s, health_interval_s=launcher.health_interval_s,
            agent_socket=agent.socket, exclude_after=launcher.exclude_after,
            exclude_window_s=launcher.exclude_window_s, attribution=launcher.attribution,
            straggler=StragglerSettings.from_config(resolved.config.straggler, COMM_SECTIONS),
            inprocess=InprocessRun(**resolved.config.inprocess.model_dump()), standby=launcher.standby,
        )  # fmt: skip

    def agent_timeouts(self) -> dict:
        """The hang deadlines every step's `la.timeouts` gives the agents."""
        return {
            "initial": self.initial_timeout, "heartbeat": self.heartbeat_timeout,
            "sections": dict(self.section_timeouts), "out_of_section": None, "calibrate": self.calibrate_heartbeat,
            "floor": self.calibration_floor_s,
        }  # fmt: skip

    def validate(self, allocated_nodes: int) -> None:
        """What only the allocation can tell (each key's own range is checked by the config)."""
        if not self.command:
            raise ConfigError("no training command given", hint="nvrx-hpc run [OPTIONS] -- python train.py ...")
        if self.spares >= allocated_nodes:
            raise ConfigError(
                f"--spares {self.spares} leaves no node to train on: the allocation has {allocated_nodes}",
                hint="allocate nodes + spares nodes (sbatch --nodes)",
            )
        if self.inprocess.spare_ranks and not self.inprocess.enabled:
            raise ConfigError("--spare-ranks needs in-process restart", hint="add --inprocess")
        if self.standby and python_command(self.command) is None:
            raise ConfigError(
                "--standby runs the training script inside a waiting Python process: the command must be "
                "`python SCRIPT ...` or `python -m MODULE ...`", hint="drop --standby, or start the script with python"
            )
        if self.standby and self.inprocess.enabled:
            raise ConfigError("--standby and --inprocess do not go together: in-process restart keeps its own "
                              "warm spare ranks", hint="choose one")  # fmt: skip
        if self.min_nodes is not None and not 1 <= self.min_nodes <= allocated_nodes - self.spares:
            raise ConfigError(
                f"--min-nodes {self.min_nodes} must be between 1 and the {allocated_nodes - self.spares} training nodes"
            )
