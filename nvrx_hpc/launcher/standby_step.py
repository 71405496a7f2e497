"""Standby steps (`--standby`): the next attempt's ranks, started and imported while this attempt trains.

Most of a step restart on a small node is the training's own start: srun, then every rank importing torch
(about a second each; seconds more when the ranks share a few cores). With standby steps on, once an
attempt reaches its first iteration the launcher starts the next attempt's step beside it, on every node
of the allocation (active and spare): its tasks import torch and wait with their agents
(launcher/standby_exec.py). When the attempt fails, the launcher decides as before, then gives that step
its go with the new attempt's nodes: the tasks on those nodes become its ranks, the others exit. A standby
step that cannot serve (a node it lacks, tasks not waiting on every node, srun gone) is stopped and the
attempt runs as a fresh step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.launcher.hub import AgentHub
from nvrx_hpc.launcher.standby_exec import python_command
from nvrx_hpc.launcher.steps import SrunStep, StepSpec
from nvrx_hpc.slurm.commands import srun_argv

__all__ = ["Standby", "standby_step_argv"]

log = logging.getLogger(__name__)

READY_WAIT_S = 5.0  # a fault soon after the standby step started: its tasks may still be importing


def standby_step_argv(spec: StepSpec, nodes: list[str], restart: int, output: Path) -> list[str]:
    """The standby step of attempt `restart` on `nodes`, `spec`'s command under standby_exec, in the command's
    own interpreter (the script runs in that process). Unlabelled: its task numbers are not the ranks; each
    task labels its own output with its rank at the go. A task or a node that dies must not end it (the
    launcher watches the ranks once it trains, as it watches any step)."""
    target = python_command(spec.command)
    assert target is not None  # noqa: S101 - RunSettings.validate refuses --standby for other commands
    command = [target.python, *target.flags, "-m", "nvrx_hpc.launcher.standby_exec", "--restart", str(restart), "--",
               *spec.command]  # fmt: skip
    return srun_argv(
        nodes, command, job_name=f"nvrx-standby-{restart}", tasks_per_node=spec.tasks_per_node, output=output,
        kill_on_bad_exit=False, cpus_per_task=spec.cpus_per_task, gpus_per_task=spec.gpus_per_task,
        extra=["--overcommit", "--no-kill"], export=list(spec.env),
    )  # fmt: skip


class _Waiting:
    def __init__(self, restart: int, nodes: list[str], step: SrunStep, started: asyncio.Future) -> None:
        self.restart, self.nodes, self.step, self.started = restart, nodes, step, started


class Standby:
    """The one standby step of the job, if any: started by `prepare`, handed over by `take`."""

    def __init__(self, hub: AgentHub, events: EventLog, env: dict[str, str], logs: Path) -> None:
        self.hub = hub
        self.events = events
        self.env = env
        self.logs = logs
        self._waiting: _Waiting | None = None

    def prepare(self, restart: int, nodes: list[str], spec: StepSpec, step_env: dict[str, str]) -> None:
        """Start the standby step of attempt `restart` on `nodes` (the attempt before it is training)."""
        if self._waiting is not None:
            return
        output = self.logs / f"step-{restart}.log"
        step = SrunStep(standby_step_argv(spec, nodes, restart, output), {**self.env, **step_env})
        self._waiting = _Waiting(restart, list(nodes), step, asyncio.ensure_future(step.start()))
        self.events.emit("launcher.standby.started", restart=restart, nodes=list(nodes), log=str(output))

    async def take(
        self, restart: int, ranks_on: list[str], tasks_per_node: int, env: dict[str, str]
    ) -> SrunStep | None:
        """The standby step of attempt `restart`, told to train on `ranks_on` with `env`; None (and the standby
        step stopped) when there is none that can."""
        waiting, self._waiting = self._waiting, None
        if waiting is None:
            return None
        why = await self._unusable(waiting, restart, ranks_on, tasks_per_node)
        if why:
            self.events.emit("launcher.standby.dropped", restart=waiting.restart, reason=why)
            await self._stop(waiting)
            return None
        go_env = {**env, "LOCAL_WORLD_SIZE": str(tasks_per_node)}
        self.hub.broadcast(m.StandbyGo, nodes=waiting.nodes, restart=restart, ranks_on=tuple(ranks_on), env=go_env)
        self.events.emit("launcher.standby.used", restart=restart, nodes=list(ranks_on),
                         reason="the standby step's tasks on these nodes are the new attempt's ranks")  # fmt: skip
        return waiting.step

    async def _unusable(self, waiting: _Waiting, restart: int, ranks_on: list[str], per_node: int) -> str | None:
        if waiting.restart != restart:
            return f"it waits for attempt {waiting.restart}, not {restart}"
        lacking = [n for n in ranks_on if n not in waiting.nodes]
        if lacking:
            return f"it does not run on {', '.join(lacking)}"
        try:
            await waiting.started
        except OSError as exc:
            return f"srun did not start: {exc}"
        deadline = time.monotonic() + READY_WAIT_S
        while True:
            if waiting.step.returncode is not None:
                return f"its srun ended (code {waiting.step.returncode})"
            short = [n for n in ranks_on if self._ready(n, restart) < per_node]
            if not short:
                return None
            if time.monotonic() > deadline:
                return f"not every task waits on {', '.join(short)} after {READY_WAIT_S:g} s"
            await asyncio.sleep(0.1)

    def _ready(self, node: str, restart: int) -> int:
        link = self.hub.agents.get(node)
        count = link.standby.get(str(restart), 0) if link is not None else 0
        return count if isinstance(count, int) else 0

    async def stop(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            await self._stop(waiting)

    @staticmethod
    async def _stop(waiting: _Waiting) -> None:
        try:
            await waiting.started
        except OSError:
            return
        await waiting.step.stop(2.0)

