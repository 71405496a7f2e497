"""The launcher's part of in-process restart: turn the agents' reports into restart notices for every rank.

A rank whose training function raised reports `ag.rank raised` with the round it ended; the first report
of a round makes one `la.restart` to every agent, which passes it to its ranks (`a.restart`) so that
ranks outside a collective leave the function too. A rank that dies is lost: while spare ranks are left
the notice names it, and the meeting gives its rank to a spare. What this cannot absorb (a death with no
spare left, an INPROCESS_ESCALATE exit, a failed health check, a lost agent) goes on to the step watch,
which stops the step and restarts it as without in-process restart.
"""

from __future__ import annotations

import time
from pathlib import Path

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.events import EventLog, read_events
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.core.messages import RankEventKind
from nvrx_hpc.launcher.hub import AgentHub, HubEvent
from nvrx_hpc.launcher.settings import InprocessRun

__all__ = ["InprocessWatch"]


class InprocessWatch:
    def __init__(self, hub: AgentHub, events: EventLog, nodes: list[str], settings: InprocessRun,
                 spare_slots: int, world: int, clock=time) -> None:  # fmt: skip
        self.hub = hub
        self.world = world
        self.events = events
        self.nodes = nodes
        self.s = settings
        self.clock = clock
        self.round = 0  # the round the ranks run now, as far as this side knows
        self.spares_left = spare_slots
        self.lost: set[int] = set()
        self.recovered: list[str] = []  # the errors of rounds that were recovered in-process
        self.escalated = False  # a loss it could not absorb: the step is being stopped
        self._restarted_at = float("-inf")

    def take(self, event: HubEvent) -> bool:
        """True when the event was handled in-process (the step watch must not act on it)."""
        msg = event.msg
        if not isinstance(msg, m.RankEvent) or event.node not in self.nodes:
            return False
        if msg.event is RankEventKind.RAISED:
            new = [slot for slot in msg.lost if slot not in self.lost]
            self.lost.update(new)
            self.spares_left -= len(new)
            why = f"rank {msg.rank} on {event.node} ended round {msg.round}: {msg.reason}"
            if msg.reason and not msg.lost:
                self.recovered.append(msg.reason)
            if msg.round >= self.round:
                self._restart(msg.round, new, why)
                self.round = msg.round + 1
            elif new:  # the meeting declared them lost: the agents kill them
                self._restart(msg.round, new, why)
            return True
        if msg.event is RankEventKind.HUNG:
            return True  # the agent kills a hung rank; its exit comes next and is a loss
        if msg.event is not RankEventKind.EXITED:
            return False
        if msg.rank in self.lost:
            return True
        if (msg.exit_code == 0 and not msg.signal) or msg.exit_code == ExitCode.INPROCESS_ESCALATE:
            return False
        if msg.exit_code is None and not msg.signal and msg.reason == "finished":
            return True  # it said goodbye: an exit of its own (done, or replaced); never a death
        if self.spares_left <= 0:
            if not self.escalated:  # once: the step's stop then ends every other rank too
                self.escalated = True
                self.events.emit("inprocess.no_spare", node=event.node, rank=msg.rank,
                                 reason="a rank died and no spare rank is left: the step restarts")
            return False
        self.lost.add(msg.rank)
        self.spares_left -= 1
        # Its peers' collectives broke at once and they may already be meeting for the next round: then the
        # notice names the round that ended, and only says who is lost.
        meeting = self.clock.monotonic() - self._restarted_at < self.s.soft_timeout_s and self.round > 0
        round = self.round - 1 if meeting else self.round
        self._restart(round, [msg.rank], f"rank {msg.rank} on {event.node} died")
        if not meeting:
            self.round += 1
        return True

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
