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


def _watch(tmp_path, spare_ranks=1, nodes=("n1", "n2"), lost_nodes=None):
    """2 ranks on each of the first two nodes, `spare_ranks` spare tasks after them on every node."""
    hub, clock = Hub(), Clock()
    events = EventLog(tmp_path / "events.jsonl", source="launcher")
    on_lost = None if lost_nodes is None else (lambda node, why: lost_nodes.append((node, why)))
    return InprocessWatch(hub, events, list(nodes), InprocessRun(enabled=True, soft_timeout_s=5), 2 + spare_ranks, 4,
                          clock, on_node_lost=on_lost), hub, clock, events  # fmt: skip


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
    w, _, _, _ = _watch(tmp_path, spare_ranks=0)
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


def test_a_failed_or_lost_node_moves_its_ranks_to_a_spare_node_in_process(tmp_path):
    excluded: list = []
    w, hub, clock, _ = _watch(tmp_path, nodes=("n1", "n2", "n3"), lost_nodes=excluded)  # n3: a spare node
    assert w.spares_left == 5  # 9 tasks, 4 train
    assert w.take(HubEvent("n1", m.HealthFailed(node="n1", check="gpu", verdict="fatal", detail="Xid 79"), 0.0))
    assert hub.sent[-1]["lost"] == (0, 1, 2) and hub.sent[-1]["round"] == 0 and w.round == 1
    assert excluded == [("n1", "n1 failed health check gpu: Xid 79")] and w.spares_left == 2
    assert w.take(HubEvent("n1", m.HealthFailed(node="n1", check="gpu", verdict="fatal"), 0.0))  # the same node
    assert w.take(_rank(RankEventKind.EXITED, 1, signal=9)) and len(hub.sent) == 1  # its ranks killed: known
    # n2 lost while the ranks meet: the notice names the ended round; 3 more lost, 2 spares: the step restarts
    clock.now += 1
    assert not w.take(HubEvent("n2", m.AgentLost(node="n2"), 0.0))
    assert len(excluded) == 1 and "inprocess.no_spare" in (tmp_path / "events.jsonl").read_text()


def test_a_lost_node_ends_the_step_once_every_other_task_has_exited(tmp_path):
    w, _, _, _ = _watch(tmp_path, nodes=("n1", "n2", "n3"), lost_nodes=[])
    assert w.take(HubEvent("n2", m.AgentLost(node="n2"), 0.0)) and w.lost == {3, 4, 5}
    for slot in (0, 1, 2, 6, 7):
        w.take(_rank(RankEventKind.EXITED, slot, exit_code=0))
    assert not w.all_exited()
    w.take(_rank(RankEventKind.EXITED, 8, reason="finished"))
    assert w.all_exited()


def test_a_node_whose_tasks_the_meeting_declared_lost_is_excluded_without_another_restart(tmp_path):
    excluded: list = []
    w, hub, _, _ = _watch(tmp_path, nodes=("n1", "n2", "n3"), lost_nodes=excluded)
    # a node that lost power sends no reset: its peers time out, the meeting declares its tasks lost
    assert w.take(_rank(RankEventKind.RAISED, 0, round=0, reason="RuntimeError: timed out"))
    assert w.take(_rank(RankEventKind.RAISED, 0, round=0, reason="declared lost after 5 s", lost=(3, 4, 5)))
    sent = len(hub.sent)
    assert w.take(HubEvent("n2", m.AgentLost(node="n2", silent_s=15.0), 0.0))  # its silence is found later
    assert len(hub.sent) == sent and [node for node, _ in excluded] == ["n2"] and w.spares_left == 2
