"""Brings the dev cluster up (idempotently), reports on it, and stops exactly what it started."""

from __future__ import annotations

import logging
import shutil
import socket
import time
from dataclasses import dataclass

from nvrx_hpc.core.errors import ClusterError, SlurmError
from nvrx_hpc.slurm.api import NodeInfo
from nvrx_hpc.slurm.cli_backend import CliBackend
from nvrx_hpc.slurm.devcluster.account import JOB_USER, ensure_job_account, find_job_account
from nvrx_hpc.slurm.devcluster.files import (
    client_env,
    config_fingerprint,
    read_spec,
    running_fingerprint,
    spec_to_json,
    write_config,
)
from nvrx_hpc.slurm.devcluster.layout import DevClusterSpec, Layout
from nvrx_hpc.slurm.devcluster.processes import (
    Manifest,
    StartedProcess,
    ensure_munge,
    is_alive,
    start_daemon,
    stop_processes,
)
from nvrx_hpc.slurm.runner import CommandRunner

__all__ = ["DevCluster", "ClusterStatus", "DaemonStatus"]

log = logging.getLogger(__name__)

_NOT_READY_FLAGS = {"NOT_RESPONDING", "DRAIN", "FAIL", "POWERING_UP", "POWERED_DOWN"}


@dataclass(frozen=True)
class DaemonStatus:
    name: str
    pid: int
    alive: bool


@dataclass(frozen=True)
class ClusterStatus:
    state_dir: str
    slurm_conf: str
    daemons: tuple[DaemonStatus, ...]
    nodes: tuple[NodeInfo, ...]
    error: str | None = None

    @property
    def running(self) -> bool:
        return bool(self.daemons) and all(d.alive for d in self.daemons if d.name != "munged")


