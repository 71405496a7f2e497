"""The srun steps the launcher runs: the node agents (one per node) and the training step."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from nvrx_hpc.slurm.commands import srun_argv, srun_help
from nvrx_hpc.slurm.runner import CommandRunner

__all__ = ["StepSpec", "agent_step_argv", "training_step_argv", "refill_step_argv", "SrunStep", "srun_has_nvrx",
           "free_port"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepSpec:
    nodes: list[str]
    tasks_per_node: int
    name: str
    output: Path
    env: dict[str, str]
    command: list[str]
    nvrx_plugin: bool = False
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None
    keep_going: bool = False  # in-process restart: one task's death must not end the step


def agent_step_argv(nodes: list[str], output: Path, agent_args: list[str]) -> list[str]:
    """One agent per node, overlapping the training steps' CPUs, surviving a failed node's agent."""
    return srun_argv(nodes, [sys.executable, "-m", "nvrx_hpc", "agent", *agent_args], job_name="nvrx-agents",
                     kill_on_bad_exit=False, output=output, append=True)


def attach_step_argv(nodes: list[str], attach_args: list[str]) -> list[str]:
    """One `nvrx-hpc agent-attach` per node: hands the Prolog-started agents the launcher and the token."""
    return srun_argv(nodes, [sys.executable, "-m", "nvrx_hpc", "agent-attach", *attach_args],
                     job_name="nvrx-attach", kill_on_bad_exit=False)


def training_step_argv(spec: StepSpec) -> list[str]:
    """Every rank of the training under rank_exec; `--nvrx` when the SPANK plugin reports to the agents."""
    return srun_argv(
        spec.nodes, [sys.executable, "-m", "nvrx_hpc.launcher.rank_exec", "--", *spec.command],
        job_name=spec.name, tasks_per_node=spec.tasks_per_node, output=spec.output, label=True,
        kill_on_bad_exit=not spec.keep_going, cpus_per_task=spec.cpus_per_task, gpus_per_task=spec.gpus_per_task,
        # A waiting spare rank uses no CPU: the training ranks keep the CPUs the allocation gave them. A node
        # that fails must not end the step either (--no-kill): its ranks move to spares in-process.
        extra=(["--nvrx"] if spec.nvrx_plugin else []) + (["--overcommit", "--no-kill"] if spec.keep_going else []),
        export=list(spec.env),
    )


def refill_step_argv(spec: StepSpec, node: str, tasks: int, name: str, output: Path) -> list[str]:
    """`tasks` more tasks of the training's command on `node`, beside the running training step: warm spares
    that join it (nvrx_hpc.launcher.refill). No `--nvrx`: the SPANK plugin would register them under this
    step's task ids, which are the training step's slots; each registers under its own slot (rank_exec)."""
    return srun_argv(
        [node], [sys.executable, "-m", "nvrx_hpc.launcher.rank_exec", "--", *spec.command], job_name=name,
        tasks_per_node=tasks, output=output, label=True, kill_on_bad_exit=False, cpus_per_task=spec.cpus_per_task,
        gpus_per_task=spec.gpus_per_task, extra=["--overcommit", "--no-kill"], export=list(spec.env),
    )  # fmt: skip


def srun_has_nvrx(runner: CommandRunner) -> bool:
    """Whether the SPANK plugin is loaded here (srun --help lists its --nvrx option)."""
    try:
        done = srun_help(runner, timeout=10)
    except Exception:  # noqa: BLE001 - a missing srun is reported elsewhere; here it only means "no plugin"
        return False
    return "--nvrx" in done.stdout


class SrunStep:
    """A running srun process, started with an explicit environment and stopped with a grace period."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.argv = argv
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, env=self.env, stdin=asyncio.subprocess.DEVNULL, start_new_session=True
        )
        log.info("started %s (pid %s)", " ".join(self.argv[:8]), self.proc.pid)

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    async def wait(self) -> int:
        assert self.proc is not None  # noqa: S101 - internal invariant: start() ran
        return await self.proc.wait()

    def kill(self) -> None:
        """SIGKILL to srun's process group now (its tasks are gone; it would only wait for a lost node's)."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def stop(self, grace_s: float) -> int | None:
        """SIGTERM to srun (it forwards it to the tasks), SIGKILL after `grace_s`."""
        if self.proc is None or self.proc.returncode is not None:
            return self.returncode
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, signum)
            except ProcessLookupError:
                break
            try:
                return await asyncio.wait_for(self.proc.wait(), grace_s)
            except asyncio.TimeoutError:
                continue
        return self.returncode


def free_port() -> int:
    """A port free on this host (the batch host, Slurm's first node) for this attempt's rendezvous:
    a fixed base collides when two jobs share a first node."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])
