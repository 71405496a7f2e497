"""The meeting between two rounds: who is still here, and which task takes which rank next.

Every task that left round N-1 writes `<ns>/r<N>/here/<slot>` into the job's store. The first to take
`<ns>/r<N>/leader` waits until every slot is either here or known lost (`<ns>/lost/<slot>`, written from the
agents' restart notices), or until the soft timeout: then the missing slots are declared lost. It writes
the plan (slot -> rank) to `<ns>/r<N>/plan` (and N to `<ns>/round`); everyone else waits for that key. The
plan keeps every survivor's rank, gives the ranks of lost tasks to spares (lowest slot first), and says
`escalate` when a rank is left without a task.

Refill tasks (started by the launcher in a later srun step, nvrx_hpc.launcher.refill) have slots beyond the
step's: the launcher lists them with their node's place in the step under `<ns>/refill/slots` before they
start, and each writes `<ns>/joined/<slot>` once it is ready. The leader waits for the joined ones like any
slot; one still starting never stalls a meeting, unless the plan would otherwise escalate: then the leader
waits up to half the hard timeout for it to join and come.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

__all__ = ["Plan", "make_plan", "Rendezvous", "RendezvousTimeout", "refill_key"]

_POLL_S = 0.005  # the leader's look at the arrivals; everyone else blocks in store.wait


def refill_key(namespace: str) -> str:
    """The key the launcher lists its refill slots under (JSON: slot -> the node's place in the step)."""
    return f"{namespace}/refill/slots"


class RendezvousTimeout(Exception):
    """The plan did not come within the hard timeout (the leader died, or the store is gone)."""


@dataclass(frozen=True)
class Plan:
    round: int
    ranks: dict[int, int]  # slot -> rank
    lost: tuple[int, ...] = ()  # slots declared lost at this meeting
    escalate: str | None = None  # why the job cannot go on in-process
    replaced: dict[int, int] = field(default_factory=dict)  # rank -> the spare slot that took it

    def to_json(self) -> str:
        return json.dumps({"round": self.round, "ranks": self.ranks, "lost": list(self.lost),
                           "escalate": self.escalate, "replaced": self.replaced})

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        raw = json.loads(text)
        return cls(round=int(raw["round"]), ranks={int(k): int(v) for k, v in raw["ranks"].items()},
                   lost=tuple(int(s) for s in raw["lost"]), escalate=raw.get("escalate"),
                   replaced={int(k): int(v) for k, v in raw.get("replaced", {}).items()})


def make_plan(round: int, previous: Mapping[int, int], here: Iterable[int], world: int,
              lost: Iterable[int] = (), width: int = 0, place: Mapping[int, int] | None = None) -> Plan:
    """Survivors keep their rank; each rank without a task goes to a spare slot here: one on the lost rank's
    node first (`width` tasks per node; its burst buffer and GPUs are there), else the lowest. `place`: the
    node (its place in the step) of slots beyond the step's own (refill tasks); the others are slot // width."""
    place = place or {}
    here = sorted(set(here))
    ranks = {slot: previous[slot] for slot in here if slot in previous}
    holes = sorted(set(range(world)) - set(ranks.values()))
    spares = [slot for slot in here if slot not in previous]

    def node(slot: int) -> int | None:
        return place.get(slot, slot // width) if width else None

    where = {rank: node(slot) for slot, rank in previous.items()}
    replaced = {}
    left = []
    for rank in holes:
        near = [s for s in spares if width and node(s) == where.get(rank)]
        if not (near or spares):
            left.append(rank)
            continue
        slot = (near or spares)[0]
        spares.remove(slot)
        ranks[slot] = rank
        replaced[rank] = slot
    why = None
    if left:
        why = f"ranks {left} have no task left (no spare rank); the step must restart"
    return Plan(round, dict(sorted(ranks.items())), tuple(sorted(set(lost))), why, replaced)


class Rendezvous:
    """The store side of the meeting for one task (`store`: a torch.distributed Store)."""

    def __init__(self, store: Any, namespace: str, slot: int, slots: Iterable[int], width: int = 0) -> None:
        self.store = store
        self.width = width
        self.ns = namespace
        self.slot = slot
        self.slots = tuple(slots)
        self.led = False  # this task made the last plan

    def mark_lost(self, slots: Iterable[int]) -> None:
        for slot in slots:
            self.store.set(f"{self.ns}/lost/{slot}", "1")

    def lost(self, slots: Iterable[int] | None = None) -> set[int]:
        return {s for s in (self.slots if slots is None else slots) if self.store.check([f"{self.ns}/lost/{s}"])}

    def refills(self) -> dict[int, int]:
        """Refill slots the launcher started -> their node's place in the step (`<ns>/refill/slots`)."""
        key = refill_key(self.ns)
        if not self.store.check([key]):
            return {}
        return {int(k): int(v) for k, v in json.loads(self.store.get(key)).items()}

    def join(self) -> None:
        """A refill task is ready: from now on every meeting's leader waits for it."""
        self.store.set(f"{self.ns}/joined/{self.slot}", "1")

    def current(self) -> tuple[int, Plan | None]:
        """The round of the newest plan and the plan (0 and None before any restart)."""
        if not self.store.check([f"{self.ns}/round"]):
            return 0, None
        round = int(self.store.get(f"{self.ns}/round"))
        return round, Plan.from_json(self.store.get(f"{self.ns}/r{round}/plan"))

    def meeting_started(self, round: int) -> bool:
        """Someone came to the meeting of `round` (a spare that missed the agent's notice finds it here)."""
        return self.store.check([f"{self.ns}/r{round}/leader"])

    def is_lost(self) -> bool:
        return self.store.check([f"{self.ns}/lost/{self.slot}"])

    def meet(self, round: int, previous: Mapping[int, int], world: int, soft_s: float, hard_s: float) -> Plan:
        """Arrive for `round` and return its plan (the leader makes it). Raises RendezvousTimeout."""
        key = f"{self.ns}/r{round}"
        self.store.set(f"{key}/here/{self.slot}", str(time.time()))
        self.led = self.store.add(f"{key}/leader", 1) == 1
        if self.led:
            plan = self._lead(round, key, previous, world, soft_s, hard_s)
            self.store.set(f"{key}/plan", plan.to_json())
            self.store.set(f"{self.ns}/round", str(round))
            return plan
        try:
            self.store.wait([f"{key}/plan"], timedelta(seconds=hard_s))
            return Plan.from_json(self.store.get(f"{key}/plan"))
        except RuntimeError as exc:  # torch raises DistStoreError (a RuntimeError) on the timeout
            raise RendezvousTimeout(f"no plan for round {round} within {hard_s:g} s: {exc}") from None

    def _lead(self, round: int, key: str, previous: Mapping[int, int], world: int, soft_s: float,
              hard_s: float = 0.0) -> Plan:
        start = time.monotonic()
        deadline = start + soft_s
        joined_at: dict[int, float] = {}  # refill slots: when this leader first saw them joined
        here: set[int] = set()
        declared: set[int] = set()
        while True:
            now = time.monotonic()
            extra = self.refills()
            for s in extra:
                if s not in joined_at and self.store.check([f"{self.ns}/joined/{s}"]):
                    joined_at[s] = now
            slots = set(self.slots) | set(joined_at)
            lost = self.lost(slots | set(extra)) | declared
            here |= {s for s in slots - here if self.store.check([f"{key}/here/{s}"])}
            missing = slots - here - lost
            # a refill task that joined during the meeting gets its own soft timeout to come
            late = {s for s in missing if now >= max(deadline, joined_at.get(s, start) + soft_s)}
            if missing - late:
                time.sleep(_POLL_S)
                continue
            if late:
                self.mark_lost(late)  # they never came: hung or dead; the agents kill them
                declared |= late
                lost |= late
            plan = make_plan(round, previous, here - lost, world, lost=declared, width=self.width, place=extra)
            coming = set(extra) - set(joined_at) - lost
            if plan.escalate and coming and now < start + hard_s / 2:
                time.sleep(_POLL_S)  # a refill task is still starting: better than restarting the step
                continue
            return plan

    def finish(self) -> None:
        self.store.set(f"{self.ns}/done", "1")

    def finished(self) -> bool:
        return self.store.check([f"{self.ns}/done"])
