"""The seam to Slurm: the `SlurmBackend` protocol, the values it returns, and its errors.

Everything above `nvrx_hpc.slurm` imports only this module. Two backends implement the protocol:
`cli_backend.CliBackend` (sinfo/squeue/scontrol through `runner.CommandRunner`) and the optional
`pyslurm_backend.PyslurmBackend`; `backend.get_backend(name)` builds one by name.

Node states are normalised to one shape whatever the Slurm version printed: a lowercase base state
(`idle`, `allocated`, `mixed`, `down`, `error`, `future`, `unknown`) plus a set of uppercase flags
(`DRAIN`, `NOT_RESPONDING`, `COMPLETING`, ...). Job states are uppercase (`PENDING`, `RUNNING`,
`COMPLETED`, `FAILED`, ...) with their flags (`REQUEUED`, `COMPLETING`, ...) kept apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from nvrx_hpc.core.errors import SlurmError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.slurm.hostlist import compress

if TYPE_CHECKING:
    from nvrx_hpc.slurm.context import RequiredField

__all__ = [
    "SlurmBackend",
    "SlurmVersion",
    "NodeInfo",
    "JobInfo",
    "JobContext",
    "NODE_BASE_STATES",
    "JOB_BASE_STATES",
    "JOB_FINISHED_STATES",
    "SlurmJobNotFound",
    "SlurmNodeNotFound",
    "JobContextError",
    "SlurmRequestError",
]

NODE_BASE_STATES = frozenset({"unknown", "down", "idle", "allocated", "error", "mixed", "future"})
JOB_BASE_STATES = frozenset(
    {
        "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
        "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
    }
)  # fmt: skip
JOB_FINISHED_STATES = JOB_BASE_STATES - {"PENDING", "RUNNING", "SUSPENDED"}


class SlurmJobNotFound(SlurmError):
    """Slurm does not (or no longer) know the job: it never existed, or it ended more than MinJobAge ago."""

    def __init__(self, job_id: int | str) -> None:
        super().__init__(
            f"Slurm does not know job {job_id}",
            hint="finished jobs leave squeue/scontrol after MinJobAge (300 s by default); "
            "use sacct (with accounting) or the run directory's events.jsonl for older jobs",
        )
        self.job_id = job_id


class SlurmNodeNotFound(SlurmError):
    """No node of that name in the cluster."""

    exit_code = ExitCode.USAGE

    def __init__(self, name: str, known: Iterable[str] = ()) -> None:
        names = list(known)
        listing = f"; nodes are {compress(names)}" if names else ""
        super().__init__(f"Slurm has no node named {name!r}{listing}", hint="check the name with `sinfo -N`")
        self.name = name


class JobContextError(SlurmError):
    """A `SLURM_*` variable the caller needs is missing or malformed (not inside a Slurm job or step?)."""

    exit_code = ExitCode.USAGE


class SlurmRequestError(SlurmError, ValueError):
    """A request to a backend is malformed before anything reaches Slurm (empty node list, no reason, ...)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release, compared by number: `SlurmVersion(22, 5, 8) < SlurmVersion(23, 2, 0)`."""

    major: int
    minor: int
    micro: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def has_cli_json(self) -> bool:
        """sinfo/squeue --json exist from 21.08 on."""
        return (self.major, self.minor) >= (21, 8)

    @property
    def has_scontrol_json(self) -> bool:
        """`scontrol --json show ...` exists from 23.02 on (22.05 answers `unrecognized option`)."""
        return (self.major, self.minor) >= (23, 2)


@dataclass(frozen=True)
class NodeInfo:
    """One node as Slurm reports it, in the same shape for every Slurm version and backend.

    `state` is the lowercase base state; `flags` the uppercase state flags. `reason`, `reason_set_by`
    and `reason_time` are None when no reason is set.
    """

    name: str
    state: str
    flags: frozenset[str] = frozenset()
    reason: str | None = None
    reason_set_by: str | None = None
    reason_time: datetime | None = None
    address: str | None = None  # NodeAddr: where other nodes reach it (MASTER_ADDR for torch.distributed)
    partitions: tuple[str, ...] = ()  # the partitions it belongs to

    @property
    def drained(self) -> bool:
        """A drain was requested: the node takes no new jobs (it may still run old ones; see `draining`)."""
        return "DRAIN" in self.flags

    @property
    def draining(self) -> bool:
        """Drain requested while jobs still run there (sinfo's `drng`)."""
        return self.drained and (self.state in ("allocated", "mixed") or "COMPLETING" in self.flags)

    @property
    def responding(self) -> bool:
        """slurmd answers slurmctld (no NOT_RESPONDING flag; sinfo marks such nodes with `*`)."""
        return "NOT_RESPONDING" not in self.flags

    @property
    def down(self) -> bool:
        return self.state == "down"

    @property
    def usable(self) -> bool:
        """Up, responding, not drained, not failing: a job could be placed here now or when it frees."""
        return (
            self.state in ("idle", "allocated", "mixed")
            and self.responding
            and not self.drained
            and not {"FAIL", "MAINTENANCE", "POWERED_DOWN", "REBOOT_REQUESTED"} & self.flags
        )


@dataclass(frozen=True)
class JobInfo:
    """One job as squeue/scontrol report it, in the same shape for every Slurm version and backend.

    Times are seconds; `time_limit`/`time_left` are None for an unlimited job. `exit_code` and `signal`
    are None while the job has not finished (and `signal` is None when no signal ended it).
    `nodes` is the expanded node list, `node_list` the compressed string Slurm printed.
    """

    job_id: int
    name: str
    state: str
    state_flags: frozenset[str] = frozenset()
    nodes: tuple[str, ...] = ()
    node_list: str = ""
    excluded_nodes: tuple[str, ...] = ()
    partition: str | None = None
    time_limit: int | None = None
    time_left: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    restart_count: int = 0
    batch_host: str | None = None
    stdout: str | None = None
    comment: str = ""
    state_reason: str | None = None
    work_dir: str | None = None  # where the job runs (sbatch's working directory)
    submit_time: int | None = None  # epoch seconds; Slurm gives a requeued job a new one

    @property
    def finished(self) -> bool:
        return self.state in JOB_FINISHED_STATES

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


@dataclass(frozen=True)
class JobContext:
    """What a process inside a Slurm job learns from its `SLURM_*` environment (see `context.FIELDS`).

    Build it with `JobContext.from_env()`; a field whose variable is absent is None (restart_count: 0).
    """

    job_id: int | None = None
    job_name: str | None = None
    step_id: int | None = None
    node_list: tuple[str, ...] = ()
    num_nodes: int | None = None
    node_name: str | None = None
    node_id: int | None = None
    procid: int | None = None
    localid: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    restart_count: int = 0
    submit_dir: str | None = None
    cluster_name: str | None = None
    partition: str | None = None
    ntasks_per_node_requested: int | None = None  # only with --ntasks-per-node (SLURM_NTASKS_PER_NODE)
    cpus_per_task: int | None = None
    cpus_per_node: int | None = None  # the smallest of SLURM_JOB_CPUS_PER_NODE
    gpus_per_node: int | None = None
    gpus_per_task: int | None = None

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, required: Iterable[RequiredField] = ("job_id",)
    ) -> JobContext:
        """Read the context from `env` (default: os.environ).

        Raises:
            JobContextError: a field named in `required` has no variable set, or a value is malformed;
                the message names the variable.
        """
        from nvrx_hpc.slurm.context import context_from_env

        return context_from_env(env, required=required)

    @property
    def in_step(self) -> bool:
        """True inside an srun step (SLURM_STEP_ID set); the batch script itself has no step id."""
        return self.step_id is not None


