"""Facts about nodes the launcher's decisions need: a quick health check on a node after a failure,
and whether the partition can still run the job without the excluded nodes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any

from nvrx_hpc.core.errors import NvrxError
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.launcher.policy import Attempt, NodeEvidence, Outcome
from nvrx_hpc.slurm.api import SlurmBackend
from nvrx_hpc.slurm.commands import NVRX_PLUGIN, srun_argv, without_spank_options

__all__ = [
    "HealthProbe", "quick_health", "EarlyProbe", "Capacity", "partition_capacity", "gather_evidence",
    "HEALTH_PROBE_TIMEOUT_S",
]  # fmt: skip

log = logging.getLogger(__name__)

HEALTH_PROBE_TIMEOUT_S = 60.0
PROBED_FINDINGS = ("exited", "hung", "srun")  # a software fault unless the node says otherwise


@dataclass(frozen=True)
class HealthProbe:
    health_ok: bool | None
    reachable: bool | None
    detail: str
    seconds: float


def health_probe_argv(node: str) -> list[str]:
    """`nvrx-hpc health --level quick` as a one-task step on `node` (it also proves slurmd answers)."""
    return srun_argv([node], [sys.executable, "-m", "nvrx_hpc", "health", "--level", "quick", "--json"],
                     job_name="nvrx-health", tasks_per_node=None)


def _fatal_detail(stdout: str) -> str:
    try:
        report = json.loads(stdout)
    except ValueError:
        return stdout.strip()[-300:]
    bad = [f"{r.get('check')}: {r.get('detail')}" for r in report.get("results", []) if r.get("verdict") == "fatal"]
    return "; ".join(bad) or f"verdict {report.get('verdict')}"


async def quick_health(node: str, env: dict[str, str], timeout: float = HEALTH_PROBE_TIMEOUT_S) -> HealthProbe:
    """Run the quick health checks on `node`; a step that cannot start there says the node is unreachable."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    proc = await asyncio.create_subprocess_exec(
        *health_probe_argv(node), env=without_spank_options(env, NVRX_PLUGIN), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.CancelledError:  # the culprit moved to another node: this node's check is not wanted
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()  # srun passes it on and ends the step
        raise
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return HealthProbe(
            None, False, f"the health step on {node} did not finish in {timeout:g} s", loop.time() - started
        )
    seconds = loop.time() - started
    text = out.decode(errors="replace")
    if proc.returncode == 0:
        return HealthProbe(True, True, "quick health checks passed", seconds)
    if proc.returncode == int(ExitCode.UNAVAILABLE) and text.lstrip().startswith("{"):
        return HealthProbe(False, True, _fatal_detail(text), seconds)
    tail = err.decode(errors="replace").strip()[-300:]
    return HealthProbe(None, False, f"the health step on {node} exited {proc.returncode}: {tail}", seconds)


class EarlyProbe:
    """A node's quick health check, started before the launcher needs its result: at the step's first finding,
    while the settle window and the step's stop run (`for_finding`), so that what follows the stop waits for
    attribution alone. Each takes tenths of a second (an srun; reading the logs and dumps). When the culprit
    turns out to be on another node (a later finding, or attribution moving a hang's culprit), this check is
    cancelled and that node gets its own."""

    def __init__(self, node: str, task: asyncio.Task[HealthProbe]) -> None:
        self.node = node
        self._task = task

    @classmethod
    def for_finding(cls, node: str | None, finding: str, env: dict[str, str]) -> EarlyProbe | None:
        if not node or finding not in PROBED_FINDINGS:
            return None
        return cls(node, asyncio.create_task(quick_health(node, env)))

    @classmethod
    def start(cls, attempt: Attempt, env: dict[str, str]) -> EarlyProbe | None:
        return cls.for_finding(attempt.culprit_node, attempt.finding or "", env)

    @classmethod
    def for_attempt(cls, attempt: Attempt, started: EarlyProbe | None, env: dict[str, str]) -> EarlyProbe | None:
        """The check for the attempt that just ended: `started` (begun at its first finding) when it runs on the
        culprit node, else a new one there; none when the attempt did not fail."""
        if started is not None and (attempt.outcome != Outcome.FAILED or started.node != attempt.culprit_node):
            started.cancel()
            started = None
        if attempt.outcome != Outcome.FAILED:
            return None
        return started or cls.start(attempt, env)

    async def result_for(self, node: str) -> HealthProbe | None:
        """The check's result when it ran on `node`; None (and the check cancelled) when it did not."""
        if node != self.node:
            self.cancel()
            return None
        return await self._task

    def cancel(self) -> None:
        self._task.cancel()


@dataclass(frozen=True)
class Capacity:
    partition: str | None
    usable: tuple[str, ...]  # nodes of the partition that are up, not drained, not excluded
    needed: int

    @property
    def enough(self) -> bool:
        return len(self.usable) >= self.needed


def partition_capacity(backend: SlurmBackend, partition: str | None, excluded: list[str], needed: int) -> Capacity:
    """The partition's nodes a requeued job could still get (every node when the job names no partition).
    Raises NvrxError when Slurm cannot say."""
    nodes = [n for n in backend.list_nodes() if partition is None or partition in n.partitions]
    usable = tuple(sorted(n.name for n in nodes if n.usable and n.name not in excluded))
    return Capacity(partition, usable, needed)


def node_responding(backend: SlurmBackend, node: str) -> bool | None:
    """Slurm's word: False when the node is down or not responding, None when Slurm cannot say."""
    try:
        info = backend.node(node)
    except NvrxError:
        return None
    return not (info.down or not info.responding)


async def gather_evidence(
    attempt: Attempt, verdict: Any, backend: SlurmBackend, env: dict[str, str], events: EventLog,
    early: EarlyProbe | None = None,
) -> NodeEvidence:
    """What is known about the culprit node: for a crash, an exit or a hang a quick health check there
    (`launcher.node.health_check`; `early`'s when it checked this node), Slurm's word on it, and attribution's
    verdict."""
    node = attempt.culprit_node
    probe = None
    if attempt.finding in PROBED_FINDINGS:
        probe = (await early.result_for(node) if early is not None else None) or await quick_health(node, env)
        events.emit("launcher.node.health_check", node=node, ok=probe.health_ok, reachable=probe.reachable,
                    reason=probe.detail, seconds=round(probe.seconds, 2))  # fmt: skip
    reachable = probe.reachable if probe is not None else None
    if reachable is not False and node_responding(backend, node) is False:
        reachable = False
    return NodeEvidence(
        node=node, finding=attempt.finding, reason=attempt.reason,
        health_ok=probe.health_ok if probe else None, health_detail=probe.detail if probe else "",
        reachable=reachable,
        verdict_action=verdict.action.value if verdict is not None else None,
        verdict_nodes=tuple(verdict.culprit.nodes) if verdict is not None else (),
        verdict_category=verdict.category.value if verdict is not None else None,
    )  # fmt: skip
