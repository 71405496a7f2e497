"""The configuration table: one frozen pydantic section per part of nvrx-hpc, each field with its default,
type and meaning. `core/config.py` resolves it (defaults < TOML < env < flags); docs/config.md lists it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.templates import absolute_path as _absolute
from nvrx_hpc.core.templates import expand_percent as _expand_percent
from nvrx_hpc.core.templates import percent_template as _percent_template
from nvrx_hpc.core.templates import run_dir_template as _format_template

__all__ = [
    "ClusterConfig",
    "SlurmConfig",
    "AgentConfig",
    "LauncherConfig",
    "HealthConfig",
    "AttributionConfig",
    "CkptConfig",
    "StragglerConfig",
    "LoggingConfig",
    "NvrxConfig",
]


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


AbsolutePath = Annotated[str, AfterValidator(_absolute)]
PercentTemplate = Annotated[str, AfterValidator(_absolute), AfterValidator(_percent_template)]
RunDirTemplate = Annotated[str, AfterValidator(_format_template)]
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)]
Port = Annotated[int, Field(ge=1024, le=65535)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
PostBackend = Literal["file", "webhook", "slack", "slurm_comment", "service"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


SIM_GPU_FAULTS_DIR = "gpu-faults"  # under cluster.state_dir: faults injected for the simulated GPU backend


class ClusterConfig(_Section):
    """The local development cluster started by `nvrx-hpc cluster up`."""

    state_dir: AbsolutePath = Field("/tmp/nvrx-cluster", description="Holds slurm.conf, logs and state.")
    nodes: int = Field(4, ge=1, le=64, description="Number of virtual nodes (one slurmd each).")
    cpus_per_node: int = Field(2, ge=1, le=1024, description="CPUs each virtual node advertises.")
    ctld_port: Port = Field(16817, description="TCP port of slurmctld.")
    slurmd_port_base: Port = Field(16901, description="First slurmd port; nodes use base, base+1, ...")

    @model_validator(mode="after")
    def _ports_do_not_collide(self) -> ClusterConfig:
        last = self.slurmd_port_base + self.nodes - 1
        if last > 65535:
            raise ValueError(f"slurmd ports {self.slurmd_port_base}..{last} run past 65535")
        if self.slurmd_port_base <= self.ctld_port <= last:
            raise ValueError(
                f"ctld_port {self.ctld_port} falls inside the slurmd ports {self.slurmd_port_base}..{last}"
            )
        return self


class SlurmConfig(_Section):
    """How nvrx-hpc talks to Slurm."""

    backend: Literal["cli", "pyslurm"] = Field("cli", description="cli: Slurm's commands; pyslurm: its API.")
    command_timeout_s: Seconds = Field(10.0, description="Deadline for one Slurm command, in seconds.")


class AgentConfig(_Section):
    """The node agent (one per node per job)."""

    socket: PercentTemplate = Field(
        "/run/nvrx/%j/agent-%n.sock", description="Unix socket of the agent; %j job id, %n node name."
    )
    bb_dir: PercentTemplate = Field("/dev/shm/nvrx/%j", description="Node-local burst buffer; %j, %n.")
    record_dir: AbsolutePath = Field(
        "/run/nvrx-hpc/agents", description="Root-only directory of the site agents' pid records and logs."
    )
    heartbeat_timeout_s: Seconds = Field(
        60.0, description="A rank silent this long after a beat is hung; left at the default, it is calibrated."
    )
    initial_timeout_s: Seconds = Field(600.0, description="Deadline for a rank's first heartbeat.")
    calibration_floor_s: Seconds = Field(
        5.0, description="Calibration never sets the heartbeat timeout below this (scheduler noise on a busy node)."
    )

    def socket_path(self, job_id: str, node: str) -> str:
        """The socket path for one job on one node."""
        return _expand_percent(self.socket, job_id, node)

    def bb_path(self, job_id: str, node: str) -> str:
        """The burst-buffer directory for one job on one node."""
        return _expand_percent(self.bb_dir, job_id, node)


class LauncherConfig(_Section):
    """The in-allocation restart coordinator (`nvrx-hpc run`)."""

    spares: int = Field(0, ge=0, description="Nodes of the allocation held back to replace failed ones.")
    max_restarts: int = Field(3, ge=0, description="In-allocation restarts before giving up.")
    max_no_progress: int = Field(3, ge=1, description="Stop after this many attempts in a row without progress.")
    min_nodes: int = Field(0, ge=0, description="With no spare left, shrink down to this many nodes (0: never).")
    run_dir: RunDirTemplate = Field(
        "{submit_dir}/nvrx-runs/{job_id}", description="Run dir on shared storage."
    )
    mode: Literal["user", "site"] = Field("user", description="user: exclude bad nodes; site: also drain them.")
    section_timeouts: dict[str, Seconds] = Field(
        default_factory=dict, description="Hang deadline per section name, seconds (env: name=s,name=s)."
    )
    stop_grace_s: float = Field(5.0, ge=0, description="SIGTERM to SIGKILL grace when a step is stopped.")
    health_interval_s: float = Field(30.0, ge=0, description="Seconds between the agents' health checks (0: off).")
    exclude_after: int = Field(3, ge=1, description="Exclude a healthy node behind this many failures.")
    exclude_window_s: Seconds = Field(3600.0, description="The window of exclude_after, seconds.")
    attribution: bool = Field(True, description="Stop at once on a failure attribution calls not restartable.")
    standby: bool = Field(
        False, description="Start the next attempt's ranks ahead, importing torch, while this one trains."
    )
    epilog_requeue: bool = Field(
        True, description="Site mode: the Epilog requeues a --nvrx job whose launcher died before it decided."
    )

    def run_path(self, submit_dir: str, job_id: str) -> str:
        """The run directory of one job."""
        return self.run_dir.format(submit_dir=submit_dir, job_id=job_id)


class HealthConfig(_Section):
    """GPU and host health checks (Prolog, Epilog, agent health loop)."""

    gpu_backend: Literal["nvml", "sim", "none"] = Field(
        "nvml", description="nvml: real; sim: simulated; none."
    )
    prolog_budget_s: Seconds = Field(10.0, description="Time the Prolog health gate may spend.")
    policy_file: AbsolutePath = Field(
        "/etc/nvrx-hpc/health-policy.toml", description="Site health policy over the defaults (optional here)."
    )
    hook_log: AbsolutePath = Field(
        "/var/log/nvrx-hpc/hooks.jsonl", description="One JSON line per Prolog/Epilog run, with the gate's decision."
    )


class AttributionConfig(_Section):
    """Attribution after a failure: posting the report, the Epilog's analysis, the service."""

    post: tuple[PostBackend, ...] = Field((), description="Posting backends run after each analysis, in order.")
    engine: Literal["auto", "hyperscan", "re2", "grep", "python"] = Field("auto", description="Log scan engine.")
    file_path: str | None = Field(None, description="file backend: a JSON-lines file; one summary per report.")
    webhook_url: str | None = Field(None, description="webhook backend: URL that receives report.json (POST).")
    webhook_token: str | None = Field(None, description="webhook backend: sent as `Authorization: Bearer`.")
    slack_url: str | None = Field(None, description="slack backend: a Slack-compatible incoming-webhook URL.")
    service_url: str | None = Field(None, description="service backend and --server: the `nvrx-hpc serve` URL.")
    service_token: str | None = Field(None, description="Token for the service (or service_token_file).")
    service_token_file: str | None = Field(None, description="File holding the service token (first line).")
    post_timeout_s: float = Field(5.0, gt=0, le=120, description="Deadline of one HTTP attempt, seconds.")
    post_retries: int = Field(3, ge=0, le=10, description="Retries of a failed HTTP attempt (5xx, 429, network).")
    post_backoff_s: float = Field(0.5, ge=0, le=60, description="First retry delay; doubles each retry.")
    epilog_enabled: bool = Field(True, description="Whether `nvrx-hpc epilog` starts an analysis for failed jobs.")
    epilog_budget_s: float = Field(120.0, gt=0, le=3600, description="Wall-time budget of the Epilog's analysis.")
    epilog_slurm_timeout_s: float = Field(5.0, gt=0, le=60, description="Deadline of the Epilog's scontrol call.")
    serve_host: str = Field("127.0.0.1", description="Address `nvrx-hpc serve` binds.")
    serve_port: int = Field(8731, ge=1, le=65535, description="Port `nvrx-hpc serve` binds.")
    serve_db: str = Field("/var/lib/nvrx-hpc/attribution.sqlite", description="SQLite database of the service.")
    serve_max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Largest request body accepted.")
    drain_after: int = Field(3, ge=1, description="Culprit this many times within drain_window_days: drain.")
    drain_window_days: float = Field(7.0, gt=0, description="Window of the node history for draining advice.")

    def token(self) -> str | None:
        """The service token from `service_token` or the first line of `service_token_file`.

        Raises:
            ConfigError: the token file cannot be read.
        """
        if self.service_token:
            return self.service_token
        if self.service_token_file:
            try:
                return Path(self.service_token_file).read_text(encoding="utf-8").splitlines()[0].strip()
            except (OSError, IndexError) as exc:
                raise ConfigError(
                    f"cannot read the service token from {self.service_token_file}: {exc}",
                    hint="write the token on the first line of that file, readable by this user",
                ) from None
        return None


