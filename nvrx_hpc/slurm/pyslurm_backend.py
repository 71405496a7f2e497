"""Optional `SlurmBackend` over pyslurm's object API (pyslurm 23.x and later). UNTESTED HERE.

pyslurm X.Y builds only against Slurm X.Y (its setup refuses any other `slurm_version.h`), and no Slurm
version that pip's pyslurm supports is installable on the project's CI machines (Debian 12 ships
22.05, pyslurm's object API starts with 23.x). So this module is written against pyslurm's documented
API (`Node.load(name).modify(Node(state=..., reason=...))`, `Nodes.load()`, `Job.load(id)`,
`Job.requeue(hold=...)`, `Job.release()`, `Job.modify(JobSubmitDescription(...))`, `Jobs.load()`)
and has never run against a real pyslurm. Importing this module never fails; constructing
`PyslurmBackend()` without pyslurm raises SlurmNotInstalled. A site that wants it installs the pyslurm
release that matches its Slurm (see docs/slurm-adapter.md) and runs the contract suite in
tests/cluster against it before relying on it.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

from nvrx_hpc.core.errors import SlurmCommandError, SlurmNotInstalled
from nvrx_hpc.slurm.api import (
    JOB_FINISHED_STATES,
    JobInfo,
    NodeInfo,
    SlurmJobNotFound,
    SlurmNodeNotFound,
    SlurmRequestError,
    SlurmVersion,
)
from nvrx_hpc.slurm.hostlist import compress, expand
from nvrx_hpc.slurm.parse_json import job_state_from_tokens, node_state_from_tokens
from nvrx_hpc.slurm.parse_text import parse_version

__all__ = ["PyslurmBackend", "pyslurm_available"]

log = logging.getLogger(__name__)

_INSTALL_HINT = (
    "pyslurm X.Y builds only against Slurm X.Y: install the release matching `sinfo --version` "
    "(e.g. Slurm 23.11 -> pip install 'pyslurm==23.11.*', with the Slurm headers and libslurmfull), "
    "or use the CLI backend ('cli'), which needs nothing extra"
)


def _import_pyslurm() -> ModuleType | None:
    try:
        return importlib.import_module("pyslurm")
    except ImportError:
        return None


def pyslurm_available() -> bool:
    """True when `import pyslurm` works in this interpreter."""
    return _import_pyslurm() is not None


def _seconds_or_none(minutes: Any) -> int | None:
    return None if minutes is None else int(minutes) * 60


class PyslurmBackend:
    """SlurmBackend over pyslurm's RPC bindings: no subprocess per call, same values as CliBackend."""

    def __init__(self, module: ModuleType | None = None) -> None:
        self._ps = module if module is not None else _import_pyslurm()
        if self._ps is None:
            raise SlurmNotInstalled("pyslurm is not installed", hint=_INSTALL_HINT)
        self._rpc_error: type[BaseException] = getattr(self._ps, "RPCError", RuntimeError)

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one pyslurm call; an RPCError becomes SlurmCommandError naming the call."""
        try:
            return func(*args, **kwargs)
        except self._rpc_error as exc:
            raise SlurmCommandError(["pyslurm", what], 1, str(exc)) from exc

    # ---- queries -----------------------------------------------------------------------------
    def version(self) -> SlurmVersion:
        text = getattr(self._ps, "__version__", "") or getattr(self._ps, "version", lambda: "")()
        return parse_version(f"pyslurm {text}")

    def _node_info(self, node: Any) -> NodeInfo:
        base, flags = node_state_from_tokens(str(node.state or "UNKNOWN").split("+"))
        reason = node.reason or None
        stamp = getattr(node, "reason_time_raw", None) or getattr(node, "reason_time", None)
        when = (
            datetime.fromtimestamp(stamp, tz=timezone.utc)
            if isinstance(stamp, (int, float)) and stamp
            else None
        )
        return NodeInfo(
            name=node.name,
            state=base,
            flags=flags,
            reason=reason,
            reason_set_by=(getattr(node, "reason_user", None) or None) if reason else None,
            reason_time=when if reason else None,
            address=getattr(node, "address", None) or None,
            partitions=tuple(getattr(node, "partitions", None) or ()),
        )

    def list_nodes(self) -> list[NodeInfo]:
        nodes = self._call("Nodes.load", self._ps.Nodes.load)
        return [self._node_info(node) for node in nodes.values()]

    def node(self, name: str) -> NodeInfo:
        try:
            return self._node_info(self._ps.Node.load(name))
        except self._rpc_error as exc:
            raise SlurmNodeNotFound(name, [n.name for n in self.list_nodes()]) from exc

    def _job_info(self, job: Any) -> JobInfo:
        state, flags = job_state_from_tokens(str(job.state or "UNKNOWN").split("+"))
        node_list = job.allocated_nodes or ""
        time_limit = _seconds_or_none(job.time_limit)
        finished = state in JOB_FINISHED_STATES
        run_time = getattr(job, "run_time", None)
        time_left = time_limit
        if finished:
            time_left = 0
        elif time_limit is not None and state != "PENDING" and run_time is not None:
            time_left = max(0, time_limit - int(run_time))
        return JobInfo(
            job_id=int(job.id),
            name=job.name or "",
            state=state,
            state_flags=flags,
            nodes=tuple(expand(node_list)),
            node_list=node_list,
            excluded_nodes=tuple(expand(job.excluded_nodes or "")),
            partition=job.partition or None,
            time_limit=time_limit,
            time_left=time_left,
            exit_code=job.exit_code if finished else None,
            signal=(job.exit_code_signal or None) if finished else None,
            restart_count=int(job.requeue_count or 0),
            batch_host=job.batch_host or None,
            stdout=job.standard_output or None,
            comment=job.comment or "",
            state_reason=None if job.state_reason in (None, "", "None") else job.state_reason,
            work_dir=getattr(job, "working_directory", None) or None,
            submit_time=int(job.submit_time) if getattr(job, "submit_time", None) else None,
        )

    def jobs(self, job_ids: Iterable[int] | None = None) -> dict[int, JobInfo]:
        loaded = self._call("Jobs.load", self._ps.Jobs.load)
        wanted = None if job_ids is None else {int(j) for j in job_ids}
        found = (self._job_info(job) for job in loaded.values())
        return {job.job_id: job for job in found if wanted is None or job.job_id in wanted}

    def job(self, job_id: int) -> JobInfo:
        try:
            return self._job_info(self._ps.Job.load(int(job_id)))
        except self._rpc_error as exc:
            raise SlurmJobNotFound(job_id) from exc

    # ---- changes -----------------------------------------------------------------------------
    def _names(self, nodes: Iterable[str] | str) -> list[str]:
        names = [n for item in ([nodes] if isinstance(nodes, str) else nodes) for n in expand(item)]
        if not names:
            raise SlurmRequestError("no node names given")
        return names

    def _modify_nodes(self, names: list[str], **changes: Any) -> None:
        log.info("slurm (pyslurm): update %s %s", compress(names), changes)
        for name in names:
            node = self._call(f"Node.load({name})", self._ps.Node.load, name)
            self._call(f"Node.modify({name})", node.modify, self._ps.Node(**changes))

    def drain(self, nodes: Iterable[str] | str, reason: str) -> None:
        if not reason.strip() or "\n" in reason:
            raise SlurmRequestError(f"a drain reason must be one non-empty line, got {reason!r}")
        self._modify_nodes(self._names(nodes), state="DRAIN", reason=reason)

    def resume(self, nodes: Iterable[str] | str) -> None:
        self._modify_nodes(self._names(nodes), state="RESUME")

    def requeue(
        self, job_id: int, exclude: Iterable[str] | str = (), nodes: int | None = None, tasks: int | None = None
    ) -> None:
        """Same order as CliBackend: requeue held, set ExcNodeList and NumNodes, release (see cli_backend)."""
        job = self._call(f"Job.load({job_id})", self._ps.Job.load, int(job_id))
        items = [exclude] if isinstance(exclude, str) else list(exclude)
        if not any(items) and nodes is None and tasks is None:
            self._call(f"Job.requeue({job_id})", job.requeue)
            return
        wanted: dict = {}
        if any(items):
            wanted["excluded_nodes"] = compress({*expand(job.excluded_nodes or ""), *self._names(items)})
        if nodes is not None:
            wanted["nodes"] = int(nodes)
        if tasks is not None:
            wanted["ntasks"] = int(tasks)
        self._call(f"Job.requeue({job_id}, hold=True)", job.requeue, hold=True)
        try:
            changes = self._ps.JobSubmitDescription(**wanted)
            self._call(f"Job.modify({job_id})", job.modify, changes)
        finally:
            self._call(f"Job.release({job_id})", job.release)

    def set_comment(self, job_id: int, text: str) -> None:
        job = self._call(f"Job.load({job_id})", self._ps.Job.load, int(job_id))
        self._call(f"Job.modify({job_id})", job.modify, self._ps.JobSubmitDescription(comment=text))
