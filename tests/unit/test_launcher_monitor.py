"""The step watch without a cluster: a scripted hub feeds agent events, a fake clock moves time, a
scripted step ends when told. Each path the loop decides from: a crash stops the step and names the
rank; a PID-watch exit at a clean end is no failure; a silent agent counts as lost."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.launcher.hub import HubEvent
from nvrx_hpc.launcher.monitor import StepWatch
from nvrx_hpc.launcher.settings import RunSettings


@dataclass
class Link:
    last_seen: float
    ranks: dict = field(default_factory=dict)


class ScriptedHub:
    def __init__(self, nodes: list[str], now: float) -> None:
        self.events: asyncio.Queue = asyncio.Queue()
        self.agents = {n: Link(now) for n in nodes}
        self.sent: list[tuple[m.Kind, dict]] = []
        self.on_event = None  # the real hub calls it from its socket callback; this one queues its events

    def broadcast(self, record: type[m.Frame], **data) -> None:
        self.sent.append((record.KIND, data))


class ScriptedStep:
    def __init__(self) -> None:
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.stopped = False

    async def wait(self) -> int:
        return await self.done

    async def stop(self, _grace: float) -> None:
        self.stopped = True
        if not self.done.done():
            self.done.set_result(-15)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def _watch(tmp_path: Path, nodes: list[str], clock: FakeClock, **settings) -> tuple[StepWatch, ScriptedHub]:
    hub = ScriptedHub(nodes, clock.now)
    s = RunSettings(command=["python", "t.py"], run_dir=tmp_path, stop_grace_s=0, **settings)
    return StepWatch(hub, EventLog(tmp_path / "events.jsonl", "test"), s, clock), hub  # type: ignore[arg-type]


def _rank_event(node: str, rank: int, event: str, **data) -> HubEvent:
    return HubEvent(node, m.RankEvent(node=node, rank=rank, event=m.RankEventKind(event), time=1000.0, **data), 1000.0)


def test_a_crashed_rank_stops_the_step_and_is_the_finding(tmp_path):
    async def scenario():
        clock = FakeClock()
        watch, hub = _watch(tmp_path, ["n1", "n2"], clock)
        step = ScriptedStep()
        hub.events.put_nowait(_rank_event("n2", 3, "exited", signal=9, iteration=7))

        async def advance():
            for _ in range(40):
                await asyncio.sleep(0.01)
                clock.now += 0.1  # past the settle time: no second finding comes
        task = asyncio.ensure_future(advance())
        findings, iteration, rc = await watch.run(step, ["n1", "n2"])
        await task
        return findings, iteration, rc, step, hub

    findings, iteration, rc, step, hub = asyncio.run(scenario())
    assert [(f.kind, f.node, f.rank) for f in findings] == [("exited", "n2", 3)]
    assert iteration == 7 and rc == -15 and step.stopped
    assert hub.sent[0][0] is m.Kind.LA_STOP


def test_a_pid_watch_exit_at_a_clean_end_is_not_a_failure(tmp_path):
    async def scenario():
        clock = FakeClock()
        watch, hub = _watch(tmp_path, ["n1"], clock)
        step = ScriptedStep()
        hub.events.put_nowait(_rank_event("n1", 0, "exited"))  # no exit status: held back
        asyncio.get_running_loop().call_later(0.1, step.done.set_result, 0)
        return await watch.run(step, ["n1"]), step

    (findings, _iteration, rc), step = asyncio.run(scenario())
    assert findings == [] and rc == 0 and not step.stopped


def test_in_a_standby_step_an_exit_without_the_workers_goodbye_is_a_death_and_one_after_it_is_not(tmp_path):
    """A standby step's ranks have no SPANK exit status: the PID watch's word is all there is. Rank 1 said
    w.bye (the agent reports its exit as finished): held back. Rank 3 did not: a failure at once."""

    async def scenario():
        clock = FakeClock()
        watch, hub = _watch(tmp_path, ["n1", "n2"], clock)
        watch.pid_exits_are_deaths = True
        step = ScriptedStep()
        hub.events.put_nowait(_rank_event("n1", 1, "exited", reason="finished"))
        hub.events.put_nowait(_rank_event("n2", 3, "exited"))

        async def advance():
            for _ in range(40):
                await asyncio.sleep(0.01)
                clock.now += 0.1
        task = asyncio.ensure_future(advance())
        findings, _iteration, _rc = await asyncio.wait_for(watch.run(step, ["n1", "n2"]), 10)
        await task
        return findings, step

    findings, step = asyncio.run(scenario())
    assert [(f.kind, f.node, f.rank) for f in findings] == [("exited", "n2", 3)] and step.stopped
    assert "without its worker's goodbye" in findings[0].reason


def test_an_agent_silent_past_its_limit_is_lost(tmp_path):
    async def scenario():
        clock = FakeClock()
        watch, hub = _watch(tmp_path, ["n1", "n2"], clock, agent_silent_s=15.0)
        step = ScriptedStep()
        hub.agents["n2"].last_seen = clock.now - 16  # n1 keeps reporting; n2 said nothing for 16 s

        async def advance():
            for _ in range(40):
                await asyncio.sleep(0.01)
                clock.now += 0.1
                hub.agents["n1"].last_seen = clock.now
        task = asyncio.ensure_future(advance())
        result = await watch.run(step, ["n1", "n2"])
        await task
        return result

    findings, _iteration, _rc = asyncio.run(scenario())
    assert [(f.kind, f.node) for f in findings] == [("agent_lost", "n2")]
    assert "silent for 16" in findings[0].reason


class LostNodeStep(ScriptedStep):
    """srun with a lost node: SIGTERM ends nothing (it waits for the lost node's tasks) until SIGKILL."""

    def __init__(self) -> None:
        super().__init__()
        self.killed_at: float | None = None

    async def stop(self, grace: float) -> None:
        self.stopped = True
        try:
            await asyncio.wait_for(asyncio.shield(self.done), grace)
        except asyncio.TimeoutError:
            self.kill()

    def kill(self) -> None:
        self.killed_at = asyncio.get_running_loop().time()
        if not self.done.done():
            self.done.set_result(-9)


def _lost_node_run(tmp_path, tick_s: float, exits_after: int, pid_exits_are_deaths: bool = False, **exit_fields):
    """n2's agent went silent 16 s ago (lost); n1's two ranks exit after `exits_after` ticks of `tick_s`.
    Returns the watch's result, how long after the start the step was killed, and the events file."""

    async def scenario():
        clock = FakeClock()
        watch, hub = _watch(tmp_path, ["n1", "n2"], clock, agent_silent_s=15.0)
        watch.pid_exits_are_deaths = pid_exits_are_deaths
        hub.agents["n1"].ranks = {"0": {}, "1": {}}
        hub.agents["n2"].ranks = {"2": {}, "3": {}}
        hub.agents["n2"].last_seen = clock.now - 16
        step = LostNodeStep()
        loop = asyncio.get_running_loop()

        async def advance():
            for i in range(40):
                await asyncio.sleep(0.01)
                clock.now += tick_s
                hub.agents["n1"].last_seen = clock.now
                if i == exits_after:
                    for rank in (0, 1):
                        hub.events.put_nowait(_rank_event("n1", rank, "exited", **exit_fields))
        task = asyncio.ensure_future(advance())
        started = loop.time()
        result = await watch.run(step, ["n1", "n2"])
        await task
        return result, step.killed_at - started, (tmp_path / "events.jsonl").read_text()

    return asyncio.run(scenario())


def test_a_lost_node_does_not_hold_the_stop_once_the_other_nodes_ranks_exited(tmp_path):
    # SIGTERM reached n1's ranks (they exit after the 40 ticks); n2's never answer
    (findings, _iteration, rc), killed_after, events = _lost_node_run(tmp_path, 0.1, 39, exit_code=0)
    assert [(f.kind, f.node) for f in findings] == [("agent_lost", "n2")] and rc == -9
    assert killed_after < 1.5  # not the 2 s grace (stop_grace_s 0 + 2) srun would wait for n2's tasks
    assert "launcher.step.lost_node_wait_cut" in events


def _hung(node: str, rank: int) -> HubEvent:
    return _rank_event(node, rank, "hung", reason=f"rank {rank} on {node} hung: no heartbeat")


def test_the_first_finding_is_handed_on_at_once_and_a_hang_of_every_rank_ends_the_settle_window(tmp_path):
    """The loop starts the node's health check from the first finding, while the watch still settles. Once
    every rank of the step is found hung there is nothing left to wait for: the step stops with the fake clock
    standing still (it never reaches the settle window's end)."""

    async def scenario():
        clock = FakeClock()
        watch, hub = _watch(tmp_path, ["n1", "n2"], clock)
        watch.world = 4
        handed: list = []
        watch.on_first_finding = handed.append
        step = ScriptedStep()
        for node, rank in (("n2", 3), ("n1", 0), ("n1", 1), ("n2", 2)):
            hub.events.put_nowait(_hung(node, rank))
        findings, _iteration, _rc = await asyncio.wait_for(watch.run(step, ["n1", "n2"]), 10)
        return findings, handed, step

    findings, handed, step = asyncio.run(scenario())
    assert sorted(f.rank for f in findings) == [0, 1, 2, 3] and step.stopped
    assert [(f.kind, f.rank) for f in handed] == [("hung", 3)]


def test_a_hang_is_not_signalled_through_srun_while_the_agents_collect_its_dumps(tmp_path):
    """srun's SIGTERM would reach every task at once and cut the flight-recorder dumps the agents asked for: the
    watch leaves the hung ranks to the agents (they stop each once its dump is written) and srun ends by itself."""

    class Step(ScriptedStep):
        signalled = False

        async def stop(self, grace: float) -> None:
            self.signalled = self.signalled or not self.done.done()  # srun's SIGTERM reached running tasks
            await super().stop(grace)

    async def scenario():
        clock = FakeClock()
        watch, hub = _watch(tmp_path, ["n1", "n2"], clock)
        watch.world = 2
        step = Step()
        for node, rank in (("n1", 0), ("n2", 1)):
            hub.events.put_nowait(_hung(node, rank))
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, step.done.set_result, -15)  # the agents' SIGTERMs, after the dumps
        findings, _iteration, rc = await asyncio.wait_for(watch.run(step, ["n1", "n2"]), 10)
        return findings, rc, step

    findings, rc, step = asyncio.run(scenario())
    assert sorted(f.rank for f in findings) == [0, 1] and rc == -15 and not step.signalled