class CkptConfig(_Section):
    """The async checkpoint layer (`AsyncCheckpointer`); keywords given in code win over these."""

    shared_dir: AbsolutePath | None = Field(None, description="Shared file system directory for drained versions.")
    scheme: Literal["none", "partner", "xor"] = Field("partner", description="Redundancy: none, partner or xor.")
    set_size: int = Field(8, ge=2, le=1024, description="XOR: failure domains per parity set (at least).")
    keep: int = Field(2, ge=1, le=1000, description="Committed versions kept in the burst buffer.")
    drain_every: int = Field(0, ge=0, description="Copy every M-th committed version to shared_dir (0: never).")
    drain_bandwidth_mib_s: float = Field(0.0, ge=0, description="Cap per rank for draining, MiB/s (0: none).")
    drain_keep: int = Field(0, ge=0, description="Versions kept in shared_dir (0: all).")
    chunk_mib: int = Field(64, ge=1, le=1024, description="Size of one transport message and one write, MiB.")
    wait_timeout_s: Seconds = Field(3600.0, description="Longest `wait()` before it raises CheckpointError.")
    reprotect: bool = Field(True, description="After a restore that used replicas, protect it again at once.")


class StragglerConfig(_Section):
    """Slow ranks found from their section timings (docs/straggler.md); `nvrx-hpc straggler set` changes
    enabled, threshold and exclude_at_restart while a job runs."""

    enabled: bool = Field(True, description="Score ranks and flag stragglers.")
    threshold: float = Field(
        0.8, gt=0, le=1, description="Flag a rank whose score (median time / its time) stays below this."
    )
    window_s: Seconds = Field(5.0, description="Seconds of timings per scored window.")
    windows: int = Field(3, ge=1, le=20, description="Flagged when below the threshold in most of this many windows.")
    exclude_at_restart: bool = Field(False, description="Exclude a flagged rank's node at the next restart.")


