"""The launcher's part of in-process restart: turn the agents' reports into restart notices for every rank.

A rank whose training function raised reports `ag.rank raised` with the round it ended; the first report
of a round makes one `la.restart` to every agent, which passes it to its ranks (`a.restart`) so that
ranks outside a collective leave the function too. A rank that dies is lost: while spare ranks are left
the notice names it, and the meeting gives its rank to a spare. A node whose agent is lost (the node
died) or that fails a health check (an Xid) loses all its tasks at once: the notice names them all (its
agent, if alive, kills them), the meeting moves their ranks to spares on healthy nodes, and the launcher
excludes the node for later steps. What this cannot absorb (a loss with no spare left, an
INPROCESS_ESCALATE exit) goes on to the step watch, which stops the step and restarts it as without
in-process restart. After each restart the refill (nvrx_hpc.launcher.refill), when there is one, tops the
spare tasks up with tasks of extra steps; their slots follow the step's and their nodes are its own map.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.events import EventLog, read_events
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.core.messages import RankEventKind
from nvrx_hpc.launcher.hub import AgentHub, HubEvent
from nvrx_hpc.launcher.settings import InprocessRun

__all__ = ["InprocessWatch"]


class InprocessWatch:
    """`nodes`: the step's nodes in Slurm's order, `width` tasks each (task `slot` runs on nodes[slot // width];
    a refill task's node is in `refill.slots`); `world` of the tasks train. `on_node_lost(node, why)` is called
    once for a node lost in-process."""

    def __init__(self, hub: AgentHub, events: EventLog, nodes: list[str], settings: InprocessRun, width: int,
                 world: int, clock=time, on_node_lost: Callable[[str, str], None] | None = None,
                 refill: Any = None) -> None:  # fmt: skip
        self.hub = hub
        self.world = world
        self.events = events
        self.nodes = nodes
        self.width = width
        self.s = settings
        self.clock = clock
        self.on_node_lost = on_node_lost
        self.round = 0  # the round the ranks run now, as far as this side knows
        self.lost: set[int] = set()
        self.lost_nodes: set[str] = set()
        self.exited: set[int] = set()  # tasks whose exit an agent reported
        self.registered: set[int] = set()  # tasks an agent reported registered
        self.refill = refill  # a Refill, or None: no refill steps
        if refill is not None:
            refill.watch = self
        self.recovered: list[str] = []  # the errors of rounds that were recovered in-process
        self.escalated = False  # a loss it could not absorb: the step is being stopped
        self._restarted_at = float("-inf")

    @property
    def spares_left(self) -> int:
        """Tasks alive beyond the ranks that train, refill tasks still starting included: each one can take one
        more lost rank."""
        own = len(self.nodes) * self.width
        extra = len(self.refill.alive()) if self.refill is not None else 0
        return own - len([s for s in self.lost if s < own]) + extra - self.world

    def all_exited(self) -> bool:
        """A node was lost and every task of the others has exited: the step is over, but srun still waits for
        the lost node's tasks until Slurm marks that node down (SlurmdTimeout)."""
        alive = set(range(len(self.nodes) * self.width)) - self.lost
        if self.refill is not None:
            alive |= self.refill.alive()
        return bool(self.lost_nodes) and alive <= self.exited

    def slots_of(self, node: str) -> list[int]:
        i = self.nodes.index(node)
        extra = [s for s, n in self.refill.slots.items() if n == node] if self.refill is not None else []
        return [*range(i * self.width, (i + 1) * self.width), *extra]

    def take(self, event: HubEvent) -> bool:
        """True when the event was handled in-process (the step watch must not act on it)."""
        msg = event.msg
        if event.node not in self.nodes:
            return False
        if isinstance(msg, m.AgentLost):
            silent = f" (silent for {msg.silent_s:g} s)" if msg.silent_s is not None else ""
            return self._lose_node(event.node, f"node agent on {event.node} lost{silent}")
        if isinstance(msg, m.HealthFailed):
            return self._lose_node(event.node, f"{event.node} failed health check {msg.check}: {msg.detail}")
        if not isinstance(msg, m.RankEvent):
            return False
        if msg.event is RankEventKind.RAISED:
            new = [slot for slot in msg.lost if slot not in self.lost]
            self.lost.update(new)
            why = f"rank {msg.rank} on {event.node} ended round {msg.round}: {msg.reason}"
            if msg.reason and not msg.lost:
                self.recovered.append(msg.reason)
            if msg.round >= self.round:
                self._restart(msg.round, new, why)
                self.round = msg.round + 1
            elif new:  # the meeting declared them lost: the agents kill them
                self._restart(msg.round, new, why)
            return True
        if msg.event is RankEventKind.REGISTERED:
            self.registered.add(msg.rank)
            return False
        if msg.event is RankEventKind.HUNG:
            return True  # the agent kills a hung rank; its exit comes next and is a loss
        if msg.event is not RankEventKind.EXITED:
            return False
        self.exited.add(msg.rank)
        if msg.rank in self.lost:
            return True
        if (msg.exit_code == 0 and not msg.signal) or msg.exit_code == ExitCode.INPROCESS_ESCALATE:
            return False
        if msg.exit_code is None and not msg.signal and msg.reason == "finished":
            return True  # it said goodbye: an exit of its own (done, or replaced); never a death
        if self.spares_left <= 0:
            self._no_spare(event.node, msg.rank, "a rank died and no spare rank is left: the step restarts")
            return False
        self.lost.add(msg.rank)
        self._restart_for_loss([msg.rank], f"rank {msg.rank} on {event.node} died")
        return True

    def _lose_node(self, node: str, why: str) -> bool:
        """Every task of `node` is lost (the node died, or failed a health check); False when the spares left
        cannot take its ranks (the step watch then stops the step)."""
        if node in self.lost_nodes:
            return True  # already absorbed: a later report of the same node
        new = [slot for slot in self.slots_of(node) if slot not in self.lost]
        if self.spares_left < len(new):
            self._no_spare(node, None, f"{why}; {len(new)} tasks lost and {self.spares_left} spare left: "
                           "the step restarts")  # fmt: skip
            return False
        self.lost.update(new)
        self.lost_nodes.add(node)
        if self.refill is not None:
            self.refill.drop_node(node)
        if self.on_node_lost is not None:
            self.on_node_lost(node, why)
        if new:  # none: the meeting already declared its tasks lost (a silent node is found late)
            self._restart_for_loss(new, why)
        return True

    def _restart_for_loss(self, lost: list[int], why: str) -> None:
        # The peers' collectives broke at once and they may already be meeting for the next round: then the
        # notice names the round that ended, and only says who is lost.
        meeting = self.clock.monotonic() - self._restarted_at < self.s.soft_timeout_s and self.round > 0
        round = self.round - 1 if meeting else self.round
        self._restart(round, lost, why)
        if not meeting:
            self.round += 1

    def _no_spare(self, node: str, rank: int | None, why: str) -> None:
        if not self.escalated:  # once: the step's stop then ends every other rank too
            self.escalated = True
            self.events.emit("inprocess.no_spare", node=node, rank=rank, reason=why)

    def finished_despite(self, rc: int, run_dir: Path, since: float) -> bool:
        """Every rank returned from the training function in this step (`inprocess.finished` events): then the
        step's non-zero exit code `rc` is only a lost rank's (srun reports a killed task's 137)."""
        try:
            done = {e.get("rank") for e in read_events(run_dir / "events.jsonl")
                    if e.get("kind") == "inprocess.finished" and e.get("time", 0) >= since}  # fmt: skip
        except OSError:
            return False
        if not self.lost or len(done - {None}) < self.world:
            return False
        self.events.emit("launcher.step.lost_ranks_exit", returncode=rc, lost=sorted(self.lost),
                         reason=f"exit code {rc} is a lost rank's: every rank finished the training in-process")
        return True

    def explains(self, verdict: object) -> bool:
        """Whether attribution's verdict on the failed step names an error that was already recovered in-process
        (a traceback of an earlier round is still in the step's log): then it says nothing of the failure."""
        text = f"{getattr(verdict, 'root_cause', '')} {getattr(verdict, 'signature', '')}"
        messages = {r.partition(": ")[2].strip() or r for r in self.recovered}
        return any(len(msg) >= 8 and msg[:200] in text for msg in messages)

    def _restart(self, round: int, lost: list[int], why: str) -> None:
        self._restarted_at = self.clock.monotonic()
        self.hub.broadcast(m.InprocessRestart, nodes=self.nodes, round=round, lost=tuple(lost), reason=why[:300])
        self.events.emit("inprocess.restart", round=round, lost=lost, spares_left=self.spares_left, reason=why)
        if self.refill is not None:
            self.refill.top_up(why)