def test_a_hang_of_some_ranks_still_waits_out_the_settle_window(tmp_path):
    async def scenario():
        clock = FakeClock()
        watch, hub = _watch(tmp_path, ["n1", "n2"], clock)
        watch.world = 4
        step = ScriptedStep()
        hub.events.put_nowait(_hung("n2", 3))
        hub.events.put_nowait(_hung("n1", 0))
        stopped_early = False
        task = asyncio.ensure_future(watch.run(step, ["n1", "n2"]))
        await asyncio.sleep(0.3)  # the fake clock stands still: only a full set of findings could end it
        stopped_early = task.done()
        clock.now += 0.6
        findings, _iteration, _rc = await asyncio.wait_for(task, 10)
        return findings, stopped_early

    findings, stopped_early = asyncio.run(scenario())
    assert not stopped_early and sorted(f.rank for f in findings) == [0, 3]


def test_a_lost_node_does_not_hold_the_stop_when_the_other_ranks_ended_before_it(tmp_path):
    """A node is lost; its peers' connections break and they end by themselves within the settle window, each
    after its worker's goodbye (no failure of theirs). No exit of theirs can follow the stop: the ones the watch
    already saw count, and the stop does not wait out srun's grace for the lost node's tasks."""
    (findings, _iteration, _rc), killed_after, _events = _lost_node_run(
        tmp_path, 0.02, 3, pid_exits_are_deaths=True, reason="finished")
    assert [(f.kind, f.node) for f in findings] == [("agent_lost", "n2")]
    assert killed_after < 1.5  # not the 2 s grace (stop_grace_s 0 + 2)
