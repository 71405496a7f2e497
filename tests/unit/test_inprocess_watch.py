"""The launcher's side of in-process restart (InprocessWatch): which agent reports it absorbs, the restart notices
it sends, and what it leaves to the step watch (a loss without a spare, an escalation)."""

from __future__ import annotations

import json

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.core.messages import RankEventKind
from nvrx_hpc.launcher.hub import HubEvent
from nvrx_hpc.launcher.inprocess_watch import InprocessWatch
from nvrx_hpc.launcher.settings import InprocessRun


class Hub:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def broadcast(self, record, nodes=None, **fields) -> None:
        self.sent.append({"kind": record.KIND.value, **fields})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def _watch(tmp_path, spares=2):
    hub, clock = Hub(), Clock()
    events = EventLog(tmp_path / "events.jsonl", source="launcher")
    return InprocessWatch(hub, events, ["n1", "n2"], InprocessRun(enabled=True, soft_timeout_s=5), spares, 4, clock), \
        hub, clock, events  # fmt: skip


def _rank(event, rank, node="n1", **fields):
    return HubEvent(node, m.RankEvent(node=node, event=event, rank=rank, **fields), 0.0)


def test_the_first_report_of_a_round_restarts_everyone_once(tmp_path):
    w, hub, _, _ = _watch(tmp_path)
    assert w.take(_rank(RankEventKind.RAISED, 1, round=0, reason="RuntimeError: boom"))
    assert w.take(_rank(RankEventKind.RAISED, 2, round=0, reason="RuntimeError: Connection closed by peer"))
    assert [s["round"] for s in hub.sent] == [0] and w.round == 1 and w.spares_left == 2


def test_a_death_names_the_lost_rank_and_uses_a_spare(tmp_path):
    w, hub, clock, _ = _watch(tmp_path)
    assert w.take(_rank(RankEventKind.EXITED, 3, node="n2", signal=9))
    assert hub.sent[-1]["lost"] == (3,) and hub.sent[-1]["round"] == 0 and w.spares_left == 1
    # its peers' reports of the same round come after: no second restart
    assert w.take(_rank(RankEventKind.RAISED, 0, round=0, reason="RuntimeError: reset"))
    assert len(hub.sent) == 1
    # a death while the ranks meet (just after a restart) names the ended round: it only says who is lost
    clock.now += 1
    assert w.take(_rank(RankEventKind.EXITED, 1, signal=9))
    assert hub.sent[-1] == {"kind": "la.restart", "round": 0, "lost": (1,), "reason": "rank 1 on n1 died"}


def test_what_it_cannot_absorb_goes_to_the_step_watch(tmp_path):
    w, _, _, _ = _watch(tmp_path, spares=0)
    assert not w.take(_rank(RankEventKind.EXITED, 3, signal=9))  # no spare left
    assert not w.take(_rank(RankEventKind.EXITED, 2, signal=15))
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert kinds.count("inprocess.no_spare") == 1
    w2, _, _, _ = _watch(tmp_path)
    assert not w2.take(_rank(RankEventKind.EXITED, 3, exit_code=95))  # a rank escalated
    assert not w2.take(HubEvent("n1", m.HealthFailed(node="n1", check="gpu", verdict="fatal"), 0.0))
    assert w2.take(_rank(RankEventKind.EXITED, 3, reason="finished"))  # said goodbye: not a death
    assert w2.take(_rank(RankEventKind.HUNG, 3))  # the agent kills it; its exit is what counts


def test_a_step_that_finished_despite_a_lost_ranks_exit_code(tmp_path):
    w, _, _, events = _watch(tmp_path)
    assert w.take(_rank(RankEventKind.EXITED, 3, signal=9))
    for rank in range(3):
        events.emit("inprocess.finished", rank=rank)
    assert not w.finished_despite(137, tmp_path, since=0.0)  # rank 3 never finished
    events.emit("inprocess.finished", rank=3)
    assert w.finished_despite(137, tmp_path, since=0.0)


def test_a_verdict_on_a_recovered_error_is_recognised(tmp_path):
    w, _, _, _ = _watch(tmp_path)
    w.take(_rank(RankEventKind.RAISED, 1, round=0, reason="RuntimeError: injected exception at step 5 on rank 1"))

    class Verdict:
        root_cause = "RuntimeError: injected exception at step 5 on rank 1 (node n1; rank 1)"
        signature = "python_exception"

    assert w.explains(Verdict())
    Verdict.root_cause = "CUDA error: an illegal memory access was encountered"
    assert not w.explains(Verdict())