@runtime_checkable
class SlurmBackend(Protocol):
    """What nvrx-hpc asks of Slurm. Every call has a deadline; failures raise `SlurmError` subclasses."""

    def version(self) -> SlurmVersion:
        """The Slurm release of the client tools (and so of the JSON shapes they print)."""
        ...

    def list_nodes(self) -> list[NodeInfo]:
        """Every node of the cluster."""
        ...

    def node(self, name: str) -> NodeInfo:
        """One node. Raises SlurmNodeNotFound."""
        ...

    def jobs(self, job_ids: Iterable[int] | None = None) -> dict[int, JobInfo]:
        """The jobs Slurm still knows, in one query; only `job_ids` if given (missing ids are left out)."""
        ...

    def job(self, job_id: int) -> JobInfo:
        """One job. Raises SlurmJobNotFound once the job has aged out of slurmctld (MinJobAge)."""
        ...

    def drain(self, nodes: Iterable[str], reason: str) -> None:
        """Set DRAIN with `reason` (kept exactly, spaces and quotes included). Needs operator rights."""
        ...

    def resume(self, nodes: Iterable[str]) -> None:
        """Clear DRAIN/DOWN (State=RESUME)."""
        ...

    def requeue(
        self, job_id: int, exclude: Iterable[str] = (), nodes: int | None = None, tasks: int | None = None
    ) -> None:
        """Requeue a batch job; with `exclude`, the rerun may not use those nodes (ExcNodeList); with `nodes` and
        `tasks`, it asks for that many (NumNodes, NumTasks). They change while the job is held, then it is released."""
        ...

    def set_comment(self, job_id: int, text: str) -> None:
        """Replace the job's Comment field."""
        ...
