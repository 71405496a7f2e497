"""Where the dev cluster keeps its files: one state directory, one sub-directory per concern."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nvrx_hpc.core.config_model import SIM_GPU_FAULTS_DIR

__all__ = ["DevClusterSpec", "Layout"]

# Default ports stay clear of a site Slurm's 6817/6818.
DEFAULT_CTLD_PORT = 16817
DEFAULT_SLURMD_PORT_BASE = 16901


@dataclass(frozen=True)
class DevClusterSpec:
    """What to bring up. `spank_plugin` None starts the cluster without our plugin."""

    state_dir: Path = Path("/tmp/nvrx-cluster")
    nodes: int = 4
    cpus_per_node: int = 2
    ctld_port: int = DEFAULT_CTLD_PORT
    slurmd_port_base: int = DEFAULT_SLURMD_PORT_BASE
    spank_plugin: Path | None = None
    cluster_name: str = "nvrxdev"
    node_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir).absolute())
        object.__setattr__(self, "node_names", tuple(f"n{i}" for i in range(1, self.nodes + 1)))


@dataclass(frozen=True)
class Layout:
    """Paths under the state directory."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def plugstack_conf(self) -> Path:
        return self.etc / "plugstack.conf"

    @property
    def plugstack_dir(self) -> Path:
        return self.etc / "plugstack.conf.d"

    @property
    def spec_file(self) -> Path:
        return self.etc / "spec.json"

    @property
    def env_file(self) -> Path:
        return self.root / "env.sh"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def manifest(self) -> Path:
        """JSON record of every daemon this tool started: name, pid, start time."""
        return self.pids / "started.json"

    @property
    def gpu_faults(self) -> Path:
        """Per-node injected GPU faults for the simulated NVML backend."""
        return self.root / SIM_GPU_FAULTS_DIR

    def hook_script(self, kind: str) -> Path:
        return self.etc / f"{kind}.sh"

    def node_etc(self, node: str) -> Path:
        return self.etc / node

    def spool(self, node: str) -> Path:
        return self.root / "spool" / node

    def pmix(self, node: str) -> Path:
        return self.root / "pmix" / node

    def agent_run(self, node: str) -> Path:
        """Where the node agents of `node` put their sockets (the SPANK plugin's %n)."""
        return self.root / "run" / node

    @property
    def agent_records(self) -> Path:
        """Root's pid records and logs of the site agents (agent.record_dir), on every virtual node."""
        return self.root / "agents"

    def burst_buffer(self, node: str) -> Path:
        """The node-local burst buffer of virtual node `node`: wiping it simulates losing the node's disk."""
        return self.root / "bb" / node