class InprocessConfig(_Section):
    """In-process restart (`nvrx-hpc run --inprocess`, docs/inprocess.md): faults recovered inside the running
    ranks first; what cannot be recovered there restarts the step as usual."""

    enabled: bool = Field(False, description="Recover faults inside the running ranks (nvrx_hpc.inprocess).")
    spare_ranks: int = Field(0, ge=0, le=64, description="Warm spare ranks per node, started with the step.")
    soft_timeout_s: Seconds = Field(5.0, description="A rank missing from the in-process meeting this long is lost.")
    hard_timeout_s: Seconds = Field(60.0, description="A rank that cannot rejoin within this exits (code 95).")
    pg_timeout_s: Seconds = Field(30.0, description="Collective timeout: a peer hung this long ends the round.")
    max_restarts: int = Field(50, ge=0, description="In-process restarts in one step before the step restarts.")
    refill_max: int = Field(
        64, ge=0, description="Spare tasks started in refill steps per training step at most (0: never refill)."
    )


class LoggingConfig(_Section):
    """Operator logs (stderr)."""

    level: LogLevel = Field("WARNING", description="DEBUG, INFO, WARNING, ERROR or CRITICAL (any case).")


class NvrxConfig(_Section):
    """The whole configuration; every field has a default, so `NvrxConfig()` is valid."""

    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    launcher: LauncherConfig = Field(default_factory=LauncherConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    attribution: AttributionConfig = Field(default_factory=AttributionConfig)
    ckpt: CkptConfig = Field(default_factory=CkptConfig)
    straggler: StragglerConfig = Field(default_factory=StragglerConfig)
    inprocess: InprocessConfig = Field(default_factory=InprocessConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
