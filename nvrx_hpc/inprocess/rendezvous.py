"""The meeting between two rounds: who is still here, and which task takes which rank next.

Every task that left round N-1 writes `<ns>/r<N>/here/<slot>` into the job's store. The first to take
`<ns>/r<N>/leader` waits until every slot is either here or known lost (`<ns>/lost/<slot>`, written from the
agents' restart notices), or until the soft timeout: then the missing slots are declared lost. It writes
the plan (slot -> rank) to `<ns>/r<N>/plan`; everyone else waits for that key. The plan keeps every
survivor's rank, gives the ranks of lost tasks to spares (lowest slot first), and says `escalate` when a
rank is left without a task.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

__all__ = ["Plan", "make_plan", "Rendezvous", "RendezvousTimeout"]

_POLL_S = 0.005  # the leader's look at the arrivals; everyone else blocks in store.wait


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
              lost: Iterable[int] = (), width: int = 0) -> Plan:
    """Survivors keep their rank; each rank without a task goes to a spare slot here: one on the lost rank's
    node first (`width` tasks per node; its burst buffer and GPUs are there), else the lowest."""
    here = sorted(set(here))
    ranks = {slot: previous[slot] for slot in here if slot in previous}
    holes = sorted(set(range(world)) - set(ranks.values()))
    spares = [slot for slot in here if slot not in previous]
    where = {rank: slot // width for slot, rank in previous.items()} if width else {}
    replaced = {}
    left = []
    for rank in holes:
        near = [s for s in spares if width and s // width == where.get(rank)]
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

    def lost(self) -> set[int]:
        return {s for s in self.slots if self.store.check([f"{self.ns}/lost/{s}"])}

    def is_lost(self) -> bool:
        return self.store.check([f"{self.ns}/lost/{self.slot}"])

    def meet(self, round: int, previous: Mapping[int, int], world: int, soft_s: float, hard_s: float) -> Plan:
        """Arrive for `round` and return its plan (the leader makes it). Raises RendezvousTimeout."""
        key = f"{self.ns}/r{round}"
        self.store.set(f"{key}/here/{self.slot}", str(time.time()))
        self.led = self.store.add(f"{key}/leader", 1) == 1
        if self.led:
            plan = self._lead(round, key, previous, world, soft_s)
            self.store.set(f"{key}/plan", plan.to_json())
            return plan
        try:
            self.store.wait([f"{key}/plan"], timedelta(seconds=hard_s))
            return Plan.from_json(self.store.get(f"{key}/plan"))
        except RuntimeError as exc:  # torch raises DistStoreError (a RuntimeError) on the timeout
            raise RendezvousTimeout(f"no plan for round {round} within {hard_s:g} s: {exc}") from None

    def _lead(self, round: int, key: str, previous: Mapping[int, int], world: int, soft_s: float) -> Plan:
        deadline = time.monotonic() + soft_s
        here: set[int] = set()
        while True:
            lost = self.lost()
            here |= {s for s in self.slots if s not in here and self.store.check([f"{key}/here/{s}"])}
            missing = set(self.slots) - here - lost
            if not missing:
                return make_plan(round, previous, here - lost, world, width=self.width)
            if time.monotonic() >= deadline:
                self.mark_lost(missing)  # they never came: hung or dead; the agents kill them
                return make_plan(round, previous, here - lost, world, lost=missing, width=self.width)
            time.sleep(_POLL_S)

    def finish(self) -> None:
        self.store.set(f"{self.ns}/done", "1")

    def finished(self) -> bool:
        return self.store.check([f"{self.ns}/done"])
