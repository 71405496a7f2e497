"""Refill steps: new warm spare tasks for a running in-process job, so that it need not restart its step.

Each rank lost in-process uses up one spare task. After every in-process restart the launcher tops the spare
tasks back up to what the step started with: one extra `srun --overlap --no-kill` step per chosen node (the
healthy node with the fewest live tasks first; never a lost one), running the training's own command. Its
tasks get slots beyond every slot used so far (`NVRX_IP_SLOT_BASE`; rank_exec makes each register with its
agent under its slot) and join the running job through the store (nvrx_hpc.inprocess.rendezvous): the
launcher lists `slot -> node place` under `<ns>/refill/slots` before the step starts, each task writes
`<ns>/joined/<slot>` when it is ready, and the next meeting may give it a lost rank.

A refill step has no time limit of its own: `StepGroup` ties it to the training step. Its `wait` ends when
the training step and every refill step have ended; its `stop` stops them all (a failure, an escalation,
the cut after a lost node).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nvrx_hpc.core.events import EventLog, read_events
from nvrx_hpc.inprocess.rendezvous import refill_key
from nvrx_hpc.inprocess.settings import ENV_SLOT_BASE
from nvrx_hpc.launcher.step_layout import StepLayout
from nvrx_hpc.launcher.steps import SrunStep, refill_step_argv
from nvrx_hpc.slurm.commands import NVRX_PLUGIN, without_spank_options

__all__ = ["Refill", "StepGroup"]

_POLL_S = 0.2


class Refill:
    """The refill steps of one training step. `store.set(key, value)` writes the job's store (ip_store);
    `watch` (an InprocessWatch) is set by the watch itself: it says which slots are lost and on which node."""

    def __init__(self, layout: StepLayout, env: Mapping[str, str], store: Any, namespace: str, events: EventLog,
                 world: int, most: int, restart: int, logs: Path) -> None:  # fmt: skip
        self.layout = layout
        self.env = dict(env)
        self.store = store
        self.ns = namespace
        self.events = events
        self.most = most
        self.restart = restart
        self.logs = logs
        self.target = len(layout.nodes) * layout.width - world  # the spare tasks the step started with
        self.next_slot = len(layout.nodes) * layout.width
        self.slots: dict[int, str] = {}  # refill slot -> its node
        self.gone: set[int] = set()  # slots whose refill step has ended
        self.watch: Any = None
        self.closed = False
        self._stopping = False  # the launcher stops them: their exit codes say nothing
        self.returncode: int | None = None  # the first refill step that failed, if any
        self._steps: list[tuple[str, SrunStep]] = []
        self._tasks: list[asyncio.Future] = []

    def alive(self) -> set[int]:
        """Refill tasks started (joined or still starting) and neither lost nor ended."""
        lost = self.watch.lost if self.watch is not None else set()
        return {s for s in self.slots if s not in lost and s not in self.gone}

    def top_up(self, why: str) -> None:
        """Start refill tasks until the spare tasks left (counting those still starting) are back at the step's
        first count, at most `most` in all; called after each in-process restart."""
        w = self.watch
        if self.closed or w is None or w.escalated:
            return
        wanted = min(self.target - w.spares_left, self.most - len(self.slots))
        healthy = [n for n in self.layout.nodes if n not in w.lost_nodes]
        if wanted <= 0 or not healthy:
            return
        live = {n: len([s for s in w.slots_of(n) if s not in w.lost and s not in self.gone]) for n in healthy}
        per_node: dict[str, int] = {}
        for _ in range(wanted):  # one at a time to the node with the fewest live tasks (Slurm's order on ties)
            node = min(healthy, key=lambda n: live[n])
            live[node] += 1
            per_node[node] = per_node.get(node, 0) + 1
        for node, count in per_node.items():
            base = self.next_slot
            slots = list(range(base, base + count))
            self.next_slot += count
            self.slots.update(dict.fromkeys(slots, node))
            places = {s: self.layout.nodes.index(n) for s, n in self.slots.items()}
            self.store.set(refill_key(self.ns), json.dumps(places))
            self.events.emit("inprocess.refill.started", node=node, slots=slots, spares_left=w.spares_left,
                             target=self.target, reason=why[:300])  # fmt: skip
            self._tasks.append(asyncio.ensure_future(self._run(node, base, count)))

    async def _run(self, node: str, base: int, count: int) -> None:
        spec = dataclasses.replace(self.layout.spec, env={**self.layout.spec.env, ENV_SLOT_BASE: str(base)})
        name = f"nvrx-refill-{self.restart}"
        argv = refill_step_argv(spec, node, count, name, self.logs / f"step-{self.restart}.refill-{base}.log")
        step = SrunStep(argv, {**without_spank_options(self.env, NVRX_PLUGIN), ENV_SLOT_BASE: str(base)})
        self._steps.append((node, step))
        slots = list(range(base, base + count))
        rc: int | None = None
        try:
            await step.start()
            rc = await step.wait()
        except OSError as exc:  # no srun: the spares left decide as before
            self.events.emit("inprocess.refill.failed", node=node, slots=slots, reason=str(exc))
        finally:
            self.gone.update(slots)
            lost = self.watch.lost if self.watch is not None else set()
            for slot in slots:  # a task that never joined must not keep a meeting waiting for it
                if slot not in lost:
                    self.store.set(f"{self.ns}/lost/{slot}", "1")
        if rc and self.returncode is None and not self._stopping and not set(slots) <= lost:
            self.returncode = rc
        self.events.emit("inprocess.refill.ended", node=node, slots=slots, returncode=rc)

    def registered_alive(self) -> bool:
        """Some refill task registered with its agent and has not exited (it may hold a rank, or is a waiting
        spare that heartbeats: its agent's deadlines cover it)."""
        w = self.watch
        return w is not None and any(s in w.registered and s not in w.exited for s in self.alive())

    async def wait(self, since: float, hard_timeout_s: float) -> None:
        """After the training step ended: until every refill step has ended. Tasks that never registered (still
        importing, or wedged there) are stopped after `hard_timeout_s`, or at once when every rank finished."""
        self.closed = True
        ended = time.monotonic()
        while any(not t.done() for t in self._tasks):
            done = _all_finished(self.events.path, since, self.watch.world if self.watch else 0)
            if (done or time.monotonic() - ended > hard_timeout_s) and not self.registered_alive():
                await self.stop(2.0)
                break
            await asyncio.sleep(_POLL_S)
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop(self, grace_s: float) -> None:
        self.closed = self._stopping = True
        await asyncio.gather(*(step.stop(grace_s) for _, step in list(self._steps)))

    def drop_node(self, node: str, grace_s: float = 2.0) -> None:
        """A node lost in-process: its refill tasks go too, also those still starting (its agent kills only the
        tasks registered with it, and a refill task must never join from an excluded node)."""
        for where, step in list(self._steps):
            if where == node:
                self._tasks.append(asyncio.ensure_future(step.stop(grace_s)))


def _all_finished(events: Path, since: float, world: int) -> bool:
    """Every rank returned from the training function in this step (`inprocess.finished` events)."""
    try:
        done = {e.get("rank") for e in read_events(events)
                if e.get("kind") == "inprocess.finished" and e.get("time", 0) >= since}  # fmt: skip
    except OSError:
        return False
    return world > 0 and len(done - {None}) >= world


class StepGroup:
    """The training step and its refill steps, as one step for the step watch (wait, stop, returncode)."""

    def __init__(self, main: SrunStep, refill: Refill, since: float, hard_timeout_s: float) -> None:
        self.main = main
        self.refill = refill
        self.since = since
        self.hard_timeout_s = hard_timeout_s

    @property
    def returncode(self) -> int | None:
        return self.main.returncode

    async def wait(self) -> int:
        rc = await self.main.wait()
        await self.refill.wait(self.since, self.hard_timeout_s)
        return rc or (self.refill.returncode or 0)

    async def stop(self, grace_s: float) -> int | None:
        await asyncio.gather(self.main.stop(grace_s), self.refill.stop(grace_s))
        return self.main.returncode
