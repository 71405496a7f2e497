"""The in-process restart loop around a training function (see the package docstring and docs/inprocess.md)."""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from nvrx_hpc.core.events import EventLog
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.inprocess.interrupt import Interrupter, RestartInterrupt
from nvrx_hpc.inprocess.rendezvous import Plan, Rendezvous, RendezvousTimeout
from nvrx_hpc.inprocess.settings import InprocessSettings
from nvrx_hpc.worker import api as worker_api

__all__ = ["Context", "InprocessWrapper"]

log = logging.getLogger(__name__)

_SPARE_TICK_S = 0.5  # a waiting spare heartbeats (it is alive) and looks whether the training is done
SAME_ERROR_ROUNDS = 3  # this rank's same error, rounds in a row without new progress: restarting cannot help


@dataclass
class Context:
    """What the training function gets on each call: its rank in this round, and the round's number."""

    rank: int
    world_size: int
    round: int  # 0 on the first call; the number of in-process restarts so far
    slot: int  # this task's fixed identity (its Slurm task id)
    per_node: int = 1  # training ranks per node
    _cleanups: list[Callable[[], Any]] = field(default_factory=list, repr=False)

    @property
    def restarted(self) -> bool:
        return self.round > 0

    @property
    def domain(self) -> str:
        """This rank's failure domain for nvrx_hpc.ckpt: the node the rank started on (`node<i>`), so that a
        spare that takes a rank over also takes its place in the partner layout (it restores the rank's
        shard from the partner copy when the rank's own burst buffer is on another node)."""
        return f"node{self.rank // self.per_node}"

    def on_teardown(self, callback: Callable[[], Any]) -> None:
        """Run `callback` when this round ends by a fault, before the process group goes (e.g. a
        checkpointer's `abandon`, which releases its threads without talking to the peers)."""
        self._cleanups.append(callback)


