"""Watching one training step: the agents' reports become findings, until the step ends or fails.

`StepWatch.run` returns what the loop decides from: the findings (crashed, hung, lost ranks or agents, a
fatal health report), the highest iteration reached and the step's exit code. On a failure it stops
the step first. The hub and the clock are passed in, so a test can drive it with a scripted hub.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Protocol

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.core.messages import RankEventKind
from nvrx_hpc.launcher.culprit import Finding, finding_from_event
from nvrx_hpc.launcher.hub import AgentHub, HubEvent
from nvrx_hpc.launcher.settings import RunSettings, agent_status_s
from nvrx_hpc.launcher.steps import SrunStep

__all__ = ["StepWatch", "Clock", "SYSTEM_CLOCK", "SETTLE_S"]

SETTLE_S = 0.5  # after the first finding, wait this long for simultaneous ones (all ranks of a hang)
# A hang's ranks are asked for their stacks and flight recorder as they are found. The agents stop them once those
# are written (at most their 1 s dump window): srun's SIGTERM reaches every task at once, so it waits that long.
DUMP_HOLD_S = 1.0


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...


SYSTEM_CLOCK: Clock = time  # the module has both functions


class StepWatch:
    def __init__(self, hub: AgentHub, events: EventLog, settings: RunSettings, clock: Clock = SYSTEM_CLOCK) -> None:
        self.hub = hub
        self.events = events
        self.s = settings
        self.clock = clock
        self.rank_nodes: dict[str, str] = {}  # rank -> the node it ran on, after the step
        self.inprocess: Any = None  # an InprocessWatch when in-process restart is on: it takes what it recovers
        self.on_first_iteration: Any = None  # called once the step trains: standby steps start then
        self.on_first_finding: Any = None  # called with the step's first finding: the node's health check starts
        self.world: int | None = None  # the step's ranks: when every one of them has a finding, nothing is awaited
        # A standby step's ranks register through the worker API only, so no SPANK exit status ever follows the
        # PID watch's word; a rank that exits without its worker's goodbye (w.bye, sent at a clean exit) died.
        self.pid_exits_are_deaths = False
        # What run() has decided so far (see _take).
        self._nodes: list[str] = []
        self._findings: list[Finding] = []
        self._tentative: list[Finding] = []
        self._exited: set[tuple[str, int]] = set()  # (node, rank) of every exit reported, failure or not
        self._iterations: list[int] = []
        self._first_at: float | None = None
        self._first_iteration_seen = False
        self._error: BaseException | None = None

    async def run(self, step: SrunStep, nodes: list[str]) -> tuple[list[Finding], int | None, int | None]:
        """Watch the step until it ends or something fails; stop it on a failure.

        A rank exit seen only by the PID watch carries no exit status: it is held back and counts
        only if the step then fails (ranks finishing a moment apart at the end are not failures).

        While it runs, the hub hands it every event in the callback that read the frame (`_take`): a
        failure is decided there, whatever else the event loop has queued (docs/scale.md). This loop only
        keeps time: the settle window, the step's end, silent agents.
        """
        self._nodes = nodes
        self._findings, self._tentative, self._iterations, self._exited = [], [], [], set()
        self._first_at = None
        self._first_iteration_seen = False
        self._error = None
        ended_at: float | None = None
        silenced: set[str] = set()
        waiter = asyncio.ensure_future(step.wait())
        while not self.hub.events.empty():  # what came before the watch began, in order
            self._take(self.hub.events.get_nowait())
        previous, self.hub.on_event = self.hub.on_event, self._take
        try:
            while True:
                if self._error is not None:
                    raise self._error
                now = self.clock.monotonic()
                if self._first_at is not None and (now - self._first_at >= SETTLE_S or self._every_rank_found()):
                    break
                if not waiter.done() and self.inprocess is not None and self.inprocess.all_exited():
                    # every task left has exited; srun would wait for a lost node's until Slurm marks it down
                    self.events.emit("launcher.step.lost_node_wait_cut", reason="every task of the healthy nodes "
                                     "exited; srun only waits for the lost nodes' tasks")  # fmt: skip
                    await step.stop(self.s.stop_grace_s)
                if waiter.done():
                    ended_at = ended_at or now
                    # A failed step: give the agents a moment to report which rank it was.
                    if waiter.result() == 0 or self._findings or now - ended_at >= 1.0:
                        break
                try:  # a hub that queues its events (a test's) is read here
                    self._take(await asyncio.wait_for(self.hub.events.get(), timeout=0.05))
                except asyncio.TimeoutError:
                    event = self._silent_agent(nodes, silenced)
                    if event is not None:
                        self._take(event)
        finally:
            self.hub.on_event = previous
        findings, tentative, iterations = self._findings, self._tentative, self._iterations
        stopping = not waiter.done()
        if stopping:  # first: reading 16k ranks' reports below takes tens of ms
            self.hub.broadcast(m.LauncherStop, nodes=nodes, grace_s=self.s.stop_grace_s, reason="step failed")
        for i, (node, link) in enumerate(list(self.hub.agents.items())):  # each agent's last report
            ranks = link.ranks
            iterations.extend(r["iteration"] for r in ranks.values() if isinstance(r.get("iteration"), int))
            self.rank_nodes.update(dict.fromkeys(map(str, ranks), node))
            if i % 128 == 127:  # ~1,000 ranks decoded: the event loop runs
                await asyncio.sleep(0)
        max_iteration = max(iterations) if iterations else None
        if stopping:
            if any(f.kind == "hung" for f in findings):
                await asyncio.wait([waiter], timeout=DUMP_HOLD_S)
            await self._stop(step, {f.node for f in findings if f.kind == "agent_lost" and f.node})
            self.events.emit("launcher.step.stopped", reason=findings[0].reason if findings else "")
        rc = await waiter
        if rc != 0 and not findings and tentative:
            findings = [Finding("exited", f.time, f.node, f.rank, f.reason, f.sections) for f in tentative]
            for f in findings:
                self.events.emit("launcher.rank.exited", node=f.node, rank=f.rank, reason=f.reason)
        return findings, max_iteration, rc

    async def _stop(self, step: SrunStep, lost: set[str]) -> None:
        """SIGTERM to srun, SIGKILL after the grace. With a node lost, srun waits out the whole grace for that
        node's tasks, which never answer: once every rank of the other nodes has exited, the step is over."""
        stopping = asyncio.ensure_future(step.stop(self.s.stop_grace_s + 2))
        healthy = {int(r) for r, node in self.rank_nodes.items() if node in self._nodes and node not in lost}
        # Ranks of the healthy nodes may have ended before the stop (a peer's lost connection ends them): the
        # watch saw those exits, and no other report of them comes now.
        exited = {rank for node, rank in self._exited if node not in lost}
        while lost and healthy and not stopping.done():
            if healthy <= exited:
                self.events.emit("launcher.step.lost_node_wait_cut", reason="every rank of the healthy nodes "
                                 "exited; srun only waits for the lost nodes' tasks")  # fmt: skip
                step.kill()
                break
            try:
                event = await asyncio.wait_for(self.hub.events.get(), timeout=0.05)
            except asyncio.TimeoutError:
                continue
            msg = event.msg
            if isinstance(msg, m.RankEvent) and msg.event is RankEventKind.EXITED and event.node not in lost:
                exited.add(msg.rank)
        await stopping

    def _take(self, event: HubEvent) -> None:
        """One agent event: a finding is decided and recorded here, at once. Never raises (the hub calls it
        from its socket callback): an error is kept for `run` to raise."""
        if self._error is not None:
            return
        try:
            self._decide(event)
        except Exception as exc:  # noqa: BLE001 - raised again by run()
            self._error = exc

    def _decide(self, event: HubEvent) -> None:
        if self.inprocess is not None and self.inprocess.take(event):
            return
        finding, iteration = finding_from_event(event, self._nodes)
        if iteration is not None:
            self._iterations.append(iteration)
        msg = event.msg
        if isinstance(msg, m.RankEvent) and msg.event is RankEventKind.EXITED:
            self._exited.add((event.node, msg.rank))
        if (isinstance(msg, m.RankEvent) and msg.event is RankEventKind.FIRST_ITERATION
                and not self._first_iteration_seen):  # fmt: skip
            self._first_iteration_seen = True
            self.events.emit("launcher.step.first_iteration", node=event.node, rank=msg.rank,
                             iteration=iteration, at=msg.time)
            if self.on_first_iteration is not None:
                self.on_first_iteration()
        if finding is None:
            return
        if finding.kind == "exited_unknown":
            if not self.pid_exits_are_deaths or getattr(msg, "reason", None) == "finished":
                self._tentative.append(finding)
                return
            finding = dataclasses.replace(finding, kind="exited", reason=f"rank {finding.rank} on {finding.node} "
                                          "died without its worker's goodbye (seen by the PID watch)")  # fmt: skip
        earlier = [t.time for t in self._tentative if (t.node, t.rank) == (finding.node, finding.rank)]
        if earlier:  # the PID watch saw this death first; the plugin's status came after
            finding = dataclasses.replace(finding, time=min(earlier + [finding.time]))
        self._findings.append(finding)
        self.events.emit(f"launcher.rank.{finding.kind}", node=finding.node, rank=finding.rank,
                         reason=finding.reason, sections=list(finding.sections))
        if self._first_at is None:
            self._first_at = self.clock.monotonic()
            if self.on_first_finding is not None:
                self.on_first_finding(finding)

    def _every_rank_found(self) -> bool:
        """Every rank of the step has its finding (all of a hang's ranks passed their deadline): the settle
        window has nothing left to wait for."""
        found = {f.rank for f in self._findings if f.rank is not None}
        return self.world is not None and len(found) >= self.world

    def _silent_agent(self, nodes: list[str], silenced: set[str]) -> HubEvent | None:
        """An agent whose link is up but says nothing (a node that lost power sends no reset; a stopped
        agent): lost, once it has been silent for `agent_silent_s` (it reports every second; in large jobs
        less often, and then it may stay silent for four of its intervals)."""
        now = self.clock.time()
        silent_s = max(self.s.agent_silent_s, 4 * agent_status_s(len(nodes)))
        for node in nodes:
            link = self.hub.agents.get(node)
            if link is not None and node not in silenced and now - link.last_seen > silent_s:
                silenced.add(node)
                return HubEvent(node, m.AgentLost(node=node, silent_s=round(now - link.last_seen, 1), time=now), now)
        return None