class DevCluster:
    """One dev cluster, identified by its state directory."""

    def __init__(self, spec: DevClusterSpec, runner: CommandRunner | None = None) -> None:
        self.spec = spec
        self.layout = Layout(spec.state_dir)
        self.runner = runner or CommandRunner(env=client_env(self.layout))
        self.manifest = Manifest(self.layout)

    @classmethod
    def at(cls, state_dir, runner: CommandRunner | None = None) -> DevCluster:
        """The cluster whose files are in `state_dir`, with the spec it was started with."""
        spec = read_spec(Layout(DevClusterSpec(state_dir=state_dir).state_dir))
        if spec is None:
            raise ClusterError(
                f"no dev cluster at {state_dir} (no etc/spec.json)", hint="start one with `nvrx-hpc cluster up`"
            )
        return cls(spec, runner)

    @property
    def env(self) -> dict[str, str]:
        return client_env(self.layout)

    @property
    def backend(self) -> CliBackend:
        return CliBackend(self.runner)

    def _slurm_daemons(self) -> list[StartedProcess]:
        return [p for p in self.manifest.load() if p.name != "munged"]

    def _check_installed(self) -> None:
        for program in ("slurmctld", "slurmd", "sinfo", "srun", "sbatch", "scontrol", "munged", "munge"):
            self.runner.which(program)

    def _alive_daemons(self) -> set[str]:
        return {p.name for p in self._slurm_daemons() if is_alive(p)}

    def is_running(self) -> bool:
        """Every daemon of the recorded spec is alive."""
        recorded = read_spec(self.layout) or self.spec
        alive = self._alive_daemons()
        return bool(alive) and alive == _daemon_names(recorded)

    def up(self, timeout: float = 60.0) -> ClusterStatus:
        """Start munge, slurmctld and the slurmds, then wait until every node is idle.

        Idempotent: a cluster already running with the same spec is left alone. A running cluster
        with another spec is an error (stop it first); a half-running one is restarted.
        """
        self._check_installed()
        ensure_job_account()  # jobs of an ordinary user, as on a real cluster (root only; idempotent)
        ensure_munge(self.runner, self.manifest)
        previous = read_spec(self.layout)
        if self._alive_daemons():
            if previous is not None and spec_to_json(previous) != spec_to_json(self.spec):
                raise ClusterError(
                    f"a dev cluster with other settings is running at {self.layout.root}",
                    hint="stop it with `nvrx-hpc cluster down` first, or pick another --state-dir",
                )
            if self.is_running() and running_fingerprint(self.layout) == config_fingerprint():
                return self.status()
            if self.is_running():
                log.warning("dev cluster at %s was written by older nvrx-hpc code; restarting it", self.layout.root)
            else:
                log.warning("dev cluster at %s is only partly running; restarting it", self.layout.root)
            self.down(stop_munge=False)
        _check_ports_free(self.spec)
        self._fresh_start()
        self._wait_idle(timeout)
        return self.status()

    def _fresh_start(self) -> None:
        # Job ids restart at 1 with a wiped state dir; that is fine for a throwaway cluster.
        for stale in (self.layout.state, self.layout.root / "spool", self.layout.root / "pmix"):
            shutil.rmtree(stale, ignore_errors=True)
        # Job ids restart at 1, so per-job directories of an earlier start (another user's, perhaps) would be
        # taken for the new jobs' own: the Prolog rightly refuses a burst buffer someone else made.
        for per_node in (self.layout.root / "bb", self.layout.root / "run"):
            for job_dir in per_node.glob("*/*"):
                if job_dir.is_dir() and not job_dir.is_symlink():
                    shutil.rmtree(job_dir, ignore_errors=True)
                else:
                    job_dir.unlink(missing_ok=True)
        shutil.rmtree(self.layout.agent_records, ignore_errors=True)
        # Job ids restart at 1, so per-job records of an earlier start would be mistaken for new ones.
        for per_job in ("hooks.jsonl", "jobcomp.log"):
            old = self.layout.log / per_job
            if old.exists():
                old.replace(old.with_name(per_job + ".previous"))
        write_config(self.spec, self.layout)
        conf = str(self.layout.slurm_conf)
        start_daemon(
            "slurmctld",
            [self.runner.which("slurmctld"), "-D", "-f", conf],
            self.layout.log / "slurmctld.out",
            self.manifest,
        )
        for node in self.spec.node_names:
            self._start_slurmd(node)

    def _start_slurmd(self, node: str) -> None:
        node_conf = str(self.layout.node_etc(node) / "slurm.conf")
        start_daemon(
            f"slurmd-{node}",
            [self.runner.which("slurmd"), "-D", "-N", node, "-f", node_conf],
            self.layout.log / f"slurmd-{node}.out",
            self.manifest,
        )

    def revive_node(self, node: str, timeout: float = 90.0) -> None:
        """Bring back a node whose slurmd was lost (a fault test's power loss): start its slurmd if it is not
        running, resume it when Slurm marked it down or drained, and wait until it is idle."""
        if not any(p.name == f"slurmd-{node}" and is_alive(p) for p in self._slurm_daemons()):
            self._start_slurmd(node)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.backend.node(node)
            if info.state == "idle" and info.responding and not info.drained:
                return
            if info.down or info.drained:
                self.backend.resume([node])
            time.sleep(1)
        raise ClusterError(f"{node} did not come back within {timeout:g} s: {self.backend.node(node)}",
                           hint=f"read {self.layout.log}/slurmd-{node}.log")  # fmt: skip

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: str = "no answer from sinfo yet"
        while time.monotonic() < deadline:
            dead = [p.name for p in self._slurm_daemons() if not is_alive(p)]
            if dead:
                raise ClusterError(
                    f"{', '.join(dead)} exited during start-up",
                    hint=f"read the logs in {self.layout.log}",
                )
            try:
                nodes = self.backend.list_nodes()
            except SlurmError as exc:
                last = exc.message
            else:
                ready = [n for n in nodes if n.state == "idle" and not (n.flags & _NOT_READY_FLAGS)]
                if len(ready) == self.spec.nodes:
                    return
                last = ", ".join(f"{n.name}={'+'.join([n.state, *sorted(n.flags)])}" for n in nodes)
            time.sleep(0.2)
        raise ClusterError(
            f"nodes not idle after {timeout:g} s ({last})",
            hint=f"read {self.layout.log}/slurmctld.log and slurmd-*.log",
        )

    def down(self, *, stop_munge: bool = True, grace_s: float = 10.0) -> list[str]:
        """Cancel this cluster's jobs, then stop exactly the daemons recorded in the manifest.

        Returns the names of the processes stopped.
        """
        procs = self.manifest.load()
        if not stop_munge:
            procs = [p for p in procs if p.name != "munged"]
        if any(p.name == "slurmctld" and is_alive(p) for p in procs):
            for user in {self._user(), *([JOB_USER] if find_job_account() else [])}:
                self.runner.run(["scancel", "--full", "--user", user], timeout=10, check=False)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                # Without --states squeue lists only pending, running and completing jobs.
                queue = self.runner.run(["squeue", "--noheader", "--format=%i"], timeout=10, check=False)
                if queue.returncode != 0 or not queue.stdout.strip():
                    break
                time.sleep(0.2)
        stopped = [p.name for p in procs if is_alive(p)]
        killed = stop_processes(procs, grace_s)
        if killed:
            log.warning("needed SIGKILL for %s", ", ".join(killed))
        kept = [p for p in self.manifest.load() if p not in procs]
        self.manifest.save(kept)
        return stopped

    def status(self) -> ClusterStatus:
        daemons = tuple(DaemonStatus(p.name, p.pid, is_alive(p)) for p in self.manifest.load())
        nodes: tuple[NodeInfo, ...] = ()
        error = None
        if any(d.alive and d.name == "slurmctld" for d in daemons):
            try:
                nodes = tuple(self.backend.list_nodes())
            except SlurmError as exc:
                error = exc.message
        else:
            error = "slurmctld is not running"
        return ClusterStatus(str(self.layout.root), str(self.layout.slurm_conf), daemons, nodes, error)

    @staticmethod
    def _user() -> str:
        import getpass

        return getpass.getuser()



def _daemon_names(spec: DevClusterSpec) -> set[str]:
    return {"slurmctld", *(f"slurmd-{n}" for n in spec.node_names)}


def _check_ports_free(spec: DevClusterSpec) -> None:
    """Fail before starting anything when another Slurm (or anything) holds one of our ports."""
    ports = [spec.ctld_port, *range(spec.slurmd_port_base, spec.slurmd_port_base + spec.nodes)]
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("0.0.0.0", port))
            except OSError as exc:
                raise ClusterError(
                    f"port {port} is in use ({exc.strerror}); another Slurm or dev cluster may be running",
                    hint="stop it (`nvrx-hpc cluster down --state-dir ...`) or choose --ctld-port/--slurmd-port-base",
                ) from None