class InprocessWrapper:
    """One task's restart loop. `run(fn)` returns fn's result on the rank(s) that finish it, None on a spare."""

    def __init__(self, settings: InprocessSettings, backend: str = "gloo") -> None:
        import torch.distributed as dist

        self.s = settings
        self.backend = backend
        timeout = timedelta(seconds=settings.hard_timeout_s)
        self.store = dist.TCPStore(settings.store_host, settings.store_port, is_master=False, timeout=timeout)
        # The link thread writes lost slots with its own connection: a store client serves one call at a time.
        notice_store = dist.TCPStore(settings.store_host, settings.store_port, is_master=False, timeout=timeout)
        slots, width = settings.all_slots(), settings.per_node + settings.spares_per_node
        self.rdv = Rendezvous(self.store, settings.namespace, settings.slot, slots, width)
        self._notice_rdv = Rendezvous(notice_store, settings.namespace, settings.slot, slots, width)
        self.interrupter = Interrupter()
        self._noticed = threading.Event()
        self.link = worker_api.link()
        if self.link is not None:
            self.link.on_restart = self._on_notice
        self._errors: list[str] = []  # this rank's own errors of the rounds since training last got further
        self._best: int | None = None  # the highest iteration (worker.set_iteration) any round reached
        self.node = os.environ.get("SLURMD_NODENAME")
        run_dir = os.environ.get("NVRX_RUN_DIR")
        self.events = EventLog(Path(run_dir) / "events.jsonl", source="inprocess") if run_dir else None

    # ------------------------------------------------------------------ the loop

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ranks = self.s.first_plan()
        gc.freeze()  # the imports: never garbage (see _teardown)
        round = 0
        if self.s.refill:
            round, ranks = self._join()
        while True:
            if self.s.slot in ranks:
                ended, result = self._one_round(fn, round, ranks[self.s.slot], args, kwargs)
                if not ended:
                    return result
                round += 1
            else:
                waited = self._wait_as_spare(round)
                if waited is None:
                    return None
                round = waited
            if round > self.s.max_restarts:
                self._escalate(f"{round - 1} in-process restarts, the most allowed (NVRX_IP_MAX_RESTARTS)")
            ranks = self._meet(round, ranks).ranks

    def _join(self) -> tuple[int, dict[int, int]]:
        """A refill task joins the running job as a spare: it takes the newest plan as its own and waits for the
        meeting after it (or, when a meeting is under way, comes to it late and finds its plan there)."""
        round, plan = self.rdv.current()
        self.rdv.join()
        self._emit("inprocess.refill.joined", slot=self.s.slot, round=round)
        return round, (plan.ranks if plan is not None else self.s.first_plan())

    def _one_round(self, fn: Callable[..., Any], round: int, rank: int, args: tuple, kwargs: dict) -> tuple[bool, Any]:
        """(False, result) when fn returned; (True, None) when the round ended by a fault."""
        import torch.distributed as dist

        ctx = Context(rank=rank, world_size=self.s.world_size, round=round, slot=self.s.slot, per_node=self.s.per_node)
        try:
            self._init_group(round, rank)
            self._emit("inprocess.round.started", rank=rank, round=round, slot=self.s.slot)
            self.interrupter.arm(round)
            try:
                result = fn(ctx, *args, **kwargs)
            finally:
                self.interrupter.disarm()
        except RestartInterrupt:
            notice = self.interrupter.ended.get(round)
            reason = getattr(notice, "reason", "") or "a peer failed"
            self._errors.append("")
        except Exception as exc:  # noqa: BLE001 - any error of the round: restart in-process
            reason = f"{type(exc).__name__}: {exc}".strip()[:400]
            if self.link is not None:
                self.link.report_fault(round, reason)
            self._errors.append(reason)
        else:
            self._emit("inprocess.finished", rank=rank, round=round, slot=self.s.slot)
            self.rdv.finish()  # the spares may go home
            if dist.is_initialized():
                dist.destroy_process_group()
            return False, result
        self._emit("inprocess.round.ended", rank=rank, round=round, slot=self.s.slot, reason=reason)
        self._teardown(ctx)
        reached = self.link.last_iteration if self.link is not None else None
        if reached is not None and (self._best is None or reached > self._best):
            self._best, self._errors = reached, self._errors[-1:]  # it got further: a repeat is not a loop
        last = self._errors[-SAME_ERROR_ROUNDS:]
        if len(last) == SAME_ERROR_ROUNDS and last[0] and len(set(last)) == 1:
            self._escalate(f"the same error ended {SAME_ERROR_ROUNDS} rounds in a row without progress: {reason}")
        return True, None

    def _init_group(self, round: int, rank: int) -> None:
        import torch.distributed as dist

        store = dist.PrefixStore(f"{self.s.namespace}/r{round}/pg", self.store)
        # Joining may take long on a loaded node (every rank of the round must arrive): the hard timeout.
        # Collectives then get the short one, so that a hung peer ends the round quickly.
        dist.init_process_group(self.backend, store=store, rank=rank, world_size=self.s.world_size,
                                timeout=timedelta(seconds=self.s.hard_timeout_s))
        dist.group.WORLD.set_timeout(timedelta(seconds=self.s.pg_timeout_s))
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(self.s.world_size)

    def _teardown(self, ctx: Context) -> None:
        import torch.distributed as dist

        for callback in ctx._cleanups:
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - a failing cleanup must not stop the recovery
                log.warning("[inprocess slot %s] teardown callback failed: %r", self.s.slot, exc)
        ctx._cleanups.clear()
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()
        # What survived is long-lived (modules, imports made in the round): frozen, so that the next teardown's
        # collection scans only what its round built. A full one takes 0.2-0.5 s with torch loaded on a busy
        # node, and every rank's is on the way to the next round.
        gc.freeze()

    def _wait_as_spare(self, round: int) -> int | None:
        """Until a round at or after `round` ends (the next meeting's number), or the training is done (None)."""
        while True:
            ended = [r for r in list(self.interrupter.ended) if r >= round]
            if ended:
                return max(ended) + 1
            if self.rdv.finished():
                return None
            if self.rdv.meeting_started(round + 1):  # the agent's notice did not reach it (a refill task starting)
                return round + 1
            worker_api.heartbeat()
            self._noticed.wait(_SPARE_TICK_S)
            self._noticed.clear()

    def _meet(self, round: int, ranks: dict[int, int]) -> Plan:
        started = time.monotonic()
        if self.rdv.is_lost():  # a task of a failed node (its agent kills it): it must not lead the meeting
            log.warning("[inprocess slot %s] declared lost; leaving", self.s.slot)
            raise SystemExit(0)
        try:
            plan = self.rdv.meet(round, ranks, self.s.world_size, self.s.soft_timeout_s, self.s.hard_timeout_s)
        except RendezvousTimeout as exc:
            self._escalate(str(exc))
        if plan.lost and self.link is not None and self.rdv.led:
            # the agents kill what never came (a hung rank), and the launcher counts the spares used
            self.link.report_fault(round - 1, f"declared lost after {self.s.soft_timeout_s:g} s", lost=plan.lost)
        self._emit("inprocess.meeting", round=round, slot=self.s.slot, rank=plan.ranks.get(self.s.slot),
                   lost=list(plan.lost), replaced=plan.replaced, took_s=round_(time.monotonic() - started))
        if self.s.slot in plan.lost or self.rdv.is_lost():
            log.warning("[inprocess slot %s] declared lost and replaced; leaving", self.s.slot)
            raise SystemExit(0)
        if plan.escalate:
            self._escalate(plan.escalate)
        return plan

    def _escalate(self, reason: str) -> None:
        self._emit("inprocess.escalate", slot=self.s.slot, reason=reason)
        log.error("[inprocess slot %s] cannot recover in-process (%s); exiting %d so that the step restarts",
                  self.s.slot, reason, int(ExitCode.INPROCESS_ESCALATE))
        raise SystemExit(int(ExitCode.INPROCESS_ESCALATE))

    # ------------------------------------------------------------------ notices and events

    def _on_notice(self, msg: Any) -> None:
        """Link thread, on an `a.restart`: record the lost slots for the leader first (they must be in the store
        before this rank can reach the meeting, or a rank of a failed node could count as here), then end the
        round and wake a waiting spare."""
        if msg.lost:
            try:
                self._notice_rdv.mark_lost(msg.lost)
            except Exception as exc:  # noqa: BLE001 - the leader's soft timeout still finds them
                log.warning("[inprocess slot %s] cannot record lost slots %s: %r", self.s.slot, msg.lost, exc)
        self.interrupter.notice(msg)
        self._noticed.set()

    def _emit(self, kind: str, **detail: Any) -> None:
        if self.events is not None:
            self.events.emit(kind, node=self.node, **detail)


def round_(seconds: float) -> float:
    return round(seconds, 4)
